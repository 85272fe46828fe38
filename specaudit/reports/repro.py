"""Write each failed exact finding as a minimal pytest file that imports only numpy and the target.

``specaudit repro RESULT.json`` reads the ``call`` a failed exact check recorded
(:class:`specaudit.checks.replay.Call`), shrinks it against the target
(:func:`specaudit.analysis.shrink.shrink`) and renders ``test_repro_<scenario>_<check>.py``:
the inputs inline, the random source inline (the PCG64 state the call began in, or the scripted
uniforms written out with the few lines of :class:`~specaudit.contract.uniforms.ScriptedUniforms`
that hand them out), and one assertion whose message gives expected vs got and the rule broken.
The target's import path is the run's; ``SPECAUDIT_REPRO_TARGET`` overrides it, so the same file
tests a fix. The files are written to a temporary folder beside the output folder and moved in
only once all of them are rendered (:func:`write_all`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specaudit.analysis.shrink import Shrunk, shrink
from specaudit.checks.replay import REPEATS, RULES, Call, agree_chance, make_rng
from specaudit.contract.targets import import_string, load_target
from specaudit.errors import ResultsFileError
from specaudit.reports import repro_scenario, repro_stops
from specaudit.reports.repro_load import LOAD
from specaudit.reports.repro_scenario import ScenarioRepro
from specaudit.reports.repro_stops import StopsRepro

__all__ = ["INLINE_NUMBERS", "Collected", "Finding", "Repro", "build", "build_all", "collect", "data_file", "findings",
           "inputs_of", "render", "resolve_target", "write_all"]

#: Environment variable that names another target for a generated file (``pkg.mod:attr`` or ``file.py:attr``).
TARGET_VARIABLE = "SPECAUDIT_REPRO_TARGET"


@dataclass(frozen=True)
class Finding:
    """A failed exact check of a results document, with its recorded call."""

    scenario: str
    check: str
    summary: str
    call: Call


@dataclass(frozen=True)
class Repro:
    """A rendered repro file: its name, text, and what its call shrank from."""

    name: str
    text: str
    shrunk: Shrunk
    finding: Finding
    data_name: str | None = None  # the .npz beside the file holding the inputs (None: inline)


def findings(doc: Mapping[str, Any], source: str = "results document") -> tuple[list[Finding], list[str]]:
    """Return the failed checks of ``doc`` that recorded a call, and the names of failed checks that did not."""
    found, without = [], []
    for s in doc.get("scenarios", []):
        for c in s.get("checks", []):
            if c.get("status") != "failed":
                continue
            raw = (c.get("data") or {}).get("call")
            if raw is None:
                without.append(f"{s['name']} / {c['name']}")
                continue
            try:
                call = Call.from_dict(raw)
            except ValueError as exc:
                raise ResultsFileError(f"{source}: scenario {s['name']!r} check {c['name']!r}: {exc}") from None
            found.append(Finding(s["name"], c["name"], c.get("summary", ""), call))
    return found, without


@dataclass(frozen=True)
class Collected:
    """What a results document has to reproduce, by kind, and the failed checks no kind covers."""

    exact: list[Finding]  # failed exact checks with a recorded call
    statistical: list[tuple[Mapping[str, Any], tuple[str, ...]]]  # scenarios with failed statistical checks
    stops: list[tuple[Mapping[str, Any], Mapping[str, Any]]]  # failed stops checks
    without: list[str]  # "scenario / check" of the other failed checks

    def __bool__(self) -> bool:
        return bool(self.exact or self.statistical or self.stops)


def collect(doc: Mapping[str, Any], source: str = "results document") -> Collected:
    """Return every finding of ``doc`` a repro can be written for, by kind (``specaudit repro`` and ``run --repro``)."""
    found, without = findings(doc, source)
    statistical = repro_scenario.findings(doc)
    stopped = repro_stops.findings(doc)
    covered = ({f"{s['name']} / {c}" for s, checks in statistical for c in checks}
               | {f"{s['name']} / stops" for s, _ in stopped})
    return Collected(found, statistical, stopped, [name for name in without if name not in covered])


def build_all(doc: Mapping[str, Any], collected: Collected,
              target: str) -> tuple[list[Repro], list[ScenarioRepro], list[StopsRepro], list[str]]:
    """Render every kind's repros against ``target``; return them and the findings that no longer fail there."""
    repros, gone = build(doc, collected.exact, target) if collected.exact else ([], [])
    path = resolve_target(target)
    scenarios = repro_scenario.build(doc, collected.statistical, path, TARGET_VARIABLE) if collected.statistical else []
    stops, gone_stops = (repro_stops.build(doc, collected.stops, target, path, TARGET_VARIABLE) if collected.stops
                         else ([], []))
    return repros, scenarios, stops, gone + gone_stops


