"""Command line: parse -> library call -> render -> exit code. No logic lives here."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from specaudit import __version__
from specaudit.errors import ExitCode, SpecauditError, exit_code_for


def _console(stderr: bool = False) -> Console:
    """Return a console honouring NO_COLOR and non-terminal output (no escape codes in files)."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else 160  # files and pipes: wide, plain, no escape codes
    return Console(stderr=stderr, no_color="NO_COLOR" in os.environ, highlight=False, width=width)


def _fail(exc: BaseException) -> None:
    """Print a SpecauditError (or an internal error) and exit with its code."""
    code = exit_code_for(exc)
    if isinstance(exc, SpecauditError):
        click.echo(f"specaudit: error: {exc}", err=True)
    else:
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
        click.echo(f"specaudit: internal error ({type(exc).__name__}); please report it", err=True)
    sys.exit(int(code))


class _Group(click.Group):
    """A click group whose usage errors exit 4 (pytest numbering), not click's 2."""

    def main(self, *args: Any, **kwargs: Any) -> Any:  # noqa: D102
        kwargs.setdefault("standalone_mode", True)
        try:
            return super().main(*args, **{**kwargs, "standalone_mode": False})
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("specaudit: interrupted", err=True)
            sys.exit(int(ExitCode.INTERRUPTED))
        except click.ClickException as exc:
            exc.show()
            sys.exit(int(ExitCode.USAGE_ERROR))
        except Exception as exc:  # noqa: BLE001 - one place maps every exception to an exit code
            _fail(exc)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specaudit")
def main() -> None:
    """Statistical conformance tests for speculative-decoding verifiers.

    Exit codes: 0 passed, 1 a check failed or errored, 2 interrupted, 3 internal error,
    4 usage error, 5 nothing to run.
    """


@main.command()
@click.argument("target")
@click.option("--scenario", "-s", "scenario_names", multiple=True, metavar="NAME|PATH",
              help="Shipped scenario name, tag:TAG, or a YAML file; repeatable. Default: the default suite.")
@click.option("--seed", type=int, default=None, help="Run seed (each scenario's seed is derived from it).")
@click.option("--alpha", type=float, default=1e-3, show_default=True, help="Family-wise error rate (Holm).")
@click.option("--samples", type=int, default=None, help="Sequences per scenario (overrides the scenarios).")
@click.option("--method", type=click.Choice(["pearson", "g"]), default="pearson", show_default=True,
              help="Goodness-of-fit statistic.")
@click.option("--allow-inefficient", is_flag=True,
              help="Report tokens/step and accept-length failures without failing the run.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write results as JSON (updated after every scenario).")
@click.option("-q", "--quiet", count=True, help="Less output.")
@click.option("-v", "--verbose", count=True, help="More output.")
def run(
    target: str,
    scenario_names: tuple[str, ...],
    seed: int | None,
    alpha: float,
    samples: int | None,
    method: str,
    allow_inefficient: bool,
    json_path: str | None,
    quiet: int,
    verbose: int,
) -> None:
    """Audit the verifier TARGET (pkg.mod:attr, path/file.py:attr, or an alias)."""
    from specaudit import runner
    from specaudit.reports import json as json_report
    from specaudit.reports import terminal

    done: list = []

    def save_partial(result: Any) -> None:
        done.append(result)
        if json_path:
            partial = runner.RunResult(target, alpha, seed, __version__, tuple(done))
            json_report.write(partial, json_path, partial=True)

    result = runner.run(
        target,
        scenario_names or None,
        seed=seed,
        alpha=alpha,
        samples=samples,
        method=method,
        gate_efficiency=not allow_inefficient,
        on_scenario=save_partial,
    )
    if json_path:
        json_report.write(result, json_path, partial=result.interrupted)
    terminal.render(result, _console(), verbose - quiet)
    sys.exit(int(result.exit_code()))


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
def validate(paths: tuple[str, ...]) -> None:
    """Validate scenario files; print every problem as file:line: key: message."""
    from specaudit.errors import ScenarioError
    from specaudit.scenarios import load_scenario

    bad = 0
    for path in paths:
        try:
            loaded = load_scenario(path)
        except ScenarioError as exc:
            bad += 1
            click.echo(str(exc), err=True)
        else:
            click.echo(f"{path}: ok ({loaded.name})")
    sys.exit(int(ExitCode.USAGE_ERROR if bad else ExitCode.OK))


@main.command("list")
def list_scenarios() -> None:
    """List the shipped scenarios."""
    from rich.table import Table

    from specaudit.scenarios import shipped

    table = Table("name", "tags", "V", "K", "drafts", "L", "samples", "description")
    for s in shipped():
        sp = s.spec
        table.add_row(sp.name, ",".join(sp.tags), str(sp.vocab), str(sp.k), str(sp.drafts if sp.drafts is not None else sp.k),
                      str(sp.length), f"{sp.samples:,}", " ".join(sp.description.split())[:80])
    _console().print(table)


@main.command()
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write to a file.")
def schema(output: str | None) -> None:
    """Print the JSON Schema of scenario files (for editors)."""
    from specaudit.scenarios import json_schema

    text = json.dumps(json_schema(), indent=2)
    if output:
        Path(output).write_text(text + "\n")
    else:
        click.echo(text)


if __name__ == "__main__":  # pragma: no cover
    main()
