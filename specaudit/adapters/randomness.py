"""Random sources: route every global random source to the run's rng for one call (:func:`routed`).

The harness hands a verifier one numpy ``rng``; code under test often draws from somewhere else:
torch (the global generator, a ``torch.Generator`` it is handed, ``torch.rand_like``,
``torch.multinomial``), numpy's legacy global RNG (``np.random.random``, ``np.random.rand``,
``np.random.uniform``, ``np.random.choice``...) or Python's ``random``. :func:`routed` routes all
three to ``rng`` for the duration of a call, so a wrapper is one line::

    def verify(draft, q, p, num_draft, rng):
        with specaudit.adapters.randomness.routed(rng):
            return my_verifier(draft, q, p, num_draft)

Every built-in adapter uses it. For an ordinary rng it draws one 63-bit seed from ``rng`` and
seeds torch's global generator (torch only when already imported), numpy's legacy global RNG and
Python's ``random`` from it, restoring their states after the call, so a run is reproducible from
its seed and the caller's global state is left alone; it yields the seed for an explicit
``torch.Generator``. For a *scripted* rng (the adversarial-uniform probe hands the verifier a
Generator-like object whose draws are chosen, 0.0 and 1 - 2**-53) it substitutes the draw
functions for the duration of the call, so the chosen values reach the framework's own code:

- torch: ``torch.rand``, ``torch.rand_like`` and ``Tensor.uniform_`` return the scripted uniforms
  (rounded *down* into [0, 1) of the tensor's dtype: a float32 generator never returns 1);
  ``Tensor.exponential_`` returns ``-log(1 - u) / lambd`` (inverse CDF of the exponential), but
  never less than the smallest value torch's own kernel returns (:func:`exponential_floor`: torch
  documents that ``exponential_`` never samples 0, and a caller may divide by it);
  ``torch.multinomial`` / ``Tensor.multinomial`` (and so ``torch.distributions.Categorical``)
  draw by inverse CDF on the given weights at one scripted uniform per sample: the smallest index
  whose cumulative weight exceeds ``u * total``, never an index of weight 0. This models what a
  correct sampler returns at extreme uniforms; it replaces torch's own sampling algorithm (an
  exponential race), so a scripted check tests the caller, not torch's kernel. Any
  ``generator=`` argument is ignored while scripted: every draw comes from the script.
- numpy's legacy global RNG: ``np.random.random`` (``random_sample``, ``sample``, ``ranf``),
  ``rand``, ``uniform``, ``choice``, ``randint``, ``exponential``, ``standard_exponential`` call
  the scripted rng's methods of the same meaning.
- Python's ``random``: ``random.random`` and everything the module's shared instance derives from
  it (``uniform``, ``choices``, ...) take scripted uniforms; ``randint``, ``randrange``,
  ``choice`` and ``shuffle`` take ``floor(u * n)``.

What cannot be routed: a generator the verifier builds itself (``np.random.default_rng(0)``,
``random.Random()``, a ``torch.Generator`` with its own seed) and a function imported by name
before the call (``from numpy.random import rand``). The determinism probe names the first two;
the adversarial probe reports "not applicable" when the scripted uniforms do not reach the
acceptance step.

Compiled code. While scripted, torch runs every ``torch.compile``'d function eagerly
(``torch.compiler.set_stance("force_eager")``, torch >= 2.6): its Python source then makes the
scripted draws, and nothing is traced during a scripted call, so no scripted value is frozen into
a compiled graph that later calls would reuse. Code that draws past the routing (TorchScript, a
custom or Triton kernel, an op not scripted here such as ``randn`` or ``randperm``, a numpy or
``random`` function bound before the call) advances a real generator; each scripted call compares
torch's default generator (and the device's), numpy's legacy global RNG, Python's ``random`` and
any generator given to :func:`watched` before and after, and :func:`bypassed` names those that
moved: the probe then says the scripted values did not reach the verifier instead of passing it.
:func:`op_draws` counts the scripted draws per torch op (``torch.rand``, ``Tensor.exponential_``...).

Triton kernels. Under ``TRITON_INTERPRET=1`` (a machine without a GPU, where specaudit runs an
engine's Triton kernels in Triton's interpreter) a scripted call also routes ``tl.rand`` to the
script (:func:`_triton_rand`), so the probes reach uniforms drawn inside a kernel (vLLM's Model
Runner V2); a kernel compiled for a GPU draws out of reach (:data:`TRITON_UNREACHABLE`).

Threads. The global sources are process-wide, so :func:`routed` holds one re-entrant lock for the
duration of the call (concurrent routed calls run one at a time, each on its own seed or script),
and a scripted substitute serves only the thread that entered it: another thread calling
``torch.rand`` meanwhile gets torch's own function. Code outside ``routed`` that draws from the
same global sources concurrently still shares them.
"""

