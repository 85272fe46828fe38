"""Command line: parse -> library call -> render -> exit code. No logic lives here."""

from __future__ import annotations

import functools
import gc
import json
import math
import os
import secrets
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from specaudit import __version__
from specaudit.errors import ExitCode, SpecauditError, UsageError, exit_code_for

if TYPE_CHECKING:  # the engine loads only when a command needs it (`specaudit --help` stays quick)
    from rich.console import Console

    from specaudit.engine.settings import RunSettings


def _console(stderr: bool = False) -> Console:
    """Return a console honouring NO_COLOR and non-terminal output (no escape codes in files).

    Markup and emoji codes are off: every string printed is text (a verifier's message ``[/b]``, a
    scenario ``list[int]``, a path ``a:smile:b.json``); reporters style with ``rich.text.Text``.
    """
    stream = sys.stderr if stderr else sys.stdout
    # files and pipes: wide, plain, no escape codes; COLUMNS, when set, wins (rich reads it for width=None)
    tty = stream is not None and stream.isatty()  # None: the stream was closed when Python started (``2>&-``)
    width = None if tty or os.environ.get("COLUMNS", "").isdigit() else 160
    from rich.console import Console  # ~50 ms: imported by what prints (a run: once its child is forked)

    return Console(stderr=stderr, no_color="NO_COLOR" in os.environ, highlight=False, markup=False, emoji=False, width=width)


def _fail(exc: BaseException) -> None:
    """Print a SpecauditError (or an internal error) and exit with its code."""
    from specaudit.reports.format import visible  # a message may quote a path or a key with an escape sequence

    code = exit_code_for(exc)
    if isinstance(exc, SpecauditError):
        click.echo(f"specaudit: error: {visible(exc)}", err=True)
    else:
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
        click.echo(f"specaudit: internal error ({type(exc).__name__}); please report it", err=True)
    sys.exit(int(code))


