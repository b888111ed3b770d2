"""Export a 125M-parameter Llama for generation to ONNX: `hfx run --backend
onnx --generation --dynamic` against the reference
`OnnxExporter().export_for_generation(...)` + `save_pretrained`, from the
same model folder (safetensors, as users export), with the same generate
inputs, alternating, then the decode step of both exports in ONNX Runtime.

    cargo build --release -p hfx && cargo xtask build-plugins
    .venv/bin/python bench/generation_bench.py [ROUNDS]

Each side is a fresh process tree: wall time around it, peak RSS as the
largest sum of VmRSS over the tree (hfx + its worker), sampled every 10 ms.
Neither side verifies (the reference has no generation check; hfx's
`--verify` adds one, timed separately below). The decode latency is one
token against a 64-position cache, batch 2, the median of 50 runs after 5
warm-up runs, ONNX Runtime's CPU provider with 2 threads, the same feed for
both models (the reference's own `onnx_feed`, by input name).
"""

import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "target", "bench", "generation")
MODEL = os.path.join(OUT, "llama-125m")
PYTHON = sys.executable

sys.path.insert(0, HERE)
from trace_bench import llama125m, measured  # noqa: E402  (same model, same sampler)


def generate_inputs():
    import torch

    ids = torch.randint(0, 32000, (2, 16), generator=torch.Generator().manual_seed(0))
    return {"input_ids": ids, "attention_mask": torch.ones(2, 16, dtype=torch.long)}


def write_model_folder():
    if not os.path.exists(os.path.join(MODEL, "config.json")):
        model, _ = llama125m()
        model.save_pretrained(MODEL)


def reference_side(out):
    import torch
    import transformers
    from transformers.exporters.exporter_onnx import OnnxConfig, OnnxExporter

    start = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(MODEL).eval()
    loaded = time.perf_counter()
    with torch.no_grad():
        exported = OnnxExporter().export_for_generation(
            model, generate_inputs(), config=OnnxConfig(dynamic=True)
        )
    exported_at = time.perf_counter()
    exported.save_pretrained(out)
    print(
        json.dumps(
            {
                "load_s": loaded - start,
                "export_s": exported_at - loaded,
                "save_s": time.perf_counter() - exported_at,
            }
        )
    )


def decode_feed():
    """Decode inputs by ONNX input name: one token per row after a 64-token prompt's cache."""
    import torch
    import transformers
    from transformers.exporters.utils import get_leaf_tensors

    model = transformers.AutoModelForCausalLM.from_pretrained(MODEL).eval()
    ids = torch.randint(0, 32000, (2, 64), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    kwargs = {"input_ids": ids[:, -1:], "position_ids": torch.full((2, 1), 64), "cache": out.cache}
    leaves = get_leaf_tensors(kwargs)
    return {name: tensor.numpy() for name, tensor in leaves.items()}


def decode_latency(path, feed):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    inputs = {i.name: feed[i.name.removeprefix("input.")] for i in session.get_inputs()}
    for _ in range(5):
        session.run(None, inputs)
    times = []
    for _ in range(50):
        start = time.perf_counter()
        session.run(None, inputs)
        times.append(time.perf_counter() - start)
    return statistics.median(times), len(session.get_inputs())


def main(rounds):
    os.makedirs(OUT, exist_ok=True)
    write_model_folder()
    hfx = os.path.join(ROOT, "target", "release", "hfx")
    env = {**os.environ, "PYTHONPATH": HERE}
    # Warm the page cache and the component cache for both sides alike.
    subprocess.run([PYTHON, "-c", "import torch, transformers, onnxscript"], check=True)
    plugins = os.path.join(ROOT, "plugins")
    hfx_out = os.path.join(OUT, "hfx")
    command = [
        hfx,
        "run",
        "--backend",
        "onnx",
        "--plugins",
        plugins,
        "--model-dir",
        MODEL,
        "--generation",
        "--dynamic",
        "-o",
        hfx_out + "/",
        "--python",
        PYTHON,
    ]
    results = {"reference": [], "hfx": []}
    for _ in range(rounds):
        wall, rss, out = measured(
            [PYTHON, __file__, "--reference", os.path.join(OUT, "reference")], env
        )
        results["reference"].append((wall, rss, json.loads(out.strip().splitlines()[-1])))
        wall, rss, _ = measured(command, env)
        results["hfx"].append((wall, rss, None))
    verify_wall, _, verified = measured(command + ["--verify"], env)
    check = next((line for line in verified.splitlines() if line.startswith("generate ")), "")

    feed = decode_feed()
    latency = {
        side: decode_latency(os.path.join(OUT, side, "decode.onnx"), feed)
        for side in ("reference", "hfx")
    }

    def best(side, index):
        return min(r[index] for r in results[side])

    gib = 1024**3
    ref_wall, hfx_wall = best("reference", 0), best("hfx", 0)
    ref_rss, hfx_rss = best("reference", 1), best("hfx", 1)
    print(
        f"125M Llama model folder -> ONNX prefill + decode, --dynamic, {rounds} round(s) alternating, best of each"
    )
    print(
        f"  reference  {ref_wall:6.1f} s  {ref_rss / gib:5.2f} GiB peak RSS   "
        f"(load {results['reference'][0][2]['load_s']:.1f} s, export_for_generation {results['reference'][0][2]['export_s']:.1f} s, "
        f"save {results['reference'][0][2]['save_s']:.1f} s)"
    )
    print(f"  hfx        {hfx_wall:6.1f} s  {hfx_rss / gib:5.2f} GiB peak RSS")
    print(
        f"  hfx speed {ref_wall / hfx_wall:.2f}x the reference's, memory {hfx_rss / ref_rss:.2f}x"
    )
    print(
        f"  hfx with --verify (8 greedy tokens through the components vs eager): {verify_wall:.1f} s; {check}"
    )
    for side in ("reference", "hfx"):
        seconds, inputs = latency[side]
        print(
            f"  decode step in ONNX Runtime ({side}): {seconds * 1e3:.2f} ms median, {inputs} inputs"
        )
    print(f"  decode latency hfx/reference: {latency['hfx'][0] / latency['reference'][0]:.2f}x")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reference"]:
        reference_side(sys.argv[2])
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
