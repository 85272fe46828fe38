"""HF transformers' assisted generation, end to end: the law of what ``generate`` emits.

The system under test is the installed transformers' whole loop,
``target.generate(prompt, assistant_model=assistant, generation_config=...)``: the assistant
drafts, the target verifies, caches are cropped, the block is cut at EOS and at
``max_new_tokens``. Nothing of it is re-implemented here; only the tokens it returns are read.

The target and the assistant are tiny random-weight Llama models built from configs (no
download, no tokenizer; weights from a seeded torch generator that leaves the global one as it
was). The exact law of a continuation of ``length`` tokens is enumerated with the target's own
forward pass on every prefix and HF's own logits processors for the generation config (the ones
``generate`` builds: ``_prepare_generation_config``, ``_get_logits_processor``), so temperature,
top-k and top-p are whatever the release does. A continuation ends at its first EOS; cells are
the ``vocab ** length`` token tuples with EOS padding after it, so an emitted token after EOS, an
early stop without EOS, or more than ``max_new_tokens`` tokens lands in a cell of probability 0.

Sources read (transformers 5.25.0, ``transformers/generation/``):

- ``utils.py:4028-4029``: assisted generation raises ValueError for a batch of more than one
  sequence, so draws are one ``generate`` call each;
- ``utils.py:4116``: the target's logits are processed prefix by prefix with the call's
  processors; ``candidate_generator.py:326-342``: the assistant's ``q`` is its processed scores
  (``output_scores``) from its own ``generate`` with the same processors;
- ``utils.py:4122-4129`` and ``4457-4522`` (``_speculative_sampling``): acceptance
  ``r_i < p_i / q_i`` with ``torch.rand_like`` and the residual by ``torch.multinomial``, both on
  torch's global generator, which :func:`draw_block` seeds once per block inside
  ``torch.random.fork_rng``;
- ``utils.py:4158-4170``: the accepted block is cut at ``max_length`` and after its first EOS;
  ``candidate_generator.py:292-297``: the assistant drafts at most ``max_length - cur_len - 1``.

Greedy mode (``do_sample=False``) is exact: assisted and plain greedy decoding must emit the same
tokens for every prompt.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specaudit.errors import ExitCode, UsageError
from specaudit.loops import hf_mutants
from specaudit.results import Category, CheckResult, ScenarioResult, Status, worst
from specaudit.stats import gof

__all__ = [
    "BLOCK",
    "CONFIGS",
    "DEFAULT_SAMPLES",
    "Audit",
    "Config",
    "Setup",
    "audit",
    "configurations",
    "measure",
    "build_models",
    "draw_block",
    "exact_law",
    "greedy_equality",
    "joint_law",
    "sample_counts",
]

#: Continuations drawn by default, per sampled configuration (``specaudit run hf-generate``: seven of them).
DEFAULT_SAMPLES = 5_000
#: Continuations per seeded block: blocks are the unit of work, so the counts do not depend on ``jobs``.
BLOCK = 500
#: Most cells of the joint law (``vocab ** length``).
MAX_CELLS = 4096
#: Most-deviating cells a joint-law result keeps.
TOP_CELLS = 8


@dataclass(frozen=True)
class Setup:
    """The tiny models and the generation config of one audit (validated on construction)."""

    vocab: int = 6
    hidden: int = 16
    layers: int = 1
    eos: int = 5
    prompt: tuple[int, ...] = (1, 2, 3)
    length: int = 3  # max_new_tokens
    temperature: float = 0.9
    top_k: int | None = 4
    top_p: float | None = 0.95
    init_range: float = 0.5  # initializer_range: wide enough that the laws are far from uniform
    target_seed: int = 1
    assistant_seed: int = 2
    greedy_prompts: int = 16  # random prompts of the greedy check, besides ``prompt``
    # history-dependent processing (HF's own processors, over prompt + the tokens emitted so far; None: off)
    repetition_penalty: float | None = None
    no_repeat_ngram_size: int | None = None
    min_new_tokens: int | None = None
    bad_words_ids: tuple[tuple[int, ...], ...] | None = None

    def __post_init__(self) -> None:
        def bad(name: str, allowed: str) -> UsageError:
            return UsageError(f"hf-generate: {name} = {getattr(self, name)!r}; allowed: {allowed}")

        if not 2 <= self.vocab <= 64:
            raise bad("vocab", "2 <= vocab <= 64")
        if self.hidden < 2 or self.hidden % 2:
            raise bad("hidden", "an even number >= 2 (two attention heads)")
        if not 1 <= self.layers <= 8:
            raise bad("layers", "1 <= layers <= 8")
        if not 0 <= self.eos < self.vocab:
            raise bad("eos", f"a token 0 .. {self.vocab - 1}")
        if not self.prompt or any(not 0 <= t < self.vocab for t in self.prompt):
            raise bad("prompt", f"a non-empty tuple of tokens 0 .. {self.vocab - 1}")
        if not 1 <= self.length <= 6 or self.vocab**self.length > MAX_CELLS:
            raise bad("length", f"1 <= length <= 6 with vocab ** length <= {MAX_CELLS}")
        if not self.temperature > 0 or not math.isfinite(self.temperature):
            raise bad("temperature", "a finite number > 0")
        if self.top_k is not None and self.top_k < 1:
            raise bad("top_k", "None or an integer >= 1")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise bad("top_p", "None or 0 < top_p <= 1")
        if self.greedy_prompts < 0:
            raise bad("greedy_prompts", "an integer >= 0")
        if self.repetition_penalty is not None and not (self.repetition_penalty > 0 and math.isfinite(self.repetition_penalty)):
            raise bad("repetition_penalty", "None or a finite number > 0")
        if self.no_repeat_ngram_size is not None and self.no_repeat_ngram_size < 1:
            raise bad("no_repeat_ngram_size", "None or an integer >= 1")
        if self.min_new_tokens is not None and not 0 <= self.min_new_tokens <= self.length:
            raise bad("min_new_tokens", f"None or 0 .. length ({self.length})")
        if self.bad_words_ids is not None and (not self.bad_words_ids or any(
                not word or any(not 0 <= t < self.vocab for t in word) for word in self.bad_words_ids)):
            raise bad("bad_words_ids", f"None or non-empty sequences of tokens 0 .. {self.vocab - 1}")

    @property
    def cells(self) -> int:
        """Return the number of cells of the joint law."""
        return int(self.vocab**self.length)

    def describe(self) -> str:
        """Return the setup in one line, for reports."""
        history = "".join(f" {name}={value!r}" for name, value in self.history_processing().items())
        return (f"V={self.vocab} L={self.length} prompt={list(self.prompt)} eos={self.eos} "
                f"temperature={self.temperature} top_k={self.top_k} top_p={self.top_p}{history}")

    def history_processing(self) -> dict[str, Any]:
        """Return the history-dependent processing that is on, as GenerationConfig arguments."""
        given = {"repetition_penalty": self.repetition_penalty, "no_repeat_ngram_size": self.no_repeat_ngram_size,
                 "min_new_tokens": self.min_new_tokens,
                 "bad_words_ids": None if self.bad_words_ids is None else [list(w) for w in self.bad_words_ids]}
        return {k: v for k, v in given.items() if v is not None}


# -- the models and HF's own processing -------------------------------------------------------

_MODELS: dict[Setup, tuple[Any, Any]] = {}


def build_models(setup: Setup) -> tuple[Any, Any]:
    """Return (target, assistant): tiny random-weight Llama causal LMs, cached per process."""
    if setup in _MODELS:
        return _MODELS[setup]
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    def one(seed: int) -> Any:
        config = LlamaConfig(
            vocab_size=setup.vocab, hidden_size=setup.hidden, intermediate_size=2 * setup.hidden,
            num_hidden_layers=setup.layers, num_attention_heads=2, num_key_value_heads=2,
            max_position_embeddings=64, initializer_range=setup.init_range, tie_word_embeddings=False,
            bos_token_id=setup.prompt[0], eos_token_id=setup.eos, pad_token_id=setup.eos,
        )
        with torch.random.fork_rng(devices=[]):  # seeded weights; the caller's generator is left as it was
            torch.manual_seed(seed)
            model = LlamaForCausalLM(config)
        return model.eval()

    with _quiet():
        _MODELS[setup] = (one(setup.target_seed), one(setup.assistant_seed))
    return _MODELS[setup]


def generation_config(setup: Setup, sample: bool) -> Any:
    """Return the GenerationConfig of a sampled (or greedy) continuation of ``setup.length`` tokens."""
    from transformers import GenerationConfig

    warp = {"temperature": setup.temperature, "top_k": setup.top_k, "top_p": setup.top_p} if sample else {}
    return GenerationConfig(do_sample=sample, max_new_tokens=setup.length, eos_token_id=setup.eos,
                            pad_token_id=setup.eos, **warp, **setup.history_processing())


def processors(model: Any, setup: Setup) -> Any:
    """Return the LogitsProcessorList ``generate`` builds for the sampled config (utils.py:2798, 2990)."""
    import torch

    prompt = torch.tensor([setup.prompt])
    prepared, _ = model._prepare_generation_config(generation_config(setup, True))
    model._prepare_special_tokens(prepared, True, device=prompt.device)  # the EOS tensor min_new_tokens masks (utils.py)
    return model._get_logits_processor(generation_config=prepared, input_ids_seq_length=prompt.shape[1],
                                       encoder_input_ids=prompt, logits_processor=None, device=prompt.device,
                                       model_kwargs={})


def exact_law(setup: Setup) -> np.ndarray:
    """Return the target's exact law of a continuation: ``vocab ** length`` cells, EOS-padded after EOS.

    Each prefix's next-token law is the softmax (float64) of HF's processed scores of the target's
    forward pass on prompt + prefix, all live prefixes of one length in one batch.
    """
    import torch

    target, _ = build_models(setup)
    steps = processors(target, setup)
    law = np.zeros((setup.vocab,) * setup.length)
    alive: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
    with _quiet(), torch.inference_mode():
        for step in range(setup.length):
            ids = torch.tensor([setup.prompt + prefix for prefix, _ in alive])
            logits = target(ids).logits[:, -1, :].to(torch.float32)
            probs = torch.softmax(steps(ids, logits).to(torch.float64), dim=-1).numpy()
            grown = []
            for (prefix, mass), row in zip(alive, probs, strict=True):
                for token in np.flatnonzero(row > 0):
                    sequence = (*prefix, int(token))
                    if token == setup.eos or step == setup.length - 1:
                        law[sequence + (setup.eos,) * (setup.length - len(sequence))] += mass * row[token]
                    else:
                        grown.append((sequence, mass * float(row[token])))
            alive = grown
            if not alive:
                break
    flat = law.ravel()
    return flat / flat.sum()


# -- drawing from the real loop ---------------------------------------------------------------


def cell_of(tokens: Sequence[int], setup: Setup) -> int | None:
    """Return the cell of an emitted continuation, None when no correct loop can emit it.

    Longer than ``length``, shorter without ending in EOS, or a token outside the vocabulary.
    (A token after EOS is a cell of probability 0, found by the test.)
    """
    n = len(tokens)
    if n > setup.length or n == 0 or (n < setup.length and tokens[-1] != setup.eos):
        return None
    if any(not 0 <= t < setup.vocab for t in tokens):
        return None
    padded = list(tokens) + [setup.eos] * (setup.length - n)
    return int(np.ravel_multi_index(padded, (setup.vocab,) * setup.length))


@dataclass(frozen=True)
class Draws:
    """Counts of emitted continuations per cell, and those no correct loop emits."""

    counts: np.ndarray
    malformed: int
    first_malformed: tuple[int, ...] | None
    seconds: float


def block_seed(seed: int, block: int) -> int:
    """Return the torch seed of one block of draws (independent streams by SeedSequence)."""
    return int(np.random.SeedSequence([seed, block]).generate_state(1, np.uint64)[0])


def draw_block(setup: Setup, n: int, seed: int, mutant: str | None = None) -> Draws:
    """Draw ``n`` continuations with ``target.generate(..., assistant_model=assistant, do_sample=True)``."""
    import torch

    target, assistant = build_models(setup)
    config = generation_config(setup, True)
    prompt = torch.tensor([setup.prompt])
    counts = np.zeros(setup.cells, dtype=np.int64)
    malformed, first = 0, None
    start = time.perf_counter()
    with _quiet(), _one_thread(), hf_mutants.applied(mutant), torch.random.fork_rng(devices=[]), \
            torch.inference_mode():
        torch.manual_seed(seed)
        for _ in range(n):
            out = target.generate(prompt, assistant_model=assistant, generation_config=config)
            tokens = out[0, prompt.shape[1]:].tolist()
            cell = cell_of(tokens, setup)
            if cell is None:
                malformed += 1
                first = first or tuple(tokens)
            else:
                counts[cell] += 1
    return Draws(counts, malformed, first, time.perf_counter() - start)


def _draw(args: tuple[Setup, int, int, str | None]) -> Draws:
    """Run one block in a worker process."""
    return draw_block(*args)


def sample_counts(setup: Setup, n: int, seed: int, jobs: int = 1, mutant: str | None = None,
                  progress: Callable[[int], None] | None = None) -> Draws:
    """Draw ``n`` continuations in seeded blocks of :data:`BLOCK`, on ``jobs`` processes (spawned)."""
    sizes = [min(BLOCK, n - start) for start in range(0, n, BLOCK)]
    work = [(setup, size, block_seed(seed, i), mutant) for i, size in enumerate(sizes)]
    start = time.perf_counter()
    parts: list[Draws] = []
    if jobs <= 1 or len(work) == 1:
        for item in work:
            parts.append(_draw(item))
            if progress:
                progress(item[1])
    else:
        import multiprocessing

        # spawned, not forked: a forked child of a process that ran torch's OpenMP pool can hang
        with multiprocessing.get_context("spawn").Pool(min(jobs, len(work))) as pool:
            for part in pool.imap(_draw, work):
                parts.append(part)
                if progress:
                    progress(int(part.counts.sum()) + part.malformed)
    counts = np.sum([p.counts for p in parts], axis=0) if parts else np.zeros(setup.cells, dtype=np.int64)
    first = next((p.first_malformed for p in parts if p.first_malformed is not None), None)
    return Draws(counts, sum(p.malformed for p in parts), first, time.perf_counter() - start)


# -- the checks -------------------------------------------------------------------------------


def _cell(index: int, setup: Setup) -> list[int]:
    """Return a cell's tokens."""
    return [int(x) for x in np.unravel_index(index, (setup.vocab,) * setup.length)]


