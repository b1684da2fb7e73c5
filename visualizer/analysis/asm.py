"""PTX and SASS text as tables of instructions with their source lines, ``ptxas -v`` as numbers, and
the per-source-line view: each line of the kernel's file with its PTX and SASS instructions and the
memory counts recorded for it (analysis/memory.line_summary).

Pure text parsing, no tools run here (engine/capture/ptx.py runs them). Line info: PTX's ``.loc FILE LINE
COL`` directives (numba writes them with ``lineinfo=True``) apply to the instructions after them;
``nvdisasm -g`` writes ``//## File "PATH", line N`` before the SASS instructions of line N.
"""

from __future__ import annotations

import re

import pandas as pd

from visualizer.analysis.provenance import labelled

PTX_SOURCE = "compiled (numba-cuda → NVVM → PTX)"
SASS_SOURCE = "compiled (ptxas → SASS, read back by nvdisasm)"

_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"')
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)")
_SASS_LINE = re.compile(r'^\s*//## File "([^"]*)", line (\d+)')
_SASS_INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*$")
_PTXAS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "barriers": re.compile(r"used (\d+) barriers"),
    "smem_bytes": re.compile(r"(\d+) bytes smem"),
    "cmem_bytes": re.compile(r"(\d+) bytes cmem\[0\]"),
    "stack_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores_bytes": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads_bytes": re.compile(r"(\d+) bytes spill loads"),
}


def ptx_table(ptx: str) -> pd.DataFrame:
    """One row per PTX instruction: n, file, line (0 = no source line), opcode, text."""
    files: dict[int, str] = {}
    for raw in ptx.splitlines():
        m = _FILE.match(raw)
        if m:
            files[int(m.group(1))] = m.group(2)
    rows, file_no, line = [], None, 0
    for raw in ptx.splitlines():
        text = raw.strip()
        m = _LOC.match(raw)
        if m:
            file_no, line = int(m.group(1)), int(m.group(2))
            continue
        if (not text or text.startswith(("//", ".", "{", "}", ")", "(")) or text.endswith(":")
                or text.startswith("$") and text.endswith(":")):  # fmt: skip
            continue
        if not text.endswith(";") and not text.startswith("@"):
            continue  # a declaration's continuation (parameter lists)
        body = text.split("//")[0].strip()
        opcode = body.lstrip("@!%p0123456789 ").split()[0] if body else ""
        if body.startswith("@"):  # predicated: "@%p1 bra $L__BB0_2;"
            parts = body.split(None, 2)
            opcode = parts[1] if len(parts) > 1 else ""
        rows.append({"n": len(rows), "file": files.get(file_no, ""), "line": line, "opcode": opcode,
                     "text": body})  # fmt: skip
    df = pd.DataFrame(rows, columns=["n", "file", "line", "opcode", "text"])
    return labelled(df, PTX_SOURCE, column=False)


def sass_table(sass: str) -> pd.DataFrame:
    """One row per SASS instruction: address, file, line (0 = none), opcode, text."""
    rows, file, line = [], "", 0
    for raw in sass.splitlines():
        m = _SASS_LINE.match(raw)
        if m:
            file, line = m.group(1), int(m.group(2))
            continue
        m = _SASS_INSN.match(raw)
        if m:
            text = m.group(2).strip().rstrip(";").strip()
            words = text.split()
            opcode = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words or [""])[0]
            rows.append({"address": int(m.group(1), 16), "file": file, "line": line, "opcode": opcode,
                         "text": text})  # fmt: skip
    df = pd.DataFrame(rows, columns=["address", "file", "line", "opcode", "text"])
    return labelled(df, SASS_SOURCE, column=False)


SASS_COUNT_WHAT = "SASS instructions in the kernel (static count, NOP padding left out)"
SASS_COUNT_MAX = 1 << 24  # a count read back from a bundle or a sandbox past this is no count


def sass_count(sass: str) -> int:
    """Instructions in the compiled kernel as nvdisasm lists them, the NOPs that pad its end left out:
    a static count (code size), not the instructions a launch executes."""
    table = sass_table(sass or "")
    return int((table["opcode"] != "NOP").sum())


def sass_count_of(value) -> int | None:
    """A SASS count read from untrusted data (a bundle, a sandbox's reply): an int in range, else None."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 < value < SASS_COUNT_MAX
    return value if ok else None


def ptxas_resources(log: str) -> dict:
    """Registers, barriers, shared/constant memory, stack and spills per kernel from ``ptxas -v``."""
    out = {}
    for key, pattern in _PTXAS.items():
        m = pattern.search(log or "")
        out[key] = int(m.group(1)) if m else (0 if key != "registers" else None)
    return out


def same_file(files: pd.Series, filename: str) -> pd.Series:
    """Rows of ``filename``: numba writes a relative name as an absolute path (its directory
    the compiler's working directory), so a bare name matches by its last part."""
    if "/" in filename:
        return files == filename
    return (files == filename) | files.str.endswith("/" + filename)


def source_lines(source: str, filename: str, ptx: pd.DataFrame, sass: pd.DataFrame | None,
                 per_line: list[dict] | None = None) -> pd.DataFrame:  # fmt: skip
    """Every line of the kernel's file with its instruction counts and recorded accesses.

    Columns: line, code, ptx (instructions), sass (instructions; NaN without SASS), and where
    accesses were recorded for the line: requests, sectors_per_request (global), max_bank_ways
    (shared), accesses (a short text naming array, space and op). Only rows of ``filename`` count (same_file).
    """
    lines = source.splitlines()
    df = pd.DataFrame({"line": range(1, len(lines) + 1), "code": lines})
    p = ptx[same_file(ptx["file"], filename)].groupby("line").size()
    df["ptx"] = df["line"].map(p).fillna(0).astype(int)
    if sass is not None:
        s = sass[same_file(sass["file"], filename)].groupby("line").size()
        df["sass"] = df["line"].map(s).fillna(0).astype(int)
    else:
        df["sass"] = pd.NA
    df["requests"], df["sectors_per_request"], df["max_bank_ways"], df["accesses"] = 0, float("nan"), 0, ""
    by_line: dict[int, list[dict]] = {}
    for r in per_line or []:
        by_line.setdefault(int(r["line"]), []).append(r)
    for line, recs in by_line.items():
        i = line - 1
        if not 0 <= i < len(df):
            continue
        glob = [r for r in recs if r["space"] == "global"]
        df.loc[i, "requests"] = sum(int(r["requests"]) for r in recs)
        if glob:
            req = sum(int(r["requests"]) for r in glob)
            df.loc[i, "sectors_per_request"] = (
                sum(float(r["sectors"]) for r in glob) / req if req else float("nan")
            )
        df.loc[i, "max_bank_ways"] = max(int(r.get("max_bank_ways", 0)) for r in recs)
        df.loc[i, "accesses"] = "; ".join(
            f"{r['array']} {r['space']} {r['op']}: {r['requests']} req, "
            + (
                f"{r['sectors_per_request']:.1f} sectors/req"
                if r["space"] != "shared"
                else f"{r['max_bank_ways']}-way"
            )  # fmt: skip
            for r in recs
        )
    return labelled(df, f"{PTX_SOURCE}; accesses: recorded addresses, simulator", column=False)