class _Group(click.Group):
    """A click group whose usage errors exit 4 (pytest numbering), not click's 2."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        try:  # non-standalone: click returns the code of ctx.exit() and raises the rest to us
            return super().main(*args, **{**kwargs, "standalone_mode": False})
        except click.Abort:
            click.echo("specaudit: interrupted", err=True)
            sys.exit(int(ExitCode.INTERRUPTED))
        except click.ClickException as exc:
            exc.show()
            sys.exit(int(ExitCode.USAGE_ERROR))
        except Exception as exc:  # noqa: BLE001 - one place maps every exception to an exit code
            _fail(exc)


def script() -> None:
    """Run `main` as the ``specaudit`` console script: text UTF-8 cannot hold is escaped, the last objects left.

    A lone surrogate (a verifier's message, a file name that is not UTF-8, read as ``\\udcff``)
    would end a print to stdout with UnicodeEncodeError; it is printed as its escape instead.
    At exit CPython collects every object still alive; after a run that took some 0.25 s, finding no
    garbage (benchmarks/startup.py). Frozen (`gc.freeze`), those objects are simply dropped with the
    process, while atexit handlers, flushing and the exit code go as in any exit. Only the console
    script does this: `main` called in a process that goes on (tests, CliRunner) leaves its streams,
    the collector, the signal handlers and the streams as they are. Here SIGTERM, like SIGINT,
    interrupts any command (exit 2); once `main` has decided the exit code both are ignored; a full,
    closed or broken stdout or stderr loses its text only (`specaudit.reports.streams`).
    """
    import signal

    from specaudit.engine.stops import STOPS, stop
    from specaudit.reports.streams import guard_streams

    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # a TextIOWrapper's (None, or replaced, in embedders)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    out, err = guard_streams()  # a full, closed or broken stream loses its text, never the verdict or the exit code
    for signum in STOPS:  # SIGTERM too is an interrupt (exit 2), never a death by signal, in every command
        signal.signal(signum, stop)
    try:
        main()
    finally:
        for signum in STOPS:  # the exit code is decided: a stop now must not change it
            signal.signal(signum, signal.SIG_IGN)
        out.flush()
        if out.lost is not None:
            err.write(f"specaudit: note: stdout could not be written ({out.lost}): the report printed there is lost "
                      "(the exit code and the report files are not)\n")
            err.flush()
        gc.freeze()


#: The most sequences a run may ask per scenario (the scenario schema's bound on ``samples``).
MAX_SAMPLES = 10**9
#: Seeds are numpy SeedSequence entropy: non-negative, at most 2**64 - 1 here.
MAX_SEED = 2**64 - 1


class _Count(click.ParamType):
    """A whole number in [lo, hi], written ``200000``, ``200_000``, ``200,000`` or ``2e5``."""

    name = "integer"

    def __init__(self, lo: int, hi: int, example: str):
        self.lo, self.hi, self.example = lo, hi, example

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip().replace("_", "").replace(",", "")
            try:
                number = int(text)
            except ValueError:
                try:
                    as_float = float(text)
                except ValueError:
                    as_float = math.nan
                if not (math.isfinite(as_float) and as_float == int(as_float)):
                    self.fail(f"{value!r} is not a whole number; allowed: {self._range()}, e.g. {self.example}", param, ctx)
                number = int(as_float)
        if not self.lo <= number <= self.hi:
            self.fail(f"{value}; allowed: {self._range()}, e.g. {self.example}", param, ctx)
        return number

    def _range(self) -> str:
        hi = f"{self.hi:,}" + (f" ({self.hi:.0e})".replace("e+0", "e").replace("e+", "e") if self.hi >= 10**6 and self.hi < 2**32 else "")
        return f"an integer {self.lo:,} .. {hi}"


class _Real(click.ParamType):
    """A finite number in a range (``lo < x`` or ``lo <= x``, ``x < hi`` or ``x <= hi``)."""

    name = "number"

    def __init__(self, lo: float, hi: float, lo_open: bool, hi_open: bool, example: str):
        self.lo, self.hi, self.lo_open, self.hi_open, self.example = lo, hi, lo_open, hi_open, example

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        low_ok = number > self.lo if self.lo_open else number >= self.lo
        high_ok = number < self.hi if self.hi_open else number <= self.hi
        if not (math.isfinite(number) and low_ok and high_ok):
            lo, hi = (f"{x:,.0f}" if x == int(x) else f"{x:g}" for x in (self.lo, self.hi))
            allowed = f"{lo} {'<' if self.lo_open else '<='} x {'<' if self.hi_open else '<='} {hi}"
            self.fail(f"{value}; allowed: a number {allowed}, e.g. {self.example}", param, ctx)
        return number


_SAMPLES = _Count(1, MAX_SAMPLES, "200000 or 2e5")
_SEED = _Count(0, MAX_SEED, "0 or 12345")
_LEVEL = _Real(0.0, 1.0, True, True, "1e-3")


# Options shared by the commands that print or write reports (run, merge, report).
_html = click.option("--html", "html_path", is_flag=False, flag_value="reports/", default=None, metavar="PATH",
                     help="Write a self-contained HTML report to PATH (a file, or a folder; bare --html: reports/).")
_junit = click.option("--junit", "junit_path", type=click.Path(dir_okay=False), default=None, metavar="PATH",
                      help="Write JUnit XML: a testcase per scenario x check, statistics as properties.")
_baseline = click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False), default=None,
                         metavar="OLD.json", help="Compare tokens/step and verdicts with an earlier run's JSON.")
_fail_on = click.option("--fail-on", "fail_on", multiple=True, metavar="METRIC:THRESHOLD",
                        help="With --baseline: exit 1 when a metric regresses past the threshold, "
                        "e.g. tokens-per-step:2%. Repeatable.")
_quiet = click.option("-q", "--quiet", count=True, help="Less output.")
_verbose = click.option("-v", "--verbose", count=True, help="More output.")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specaudit")
def main() -> None:
    """Statistical conformance tests for speculative-decoding verifiers.

    Exit codes: 0 passed, 1 a check failed or errored, 2 interrupted (SIGINT, SIGTERM), 3 internal
    error, 4 usage error, 5 nothing to run. `run` supervises the verifier in a child process: an
    exit, a signal or a hang there is an ERROR of that scenario and the run goes on.
    """


@main.command()
@click.argument("target")
@click.option("--scenario", "-s", "scenario_names", multiple=True, metavar="NAME|PATH",
              help="Shipped scenario name, tag:TAG, or a YAML file; repeatable. Default: the default suite.")
@click.option("--seed", type=_SEED, default=None, help="Run seed, 0 .. 2**64 - 1 (each scenario's seed is derived from it).")
@click.option("--alpha", type=float, default=1e-3, show_default=True, help="Family-wise error rate (Holm), 0 < alpha < 1.")
@click.option("--samples", type=_SAMPLES, default=None,
              help="Sequences per scenario, 1 .. 1e9, e.g. 2e5 (overrides the scenarios).")
@click.option("--method", type=click.Choice(["pearson", "g"]), default="pearson", show_default=True,
              help="Goodness-of-fit statistic.")
@click.option("--contract", type=click.Choice(["probs", "logits", "draft-vocab"]), default="probs", show_default=True,
              help="How TARGET is called: verify(draft, q, p, num_draft, rng) on processed probabilities, or "
                   "verify(draft, draft_logits, target_logits, num_draft, params, rng) on raw logits, or "
                   "verify(draft, q_draft, p, num_draft, d2t, rng) with q in the drafter's vocabulary (draft-vocab).")
@click.option("--convention", default=None, metavar="NAME",
              help="The engine whose non-speculative sampler is the reference (order of top-k, top-p, min-p): hf, vllm "
                   "or sglang. Overrides the scenarios' convention (default: theirs, else hf).")
@click.option("--allow-inefficient", is_flag=True,
              help="Report tokens/step and accept-length failures without failing the run.")
@click.option("--timeout", type=_Real(0.0, 7 * 86400.0, False, False, "60 or 0"), default=60.0, show_default=True, metavar="S",
              help="Stop a verifier call after S seconds; its scenario is an ERROR and the run goes on (0: no limit). "
                   "A call that ignores the stop is killed with its process after S + 2 s.")
@click.option("--batch", type=_Count(1, 1 << 20, "256"), default=None, metavar="N",
              help="Rows per verifier call, 1 .. 1,048,576 (overrides the scenarios' batch, default 4096): smaller calls "
                   "of a slow verifier (an interpreted kernel) stay inside --timeout.")
@click.option("--import-timeout", type=_Real(0.0, 7 * 86400.0, False, False, "300 or 0"), default=300.0,
              show_default=True, metavar="S",
              help="Stop importing TARGET after S seconds (a module that hangs at import): a usage error (0: no limit).")
@click.option("--jobs", "-j", type=_Count(1, 4096, "4"), default=1, show_default=True, metavar="N",
              help="Run the scenarios' blocks of sequences in N processes (results identical to --jobs 1).")
@click.option("--early-stop", is_flag=True,
              help="Look after 1, 2, 4, ... blocks of 15,000 sequences and stop a scenario once a check has failed "
                   "for sure (alpha spending; family-wise alpha holds; the last look keeps alpha/2).")
@click.option("--certify-tv", "certify_tv", type=_Real(0.0, 1.0, True, True, "0.005"), default=None, metavar="EPS",
              help="Keep sampling each scenario (looks as with --early-stop) until its upper confidence bound on the "
                   "total-variation distance to the target's law is <= EPS (exit 0), a check fails (exit 1), or the "
                   "sample cap is hit (exit 6). Cap: --samples, else 4x what a lossless verifier should need.")
@click.option("--shard", default=None, metavar="I/N",
              help="Run blocks b = I mod N of every scenario and write additive counts for `specaudit merge`. "
                   "Verdicts are provisional: exits 0 unless a scenario errored; the merge is the gate.")
@click.option("--backend", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Run blocks in local processes, or as Ray tasks (pip install -e '.[ray]' in specaudit's checkout).")
@click.option("--ray-address", default=None, metavar="ADDR",
              help="With --backend ray: the cluster to join (ray.init(address=ADDR)); default a local instance.")
@click.option("--max-memory", "max_memory", type=_Real(0.0, float(1 << 20), True, False, "2 or 0.5"), default=2.0, show_default=True, metavar="GIB",
              help="Working memory the simulator's batch may use in host RAM, in GiB (large vocabularies run in chunks).")
@click.option("--max-device-memory", "max_device_memory", type=_Real(0.0, float(1 << 20), True, False, "40 or 0.5"),
              default=None, metavar="GIB",
              help="With --device cuda: memory the batch may use on the device, in GiB (at most what is free there). "
                   "Default: 80% of the device's free memory.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write results as JSON (updated after every scenario).")
@_html
@_junit
@click.option("--repro", "repro_dir", type=click.Path(), default=None, metavar="DIR",
              help="Write each failed exact finding as a minimal pytest file into DIR once the run is settled "
                   "(as `specaudit repro` does; the JSON lists them).")
@_baseline
@_fail_on
@click.option("--adapter", default=None, metavar="NAME",
              help="Drive TARGET in its own layout: torch, hf, vllm, flashinfer, an entry point, or pkg.mod:attr "
                   "(`specaudit adapters` lists them). Overrides a scenario's adapter.")
@click.option("--adapter-arg", "adapter_args", multiple=True, metavar="KEY=VALUE",
              help="An adapter option, e.g. --adapter-arg assistant_ensemble_weight=0.5. Repeatable.")
@click.option("--device", default=None, metavar="cpu|cuda",
              help="Torch device for torch-based adapters; a torch verifier (--adapter torch) is then simulated there "
                   "(p, q and drafts made on the device, no host copies).")
@click.option("--dtype", default=None, type=click.Choice(["float64", "float32", "float16", "bfloat16"]),
              help="Floating dtype of q and p for torch-based adapters.")
@click.option("--suspect-level", type=float, default=None, metavar="P",
              help="Holm p-values in (alpha, P] are SUSPECT and their scenario is re-run on a fresh seed with 4x "
                   "the samples. Default 100 x alpha (at most 0.5); P <= alpha: no re-runs.")
@click.option("--no-power", is_flag=True, help="Skip the per-scenario power figures (detectable TV, power per mutant).")
@_quiet
@_verbose
def run(
    target: str,
    scenario_names: tuple[str, ...],
    json_path: str | None,
    html_path: str | None,
    junit_path: str | None,
    repro_dir: str | None,
    baseline_path: str | None,
    fail_on: tuple[str, ...],
    quiet: int,
    verbose: int,
    **options: Any,
) -> None:
    """Audit the verifier TARGET (pkg.mod:attr, path/file.py:attr, or an alias)."""
    if target == "hf-generate" or target.startswith("hf-generate@"):  # the whole loop, not one verifier call
        if repro_dir:  # refused, never ignored: repro files are written for verifier calls, and this loop makes none
            raise click.UsageError(f"--repro: not available with {target} (repro files replay one verifier call; "
                                   "the end-to-end loop audit has none)")
        sys.exit(int(_run_hf_generate(target, scenario_names, json_path, html_path, junit_path, baseline_path, fail_on,
                                      verbose - quiet, options)))
    from specaudit.engine.stops import stop_signals

    gate = _baseline_gate(baseline_path, fail_on)  # bad rules or files fail before the run
    # absolute (a verifier's os.chdir cannot move them) and writable, or exit 4 before any simulation
    json_path, html_path, junit_path = _outputs(json_path, html_path, junit_path)
    if html_path and html_path.endswith(os.sep):  # the file the folder will hold, named for TARGET
        from specaudit.reports import html

        _writable(str(html.output_path(html_path, target)), "--html")
    repro_dir = _writable_folder(repro_dir, "--repro")
    if options.get("samples") is None:  # an engine's Triton kernels in the interpreter: an N it can afford, said
        from specaudit.engines import interpreted_samples

        options["samples"] = interpreted_samples(target)
        if options["samples"] is not None:
            click.echo(f"specaudit: {target}: its Triton kernels run in Triton's interpreter (no CUDA device): "
                       f"--samples {options['samples']} by default (the power table gives the TV detectable there)",
                       err=True)
    done: list = []
    settings = None
    # from here a stop at any moment (the engine's imports, a child just forked, the verifier signalling its
    # parent at its first call) is an interrupted run: exit 2, its JSON written (never an earlier run's left)
    with stop_signals():
        try:
            from specaudit.engine.supervisor import execute_supervised
            from specaudit.reports import json as json_report
            from specaudit.reports.progress import ProgressReporter
            from specaudit.results import RunResult

            settings = _run_settings(**options)
            _announce_fallback()

            def save_partial(result: Any) -> None:
                done.append(result)
                if json_path:
                    partial = RunResult(target, settings.alpha, settings.seed, __version__, tuple(done), partial=True)
                    json_report.write(partial, json_path)

            with ProgressReporter(_run_console, verbose - quiet) as progress:
                result = execute_supervised(target, scenario_names or None, settings, progress=progress,
                                            on_scenario=save_partial)
        except KeyboardInterrupt:  # outside the supervisor's measuring (which keeps what it finished itself)
            from specaudit.results import RunResult

            result = RunResult(target, options["alpha"], options["seed"], __version__, tuple(done), interrupted=True)
        if not result.scenarios and not result.interrupted:
            asked = " ".join(f"-s {name}" for name in scenario_names) or "the default suite"
            click.echo(f"specaudit: nothing to run: no scenario matched {asked}; `specaudit list` shows names and tags", err=True)
        repro_lines: list[str] = []
        if repro_dir is not None and result.scenarios and not result.interrupted:
            result, repro_lines = _with_repros(result, repro_dir)
        code = _publish(result, json_path, html_path, junit_path, gate, verbose - quiet)
        if verbose - quiet >= 0:
            for line in repro_lines:
                click.echo(line)
    if settings is not None and settings.shard is not None:
        code = _shard_code(result, code, settings.shard)
    sys.exit(int(code))


#: `run` options that mean nothing to the end-to-end loop audit (transformers' own loop draws every token):
#: given, exit 4 (refused, never ignored). Option key -> (flag, default).
_HF_GENERATE_REFUSED = {
    "contract": ("--contract", "probs"), "convention": ("--convention", None), "batch": ("--batch", None),
    "early_stop": ("--early-stop", False), "certify_tv": ("--certify-tv", None), "shard": ("--shard", None),
    "backend": ("--backend", "local"), "ray_address": ("--ray-address", None), "adapter": ("--adapter", None),
    "adapter_args": ("--adapter-arg", ()), "device": ("--device", None), "dtype": ("--dtype", None),
    "timeout": ("--timeout", 60.0), "import_timeout": ("--import-timeout", 300.0), "max_memory": ("--max-memory", 2.0),
    "max_device_memory": ("--max-device-memory", None),
}


def _run_hf_generate(target: str, scenario_names: tuple[str, ...], json_path: str | None, html_path: str | None,
                     junit_path: str | None, baseline_path: str | None, fail_on: tuple[str, ...], verbosity: int,
                     options: dict[str, Any]) -> ExitCode:
    """Audit the installed transformers' assisted generation, one scenario result per generate configuration.

    The results go the way of every run's: Holm over the run, suspects re-run on a fresh seed, the
    JSON (after every configuration), HTML and JUnit reports, the --baseline gate, the exit code.
    """
    import dataclasses
    import datetime as dt
    import time

    from specaudit.engine.run import apply_holm, environment, rerun_suspects
    from specaudit.engine.settings import RunSettings
    from specaudit.engine.stops import stop_signals
    from specaudit.loops import hf
    from specaudit.reports import json as json_report
    from specaudit.results import RunResult

    given = [flag for key, (flag, default) in _HF_GENERATE_REFUSED.items() if options.get(key, default) != default]
    if given:
        raise click.UsageError(f"{', '.join(given)}: not available with {target} (it runs transformers' own generate "
                               "loop on tiny models: no verifier is called, batched, sharded or adapted)")
    configs = hf.configurations(scenario_names)
    version = hf.check_version(target.partition("@")[2] or None)
    gate = _baseline_gate(baseline_path, fail_on)
    json_path, html_path, junit_path = _outputs(json_path, html_path, junit_path)
    if html_path and html_path.endswith(os.sep):
        from specaudit.reports import html

        _writable(str(html.output_path(html_path, target)), "--html")
    seed = options.get("seed")
    seed = secrets.randbits(63) if seed is None else seed
    settings = RunSettings(alpha=options["alpha"], seed=seed, samples=options.get("samples") or hf.DEFAULT_SAMPLES,
                           method=options["method"], jobs=options.get("jobs") or 1,
                           suspect_level=options.get("suspect_level"))
    samples, jobs, alpha, suspect = int(settings.samples or hf.DEFAULT_SAMPLES), settings.jobs, settings.alpha, \
        settings.holm_suspect
    env = {**environment(), "engine": "transformers", "engine_version": version,
           "engine_source": "installed; generate(assistant_model=...) end to end"}
    record = {"samples": samples, "method": settings.method, "jobs": jobs, "engine": f"transformers {version}"}
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()

    def run_result(scenarios: tuple, **flags: Any) -> RunResult:
        return RunResult(target, alpha, seed, __version__, scenarios, started=started,
                         seconds=time.perf_counter() - t0, settings=record, environment=env, **flags)

    def remeasure(i: int, fresh: int, n: int) -> Any:
        return hf.measure(configs[i], n, fresh, jobs, method=settings.method)

    done: list = []
    with stop_signals():
        try:
            for i, config in enumerate(configs):
                done.append(hf.measure(config, samples, hf.config_seed(seed, i), jobs, method=settings.method))
                if json_path:
                    json_report.write(run_result(tuple(done), partial=True), json_path)
            checked = apply_holm(done, alpha, suspect)
            if suspect is not None:
                checked = rerun_suspects(checked, remeasure, alpha, suspect)
            result = run_result(checked)
        except KeyboardInterrupt:
            click.echo(f"{target}: interrupted", err=True)
            result = run_result(apply_holm(done, alpha, suspect), interrupted=True)
        result = dataclasses.replace(result, seconds=time.perf_counter() - t0)
        return _publish(result, json_path, html_path, junit_path, gate, verbosity)


def _run_console() -> Console:
    """Return the progress console of a run, loading the terminal report with it.

    A supervised run opens it once its child is forked: rich's tables (some 30 ms) load while the
    child measures, not after it (benchmarks/startup.py).
    """
    from specaudit.reports import terminal  # noqa: F401 - loaded here for `_show`

    return _console(stderr=True)


def _announce_fallback() -> None:
    """Say once, on stderr, when the simulator runs its numpy code instead of the C kernels (same results, slower)."""
    from specaudit.simulate import kernels

    if kernels.load() is not None:
        return
    why = (f"{kernels.SWITCH} is set" if os.environ.get(kernels.SWITCH, "") not in ("", "0")
           else "the C extension is not built (no C compiler at install time)")
    click.echo(f"specaudit: note: {why}: the numpy simulator runs instead (same results, slower); "
               "`pip install -e .` with a C compiler builds it", err=True)


def _shard_code(result: Any, code: ExitCode, shard: tuple[int, int]) -> ExitCode:
    """Return a shard job's exit code: its verdicts are provisional, so only an error or an interrupt fails it.

    A sharded CI gates once, at `specaudit merge` (Holm over the whole run, suspects re-run): n jobs
    each gating at the full alpha would multiply the false alarms.
    """
    from specaudit.results import Status

    errored = [s.name for s in result.scenarios if s.status is Status.ERROR]
    if code in (ExitCode.INTERRUPTED, ExitCode.NO_SCENARIOS) or errored:
        return code if not errored else ExitCode.CHECKS_FAILED
    click.echo(f"specaudit: shard {shard[0]}/{shard[1]}: verdicts above are provisional (this shard's blocks "
               f"only); `specaudit merge` of every shard is the gate (exit 0 here: no scenario errored)", err=True)
    return ExitCode.OK


@main.command()
@click.argument("shards", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the merged results as JSON.")
@click.option("--rerun", "rerun_target", default=None, metavar="TARGET",
              help="The verifier of the shards: re-run every SUSPECT scenario on a fresh seed with 4x the samples, "
                   "as `run` would. Without it a SUSPECT scenario fails the merge (exit 1).")
@_html
@_junit
@_quiet
@_verbose
def merge(shards: tuple[str, ...], json_path: str | None, rerun_target: str | None, html_path: str | None,
          junit_path: str | None, quiet: int, verbose: int) -> None:
    """Merge the JSON of `run --shard i/n` runs (every i) and check the summed counts: the gate of a sharded run.

    Counts, p-values and verdicts equal those of the unsharded run; exits like `run`, except that a
    SUSPECT scenario exits 1 ("suspect: re-run with more samples") unless --rerun TARGET settled it.
    """
    from specaudit.contract.targets import check_target
    from specaudit.engine.merge import merge_documents, unsettled_suspects
    from specaudit.reports.progress import ProgressReporter
    from specaudit.results import document

    json_path, html_path, junit_path = _outputs(json_path, html_path, junit_path)
    if rerun_target is not None:  # a typo must not wait for the first SUSPECT to show
        check_target(rerun_target)
    docs = [document.read_document(p) for p in shards]
    with ProgressReporter(_console(stderr=True), verbose - quiet) as progress:  # says what a suspect's re-run costs
        result = merge_documents(docs, list(shards), rerun=rerun_target, announce=progress.rerun)
    code = _publish(result, json_path, html_path, junit_path, None, verbose - quiet)
    suspects = unsettled_suspects(result)
    if code == ExitCode.OK and suspects:
        click.echo(f"specaudit: suspect: re-run with more samples ({', '.join(suspects)}), or merge with "
                   "--rerun TARGET to re-run them as `specaudit run` would", err=True)
        code = ExitCode.CHECKS_FAILED
    sys.exit(int(code))


def _outputs(json_path: str | None, html_path: str | None, junit_path: str | None) -> tuple[str | None, ...]:
    """Return the report paths made absolute, after checking that each can be written (UsageError if not)."""
    return (_writable(json_path, "--json"), _writable(html_path, "--html", folder_ok=True),
            _writable(junit_path, "--junit"))


def _writable_folder(path: str | None, option: str) -> str | None:
    """Return the folder ``path`` made absolute; raise UsageError unless files can be written into it (made if absent)."""
    if path is None:
        return None
    from specaudit.results.document import file_kind

    target = Path(os.path.abspath(os.path.expanduser(path)))
    if target.exists() and not target.is_dir():
        kind = "a file" if target.is_file() else file_kind(target.stat().st_mode)
        raise UsageError(f"{option} {path}: not a folder ({kind}); give a folder path")
    if not target.exists():  # the writer makes it: probe that a folder can be made in its nearest existing parent
        existing = target.parent
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise UsageError(f"{option} {path}: {existing} is not a folder")
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".specaudit-probe-", dir=existing))
        except OSError as exc:
            raise UsageError(f"{option} {path}: cannot create a folder in {existing} ({exc.strerror})") from None
    return _writable(str(target) + os.sep, option, folder_ok=True)


def _with_repros(result: Any, out_dir: str) -> tuple[Any, list[str]]:
    """Write the repro files of a settled run (``--repro``); return the run with each scenario's ``repro`` list in
    its info, and the lines to print."""
    import dataclasses

    from specaudit.reports import format as fmt
    from specaudit.reports.repro import for_run
    from specaudit.results import document

    per, lines = for_run(document.to_document(result), out_dir)
    scenarios = tuple(dataclasses.replace(s, info={**(s.info or {}), "repro": per[s.name]}) if s.name in per else s
                      for s in result.scenarios)
    return dataclasses.replace(result, scenarios=scenarios), [fmt.visible(line) for line in lines]


def _writable(path: str | None, option: str, folder_ok: bool = False) -> str | None:
    """Return ``path`` made absolute; raise UsageError unless a report can be written there.

    The probe is what the writer does (:func:`specaudit.results.document.atomic_write`): a
    temporary file created and removed in the folder, or, for a folder still to be made, the
    nearest existing one must be a writable folder. Nothing is left behind.
    """
    if path is None:
        return None
    from specaudit.results.document import file_kind, is_devnull

    folder = folder_ok and (path.endswith(("/", os.sep)) or Path(path).is_dir())
    absolute = os.path.abspath(os.path.expanduser(path)) + (os.sep if folder else "")
    target = Path(absolute)
    if not folder and target.is_dir():
        raise UsageError(f"{option} {path}: is a folder; give a file name")
    if not folder and target.exists() and not target.is_file() and not is_devnull(target):
        # a FIFO blocked the write (deaf to SIGTERM), /dev/full failed it after the whole run
        raise UsageError(f"{option} {path}: not a regular file ({file_kind(target.stat().st_mode)}); give a file "
                         "path, or /dev/null to discard the report")
    where = target if folder else target.parent
    existing = where
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{option} {path}: {existing} is not a folder")
    if existing == where:
        try:  # the writer's own move: a temporary file in that folder
            fd, probe = tempfile.mkstemp(prefix=".specaudit-probe-", dir=where)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise UsageError(f"{option} {path}: cannot write in {where} ({exc.strerror})") from None
    elif not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: cannot create {where}: {existing} is not writable")
    return absolute


def _run_settings(
    seed: int | None,
    alpha: float,
    samples: int | None,
    method: str,
    allow_inefficient: bool,
    timeout: float,
    batch: int | None,
    import_timeout: float,
    contract: str,
    convention: str | None,
    jobs: int,
    early_stop: bool,
    certify_tv: float | None,
    shard: str | None,
    backend: str,
    ray_address: str | None,
    max_memory: float,
    max_device_memory: float | None,
    adapter: str | None,
    adapter_args: tuple[str, ...],
    device: str | None,
    dtype: str | None,
    suspect_level: float | None,
    no_power: bool,
) -> RunSettings:
    """Return the run settings of `run`'s options (validated by RunSettings itself)."""
    from specaudit.engine.settings import RunSettings, parse_shard

    adapter_options = _adapter_options(adapter_args, device, dtype)
    return RunSettings(
        alpha=alpha, seed=seed, samples=samples, batch=batch, method=method, gate_efficiency=not allow_inefficient,
        contract=contract, convention=convention, timeout=timeout or None, import_timeout=import_timeout or None, max_memory=_gib(max_memory),
        max_device_memory=None if max_device_memory is None else _gib(max_device_memory, "--max-device-memory"), jobs=jobs, backend=backend,
        address=ray_address, suspect_level=suspect_level, power=not no_power, early_stop=early_stop,
        certify_tv=certify_tv, shard=parse_shard(shard), adapter=adapter, adapter_options=adapter_options,
        device=device,
    )


def _adapter_options(pairs: tuple[str, ...], device: str | None, dtype: str | None) -> dict[str, str]:
    """Return the adapter options of ``--adapter-arg``; ``--device`` and ``--dtype`` are two of them."""
    from specaudit.adapters import parse_args

    options = parse_args(pairs)
    for key, value in (("device", device), ("dtype", dtype)):
        if value is None:
            continue
        same = options.get(key, value).replace("cuda:0", "cuda") == value.replace("cuda:0", "cuda")  # cuda is cuda:0
        if not same:  # two answers to one question: say which, never pick one
            raise UsageError(f"--{key} {value} and --adapter-arg {key}={options[key]} disagree; give the {key} once "
                             f"(--{key} is the adapter's {key} option)")
        options[key] = value
    return options


def _gib(value: float, option: str = "--max-memory") -> int:
    """Return ``value`` GiB in bytes; reject sizes that cannot hold one batch row."""
    if not value > 0:
        raise click.BadParameter(f"{value}; allowed: a size in GiB > 0, e.g. 2 or 0.5", param_hint=option)
    return int(value * (1 << 30))


def _baseline_gate(baseline_path: str | None, fail_on: tuple[str, ...]) -> tuple[str, Any, list] | None:
    """Return (path, baseline RunResult, rules), or None without --baseline."""
    from specaudit.errors import UsageError

    if fail_on and not baseline_path:
        raise UsageError("--fail-on needs --baseline OLD.json to compare with")
    if not baseline_path:
        return None
    from specaudit.analysis import baseline
    from specaudit.results import document

    old, rules = document.read(baseline_path), [baseline.parse_rule(r) for r in fail_on]
    baseline.check_gateable(old, rules, baseline_path)
    return baseline_path, old, rules


def _interruptible(publish: Callable[..., ExitCode]) -> Callable[..., ExitCode]:
    """Wrap ``publish(result, json_path, ...)``: SIGINT or SIGTERM while it writes the reports (CI cancelling a job)
    ends the writing with exit 2, the JSON left holding the finished run (never a 'running' partial); a
    half-written file never replaces a report."""

    @functools.wraps(publish)
    def wrapper(result: Any, json_path: str | None, *rest: Any) -> ExitCode:
        from specaudit.engine.stops import stop_signals

        try:
            with stop_signals():
                return publish(result, json_path, *rest)
        except KeyboardInterrupt:
            return _interrupted_publishing(result, json_path)

    return wrapper


def _interrupted_publishing(result: Any, json_path: str | None) -> ExitCode:
    """Finish the JSON of a run whose report writing was interrupted (signals ignored meanwhile); return exit 2."""
    import signal

    from specaudit.reports import json as json_report

    kept = ""
    if json_path:
        previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}  # one more: ignored
        try:
            json_report.write(result, json_path)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        kept = f"; {json_path} holds the finished run (verdict: exit {int(result.exit_code())})"
    click.echo(f"specaudit: interrupted while writing the reports{kept}; the other reports were not written "
               "or left as they were", err=True)
    return ExitCode.INTERRUPTED