#: Level (Bonferroni over the prefixes tested) at which a prefix's next-token law is reported as the first divergence.
DIVERGENCE_LEVEL = 1e-3


def first_divergence(counts: np.ndarray, probs: np.ndarray, setup: Setup) -> dict[str, Any] | None:
    """Return where the emitted continuations first depart from the exact law: the shortest prefix whose
    next-token counts fail a goodness-of-fit test against the target's law after it (Bonferroni over every
    prefix tested, at :data:`DIVERGENCE_LEVEL`), or None.

    A report, not a test of its own: it names the position, the prefix, the expected law and what was
    emitted there, so a failed joint law reads as a trajectory (issue 35 item 5).
    """
    shape = (setup.vocab,) * setup.length
    observed, law = np.asarray(counts, float).reshape(shape), np.asarray(probs, float).reshape(shape)
    tests: list[tuple[int, tuple[int, ...], np.ndarray, np.ndarray, float]] = []
    for t in range(setup.length):
        o_t = observed.sum(axis=tuple(range(t + 1, setup.length)))  # counts of prefixes of length t + 1
        p_t = law.sum(axis=tuple(range(t + 1, setup.length)))
        for prefix in np.ndindex(*shape[:t]):
            if setup.eos in prefix:  # after EOS the continuation is padding, not drawn
                continue
            o, p = o_t[prefix], p_t[prefix]
            if o.sum() < 1 or p.sum() <= 0:
                continue
            fit = gof.goodness_of_fit(o, p / p.sum())
            tests.append((t, tuple(int(x) for x in prefix), o, p / p.sum(), fit.pvalue))
    level = DIVERGENCE_LEVEL / max(len(tests), 1)
    hits = [x for x in tests if x[4] <= level]
    if not hits:
        return None
    t, prefix, o, p, pvalue = min(hits, key=lambda x: (x[0], x[4]))
    return {"position": t, "prefix": list(prefix), "pvalue": float(pvalue), "level": level, "n": int(o.sum()),
            "expected": {int(x): round(float(p[x]), 4) for x in np.flatnonzero(p > 0)},
            "observed": {int(x): round(float(o[x] / o.sum()), 4) for x in np.flatnonzero(o > 0)}}


