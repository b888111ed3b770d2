"""A 125M Llama for generation to ExecuTorch, run as a device runs it: a
prefill of 128 tokens and 64 greedy decode steps in the ExecuTorch runtime
(Python bindings, 2 threads), batch 1, a static cache of 192 positions.

The exports, from the same model folder (safetensors, as users export),
alternating, each a fresh process tree:

- hfx: `hfx run --backend executorch --model-dir FOLDER --generation --cache
  static --max-cache-len 192 --static --sample batch=1,sequence=128` as the
  float32 portable program (hfx's own emitter), the float32 XNNPACK program
  (`--delegate xnnpack`), the 8da4w XNNPACK program (`--quantize 8da4w`:
  torchao's int8 dynamic activations per token, int4 weights in groups of
  32, the linear layers only) and the same with `--quantize-embeddings 8w`
  (ExecuTorch's LLM recipe: optimum-executorch `--qlinear 8da4w
  --qembedding 8w`);
- the reference: `from_pretrained(FOLDER)` + `ExecutorchExporter().
  export_for_generation(model, prompt, ExecutorchConfig(backend="xnnpack"),
  generation_config=static cache of 192)` + `save_pretrained`, float32, and
  with `ExecutorchConfig.quantizer = PT2EQuantizer(XNNPACKQuantizer)` at
  ExecuTorch's dynamic int8 activations and 4-bit weights
  (`get_symmetric_quantization_config(is_per_channel=True,
  is_dynamic=True, weight_qmin=-8, weight_qmax=7)`, which XNNPACK runs as
  its qd8-f32-qc4w kernels). PT2E has no 4-bit groups: its weights are
  4-bit per output channel (one scale a row, where 8da4w has one per 32
  weights) and its activations int8 per tensor (8da4w: per token), the
  nearest the reference's quantizer reaches; it leaves the embedding float,
  as hfx's plain `--quantize 8da4w` does.

Export: wall time around the process tree, peak RSS as the largest sum of
VmRSS over the tree (hfx + its worker), sampled every 10 ms; the `.pte`
bytes are the folder's `prefill.pte` + `decode.pte`.

Runtime: each folder in a fresh process (alternating, ROUNDS times), loaded
with the reference's `ExportedModel.from_pretrained` and run with the
README's static-cache loop (`tests/python/generation_loops.py`); the time is
that of the ExecuTorch method's `execute` alone (the runner's pytree
flattening is not counted). Prefill: one call on the 128-token prompt
(after one warm-up generation). Decode: tokens/s over 64 steps. Peak RSS of
the runtime process, and what the imports (torch, transformers, the
runtime) alone hold, sampled the same way. Every program's greedy tokens are
compared with eager float32 `generate`'s.

    cargo build --release -p hfx && cargo xtask build-plugins
    .venv/bin/python bench/executorch_decode.py [ROUNDS] [--only hfx-8da4w,reference-pt2e]
"""

import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "target", "bench", "executorch-decode")
PYTHON = sys.executable
PROMPT = 128
STEPS = 64
MAX_CACHE_LEN = PROMPT + STEPS
THREADS = 2
# Timed generations in each runtime process, after one that warms up.
GENERATIONS = 2

sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from generation_bench import MODEL, write_model_folder  # noqa: E402  (the same 125M folder)
from trace_bench import measured, tree_rss  # noqa: E402  (the same sampler)

# Each export: its side and how it is made (hfx flags, or the reference's quantizer).
HFX_EXPORTS = {
    "hfx-portable": [],
    "hfx-xnnpack": ["--delegate", "xnnpack"],
    "hfx-8da4w": ["--delegate", "xnnpack", "--quantize", "8da4w"],
    # ExecuTorch's Llama recipe's group size (`export_llama -qmode 8da4w -G 128`).
    "hfx-8da4w-g128": ["--delegate", "xnnpack", "--quantize", "8da4w", "--group-size", "128"],
    "hfx-8da4w-emb8w": [
        "--delegate",
        "xnnpack",
        "--quantize",
        "8da4w",
        "--quantize-embeddings",
        "8w",
    ],
}
REFERENCE_EXPORTS = {"reference-xnnpack": "float32", "reference-pt2e": "pt2e"}
# Alternating: a reference export, then hfx's, and so on.
ORDER = [
    "reference-xnnpack",
    "hfx-portable",
    "hfx-xnnpack",
    "reference-pt2e",
    "hfx-8da4w",
    "hfx-8da4w-emb8w",
    "hfx-8da4w-g128",
]


