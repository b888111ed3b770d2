"""A Llama to ExecuTorch with the XNNPACK delegate: `hfx run --backend
executorch --delegate xnnpack` against the reference
`ExecutorchExporter().export(model, inputs, config=ExecutorchConfig(backend="xnnpack"))`
+ `save_pretrained`, same model (same seed and config), same inputs, static,
alternating, ROUNDS runs each (the median reported).

    cargo build --release -p hfx && cargo xtask build-plugins
    .venv/bin/python bench/executorch_bench.py [tiny|125m] [ROUNDS]     # HFX=PATH for another hfx binary

Each side is a fresh process tree: wall time around it, peak RSS as the
largest sum of VmRSS over the tree (hfx + its worker), sampled every 10 ms.
Then both `.pte` files run in the ExecuTorch runtime on the same inputs (one
process, alternating, median of 20 forwards each) and against eager.

Not measured here yet: hfx's native portable emission and its memory plan
against ExecuTorch's planner (the portable emitter does not exist yet).
"""

import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "target", "bench", "executorch")
PYTHON = sys.executable

sys.path.insert(0, HERE)
from trace_bench import llama125m, measured  # noqa: E402  (same model, same sampler)


def tiny():
    """A tiny random Llama (`--model-fn python:executorch_bench:tiny`)."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    return model, {"input_ids": ids, "attention_mask": torch.ones(2, 16, dtype=torch.long)}


MODELS = {"tiny": ("tiny", tiny), "125m": ("trace_bench:llama125m", llama125m)}


def reference_side(size, folder):
    import torch
    from transformers.exporters.exporter_executorch import ExecutorchConfig, ExecutorchExporter

    model, inputs = MODELS[size][1]()
    start = time.perf_counter()
    with torch.no_grad():
        exported = ExecutorchExporter().export(model, inputs, config=ExecutorchConfig(backend="xnnpack"))
    exported_at = time.perf_counter()
    exported.save_pretrained(folder)
    print(json.dumps({"export_s": exported_at - start, "save_s": time.perf_counter() - exported_at}))


def runtime_side(size, paths):
    """Median forward latency of each `.pte` in the ExecuTorch runtime, and its max error against eager."""
    import torch
    from executorch.runtime import Runtime

    model, inputs = MODELS[size][1]()
    with torch.no_grad():
        eager = model(**inputs).logits
    methods = {p: Runtime.get().load_program(p).load_method("forward") for p in paths}
    feed = [inputs["input_ids"], inputs["attention_mask"]]
    times = {p: [] for p in paths}
    errors = {}
    for _ in range(20):
        for p, method in methods.items():
            start = time.perf_counter()
            outputs = method.execute(feed)
            times[p].append(time.perf_counter() - start)
            errors[p] = float((outputs[0] - eager).abs().max())
    print(json.dumps({p: {"latency_ms": statistics.median(t) * 1e3, "max_abs": errors[p]} for p, t in times.items()}))


def main(size, rounds):
    os.makedirs(OUT, exist_ok=True)
    # HFX=target/debug/hfx measures a debug build (the host's part of an ExecuTorch export is small).
    hfx = os.environ.get("HFX", os.path.join(ROOT, "target", "release", "hfx"))
    env = {**os.environ, "PYTHONPATH": HERE}
    function = MODELS[size][0]
    module, name = (function.split(":") if ":" in function else ("executorch_bench", function))
    hfx_pte = os.path.join(OUT, f"hfx-{size}.pte")
    ref_dir = os.path.join(OUT, f"reference-{size}")
    hfx_command = [hfx, "run", "--backend", "executorch", "--delegate", "xnnpack", "--plugins", os.path.join(ROOT, "plugins"),
                   "--model-fn", f"python:{module}:{name}", "-o", hfx_pte, "--python", PYTHON]
    results = {"hfx": [], "reference": []}
    lower = []
    for _ in range(rounds):
        wall, rss, out = measured([PYTHON, __file__, "--reference", size, ref_dir], env)
        results["reference"].append((wall, rss))
        wall, rss, out = measured(hfx_command, env)
        results["hfx"].append((wall, rss))
        lower.extend(line.strip() for line in out.splitlines() if line.startswith("stage lower"))
    ref_pte = os.path.join(ref_dir, "model.pte")
    runtime = subprocess.run([PYTHON, __file__, "--runtime", size, hfx_pte, ref_pte], capture_output=True, text=True, env=env, cwd=ROOT)
    if runtime.returncode != 0:
        raise SystemExit(runtime.stderr[-3000:])
    run = json.loads(runtime.stdout.strip().splitlines()[-1])
    median = {side: (statistics.median(w for w, _ in r), statistics.median(m for _, m in r)) for side, r in results.items()}
    print(f"Llama {size} to ExecuTorch (XNNPACK), inputs (2, 16), static, {rounds} alternating run(s) each, medians")
    for side, pte in (("reference", ref_pte), ("hfx", hfx_pte)):
        wall, rss = median[side]
        print(f"  {side:<10} {wall:7.2f} s wall, peak RSS {rss / 2**30:.2f} GiB, .pte {os.path.getsize(pte)} bytes, "
              f"forward {run[pte]['latency_ms']:.3f} ms, logits max abs error vs eager {run[pte]['max_abs']:.1e}")
    print(f"  whole process: reference / hfx = {median['reference'][0] / median['hfx'][0]:.2f}x; "
          f"peak RSS hfx / reference = {median['hfx'][1] / median['reference'][1]:.2f}x; "
          f"forward hfx / reference = {run[hfx_pte]['latency_ms'] / run[ref_pte]['latency_ms']:.2f}x")
    if lower:
        print(f"  hfx {lower[-1]}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reference"]:
        reference_side(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["--runtime"]:
        runtime_side(sys.argv[2], sys.argv[3:])
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "tiny", int(sys.argv[2]) if len(sys.argv) > 2 else 2)