@_interruptible
def _publish(
    result: Any,
    json_path: str | None,
    html_path: str | None,
    junit_path: str | None,
    gate: tuple[str, Any, list] | None,
    verbosity: int,
) -> ExitCode:
    """Write every requested report of a finished run, print it, and return the exit code."""
    import dataclasses

    from specaudit.reports import github
    from specaudit.results import document

    comparison = _compare(gate, document.roundtrip(result))
    if comparison is not None:
        result = dataclasses.replace(result, baseline=comparison)
    shown = document.roundtrip(result)  # files and annotations render the run as its JSON reads back
    written = _write_reports(result, shown, json_path, html_path, junit_path)
    if github.active():
        github.emit(shown, sys.stdout)
    _show(result, comparison, written, verbosity)
    code = result.exit_code()
    if code == ExitCode.OK and comparison is not None and comparison.failed:
        code = ExitCode.CHECKS_FAILED
    return code


def _compare(gate: tuple[str, Any, list] | None, result: Any) -> Any:
    """Return the ``results.Comparison`` of a run (as read back from its JSON) with the --baseline run, or None."""
    if gate is None:
        return None
    from specaudit.analysis import baseline

    path, old, rules = gate
    return baseline.compare(old, result, rules, path)


def _write_reports(result: Any, shown: Any, json_path: str | None, html_path: str | None,
                   junit_path: str | None) -> list[Path]:
    """Write the JSON of ``result`` and the HTML and JUnit of ``shown`` (the run read back) as requested."""
    from specaudit.reports import json as json_report

    written = []
    if json_path:
        written.append(json_report.write(result, json_path))
    if html_path:
        from specaudit.reports import html

        written.append(html.write(shown, html.output_path(html_path, shown.target)))
    if junit_path:
        from specaudit.reports import junit

        written.append(junit.write(shown, junit_path))
    return written