def prompt():
    """The 128-token prompt every side exports with and runs: batch 1, no padding."""
    import torch

    ids = torch.randint(3, 32000, (1, PROMPT), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def reference_side(out, scheme):
    import torch
    import transformers
    from transformers.exporters.exporter_executorch import ExecutorchConfig, ExecutorchExporter

    start = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(MODEL).eval()
    quantizer = None
    if scheme == "pt2e":
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        from transformers.exporters.quantizers import PT2EQuantizer

        xnnpack = XNNPACKQuantizer().set_global(
            get_symmetric_quantization_config(
                is_per_channel=True, is_dynamic=True, weight_qmin=-8, weight_qmax=7
            )
        )
        quantizer = PT2EQuantizer(xnnpack)
    generation = transformers.GenerationConfig(
        cache_implementation="static", max_cache_len=MAX_CACHE_LEN, max_new_tokens=2
    )
    with torch.no_grad():
        exported = ExecutorchExporter().export_for_generation(
            model,
            prompt(),
            config=ExecutorchConfig(backend="xnnpack", dynamic=False, quantizer=quantizer),
            generation_config=generation,
        )
    exported_at = time.perf_counter()
    exported.save_pretrained(out)
    print(
        json.dumps({"export_s": exported_at - start, "save_s": time.perf_counter() - exported_at})
    )


def hfx_command(hfx, flags, out):
    return [
        hfx,
        "run",
        "--backend",
        "executorch",
        *flags,
        "--plugins",
        os.path.join(ROOT, "plugins"),
        "--model-dir",
        MODEL,
        "--generation",
        "--cache",
        "static",
        "--max-cache-len",
        str(MAX_CACHE_LEN),
        "--static",
        "--sample",
        f"batch=1,sequence={PROMPT}",
        "-o",
        out + "/",
        "--python",
        PYTHON,
    ]


class TimedMethod:
    """An ExecuTorch method whose `execute` calls are timed."""

    def __init__(self, method):
        self.method = method
        self.seconds = []

    def execute(self, feed):
        start = time.perf_counter()
        outputs = self.method.execute(feed)
        self.seconds.append(time.perf_counter() - start)
        return outputs


def own_rss():
    return tree_rss(os.getpid())


def runtime_side(folder, generations):
    """Prefill and decode of one export folder in the ExecuTorch runtime, as JSON."""
    import executorch.kernels.quantized  # noqa: F401  (registers `embedding_byte`'s kernel)
    import torch
    import transformers  # noqa: F401  (imported before the baseline, as the runner needs it)
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    from generation_loops import generate_static, load

    torch.set_num_threads(THREADS)
    _unsafe_reset_threadpool(THREADS)
    imports_rss = own_rss()
    exported, prefill, decode = load(folder)
    prefill.method = TimedMethod(prefill.method)
    decode.method = TimedMethod(decode.method)
    inputs = prompt()
    prefill_ms, tokens_per_s = [], []
    for _ in range(generations + 1):  # the first one warms up
        prefill.method.seconds.clear()
        decode.method.seconds.clear()
        tokens = generate_static(
            prefill,
            decode,
            exported.config,
            MAX_CACHE_LEN,
            inputs["input_ids"],
            inputs["attention_mask"],
            STEPS,
        )
        prefill_ms.append(prefill.method.seconds[0] * 1e3)
        tokens_per_s.append(len(decode.method.seconds) / sum(decode.method.seconds))
    print(
        json.dumps(
            {
                "prefill_ms": statistics.median(prefill_ms[1:]),
                "tokens_per_s": statistics.median(tokens_per_s[1:]),
                "decode_calls": len(decode.method.seconds),
                "imports_rss": imports_rss,
                "tokens": tokens[0].tolist(),
            }
        )
    )


def eager_side():
    """Eager float32 `generate`'s greedy tokens on the same prompt."""
    import torch
    import transformers

    torch.set_num_threads(THREADS)
    model = transformers.AutoModelForCausalLM.from_pretrained(MODEL).eval()
    inputs = prompt()
    with torch.no_grad():
        tokens = model.generate(
            **inputs, max_new_tokens=STEPS, min_new_tokens=STEPS, do_sample=False
        )[0, PROMPT:]
    print(json.dumps(tokens.tolist()))


def last_json(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


def pte_bytes(folder):
    return {
        name: os.path.getsize(os.path.join(folder, f"{name}.pte")) for name in ("prefill", "decode")
    }


def agreement(tokens, eager):
    """How many leading tokens equal eager's."""
    same = 0
    for got, want in zip(tokens, eager):
        if got != want:
            break
        same += 1
    return same


def main(rounds, only):
    os.makedirs(OUT, exist_ok=True)
    write_model_folder()
    hfx = os.environ.get("HFX", os.path.join(ROOT, "target", "release", "hfx"))
    env = {**os.environ, "PYTHONPATH": HERE}
    # Warm the page cache and the component cache for every side alike.
    subprocess.run([PYTHON, "-c", "import torch, transformers, executorch.exir"], check=True)
    sides = [side for side in ORDER if not only or side in only]
    folders = {side: os.path.join(OUT, side) for side in sides}
    commands = {}
    for side in sides:
        if side in HFX_EXPORTS:
            commands[side] = hfx_command(hfx, HFX_EXPORTS[side], folders[side])
        else:
            scheme = REFERENCE_EXPORTS[side]
            commands[side] = [PYTHON, __file__, "--reference", folders[side], scheme]
    exports = {side: [] for side in sides}
    failed = {}
    for _ in range(rounds):
        for side in sides:
            if side in failed:
                continue
            try:
                wall, rss, _ = measured(commands[side], env)
            except SystemExit as e:
                # One side that cannot export is reported; the others still run.
                failed[side] = str(e).strip().splitlines()[-1]
                print(f"  export {side} failed: {failed[side]}", flush=True)
                continue
            exports[side].append((wall, rss))
            print(f"  export {side}: {wall:.1f} s, {rss / 2**30:.2f} GiB", flush=True)
    sides = [side for side in sides if side not in failed]
    runs = {side: [] for side in sides}
    for _ in range(rounds):
        for side in [side for side in sides if side not in failed]:
            command = [PYTHON, __file__, "--runtime", folders[side], str(GENERATIONS)]
            try:
                _, rss, out = measured(command, env)
            except SystemExit as e:
                failed[side] = "runtime: " + str(e).strip().splitlines()[-1]
                print(f"  runtime {side} failed: {failed[side]}", flush=True)
                continue
            runs[side].append((rss, last_json(out)))
            print(f"  runtime {side}: {runs[side][-1][1]['tokens_per_s']:.1f} tok/s", flush=True)
    _, _, out = measured([PYTHON, __file__, "--eager"], env)
    eager = json.loads(out.strip().splitlines()[-1])

    gib = 2**30
    print(
        f"125M Llama for generation to ExecuTorch, static cache {MAX_CACHE_LEN}, batch 1, "
        f"{rounds} alternating round(s), medians; runtime {THREADS} threads, prefill {PROMPT} tokens, "
        f"{STEPS} greedy decode steps ({GENERATIONS} generations a run after a warm-up)"
    )
    table = {}
    sides = [side for side in sides if runs[side]]
    for side in sides:
        wall = statistics.median(w for w, _ in exports[side])
        rss = statistics.median(r for _, r in exports[side])
        sizes = pte_bytes(folders[side])
        runtime_rss = statistics.median(r for r, _ in runs[side])
        prefill = statistics.median(j["prefill_ms"] for _, j in runs[side])
        rate = statistics.median(j["tokens_per_s"] for _, j in runs[side])
        imports = statistics.median(j["imports_rss"] for _, j in runs[side])
        same = agreement(runs[side][-1][1]["tokens"], eager)
        table[side] = {
            "export_s": wall,
            "export_rss": rss,
            "pte": sum(sizes.values()),
            "prefill_ms": prefill,
            "tokens_per_s": rate,
            "runtime_rss": runtime_rss,
        }
        print(
            f"  {side:<17} export {wall:6.1f} s, {rss / gib:.2f} GiB | .pte {sizes['prefill'] / 1e6:.1f} + "
            f"{sizes['decode'] / 1e6:.1f} MB | prefill {prefill:8.1f} ms, decode {rate:6.2f} tok/s | "
            f"runtime peak RSS {runtime_rss / gib:.2f} GiB ({imports / gib:.2f} GiB the imports) | "
            f"greedy tokens equal eager float32's for the first {same} of {STEPS}"
        )
    for side, why in failed.items():
        print(f"  {side:<17} export failed: {why}")
    print(json.dumps(table))

    def ratio(a, b, key):
        if a in table and b in table:
            return table[a][key] / table[b][key]
        return float("nan")

    print("  against the targets:")
    for quantized in ("hfx-8da4w", "hfx-8da4w-emb8w", "hfx-8da4w-g128"):
        print(
            f"    {quantized}: .pte {ratio(quantized, 'hfx-xnnpack', 'pte'):.3f}x hfx float32 (target <= 0.3x); "
            f"decode {ratio(quantized, 'hfx-xnnpack', 'tokens_per_s'):.2f}x hfx float32 XNNPACK tok/s (target >= 2x); "
            f"export {ratio('reference-pt2e', quantized, 'export_s'):.2f}x faster than reference-pt2e (target >= 2x), "
            f"peak RSS {ratio(quantized, 'reference-pt2e', 'export_rss'):.2f}x (target <= 0.6x)"
        )
    print(
        f"    hfx-xnnpack float32: export {ratio('reference-xnnpack', 'hfx-xnnpack', 'export_s'):.2f}x faster than "
        f"reference-xnnpack (target >= 2x), peak RSS {ratio('hfx-xnnpack', 'reference-xnnpack', 'export_rss'):.2f}x"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reference"]:
        reference_side(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["--runtime"]:
        runtime_side(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1:2] == ["--eager"]:
        eager_side()
    else:
        only = None
        if "--only" in sys.argv:
            only = set(sys.argv[sys.argv.index("--only") + 1].split(","))
        positional = [a for a in sys.argv[1:] if a.isdigit()]
        main(int(positional[0]) if positional else 1, only)
