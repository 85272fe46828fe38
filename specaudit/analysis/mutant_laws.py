"""Mutant laws: a zoo mutant's law of whole sequences on a scenario, with one simulation path and one cache.

Power (:mod:`specaudit.analysis.power`), planning (:mod:`specaudit.analysis.plan`) and diagnosis
(:mod:`specaudit.analysis.diagnose`) all ask the same question: what does mutant M's output look
like on scenario S? This module answers it once:

* :func:`mutant_law` / :func:`mutant_joint_law`: the law over the V**L joint cells (a batch mix:
  the C x V**L (class, sequence) cells, :func:`joint_cells`, each class's law weighted), exact by
  dynamic programme for the mutants whose bug is a change of the per-position kernels
  (:mod:`specaudit.laws.mutants`), the target law for lossless ones (kinds ``lossless-control``
  and ``boundary``: right law almost surely), else simulated once with :data:`LAW_SAMPLES`
  sequences over the scenario's blocks (:func:`specaudit.simulate.blocks.run_blocks`, exactly the
  counts a run of the mutant would measure) and cached. A simulated law's noncentrality is
  bias-corrected downstream (``E[(r^_g - p_g)^2] = (r_g - p_g)^2 + r_g (1 - r_g) / M``).
  ``reused_uniforms`` makes the rows of a batch dependent: the per-sequence law is right and
  X^2 is overdispersed rather than noncentral, so no power is modelled for it;
* :func:`simulated_provider` / :func:`default_provider`: the *law providers* of the diagnosis,
  ``(scenario, mutant) -> {feature: probabilities}`` for the joint law and the first round's
  accepted-count law, simulated in one call of :func:`specaudit.simulate.chain.simulate`, with
  the exact joint law substituted where :func:`mutant_joint_law` has one.

Cache policy
------------
Every law is remembered in memory for the life of the process (one dictionary, keyed by what
the law depends on). Simulated joint counts are also cached on disk, keyed by the scenario's
content hash, the specaudit version, the mutant name, the sample count and the seed, in the cache
folder of :mod:`specaudit.results.cache` (``$SPECAUDIT_CACHE``, default ``$XDG_CACHE_HOME/specaudit`` or
``~/.cache/specaudit``; ``SPECAUDIT_CACHE=off`` disables it). Files are written atomically and are safe to
delete at any time; each is a ``.npy`` array followed by the SHA-256 of its data, and a file
whose header, size or checksum is wrong is ignored with a one-line warning and recomputed. A cold cache costs about 0.25 s per simulated (mutant, scenario) pair at
200,000 sequences; a warm one nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import sys
import zlib
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from specaudit import __version__
from specaudit.chains.serving import MixedChain, class_chains
from specaudit.chains.tabular import TabularChain
from specaudit.checks.statistical import wants_joint
from specaudit.contract import logits as contract_logits
from specaudit.errors import SpecauditError, UsageError
from specaudit.laws import algorithm_of
from specaudit.laws import chain as exact
from specaudit.laws.mutants import KERNELS, chain_law
from specaudit.results.cache import CHECKSUM_TAG, TRAILER_BYTES, cache_dir, write_entry
from specaudit.scenarios.schema import MAX_JOINT_CELLS, Scenario, to_data
from specaudit.simulate.blocks import run_blocks
from specaudit.simulate.chain import Plan, simulate
from specaudit.simulate.tallies import JointCounts
from specaudit.stats.power import VERIFY_REPS, detectable_tv
from specaudit.verifiers.zoo import chain as chain_zoo
from specaudit.verifiers.zoo import vocab as vocab_zoo

__all__ = [
    "DEPENDENT",
    "DIAGNOSIS_SAMPLES",
    "LAW_SAMPLES",
    "LAW_SEED",
    "LawProvider",
    "Laws",
    "MutantLaw",
    "cached_detectable_tv",
    "default_provider",
    "is_chain",
    "joint_cells",
    "PLANNED_ZOOS",
    "mutant_entry",
    "mutant_joint_law",
    "mutant_law",
    "simulated_provider",
    "simulation_seed",
]

#: Sequences simulated per mutant law when it cannot be computed exactly.
LAW_SAMPLES = 200_000
#: Seed of those simulations (mixed with the scenario's content hash and the mutant's name).
LAW_SEED = 20240603
#: Exact laws are enumerated while (V**L cells) x (joint states) x (K + 1) stays below this.
ENUMERATE_LIMIT = 1 << 24
#: Sequences simulated per mutant by the diagnosis's default provider.
DIAGNOSIS_SAMPLES = 50_000

Laws = Mapping[str, np.ndarray]
LawProvider = Callable[[Scenario, str], "Laws | None"]

_T = TypeVar("_T")
#: The in-memory cache of every law this module computes, keyed by what the law depends on.
_LAWS: dict[Hashable, Any] = {}


def _remember(key: Hashable, compute: Callable[[], _T]) -> _T:
    """Return the law cached under ``key``, computing it once."""
    if key not in _LAWS:
        _LAWS[key] = compute()
    return _LAWS[key]


# ---------------------------------------------------------------------------------------------
# Joint laws of the chain zoo (exact, lossless, simulated)
# ---------------------------------------------------------------------------------------------

#: Mutants whose rows share randomness: one sequence's law is right, X^2 is overdispersed.
DEPENDENT = {"reused_uniforms": "rows of a batch share their uniforms: sequences are dependent"}


@dataclass(frozen=True, eq=False)
class MutantLaw:
    """A mutant's law of whole sequences on one scenario, and how it was obtained."""

    name: str
    kind: str
    probs: np.ndarray | None  # [V**L]; None when unavailable
    method: str  # "exact", "lossless", "simulated", "dependent", "unavailable"
    samples: int | None = None  # simulated sequences (bias correction); None when exact
    note: str = ""


