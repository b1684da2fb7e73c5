"""Under the hood: the PTX numba generated for the sidebar's kernel and the SASS ptxas made of it, each
line of source beside its instructions and the memory counts recorded for it; ptxas's registers, spills
and shared memory beside the occupancy they allow."""

import streamlit as st

from visualizer.analysis import asm
from visualizer.analysis.occupancy import ARCHS, occupancy
from visualizer.engine.capture import ptx
from visualizer.web.asm import compiled, remember_count, visitor_compiled
from visualizer.web.memory import access_capture
from visualizer.web.session import as_text, from_link, require_capture, show_link_notices, to_link

ARCH_CHOICES = [a for a in ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90") if a in ARCHS]


st.title("Under the hood")
cap = require_capture()
launch = cap.launch
show_link_notices(from_link("asm_arch", "sm_90", ARCH_CHOICES))
top = st.columns([1.2, 1, 1, 1.3, 1])
arch = top[0].selectbox(
    "Compile for", ARCH_CHOICES, key="asm_arch", help="NVVM compiles for it; no GPU needed"
)
to_link("asm_arch")
params = tuple(sorted(launch["params"].items()))
try:
    with st.spinner(f"Compiling {launch['kernel']} for {arch} (numba → NVVM → PTX, ptxas, nvdisasm)…"):
        if launch.get("user_kernel"):  # in a sandbox of its own, never in this server
            got, why = visitor_compiled(cap, arch)
            if got is None:
                st.error(f"Could not compile your kernel: {as_text(why)}.", icon=":material/lock:")
                st.caption(
                    "On the command line, your own file: "
                    "`python -m visualizer asm --source FILE.py --kernel NAME ...`"
                )
                st.stop()
        else:
            got = compiled(launch["kernel"], params, arch)
except ptx.AsmError as exc:
    st.error(f"Could not compile: {as_text(str(exc))}")
    st.stop()
res = asm.ptxas_resources(got["ptxas_log"]) if got.get("ptxas_log") else {}
if res.get("registers") is not None:
    remember_count(cap, arch, res)  # every page of this session uses ptxas's count from now on
    top[1].metric("registers", res["registers"], help="per thread, ptxas -v, clean build")
    top[2].metric(
        "spills",
        f"{res['spill_stores_bytes'] + res['spill_loads_bytes']} B",
        help=f"ptxas -v: {res['spill_stores_bytes']} B spill stores, {res['spill_loads_bytes']} B spill loads",
    )
    top[3].metric("shared memory", f"{res['smem_bytes']:,} B", help="static, per block, ptxas -v")
    try:
        occ = occupancy(arch, launch["threads_per_block"], res["registers"],
                        smem_dynamic=launch.get("dynamic_smem_bytes", 0), smem_static=res["smem_bytes"])  # fmt: skip
        limited = f"{occ.blocks_per_sm} blocks/SM, limited by {', '.join(occ.limiters)}"
        top[4].metric(
            "occupancy",
            f"{occ.occupancy:.0%}",
            help=f"modelled (occupancy calculator) from ptxas -v: {limited}",
        )
    except ValueError as exc:
        limited = as_text(str(exc))
else:
    limited = "ptxas is not installed here, so no register count"
versions = ", ".join(f"{k} {v}" for k, v in got["versions"].items() if v)
missing = [t for t in got.get("missing", []) if t]
compiled_note = (
    f"Compiled ({versions}): the clean build, every probe a no-op, typed with this launch's arguments. "
    f"Occupancy modelled: {limited} (see *Occupancy*)."
    + (f" Not installed here: {', '.join(missing)} (no SASS)." if missing else "")
)

per_line = None
note = "Accesses are not recorded on the GPU backend; switch the sidebar to the simulator to see them."
if launch.get("user_kernel"):  # the visitor's own recording, if they asked for it on the Your kernel page
    recorded = launch.get("accesses")
    per_line = recorded["per_line"] if recorded else None
    note = (
        "Accesses: recorded addresses, simulator (your run)."
        if recorded
        else "Accesses were not recorded for your kernel: tick *record memory accesses* on the Your kernel "
        "page (simulator) and run it again."
    )
elif launch["backend"] == "sim":
    acc, err = access_capture(launch["kernel"], dict(launch["params"]))
    per_line = acc.launch["accesses"]["per_line"] if acc is not None else None
    note = f"Accesses could not be recorded: {err}" if err else "Accesses: recorded addresses, simulator."
ptx_t = asm.ptx_table(got["ptx"])
sass_t = asm.sass_table(got["sass"]) if got.get("sass") else None
lines = asm.source_lines(got["source"], got["filename"], ptx_t, sass_t, per_line)
code_lines = lines[(lines["ptx"] > 0) | (lines["requests"] > 0)]
left, right = st.columns([3, 2])
with left:
    pick = st.dataframe(
        code_lines[["line", "ptx", "sass", "code", "accesses"]], hide_index=True, height=280,
        on_select="rerun", selection_mode="single-row", key="asm_table",
        column_config={"line": st.column_config.NumberColumn(width=40), "ptx": st.column_config.NumberColumn(width=40),
                       "sass": st.column_config.NumberColumn(width=40),
                       "code": st.column_config.TextColumn(width="medium"),
                       "accesses": st.column_config.TextColumn(width="large")},
    )  # fmt: skip
    st.caption("Each source line that compiled to something; pick one for its instructions. " + note)
    st.caption(compiled_note)
rows = pick.selection.rows if pick and pick.selection else []
busiest = (
    int(code_lines.sort_values("sass" if sass_t is not None else "ptx").iloc[-1]["line"])
    if len(code_lines)
    else 0
)
line = int(code_lines.iloc[rows[0]]["line"]) if rows else busiest
with right:
    code = lines.loc[lines["line"] == line, "code"].item().strip() if line else ""
    st.markdown(f"**Line {line}**: {as_text(code, limit=70)}")
    t1, t2 = st.tabs(["SASS", "PTX"])
    same_sass = asm.same_file(sass_t["file"], got["filename"]) if sass_t is not None else None
    with t1:
        if sass_t is None:
            st.info("nvdisasm is not installed here: pip install nvidia-cuda-nvdisasm")
        else:
            st.code(
                "\n".join(sass_t.loc[same_sass & (sass_t["line"] == line), "text"]) or "(none)",
                language=None,
                height=260,
            )
    with t2:
        same = asm.same_file(ptx_t["file"], got["filename"])
        st.code("\n".join(" ".join(t.split()) for t in ptx_t.loc[same & (ptx_t["line"] == line), "text"]) or "(none)",
                language=None, height=240)  # fmt: skip
with st.expander("The whole PTX and SASS"):
    st.download_button(
        "kernel.ptx", got["ptx"], file_name=f"{launch['kernel']}_{arch}.ptx", on_click="ignore"
    )
    if got.get("sass"):
        st.download_button(
            "kernel.sass", got["sass"], file_name=f"{launch['kernel']}_{arch}.sass", on_click="ignore"
        )
    st.code(got["ptx"], language=None, height=300)