def _show(result: Any, comparison: Any, written: list[Path], verbosity: int) -> None:
    """Print the run, its comparison with the baseline, and the files written."""
    from specaudit.reports import format as fmt
    from specaudit.reports import terminal

    console = _console()
    terminal.render(result, console, verbosity)
    if comparison is not None:
        terminal.render_baseline(comparison, console, verbosity)
    if verbosity >= 0:
        for path in written:
            console.print(f"wrote {fmt.visible(path)}", markup=False, highlight=False)


@main.command()
@click.argument("results", type=click.Path(dir_okay=False))
@_html
@_junit
@_baseline
@_fail_on
@_quiet
@_verbose
def report(
    results: str,
    html_path: str | None,
    junit_path: str | None,
    baseline_path: str | None,
    fail_on: tuple[str, ...],
    quiet: int,
    verbose: int,
) -> None:
    """Re-render the reports of a saved run from its JSON alone (RESULTS.json from run --json).

    Exits 0 once the reports are written (1 only when a --fail-on rule is broken), whatever the
    saved run's verdict: use the run's own exit code to gate.
    """
    import dataclasses

    from specaudit.results import document

    gate = _baseline_gate(baseline_path, fail_on)
    _, html_path, junit_path = _outputs(None, html_path, junit_path)
    result = document.read(results)
    comparison = _compare(gate, result)
    if comparison is not None:
        result = dataclasses.replace(result, baseline=comparison)
    _show(result, comparison, _write_reports(result, result, None, html_path, junit_path), verbose - quiet)
    sys.exit(int(ExitCode.CHECKS_FAILED if comparison is not None and comparison.failed else ExitCode.OK))