#: The zoos whose mutants have a joint law here: they take the canonical call, or q in draft space (its contract).
PLANNED_ZOOS = ("chain", "draft-vocab")


def mutant_entry(name: str) -> Any:
    """Return the chain (or draft-vocabulary) mutant ``name``; raise UsageError with the chain zoo's closest name otherwise."""
    try:
        return chain_zoo.get(name)
    except KeyError as exc:
        if name in vocab_zoo.MUTANTS:
            return vocab_zoo.MUTANTS[name]
        raise UsageError(str(exc.args[0])) from None


def is_chain(spec: Scenario) -> bool:
    """Return True when the zoo (written in the chain contract) applies to the scenario."""
    return algorithm_of(spec) == "chain" and wants_joint(spec)


def joint_cells(spec: Scenario) -> int:
    """Return the cells of the scenario's joint law: V**L, times the classes of a batch mix ((class, sequence) cells)."""
    return (len(spec.mix) if spec.mix is not None else 1) * spec.joint_cells


def _joint_counts(spec: Scenario) -> JointCounts:
    """Return empty joint counts of the scenario's cells (a batch mix, even of one class: rows with a class column)."""
    classes = len(spec.mix) if spec.mix is not None else 1
    return JointCounts(spec.vocab, spec.length, classes, mixed=spec.mix is not None)


def _cache_file(spec: Scenario, name: str, samples: int, seed: int) -> Path | None:
    """Return the disk cache file of a simulated law, or None when the disk cache is off."""
    root = cache_dir()
    if root is None:
        return None
    return root / "mutant-laws" / __version__ / f"{spec.content_hash()}-{name}-{samples}-{seed}.npy"


#: Largest .npy header read (numpy's own bound); a file claiming more is not one of ours.
_MAX_HEADER = 10_000


class _Unchecked(Exception):
    """A cache file of the format without checksum: recomputed quietly."""


