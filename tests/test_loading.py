"""TARGET import strings: the four failure kinds are told apart, each a usage error."""

import pytest

from specaudit.errors import ExitCode, TargetLoadError
from specaudit.contract.targets import load_target
from specaudit.verifiers.reference import verify


def test_module_path_and_alias():
    assert load_target("specaudit.verifiers.reference:verify") is verify
    assert load_target("reference") is verify


def test_file_path(verifiers_dir):
    fn = load_target(f"{verifiers_dir / 'loop.py'}:verify")
    assert callable(fn) and fn.__name__ == "verify"


def test_module_not_found():
    with pytest.raises(TargetLoadError, match="module 'no_such_pkg.mod' not found"):
        load_target("no_such_pkg.mod:verify")


def test_missing_file():
    with pytest.raises(TargetLoadError, match="file 'nowhere/x.py' not found"):
        load_target("nowhere/x.py:verify")


def test_import_error_inside_user_module_shows_user_traceback(verifiers_dir):
    with pytest.raises(TargetLoadError) as info:
        load_target(f"{verifiers_dir / 'import_error.py'}:verify")
    msg = str(info.value)
    assert "the error is in your module" in msg and "ValueError" in msg
    assert "import_error.py" in msg and "BROKEN = np.array" in msg


def test_missing_attribute_suggests_close_name():
    with pytest.raises(TargetLoadError, match="has no attribute 'verfy' \\(did you mean 'verify'\\?\\)"):
        load_target("specaudit.verifiers.reference:verfy")


def test_not_callable(verifiers_dir):
    with pytest.raises(TargetLoadError, match="is a int, not a callable"):
        load_target(f"{verifiers_dir / 'broken.py'}:NOT_CALLABLE")


def test_malformed_spec_and_exit_code():
    with pytest.raises(TargetLoadError, match="must look like 'package.module:function'") as info:
        load_target("specaudit.verifiers.reference")
    assert info.value.exit_code == ExitCode.USAGE_ERROR
