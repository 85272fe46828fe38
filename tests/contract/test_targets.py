"""TARGET import strings: the four failure kinds are told apart, each a usage error; aliases and moved modules."""

import pytest

import specaudit
from specaudit import adapters
from specaudit.contract.targets import ALIASES, LEGACY, import_string, load_target
from specaudit.errors import ExitCode, TargetLoadError
from specaudit.verifiers import block, greedy, logits, tree
from specaudit.verifiers.reference import verify
from specaudit.verifiers.zoo import MUTANTS, chain
from specaudit.verifiers.zoo import logits as logits_zoo
from specaudit.verifiers.zoo import tree as tree_zoo


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
    with pytest.raises(TargetLoadError, match="is an int, not a callable"):
        load_target(f"{verifiers_dir / 'broken.py'}:NOT_CALLABLE")


def test_malformed_spec_and_exit_code():
    with pytest.raises(TargetLoadError, match="must look like 'package.module:function'") as info:
        load_target("specaudit.verifiers.reference")
    assert info.value.exit_code == ExitCode.USAGE_ERROR


# ---- aliases and import strings of modules that moved into folders ----------------------------

#: (old import string, new import string, short alias or None): all three load the same object.
MOVED = [
    ("specaudit.reference:verify", "specaudit.verifiers.reference:verify", "reference"),
    ("specaudit.block:verify", "specaudit.verifiers.block:verify", "reference-block"),
    ("specaudit.tree_reference:verify", "specaudit.verifiers.tree:verify", "reference-tree"),
    ("specaudit.greedy:verify", "specaudit.verifiers.greedy:verify", "reference-greedy"),
    ("specaudit.logits:verify_reference", "specaudit.verifiers.logits:verify_reference", "reference-logits"),
    ("specaudit.mutants:resample_from_p", "specaudit.verifiers.zoo.chain:resample_from_p", "mutant:resample_from_p"),
    ("specaudit.tree_mutants:block_first_failure", "specaudit.verifiers.zoo.tree:block_first_failure",
     "mutant:block_first_failure"),
    ("specaudit.logits_mutants:unprocessed_q", "specaudit.verifiers.zoo.logits:unprocessed_q", "mutant:unprocessed_q"),
]


@pytest.mark.parametrize("old, new, short", MOVED, ids=[m[1] for m in MOVED])
def test_old_new_and_short_import_strings_load_the_same_object(old, new, short):
    obj = load_target(new)
    assert load_target(old) is obj and load_target(short) is obj
    assert import_string(old) == new


def test_every_legacy_prefix_and_alias_loads():
    expected = {
        "reference": verify, "reference-block": block.verify, "reference-tree": tree.verify,
        "reference-greedy": greedy.verify, "reference-logits": logits.verify_reference,
    }
    for name, obj in expected.items():
        assert load_target(name) is obj
    assert set(LEGACY.values()) >= {"specaudit.verifiers.zoo.chain:", "specaudit.verifiers.zoo.tree:"}
    for name in chain.MUTANTS:
        assert load_target(f"specaudit.mutants:{name}") is chain.MUTANTS[name].func
    for name in tree_zoo.MUTANTS:
        assert load_target(f"specaudit.tree_mutants:{name}") is tree_zoo.MUTANTS[name].func
    for name in logits_zoo.MUTANTS:
        assert load_target(f"specaudit.logits_mutants:{name}") is logits_zoo.MUTANTS[name].func
    for name, m in MUTANTS.items():
        assert load_target(f"mutant:{name}") is m.func


def test_unknown_mutant_alias_suggests_the_closest():
    with pytest.raises(TargetLoadError, match=r"unknown mutant 'no_bonu' \(did you mean 'no_bonus'\?\)") as info:
        load_target("mutant:no_bonu")
    assert info.value.exit_code == ExitCode.USAGE_ERROR


def test_malformed_spec_suggests_an_alias():
    with pytest.raises(TargetLoadError, match=r"\(did you mean 'reference-tree'\?\); aliases: .*reference-block"):
        load_target("reference-tre")


def test_the_label_is_the_string_the_user_typed():
    result = specaudit.run("specaudit.mutants:no_bonus", ["seed-context-free"], samples=2000, seed=1, power=False,
                           diagnose=False)
    assert result.target == "specaudit.mutants:no_bonus"


def test_one_alias_table_holds_adapter_and_suite():
    hf = ALIASES.get("hf-transformers")
    assert (hf.target, hf.adapter, hf.scenarios) == (
        "transformers.generation.utils:_speculative_sampling", "hf", ("tag:hf", "corners"))
    assert adapters.preset_scenarios("hf-transformers") == ["tag:hf", "corners"]
    assert adapters.choose("vllm-v1", None, {}).options == {"device": "cuda"}
    assert adapters.choose("reference", None, {}) is None  # an alias without an adapter
    assert adapters.preset_scenarios("reference") is None
    assert adapters.preset_scenarios("reference-tree") == ["tag:tree"]