@main.command()
@click.argument("results", type=click.Path(dir_okay=False))
@click.option("--output", "-o", "out_dir", type=click.Path(file_okay=False), default="repro", show_default=True,
              help="Folder for the test_repro_<scenario>_<check>.py files (created; files of the same name replaced).")
def repro(results: str, out_dir: str) -> None:
    """Write each failed finding of RESULTS.json as a pytest file: exact ones minimal (numpy and the target only).

    Each failing call is shrunk against the run's target first (one row, fewest drafts, smallest
    vocabulary, short decimals). A scenario whose statistical checks failed gets one file that
    re-runs it inline through ``specaudit.assert_lossless`` at the N with power 0.99 against the
    law the run observed. Exits 0 with "nothing to reproduce" when no check failed that way, 4 when
    the file cannot be read or the target no longer imports.
    """
    from specaudit.reports.format import visible
    from specaudit.reports.repro import build_all, collect, write_all
    from specaudit.results import document

    doc = document.read_document(results)
    collected = collect(doc, str(results))
    without = collected.without
    if not collected:
        extra = f" ({len(without)} failed check(s) recorded no replayable call: {', '.join(without[:5])})" if without else ""
        click.echo(f"specaudit: nothing to reproduce in {visible(results)}{extra}")
        sys.exit(int(ExitCode.OK))
    settings = doc.get("settings") or {}
    if settings.get("adapter") or settings.get("contract", "probs") != "probs":
        raise UsageError(f"{results}: the run went through adapter {settings.get('adapter')!r} / contract "
                         f"{settings.get('contract', 'probs')!r}; repro writes files for the canonical contract "
                         "(--contract probs, no --adapter) only")
    repros, scenarios, stops, gone = build_all(doc, collected, str(doc.get("target", "")))
    written = write_all([*repros, *scenarios, *stops], out_dir) if repros or scenarios or stops else []
    for r in repros:
        b0, k0, v0 = r.shrunk.before
        b1, k1, v1 = r.shrunk.after
        click.echo(f"wrote {visible(Path(out_dir) / r.name)}: {r.finding.scenario} / {r.finding.check}, shrunk from "
                   f"{b0} row(s), K = {k0}, V = {v0} to {b1} row(s), K = {k1}, V = {v1}")
    for sr in scenarios:
        click.echo(f"wrote {visible(Path(out_dir) / sr.name)}: {sr.scenario} / {', '.join(sr.checks)}, the scenario "
                   f"re-run at N = {sr.samples:,} (power 0.99 against the observed law)")
    for st in stops:
        b0, k0, v0 = st.before
        click.echo(f"wrote {visible(Path(out_dir) / st.name)}: {st.scenario} / stops ({st.case}), rebuilt from "
                   f"{b0} row(s), K = {k0}, V = {v0} as 1 forced row, K = {st.after[1]}, V = {st.after[2]}")
    for name in gone:
        click.echo(f"{name}: the recorded call no longer fails on {doc.get('target')}: not written")
    for name in without:
        click.echo(f"{name}: no replayable call recorded (a multi-call finding): not written")
    if not written:
        click.echo("specaudit: nothing to reproduce (no recorded call fails on the target any more)")
    sys.exit(int(ExitCode.OK))


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
def validate(paths: tuple[str, ...]) -> None:
    """Validate scenario files; print every problem as file:line: key: message."""
    from specaudit.engine.tasks import preflight
    from specaudit.errors import ScenarioError
    from specaudit.reports.format import visible
    from specaudit.scenarios.loading import load_scenario

    bad = 0
    for path in paths:
        try:
            loaded = load_scenario(path)
            preflight(loaded)  # what `run` would need, before it allocates it
        except ScenarioError as exc:
            bad += 1
            click.echo(visible(exc), err=True)
        else:
            click.echo(f"{visible(path)}: ok ({loaded.name})")
    sys.exit(int(ExitCode.USAGE_ERROR if bad else ExitCode.OK))


