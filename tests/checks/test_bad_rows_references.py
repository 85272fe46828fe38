"""The block, greedy and logits references keep the bad-row rule (specaudit.checks.bad_rows), scenario bad-rows."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from specaudit.cli import main
from specaudit.verifiers import block, greedy, logits
from specaudit.verifiers.block import block_verify


@pytest.mark.parametrize("args", [["reference-block"], ["reference-greedy"],
                                  ["reference-logits", "--contract", "logits"]])
def test_reference_passes_bad_rows(args):
    done = CliRunner().invoke(main, ["run", *args, "-s", "bad-rows"])
    assert done.exit_code == 0, done.output
    assert "bad-rows" in done.output and "passed" in done.output


def _batch(rng, batch=16, k=3, v=6):
    p = rng.dirichlet(np.ones(v), size=(batch, k + 1))
    q = rng.dirichlet(np.ones(v), size=(batch, k))
    return rng.integers(v, size=(batch, k)), q, p, np.full(batch, k)


def test_block_bad_q_row_ends_the_block_there():
    # a bad q row at draft j is a block of j drafts: the same draws give the same output (lossless, Sun et al. Thm. 1)
    rng = np.random.default_rng(404)
    for kind in (np.nan, np.inf, 0.0):
        draft, q, p, nd = _batch(rng)
        bad = q.copy()
        j = rng.integers(0, 3, size=16)
        bad[np.arange(16), j] = kind if kind == 0.0 else q[np.arange(16), j]
        if kind != 0.0:
            bad[np.arange(16), j, 1] = kind
        got = block_verify(draft, bad, p, nd, np.random.default_rng(9))
        want = block_verify(draft, q, p, j, np.random.default_rng(9))
        assert all(np.array_equal(a, b) for a, b in zip(got, want)), kind


@pytest.mark.parametrize("verify", [block.verify, greedy.verify])
def test_bad_p_row_read_raises_naming_the_row_and_padding_is_ignored(verify):
    rng = np.random.default_rng(405)
    draft, q, p, nd = _batch(rng)
    nd[5] = 1
    p[5, 3] = np.nan  # padding of row 5: never read
    out, n_out = verify(draft, q, p, nd, np.random.default_rng(1))
    assert (n_out >= 1).all()
    p[7, 0] = 0.0
    with pytest.raises(ValueError, match=r"row 7 \(p\[7, 0\]: no mass\)"):
        verify(draft, q, p, nd, np.random.default_rng(1))


def test_logits_reference_names_the_target_row_and_ignores_padding():
    rng = np.random.default_rng(406)
    draft, q, p, nd = _batch(rng)
    nd[2] = 0
    with np.errstate(divide="ignore"):
        dl, tl = np.log(q), np.log(p)
    tl[2, 1:] = np.nan  # padding
    dl[2] = np.nan  # padding (num_draft 0)
    params = logits.LogitsParams()
    out, n_out = logits.verify_reference(draft, dl, tl, nd, params, np.random.default_rng(1))
    assert n_out[2] == 1
    tl[4, 2] = -np.inf
    with pytest.raises(ValueError, match=r"row 4 \(target_logits\[4, 2\]: no mass\)"):
        logits.verify_reference(draft, dl, tl, nd, params, np.random.default_rng(1))
