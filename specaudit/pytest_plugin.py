"""pytest plugin: ``specaudit.assert_lossless``, a ``specaudit`` fixture and a ``specaudit`` marker.

Registered through the ``pytest11`` entry point, so pytest imports this module in every
session of every project where specaudit is installed. Module-level code therefore stays
cheap: nothing here imports numpy, scipy or the engine until a test asks for it
(``benchmarks/plugin_import.py`` measures the cost).

Example::

    import specaudit

    def test_my_verifier_is_lossless():
        specaudit.assert_lossless("mypkg.spec:verify", scenarios=["markov-v4"], seed=0)

    @pytest.mark.specaudit(scenarios=["ragged-v4"], samples=50_000)
    def test_with_fixture(specaudit):
        specaudit.assert_lossless(my_verify)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from specaudit.results import RunResult

__all__ = ["SpecauditFixture", "assert_lossless", "failure_summary"]


def failure_summary(result: RunResult) -> str:
    """Return the assertion message of a failed run (:func:`specaudit.reports.assertion.failure_summary`)."""
    from specaudit.reports.assertion import (
        failure_summary as summary,  # deferred: the plugin loads in every pytest session
    )

    return summary(result)


def assert_lossless(
    target: str | Callable[..., Any],
    scenarios: Sequence[Any] | str | None = None,
    *,
    seed: int | None = 0,
    samples: int | None = None,
    alpha: float = 1e-3,
    efficiency: bool = False,
    method: str = "pearson",
    **run_options: Any,
) -> RunResult:
    """Audit ``target`` and raise AssertionError with a statistical summary unless it passes.

    Parameters
    ----------
    target : str or callable
        A verifier callable, or an import string (``pkg.mod:attr``, ``file.py:attr``).
    scenarios : names, paths or Scenario objects, optional
        Default: the shipped default suite.
    seed : int or None
        Run seed (default 0: a test is reproducible); None uses each scenario's own seed.
    samples : int, optional
        Sequences per scenario (overrides the scenarios; smaller is faster and less powerful).
    alpha : float
        Family-wise false-alarm rate over every check of the call (Holm).
    efficiency : bool
        Also fail on tokens/step and accept-length checks. Off by default: a lossless but
        inefficient verifier is still lossless.
    method : {"pearson", "g"}
        Goodness-of-fit statistic.
    **run_options
        Any other keyword of :func:`specaudit.run` (``timeout``, ``jobs``, ``adapter``, ``supervised``, ...).
        The verifier runs in a supervised child process unless ``supervised=False``: an ``os._exit``
        or a crash in it is a failed assertion, never the end of the pytest session. In a session
        that has initialised CUDA the child starts by forkserver and imports the verifier anew: pass
        a module-level function or an import path (a closure raises UsageError; ``supervised=False``).

    Returns
    -------
    RunResult
        The run, when every gating check passed.

    Raises
    ------
    AssertionError
        A check failed or a scenario errored (crash, contract breach); the message lists the
        failed checks with p-values, the most deviating sequences and the matching zoo mutant.
    """
    __tracebackhide__ = True
    from specaudit.engine.api import run
    from specaudit.errors import ExitCode, UsageError

    result = run(target, scenarios, seed=seed, alpha=alpha, samples=samples, method=method, gate_efficiency=efficiency,
                 **run_options)
    code = result.exit_code()
    if code == ExitCode.INTERRUPTED:
        raise KeyboardInterrupt
    if code == ExitCode.NO_SCENARIOS:
        raise UsageError(f"assert_lossless: no scenarios to run (scenarios = {scenarios!r})")
    if code != ExitCode.OK:
        raise AssertionError(failure_summary(result))
    return result


class SpecauditFixture:
    """What the ``specaudit`` fixture gives a test: the API with the marker's and options' defaults."""

    def __init__(self, defaults: dict[str, Any]):
        self.defaults = defaults

    def assert_lossless(self, target: str | Callable[..., Any], scenarios: Any = None, **overrides: Any) -> RunResult:
        """Call :func:`assert_lossless` with this test's defaults."""
        __tracebackhide__ = True
        kwargs = {**self.defaults, **overrides}
        if scenarios is not None:
            kwargs["scenarios"] = scenarios
        return assert_lossless(target, **kwargs)

    def run(self, target: str | Callable[..., Any], scenarios: Any = None, **overrides: Any) -> RunResult:
        """Run an audit without asserting (``specaudit.run``) with this test's defaults."""
        from specaudit.engine.api import run

        kwargs = {**self.defaults, **overrides}
        kwargs.pop("efficiency", None)
        if scenarios is not None:
            kwargs["scenarios"] = scenarios
        return run(target, **kwargs)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add --specaudit-samples and --specaudit-seed (defaults for the fixture)."""
    group = parser.getgroup("specaudit", "specaudit verifier audits")
    group.addoption("--specaudit-samples", type=int, default=None, metavar="N",
                    help="sequences per scenario for the specaudit fixture (overrides markers)")
    group.addoption("--specaudit-seed", type=int, default=None, metavar="SEED",
                    help="run seed for the specaudit fixture (overrides markers)")


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker."""
    config.addinivalue_line(
        "markers",
        "specaudit(scenarios=None, seed=0, samples=None, alpha=0.001, efficiency=False): "
        "defaults for the specaudit fixture's assert_lossless/run",
    )


@pytest.fixture
def specaudit(request: pytest.FixtureRequest) -> SpecauditFixture:
    """Return the specaudit API with defaults from ``@pytest.mark.specaudit`` and the command line."""
    defaults: dict[str, Any] = {}
    marker = request.node.get_closest_marker("specaudit")
    if marker is not None:
        if marker.args:
            defaults["scenarios"] = list(marker.args)
        defaults.update(marker.kwargs)
    for option, key in (("specaudit_samples", "samples"), ("specaudit_seed", "seed")):
        value = request.config.getoption(option)
        if value is not None:
            defaults[key] = value
    return SpecauditFixture(defaults)
