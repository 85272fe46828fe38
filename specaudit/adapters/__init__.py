"""Adapters: drive a verifier that speaks another layout through the canonical contract.

An adapter turns a *target* (the callable named on the command line, in its own layout) into a
canonical verifier::

    verify(draft[B,K] int64, q[B,K,V] f64, p[B,K+1,V] f64, num_draft[B] int64, rng) -> (out, n_out)

It maps the canonical inputs to the target's layout (torch tensors, logits, packed ragged rows,
padded fixed-n rows, per-request generators), calls the target, and maps its outputs back; the
harness then checks them exactly as for a numpy verifier. Adapters come from three places,
looked up in this order: the built-ins below, the entry-point group ``specaudit.adapters``, and
an import string ``pkg.mod:attr`` (or ``file.py:attr``). The object found is an :class:`Adapter`,
or a plain callable ``build(target, **options) -> verify`` whose options arrive as given. The
built-ins are a :class:`~specaudit.registry.Registry` of import strings; which adapter a target
alias brings (``hf-transformers`` -> ``hf``) is a column of the one alias table,
:data:`specaudit.contract.targets.ALIASES`.

Writing one: see README, "Writing an adapter".
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specaudit.contract import logits, stops
from specaudit.contract.targets import Alias, alias, load_object
from specaudit.errors import TargetLoadError, UsageError, closest
from specaudit.registry import Registry

#: Entry-point group that third-party packages use to register adapters.
ENTRY_POINT_GROUP = "specaudit.adapters"

#: Built-in adapters: name -> ``module:attribute`` (imported only when used: no torch at import).
BUILTIN: Registry[str] = Registry("adapter", UsageError)
BUILTIN.register("torch", "specaudit.adapters.torch:ADAPTER")
BUILTIN.register("hf", "specaudit.adapters.hf:ADAPTER")
BUILTIN.register("vllm", "specaudit.adapters.vllm:ADAPTER")
BUILTIN.register("vllm-mrv2", "specaudit.adapters.vllm_mrv2:ADAPTER")  # Model Runner V2 (vllm@0.34+)
BUILTIN.register("flashinfer", "specaudit.adapters.flashinfer:ADAPTER")
BUILTIN.register("sglang_tree", "specaudit.adapters.sglang_tree:ADAPTER")  # the tree contract
BUILTIN.register("sglang_chain", "specaudit.adapters.sglang_chain:ADAPTER")  # its Triton chain kernel
BUILTIN.register("per-row", "specaudit.adapters.per_row:ADAPTER")  # batch-1 targets, row by row

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_bool(value: Any) -> bool:
    """Parse a boolean option (true/false, yes/no, on/off, 1/0)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def optional_bool(value: Any) -> bool | None:
    """Parse a boolean option where 'none' (or 'auto') means unset."""
    if value is None or (isinstance(value, str) and value.strip().lower() in {"", "none", "null", "auto"}):
        return None
    return parse_bool(value)


def optional_float(value: Any) -> float | None:
    """Parse a float option where 'none' means unset."""
    if value is None or (isinstance(value, str) and value.strip().lower() in {"", "none", "null"}):
        return None
    return float(value)


@dataclass(frozen=True)
class Option:
    """One ``--adapter-arg`` an adapter accepts: how to parse it, its default, what it does."""

    name: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    choices: tuple[str, ...] | None = None

    def coerce(self, value: Any, adapter: str) -> Any:
        """Return ``value`` parsed, or raise UsageError naming the option and what is allowed."""
        if self.choices is not None and str(value) not in self.choices and not _device_like(self, value):
            raise UsageError(
                f"adapter {adapter!r}: {self.name} = {value!r}; allowed: {', '.join(self.choices)}"
                f"{closest(str(value), self.choices)}"
            )
        try:
            return self.parse(value)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"adapter {adapter!r}: {self.name} = {value!r}: {exc}") from None


def _device_like(option: Option, value: Any) -> bool:
    """Allow 'cuda:N' wherever 'cuda' is a choice."""
    return option.name == "device" and str(value).startswith("cuda:") and str(value)[5:].isdigit()


#: Options shared by the torch-based adapters.
DEVICE = Option("device", str, "cpu", "torch device the inputs are put on", ("cpu", "cuda"))
DTYPE = Option(
    "dtype", str, "float64", "floating dtype of q and p (engines verify in float32)",
    ("float64", "float32", "float16", "bfloat16"),
)


