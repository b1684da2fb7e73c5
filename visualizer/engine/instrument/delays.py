"""Seeded delays that make races show on a GPU (CUTracer's idea), as an instrumenter pass.

A race is a pair of accesses whose order nobody fixed; on a GPU one order usually wins every time,
so the answer looks right (or wrong the same way) run after run. Moving *warps* relative to each
other changes which access of the pair comes first. So the traced kernel calls
``_vz_race_delay(_vz_delay, SITE)`` before every statement that loads or stores a kernel array
(a parameter or a shared array), calls ``cuda.atomic.*`` or ``cuda.syncthreads*``; the device
function (kernels/probes.py ``race_delay``) makes the whole warp spin for
``_vz_delay[SITE, warp % DELAY_SLOTS]`` nanoseconds on ``%globaltimer`` (0: no wait).

Each site has kinds (``load``, ``store``, ``atomic``, ``barrier``; ``sites`` lists (line, kinds)).
The host draws run i's table from (seed, i) alone (:func:`delay_table`), so the pair names the
perturbation and replays it:

* which kinds of site wait in this run (each kind the kernel has, kept with probability 1/2, at
  least one): delaying the writer of a pair exposes a race, delaying its reader hides it, so runs
  that delay only loads or only stores push in opposite directions;
* the share of warps that wait at a delayed site (``DELAY_P``: one of 1/4, 1/2, 3/4) and the longest
  wait (``DELAY_MAX_NS``: 1, 4 or 16 us), drawn per run;
* each warp's wait at each site, log-uniform from ``DELAY_MIN_NS`` to that longest wait: mostly
  short, sometimes long, so warps end up in many different orders.

The last design (one wait per *thread*, a quarter of the threads up to 20 us before shared accesses
and barriers only) hid the reverse's race on the H200: every warp had a lane waiting nearly the
longest wait, so every write landed before every read. docs/benchmarks.md has both designs' runs.
"""

from __future__ import annotations

import ast

import numpy as np

from visualizer.engine.instrument.ast_tools import is_call_to, located

DELAY, DELAY_FN = "_vz_delay", "_vz_race_delay"
KINDS = ("load", "store", "atomic", "barrier")
DELAY_SLOTS = 256  # waits per site: warps share a slot every 256 warps
DELAY_P = (0.25, 0.5, 0.75)  # share of the warps that wait at a delayed site (one per run)
DELAY_MAX_NS = (1_000, 4_000, 16_000)  # the longest wait (one per run)
DELAY_MIN_NS = 32  # %globaltimer's step on the H200