def _read_cache(path: Path, cells: int, dtype: str = "<i8") -> np.ndarray:
    """Return the array of a cache file, checked before anything is allocated; raise ValueError saying why not.

    The header must announce exactly ``cells`` entries of ``dtype`` (a header claiming 10**11
    entries is refused, not allocated), the file must be exactly header + data + checksum trailer
    long (a truncated or padded file is refused), and the data must match its SHA-256; counts
    (int64) must be counts, floats finite and non-negative.
    """
    item = np.dtype(dtype).itemsize
    size = path.stat().st_size
    if size > _MAX_HEADER + item * cells + TRAILER_BYTES:
        raise ValueError(f"{size:,} bytes, more than {cells:,} entries take")
    with path.open("rb") as fh:
        version = np.lib.format.read_magic(fh)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, found = read_header(fh, max_header_size=_MAX_HEADER)
        if tuple(shape) != (cells,) or found != np.dtype(dtype) or fortran:
            raise ValueError(f"header claims {found} of shape {tuple(shape)}; expected {np.dtype(dtype)} of shape ({cells},)")
        if size == fh.tell() + item * cells:
            raise _Unchecked  # written before cache files carried a checksum: recomputed, nothing is wrong
        if size != fh.tell() + item * cells + TRAILER_BYTES:
            raise ValueError(f"{size:,} bytes, not the {fh.tell() + item * cells + TRAILER_BYTES:,} of its header (truncated?)")
        data = fh.read(item * cells)
        trailer = fh.read()
    if not trailer.startswith(CHECKSUM_TAG) or trailer[len(CHECKSUM_TAG):] != hashlib.sha256(data).hexdigest().encode():
        raise ValueError("checksum does not match its data")
    values = np.frombuffer(data, dtype=dtype)
    if values.dtype.kind == "i":
        counts = values.astype(np.int64)
        if counts.min(initial=0) < 0 or counts.sum() <= 0:
            raise ValueError("counts negative or all zero")
        return counts
    floats = values.astype(np.float64)
    if not (np.isfinite(floats) | np.isposinf(floats)).all() or (floats <= 0).any():  # a TV detectable at finite n is > 0
        raise ValueError("values NaN, zero or negative")
    return floats


def _load_array(path: Path | None, cells: int, dtype: str = "<i8") -> np.ndarray | None:
    """Return a cached array, or None when absent or bad (a bad file is reported in one line and recomputed)."""
    try:
        if path is None or not path.is_file():
            return None
        return _read_cache(path, cells, dtype)
    except _Unchecked:
        return None
    except (OSError, ValueError, EOFError, SyntaxError, RecursionError) as exc:  # numpy's header parser raises these
        # one line on stderr, whoever configured logging: a bad cache costs time, never the run
        print(f"specaudit: warning: ignored cache file {path} ({exc}); recomputing it", file=sys.stderr)
        return None


def _store_array(path: Path | None, counts: np.ndarray, dtype: str = "<i8") -> None:
    """Write an array (counts or floats) atomically with its checksum; a read-only or full disk only costs the cache."""
    if path is None:
        return
    data = np.ascontiguousarray(counts, dtype=dtype)
    buf = io.BytesIO()
    np.save(buf, data, allow_pickle=False)
    buf.write(CHECKSUM_TAG + hashlib.sha256(data.tobytes()).hexdigest().encode())  # of the data: read before use
    write_entry(path, buf.getvalue())


def cached_detectable_tv(probs: np.ndarray, n: int, alpha: float, power: float) -> float:
    """Return :func:`specaudit.stats.power.detectable_tv`, from the disk cache when computed before.

    Its simulation check (thousands of multinomial replicates in the least-favourable direction)
    is most of a small run's power figures; the answer depends only on the law, n, the level and
    the power (the replicates have a fixed seed), which key the file.
    """
    probs = np.ascontiguousarray(probs, dtype=np.float64)
    root = cache_dir()
    key = hashlib.sha256(probs.tobytes() + repr((int(n), float(alpha), float(power), VERIFY_REPS)).encode()).hexdigest()
    path = None if root is None else root / "detectable-tv" / __version__ / f"{key[:40]}.npy"
    cached = _load_array(path, 1, "<f8")
    if cached is not None:
        return float(cached[0])
    tv = detectable_tv(probs, n, alpha, power)
    _store_array(path, np.array([tv]), "<f8")
    return tv


def simulation_seed(spec: Scenario, name: str, seed: int) -> int:
    """Return the run seed a simulated law uses: ``seed`` mixed with the scenario's content hash and the mutant's name."""
    mixed = np.random.SeedSequence([seed, int(spec.content_hash(), 16), zlib.crc32(name.encode())])
    return int(mixed.generate_state(1, dtype=np.uint32)[0])


