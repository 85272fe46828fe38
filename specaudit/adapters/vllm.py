"""vLLM v1's packed ragged layout: ``--adapter vllm``, target alias ``vllm-v1``.

The target has the signature of ``vllm.v1.sample.rejection_sampler.rejection_sample``::

    rejection_sample(draft_token_ids[T] int32, num_draft_tokens: list[int], max_spec_len: int,
                     cu_num_draft_tokens[B] int32, draft_probs[T, V] | None, TARGET[T, V],
                     bonus_token_ids[B, 1] int32, sampling_metadata) -> int32[B, max_spec_len + 1]

where TARGET changed meaning across releases: ``target_probs`` (probabilities) up to 0.15, and
``target_logits`` from 0.16 on (vLLM PR #32852: the softmax moved inside ``rejection_sample``,
in float32). The adapter reads the name of the target's sixth parameter and passes what it
expects: probabilities, or logits ``log p`` (-inf where p = 0, so the softmax inside returns p up
to float32 rounding). ``--adapter-arg target_input=probs|logits`` overrides it for a target whose
signature cannot be read (a compiled kernel); ``auto`` (default) takes probabilities when it
cannot tell.

Rows are packed flat: request ``b``'s drafts are ``draft_token_ids[cu[b-1]:cu[b]]`` with
``cu_num_draft_tokens`` the *inclusive* cumulative sum (no leading 0). TARGET holds the draft
positions only; the bonus token is sampled outside the rejection sampler (here: from
``p[b, num_draft[b]]`` by inverse CDF on the harness rng) and passed in. ``sampling_metadata`` has
``all_random=True``, ``temperature`` 1 for every request and one seeded ``torch.Generator`` per
request in ``generators`` (vLLM's real ``SamplingMetadata`` when vLLM is installed, else a
namespace with those fields). The output is padded with -1 (``PLACEHOLDER_TOKEN_ID``); its row
``b`` holds ``n_out[b]`` ids. Ids >= V are *not* filtered (vLLM's ``parse_output`` would hide them:
vLLM #20531), so the contract check sees them. ``draft_probs=none`` passes None (n-gram drafting:
one-hot q), which needs a one-hot drafter scenario (``draft: {kind: greedy}``).

Per-request sampling (``--contract logits``; the serving scenarios, ``serving-*``)
------------------------------------------------------------------------------------
Under the logits contract the verifier gets raw logits and the run's per-row parameters
(:class:`specaudit.contract.logits.LogitsParams`, ``params.rows``), and the adapter builds the batch
the way vLLM's ``RejectionSampler.forward`` hands it to ``rejection_sample`` (read in 0.33.0,
``vllm/v1/sample/rejection_sampler.py``, ``forward`` and ``rejection_sample`` lines 432-587):

- ``SamplingMetadata.temperature[b]`` is the request's temperature, and a greedy request (temperature
  0) carries the *input batch's* greedy sentinel, ``greedy_temperature`` (default 0: vLLM PR #27077
  moved the batch's sentinel from -1 to 0; ``--adapter-arg greedy_temperature=-1`` for releases
  before it, e.g. 0.8.5, whose ``GREEDY_TEMPERATURE`` is -1). ``rejection_sample`` marks a row greedy
  when ``temperature == GREEDY_TEMPERATURE`` (its own module constant): a sampler whose constant
  differs from the batch's (the PR #27077 bug) treats greedy rows as random.
- ``all_greedy`` / ``all_random`` say whether every / no row is greedy (a mixed batch has both
  False and runs both kernels); ``top_k`` [B] int32 (the vocabulary size where off) and ``top_p``
  [B] float32 (1 where off) are set when some row uses them, else None; ``generators`` holds one
  seeded ``torch.Generator`` per sampled request (greedy rows draw nothing).
- Greedy rows' target logits are the raw ones (``apply_sampling_constraints`` leaves them as they
  are: it divides by 1 there), so the released greedy kernel takes their argmax; sampled rows' target
  logits are processed with the row's parameters (:func:`specaudit.contract.logits.processed`, the
  run's convention: ``--convention vllm`` is vLLM's ``apply_sampling_constraints`` order, checked
  against the release in tests/contract/test_conventions.py); ``draft_probs`` are the drafter's
  processed law; the bonus is the argmax of the raw logits on greedy rows and a sample of the
  processed law on the others (vLLM's ``Sampler``, outside the rejection sampler).
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from specaudit.adapters import DEVICE, DTYPE, Adapter, Option
from specaudit.adapters.randomness import harness_draws, is_scripted, routed
from specaudit.chains.sampling import sample_rows
from specaudit.errors import ContractError

PLACEHOLDER = -1


def packed(draft: np.ndarray, q: np.ndarray, p: np.ndarray, num_draft: np.ndarray) -> dict[str, np.ndarray]:
    """Return the packed arrays of vLLM's layout (numpy) for canonical inputs."""
    k = draft.shape[1]
    valid = np.arange(k)[None, :] < num_draft[:, None]
    return {
        "draft_token_ids": draft[valid].astype(np.int32),
        "cu_num_draft_tokens": np.cumsum(num_draft).astype(np.int32),  # inclusive, no leading 0
        "draft_probs": np.ascontiguousarray(q[valid]),
        "target_probs": np.ascontiguousarray(p[:, :k][valid]),
    }


