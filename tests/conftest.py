"""Shared fixtures: the law cache kept out of the user's home, one CLI helper, the test verifiers.

Every test runs with ``SPECAUDIT_CACHE`` pointing at one directory of this pytest session (the
mutant-law cache of `specaudit.analysis` and the cache of validated scenarios of
`specaudit.scenarios.cache` would otherwise write to ``~/.cache/specaudit``); tests that need a
private or disabled cache still set the variable themselves, after this fixture.

Every results document a test writes in this process (``document.dumps``, ``document.write``,
``document.roundtrip``: the CLI's ``--json`` and partial files, ``specaudit.run`` results read back)
is validated against the shipped JSON Schema (``specaudit.results.schema``); a document that does
not fit fails the test that wrote it, and the session's count is printed at the end
(``results documents validated against the results schema: N``, summed over xdist workers).
"""

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner, Result

from specaudit.cli import main
from specaudit.results import RunResult, document, schema

#: Where the session's count of validated results documents is kept (``config.stash``).
VALIDATED = pytest.StashKey[list[int]]()

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


@pytest.fixture(autouse=True)
def _results_documents_fit_the_schema(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Validate every results document written during the test against the results schema (fail the test otherwise)."""
    to_document = document.to_document
    misfits: list[str] = []
    count = request.config.stash.setdefault(VALIDATED, [0])

    def checked(result: RunResult) -> dict[str, Any]:
        doc = to_document(result)
        try:
            schema.validate(json.loads(json.dumps(doc, allow_nan=False)))
        except ValueError as exc:  # a document the writer cannot write (NaN, a lone surrogate) is not the schema's
            misfits.append(f"not JSON: {exc}")
        except jsonschema.ValidationError as exc:
            misfits.append(f"{exc.json_path}: {exc.message}")
        count[0] += 1
        return doc

    monkeypatch.setattr(document, "to_document", checked)
    yield
    if misfits:
        pytest.fail("results document(s) that do not fit specaudit.results.schema:\n" + "\n".join(misfits[:5]))


@pytest.fixture
def results_documents_validated(request: pytest.FixtureRequest) -> list[int]:
    """Return the session's running count of validated results documents (a one-item list), for tests of the hook."""
    return request.config.stash.setdefault(VALIDATED, [0])


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Hand a worker's count of validated documents to the xdist controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["results_documents_validated"] = session.config.stash.get(VALIDATED, [0])[0]


@pytest.hookimpl(optionalhook=True)  # an xdist hook: without xdist nobody calls it
def pytest_testnodedown(node: Any, error: Any) -> None:
    """Add an xdist worker's count of validated documents to the controller's."""
    node.config.stash.setdefault(VALIDATED, [0])[0] += node.workeroutput.get("results_documents_validated", 0)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Print how many results documents the session validated against the results schema."""
    if not hasattr(config, "workeroutput"):
        terminalreporter.write_line(f"results documents validated against the results schema: "
                                    f"{config.stash.get(VALIDATED, [0])[0]}")


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