from __future__ import annotations

import contextlib
import random as _pyrandom
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from specaudit.contract.uniforms import ScriptedUniforms

#: Marker attribute: an rng whose class sets ``scripted = True`` yields chosen uniforms.
SCRIPTED_MARKER = "scripted"

#: Held for the whole of a routed call: the sources it seeds or scripts are process-wide.
_LOCK = threading.RLock()
#: This thread's scripted sources, innermost last (a substitute serves only the thread that entered it).
_LOCAL = threading.local()


def _current() -> Any:
    """Return this thread's innermost scripted rng, or None (another thread's script is not ours)."""
    stack = getattr(_LOCAL, "stack", None)
    return stack[-1] if stack else None


@contextlib.contextmanager
def _scripting(rng: Any) -> Iterator[None]:
    """Make ``rng`` this thread's current scripted source while the block runs."""
    stack = _LOCAL.__dict__.setdefault("stack", [])
    stack.append(rng)
    try:
        yield
    finally:
        stack.pop()


def _record(rng: Any, name: str) -> Any:
    """Return the dict ``name`` kept on ``rng`` (created empty), or a throwaway one when ``rng`` takes no attributes."""
    try:
        return rng.__dict__.setdefault(name, {})
    except AttributeError:  # a C-level object: nothing to record on
        return {}


def op_draws(rng: Any) -> dict[str, int]:
    """Return the scripted draws per torch op made from ``rng`` so far (``{"torch.rand": 99, ...}``)."""
    return dict(getattr(rng, "_op_draws", {}))


def bypassed(rng: Any) -> dict[str, int]:
    """Return the real generators that advanced during scripted calls on ``rng``: name -> number of calls.

    A draw that advanced one was not scripted: compiled code (TorchScript, a custom kernel), an op
    the routing does not script (``torch.randn``, ``torch.randperm``...), or a function bound
    before the call.
    """
    return dict(getattr(rng, "_bypassed", {}))


@contextlib.contextmanager
def harness_draws(rng: Any) -> Iterator[None]:
    """Count the scripted uniforms drawn in the block as the harness's own, not the verifier's.

    An adapter that samples something outside the code it drives (vLLM's bonus token is drawn by
    vLLM's ordinary sampler, so the adapter draws it) wraps those draws in this block: they are
    counted under ``counts["harness"]`` and never as a coin that reached the acceptance step
    (:attr:`specaudit.contract.uniforms.ScriptedUniforms.coins`).
    """
    counts = getattr(rng, "counts", None) if is_scripted(rng) else None
    if counts is None:
        yield
        return
    before = dict(counts)
    try:
        yield
    finally:
        for method in list(counts):
            moved = counts[method] - before.get(method, 0)
            if moved and method != "harness":
                counts[method] -= moved
                counts["harness"] = counts.get("harness", 0) + moved


def hashed_replacements(rng: Any, how: str) -> None:
    """Record on a scripted ``rng`` that the verifier draws its replacement tokens from no random source at all.

    A kernel that samples a replacement by a Gumbel race over a *hash* of (seed, position, token)
    (vLLM Model Runner V2's ``_resample_kernel``) draws nothing a script can reach; the adapter says
    so here, ``how`` naming it, and the adversarial probe then counts reach at the acceptance step
    only (one scripted uniform per tested draft) and says which draws were not scripted.
    """
    if is_scripted(rng):
        _record(rng, "_hashed")["replacements"] = how


