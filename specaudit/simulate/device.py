"""The device path: a chain scenario simulated in torch on the verifier's own device.

The host path (:mod:`specaudit.simulate.chain`) makes ``p`` and ``q`` as numpy arrays; a torch
verifier then gets them converted and, on a GPU, copied across the bus on every call (at
V = 128k, K = 8 about 17 MB per row). Here the same simulation runs in torch on the device of
the verifier's tensor form (:mod:`specaudit.contract.tensors`): the chains' tables, the padding
garbage, the drafts, ``num_draft``, ``p`` and ``q`` are made there, the verifier is called with
them, its outputs are checked and tallied there, and only counts come back to the host at the
end of a block (the accepted-count histograms, the round moments, the joint counts, the greedy
mismatch counts). Sinks without a device form (the per-prefix counts and PIT of large V^L) get the
finished sequences' ids, ``[n, L]`` integers per batch, never ``p`` or ``q``. Per call, one scalar
goes to the host (whether the output passed the contract check) and the indices of the finished
rows (continuous batching refills them).

Same law, another random stream. Every draw follows the host path's law: num_draft from the
draft law, each draft from the drafter's law in its state, padding rows drawn from a pool of 64
Dirichlet(1) laws (``specaudit.simulate.tables.garbage_pool``: normalised Exp(1) draws here, the
same law), padding ids uniform. The draws come from a ``torch.Generator`` on the device seeded
from the block's harness seed, so a run is reproducible from its seed on one device and torch
version, but the numbers differ from the host path's (numpy's stream) and may differ between
devices (CPU and CUDA generators differ). The verifier's own generator is seeded from the
block's verifier seed exactly as on the host path. The statistics, checks and verdicts are
those of the host path: the tallies are the same objects (:mod:`specaudit.simulate.tallies`).

Chains with a device form: tabular chains (every table-backed kind, logits chains under the
probs contract: their payload is their law) and the lazy Zipf chains of
:mod:`specaudit.chains.lazy` (a row is a window of the doubled base row, one ``index_select``;
the 64-bit prefix hash runs on int64 with wrap-around, bit for bit the numpy hash). Anything else
is refused with a usage error (:func:`device_chain`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from specaudit.chains.lazy import ROOT, ZipfChain
from specaudit.chains.tabular import TabularChain
from specaudit.contract.chain import validate_output
from specaudit.contract.tensors import TensorCall
from specaudit.errors import UsageError
from specaudit.simulate.chain import Plan
from specaudit.simulate.tables import CALL_BYTES, GARBAGE_POOL, TABLE_ENTRIES, rows_within
from specaudit.simulate.tallies import EXAMPLES, GreedyMatch, JointCounts, RoundStats, Sink

__all__ = ["DEVICE_SHARE", "DeviceChain", "DevicePath", "batch_budget", "device_chain", "device_form", "mix64", "simulate"]

#: The share of a CUDA device's free memory (``torch.cuda.mem_get_info``) a batch may use without
#: ``--max-device-memory``: the rest stays the verifier's and the caching allocator's (issue 33).
DEVICE_SHARE = 0.8


def batch_budget(device: str, max_memory: int, max_device_memory: int | None = None) -> int:
    """Return the bytes a batch may use on ``device``.

    On a CUDA device: ``max_device_memory`` (``--max-device-memory``), at most its free memory
    now (more cannot be had), else :data:`DEVICE_SHARE` of that rounded down to 2 or 3 times a
    power of two: the batch width decides which random numbers each row gets, so a width that
    followed every MiB of free memory would make a seed's run unrepeatable; rounded so (at most
    1.5x below), it stays the same while the free memory stays on one step (96 to 128 GiB of
    budget, say). Elsewhere (the CPU) the batch is in host memory: ``max_memory`` (``--max-memory``).
    """
    where = torch.device(device)
    if where.type != "cuda":
        return int(max_memory)
    free, _total = torch.cuda.mem_get_info(where)
    if max_device_memory is not None:
        return min(int(free), int(max_device_memory))
    share = max(1, int(free * DEVICE_SHARE))
    low = max(0, share.bit_length() - 2)  # keep the two leading bits: 2 or 3 times a power of two
    return share >> low << low


def _signed(value: int) -> int:
    """Return the int64 with the bits of the uint64 ``value``."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN, _MIX1, _MIX2 = _signed(0x9E3779B97F4A7C15), _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)
