"""Export a 125M-parameter Llama to ONNX: `hfx run --backend onnx` against the
reference `OnnxExporter().export(...)` (optimize on) + `save_pretrained`, same
model (same seed and config), same inputs, static, one run each, side by side.

    cargo build --release -p hfx && cargo xtask build-plugins
    .venv/bin/pip install onnxscript==0.7.0     # the reference exporter needs it
    .venv/bin/python bench/onnx_bench.py

A third run measures the decomposition choice: hfx with `--decompose` (the
worker runs torch's `run_decompositions()` before saving, so translations see
core ATen ops: `linear` as `permute` + `addmm`/`mm`, `scaled_dot_product_attention`
as its math ops) against the default (high-level ops translated directly, as
torch.onnx's ONNX-friendly table does); both verified in ONNX Runtime.

Each side is a fresh process tree: wall time around it, peak RSS as the
largest sum of VmRSS over the tree (hfx + its worker), sampled every 10 ms.
hfx's stage times come from its summary; the reference's from timers around
its export and save. Node counts are of the saved graphs.
"""

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "target", "bench", "onnx")
PYTHON = sys.executable

sys.path.insert(0, HERE)
from trace_bench import llama125m, measured  # noqa: E402  (same model, same sampler)


def reference_side():
    import torch
    from transformers.exporters.exporter_onnx import OnnxConfig, OnnxExporter

    model, inputs = llama125m()
    start = time.perf_counter()
    with torch.no_grad():
        exported = OnnxExporter().export(model, inputs, config=OnnxConfig())
    exported_at = time.perf_counter()
    exported.save_pretrained(os.path.join(OUT, "reference"))
    print(
        json.dumps({"export_s": exported_at - start, "save_s": time.perf_counter() - exported_at})
    )


def node_count(path):
    import onnx

    return len(onnx.load(path, load_external_data=False).graph.node)


def stage_times(summary):
    times = {}
    for line in summary.splitlines():
        words = line.split()
        if line.startswith("stage ") and len(words) >= 4 and words[3] in ("s", "ms"):
            value = float(words[2])
            times[words[1]] = value if words[3] == "s" else value / 1e3
    return times


def main():
    os.makedirs(OUT, exist_ok=True)
    hfx = os.path.join(ROOT, "target", "release", "hfx")
    env = {**os.environ, "PYTHONPATH": HERE}
    subprocess.run([PYTHON, "-c", "import torch, transformers, onnxscript"], check=True)
    ref_wall, ref_rss, ref_out = measured([PYTHON, __file__, "--reference"], env)
    ref = json.loads(ref_out.strip().splitlines()[-1])
    out = os.path.join(OUT, "hfx.onnx")
    command = [
        hfx,
        "run",
        "--backend",
        "onnx",
        "--plugins",
        os.path.join(ROOT, "plugins", "dynamo"),
        "--plugins",
        os.path.join(ROOT, "plugins", "onnx"),
        "--model-fn",
        "python:trace_bench:llama125m",
        "-o",
        out,
        "--keep-reference",  # what check_onnx.py compares with, below
        "--python",
        PYTHON,
        "--static",
    ]
    hfx_wall, hfx_rss, hfx_out = measured(command, env)
    times = stage_times(hfx_out)
    after_trace = sum(v for k, v in times.items() if k != "trace")
    ref_files = [f for f in os.listdir(os.path.join(OUT, "reference")) if f.endswith(".onnx")]
    ref_nodes = node_count(os.path.join(OUT, "reference", ref_files[0]))
    print("125M Llama to ONNX, inputs (2, 16), static, one run each")
    print(
        f"  reference OnnxExporter + save_pretrained: {ref_wall:6.2f} s wall ({ref['export_s']:.2f} s export incl. "
        f"torch.export, {ref['save_s']:.2f} s save), peak RSS {ref_rss / 2**30:.2f} GiB, {ref_nodes} nodes"
    )
    stages = ", ".join(f"{k} {v:.2f} s" for k, v in times.items())
    print(
        f"  hfx run --backend onnx:                  {hfx_wall:6.2f} s wall ({stages}), peak RSS {hfx_rss / 2**30:.2f} GiB, "
        f"{node_count(out)} nodes"
    )
    print(
        f"  whole process: reference / hfx = {ref_wall / hfx_wall:.2f}x faster;  peak RSS: hfx / reference = {hfx_rss / ref_rss:.2f}x"
    )
    print(
        f"  hfx stages after the trace (read, FX fixes, translations, IR fixes, emit): {after_trace:.2f} s"
    )
    for line in hfx_out.splitlines():
        if "worker peak RSS" in line or line.startswith("stage trace"):
            print("   ", line.strip())

    # The decomposition choice: the same export with torch's decompositions first.
    decomposed = os.path.join(OUT, "hfx-decomposed.onnx")
    dec_command = [a if a != out else decomposed for a in command] + ["--decompose"]
    dec_wall, dec_rss, dec_out = measured(dec_command, env)
    dec_times = stage_times(dec_out)
    # Parity of both against eager, in ONNX Runtime, outside the timed runs.
    check = os.path.join(ROOT, "tests", "python", "check_onnx.py")
    errors = {}
    for path in (out, decomposed):
        result = subprocess.run(
            [PYTHON, check, path, path.replace(".onnx", ".reference.pt")],
            capture_output=True,
            text=True,
        )
        errors[path] = (
            result.stdout.strip().splitlines()[-1]
            if result.returncode == 0
            else "MISMATCH " + result.stderr[-300:]
        )
    worst = errors[decomposed]
    print(
        f"  hfx --decompose:                         {dec_wall:6.2f} s wall (trace {dec_times.get('trace', 0):.2f} s incl. "
        f"run_decompositions, translations {dec_times.get('onnx-translations', 0) * 1e3:.0f} ms), peak RSS "
        f"{dec_rss / 2**30:.2f} GiB, {node_count(decomposed)} nodes; vs eager: {worst}"
    )
    print(f"  (direct translation vs eager: {errors[out]})")
    print(
        f"  decomposition choice: direct / decomposed wall = {hfx_wall / dec_wall:.2f}, nodes "
        f"{node_count(out)} vs {node_count(decomposed)}"
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--reference"]:
        reference_side()
    else:
        main()