@main.command("list")
def list_scenarios() -> None:
    """List the shipped scenarios."""
    from rich.console import Group, RenderableType
    from rich.padding import Padding
    from rich.text import Text

    from specaudit.reports.columns import Column, fit_first
    from specaudit.scenarios.catalogue import shipped

    columns = [Column(h, "right" if h in ("V", "K", "L", "samples") else "left")
               for h in ("name", "tags", "V", "K", "drafts", "L", "samples", "description")]
    rows = []
    for s in shipped():
        sp = s.spec
        rows.append([sp.name, ",".join(sp.tags), str(sp.vocab), str(sp.k), str(sp.drafts if sp.drafts is not None else sp.k),
                     str(sp.length), f"{sp.samples:,}", " ".join(sp.description.split())])  # whole, wrapped at spaces
    console = _console()
    table: RenderableType | None = fit_first(columns, rows, console.width)
    if table is None:  # too narrow for the table: a heading line per scenario, the description below it
        table = Group(*(part for r in rows for part in (
            Text.assemble((r[0], "bold"), f" [{r[1]}] V {r[2]}, K {r[3]}, drafts {r[4]}, L {r[5]}, {r[6]} samples"),
            Padding(Text(r[7]), (0, 0, 0, 2)))))
    console.print(table)


@main.command("adapters")
def list_adapters() -> None:
    """List the adapters (built-in and entry points), their options, and the aliases that use them."""
    from rich.console import Group
    from rich.text import Text

    from specaudit import adapters
    from specaudit.contract.targets import ALIASES
    from specaudit.reports.columns import Column, fit_first

    columns = [Column(h) for h in ("adapter", "source", "installed", "options (default)", "what it drives")]
    rows = []
    for a in adapters.available():
        missing = a.missing()
        installed = "yes" if not missing else f"no: pip install -e '.[{a.extra}]' in specaudit's checkout" if a.extra else f"no ({', '.join(missing)})"
        opts = "any" if a.options is None else ", ".join(f"{o.name}={o.default}" for o in a.options)
        rows.append([a.name, a.source, installed, opts, a.summary])
    console = _console()
    table = fit_first(columns, rows, console.width)  # never a cut name or option (issue 19)
    console.print(table if table is not None else Group(*(
        Text(f"{r[0]} ({r[1]}; installed: {r[2]}): {r[4]}; options {r[3]}") for r in rows)))
    for alias, preset in ALIASES.items():
        if preset.adapter is None:
            continue
        suite = f", default suite {' '.join(preset.scenarios)}" if preset.scenarios else ""
        opts = "".join(f" --adapter-arg {k}={v}" for k, v in preset.options.items())
        click.echo(f"alias {alias}: {preset.target} with --adapter {preset.adapter}{opts}{suite}")