def joint_law(draws: Draws, probs: np.ndarray, setup: Setup, alpha: float | None, method: str = "pearson") -> CheckResult:
    """Test the emitted continuations against the exact law (:func:`specaudit.stats.goodness_of_fit`).

    ``alpha`` None: the p-value check is left PENDING for the run's Holm family (a continuation no
    correct loop emits fails it outright, an exact finding).
    """
    fit = gof.goodness_of_fit(draws.counts, probs, method)
    expected = probs * fit.n
    with np.errstate(divide="ignore", invalid="ignore"):
        resid = np.where(expected > 0, (draws.counts - expected) / np.sqrt(expected),
                         np.where(draws.counts > 0, np.inf, 0.0))
    top = np.argsort(-np.abs(resid), kind="stable")[:TOP_CELLS]
    data = {
        "n": fit.n, "cells": fit.cells, "groups": fit.groups, "impossible": fit.impossible,
        "malformed": draws.malformed, "tv": fit.tv, "tv_null": fit.tv_null,
        "top_cells": [{"cell": _cell(int(i), setup), "observed": int(draws.counts[i]),
                       "expected": float(expected[i]), "residual": float(resid[i])}
                      for i in top if draws.counts[i] or expected[i]],
    }
    summary = f"{'G' if method == 'g' else 'X^2'} = {fit.statistic:.1f} on {fit.df} df, TV = {fit.tv:.4f} (null ~{fit.tv_null:.4f})"
    data["first_divergence"] = where = first_divergence(draws.counts, probs, setup)
    if where is not None:
        summary += (f"; first divergence at new token {where['position'] + 1}, after {where['prefix']} "
                    f"({where['n']} continuations): expected {where['expected']}, emitted {where['observed']}")
    failed = alpha is not None and fit.pvalue < alpha
    if fit.impossible:
        summary = f"{fit.impossible} continuations of target probability 0 were emitted; " + summary
    if draws.malformed:
        failed = True
        summary = (f"{draws.malformed} continuations no correct loop emits (first: {list(draws.first_malformed or ())}); "
                   + summary)
    if draws.malformed:  # exact: outside Holm's family
        return CheckResult("joint-law", Category.DISTRIBUTION, Status.FAILED, summary, fit.statistic, fit.pvalue,
                           fit.df, data=data)
    if alpha is None:
        return CheckResult("joint-law", Category.DISTRIBUTION, Status.PENDING, summary, fit.statistic, fit.pvalue,
                           fit.df, data=data)
    status = Status.FAILED if failed else Status.PASSED
    return CheckResult("joint-law", Category.DISTRIBUTION, status, summary, fit.statistic, fit.pvalue, fit.df,
                       adjusted_pvalue=fit.pvalue, data=data)