def resolve_target(spec: str) -> str:
    """Return the import string a repro file loads for the run's ``spec`` (an alias or ``mutant:NAME`` resolved).

    Raises TargetLoadError (exit 4) when the target no longer imports.
    """
    func = load_target(spec)
    if spec.startswith("mutant:"):
        return f"{func.__module__}:{func.__qualname__}"
    path = import_string(spec)
    module, _, attr = path.rpartition(":")
    if module.endswith(".py") or "/" in module:
        return f"{Path(module).resolve()}:{attr}"
    return path


def _slug(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_").lower() or "x"


def build(doc: Mapping[str, Any], found: Sequence[Finding], target: str) -> tuple[list[Repro], list[str]]:
    """Shrink each finding against ``target`` and render its file; return the repros and the findings that no longer fail."""
    verify = load_target(target)
    path = resolve_target(target)
    repros, gone, names = [], [], set()
    for f in found:
        try:
            shrunk = shrink(verify, f.call)
        except ValueError:
            gone.append(f"{f.scenario} / {f.check}")
            continue
        name = f"test_repro_{_slug(f.scenario)}_{_slug(f.check)}.py"
        if name in names:
            continue  # a re-run's check of the same name: the first one is the repro
        names.add(name)
        data_name = data_file(shrunk.call, name)
        repros.append(Repro(name, render(f, shrunk, path, doc, data_name), shrunk, f, data_name))
    return repros, gone


def _uniforms(shrunk: Shrunk, path: str) -> list[float] | None:
    """Return the scripted uniforms the shrunk call hands the target (None for a PCG64 source)."""
    call = shrunk.call
    if call.source["kind"] != "scripted":
        return None
    rng = make_rng(call.source)
    skip = rng.draws  # type: ignore[attr-defined]  # a ScriptedUniforms
    try:
        load_target(path)(*call.arguments(), rng)
    except Exception:  # noqa: BLE001 - the count is what it drew before raising
        pass
    n = rng.draws - skip  # type: ignore[attr-defined]
    first = int(call.source["start"]) + skip
    return [0.0 if (first + i) % 2 == 0 else 1.0 - 2.0**-53 for i in range(n)]


def _array(a: np.ndarray, indent: str) -> str:
    """Return ``a`` as a Python literal, one innermost row a line."""
    if a.ndim <= 1:
        return json.dumps(a.tolist())
    inner = f",\n{indent} ".join(_array(x, indent + " ") for x in a)
    return f"[{inner}]"


_CHECKS = {
    "p-positive": '''\
    emitted = np.arange(out.shape[1])[None, :] < n_out[:, None]
    mass = np.take_along_axis(P, np.where(emitted, out, 0)[..., None], axis=2)[..., 0]
    bad = np.argwhere(emitted & (mass <= 0))
    got = "; ".join(f"row {b} position {j}: token {out[b, j]} has p = 0" for b, j in bad.tolist())
    assert not bad.size, f"expected every emitted token to have p > 0, got {got} (output {out.tolist()}): {RULE}"''',
    "accept-all": '''\
    expected = NUM_DRAFT + 1
    assert np.array_equal(n_out, expected), f"expected n_out = {expected.tolist()}, got {n_out.tolist()} (output {out.tolist()}): {RULE}"''',
    "argmax": '''\
    emitted = np.arange(out.shape[1])[None, :] < n_out[:, None]
    top = np.argmax(P, axis=2)
    assert not (emitted & (out != top)).any(), (
        f"expected tokens {np.where(emitted, top, -1).tolist()}, got {out.tolist()}: {RULE}")''',
    "argmax-run": '''\
    k = DRAFT.shape[1]
    top = np.argmax(P, axis=2)
    valid = np.arange(k)[None, :] < NUM_DRAFT[:, None]
    expected = np.cumprod(valid & (DRAFT == top[:, :k]), axis=1).sum(axis=1) + 1
    assert np.array_equal(n_out, expected), f"expected n_out = {expected.tolist()}, got {n_out.tolist()} (output {out.tolist()}): {RULE}"''',
    "forced-run": '''\
    k = DRAFT.shape[1]
    valid = np.arange(k)[None, :] < NUM_DRAFT[:, None]
    at = np.where(valid, DRAFT, 0)[..., None]
    p_x = np.take_along_axis(P[:, :k], at, axis=2)[..., 0]
    q_x = np.take_along_axis(Q, at, axis=2)[..., 0]
    must = np.cumprod(valid & (p_x >= q_x) & (p_x > 0), axis=1).sum(axis=1)  # leading drafts it must accept
    stop = np.take_along_axis(np.pad(p_x, ((0, 0), (0, 1))), must[:, None], axis=1)[:, 0]
    exact = (must == NUM_DRAFT) | (stop <= 0)  # the run ends at num_draft or at a p = 0 draft (must be rejected)
    accepted = n_out - 1
    bad = (accepted < must) | (exact & (accepted != must))
    assert not bad.any(), f"expected accepted drafts {must.tolist()} (exactly: {exact.tolist()}), got {accepted.tolist()}: {RULE}"''',
}

_CLAUSE_CHECK = '''\
    b, k = DRAFT.shape
    v = P.shape[-1]
    broken = {{}}
    if out.shape != (b, k + 1) or n_out.shape != (b,):
        broken["shape"] = f"out {{out.shape}}, n_out {{n_out.shape}}"
    elif out.dtype.kind not in "iu" or n_out.dtype.kind not in "iu":
        broken["dtype"] = f"out {{out.dtype}}, n_out {{n_out.dtype}}"
    else:
        emitted = np.arange(k + 1)[None, :] < n_out[:, None]
        if ((n_out < 1) | (n_out > NUM_DRAFT + 1)).any():
            broken["n_out-range"] = f"n_out {{n_out.tolist()}} with num_draft {{NUM_DRAFT.tolist()}}"
        elif (emitted & ((out < 0) | (out >= v))).any():
            broken["vocab-range"] = f"emitted ids {{np.where(emitted, out, 0).tolist()}} with V = {{v}}"
        elif (~emitted & (out != -1)).any():
            broken["padding"] = f"out {{out.tolist()}}"
        elif (emitted[:, :k] & (np.arange(k)[None, :] < (n_out - 1)[:, None]) & (out[:, :k] != DRAFT)).any():
            broken["prefix"] = f"out {{out.tolist()}} with drafts {{DRAFT.tolist()}}"
    assert {clause!r} not in broken, f"expected {{RULE}}, got {{broken.get({clause!r})}}"'''

_SCRIPTED = '''\
#: The uniforms the target drew in the shrunk call, in the order it asked for them (then 0.0 and 1 - 2**-53 by turns).
UNIFORMS = {uniforms}
HIGH32 = 1.0 - 2.0**-24  # a float32 request gets the largest float32 below 1 instead of 1 - 2**-53


class Uniforms(np.random.Generator):
    """A Generator handing out UNIFORMS in order through random / uniform / integers / exponential."""

    def __init__(self):
        super().__init__(np.random.PCG64({seed}))  # other methods draw real randomness (none should be needed)
        self.i = 0

    def _u(self, size, dtype=np.float64):
        n = 1 if size is None else int(np.prod(size))
        idx = self.i + np.arange(n)
        self.i += n
        first = {first}
        terms = np.array([UNIFORMS[i] if i < len(UNIFORMS) else (0.0 if (first + i) % 2 == 0 else 1.0 - 2.0**-53)
                          for i in idx.tolist()])
        if np.dtype(dtype) == np.float32:
            terms = np.where(terms > 0, HIGH32, 0.0)
        terms = terms.astype(dtype)
        return terms[0].item() if size is None else terms.reshape(size)

    def random(self, size=None, dtype=np.float64, out=None):
        if out is not None:
            out[...] = self._u(out.shape, out.dtype)
            return out
        return self._u(size, dtype)

    def uniform(self, low=0.0, high=1.0, size=None):
        return low + (high - low) * self._u(size)

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False):
        low, high = (0, low) if high is None else (low, high)
        span = high - low + (1 if endpoint else 0)
        value = np.minimum(low + np.floor(np.asarray(self._u(size)) * span).astype(np.int64), low + span - 1)
        return value.astype(dtype).item() if size is None else value.astype(dtype)

    def standard_exponential(self, size=None, dtype=np.float64, method="zig", out=None):
        value = -np.log1p(-np.asarray(self._u(size), dtype=np.float64))
        return float(value) if size is None else value.astype(dtype)

    def exponential(self, scale=1.0, size=None):
        value = -scale * np.log1p(-np.asarray(self._u(size), dtype=np.float64))
        return float(value) if size is None else value


def make_rng():
    return Uniforms()
'''

_PCG64 = '''\
#: The state of the PCG64 generator the target was handed (np.random.default_rng(...) of the probe, mid-stream).
STATE = {state}


def make_rng():
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = STATE
    return rng
'''

_FILE = '''\
"""Repro of specaudit's finding {scenario} / {check}: {rule_text}.

Found by specaudit {version} on `{run_target}` ({summary}).
Shrunk from {before} to {after}{decimals} ({replays} replays).

    pytest {name}                                              # fails on the target
    SPECAUDIT_REPRO_TARGET=pkg.module:verify pytest {name}     # test another verifier (a fix)

{contract_text}
"""

import importlib
import importlib.util
import os

import numpy as np

TARGET = os.environ.get("{variable}", {target!r})
RULE = {rule_text!r}

{arrays}

{source}

{load}

def test_repro():
    verify = load(TARGET)
{body}
'''

#: The body of ``test_repro`` for a rule judged on one call's output (the rule's check follows it).
_ONE_CALL = '''\
    result = verify(DRAFT.copy(), Q.copy(), P.copy(), NUM_DRAFT.copy(), make_rng())
    out, n_out = (np.asarray(x) for x in result)
'''

#: Bodies of ``test_repro`` for rules judged on more than one call, on the inputs after the call, or on a tree.
_BODIES = {
    "tree-p-positive": '''\
    path, final = (np.asarray(x) for x in verify(TOKENS.copy(), PARENT.copy(), Q.copy(), P.copy(), NUM_NODES.copy(),
                                                 make_rng()))
    bad = []
    for b in range(TOKENS.shape[0]):
        row = 0  # the law of the next emitted token: P[b, 0] at the root, P[b, 1 + j] after node j
        for j in path[b][path[b] >= 0].tolist():
            if P[b, row, TOKENS[b, j]] <= 0:
                bad.append(f"row {{b}}: accepted node {{j}} (token {{TOKENS[b, j]}}) has p = 0")
            row = 1 + j
        if not 0 <= final[b] < P.shape[-1] or P[b, row, final[b]] <= 0:
            bad.append(f"row {{b}}: the final token {{final[b]}} has p = 0 (or lies outside the vocabulary)")
    assert not bad, f"expected every emitted token to have p > 0, got {{'; '.join(bad)}} (path {{path.tolist()}}, final {{final.tolist()}}): {{RULE}}"''',
    "padding": '''\
    v = P.shape[-1]
    pad = np.arange(DRAFT.shape[1])[None, :] >= NUM_DRAFT[:, None]  # draft and q slots past num_draft
    pad_p = np.arange(P.shape[1])[None, :] > NUM_DRAFT[:, None]  # p rows past the bonus position
    outputs = []
    for token in (0, v - 1):  # two calls that differ only in the padding, through the same random source
        law = np.full(v, 0.1 / (v - 1))
        law[token] = 0.9
        draft, q, p = DRAFT.copy(), Q.copy(), P.copy()
        draft[pad], q[pad], p[pad_p] = token, law, law
        out, n_out = (np.asarray(x) for x in verify(draft, q, p, NUM_DRAFT.copy(), make_rng()))
        outputs.append([row[:n].tolist() for row, n in zip(out, n_out)])
    assert outputs[0] == outputs[1], (
        f"expected the same output for padding token 0 and {{v - 1}}, got {{outputs[0]}} and {{outputs[1]}}: {{RULE}}")''',
    "same-seed": '''\
    # A verifier that draws from rng only repeats its output; one that draws elsewhere (and is lossless) repeats
    # it {repeats} times with chance <= {chance:.2g} on these rows (sum over tokens of p[b, 0] ** {repeats}, times over rows).
    first = None
    for i in range({repeats}):
        out, n_out = (np.asarray(x) for x in verify(DRAFT.copy(), Q.copy(), P.copy(), NUM_DRAFT.copy(), make_rng()))
        got = [row[:n].tolist() for row, n in zip(out, n_out)]
        first = got if first is None else first
        assert got == first, (
            f"expected call {{i}} to repeat the first call's output {{first}} (same inputs, same rng state), got {{got}}: {{RULE}}")''',
    "other-seed": '''\
    # A lossless verifier's tokens come from the rng it is given: {repeats} calls through the recorded source and seeds
    # 1 .. {last} all give the same output on these rows with chance <= {chance:.2g} (sum over tokens of p[b, 0] ** {repeats},
    # times over rows).
    outputs = []
    for rng in [make_rng()] + [np.random.default_rng(seed) for seed in range(1, {repeats})]:
        out, n_out = (np.asarray(x) for x in verify(DRAFT.copy(), Q.copy(), P.copy(), NUM_DRAFT.copy(), rng))
        outputs.append([row[:n].tolist() for row, n in zip(out, n_out)])
    assert any(got != outputs[0] for got in outputs[1:]), (
        f"expected another seed to give another output, got {{outputs[0]}} from all {repeats} seeds: {{RULE}}")''',
    "inputs-unmodified": '''\
    given = {{"draft": DRAFT.copy(), "q": Q.copy(), "p": P.copy(), "num_draft": NUM_DRAFT.copy()}}
    verify(given["draft"], given["q"], given["p"], given["num_draft"], make_rng())
    written = []
    for name, before in (("draft", DRAFT), ("q", Q), ("p", P), ("num_draft", NUM_DRAFT)):
        after = np.asarray(given[name])
        for where in np.argwhere(after != before)[:3].tolist():
            written.append(f"{{name}}{{where}}: {{before[tuple(where)]}} -> {{after[tuple(where)]}}")
    assert not written, f"expected the inputs unchanged after the call, got {{'; '.join(written)}}: {{RULE}}"''',
}


def _shape_text(shape: tuple[int, int, int], tree: bool = False) -> str:
    b, k, v = shape
    return f"{b} row{'s' if b != 1 else ''}, {'N' if tree else 'K'} = {k}, V = {v}"


#: Numbers (every entry of the call's inputs) above which the inputs go to an .npz beside the file.
INLINE_NUMBERS = 20_000
_CHAIN_CONTRACT = """The target is called in the canonical contract:
verify(draft[B,K] int64, q[B,K,V] float64, p[B,K+1,V] float64, num_draft[B] int64, rng) -> (out[B,K+1], n_out[B])."""
_TREE_CONTRACT = """The target is called in the tree contract:
verify(tokens[B,N] int64, parent[B,N] int64, q[B,N,V] float64, p[B,N+1,V] float64, num_nodes[B] int64, rng)
-> (path[B,W] node ids, -1 padded, final[B]); p[b, 0] is the root's law, p[b, 1 + j] the law after node j."""


def inputs_of(call: Call) -> dict[str, np.ndarray]:
    """Return the call's inputs by the names the file gives them, in its contract's order."""
    if call.parent is not None:
        return {"TOKENS": call.draft, "PARENT": call.parent, "Q": call.q, "P": call.p, "NUM_NODES": call.num_draft}
    return {"DRAFT": call.draft, "Q": call.q, "P": call.p, "NUM_DRAFT": call.num_draft}


def data_file(call: Call, name: str) -> str | None:
    """Return the name of the .npz beside the file ``name`` that holds the call's inputs, or None when they are inline."""
    numbers = sum(a.size for a in inputs_of(call).values())
    return None if numbers <= INLINE_NUMBERS else name.removesuffix(".py") + ".npz"


def _arrays_text(call: Call, data_name: str | None) -> str:
    """Return the lines that define the call's inputs: inline literals, or loads from ``data_name`` beside the file."""
    arrays = inputs_of(call)
    if data_name is not None:
        numbers = sum(a.size for a in arrays.values())
        lines = [f"# the inputs ({numbers:,} numbers) are in {data_name}, beside this file",
                 f"_DATA = np.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), {data_name!r}))"]
        lines += [f"{key} = _DATA[{key.lower()!r}]" for key in arrays]
        return "\n".join(lines)
    lines = []
    for key, a in arrays.items():
        dtype = "np.int64" if a.dtype.kind in "iu" else "np.float64"
        if a.ndim == 1:
            lines.append(f"{key} = np.array({json.dumps(a.tolist())}, dtype={dtype})")
        else:
            lead = f"{key} = np.array("
            lines.append(f"{lead}{_array(a, ' ' * len(lead))}, dtype={dtype}).reshape({tuple(a.shape)})")
    return "\n".join(lines)


def render(f: Finding, shrunk: Shrunk, target: str, doc: Mapping[str, Any], data_name: str | None = None) -> str:
    """Return the text of the repro file of ``f`` shrunk to ``shrunk``, loading ``target`` by default (its inputs
    loaded from ``data_name`` beside it when given)."""
    call = shrunk.call
    rule = call.rule
    uniforms = _uniforms(shrunk, target)
    if call.source["kind"] == "scripted":
        first = int(call.source["start"]) + int(call.source.get("skip", 0))
        source = _SCRIPTED.format(uniforms=repr(uniforms), seed=int(call.source.get("seed", 0)), first=first)
    else:
        source = _PCG64.format(state=repr(dict(call.source["state"])))
    if rule in _BODIES:
        body = _BODIES[rule].format(repeats=REPEATS, last=REPEATS - 1, chance=agree_chance(call))
    else:
        body = _ONE_CALL + (_CLAUSE_CHECK.format(clause=rule.split(":", 1)[1]) if rule.startswith("clause:")
                            else _CHECKS[rule])
    summary = f.summary if len(f.summary) <= 200 else f.summary[:197] + "..."
    return _FILE.format(
        load=LOAD,
        scenario=f.scenario, check=f.check, rule_text=RULES[rule], version=doc.get("version", "?"),
        run_target=doc.get("target", "?"), summary=summary.replace('"""', "'''").replace("\\", "\\\\"),
        before=_shape_text(shrunk.before, call.tree), after=_shape_text(shrunk.after, call.tree),
        decimals=f", probabilities rounded to {shrunk.decimals} decimal(s)" if shrunk.decimals is not None else "",
        replays=shrunk.replays, name=f"test_repro_{_slug(f.scenario)}_{_slug(f.check)}.py", variable=TARGET_VARIABLE,
        target=target, arrays=_arrays_text(call, data_name), source=source, body=body,
        contract_text=_TREE_CONTRACT if call.tree else _CHAIN_CONTRACT,
    )


def write_all(repros: Sequence[Repro | ScenarioRepro | StopsRepro], out_dir: str | Path) -> list[Path]:
    """Write every repro into ``out_dir``: rendered into a temporary folder beside it, then moved in (nothing half-written)."""
    out = Path(out_dir)
    if out.is_dir():  # staged inside it, then moved in file by file
        staging = Path(tempfile.mkdtemp(prefix=".repro-", dir=out))
    else:  # staged beside it, then renamed to it whole
        parent = out.resolve().parent
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    try:
        names = []
        for r in repros:
            (staging / r.name).write_text(r.text, encoding="utf-8")
            names.append(r.name)
            if isinstance(r, Repro) and r.data_name is not None:
                with open(staging / r.data_name, "wb") as fh:
                    arrays: dict[str, Any] = {k.lower(): v for k, v in inputs_of(r.shrunk.call).items()}
                    np.savez(fh, **arrays)
                names.append(r.data_name)
        if not out.exists():
            os.replace(staging, out)
            return [out / r.name for r in repros]
        for name in names:
            os.replace(staging / name, out / name)
        return [out / r.name for r in repros]
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def for_run(doc: Mapping[str, Any], out_dir: str | Path) -> tuple[dict[str, list[dict[str, str]]], list[str]]:
    """Write the repro files of a settled run's document into ``out_dir`` (``specaudit run --repro``).

    Return, per scenario, the files written (``{"name", "check"}``, the ``repro`` entry of its info)
    and a line per thing to tell (files written, findings left out and why). The same builder as
    ``specaudit repro``: a run through an adapter or another contract gets none (said), a target
    that no longer imports is said, never an error of the run.
    """
    from specaudit.errors import SpecauditError

    collected = collect(doc)
    lines = [f"--repro: {name}: no replayable call recorded (a multi-call finding): not written"
             for name in collected.without]
    if not collected:
        return {}, lines
    settings = doc.get("settings") or {}
    if settings.get("adapter") or settings.get("contract", "probs") != "probs":
        return {}, lines + [f"--repro: the run went through adapter {settings.get('adapter')!r} / contract "
                            f"{settings.get('contract', 'probs')!r}; repro files are written for the canonical "
                            "contract only: none written"]
    try:
        repros, scenarios, stops, gone = build_all(doc, collected, str(doc.get("target", "")))
    except SpecauditError as exc:
        return {}, lines + [f"--repro: none written: {exc}"]
    try:
        written = write_all([*repros, *scenarios, *stops], out_dir) if repros or scenarios or stops else []
    except OSError as exc:  # probed before the run; the disk may still fill or the folder go away since
        return {}, lines + [f"--repro: none written: cannot write into {out_dir} ({exc.strerror or exc})"]
    per: dict[str, list[dict[str, str]]] = {}
    for r, path in zip(repros, written):
        per.setdefault(r.finding.scenario, []).append({"name": r.name, "check": r.finding.check})
        lines.append(f"wrote {path}: repro of {r.finding.scenario} / {r.finding.check} "
                     f"({_shape_text(r.shrunk.after, r.shrunk.call.tree)})")
    for sr, path in zip(scenarios, written[len(repros):]):
        per.setdefault(sr.scenario, []).append({"name": sr.name, "check": ", ".join(sr.checks)})
        lines.append(f"wrote {path}: statistical repro of {sr.scenario} / {', '.join(sr.checks)} (N = {sr.samples:,})")
    for st, path in zip(stops, written[len(repros) + len(scenarios):]):
        per.setdefault(st.scenario, []).append({"name": st.name, "check": "stops"})
        lines.append(f"wrote {path}: repro of {st.scenario} / stops ({st.case}: 1 row, K = {st.after[1]}, V = {st.after[2]})")
    lines += [f"--repro: {name}: the recorded call no longer fails on the target: not written" for name in gone]
    return per, lines
