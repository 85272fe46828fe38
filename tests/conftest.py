"""Shared fixtures: the law cache kept out of the user's home, one CLI helper, the test verifiers.

Every test runs with ``SPECAUDIT_CACHE`` pointing at one directory of this pytest session (the
mutant-law cache of `specaudit.analysis` and the cache of validated scenarios of
`specaudit.scenarios.cache` would otherwise write to ``~/.cache/specaudit``); tests that need a
private or disabled cache still set the variable themselves, after this fixture.
"""

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specaudit.cli import main

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def law_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return the session's mutant-law cache directory (shared by every test, so laws are computed once)."""
    return tmp_path_factory.getbasetemp() / "law-cache"


@pytest.fixture(autouse=True)
def _isolated_law_cache(law_cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Point ``SPECAUDIT_CACHE`` at the session's cache directory for every test.

    ``COLUMNS`` and ``LINES`` are cleared too: pytest-xdist's workers set ``COLUMNS=80``, which
    the CLI honours; a test that wants a width passes it (``cli(..., env={"COLUMNS": "80"})``).
    """
    monkeypatch.setenv("SPECAUDIT_CACHE", str(law_cache_dir))
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    yield


@pytest.fixture
def cli() -> Callable[..., Result]:
    """Return ``invoke(*args, env=None, input=None, catch_exceptions=False)``: run the CLI in-process.

    Arguments are turned into strings (paths welcome). Exceptions propagate by default, as the
    test modules' own helpers did (an internal error shows its traceback, not exit code 1); the
    CLI's own errors still end in their exit codes, since the CLI catches them itself. Pass
    ``catch_exceptions=True`` to assert on ``result.exception``.
    """

    def invoke(*args: object, env: dict[str, str] | None = None, input: str | None = None,
               catch_exceptions: bool = False) -> Result:
        return CliRunner().invoke(main, [str(a) for a in args], input=input, env=env,
                                  catch_exceptions=catch_exceptions)

    return invoke


@pytest.fixture
def verifiers_dir() -> Path:
    """Return the folder of the test verifiers (tests/verifiers)."""
    return HERE / "verifiers"


@pytest.fixture(params=["fork", "forkserver"])
def start_method(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test twice: the supervised child started by fork, then by forkserver (``$SPECAUDIT_START_METHOD``).

    Its children (the CLI run in a subprocess) inherit the variable, so every supervisor guarantee
    a test asserts is asserted under both start methods.
    """
    monkeypatch.setenv("SPECAUDIT_START_METHOD", request.param)
    return str(request.param)