def greedy_prompts(setup: Setup) -> list[tuple[int, ...]]:
    """Return the prompts of the greedy check: ``setup.prompt`` and seeded random ones (lengths 1 to 4)."""
    rng = np.random.default_rng(20260)
    extra = [tuple(int(t) for t in rng.integers(0, setup.vocab, int(rng.integers(1, 5))))
             for _ in range(setup.greedy_prompts)]
    return [setup.prompt, *extra]


def greedy_equality(setup: Setup, mutant: str | None = None) -> CheckResult:
    """Check that assisted greedy decoding emits exactly what plain greedy decoding emits, prompt by prompt."""
    import torch

    target, assistant = build_models(setup)
    config = generation_config(setup, False)
    prompts = greedy_prompts(setup)
    mismatches = []
    with _quiet(), _one_thread(), hf_mutants.applied(mutant), torch.inference_mode():
        for prompt in prompts:
            ids = torch.tensor([prompt])
            plain = target.generate(ids, generation_config=config)[0, len(prompt):].tolist()
            assisted = target.generate(ids, assistant_model=assistant, generation_config=config)[0, len(prompt):].tolist()
            if plain != assisted:
                mismatches.append({"prompt": list(prompt), "plain": plain, "assisted": assisted})
    if mismatches:
        m = mismatches[0]
        summary = (f"{len(mismatches)} of {len(prompts)} prompts differ; first: prompt {m['prompt']} "
                   f"plain {m['plain']} assisted {m['assisted']}")
        status = Status.FAILED
    else:
        summary = f"assisted == plain greedy decoding on all {len(prompts)} prompts"
        status = Status.PASSED
    return CheckResult("greedy-equality", Category.DISTRIBUTION, status, summary,
                       data={"prompts": len(prompts), "mismatches": mismatches[:TOP_CELLS]})


