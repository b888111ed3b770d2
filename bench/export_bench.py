"""Export a 125M-parameter Llama from a model folder on disk — the way users
export — with hfx and with the reference, side by side in one run:

- ONNX: `hfx run --backend onnx --model-dir DIR [--dynamic] -o OUT/` against
  `from_pretrained(DIR)` + `OnnxExporter().export(..., OnnxConfig(dynamic=...))`
  + `save_pretrained(OUT)`;
- `.pt2`: `hfx run --backend dynamo ...` against `DynamoExporter` +
  `save_pretrained`;

each static and dynamic. Runs alternate (reference, hfx, reference, hfx, ...)
so drift on the machine hits both alike; each is a fresh process tree, its
wall time measured around it and its peak RSS the largest sum of VmRSS over
the tree (hfx + its worker), sampled every 10 ms. Reported: medians, and the
median of the per-pair ratios.

Durability differs: hfx writes each artifact past the page cache (`O_DIRECT`)
and syncs it before renaming it into place (`fsync`); the reference leaves its
files in the page cache. Both are reported: "as run", and "durable", where each
side's time includes a `sync()` right after its process ends (the time until
its files are on disk).

    cargo build --release -p hfx && cargo xtask build-plugins
    .venv/bin/pip install onnxscript==0.7.0     # the reference ONNX exporter needs it
    .venv/bin/python bench/export_bench.py [--rounds 3] [--only onnx-dynamic,...]
"""

import argparse
import json
import os
import shutil
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "target", "bench", "export")
MODEL = os.path.join(ROOT, "target", "bench", "llama125m")
PYTHON = sys.executable
GIB = 1 << 30
sys.path.insert(0, HERE)
from large_model import measured  # noqa: E402  (wall, tree peak RSS, exit, output)
from trace_bench import llama125m  # noqa: E402  (the benchmark model)

CASES = ["onnx-dynamic", "onnx-static", "pt2-dynamic", "pt2-static"]


def write_model_folder():
    if not os.path.exists(os.path.join(MODEL, "config.json")):
        model, _ = llama125m()
        model.save_pretrained(MODEL)


def reference_side(case, out):
    import torch
    import transformers

    backend, mode = case.split("-")
    model = transformers.AutoModelForCausalLM.from_pretrained(MODEL).eval()
    inputs = sample_inputs()
    with torch.no_grad():
        if backend == "onnx":
            from transformers.exporters.exporter_onnx import OnnxConfig, OnnxExporter

            exported = OnnxExporter().export(
                model, inputs, config=OnnxConfig(dynamic=mode == "dynamic")
            )
        else:
            from transformers.exporters.exporter_dynamo import DynamoConfig, DynamoExporter

            exported = DynamoExporter().export(
                model, inputs, config=DynamoConfig(dynamic=mode == "dynamic")
            )
    exported.save_pretrained(out)


def synced():
    """Seconds `sync()` takes: what the last run left unwritten."""
    import time

    start = time.perf_counter()
    os.sync()
    return time.perf_counter() - start


def sample_inputs():
    import torch

    ids = torch.randint(0, 32000, (2, 16), generator=torch.Generator().manual_seed(0))
    return {"input_ids": ids, "attention_mask": torch.ones(2, 16, dtype=torch.long)}


def hfx_command(case, out):
    backend, mode = case.split("-")
    hfx = os.path.join(ROOT, "target", "release", "hfx")
    command = [
        hfx,
        "run",
        "--backend",
        "onnx" if backend == "onnx" else "dynamo",
        "--plugins",
        os.path.join(ROOT, "plugins", "dynamo"),
        "--plugins",
        os.path.join(ROOT, "plugins", "onnx"),
        "--model-dir",
        MODEL,
        "-o",
        out + "/",
        "--python",
        PYTHON,
    ]
    return command + (["--dynamic"] if mode == "dynamic" else ["--static"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(CASES))
    args = parser.parse_args()
    os.makedirs(OUT, exist_ok=True)
    write_model_folder()
    rows = {}
    for case in args.only.split(","):
        pairs = []
        for _ in range(args.rounds):
            ref_out, hfx_out = (
                os.path.join(OUT, f"{case}-reference"),
                os.path.join(OUT, f"{case}-hfx"),
            )
            shutil.rmtree(ref_out, ignore_errors=True)
            shutil.rmtree(hfx_out, ignore_errors=True)
            os.sync()
            ref = measured([PYTHON, __file__, "--reference", case, ref_out])
            ref_sync = synced()
            ours = measured(hfx_command(case, hfx_out))
            our_sync = synced()
            for side, (_, _, code, tail) in (("reference", ref), ("hfx", ours)):
                if code != 0:
                    raise SystemExit(f"{case}: {side} failed ({code}):\n{tail}")
            pairs.append((ref[0], ref[1], ours[0], ours[1], ref[0] + ref_sync, ours[0] + our_sync))
            print(
                f"{case}: reference {ref[0]:.1f} s (+{ref_sync:.1f} s sync) {ref[1] / GIB:.2f} GiB | "
                f"hfx {ours[0]:.1f} s (+{our_sync:.1f} s sync) {ours[1] / GIB:.2f} GiB",
                flush=True,
            )
        rows[case] = {
            "reference_s": statistics.median(p[0] for p in pairs),
            "reference_rss_gib": statistics.median(p[1] for p in pairs) / GIB,
            "hfx_s": statistics.median(p[2] for p in pairs),
            "hfx_rss_gib": statistics.median(p[3] for p in pairs) / GIB,
            "speedup": statistics.median(p[0] / p[2] for p in pairs),
            "durable_speedup": statistics.median(p[4] / p[5] for p in pairs),
            "rss_ratio": statistics.median(p[3] / p[1] for p in pairs),
        }
    print(
        f"\n125M Llama from a model folder, {args.rounds} alternating rounds, medians (whole process trees)"
    )
    print(
        f"{'case':<14} {'reference':>16} {'hfx':>16} {'hfx faster':>11} {'(durable)':>10} {'hfx RSS':>9}"
    )
    for case, r in rows.items():
        print(
            f"{case:<14} {r['reference_s']:6.1f} s {r['reference_rss_gib']:5.2f} GiB {r['hfx_s']:6.1f} s {r['hfx_rss_gib']:5.2f} GiB "
            f"{r['speedup']:10.2f}x {r['durable_speedup']:9.2f}x {r['rss_ratio']:8.2f}x"
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reference"]:
        reference_side(sys.argv[2], sys.argv[3])
    else:
        main()
