"""Run settings: one frozen, validated object for everything a run is asked to do.

``specaudit.run``'s keyword arguments, the CLI's options and a shard document's recorded settings
all become one :class:`RunSettings` (nox's one config object handed to every task of
``workflow.execute``). It is validated once, when it is built, so the pipeline below it
(:mod:`specaudit.engine.run`, :mod:`specaudit.engine.scenario`, :mod:`specaudit.engine.executors`)
reads plain fields and re-checks nothing. The settings a RunResult records are written by
:meth:`RunSettings.record` and read back by :meth:`RunSettings.from_record` only, so
``specaudit merge`` reads a shard's settings exactly as the run wrote them.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specaudit.chains.processing import CONVENTIONS
from specaudit.checks import statistical_checks
from specaudit.contract.guard import DEFAULT_TIMEOUT
from specaudit.errors import UsageError, check_level
from specaudit.stats import sequential

__all__ = [
    "BACKENDS", "DEFAULT_ALPHA", "DEFAULT_IMPORT_TIMEOUT", "RunSettings", "adapter_of", "default_suspect_level", "parse_shard",
]

#: Default of ``specaudit run --import-timeout``, seconds: importing torch, transformers or vLLM takes tens of seconds.
DEFAULT_IMPORT_TIMEOUT = 300.0

#: Family-wise error rate of a run when none is given.
DEFAULT_ALPHA = 1e-3
#: Where blocks can run: this machine's processes, or Ray tasks (:mod:`specaudit.engine.executors`).
BACKENDS = ("local", "ray")
#: The most sequences a run may ask per scenario (the scenario schema's bound on ``samples``).
MAX_SAMPLES = 10**9
#: The largest ``--batch`` (the scenario schema's bound on ``batch``).
MAX_BATCH = 1 << 20
#: Torch devices the simulator's device path runs on (:mod:`specaudit.engine.device`).
DEVICE = re.compile(r"cpu|cuda(:\d+)?")
#: Goodness-of-fit statistics (:func:`specaudit.stats.gof.goodness_of_fit`).
METHODS = ("pearson", "g")


def _whole(value: Any) -> bool:
    """Return True for an integer (numpy's included), False for a float, a bool or anything else."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def default_suspect_level(alpha: float) -> float:
    """Return the default suspect level: 100 x alpha, at most 0.5."""
    return min(100.0 * alpha, 0.5)


def parse_shard(shard: tuple[int, int] | str | None) -> tuple[int, int] | None:
    """Return a shard as ``(i, n)``, parsing ``"i/n"`` (0 <= i < n); None stays None."""
    if not isinstance(shard, str):
        return None if shard is None else (int(shard[0]), int(shard[1]))
    try:
        i, n = (int(x) for x in shard.split("/"))
    except ValueError:
        raise UsageError(f"--shard {shard}: expected i/n with integers, e.g. 0/2") from None
    if not (n >= 1 and 0 <= i < n):
        raise UsageError(f"--shard {shard}: allowed 0 <= i < n, e.g. 0/2 and 1/2")
    return i, n


@dataclass(frozen=True)
class RunSettings:
    """Everything a run is asked to do besides which target and scenarios; validated when built.

    Attributes
    ----------
    alpha : float
        Family-wise error rate over every statistical check of the run (Holm).
    seed : int or None
        Run seed; each scenario's seed is derived from it and the scenario's content (None: every
        scenario uses its own ``seed``).
    samples : int or None
        Sequences per scenario, overriding the scenarios'.
    batch : int or None
        Rows per verifier call, overriding the scenarios' ``batch`` (a slow verifier: smaller calls
        stay inside ``timeout``).
    method : {"pearson", "g"}
        Goodness-of-fit statistic.
    gate_efficiency : bool
        Whether tokens/step and accept-length failures fail the run.
    contract : {"probs", "logits"}
        How the target is called.
    convention : str or None
        The sampling convention (:data:`specaudit.chains.processing.CONVENTIONS`) every scenario's
        reference follows, overriding the scenarios' ``convention`` (None: each scenario's own).
    timeout : float or None
        Seconds one verifier call may take (None or 0: no limit).
    import_timeout : float or None
        Seconds the supervised child may take to import and bind the target (None or 0: no limit).
    max_memory : int or None
        Bytes the simulator's batch may use in host memory (None: ``specaudit.simulate.chain.DEFAULT_MAX_MEMORY``).
    max_device_memory : int or None
        Bytes the batch may use on a CUDA device, at most what is free there (None:
        ``specaudit.simulate.device.DEVICE_SHARE`` of its free memory, ``torch.cuda.mem_get_info``).
    jobs : int
        Processes the blocks run in.
    backend : {"local", "ray"}
        Where the blocks run.
    address : str or None
        The Ray cluster to join.
    suspect_level : float or None
        Holm p-values in (alpha, suspect_level] are SUSPECT and re-run (None: 100 x alpha, at most 0.5).
    power : bool
        Annotate every scenario with its sensitivity and power (:mod:`specaudit.analysis.power`).
    diagnose : bool
        Rank the zoo mutants for every failing scenario (:mod:`specaudit.analysis.diagnose`).
    early_stop : bool
        Sequential looks after 1, 2, 4, ... blocks (:mod:`specaudit.stats.sequential`).
    certify_tv : float or None
        ``EPS``, 0 < EPS < 1: keep sampling every scenario (looks as with early stop) until its TV bound
        (:mod:`specaudit.stats.certificate`) is at most EPS, a check fails for sure, or the sample cap
        (``samples``, else 4x what a lossless verifier is expected to need) is reached.
    shard : (int, int) or None
        ``(i, n)``: run only blocks ``b = i mod n`` and keep their tallies for ``specaudit merge``.
    adapter : str or None
        The adapter that drives the target (:mod:`specaudit.adapters`).
    adapter_options : mapping or None
        The adapter's options.
    device : str or None
        Simulate on this torch device (``"cpu"``, ``"cuda"``, ``"cuda:N"``) and call the verifier with
        tensors there (:mod:`specaudit.engine.device`); None: on the host, unless the adapter's tensor
        form lives on a GPU.
    """

    alpha: float = DEFAULT_ALPHA
    seed: int | None = None
    samples: int | None = None
    batch: int | None = None
    method: str = "pearson"
    gate_efficiency: bool = True
    contract: str = "probs"
    convention: str | None = None
    timeout: float | None = DEFAULT_TIMEOUT
    import_timeout: float | None = DEFAULT_IMPORT_TIMEOUT
    max_memory: int | None = None
    max_device_memory: int | None = None
    jobs: int = 1
    backend: str = "local"
    address: str | None = None
    suspect_level: float | None = None
    power: bool = True
    diagnose: bool = True
    early_stop: bool = False
    certify_tv: float | None = None
    shard: tuple[int, int] | None = None
    adapter: str | None = None
    adapter_options: Mapping[str, Any] | None = None
    device: str | None = None

    def __post_init__(self) -> None:
        """Raise UsageError for a setting out of its range (the messages name the setting and what is allowed)."""
        check_level("alpha", self.alpha)
        if self.suspect_level is not None and not 0 <= self.suspect_level < 1:
            raise UsageError(f"suspect_level = {self.suspect_level}; allowed: 0 <= suspect_level < 1 (<= alpha: no re-runs)")
        if self.method not in METHODS:
            raise UsageError(f"method = {self.method!r}; allowed: 'pearson', 'g'")
        if self.samples is not None and not (_whole(self.samples) and 1 <= self.samples <= MAX_SAMPLES):
            raise UsageError(f"samples = {self.samples!r}; allowed: >= 1 and <= {MAX_SAMPLES:,} (an integer)")
        if self.batch is not None and not (_whole(self.batch) and 1 <= self.batch <= MAX_BATCH):
            raise UsageError(f"batch = {self.batch!r}; allowed: an integer 1 .. {MAX_BATCH:,} (rows per verifier call)")
        if self.seed is not None and not (_whole(self.seed) and 0 <= self.seed < 2**64):
            raise UsageError(f"seed = {self.seed!r}; allowed: an integer 0 .. 2**64 - 1, or None")
        if self.timeout is not None and not self.timeout >= 0:
            raise UsageError(f"timeout = {self.timeout}; allowed: seconds >= 0 (0 or None: no limit)")
        if self.import_timeout is not None and not self.import_timeout >= 0:
            raise UsageError(f"import_timeout = {self.import_timeout}; allowed: seconds >= 0 (0 or None: no limit)")
        if self.shard is not None and self.early_stop:
            raise UsageError("early stop needs every block in order; it cannot be combined with --shard")
        if self.certify_tv is not None:
            eps = self.certify_tv
            if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 < eps < 1:
                raise UsageError(f"certify_tv = {eps!r}; allowed: 0 < EPS < 1, the total-variation distance to certify "
                                 "(e.g. 0.005)")
            if self.shard is not None:
                raise UsageError("--certify-tv looks at every block in order; it cannot be combined with --shard")
        if self.max_device_memory is not None and not (_whole(self.max_device_memory) and self.max_device_memory >= 1):
            raise UsageError(f"max_device_memory = {self.max_device_memory!r}; allowed: bytes >= 1 (an integer), or None: "
                             "a share of the device's free memory")
        if self.convention is not None and self.convention not in CONVENTIONS:
            raise UsageError(f"convention = {self.convention!r}: {CONVENTIONS.unknown(str(self.convention))}")
        if self.jobs < 1:
            raise UsageError(f"jobs = {self.jobs}; allowed: >= 1")
        if self.backend not in BACKENDS:
            raise UsageError(f"backend = {self.backend!r}; allowed: {', '.join(map(repr, BACKENDS))}")
        if self.device is not None and not DEVICE.fullmatch(str(self.device)):
            raise UsageError(f"device = {self.device!r}; allowed: 'cpu', 'cuda' or 'cuda:N' (a torch device)")

    @property
    def suspect(self) -> float:
        """Return the run's suspect level (0 in a shard: its verdicts are provisional, `specaudit merge` settles them)."""
        if self.shard is not None:
            return 0.0
        return default_suspect_level(self.alpha) if self.suspect_level is None else self.suspect_level

    @property
    def holm_suspect(self) -> float | None:
        """Return the level up to which Holm marks a check SUSPECT, or None when the run has no re-runs."""
        return self.suspect if self.suspect > self.alpha else None

    def stop_level(self, scenarios: int) -> float | None:
        """Return the early-stop level of a run of ``scenarios`` scenarios (None without early stop).

        The level is alpha / M, M bounding the run's Holm family (`specaudit.stats.sequential`):
        every scenario, exact-mode ones included (their probes add p-values to the family), holds
        at most one p-value per registered check, and Holm rejects any p <= alpha / M.
        """
        if not self.early_stop and self.certify_tv is None:  # a certificate looks as early stop does
            return None
        return sequential.stop_level(self.alpha, scenarios * len(statistical_checks()))

    def record(self, adapter: str | None = None) -> dict[str, Any]:
        """Return the settings a RunResult records (and `specaudit merge` compares); ``adapter``: how the target was driven."""
        shard = self.shard
        return {"method": self.method, "gate_efficiency": self.gate_efficiency, "samples": self.samples,
                "contract": self.contract, "timeout": self.timeout,
                **({} if self.convention is None else {"convention": self.convention}),
                **({} if not self.early_stop else {"early_stop": True}),
                **({} if self.device is None else {"device": self.device}),
                **({} if self.certify_tv is None else {"certify_tv": self.certify_tv}),
                **({} if shard is None else {"shard": {"index": shard[0], "count": shard[1]},
                                             "suspect_level": self.suspect_level, "power": self.power,
                                             "diagnose": self.diagnose}),
                **({} if adapter is None else {"adapter": adapter})}

    @classmethod
    def from_record(cls, doc: Mapping[str, Any]) -> RunSettings:
        """Return the settings of a results document (alpha, seed and what :meth:`record` wrote)."""
        recorded = doc.get("settings", {})
        shard = recorded.get("shard")
        return cls(
            alpha=doc["alpha"],
            seed=doc.get("seed"),
            samples=recorded.get("samples"),
            method=recorded.get("method", "pearson"),
            gate_efficiency=recorded.get("gate_efficiency", True),
            contract=recorded.get("contract", "probs"),
            convention=recorded.get("convention"),
            timeout=recorded.get("timeout", DEFAULT_TIMEOUT),
            suspect_level=recorded.get("suspect_level"),
            power=recorded.get("power", True),
            diagnose=recorded.get("diagnose", True),
            early_stop=recorded.get("early_stop", False),
            device=recorded.get("device"),
            certify_tv=recorded.get("certify_tv"),
            shard=None if not shard else (int(shard["index"]), int(shard["count"])),
        )


def adapter_of(doc: Mapping[str, Any]) -> str | None:
    """Return how a results document's run drove its target (the label :meth:`RunSettings.record` wrote), or None."""
    return doc.get("settings", {}).get("adapter")