# -- the generate configurations: one scenario result each --------------------------------------


@dataclass(frozen=True)
class Config:
    """One generate configuration audited: a scenario of ``specaudit run hf-generate``."""

    name: str
    description: str
    setup: Setup
    sampled: bool = True  # False: greedy decoding, checked exactly (assisted == plain)

    def content_hash(self) -> str:
        """Return the hash of what the configuration measures (two results compare only when it agrees)."""
        return hashlib.sha256(repr((self.setup, self.sampled)).encode()).hexdigest()[:16]


_BASE = Setup()
#: The configurations of ``specaudit run hf-generate``, in run order (``-s NAME`` picks some).
CONFIGS: dict[str, Config] = {c.name: c for c in (
    Config("sampled", "do_sample with temperature 0.9, top-k 4, top-p 0.95", _BASE),
    Config("greedy", "do_sample=False: assisted == plain greedy decoding, prompt by prompt (exact)", _BASE, sampled=False),
    Config("temperature", "temperature 1.3 alone (no top-k, no top-p)",
           dataclasses.replace(_BASE, temperature=1.3, top_k=None, top_p=None)),
    Config("top-k", "top-k 2 alone (temperature 1)", dataclasses.replace(_BASE, temperature=1.0, top_k=2, top_p=None)),
    Config("top-p", "top-p 0.7 alone (temperature 1)",
           dataclasses.replace(_BASE, temperature=1.0, top_k=None, top_p=0.7)),
    Config("eos-in-block", "EOS drafted inside a block of up to 4 (V=4, max_new_tokens 5, P(first token EOS) ~0.5)",
           dataclasses.replace(_BASE, vocab=4, eos=3, prompt=(1, 2), length=5, top_k=None)),
    Config("max-new-tokens-1", "max_new_tokens 1: the assistant may draft nothing",
           dataclasses.replace(_BASE, length=1)),
    Config("max-new-tokens-4", "max_new_tokens 4: the block cut at max_length",
           dataclasses.replace(_BASE, length=4)),
    # history-dependent processing: the verified positions' scores depend on the drafts before them in the block
    Config("repetition-penalty", "repetition_penalty 2.0 over prompt and emitted tokens (4 new tokens)",
           dataclasses.replace(_BASE, length=4, repetition_penalty=2.0)),
    Config("no-repeat-ngram", "no_repeat_ngram_size 2: no bigram twice in prompt + continuation (4 new tokens)",
           dataclasses.replace(_BASE, length=4, top_k=None, no_repeat_ngram_size=2)),
    Config("min-new-tokens", "min_new_tokens 3: EOS masked for the first 3 tokens (V=4, EOS likely, 5 new tokens)",
           dataclasses.replace(_BASE, vocab=4, eos=3, prompt=(1, 2), length=5, top_k=None, min_new_tokens=3)),
    Config("bad-words", "bad_words_ids [[3, 3], [4, 1]]: 3 banned after 3, 1 after 4 (4 new tokens)",
           dataclasses.replace(_BASE, length=4, top_k=None, bad_words_ids=((3, 3), (4, 1)))),
)}