def _simulated_counts(spec: Scenario, name: str, samples: int, seed: int) -> np.ndarray:
    """Simulate the mutant for ``samples`` sequences over the scenario's blocks; return the joint counts.

    The counts are those a run of the mutant on ``spec`` (``samples`` sequences, the mixed seed)
    measures: the same blocks, seeds and sinks (:func:`specaudit.simulate.blocks.run_blocks`).
    """
    if spec.mode == "greedy" or not wants_joint(spec):  # a greedy run measures matches, not joint counts
        raise UsageError(f"scenario {spec.name}: no joint counts to estimate a law from")
    joint = _joint_counts(spec)
    entry = mutant_entry(name)
    run_blocks(entry.func, dataclasses.replace(spec, samples=samples), simulation_seed(spec, name, seed), [joint],
               contract=entry.contract)
    return joint.counts.copy()


def _compute_law(spec: Scenario, name: str, samples: int, seed: int) -> MutantLaw:
    """Return the mutant's joint law: dependent, lossless, exact (kernel mutants) or simulated."""
    entry = mutant_entry(name)
    target, draft = spec.chains()
    cells = joint_cells(spec)
    if name in DEPENDENT:
        return MutantLaw(name, entry.kind, None, "dependent", None, DEPENDENT[name])
    if entry.kind in ("lossless-control", "boundary"):
        note = "lossless by construction" if entry.kind == "lossless-control" else "lossless except at adversarial uniforms"
        return MutantLaw(name, entry.kind, exact.joint_probabilities(target, spec.length), "lossless", None, note)
    probs = _kernel_law(spec, target, draft, name)
    if probs is not None:
        return MutantLaw(name, entry.kind, probs, "exact", None, "per-position kernel, enumerated")
    path = _cache_file(spec, name, samples, seed)
    counts = _load_array(path, cells)
    if counts is None:
        try:
            counts = _simulated_counts(spec, name, samples, seed)
        except SpecauditError as exc:  # a contract breach or crash: the check sees that, not a law
            return MutantLaw(name, entry.kind, None, "unavailable", None, f"simulation failed: {exc}")
        _store_array(path, counts)
    return MutantLaw(name, entry.kind, counts / counts.sum(), "simulated", int(counts.sum()), f"simulated, {samples:,} sequences")


def _kernel_law(spec: Scenario, target: TabularChain, draft: TabularChain, name: str) -> np.ndarray | None:
    """Return a kernel mutant's exact joint law, or None (not a kernel mutant, or too large to enumerate).

    A batch mix's request keeps its class, and a kernel mutant acts on each row's (p, q) alone,
    so its law is class ``c``'s chain law weighted ``w_c`` in the cells ``c * V**L + sequence``,
    the layout of :func:`specaudit.laws.chain.joint_probabilities`.
    """
    if name not in KERNELS:
        return None
    pairs = list(zip(class_chains(target), class_chains(draft)))
    size = sum(spec.joint_cells * t.n_states * d.n_states * (spec.k + 1) for t, d in pairs)
    if size > ENUMERATE_LIMIT:
        return None
    laws = [chain_law(t, d, spec.draft_law, spec.length, KERNELS[name]) for t, d in pairs]
    if isinstance(target, MixedChain):
        return np.concatenate([w * law for w, law in zip(target.weights.tolist(), laws)])
    return laws[0]


def mutant_law(spec: Scenario, name: str, samples: int = LAW_SAMPLES, seed: int = LAW_SEED) -> MutantLaw:
    """Return mutant ``name``'s law of whole sequences on ``spec``, with how it was obtained.

    Parameters
    ----------
    spec : Scenario
        A chain scenario whose joint law is enumerable (V**L <= MAX_JOINT_CELLS).
    name : str
        A registered mutant (``specaudit.verifiers.zoo.chain.MUTANTS``).
    samples, seed : int
        Simulation size and seed, used only when the law is not computed exactly.

    Returns
    -------
    MutantLaw
        ``probs`` over :func:`joint_cells` cells (a batch mix: (class, sequence) cells, as
        :func:`specaudit.laws.chain.joint_probabilities`).
        ``method`` is "exact" (kernel mutants), "lossless" (target law), "simulated" (cached),
        "dependent" (no per-sequence law models the bug; ``probs`` None) or "unavailable".
    """
    if not is_chain(spec):
        raise UsageError(
            f"scenario {spec.name}: mutant laws need a chain scenario with a joint-law check "
            f"(V**L <= {MAX_JOINT_CELLS:,} cells, not lazy)"
        )
    samples, seed = int(samples), int(seed)
    key = ("joint", spec.content_hash(), __version__, name, samples, seed)
    return _remember(key, lambda: _compute_law(spec, name, samples, seed))