def sampling_metadata(batch: int, device: str, generators: dict[int, Any], per_row: dict[str, Any] | None = None) -> Any:
    """Return a SamplingMetadata (vLLM's class when installed): all-random at temperature 1, or ``per_row``'s fields."""
    import torch

    core = {
        "temperature": torch.ones(batch, dtype=torch.float32, device=device),
        "all_greedy": False,
        "all_random": True,
        "top_p": None,
        "top_k": None,
        "generators": generators,
        **(per_row or {}),
    }
    try:
        from vllm.v1.sample.metadata import SamplingMetadata
    except ImportError:
        return types.SimpleNamespace(**core)
    # fields vary across vLLM versions: fill the ones that matter here, neutral values elsewhere
    neutral = {
        "min_p": None, "max_num_logprobs": None, "no_penalties": True, "prompt_token_ids": None,
        "frequency_penalties": torch.zeros(batch, device=device), "presence_penalties": torch.zeros(batch, device=device),
        "repetition_penalties": torch.ones(batch, device=device), "output_token_ids": [[] for _ in range(batch)],
        "allowed_token_ids_mask": None, "bad_words_token_ids": {}, "min_tokens": {}, "logit_bias": [None] * batch,
    }
    values = {}
    for f in dataclasses.fields(SamplingMetadata):
        if f.name in core:
            values[f.name] = core[f.name]
        elif f.name in neutral:
            values[f.name] = neutral[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            values[f.name] = None
    return SamplingMetadata(**values)


#: What the sixth parameter of ``rejection_sample`` is called, by what it holds.
TARGET_PARAMETERS = {"target_probs": "probs", "target_logits": "logits"}


def sixth_argument(target: Callable[..., Any], choice: str = "auto") -> str:
    """Return "probs" or "logits": what ``target`` takes as its sixth argument (``choice`` unless "auto")."""
    if choice != "auto":
        return choice
    try:
        params = list(inspect.signature(target).parameters)
    except (TypeError, ValueError):  # a builtin or compiled kernel: no signature to read
        return "probs"
    return TARGET_PARAMETERS.get(params[5], "probs") if len(params) > 5 else "probs"


def as_logits(probs: np.ndarray) -> np.ndarray:
    """Return ``log p`` with -inf where p = 0: logits whose softmax is ``p`` (vLLM >= 0.16 takes logits)."""
    with np.errstate(divide="ignore"):
        return np.log(probs)


def _one_hot_at_drafts(q: np.ndarray, draft: np.ndarray, valid: np.ndarray) -> bool:
    at = np.take_along_axis(q, np.where(valid, draft, 0)[..., None], axis=2)[..., 0]
    return bool(np.all(at[valid] == 1.0))


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - np.max(logits, axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def per_request(
    draft: np.ndarray, draft_logits: np.ndarray, target_logits: np.ndarray, num_draft: np.ndarray, params: Any,
    greedy_temperature: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """Return ``(q, target, greedy, fields)`` of a per-request batch: the drafter's processed law, the target's
    payload (raw logits on greedy rows, processed log-probabilities on sampled rows), the greedy rows, and
    SamplingMetadata's per-request fields as numpy (temperature with the batch's greedy sentinel, top_k, top_p)."""
    from specaudit.contract.logits import processed

    batch, vocab = draft.shape[0], target_logits.shape[-1]
    rows = params.row_params(batch)
    q, p = processed(params, draft, num_draft, draft_logits, target_logits)
    greedy = np.array([r.target.greedy for r in rows], dtype=bool)
    with np.errstate(divide="ignore"):
        target = np.where(greedy[:, None, None], target_logits, np.log(p))
    temperature = np.array([greedy_temperature if g else r.target.temperature for g, r in zip(greedy, rows)])
    fields: dict[str, Any] = {"temperature": temperature.astype(np.float32), "top_k": None, "top_p": None,
                              "all_greedy": bool(batch and greedy.all()), "all_random": not greedy.any()}
    if any(r.target.top_k for r in rows):
        fields["top_k"] = np.array([r.target.top_k or vocab for r in rows], dtype=np.int32)
    if any(r.target.top_p < 1 for r in rows):
        fields["top_p"] = np.array([r.target.top_p for r in rows], dtype=np.float32)
    return q, target, greedy, fields


def build(
    target: Callable[..., Any], device: str = "cpu", dtype: str = "float32", draft_probs: str = "given",
    target_input: str = "auto", greedy_temperature: float = 0.0,
) -> Callable[..., Any]:
    """Return the canonical verifier that calls a target in vLLM v1's packed layout (and the logits contract's)."""
    import torch

    from specaudit.adapters.torch import check_device, mark_logits_input, to_torch, torch_dtype

    check_device(device)
    fdt = torch_dtype(dtype)
    takes = sixth_argument(target, target_input)

    def verify(draft: np.ndarray, q: np.ndarray, p: np.ndarray, num_draft: np.ndarray, *rest: Any) -> Any:
        # five arguments: the canonical contract (q, p processed); six: the logits contract (raw logits, params)
        params, rng = rest if len(rest) == 2 else (None, rest[0])
        batch, k = draft.shape
        nd = np.asarray(num_draft, dtype=np.int64)
        greedy = np.zeros(batch, dtype=bool)
        fields: dict[str, Any] = {}
        if params is not None:
            q, payload, greedy, fields = per_request(draft, q, p, nd, params, greedy_temperature)
            law = np.where(greedy[:, None, None], 0.0, np.exp(payload))  # the sampled rows' processed law
            given = np.where(greedy[:, None, None], _softmax(payload), law)  # what a probs-taking release gets
            sent = payload if takes == "logits" else given
        else:
            law = p
        flat = packed(draft, q, law if params is None else sent, nd)
        if draft_probs == "none" and not _one_hot_at_drafts(q, draft, np.arange(k)[None, :] < nd[:, None]):
            raise ValueError("draft_probs=none (n-gram, one-hot q) needs a one-hot drafter scenario (draft: {kind: greedy})")
        # the bonus is sampled by vLLM's ordinary sampler, outside the rejection sampler (greedy rows: the argmax)
        with harness_draws(rng):  # the adapter's own draw: never counted as reaching the acceptance step
            if batch:
                at = np.arange(batch), nd
                sampled = ~greedy
                bonus = np.zeros(batch, np.int64)
                u = rng.random(batch)
                if sampled.any():
                    bonus[sampled] = sample_rows(law[at][sampled], u[sampled])
                if greedy.any():
                    bonus[greedy] = np.argmax(p[at][greedy], axis=-1)
            else:
                bonus = np.zeros(0, np.int64)
        max_spec_len = int(nd.max()) if batch else 0
        seeds = [0] * batch if is_scripted(rng) else rng.integers(0, 2**63 - 1, size=batch).tolist()
        if params is None:
            sixth = flat["target_probs"] if takes == "probs" else as_logits(flat["target_probs"])
        else:
            sixth = flat["target_probs"]
        with torch.inference_mode(), routed(rng, device):
            generators = {i: torch.Generator(device=device).manual_seed(int(s))
                          for i, s in enumerate(seeds) if not greedy[i]}
            per_row = {key: (to_torch(v, device) if isinstance(v, np.ndarray) else v) for key, v in fields.items()}
            result = target(
                to_torch(flat["draft_token_ids"], device),
                nd.tolist(),
                max_spec_len,
                to_torch(flat["cu_num_draft_tokens"], device),
                None if draft_probs == "none" else to_torch(flat["draft_probs"], device, fdt),
                to_torch(sixth, device, fdt),
                to_torch(bonus.astype(np.int32)[:, None], device),
                sampling_metadata(batch, device, generators, per_row or None),
            )
        res = result.detach().cpu().numpy() if hasattr(result, "detach") else np.asarray(result)
        if res.shape != (batch, max_spec_len + 1):
            raise ContractError(
                "layout", f"vLLM layout: output must be [B, max_spec_len + 1] = ({batch}, {max_spec_len + 1}), got {res.shape}"
            )
        if not np.issubdtype(res.dtype, np.integer):
            raise ContractError("layout", f"vLLM layout: output must hold integer ids, got {res.dtype}")
        out = np.full((batch, k + 1), PLACEHOLDER, dtype=np.int64)
        out[:, : max_spec_len + 1] = res
        return out, (res != PLACEHOLDER).sum(axis=1).astype(np.int64)

    return mark_logits_input(verify) if takes == "logits" else verify  # softmaxed inside, in float32: p = q up to rounding


def _sentinel(value: Any) -> float:
    t = float(value)
    if t != t or t in (float("inf"), float("-inf")) or t > 0:
        raise ValueError("the greedy sentinel is 0 or a negative number (vLLM: 0 since PR #27077, -1 before)")
    return t


ADAPTER = Adapter(
    "vllm",
    "vLLM v1 rejection_sample: packed ragged drafts, inclusive cu_num_draft_tokens, per-request generators",
    build,
    options=(
        DEVICE,
        Option("dtype", str, "float32", DTYPE.help, DTYPE.choices),
        Option("draft_probs", str, "given", "given: pass q; none: pass None (n-gram drafts, one-hot q)", ("given", "none")),
        Option("target_input", str, "auto", "what rejection_sample's 6th argument holds: probs (vLLM <= 0.15), logits "
               "(>= 0.16), auto: read from its parameter name", ("auto", "probs", "logits")),
        Option("greedy_temperature", _sentinel, 0.0, "--contract logits: the temperature vLLM's input batch writes "
               "for a greedy request (0 since vLLM PR #27077; -1 before, e.g. 0.8.5)"),
    ),
    requires=("torch",),
    extra="torch",
)
