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
  ``Tensor.exponential_`` returns ``-log(1 - u) / lambd`` (inverse CDF of the exponential);
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
"""

from __future__ import annotations

import contextlib
import random as _pyrandom
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from specaudit.contract.uniforms import ScriptedUniforms

#: Marker attribute: an rng whose class sets ``scripted = True`` yields chosen uniforms.
SCRIPTED_MARKER = "scripted"


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


def _uniforms(rng: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> Any:
    """Return scripted uniforms of ``shape`` as a tensor, rounded down into [0, 1) of ``dtype``."""
    import torch

    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    values = np.asarray(rng.random(count), dtype=np.float64).reshape(shape)
    dtype = dtype or torch.get_default_dtype()
    t = torch.from_numpy(values).to(dtype=dtype)
    below_one = torch.tensor(1.0 - torch.finfo(dtype).eps / 2, dtype=dtype)
    t = torch.where(t >= 1, below_one, t)
    return t.to(device) if device is not None else t


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


@contextlib.contextmanager
def scripted_torch(rng: Any) -> Iterator[None]:
    """Route torch's random draws to the scripted source ``rng`` while the block runs."""
    import torch

    def rand(*size: Any, generator: Any = None, dtype: Any = None, device: Any = None, **kw: Any) -> Any:
        return _uniforms(rng, _shape(size or (kw["size"],)), dtype, device)

    def rand_like(input: Any, *, dtype: Any = None, device: Any = None, **_: Any) -> Any:  # `input`: torch's own parameter name
        return _uniforms(rng, tuple(input.shape), dtype or input.dtype, device or input.device)

    def uniform_(self: Any, a: float = 0.0, b: float = 1.0, *, generator: Any = None) -> Any:
        u = _uniforms(rng, tuple(self.shape), self.dtype, self.device)
        with torch.no_grad():
            self.copy_(a + (b - a) * u)
        return self

    def exponential_(self: Any, lambd: float = 1.0, *, generator: Any = None) -> Any:
        u = _uniforms(rng, tuple(self.shape), torch.float64, self.device)
        with torch.no_grad():
            self.copy_((-torch.log1p(-u) / lambd).to(self.dtype))
        return self

    def multinomial(input: Any, num_samples: int, replacement: bool = False, *, generator: Any = None, **_: Any) -> Any:  # `input`: torch's own parameter name
        return _multinomial(rng, input, int(num_samples), bool(replacement))

    def multinomial_method(self: Any, num_samples: int, replacement: bool = False, *, generator: Any = None) -> Any:
        return _multinomial(rng, self, int(num_samples), bool(replacement))

    patches = [
        (torch, "rand", rand),
        (torch, "rand_like", rand_like),
        (torch, "multinomial", multinomial),
        (torch.Tensor, "uniform_", uniform_),
        (torch.Tensor, "exponential_", exponential_),
        (torch.Tensor, "multinomial", multinomial_method),
    ]
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    try:
        for obj, name, fn in patches:
            setattr(obj, name, fn)
        yield
    finally:
        for obj, name, fn in saved:
            setattr(obj, name, fn)


@contextlib.contextmanager
def _torch_global(rng: Any, seed: int, device: str = "cpu") -> Iterator[None]:
    """Seed torch's global generator with ``seed`` (or script it) for one call; restore it after."""
    import torch

    devices = [torch.device(device).index or 0] if str(device).startswith("cuda") else []
    with torch.random.fork_rng(devices=devices):
        if is_scripted(rng):
            with scripted_torch(rng):
                yield
        else:
            torch.manual_seed(seed)
            yield


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


@contextlib.contextmanager
def _numpy_global(rng: Any, seed: int) -> Iterator[None]:
    """Seed numpy's legacy global RNG from ``seed`` (and script its uniforms); restore its state after."""
    state = np.random.get_state()
    patched: list[tuple[Any, str, Any]] = []
    try:
        np.random.seed(_derived(seed, 4))
        if is_scripted(rng):
            for module in (np.random, np.random.mtrand):
                for name, fn in _NUMPY_SCRIPTED.items():
                    if hasattr(module, name):
                        patched.append((module, name, getattr(module, name)))
                        setattr(module, name, lambda *a, _fn=fn, **kw: _fn(rng, *a, **kw))
        yield
    finally:
        for module, name, fn in reversed(patched):
            setattr(module, name, fn)
        np.random.set_state(state)


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
            def coin() -> float:
                return float(rng.random())

            def below(n: int) -> int:
                return min(int(coin() * n), n - 1)

            # instance attributes shadow the methods: uniform, choices, randint... call self.random/_randbelow
            inst.random = coin  # type: ignore[method-assign]
            inst._randbelow = below  # type: ignore[attr-defined]
            _pyrandom.random = coin
        yield
    finally:
        if scripted:
            for name in ("random", "_randbelow"):
                inst.__dict__.pop(name, None)
            _pyrandom.random = module_random
        inst.setstate(state)


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
    routed (the determinism probe names it).
    """
    seed = seed_from(rng)
    with contextlib.ExitStack() as stack:
        stack.enter_context(_numpy_global(rng, seed))
        stack.enter_context(_python_random(rng, seed))
        if "torch" in sys.modules:
            stack.enter_context(_torch_global(rng, seed, device))
        yield seed


@contextlib.contextmanager
def torch_source(rng: Any) -> Iterator[int]:
    """Yield a seed for a target's own ``torch.Generator``; script every torch draw if ``rng`` is scripted."""
    if is_scripted(rng):
        with scripted_torch(rng):
            yield 0
    else:
        yield seed_from(rng)