def out_of_reach(rng: Any, why: str) -> None:
    """Record on a scripted ``rng`` why the verifier's draws cannot be scripted at all (a GPU kernel's ``tl.rand``)."""
    if is_scripted(rng):
        _record(rng, "_hashed")["unreachable"] = why


def unreachable(rng: Any) -> str | None:
    """Return why the verifier's draws are out of the script's reach (:func:`out_of_reach`), or None."""
    return getattr(rng, "_hashed", {}).get("unreachable")


def hashed(rng: Any) -> str | None:
    """Return how the verifier drew its replacements outside any random source (:func:`hashed_replacements`), or None."""
    return getattr(rng, "_hashed", {}).get("replacements")


def _bypass(rng: Any, source: str) -> None:
    record = _record(rng, "_bypassed")
    record[source] = record.get(source, 0) + 1


def _tally(rng: Any, op: str, n: int) -> None:
    record = _record(rng, "_op_draws")
    record[op] = record.get(op, 0) + int(n)


def is_scripted(rng: Any) -> bool:
    """Return True for a scripted-uniform source: a ``specaudit.contract.uniforms.ScriptedUniforms``, or
    any object whose class sets ``scripted = True`` and has ``random(size)``."""
    if getattr(type(rng), SCRIPTED_MARKER, False) is True:
        return True
    return isinstance(rng, ScriptedUniforms)


def seed_from(rng: Any) -> int:
    """Draw a 63-bit torch seed from a numpy Generator (0 for a scripted source: it is not used)."""
    if is_scripted(rng):
        return 0
    return int(rng.integers(0, 2**63 - 1))


def _uniforms(rng: Any, shape: tuple[int, ...], dtype: Any, device: Any, op: str = "") -> Any:
    """Return scripted uniforms of ``shape`` as a tensor, rounded down into [0, 1) of ``dtype``."""
    import torch

    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    values = np.asarray(rng.random(count), dtype=np.float64).reshape(shape)
    if op:
        _tally(rng, op, count)
    dtype = dtype or torch.get_default_dtype()
    t = torch.from_numpy(values).to(dtype=dtype)
    below_one = torch.tensor(1.0 - torch.finfo(dtype).eps / 2, dtype=dtype)
    t = torch.where(t >= 1, below_one, t)
    return t.to(device) if device is not None else t


def exponential_floor(dtype: Any, device: Any, lambd: float = 1.0) -> float:
    """Return the smallest value torch's ``exponential_`` returns for ``dtype`` on ``device`` (never 0).

    torch documents that ``Tensor.exponential_`` never samples 0 (its docs, 2.13). On the CPU
    (MKL build, aten/src/ATen/native/cpu/DistributionKernels.cpp) the variate is shifted by
    ``numeric_limits<T>::min()``: the smallest is ``finfo(dtype).tiny``, whatever ``lambd``; on
    CUDA (aten/src/ATen/core/TransformationHelper.h ``exponential``) and in inductor's
    decomposition (torch/_decomp/decompositions.py ``exponential``) ``log(u)`` is clamped to
    ``-eps/2``: the smallest is ``eps / 2 / lambd``. A scripted 0.0 would be a value torch never
    returns (``p / e`` is then NaN or inf, a false alarm), so u = 0 maps to this floor instead.
    """
    import torch

    info = torch.finfo(dtype)
    if str(device).startswith("cpu"):
        return float(info.tiny)
    return float(info.eps) / 2.0 / float(lambd)


def _shape(size: tuple[Any, ...]) -> tuple[int, ...]:
    """Accept ``rand(2, 3)``, ``rand((2, 3))``, ``rand([2, 3])`` and ``rand(torch.Size(...))``."""
    if len(size) == 1 and hasattr(size[0], "__len__"):
        size = tuple(size[0])
    return tuple(int(s) for s in size)


def inverse_cdf(weights: np.ndarray, u: float) -> int:
    """Return the smallest index whose cumulative weight exceeds ``u * total``, never one of weight 0."""
    cum = np.cumsum(weights, dtype=np.float64)
    idx = int((cum <= u * cum[-1]).sum())
    last = int(np.flatnonzero(weights > 0)[-1])
    return min(idx, last)


