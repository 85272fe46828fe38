"""Random sources for torch-based targets: seeded from the harness rng, or scripted.

A torch verifier draws from torch (the global generator, a ``torch.Generator`` it is handed,
``torch.rand_like``, ``torch.multinomial``), not from the numpy ``rng`` the harness passes. For
an ordinary rng the adapter seeds torch from it on every call, so a run is reproducible from its
seed. For a *scripted* rng (the adversarial-uniform check hands the verifier a Generator-like
object whose draws are chosen, e.g. 0.0 and 1 - 2**-53) the adapter substitutes torch's draw
functions for the duration of the call, so the chosen values reach the framework's own code:

- ``torch.rand``, ``torch.rand_like`` and ``Tensor.uniform_`` return the scripted uniforms
  (rounded *down* into [0, 1) of the tensor's dtype: a float32 generator never returns 1);
- ``Tensor.exponential_`` returns ``-log(1 - u) / lambd`` (inverse CDF of the exponential);
- ``torch.multinomial`` / ``Tensor.multinomial`` (and so ``torch.distributions.Categorical``)
  draw by inverse CDF on the given weights at one scripted uniform per sample: the smallest index
  whose cumulative weight exceeds ``u * total``, never an index of weight 0. This models what a
  correct sampler returns at extreme uniforms; it replaces torch's own sampling algorithm (an
  exponential race), so a scripted check tests the caller, not torch's kernel.

Any ``generator=`` argument is ignored while scripted: every draw comes from the script.
"""

from __future__ import annotations

import contextlib
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
def torch_global_rng(rng: Any, device: str = "cpu") -> Iterator[None]:
    """Seed torch's global generator from ``rng`` (or script it) for one call; restore it after."""
    import torch

    devices = [torch.device(device).index or 0] if str(device).startswith("cuda") else []
    with torch.random.fork_rng(devices=devices):
        if is_scripted(rng):
            with scripted_torch(rng):
                yield
        else:
            torch.manual_seed(seed_from(rng))
            yield


@contextlib.contextmanager
def torch_source(rng: Any) -> Iterator[int]:
    """Yield a seed for a target's own ``torch.Generator``; script every torch draw if ``rng`` is scripted."""
    if is_scripted(rng):
        with scripted_torch(rng):
            yield 0
    else:
        yield seed_from(rng)