def configurations(names: Sequence[str] | None = None) -> list[Config]:
    """Return the configurations named (all of them for None or empty), UsageError naming an unknown one."""
    if not names:
        return list(CONFIGS.values())
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise UsageError(f"-s {unknown[0]}: not a configuration of hf-generate; it has: {', '.join(CONFIGS)}")
    return [CONFIGS[n] for n in dict.fromkeys(names)]


def config_seed(seed: int, index: int) -> int:
    """Return the seed of configuration ``index`` of a run seeded ``seed``."""
    return int(np.random.SeedSequence([seed, 35, index]).generate_state(1, np.uint64)[0] >> np.uint64(1))


def measure(config: Config, samples: int, seed: int, jobs: int = 1, mutant: str | None = None,
            method: str = "pearson", progress: Callable[[int], None] | None = None) -> ScenarioResult:
    """Measure one configuration: its joint law left PENDING for Holm (sampled), or greedy equality (exact)."""
    start = time.perf_counter()
    setup = config.setup
    info: dict[str, Any] = {"setup": setup.describe(), "mutant": mutant}
    if config.sampled:
        probs = exact_law(setup)
        draws = sample_counts(setup, samples, seed, jobs, mutant, progress)
        law = probs.reshape((setup.vocab,) * setup.length)
        # a continuation stops at EOS before max_new_tokens iff its cell has EOS at position length - 2
        info["p_eos_before_cap"] = float(law.take(setup.eos, axis=setup.length - 2).sum()) if setup.length > 1 else 0.0
        info["per_sequence_s"] = draws.seconds / samples
        checks: tuple[CheckResult, ...] = (joint_law(draws, probs, setup, None, method),)
        verifier_seconds, calls = draws.seconds, samples
    else:
        checks = (greedy_equality(setup, mutant),)
        verifier_seconds, calls, samples = 0.0, 2 * len(greedy_prompts(setup)), len(greedy_prompts(setup))
    line = list(CONFIGS).index(config.name) + 1 if config.name in CONFIGS else 1
    return ScenarioResult(config.name, "<hf-generate>", line, config.content_hash(),
                          config.description, seed, samples, checks, seconds=time.perf_counter() - start,
                          verifier_seconds=verifier_seconds, calls=calls, info=info)