def mutant_joint_law(spec: Scenario, mutant_name: str, samples: int = LAW_SAMPLES, seed: int = LAW_SEED) -> np.ndarray:
    """Return mutant ``mutant_name``'s probability of every V**L sequence on ``spec``.

    Parameters
    ----------
    spec : Scenario
        A chain scenario with an enumerable joint law.
    mutant_name : str
        A registered mutant.
    samples, seed : int
        Simulation size and seed when the law is not exact (see :func:`mutant_law`).

    Returns
    -------
    ndarray
        Shape ``[V**L]`` (a batch mix: ``[C * V**L]``), indexed like
        :func:`specaudit.laws.chain.joint_probabilities`. For a
        mutant whose bug is dependence between rows (``reused_uniforms``) the simulated
        per-sequence law is returned (it is close to the target's).
    """
    law = mutant_law(spec, mutant_name, samples, seed)
    if law.probs is not None:
        return law.probs
    if law.method == "dependent":
        path = _cache_file(spec, mutant_name, int(samples), int(seed))
        counts = _load_array(path, joint_cells(spec))
        if counts is None:
            counts = _simulated_counts(spec, mutant_name, int(samples), int(seed))
            _store_array(path, counts)
        return counts / counts.sum()
    raise UsageError(f"mutant {mutant_name} on {spec.name}: no law ({law.note})")


# ---------------------------------------------------------------------------------------------
# Feature laws for the diagnosis (law providers)
# ---------------------------------------------------------------------------------------------


def _simulate_laws(spec: Scenario, mutant: str, samples: int, seed: int) -> dict[str, np.ndarray]:
    """Return a mutant's simulated feature laws (the joint law and the first round's accepted counts)."""
    # the chain zoo speaks the probs contract: logits chains hand it their processed law (as a run does)
    verify, target, draft = contract_logits.prepare(chain_zoo.get(mutant).func, "probs", *spec.chains())
    joint = _joint_counts(spec) if wants_joint(spec) else None
    harness_ss, verifier_ss = np.random.SeedSequence([seed, samples]).spawn(2)
    rounds = simulate(
        verify,
        target,
        draft,
        Plan(spec.length, samples, spec.batch, spec.draft_law),
        np.random.default_rng(harness_ss),
        np.random.default_rng(verifier_ss),
        sinks=[joint] if joint is not None else [],
    )
    laws = {"accept-length": rounds.accept_first / max(rounds.accept_first.sum(), 1)}
    if joint is not None:
        laws["joint-law"] = joint.counts / max(joint.counts.sum(), 1)
    return laws


def simulated_provider(samples: int = DIAGNOSIS_SAMPLES, seed: int = 0) -> LawProvider:
    """Return a provider that simulates each mutant for ``samples`` sequences (once per scenario and mutant)."""

    def provide(spec: Scenario, mutant: str) -> Laws | None:
        base = dataclasses.replace(spec, samples=1, seed=0)  # the law does not depend on them
        key = json.dumps(to_data(base), sort_keys=True)
        return _remember(("features", key, mutant, samples, seed), lambda: _simulate_laws(base, mutant, samples, seed))

    provide.samples = samples  # type: ignore[attr-defined]  # the noise level, for the significance filter
    return provide


def default_provider(samples: int = DIAGNOSIS_SAMPLES, seed: int = 0) -> LawProvider:
    """Return the simulated provider, with the exact joint law of :func:`mutant_joint_law` where it has one."""
    simulated = simulated_provider(samples, seed)

    def provide(spec: Scenario, mutant: str) -> Laws | None:
        laws = dict(simulated(spec, mutant) or {})
        try:
            joint = mutant_joint_law(spec, mutant)
        except Exception:  # noqa: BLE001 - no exact law for this mutant/scenario: keep the simulated one
            joint = None
        if joint is not None and "joint-law" in laws and np.shape(joint) == np.shape(laws["joint-law"]):
            laws["joint-law"] = np.asarray(joint, dtype=np.float64)
        return laws

    provide.samples = samples  # type: ignore[attr-defined]
    return provide