@main.command("engines")
@click.option("--latest", is_flag=True, help="Ask the package index for each engine's newest release and say "
              "whether specaudit can still drive it (fetches its verifier's files).")
@click.option("--fetch", "fetch_specs", multiple=True, metavar="ENGINE@VERSION",
              help="Fetch a release's verifier files into the cache now (for a machine without the package index).")
def list_engines(latest: bool, fetch_specs: tuple[str, ...]) -> None:
    """List the engines audited by release (ENGINE@VERSION): their layouts, what is cached, the newest release."""
    from specaudit import engines
    from specaudit.engines import fetch as releases

    for spec in fetch_specs:
        found = engines.split(spec)
        if found is None:
            raise UsageError(f"--fetch {spec!r}: expected ENGINE@VERSION (engines: {', '.join(engines.ENGINES)})")
        got = releases.fetch(*found)
        click.echo(f"fetched {spec}: {got.wheel} -> {got.folder}")
    if fetch_specs and not latest:
        return
    for name in engines.ENGINES:
        engine = engines.ENGINES.get(name)
        cached = releases.cached_versions(engine)
        click.echo(f"{engine.name} ({engine.distribution}): {engine.summary}")
        for layout in engine.layouts:
            note = f"; {layout.note}" if layout.note else ""
            how = f"adapter {layout.adapter}" if layout.adapter else "canonical contract"
            click.echo(f"  {layout.versions}: {layout.target} ({how}{', Triton' if layout.triton else ''}){note}")
        if engine.installed_target:
            click.echo(f"  unversioned `{engine.name}`-style target: {engine.installed_target} (the installed release)")
        click.echo(f"  cached: {', '.join(cached) or 'none'} (in {releases.engines_folder() / engine.distribution})")
        if latest:
            click.echo(f"  latest: {_drivable(engine)}")


def _drivable(engine: object) -> str:
    """Return ``VERSION, drivable: yes|no (why)`` for the newest release of ``engine``."""
    from specaudit import engines
    from specaudit.engines import fetch as releases

    assert isinstance(engine, releases.Engine)
    try:
        version = releases.latest(engine)
    except releases.EngineError as exc:
        return f"unknown ({exc})"
    try:
        engines.load(f"{engine.name}@{version}")  # fetched, and its verifier made callable
    except releases.EngineError as exc:
        return f"{version}, drivable: no ({exc})"
    return f"{version}, drivable: yes (layout {engine.layout(version).versions})"  # type: ignore[union-attr]