@dataclass(frozen=True)
class Adapter:
    """A named way to call targets of one layout through the canonical contract.

    ``build(target, **options)`` returns the canonical verifier. ``options`` declares every
    ``--adapter-arg`` accepted (None: accept anything, passed through as given). ``requires``
    lists the modules it imports and ``extra`` the pip extra that installs them, for messages.
    """

    name: str
    summary: str
    build: Callable[..., Callable[..., Any]]
    options: tuple[Option, ...] | None = ()
    requires: tuple[str, ...] = ()
    extra: str | None = None
    source: str = "built-in"

    def parse_options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Return every option with its default, overridden and parsed from ``given``."""
        if self.options is None:
            return dict(given)
        known = {o.name: o for o in self.options}
        for key in given:
            if key not in known:
                allowed = ", ".join(known) or "none"
                raise UsageError(
                    f"adapter {self.name!r} has no option {key!r}{closest(key, known)}; allowed: {allowed}"
                )
        return {name: (opt.coerce(given[name], self.name) if name in given else opt.default) for name, opt in known.items()}

    def missing(self) -> list[str]:
        """Return the required modules that are not installed."""
        return [m for m in self.requires if importlib.util.find_spec(m) is None]

    def wrap(self, target: Callable[..., Any], options: Mapping[str, Any] | None = None) -> Callable[..., Any]:
        """Return the canonical verifier that drives ``target`` with ``options``."""
        parsed = self.parse_options(options or {})
        absent = self.missing()
        if absent:
            hint = f"pip install -e '.[{self.extra}]' in specaudit's checkout" if self.extra else f"pip install {' '.join(absent)}"
            raise UsageError(f"adapter {self.name!r} needs {', '.join(absent)}, which is not installed: {hint}")
        verify = self.build(target, **parsed)
        verify.__specaudit_adapter__ = (self.name, parsed)  # type: ignore[attr-defined]
        return verify


@dataclass(frozen=True)
class AdapterChoice:
    """An adapter name with its options, as a run or a scenario asks for it."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        """Return e.g. ``hf(assistant_ensemble_weight=0.5)``."""
        opts = ", ".join(f"{k}={v}" for k, v in sorted(self.options.items()))
        return f"{self.name}({opts})" if opts else self.name


def _entry_points() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _as_adapter(obj: Any, name: str, source: str) -> Adapter:
    if isinstance(obj, Adapter):
        return obj if obj.source == source else _replace(obj, source=source)
    if callable(obj):
        doc = (getattr(obj, "__doc__", None) or "").strip().splitlines()
        return Adapter(name, doc[0] if doc else "user adapter", obj, options=None, source=source)
    kind = type(obj).__name__
    raise UsageError(f"adapter {name!r} ({source}) is {'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}, "
                     "not an Adapter or a callable")


def _replace(adapter: Adapter, **changes: Any) -> Adapter:
    import dataclasses

    return dataclasses.replace(adapter, **changes)


def _import_attr(spec: str, what: str) -> Any:
    try:
        return load_object(spec)
    except TargetLoadError as exc:
        raise UsageError(f"{what}: {exc}") from None


def get(name: str) -> Adapter:
    """Return the adapter called ``name``: a built-in, an entry point, or an import string."""
    if name in BUILTIN:
        return _import_attr(BUILTIN.get(name), f"built-in adapter {name!r}")
    eps = _entry_points()
    if name in eps:
        try:
            obj = eps[name].load()
        except Exception as exc:  # noqa: BLE001 - a third-party plugin may raise anything
            raise UsageError(f"adapter {name!r} (entry point {eps[name].value}) failed to load: {exc}") from None
        return _as_adapter(obj, name, f"entry point {eps[name].value}")
    if ":" in name:
        return _as_adapter(_import_attr(name, f"adapter {name!r}"), name, "import string")
    known = sorted({*BUILTIN, *eps})
    raise UsageError(
        f"unknown adapter {name!r}{closest(name, known)}; available: {', '.join(known)} "
        "(or an import string pkg.mod:attr); `specaudit adapters` lists them"
    )


def available() -> list[Adapter]:
    """Return every built-in and entry-point adapter (entry points that fail to load are skipped)."""
    found = [get(name) for name in BUILTIN]
    for name, ep in _entry_points().items():
        if name in BUILTIN:
            continue
        try:
            found.append(_as_adapter(ep.load(), name, f"entry point {ep.value}"))
        except Exception:  # noqa: BLE001 - listing must not die on a broken plugin
            continue
    return found


def parse_args(pairs: Iterable[str]) -> dict[str, str]:
    """Parse repeated ``key=value`` strings (``--adapter-arg``); raise UsageError on a malformed one."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--adapter-arg {pair!r}: expected key=value, e.g. --adapter-arg dtype=float32")
        out[key.strip()] = value.strip()
    return out


