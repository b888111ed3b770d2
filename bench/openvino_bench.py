"""Export a 125M-parameter Llama from a model folder to OpenVINO IR with hfx
(`hfx run --backend openvino --model-dir DIR -o OUT/`: hfx's ONNX stages, then
OpenVINO's ONNX frontend in the worker) and with the reference
(`from_pretrained(DIR)` + `OpenVINOExporter().export(..., OpenVINOConfig(dynamic=...))`
+ `save_pretrained(OUT)`: torch.export, then OpenVINO's PyTorch frontend), side
by side; then the CPU latency of both IRs on the same inputs.

Runs alternate (reference, hfx, ...), each a fresh process tree: wall time
around it, peak RSS the largest sum of VmRSS over the tree (hfx + its worker),
sampled every 10 ms. Reported: medians and the median of per-pair ratios.

Latency: each IR compiled for the CPU as the reference's runner compiles it
(`PERFORMANCE_HINT=LATENCY`, the precision the IR records), a warm-up, then
the median of `--calls` inferences on the 2x16 benchmark inputs, the two IRs
alternating call by call in one process.

    cargo build --release -p hfx && cargo xtask build-plugins
    .venv/bin/python bench/openvino_bench.py [--rounds 3] [--static] [--hfx target/debug/hfx]
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "target", "bench", "openvino")
MODEL = os.path.join(ROOT, "target", "bench", "llama125m")
PYTHON = sys.executable
GIB = 1 << 30
sys.path.insert(0, HERE)
from large_model import measured  # noqa: E402  (wall, tree peak RSS, exit, output)
from trace_bench import llama125m  # noqa: E402  (the benchmark model)


def write_model_folder():
    if not os.path.exists(os.path.join(MODEL, "config.json")):
        model, _ = llama125m()
        model.save_pretrained(MODEL)


def sample_inputs():
    import torch

    ids = torch.randint(0, 32000, (2, 16), generator=torch.Generator().manual_seed(0))
    return {"input_ids": ids, "attention_mask": torch.ones(2, 16, dtype=torch.long)}


def reference_side(out, dynamic):
    import torch
    import transformers
    from transformers.exporters.configs import OpenVINOConfig
    from transformers.exporters.exporter_openvino import OpenVINOExporter

    model = transformers.AutoModelForCausalLM.from_pretrained(MODEL).eval()
    with torch.no_grad():
        exported = OpenVINOExporter().export(
            model, sample_inputs(), config=OpenVINOConfig(dynamic=dynamic)
        )
    exported.save_pretrained(out)


def hfx_command(hfx, out, dynamic):
    command = [hfx, "run", "--backend", "openvino", "--model-dir", MODEL, "-o", out + "/"]
    for plugins in ("dynamo", "onnx"):
        command += ["--plugins", os.path.join(ROOT, "plugins", plugins)]
    return command + ["--python", PYTHON, "--dynamic" if dynamic else "--static"]


def latency(reference, ours, calls):
    """Median seconds per inference of each IR (`openvino_model.xml` in each folder)."""
    import numpy as np
    import openvino

    core = openvino.Core()
    feed = {k: v.numpy() for k, v in sample_inputs().items()}
    requests = []
    for folder in (reference, ours):
        model = core.read_model(os.path.join(folder, "openvino_model.xml"))
        compiled = core.compile_model(model, "CPU", {"PERFORMANCE_HINT": "LATENCY"})
        requests.append(compiled.create_infer_request())
    outputs = [r.infer(feed)[0] for r in requests]
    times = ([], [])
    for _ in range(calls):
        for request, spent in zip(requests, times):
            start = time.perf_counter()
            request.infer(feed)
            spent.append(time.perf_counter() - start)
    return [statistics.median(t) for t in times], float(np.abs(outputs[0] - outputs[1]).max())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--static", action="store_true")
    parser.add_argument("--hfx", default=os.path.join(ROOT, "target", "release", "hfx"))
    args = parser.parse_args()
    dynamic = not args.static
    mode = "dynamic" if dynamic else "static"
    os.makedirs(OUT, exist_ok=True)
    write_model_folder()
    ref_out, hfx_out = os.path.join(OUT, f"{mode}-reference"), os.path.join(OUT, f"{mode}-hfx")
    pairs = []
    for _ in range(args.rounds):
        shutil.rmtree(ref_out, ignore_errors=True)
        shutil.rmtree(hfx_out, ignore_errors=True)
        ref = measured([PYTHON, __file__, "--reference", ref_out, mode])
        ours = measured(hfx_command(args.hfx, hfx_out, dynamic))
        for side, (_, _, code, tail) in (("reference", ref), ("hfx", ours)):
            if code != 0:
                raise SystemExit(f"{side} failed ({code}):\n{tail}")
        pairs.append((ref[0], ref[1], ours[0], ours[1]))
        print(
            f"{mode}: reference {ref[0]:.1f} s {ref[1] / GIB:.2f} GiB | "
            f"hfx {ours[0]:.1f} s {ours[1] / GIB:.2f} GiB",
            flush=True,
        )
    (ref_latency, our_latency), difference = latency(ref_out, hfx_out, args.calls)
    row = {
        "reference_s": statistics.median(p[0] for p in pairs),
        "reference_rss_gib": statistics.median(p[1] for p in pairs) / GIB,
        "hfx_s": statistics.median(p[2] for p in pairs),
        "hfx_rss_gib": statistics.median(p[3] for p in pairs) / GIB,
        "speedup": statistics.median(p[0] / p[2] for p in pairs),
        "rss_ratio": statistics.median(p[3] / p[1] for p in pairs),
        "reference_latency_ms": ref_latency * 1e3,
        "hfx_latency_ms": our_latency * 1e3,
        "latency_ratio": our_latency / ref_latency,
        "logits_max_abs_difference": difference,
    }
    print(f"\n125M Llama to OpenVINO IR, {mode}, {args.rounds} alternating rounds, medians")
    print(json.dumps(row, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--reference":
        reference_side(sys.argv[2], sys.argv[3] == "dynamic")
    else:
        main()
