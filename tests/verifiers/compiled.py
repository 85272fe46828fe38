"""torch-contract verifiers (``--adapter torch``) for the probes' compiled-code tests.

``chain_rule(leq)`` is the chain rule (Leviathan et al. 2023, Alg. 1) vectorised in torch:
uniforms from ``torch.rand``, the final token by an exponential race (``argmax(law / E)`` with
``E ~ Exp(1)`` from ``Tensor.exponential_``, as vLLM's samplers draw it). ``leq=True`` accepts
when ``u q <= p``, which accepts a draft of p = 0 at u = 0 (sglang #35771). ``race`` picks how
the race is drawn: ``"eager"`` in Python, ``"torchscript"`` inside a TorchScript function, whose
draws never pass through Python and so bypass any routing.
"""

import warnings

import torch


def _race_eager(law: torch.Tensor) -> torch.Tensor:
    e = torch.empty_like(law).exponential_()
    return (law / e).argmax(dim=1)


_race_script = None


def _race_torchscript(law: torch.Tensor) -> torch.Tensor:
    global _race_script
    if _race_script is None:
        with warnings.catch_warnings():  # deprecated in favour of torch.compile, still shipped: a real bypass
            warnings.simplefilter("ignore", DeprecationWarning)
            _race_script = torch.jit.script(_race_eager)
    return _race_script(law)


def chain_rule(leq: bool = False, race: str = "eager"):
    """Return verify(draft, q, p, num_draft, generator) -> (out, n_out) in torch."""
    sample = _race_eager if race == "eager" else _race_torchscript

    def verify(draft, q, p, num_draft, generator):
        b, k = draft.shape
        rows = torch.arange(b)
        u = torch.rand(b, k, dtype=q.dtype)
        p_x = torch.gather(p[:, :k], 2, draft[..., None])[..., 0]
        q_x = torch.gather(q, 2, draft[..., None])[..., 0]
        valid = torch.arange(k)[None, :] < num_draft[:, None]
        ok = ((u * q_x <= p_x) if leq else (u * q_x < p_x)) & valid
        acc = torch.cumprod(ok.to(torch.int64), dim=1).sum(dim=1)
        if k:
            at = torch.clamp(acc, max=k - 1)
            residual = torch.clamp(p[rows, at] - q[rows, at], min=0)
            law = torch.where((acc < num_draft)[:, None], residual, p[rows, acc])
        else:
            law = p[:, 0]
        token = sample(law)
        cols = torch.arange(k + 1)[None, :]
        drafts = torch.cat([draft, torch.zeros(b, 1, dtype=torch.int64)], dim=1)
        out = torch.where(cols < acc[:, None], drafts, torch.full_like(drafts, -1))
        out[rows, acc] = token
        return out, acc + 1

    return verify


leq_eager = chain_rule(leq=True)
correct_eager = chain_rule()
leq_torchscript_race = chain_rule(leq=True, race="torchscript")
correct_torchscript_race = chain_rule(race="torchscript")