def _multinomial(rng: Any, probs: Any, num_samples: int, replacement: bool) -> Any:
    import torch

    weights = probs.detach().to("cpu", torch.float64).numpy()
    flat = weights.reshape(-1, weights.shape[-1])
    if not np.all(np.isfinite(flat)) or np.any(flat < 0):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if np.any(flat.sum(axis=1) <= 0):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    if not replacement and num_samples > flat.shape[1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    out = np.empty((flat.shape[0], num_samples), dtype=np.int64)
    for r, row in enumerate(flat):
        w = row.copy()
        for s in range(num_samples):
            if w.sum() <= 0:
                raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
            out[r, s] = inverse_cdf(w, float(rng.random(1)[0]))
            if not replacement:
                w[out[r, s]] = 0.0
    result = torch.from_numpy(out.reshape(*weights.shape[:-1], num_samples))
    return result.to(probs.device)


def _scripted_torch_patches(torch: Any) -> list[tuple[Any, str, Any]]:
    """Return (owner, name, substitute) for every torch draw that a scripted call routes.

    Each substitute serves this thread's current scripted rng and calls torch's own function
    otherwise (another thread, or no script): installed once, they never cross threads.
    """
    real = {f"{obj.__name__}.{name}": getattr(obj, name) for obj, name in _torch_draws(torch)}

    def rand(*size: Any, generator: Any = None, dtype: Any = None, device: Any = None, **kw: Any) -> Any:
        rng = _current()
        if rng is None:
            return real["torch.rand"](*size, generator=generator, dtype=dtype, device=device, **kw)
        return _uniforms(rng, _shape(size or (kw["size"],)), dtype, device, "torch.rand")

    def rand_like(input: Any, *a: Any, dtype: Any = None, device: Any = None, **kw: Any) -> Any:  # `input`: torch's own parameter name
        rng = _current()
        if rng is None:
            return real["torch.rand_like"](input, *a, dtype=dtype, device=device, **kw)
        return _uniforms(rng, tuple(input.shape), dtype or input.dtype, device or input.device, "torch.rand_like")

    def uniform_(self: Any, a: float = 0.0, b: float = 1.0, *, generator: Any = None) -> Any:
        rng = _current()
        if rng is None:
            return real["Tensor.uniform_"](self, a, b, generator=generator)
        u = _uniforms(rng, tuple(self.shape), self.dtype, self.device, "Tensor.uniform_")
        with torch.no_grad():
            self.copy_(a + (b - a) * u)
        return self

    def exponential_(self: Any, lambd: float = 1.0, *, generator: Any = None) -> Any:
        rng = _current()
        if rng is None:
            return real["Tensor.exponential_"](self, lambd, generator=generator)
        u = _uniforms(rng, tuple(self.shape), torch.float64, self.device, "Tensor.exponential_")
        value = (-torch.log1p(-u) / lambd).to(self.dtype)
        floor = torch.tensor(exponential_floor(self.dtype, self.device, lambd), dtype=self.dtype, device=self.device)
        with torch.no_grad():
            self.copy_(torch.maximum(value, floor))
        return self

    def multinomial(input: Any, num_samples: int, replacement: bool = False, *, generator: Any = None, **kw: Any) -> Any:  # `input`: torch's own parameter name
        rng = _current()
        if rng is None:
            return real["torch.multinomial"](input, num_samples, replacement, generator=generator, **kw)
        _tally(rng, "torch.multinomial", int(np.prod(input.shape[:-1], dtype=np.int64)) * int(num_samples))
        return _multinomial(rng, input, int(num_samples), bool(replacement))

    def multinomial_method(self: Any, num_samples: int, replacement: bool = False, *, generator: Any = None) -> Any:
        rng = _current()
        if rng is None:
            return real["Tensor.multinomial"](self, num_samples, replacement, generator=generator)
        _tally(rng, "Tensor.multinomial", int(np.prod(self.shape[:-1], dtype=np.int64)) * int(num_samples))
        return _multinomial(rng, self, int(num_samples), bool(replacement))

    return [
        (torch, "rand", rand),
        (torch, "rand_like", rand_like),
        (torch, "multinomial", multinomial),
        (torch.Tensor, "uniform_", uniform_),
        (torch.Tensor, "exponential_", exponential_),
        (torch.Tensor, "multinomial", multinomial_method),
    ]


def _torch_draws(torch: Any) -> list[tuple[Any, str]]:
    """Return (owner, name) of every torch draw a scripted call routes."""
    return [(torch, "rand"), (torch, "rand_like"), (torch, "multinomial"), (torch.Tensor, "uniform_"),
            (torch.Tensor, "exponential_"), (torch.Tensor, "multinomial")]


@contextlib.contextmanager
def _patched(patches: list[tuple[Any, str, Any]]) -> Iterator[None]:
    """Install ``patches`` (owner, name, substitute) while the block runs; restore what was there."""
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    try:
        for obj, name, fn in patches:
            setattr(obj, name, fn)
        yield
    finally:
        for obj, name, fn in reversed(saved):
            setattr(obj, name, fn)


@contextlib.contextmanager
def _eager(torch: Any) -> Iterator[None]:
    """Run torch.compile'd functions eagerly while the block runs (nothing traced, nothing frozen)."""
    compiler = getattr(torch, "compiler", None)
    if compiler is None or not hasattr(compiler, "set_stance"):  # torch < 2.6: the bypass check still sees it
        yield
        return
    with compiler.set_stance("force_eager"):
        yield


@contextlib.contextmanager
def scripted_torch(rng: Any) -> Iterator[None]:
    """Route torch's random draws to the scripted source ``rng`` while the block runs (this thread only).

    torch.compile'd code runs eagerly meanwhile, so its draws are scripted too and no scripted
    value is traced into a compiled graph (:func:`_eager`).
    """
    import torch

    with _LOCK, _scripting(rng), _patched(_scripted_torch_patches(torch)), _eager(torch):
        yield


@contextlib.contextmanager
def _torch_global(rng: Any, seed: int, device: str = "cpu") -> Iterator[None]:
    """Seed torch's global generator with ``seed`` (or script it) for one call; restore it after."""
    import torch

    devices = [torch.device(device).index or 0] if str(device).startswith("cuda") else []
    with torch.random.fork_rng(devices=devices):
        if is_scripted(rng):
            states = _torch_states(torch, devices)
            with scripted_torch(rng):
                yield
            for name, state in _torch_states(torch, devices).items():  # a real draw: not scripted
                if not torch.equal(state, states[name]):
                    _bypass(rng, name)
        else:
            torch.manual_seed(seed)
            yield


def _torch_states(torch: Any, devices: list[int]) -> dict[str, Any]:
    """Return the states of torch's default CPU generator and of the CUDA devices', by name."""
    states = {"torch's default generator": torch.random.get_rng_state()}
    for d in devices:
        states[f"torch's cuda:{d} generator"] = torch.cuda.get_rng_state(d)
    return states


@contextlib.contextmanager
def watched(rng: Any, *generators: Any) -> Iterator[None]:
    """Note in :func:`bypassed` a ``torch.Generator`` that advances during a scripted call (a real draw).

    Adapters hand their target explicit generators; under a scripted ``rng`` every routed draw
    ignores them, so one that moves was drawn from by code the routing did not reach.
    """
    if not is_scripted(rng) or not generators:
        yield
        return
    import torch

    before = [g.get_state() for g in generators]
    yield
    for g, state in zip(generators, before):
        if not torch.equal(g.get_state(), state):
            _bypass(rng, f"the torch.Generator on {g.device} given to the target")


@contextlib.contextmanager
def torch_global_rng(rng: Any, device: str = "cpu") -> Iterator[None]:
    """Seed torch's global generator from ``rng`` (or script it) for one call; restore it after."""
    with _torch_global(rng, seed_from(rng), device):
        yield


def _derived(seed: int, words: int) -> np.ndarray:
    """Return ``words`` uint32 words derived from ``seed`` (one seed, independent streams)."""
    return np.random.SeedSequence(seed).generate_state(words, dtype=np.uint32)


#: numpy's legacy global-RNG functions routed under a scripted rng: name -> (rng, *args) -> value.
_NUMPY_SCRIPTED: dict[str, Any] = {
    "random": lambda r, size=None: r.random(size),
    "random_sample": lambda r, size=None: r.random(size),
    "sample": lambda r, size=None: r.random(size),
    "ranf": lambda r, size=None: r.random(size),
    "rand": lambda r, *shape: r.random(shape if shape else None),
    "uniform": lambda r, low=0.0, high=1.0, size=None: r.uniform(low, high, size),
    "choice": lambda r, a, size=None, replace=True, p=None: r.choice(a, size, replace, p),
    "randint": lambda r, low, high=None, size=None, dtype=int: r.integers(low, high, size, dtype=dtype),
    "exponential": lambda r, scale=1.0, size=None: r.exponential(scale, size),
    "standard_exponential": lambda r, size=None: r.standard_exponential(size),
}


def _legacy_state() -> Any:
    """Return the state of numpy's legacy global RNG (a comparable tuple)."""
    state = np.random.get_state(legacy=False)
    return (state["state"]["key"].tobytes(), state["state"]["pos"], state["has_gauss"], state["gauss"])


@contextlib.contextmanager
def _numpy_global(rng: Any, seed: int) -> Iterator[None]:
    """Seed numpy's legacy global RNG from ``seed`` (and script its uniforms); restore its state after."""
    state = np.random.get_state()
    patched: list[tuple[Any, str, Any]] = []
    scripted = is_scripted(rng)
    try:
        np.random.seed(_derived(seed, 4))
        if scripted:
            for module in (np.random, np.random.mtrand):
                for name, fn in _NUMPY_SCRIPTED.items():
                    if hasattr(module, name):
                        real = getattr(module, name)
                        patched.append((module, name, real))
                        setattr(module, name, _numpy_substitute(fn, real))
            seeded = _legacy_state()
        yield
        if scripted and _legacy_state() != seeded:  # drawn through a function that is not scripted
            _bypass(rng, "numpy's legacy global RNG")
    finally:
        for module, name, fn in reversed(patched):
            setattr(module, name, fn)
        np.random.set_state(state)


def _numpy_substitute(fn: Any, real: Any) -> Any:
    """Return a numpy legacy function that draws from this thread's script, else calls ``real``."""

    def draw(*a: Any, **kw: Any) -> Any:
        rng = _current()
        return real(*a, **kw) if rng is None else fn(rng, *a, **kw)

    return draw


@contextlib.contextmanager
def _python_random(rng: Any, seed: int) -> Iterator[None]:
    """Seed Python's ``random`` from ``seed`` (and script its uniforms); restore its state after."""
    inst = _pyrandom._inst  # the instance behind the module-level functions
    state = inst.getstate()
    module_random = _pyrandom.random
    scripted = is_scripted(rng)
    try:
        inst.seed(int(_derived(seed, 2).view(np.uint64)[0]))
        if scripted:
            real_random, real_below = type(inst).random, type(inst)._randbelow  # type: ignore[attr-defined]

            def coin() -> float:
                current = _current()
                return real_random(inst) if current is None else float(current.random())

            def below(n: int) -> int:
                if _current() is None:
                    return int(real_below(inst, n))
                return min(int(coin() * n), n - 1)

            # instance attributes shadow the methods: uniform, choices, randint... call self.random/_randbelow
            inst.random = coin  # type: ignore[method-assign]
            inst._randbelow = below  # type: ignore[attr-defined]
            _pyrandom.random = coin
            seeded = inst.getstate()
        yield
        if scripted and inst.getstate() != seeded:  # getrandbits, or a function bound before the call
            _bypass(rng, "Python's random")
    finally:
        if scripted:
            for name in ("random", "_randbelow"):
                inst.__dict__.pop(name, None)
            _pyrandom.random = module_random
        inst.setstate(state)


#: What a scripted rng cannot reach: Triton kernels compiled for a GPU (``tl.rand`` runs in the kernel).
TRITON_UNREACHABLE = ("the verifier draws its uniforms inside a compiled Triton kernel (tl.rand, Philox on the "
                      "device), which no scripted value reaches; under TRITON_INTERPRET=1 (a machine without a GPU) "
                      "specaudit routes tl.rand to the scripted uniforms")


def triton_interpreted() -> bool:
    """Return True when triton is imported and runs its kernels in the interpreter (``TRITON_INTERPRET=1``)."""
    import os

    return "triton.language" in sys.modules and os.environ.get("TRITON_INTERPRET") == "1"


@contextlib.contextmanager
def _triton_rand(rng: Any) -> Iterator[None]:
    """Route ``tl.rand`` of Triton kernels run in the interpreter to the scripted ``rng`` (this thread only).

    Under ``TRITON_INTERPRET=1`` a kernel is Python: its ``tl.rand(seed, offset)`` is looked up on
    ``triton.language`` when it runs. The substitute computes Triton's own draw (shape and dtype)
    and replaces its values with scripted uniforms, rounded down into [0, 1) of float32 (a float32
    ``tl.rand`` never returns 1), counted as ``tl.rand`` draws. Compiled (GPU) kernels are out of
    reach: see :data:`TRITON_UNREACHABLE`.
    """
    if not triton_interpreted():
        yield
        return
    tl = sys.modules["triton.language"]
    real = tl.rand
    below_one = np.nextafter(np.float32(1.0), np.float32(0.0))

    def rand(seed: Any, offset: Any, *args: Any, **kwargs: Any) -> Any:
        out = real(seed, offset, *args, **kwargs)
        source = _current()
        if source is None:  # another thread's kernel: Triton's own draw
            return out
        data = np.asarray(out.handle.data)
        count = max(int(data.size), 1)
        values = np.asarray(source.random(count), dtype=np.float64).astype(np.float32).reshape(data.shape)
        _tally(source, "tl.rand", count)
        out.handle.data = np.where(values >= 1, below_one, values).astype(data.dtype)
        return out

    patches = [(tl, "rand", rand)]
    random_module = sys.modules.get("triton.language.random")
    if random_module is not None and getattr(random_module, "rand", None) is real:
        patches.append((random_module, "rand", rand))
    with _patched(patches):
        yield


@contextlib.contextmanager
def routed(rng: Any, device: str = "cpu") -> Iterator[int]:
    """Route torch's, numpy's legacy and Python's global random sources to ``rng`` for one call.

    Parameters
    ----------
    rng : numpy.random.Generator
        The generator the harness passed to the verifier (or a scripted one: its uniforms reach
        every routed draw).
    device : str
        torch device whose generator is forked and seeded (``"cuda:0"``); torch is routed only
        when it is already imported.

    Yields
    ------
    int
        A 63-bit seed drawn once from ``rng`` (0 when scripted), for an explicit generator such
        as ``torch.Generator().manual_seed(seed)``.

    Notes
    -----
    Every state is restored when the block ends. A generator the verifier builds itself is not
    routed (the determinism probe names it). One re-entrant lock is held for the whole call:
    routed calls from several threads run one at a time and never share a seed or a script.
    Under a scripted ``rng``, torch.compile'd code runs eagerly and every real generator that
    advances is named by :func:`bypassed`.
    """
    with contextlib.ExitStack() as stack:
        stack.enter_context(_LOCK)
        seed = seed_from(rng)
        if is_scripted(rng):
            stack.enter_context(_scripting(rng))
        stack.enter_context(_numpy_global(rng, seed))
        stack.enter_context(_python_random(rng, seed))
        if "torch" in sys.modules:
            stack.enter_context(_torch_global(rng, seed, device))
        if is_scripted(rng):
            stack.enter_context(_triton_rand(rng))
        yield seed


@contextlib.contextmanager
def torch_source(rng: Any) -> Iterator[int]:
    """Yield a seed for a target's own ``torch.Generator``; script every torch draw if ``rng`` is scripted."""
    if is_scripted(rng):
        with scripted_torch(rng):
            yield 0
    else:
        with _LOCK:
            yield seed_from(rng)
