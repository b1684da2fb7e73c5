"""The bench's GPU report from recorded numbers (made-up values here; the GPU run writes real ones)."""

from visualizer.tools.bench import gpu_markdown, markdown, targets

METHODS_ROW = {
    "n": 1000,
    "ours_one_launch_events_us": 40.5,
    "ours_device_warm_us": 3.1,
    "ours_device_cold_us": 4.2,
    "ours_launch_us": 33.0,
    "ours_instrumented_device_us": 5.0,
    "ours_recorded_span_us": 2.2,
    "ours_queue_covered": True,
    "torch_one_launch_events_us": 14.5,
    "torch_device_warm_us": 3.4,
    "torch_device_cold_us": 4.0,
    "torch_launch_us": 7.5,
    "torch_queue_covered": False,
}
KERNEL_ROW = {
    "kernel": "vector_add",
    "params": {"n": 1000, "block": 256},
    "clean_ms": 0.0031,
    "instrumented_ms": 0.005,
    "overhead": 0.005 / 0.0031,
    "launch_us": 33.0,
    "l2_flush": True,
    "queue_covered": True,
    "gbs": 3.9,
    "gflops": 0.3,
    "torch_ms": 0.0034,
    "torch_launch_us": 7.5,
    "vs_torch": 0.0034 / 0.0031,
    "fraction_of_copy_bw": 0.001,
    "fraction_of_fp32_peak": 0.0001,
    "correct": True,
}
GPU = {
    "device": "NVIDIA H200 (sm_90, 132 SMs)",
    "copy_bandwidth_gbs": 4000.0,
    "fp32_peak_tflops": 66.9,
    "method": {"device_time": "device time: queued behind a spin", "l2_flush": "memory-bound only"},
    "launch_methods": [METHODS_ROW],
    "kernels": [KERNEL_ROW],
    "reduction_full_sum": {
        "n": 1 << 28,
        "block": 256,
        "launches": 4,
        "ours": {"ms": 1.5},
        "ours_correct": True,
        "torch": {"ms": 0.3},
        "torch_op": "torch.sum(x)",
    },
    "attention": [
        {
            "seq_len": 4096,
            "causal": False,
            "impl": "torch sdpa default fp32",
            "backend": "efficient_attention",
            "ms": 1.14,
            "launch_us": 20.0,
            "tflops": 30.0,
            "peak_mb": 40.0,
            "max_abs_err": 1e-6,
        },
    ],  # fmt: skip
    "capture_2p20_s": 0.37,
}


def test_gpu_markdown_tables():
    text = "\n".join(gpu_markdown(GPU))
    assert "queued behind a spin" in text and "memory-bound only" in text
    row = [line for line in text.splitlines() if line.startswith("| 1,000 |")]
    assert row == ["| 1,000 | 40.5 | 3.1 | 4.2 | 33.0 | 5.0 | 2.2 | 14.5 | 3.4 | 4.0 | 7.5 | False |"]
    kernel = [line for line in text.splitlines() if line.startswith("| vector_add |")][0]
    assert "| 0.0031 | 0.0050 | ×1.61 | 33.0 | True |" in kernel and kernel.endswith("| True | True |")
    assert "ours 1.5000 ms (4 launches" in text and "torch / ours 0.20" in text
    assert "| 4096 | False | torch sdpa default fp32 | efficient_attention | 1.14 |" in text


def test_methods_table_alone():
    lines = gpu_markdown({"launch_methods": [METHODS_ROW], "kernels": []}, header=False)
    assert lines[0].startswith("Vector add (block 256)")
    assert not any(line.startswith("| kernel |") for line in lines)


def test_whole_report_with_gpu_section():
    results = {"date": "d", "machine": "m", "versions": {}, "gpu": GPU}
    results["targets"] = targets(results)
    by = {t["target"]: t for t in results["targets"]}
    assert by["vector_add_vs_torch"]["value"] is None  # not in this made-up result
    assert by["instrumentation_overhead"]["value"] == KERNEL_ROW["overhead"]
    assert "Trace capture end to end" in markdown(results)


def test_flash_target_ignores_causal_rows():
    from visualizer.tools.bench import _flash_speedup

    def row(seq_len, impl, ms, causal):
        return {"seq_len": seq_len, "impl": impl, "ms": ms, "causal": causal}

    rows = [
        row(4096, "torch plain fp32", 1.55, False),
        row(4096, "ours flash (clean)", 1.58, False),
        row(4096, "torch plain fp32", 2.36, True),  # causal: ours wins by far; not the target's case
        row(4096, "ours flash (clean)", 1.23, True),
    ]
    assert _flash_speedup(rows) == 1.55 / 1.58