def _is_atomic(node: ast.AST) -> bool:
    """``cuda.atomic.add(...)`` and the like."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr == "atomic"
    )


def array_names(fn: ast.FunctionDef) -> set[str]:
    """The arrays threads may share: the kernel's parameters (the instrumenter's own excepted) and
    the names it binds to ``cuda.shared.array(...)`` (local arrays are each thread's own)."""
    names = {a.arg for a in fn.args.args if not a.arg.startswith("_vz")}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            f = node.value.func
            if isinstance(f, ast.Attribute) and f.attr == "array" and isinstance(f.value, ast.Attribute):
                bound = {t.id for t in node.targets if isinstance(t, ast.Name)}
                if f.value.attr == "shared":
                    names |= bound
                elif f.value.attr == "local":
                    names -= bound
    return names


def site_kinds(nodes: list[ast.AST], arrays: set[str]) -> tuple[str, ...]:
    """What the expressions or statement ``nodes`` do that a race is made of, in ``KINDS`` order."""
    found = set()
    for top in nodes:
        for node in ast.walk(top):
            if is_call_to(node, "syncthreads", prefix=True):
                found.add("barrier")
            elif _is_atomic(node):
                found.add("atomic")
            elif (
                isinstance(node, ast.Subscript)
                and isinstance(node.value, ast.Name)
                and node.value.id in arrays
            ):
                found.add("store" if isinstance(node.ctx, ast.Store) else "load")
                if isinstance(top, ast.AugAssign) and node is top.target:
                    found.add("load")  # a[i] += 1 reads before it writes
    return tuple(k for k in KINDS if k in found)


def add_delays(body: list[ast.stmt], arrays: set[str], sites: list) -> list[ast.stmt]:
    """Each statement that loads or stores an array, or calls an atomic or a barrier, gets a delay
    call before it (a compound statement: before it for its header, inside it for its body)."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(stmt)
            continue
        if isinstance(stmt, (ast.If, ast.For, ast.While, ast.With)):
            header = [stmt.test] if isinstance(stmt, (ast.If, ast.While)) else []
            header += [stmt.iter] if isinstance(stmt, ast.For) else []
            header += [i.context_expr for i in stmt.items] if isinstance(stmt, ast.With) else []
            kinds = site_kinds(header, arrays)
            for field in ("body", "orelse"):
                if getattr(stmt, field, None):
                    setattr(stmt, field, add_delays(getattr(stmt, field), arrays, sites))
        else:
            kinds = site_kinds([stmt], arrays)
        if kinds:
            call = ast.Expr(
                ast.Call(
                    func=ast.Name(DELAY_FN, ast.Load()),
                    args=[ast.Name(DELAY, ast.Load()), ast.Constant(len(sites))],
                    keywords=[],
                )
            )
            sites.append((stmt.lineno, "+".join(kinds)))
            out.append(located(call, stmt))
        out.append(stmt)
    return out


class DelayPass:
    """The instrumenter pass: ``apply`` rewrites the traced copy of a kernel in place and stores
    its sites in ``info["sites"]``; the traced kernel takes the table as its parameter ``_vz_delay``."""

    name = "delays"
    params = (DELAY,)

    def globals(self) -> dict:
        from visualizer.kernels.probes import race_delay

        return {DELAY_FN: race_delay}

    def apply(self, fn: ast.FunctionDef, info: dict) -> None:
        sites: list = []
        fn.body = add_delays(fn.body, array_names(fn), sites)
        info["sites"] = sites


def _site_kinds(sites) -> list[set[str]]:
    return [set(str(what).split("+")) for _, what in sites]


def delay_table(seed: int, run: int, sites) -> tuple[np.ndarray, dict]:
    """Run ``run``'s waits (ns, uint32, shape (sites, DELAY_SLOTS)) and what launch.json says of
    them, drawn from (seed, run) and the sites' kinds only (module docstring)."""
    rng = np.random.default_rng([int(seed), int(run)])
    per_site = _site_kinds(sites)
    present = [k for k in KINDS if any(k in s for s in per_site)]
    keep = rng.random(len(KINDS)) < 0.5
    active = [k for k, kept in zip(KINDS, keep, strict=True) if kept and k in present]
    if present and not active:
        active = [present[int(rng.integers(len(present)))]]
    p = float(DELAY_P[int(rng.integers(len(DELAY_P)))])
    max_ns = int(DELAY_MAX_NS[int(rng.integers(len(DELAY_MAX_NS)))])
    rows = max(1, len(per_site))
    wait = rng.random((rows, DELAY_SLOTS)) < p
    ns = np.exp(rng.uniform(np.log(DELAY_MIN_NS), np.log(max_ns), (rows, DELAY_SLOTS)))
    on = np.array([bool(s & set(active)) for s in per_site] or [False])
    table = np.where(wait & on[:, None], np.rint(ns), 0).astype(np.uint32)
    fields = {
        "delay_kinds": active,
        "delayed_sites": [i for i, x in enumerate(on[: len(per_site)]) if x],
        "delay_p": p,
        "max_delay_ns": max_ns,
        "delayed_slots": int((table > 0).sum()),
        "delay_slots": int(table.size),
    }
    return table, fields