_FNV = 0x100000001B3


def _shr(z: torch.Tensor, bits: int) -> torch.Tensor:
    """Return the logical right shift of int64 bit patterns (torch's >> is arithmetic)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def mix64(z: torch.Tensor) -> torch.Tensor:
    """Return splitmix64 of int64 bit patterns: :func:`specaudit.chains.lazy.mix64` bit for bit (wrap-around)."""
    z = z + _GOLDEN
    z = (z ^ _shr(z, 30)) * _MIX1
    z = (z ^ _shr(z, 27)) * _MIX2
    return z ^ _shr(z, 31)


def _umod(z: torch.Tensor, m: int) -> torch.Tensor:
    """Return (z as uint64) mod m for int64 bit patterns ``z``."""
    r = torch.remainder(z, m)
    return torch.where(z < 0, torch.remainder(r + (1 << 64) % m, m), r)


class DeviceChain:
    """A chain's payload rows and sampler on a torch device.

    Payload rows are windows of one flat tensor: the chain's base rows, then the padding pool's
    (:meth:`with_pool`, once per block). :meth:`fill` writes the rows of some states, padding
    positions taking pool rows instead, with one ``index_select``.
    """

    vocab: int
    start: int
    _base: torch.Tensor

    def with_pool(self, pool: torch.Tensor) -> None:
        """Lay the padding pool [GARBAGE_POOL, V] after the chain's rows (the block's garbage)."""
        self.pool = pool.to(self._base.dtype)
        flat = torch.cat([self._base, self.pool.reshape(-1)])
        self.garbage = self._base.numel()
        self.rows = torch.as_strided(flat, (flat.numel() - self.vocab + 1, self.vocab), (1, 1))

    def start_states(self, n: int) -> torch.Tensor:
        """Return ``n`` copies of the start state."""
        return torch.full((n,), self.start, dtype=torch.int64, device=self._base.device)

    def starts(self, states: torch.Tensor) -> torch.Tensor:
        """Return the window offset of each state's payload row."""
        raise NotImplementedError

    def fill(self, out: torch.Tensor, states: torch.Tensor, pad: torch.Tensor | None, pick: torch.Tensor | None) -> None:
        """Write the payload rows of ``states`` [m] into ``out`` [m, V]; where ``pad``, pool row ``pick`` instead."""
        idx = self.starts(states)
        if pad is not None and pick is not None:
            idx = torch.where(pad, self.garbage + pick * self.vocab, idx)
        torch.index_select(self.rows, 0, idx, out=out)

    def sample(self, states: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Draw one token per state at uniforms ``u`` (inverse CDF)."""
        raise NotImplementedError

    def advance(self, states: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Return the states after ``tokens``."""
        raise NotImplementedError


class _Tabular(DeviceChain):
    """A tabular chain: its payload table, CDF table and next-state table on the device."""

    def __init__(self, chain: TabularChain, device: str, dtype: torch.dtype):
        s, v = chain.dist.shape
        self.vocab, self.start = v, int(chain.start)
        self._base = torch.as_tensor(np.asarray(chain.payload(np.arange(s)), dtype=np.float64).reshape(-1),
                                     device=device).to(dtype)
        dist = torch.as_tensor(np.asarray(chain.dist, dtype=np.float64), device=device)
        cdf = dist.cumsum(dim=1)
        # as TabularChain.sample: from the last positive token on the CDF is +inf (rounding never overshoots)
        last = v - 1 - (dist.flip(1) > 0).to(torch.int8).argmax(dim=1)
        cdf[torch.arange(v, device=device)[None, :] >= last[:, None]] = torch.inf
        self.cdf = cdf
        self.nxt = torch.as_tensor(np.asarray(chain.nxt, dtype=np.int64).reshape(-1), device=device)

    def starts(self, states: torch.Tensor) -> torch.Tensor:
        return states * self.vocab

    def sample(self, states: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        if self.cdf.shape[0] == 1:
            return torch.searchsorted(self.cdf[0], u, right=True)
        return torch.searchsorted(self.cdf[states], u[:, None], right=True)[:, 0]

    def advance(self, states: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return self.nxt[states * self.vocab + tokens]


class _Zipf(DeviceChain):
    """A :class:`specaudit.chains.lazy.ZipfChain`: its doubled base row, base CDF and ranking on the device.

    Reads the chain's own base tables (``_base2``, ``_cdf``, ``_perm``, ``ids``), so the law is the
    chain's; tests/simulate/test_device.py checks rows, samples and hashes against the chain bit
    for bit. A chain with a sparse support (``ids``) has rows of ``n`` < V entries laid at ``ids``.
    """

    def __init__(self, chain: ZipfChain, device: str, dtype: torch.dtype):
        from specaudit.chains.lazy import mix64 as host_mix64

        self.vocab, self.start = int(chain.vocab), _signed(ROOT)
        self._base = torch.as_tensor(np.asarray(chain._base2, dtype=np.float64), device=device).to(dtype)
        self.cdf = torch.as_tensor(np.asarray(chain._cdf, dtype=np.float64), device=device)
        self.perm = torch.as_tensor(np.asarray(chain._perm, dtype=np.int64), device=device)
        self.n = int(self.perm.numel())  # tokens with mass
        ids = getattr(chain, "ids", None)
        self.ids = None if ids is None else torch.as_tensor(np.asarray(ids, dtype=np.int64), device=device)
        self.key = _signed(int(host_mix64(np.uint64(chain.seed))))
        if self.ids is not None:  # rows of n entries: windows of the base row alone
            self.windows = torch.as_strided(self._base, (self.n + 1, self.n), (1, 1))

    def _shift(self, states: torch.Tensor) -> torch.Tensor:
        return _umod(mix64(states ^ self.key), self.n)

    def starts(self, states: torch.Tensor) -> torch.Tensor:
        return torch.remainder(self.n - self._shift(states), self.n)

    def fill(self, out: torch.Tensor, states: torch.Tensor, pad: torch.Tensor | None, pick: torch.Tensor | None) -> None:
        if self.ids is None:
            super().fill(out, states, pad, pick)
            return
        out.zero_()
        out.index_copy_(1, self.ids, torch.index_select(self.windows, 0, self.starts(states)))
        if pad is not None and pick is not None:
            out[pad] = self.pool[pick[pad]]

    def sample(self, states: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        rank = torch.searchsorted(self.cdf, u, right=True)
        j = torch.remainder(self.perm[rank] + self._shift(states), self.n)
        return j if self.ids is None else self.ids[j]

    def advance(self, states: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return mix64(states * _FNV + tokens + 1)


def device_form(chain: Any) -> Callable[[Any, str, torch.dtype], DeviceChain] | None:
    """Return the maker of ``chain``'s device form, ``make(chain, device, dtype)``, or None when it has none."""
    if type(chain) is ZipfChain:
        return _Zipf
    if type(chain) is TabularChain and chain.dist.size <= TABLE_ENTRIES:
        return _Tabular
    return None


def device_chain(chain: Any, device: str, dtype: torch.dtype) -> DeviceChain:
    """Return the device form of ``chain``; raise UsageError for a chain that has none."""
    form = device_form(chain)
    if form is None:
        raise UsageError(
            f"--device: a {type(chain).__name__} has no device form (the device path simulates tabular chains and "
            "zipf chains under the probs contract); leave out --device to simulate it on the host"
        )
    return form(chain, device, dtype)


def _pool(vocab: int, generator: torch.Generator, device: str) -> torch.Tensor:
    """Return GARBAGE_POOL padding laws: Dirichlet(1) (normalised Exp(1)), + 1e-3, normalised: garbage_pool's law."""
    e = -torch.log1p(-torch.rand((GARBAGE_POOL, vocab), generator=generator, device=device, dtype=torch.float64))
    pool = e / e.sum(dim=1, keepdim=True) + 1e-3
    return pool / pool.sum(dim=1, keepdim=True)


class _Counts:
    """The device tallies of one block: round histograms and moments, joint and greedy counts."""

    def __init__(self, k: int, length: int, sinks: Sequence[Sink], device: str):
        self.accept = torch.zeros(2 * (k + 1), dtype=torch.int64, device=device)
        self.moments = torch.zeros(5, dtype=torch.float64, device=device)
        # whole sequences only (a batch mix prefixes a class column: its sink observes on the host)
        self.joint = next((s for s in sinks if type(s) is JointCounts and s.weights.size == length), None)
        self.greedy = next((s for s in sinks if type(s) is GreedyMatch), None)
        self.host = [s for s in sinks if s is not self.joint and s is not self.greedy]
        if self.joint is not None:
            self.weights = torch.as_tensor(self.joint.weights, device=device)
            self.cells = torch.zeros(self.joint.counts.size, dtype=torch.int64, device=device)
        if self.greedy is not None:
            self.expected = torch.as_tensor(self.greedy.expected, device=device)
            self.mismatched = torch.zeros((), dtype=torch.int64, device=device)
            self.first_diff = torch.zeros(length, dtype=torch.int64, device=device)
        self.length = length

    def observe(self, finished: torch.Tensor) -> None:
        """Tally finished sequences [n, L] on the device (host sinks get their ids)."""
        if self.joint is not None:
            self.cells += torch.bincount((finished * self.weights).sum(dim=1), minlength=self.cells.numel())
        if self.greedy is not None:
            diff = finished != self.expected[None, :]
            bad = diff.any(dim=1)
            self.mismatched += bad.sum()
            first = diff.to(torch.int8).argmax(dim=1)
            self.first_diff += torch.bincount(first[bad], minlength=self.length)
            g = self.greedy
            g.sequences += finished.shape[0]
            if len(g.examples) < EXAMPLES and bool(bad.any()):  # a failing verifier: a few rows for the report
                rows = finished[bad][: EXAMPLES - len(g.examples)]
                g.examples.extend([int(x) for x in row] for row in rows.cpu().tolist())
        if self.host:
            ids = finished.cpu().numpy()
            for sink in self.host:
                sink.observe(ids)

    def finish(self, rounds: torch.Tensor, tokens: torch.Tensor) -> None:
        """Add finished sequences' round and token totals to the moments."""
        r, t = rounds.to(torch.float64), tokens.to(torch.float64)
        self.moments += torch.stack([r.sum(), t.sum(), (r * r).sum(), (t * t).sum(), (r * t).sum()])

    def copy_back(self, stats: RoundStats) -> None:
        """Copy the counts to the host tallies (the only transfers of a block's results)."""
        k1 = stats.k + 1
        accept = self.accept.cpu().numpy()
        stats.accept_all += accept[:k1] + accept[k1:]
        stats.accept_first += accept[k1:]
        stats.moments += self.moments.cpu().numpy()
        if self.joint is not None:
            self.joint.counts += self.cells.cpu().numpy()
        if self.greedy is not None:
            self.greedy.mismatched += int(self.mismatched)
            self.greedy.first_diff += self.first_diff.cpu().numpy()


def _checked(result: Any, dx: torch.Tensor, nd: torch.Tensor, vocab: int, col: torch.Tensor,
             rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(out, n_out)`` on the device after the contract check; defer to the host check on doubt.

    ``dx`` is the drafts with a -1 column appended. A well-formed output equals the drafts before
    column n_out-1, the emitted token at it, and -1 after: one comparison, one scalar to the host.
    Anything else (numpy arrays, int32 ids, another device, a breach) goes to
    :func:`specaudit.contract.chain.validate_output`, which coerces it or names the clause.
    """
    if isinstance(result, (tuple, list)) and len(result) == 2:
        out, n_out = result
        if (
            isinstance(out, torch.Tensor) and isinstance(n_out, torch.Tensor)
            and out.dtype == torch.int64 and n_out.dtype == torch.int64
            and out.device == dx.device and n_out.device == dx.device
            and out.shape == dx.shape and n_out.shape == nd.shape
        ):
            acc = n_out - 1
            at = acc.clamp(0, dx.shape[1] - 1)
            last = out[rows, at]
            want = torch.where(col[None, :] < at[:, None], dx, -1)
            want[rows, at] = last
            ok = ((acc >= 0) & (acc <= nd)).all() & ((last >= 0) & (last < vocab)).all() & (out == want).all()
            if bool(ok):
                return out, n_out
    host = tuple(x.cpu().numpy() if isinstance(x, torch.Tensor) else x for x in result) \
        if isinstance(result, (tuple, list)) else result
    out_np, n_np = validate_output(host, dx[:, :-1].cpu().numpy(), nd.cpu().numpy(), vocab)
    return torch.as_tensor(out_np, device=dx.device), torch.as_tensor(n_np, device=dx.device)


def simulate(
    call: TensorCall,
    target: DeviceChain,
    draft: DeviceChain,
    plan: Plan,
    seed: np.random.SeedSequence,
    verifier_rng: np.random.Generator,
    sinks: Sequence[Sink] = (),
    progress: Callable[[int, int], None] | None = None,
    *,
    max_memory: int,
) -> RoundStats:
    """Generate ``plan.samples`` sequences through ``call`` on its device; return the round tallies.

    ``max_memory``: the bytes the batch may use there (:func:`batch_budget`).

    The device twin of :func:`specaudit.simulate.chain.simulate` (same continuous batching,
    padding and bookkeeping): ``seed`` seeds the device generator that draws drafts, draft
    counts and padding; ``verifier_rng`` is handed to the verifier. Raises ContractError on the
    first malformed output.
    """
    device, vocab = call.device, target.vocab
    k, length = len(plan.draft_law) - 1, plan.length
    generator = torch.Generator(device=device)
    generator.manual_seed(int(seed.generate_state(1, dtype=np.uint64)[0]) >> 1)
    with torch.inference_mode():
        pool = _pool(vocab, generator, device)
        target.with_pool(pool)
        draft.with_pool(pool)
        return _loop(call, target, draft, plan, generator, verifier_rng, sinks, progress,
                     max_memory, k, length)


def _loop(call: TensorCall, target: DeviceChain, draft: DeviceChain, plan: Plan, generator: torch.Generator,
          verifier_rng: np.random.Generator, sinks: Sequence[Sink], progress: Callable[[int, int], None] | None,
          max_memory: int, k: int, length: int) -> RoundStats:
    """Run the batches of :func:`simulate` (inside inference mode)."""
    device, vocab, verify = call.device, target.vocab, call.call
    dtype = target.rows.dtype
    stats = RoundStats(k)
    counts = _Counts(k, length, sinks, device)
    law = np.asarray(plan.draft_law, dtype=np.float64)
    fixed = int(np.argmax(law)) if np.count_nonzero(law) == 1 else None
    law_cdf = torch.as_tensor(np.cumsum(law)[:-1], device=device)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else None

    def ints(n: int, fill: int = 0) -> torch.Tensor:
        return torch.full((n,), fill, dtype=torch.int64, device=device)

    # lazy chains are driven as the host path drives them (specaudit.simulate.chain.simulate): a row drafts at
    # most the tokens its sequence still needs, and a call is as wide as its longest draft (K')
    lean = isinstance(target, _Zipf) or isinstance(draft, _Zipf)
    kmax = min(k, length - 1) if lean else k
    on_host = torch.device(device).type != "cuda"  # a device's buffers are allocated once: no per-call page faults
    width = max(1, min(plan.batch, plan.samples, rows_within(max_memory, vocab, kmax, target.rows.element_size(),
                                                             CALL_BYTES if on_host else None)))
    s_t, s_d = target.start_states(width), draft.start_states(width)
    pos, rounds, tokens = ints(width), ints(width), ints(width)
    buf = torch.zeros((width, length + k + 1), dtype=torch.int64, device=device)  # slack: a whole out row fits
    p_flat = torch.empty(width * (kmax + 1) * vocab, dtype=dtype, device=device)  # viewed as [n, K'+1, V]
    q_flat = torch.empty(width * kmax * vocab, dtype=dtype, device=device)
    at_t = torch.empty((width, kmax + 1), dtype=torch.int64, device=device)
    at_d = torch.empty((width, kmax + 1), dtype=torch.int64, device=device)
    d_flat = torch.empty(width * (kmax + 1), dtype=torch.int64, device=device)
    nd_fixed = ints(width, fixed if fixed is not None else 0)
    started, n = width, width
    row_stride = buf.shape[1]
    ragged = fixed is None or fixed < k or lean
    kc = k
    while n:
        rows = torch.arange(n, device=device)
        if fixed is not None:
            nd = nd_fixed[:n]
        else:
            nd = torch.searchsorted(law_cdf, torch.rand(n, generator=generator, device=device, dtype=torch.float64),
                                    right=True)
        if lean:
            nd = torch.minimum(nd, length - 1 - pos[:n])
            kc = int(nd.max())
        col = torch.arange(kc + 1, device=device)
        # drafts along the drafter's chain; the states at every draft position and the bonus
        dx = d_flat[: n * (kc + 1)].view(n, kc + 1)
        dx[:, kc] = -1
        ta, da = at_t[:n, : kc + 1], at_d[:n, : kc + 1]
        ct, cd = s_t[:n], s_d[:n]
        u = torch.rand((kc, n), generator=generator, device=device, dtype=torch.float64)
        for i in range(kc):
            ta[:, i], da[:, i] = ct, cd
            x = draft.sample(cd, u[i])
            dx[:, i] = x
            ct, cd = target.advance(ct, x), draft.advance(cd, x)
        ta[:, kc], da[:, kc] = ct, cd
        # p and q: one gather each from the rows' windows; padding positions read random pool rows
        p = p_flat[: n * (kc + 1) * vocab].view(n, kc + 1, vocab)
        q = q_flat[: n * kc * vocab].view(n, kc, vocab)
        if ragged:
            pad_p = col[None, :] > nd[:, None]
            pick = torch.randint(GARBAGE_POOL, (n, 2 * kc + 1), generator=generator, device=device)
            junk = torch.randint(vocab, (n, kc), generator=generator, device=device)
            dx[:, :kc] = torch.where(pad_p[:, 1:], junk, dx[:, :kc])
            target.fill(p.view(-1, vocab), ta.reshape(-1), pad_p.reshape(-1), pick[:, : kc + 1].reshape(-1))
            draft.fill(q.view(-1, vocab), da[:, :kc].reshape(-1), pad_p[:, 1:].reshape(-1), pick[:, kc + 1 :].reshape(-1))
        else:  # every row drafts K: no padding
            target.fill(p.view(-1, vocab), ta.reshape(-1), None, None)
            draft.fill(q.view(-1, vocab), da[:, :kc].reshape(-1), None, None)

        t0 = time.perf_counter()
        result = verify(dx[:, :kc].clone(), q, p, nd.clone(), verifier_rng)  # the verifier may write to its inputs
        if sync is not None:
            sync(device)
        stats.verifier_seconds += time.perf_counter() - t0
        stats.calls += 1
        out, n_out = _checked(result, dx, nd, vocab, col, rows)

        # bookkeeping: accept lengths, append emitted tokens, advance the context
        acc = n_out - 1
        p0 = pos[:n]
        counts.accept += torch.bincount(acc + (k + 1) * (p0 == 0), minlength=2 * (k + 1))
        here = rows * row_stride + p0
        buf.view(-1)[here[:, None] + col] = out  # junk past n_out is overwritten next round
        last = out[rows, acc]
        s_t[:n] = target.advance(ta[rows, acc], last)
        s_d[:n] = draft.advance(da[rows, acc], last)
        p0 += n_out
        rounds[:n] += 1
        tokens[:n] += n_out
        done = torch.nonzero(p0 >= length).reshape(-1)  # the finished rows' indices: the one per-call sync
        finished = done.numel()
        if not finished:
            continue
        counts.observe(buf[done, :length])
        counts.finish(rounds[done], tokens[done])
        stats.sequences += finished
        refill = done[: max(0, plan.samples - started)]
        if refill.numel():
            s_t[refill], s_d[refill] = target.start_states(refill.numel()), draft.start_states(refill.numel())
            pos[refill] = 0
            rounds[refill] = 0
            tokens[refill] = 0
            started += refill.numel()
        if refill.numel() < finished:  # drain: keep the unfinished slots, compacted in front
            keep = torch.ones(n, dtype=torch.bool, device=device)
            keep[done[refill.numel():]] = False
            live = torch.nonzero(keep).reshape(-1)
            m = live.numel()
            for arr in (s_t, s_d, pos, rounds, tokens, buf):
                arr[:m] = arr[live]
            n = m
        if progress is not None:
            progress(stats.sequences, plan.samples)
    counts.copy_back(stats)
    return stats


class DevicePath:
    """A chain scenario's device path: the verifier's tensor form and the device forms of its chains.

    Built in the process that will measure (the engine's Bench): the device tables are made on the
    first block, so forked workers make their own (a CUDA context does not survive a fork).
    """

    def __init__(self, call: TensorCall, target: Any, draft: Any, max_device_memory: int | None = None):
        self.call, self.device, self.dtype = call, call.device, call.dtype
        self.max_device_memory = max_device_memory
        self.budget: int | None = None  # the bytes the last block's batch was sized from (batch_budget)
        self._host = (target, draft)
        for chain in self._host:  # refuse a chain without a device form before anything runs
            if device_form(chain) is None:
                device_chain(chain, "cpu", torch.float64)
        self._chains: tuple[DeviceChain, DeviceChain] | None = None

    def chains(self) -> tuple[DeviceChain, DeviceChain]:
        """Return the device forms of the target and the drafter (made on first use)."""
        if self._chains is None:
            dtype = getattr(torch, self.dtype)
            target, draft = self._host
            self._chains = (device_chain(target, self.device, dtype), device_chain(draft, self.device, dtype))
        return self._chains

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the device tables (Ray): the receiving process makes its own."""
        return {**self.__dict__, "_chains": None}

    def simulate(self, plan: Plan, seed: np.random.SeedSequence, verifier_rng: np.random.Generator,
                 sinks: Sequence[Sink], progress: Callable[[int, int], None] | None, max_memory: int) -> RoundStats:
        """Simulate one block (:func:`simulate`) on this path's device."""
        target, draft = self.chains()
        self.budget = batch_budget(self.device, max_memory, self.max_device_memory)
        return simulate(self.call, target, draft, plan, seed, verifier_rng, sinks, progress, max_memory=self.budget)