@main.command()
@click.option("--results", is_flag=True,
              help="The schema of results files (`run --json`; draft 2020-12, with their schema_version) instead.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write to a file.")
def schema(results: bool, output: str | None) -> None:
    """Print the JSON Schema of scenario files (for editors), or with --results of results files."""
    from specaudit.results import schema as results_schema
    from specaudit.results.document import atomic_write
    from specaudit.scenarios.catalogue import json_schema

    text = json.dumps(results_schema.json_schema() if results else json_schema(), indent=2)
    if output:
        atomic_write(output, text + "\n")  # an unwritable path is a usage error (exit 4)
    else:
        click.echo(text)



def _scenarios_or_exit(names: tuple[str, ...]) -> list:
    """Return the loaded scenarios of ``-s`` (default suite for none); exit 5 when nothing matches."""
    from specaudit.engine.tasks import resolve_scenarios

    loaded = resolve_scenarios(list(names) or None)
    if not loaded:
        click.echo(f"specaudit: nothing to run: no scenario matches {' '.join(names)}; "
                   "`specaudit list` shows the shipped ones and their tags", err=True)
        sys.exit(int(ExitCode.NO_SCENARIOS))
    return loaded


#: A power is a probability; its example is a power one plans for, not a level.
_POWER = _Real(0.0, 1.0, True, True, "0.99")


@main.command()
@click.option("--scenario", "-s", "scenario_names", multiple=True, metavar="NAME|PATH",
              help="Shipped scenario name, tag:TAG, or a YAML file; repeatable. Default: the default suite "
                   "(its scenarios with nothing to plan, mode exact or greedy, are skipped with a note).")
@click.option("--tv", type=_Real(0.0, 1.0, True, False, "0.05"), default=None,
              help="Print the samples needed to detect this TV (0 < TV <= 1) in every direction.")
@click.option("--samples", type=_SAMPLES, default=None, help="Print the TV detectable with N samples (default: the scenario's).")
@click.option("--mutant", default=None, metavar="NAME", help="Print the samples needed to catch this zoo mutant.")
@click.option("--power", "power_", type=_POWER, default=0.99, show_default=True, help="Wanted power, 0 < power < 1.")
@click.option("--alpha", type=_LEVEL, default=1e-3, show_default=True, help="Level, split over --tests checks.")
@click.option("--tests", type=_Count(1, 10**6, "3"), default=1, show_default=True,
              help="Checks alpha is split over (Bonferroni; a run adjusts over all its checks, ~3 per scenario).")
def plan(scenario_names: tuple[str, ...], tv: float | None, samples: int | None, mutant: str | None,
         power_: float, alpha: float, tests: int) -> None:
    """Samples needed for a TV or a mutant, or the TV detectable at N, on the joint-law check."""
    from specaudit.analysis import plan as planning
    from specaudit.errors import UsageError
    from specaudit.reports.sensitivity import render_plan

    if mutant is not None:
        planning.check_mutant(mutant)
    specs = [item.spec for item in _scenarios_or_exit(scenario_names)]
    # a scenario named on its own with nothing to plan is a usage error; a suite or tag skips it with a note
    selection = not scenario_names or any(name.startswith("tag:") for name in scenario_names)
    refused = {spec.name: why for spec in specs if (why := planning.refusal(spec)) is not None}
    if refused and (not selection or len(refused) == len(specs)):
        raise UsageError(next(iter(refused.values())))
    for why in refused.values():
        click.echo(f"specaudit: plan: skipped {why}", err=True)
    plans = [planning.plan(spec, alpha=alpha, power=power_, tests=tests, samples=samples, tv=tv, mutant=mutant)
             for spec in specs if spec.name not in refused]
    render_plan(plans, _console())
    sys.exit(int(ExitCode.OK))


class _OffOrCount(_Count):
    """0 (off), or a whole number in [least, hi]: every refusal states both."""

    def __init__(self, least: int, hi: int, example: str):
        super().__init__(0, hi, example)
        self.least = least

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        number = super().convert(value, param, ctx)
        if 0 < number < self.least:
            self.fail(f"{value}; allowed: {self._range()}, e.g. {self.example}", param, ctx)
        return number

    def _range(self) -> str:
        return f"0 (off) or {_Count(self.least, self.hi, self.example)._range()}"


# the ranges of specaudit.engine.selftest (MIN_SEEDS.., MIN_DRAWS.., MIN_SAMPLES; a test keeps them equal),
# written out so that the first refusal states the whole allowed set
_ST_SEEDS = _Count(10, 10**6, "100")
_ST_DRAWS = _OffOrCount(1_000, 10**7, "5000")
_ST_SAMPLES = _Count(100, MAX_SAMPLES, "20000 or 2e4")


@main.command()
@click.option("--scenario", "-s", "scenario_names", multiple=True, metavar="NAME|PATH",
              help="Scenarios to calibrate on; repeatable. Default: the default suite.")
@click.option("--seeds", type=_ST_SEEDS, default=20, show_default=True,
              help="Seeded null runs of the reference verifier, 10 .. 1e6 (the wiring; power comes from --draws).")
@click.option("--draws", type=_ST_DRAWS, default=5_000, show_default=True,
              help="Exact-null draws per (scenario, check) judged in the tail: 0 (skip) or 1000 .. 1e7.")
@click.option("--samples", type=_ST_SAMPLES, default=20_000, show_default=True,
              help="Sequences per scenario and run (>= 100).")
@click.option("--alpha", type=_LEVEL, default=1e-3, show_default=True, help="Family-wise level of every run.")
@click.option("--no-mutants", is_flag=True, help="Calibration only; skip the zoo.")
@_quiet
@_verbose
def selftest(scenario_names: tuple[str, ...], seeds: int, draws: int, samples: int, alpha: float, no_mutants: bool,
             quiet: int, verbose: int) -> None:
    """Test the tester: p-value uniformity and false alarms under the null; the zoo must be caught."""
    from specaudit.engine import selftest as st
    from specaudit.reports.sensitivity import render_selftest

    loaded = _scenarios_or_exit(scenario_names)
    err = _console(stderr=True)

    def tick(stage: str, done: int, total: int) -> None:
        if verbose - quiet >= 0 and (done == total or done % 10 == 0):
            err.print(f"selftest: {stage} {done}/{total}", highlight=False)

    result = st.selftest(loaded, seeds=seeds, samples=samples, alpha=alpha,
                         mutants=not no_mutants, progress=tick, draws=draws)
    render_selftest(result, _console(), verbose - quiet)
    sys.exit(int(result.exit_code()))


if __name__ == "__main__":  # pragma: no cover
    script()