@dataclass(frozen=True)
class Audit:
    """What one end-to-end audit of HF assisted generation measured and decided."""

    transformers: str
    setup: Setup
    samples: int
    seed: int
    alpha: float
    jobs: int
    mutant: str | None
    checks: tuple[CheckResult, ...]
    seconds: float  # the whole audit
    sample_seconds: float  # drawing the continuations

    @property
    def status(self) -> Status:
        """Return the worst check's status."""
        return worst(tuple(c.status for c in self.checks))

    @property
    def exit_code(self) -> ExitCode:
        """Return 0 when every check passed, 1 otherwise."""
        return ExitCode.OK if self.status is Status.PASSED else ExitCode.CHECKS_FAILED

    def per_sequence(self) -> float:
        """Return the wall-clock seconds per drawn continuation."""
        return self.sample_seconds / self.samples if self.samples else float("nan")


def transformers_version() -> str:
    """Return the installed transformers' version (UsageError when it is not installed)."""
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        raise UsageError("hf-generate needs transformers and torch: pip install -e '.[hf]' in specaudit's checkout") from None


def check_version(asked: str | None) -> str:
    """Return the installed transformers version; UsageError when ``asked`` names another release.

    The whole loop runs from the installed package (unlike ``hf-transformers@VERSION``, whose one
    function is compiled from the release's file), so a version can only be asked for, not fetched.
    """
    installed = transformers_version()
    if asked is not None:
        from packaging.version import InvalidVersion, Version

        try:
            same = Version(asked) == Version(installed)
        except InvalidVersion:
            raise UsageError(f"hf-generate@{asked}: {asked!r} is not a version (e.g. hf-generate@{installed})") from None
        if not same:
            raise UsageError(f"hf-generate@{asked}: the whole generate loop runs from the installed transformers, "
                             f"which is {installed}; pip install transformers=={asked} to audit that release")
    return installed


def audit(setup: Setup | None = None, samples: int = DEFAULT_SAMPLES, seed: int = 0, alpha: float = 1e-3,
          jobs: int = 1, mutant: str | None = None, version: str | None = None,
          progress: Callable[[int], None] | None = None) -> Audit:
    """Audit the installed transformers' assisted generation end to end: joint law and greedy equality.

    ``mutant`` names a loop mutant of :mod:`specaudit.loops.hf_mutants` patched in for the run
    (a negative control). Returns data; never prints.
    """
    setup = setup or Setup()
    if not 1 <= samples <= 10**8:
        raise UsageError(f"hf-generate: samples = {samples}; allowed: 1 .. 100000000")
    if not 0 < alpha < 1:
        raise UsageError(f"hf-generate: alpha = {alpha}; allowed: 0 < alpha < 1")
    if mutant is not None:
        hf_mutants.MUTANTS.get(mutant)  # an unknown name fails before any model is built
    installed = check_version(version)
    start = time.perf_counter()
    probs = exact_law(setup)
    draws = sample_counts(setup, samples, seed, jobs, mutant, progress)
    checks = (joint_law(draws, probs, setup, alpha), greedy_equality(setup, mutant))
    return Audit(installed, setup, samples, seed, alpha, jobs, mutant, checks, time.perf_counter() - start,
                 draws.seconds)


# -- process hygiene --------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence transformers' logging (generation-flag warnings) and restore its level after."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Run torch on one intra-op thread (tiny models: threads only add overhead), restored after."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