def choose(
    target: str | Callable[..., Any],
    run_adapter: str | None,
    run_options: Mapping[str, Any],
    scenario_adapter: AdapterChoice | None = None,
) -> AdapterChoice | None:
    """Return the adapter a scenario is driven with, or None for a canonical target.

    The command line wins over the scenario, which wins over a target alias's preset. Options
    given on the command line are laid over the scenario's when both name the same adapter.
    """
    preset = _preset(target)
    name = run_adapter
    if name is None and scenario_adapter is not None:
        name = scenario_adapter.name
    if name is None and preset is not None:
        name = preset.adapter
    if name is None:
        if run_options:
            raise UsageError(
                f"adapter options {', '.join(sorted(run_options))} were given without an adapter; "
                f"add --adapter NAME (built-in: {', '.join(BUILTIN)})"
            )
        return None
    options: dict[str, Any] = {}
    if preset is not None and preset.adapter == name:
        options.update(preset.options)
    if scenario_adapter is not None and scenario_adapter.name == name:
        options.update(scenario_adapter.options)
    options.update(run_options)
    return AdapterChoice(name, options)


def wrap(target: Callable[..., Any], choice: AdapterChoice) -> Callable[..., Any]:
    """Return ``target`` wrapped by the adapter that ``choice`` names, with its options."""
    return get(choice.name).wrap(target, choice.options)


def _preset(target: str | Callable[..., Any]) -> Alias | None:
    """Return the alias ``target`` names when it brings an adapter, else None."""
    entry = alias(target)
    return entry if entry is not None and entry.adapter is not None else None


def preset_scenarios(target: str | Callable[..., Any]) -> list[str] | None:
    """Return the default suite of a target alias that brings one (e.g. ``tag:hf``), else None."""
    entry = alias(target)
    if entry is not None and entry.scenarios is not None:
        return list(entry.scenarios)
    return None


@dataclass(frozen=True)
class Binding:
    """The canonical verifier each scenario of a run is driven with, and the adapter behind it.

    ``main`` is the run-level one (the ``--adapter`` choice, else the first scenario's own, else
    the target itself): the one whose signature the runner checks.
    """

    verifiers: tuple[Callable[..., Any], ...]
    choices: tuple[AdapterChoice | None, ...]
    main: Callable[..., Any]
    main_choice: AdapterChoice | None


def bind(
    target: str | Callable[..., Any],
    raw: Callable[..., Any],
    specs: Iterable[Any],
    run_adapter: str | None = None,
    run_options: Mapping[str, Any] | None = None,
) -> Binding:
    """Return the canonical verifier for every scenario spec; each distinct adapter is built once.

    ``raw`` is the loaded target and ``target`` what the user named (for alias presets). The
    command line wins over a scenario's ``adapter:``, which wins over an alias preset.
    """
    run_options = dict(run_options or {})
    built: dict[tuple[str, str] | None, Callable[..., Any]] = {}

    def build(choice: AdapterChoice | None) -> Callable[..., Any]:
        if choice is not None and stops.declares_stops(raw):  # an adapter speaks the canonical contract only
            raise UsageError(f"{target if isinstance(target, str) else 'TARGET'} declares the stops contract "
                             f"(verify.stops = True), which adapters do not speak; run it without --adapter "
                             f"{choice.name} (the stops contract is the canonical one plus stops)")
        if stops.declares_stops(raw) and (mode := logits.logprobs_mode(raw)) is not None:
            raise UsageError(f"{target if isinstance(target, str) else 'TARGET'} declares both the stops contract "
                             f"(verify.stops = True) and logprobs (verify.logprobs_mode = {mode!r}); each adds a "
                             f"third return value, so they cannot be combined: audit the stops with one target and "
                             f"the logprobs with another")
        key = None if choice is None else (choice.name, repr(sorted(choice.options.items())))
        if key not in built:
            built[key] = stops.split_stops(logits.split_logprobs(raw)) if choice is None else wrap(raw, choice)
        return built[key]

    verifiers, choices = [], []
    for spec in specs:
        own = getattr(spec, "adapter", None)
        choice = choose(target, run_adapter, run_options, None if own is None else AdapterChoice(own.name, dict(own.options)))
        verifiers.append(build(choice))
        choices.append(choice)
    if run_adapter is not None or not choices:
        main_choice = choose(target, run_adapter, run_options)
    else:
        main_choice = next((c for c in choices if c is not None), None)
    return Binding(tuple(verifiers), tuple(choices), build(main_choice), main_choice)
