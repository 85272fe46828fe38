"""The torch reference's inverse CDF (block sums): the law of its weights, never a zero-weight token, numpy's tokens."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from specaudit.adapters.torch_reference import CDF_BLOCK, inverse_cdf  # noqa: E402
from specaudit.chains import sampling  # noqa: E402


@pytest.mark.parametrize("vocab", [3, CDF_BLOCK, 2 * CDF_BLOCK + 77, 151_936])
def test_inverse_cdf_follows_the_law_on_a_grid_of_uniforms(vocab):
    rng = np.random.default_rng(vocab)
    w = np.zeros(vocab)
    support = np.sort(rng.choice(vocab, size=min(vocab - 1, 30), replace=False))
    w[support] = rng.random(support.size) + 0.05
    w[-1] = 0.0  # a trailing zero: never drawn, even at u next to 1
    n = 20_000
    grid = torch.tensor((np.arange(n) + 0.5) / n)
    row = torch.tensor(w)
    chunk = max(1, (1 << 22) // vocab)  # rows a call: 32 MiB of weights
    drawn = np.concatenate([inverse_cdf(row.expand(len(g), vocab).contiguous(), g).numpy() for g in grid.split(chunk)])
    counts = np.bincount(drawn, minlength=vocab)
    assert counts[w == 0].sum() == 0
    np.testing.assert_allclose(counts, n * w / w.sum(), atol=1.01)
    edge = inverse_cdf(torch.tensor(np.stack([w, np.zeros(vocab)])), torch.tensor([1 - 2**-53, 0.5]))
    assert edge.tolist() == [int(np.flatnonzero(w)[-1]), -1]  # the last positive weight; no mass: -1


def test_inverse_cdf_draws_numpys_tokens_where_the_sums_are_exact():
    rng = np.random.default_rng(7)
    for _ in range(40):
        vocab = int(rng.choice([2, 300, CDF_BLOCK * 3, 1000]))
        w = rng.integers(0, 8, (6, vocab)) / 8.0  # multiples of 1/8: every running sum exact
        w[:, 0] += 0.125
        u = rng.random(6)
        u[0] = 1 - 2**-53
        got = inverse_cdf(torch.tensor(w), torch.tensor(u)).tolist()
        assert got == [sampling.inverse_cdf(row, float(x)) for row, x in zip(w, u)]


def test_inverse_cdf_reads_a_strided_tensor_as_its_contiguous_copy():
    w = torch.rand(600, 4, dtype=torch.float64).T  # rows of stride 1 along the batch: not the layout it sums in
    u = torch.rand(4, dtype=torch.float64)
    assert inverse_cdf(w, u).tolist() == inverse_cdf(w.contiguous(), u).tolist()


def test_verify_takes_a_float32_target_with_a_float64_drafter():
    from specaudit.adapters.torch_reference import verify

    g = torch.Generator().manual_seed(0)
    p = torch.rand(5, 3, 300, generator=g, dtype=torch.float32)
    q = torch.rand(5, 2, 300, generator=g, dtype=torch.float64)
    draft = torch.randint(0, 300, (5, 2), generator=g)
    args = (draft, q / q.sum(-1, keepdim=True), p / p.sum(-1, keepdim=True), torch.tensor([2, 1, 0, 2, 2]), g)
    with torch.inference_mode():  # the torch adapter calls in inference mode; the workspace made there ...
        verify(*args)
    out, n_out = verify(*args)  # ... takes no in-place update outside it: each mode has its own
    assert out.shape == (5, 3) and bool(((n_out >= 1) & (n_out <= 3)).all())
