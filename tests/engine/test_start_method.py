"""CUDA-safe supervision: a caller that initialised CUDA, or a run on a CUDA device, starts its child afresh.

CPU only: ``torch.cuda.is_initialized()`` is made true in the calling process (monkeypatch), and
the verifier (``tests/helpers/device_context.py``) raises in a forked copy of the process that
made its "device context", as CUDA does. Forked, it is an ERROR (the negative control); started
by forkserver or spawn, it passes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import device_context
import pytest

import specaudit
from specaudit.engine import supervisor
from specaudit.engine.device import cuda_initialised
from specaudit.engine.settings import RunSettings
from specaudit.engine.supervisor import START_METHOD_VARIABLE, start_method
from specaudit.errors import ExitCode
from specaudit.results import Status

pytest_plugins = ["pytester"]

RUN = {"samples": 1000, "power": False, "diagnose": False}
REF_TORCH = "specaudit.adapters.torch_reference:verify"
RUN_QUIET = {"power": False, "diagnose": False}


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this process one that has initialised CUDA (and made the verifier's device context here)."""
    torch = pytest.importorskip("torch")
    monkeypatch.delenv(START_METHOD_VARIABLE, raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(device_context, "CONTEXT_PID", None)
    device_context.make_context()


def test_a_verifier_that_refuses_a_fork_passes_when_the_caller_has_initialised_cuda(cuda):
    assert cuda_initialised() and start_method(RunSettings())[0] == "forkserver"
    result = specaudit.run(device_context.verify, ["peaked-v8", "markov-v4"], **RUN)
    assert result.exit_code() == ExitCode.OK and [s.status for s in result.scenarios] == [Status.PASSED] * 2


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_either_fresh_start_passes_and_a_forced_fork_is_the_negative_control(cuda, monkeypatch, method):
    monkeypatch.setenv(START_METHOD_VARIABLE, method)
    assert specaudit.run(device_context.verify, ["peaked-v8"], **RUN).exit_code() == ExitCode.OK
    monkeypatch.setenv(START_METHOD_VARIABLE, "fork")  # what every run did before: the child inherits the context
    result = specaudit.run(device_context.verify, ["peaked-v8"], **RUN)
    (s,) = result.scenarios
    assert result.exit_code() == ExitCode.CHECKS_FAILED and s.status is Status.ERROR
    assert "Cannot re-initialize CUDA in forked subprocess" in (s.error.message if s.error else s.checks[0].summary)


def test_without_cuda_the_child_is_still_forked(monkeypatch):
    monkeypatch.delenv(START_METHOD_VARIABLE, raising=False)
    monkeypatch.setattr(device_context, "CONTEXT_PID", None)
    device_context.make_context()
    assert not cuda_initialised()  # torch, if imported by another test, has no CUDA context here
    assert start_method(RunSettings())[0] == "fork"
    result = specaudit.run(device_context.verify, ["peaked-v8"], **RUN)
    assert result.scenarios[0].status is Status.ERROR  # forked: the context made here is inherited


@pytest.mark.parametrize(("settings", "method"), [
    (RunSettings(), "fork"),
    (RunSettings(device="cuda"), "forkserver"),
    (RunSettings(device="cuda:1"), "forkserver"),
    (RunSettings(device="cpu"), "fork"),
    (RunSettings(adapter="torch", adapter_options={"device": "cuda"}), "forkserver"),
], ids=["default", "device-cuda", "device-cuda1", "device-cpu", "adapter-device"])
def test_a_run_on_a_cuda_device_starts_its_child_by_forkserver(monkeypatch, settings, method):
    monkeypatch.delenv(START_METHOD_VARIABLE, raising=False)
    monkeypatch.setattr(supervisor, "cuda_initialised", lambda: False)  # this process: no CUDA context (a GPU host's may have one)
    assert start_method(settings)[0] == method


@pytest.mark.parametrize("value", ["spawn", "forkserver", "fork"])
def test_the_variable_picks_the_start_method(monkeypatch, value):
    monkeypatch.setenv(START_METHOD_VARIABLE, value)
    assert start_method(RunSettings(device="cuda")) == (value, f"{START_METHOD_VARIABLE}={value}")


def test_a_lambda_with_cuda_is_a_usage_error_naming_the_way_out_and_the_way_out_works(cuda):
    def nested(*args):
        return device_context.verify(*args)

    for target, why in [(lambda *a: device_context.verify(*a), "cannot be pickled"), (nested, "cannot be pickled")]:
        with pytest.raises(specaudit.UsageError, match=rf"cannot be re-imported in the supervised child: it {why}.*"
                                                       r"starts by forkserver \(this process has initialised CUDA.*"
                                                       r"'package.module:verify' or 'file.py:verify'.*supervised=False"):
            specaudit.run(target, ["peaked-v8"], **RUN)
        assert specaudit.run(target, ["peaked-v8"], supervised=False, **RUN).exit_code() == ExitCode.OK


def test_settings_a_fresh_child_cannot_be_handed_are_a_usage_error(cuda):
    import types

    options = types.MappingProxyType({"device": "cpu"})  # a mapping pickle refuses
    with pytest.raises(specaudit.UsageError, match=r"cannot be handed to a child started by forkserver: TypeError: .*"
                                                   r"mappingproxy.*supervised=False"):
        specaudit.run(REF_TORCH, ["markov-v4"], adapter="torch", adapter_options=options, **RUN)
    ok = specaudit.run(REF_TORCH, ["markov-v4"], adapter="torch", adapter_options=dict(options), **RUN)
    assert ok.exit_code() == ExitCode.OK  # the way out: a dict


def test_a_notebook_function_with_cuda_is_a_usage_error():
    pytest.importorskip("torch")
    code = textwrap.dedent("""
        import torch, specaudit
        from specaudit.verifiers.reference import verify as reference
        torch.cuda.is_initialized = lambda: True
        def verify(*args):  # defined in __main__ of `python -c`: no file a fresh process could import
            return reference(*args)
        try:
            specaudit.run(verify, ["peaked-v8"], samples=500)
        except specaudit.UsageError as exc:
            print("usage:", exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "usage: the target" in out.stdout, out.stderr
    assert "defined in __main__ of an interactive session or a notebook" in out.stdout
    assert "supervised=False" in out.stdout


def test_a_script_function_with_cuda_is_re_imported_from_its_file(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "audit.py"
    script.write_text(textwrap.dedent("""
        import os
        import torch, specaudit
        from specaudit.verifiers.reference import verify as reference
        MADE_IN = os.getpid()  # the parent's pid, also when a fork inherits this module

        def verify(*args):
            assert os.getpid() == MADE_IN, "Cannot re-initialize CUDA in forked subprocess"
            return reference(*args)

        if __name__ == "__main__":
            torch.cuda.is_initialized = lambda: True
            print("exit", specaudit.run(verify, ["peaked-v8"], samples=500, power=False, diagnose=False).exit_code())
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert out.stdout.strip() == "exit 0", out.stderr


@pytest.mark.parametrize("value", ["threads", "FORK", " spawn"])
def test_a_bad_start_method_variable_exits_4_and_says_what_is_allowed(cli, value):
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", "peaked-v8", "--samples", "500",
              env={START_METHOD_VARIABLE: value})
    assert res.exit_code == ExitCode.USAGE_ERROR
    assert f"{START_METHOD_VARIABLE}={value!r}; allowed: 'fork', 'forkserver', 'spawn'" in res.output


def test_jobs_in_a_process_that_initialised_cuda_exit_4_and_jobs_1_passes(cli, verifiers_dir, monkeypatch):
    monkeypatch.delenv(START_METHOD_VARIABLE, raising=False)
    target = f"{verifiers_dir / 'cuda_at_import.py'}:verify"  # initialises (fake) CUDA in the child, at import
    args = ["run", target, "-s", "markov-v4", "--samples", "20000", "--no-power"]
    res = cli(*args, "--jobs", "2")
    assert res.exit_code == ExitCode.USAGE_ERROR
    assert "--jobs 2: the block workers are forks of the process that runs the verifier" in res.output
    assert "use --jobs 1 (one process per device)" in res.output
    assert cli(*args, "--jobs", "1").exit_code == ExitCode.OK


def test_jobs_in_process_with_cuda_is_a_usage_error(cuda):
    with pytest.raises(specaudit.UsageError, match=r"--jobs 2: .* has initialised CUDA .* use --jobs 1"):
        specaudit.run(device_context.verify, ["markov-v4"], samples=20000, jobs=2, supervised=False, power=False)


def test_ray_blocks_from_a_caller_with_cuda_pass(cuda, monkeypatch):
    pytest.importorskip("ray")
    helpers = str(Path(device_context.__file__).parent)  # Ray's workers import the verifier's module by name too
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [helpers, os.environ.get("PYTHONPATH")])))
    result = specaudit.run(device_context.verify, ["markov-v4"], samples=30000, jobs=2, backend="ray", **RUN_QUIET)
    assert result.exit_code() == ExitCode.OK and result.scenarios[0].status is Status.PASSED
    monkeypatch.setenv(START_METHOD_VARIABLE, "fork")  # the negative control: the child's own calls (probes) fail
    result = specaudit.run(device_context.verify, ["markov-v4"], samples=30000, jobs=2, backend="ray", **RUN_QUIET)
    assert result.scenarios[0].status is Status.ERROR


def test_asking_whether_cuda_is_initialised_never_imports_torch():
    code = "import sys; from specaudit.engine.device import cuda_initialised; print(cuda_initialised(), 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["False", "False"]


PLUGIN_USER = """
import os
import torch
import specaudit
from specaudit.verifiers.reference import verify as reference

MADE_IN = os.getpid()

def verify(*args):
    assert os.getpid() == MADE_IN, "Cannot re-initialize CUDA in forked subprocess"
    return reference(*args)

def test_assert_lossless_after_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: {initialised})
    specaudit.assert_lossless(verify, scenarios=["peaked-v8"], samples=1000, seed=1)
"""


@pytest.mark.parametrize(("initialised", "outcome"), [(True, "passed"), (False, "failed")])
def test_the_plugins_assert_lossless_is_cuda_safe(pytester, monkeypatch, initialised, outcome):
    pytest.importorskip("torch")
    monkeypatch.delenv(START_METHOD_VARIABLE, raising=False)
    pytester.makepyfile(test_user=PLUGIN_USER.replace("{initialised}", str(initialised)))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(**{outcome: 1})
    if outcome == "failed":  # forked, the verifier sees it is a copy: the negative control
        assert "Cannot re-initialize CUDA in forked subprocess" in result.stdout.str()
