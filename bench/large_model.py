"""A model larger than the export should ever hold: a random Llama-architecture
model of 3.2B parameters (Llama 3.2 3B's shapes), written as sharded bfloat16
safetensors shard by shard (never whole in memory), exported by hfx to ONNX
(float32, external data: the bfloat16 weights converted as they stream) and
to `.pt2` (bfloat16), each with the whole pipeline's peak RSS (hfx + its
worker, sampled every 10 ms); then the reference exporter on the same folder
(`from_pretrained` + `OnnxExporter` + `save_pretrained`), its peak RSS or how
it failed. Then:

- ONNX Runtime loads the 3.2B ONNX model (a session is created: every node
  has a kernel, the external data is read) in a process of its own;
- the model is exported again with `--verify-layers 2`: hfx checks its first
  2 layers (the config truncated, the same checkpoint) in ONNX Runtime
  against eager at 1e-3 before the whole model lands (its peak RSS is the
  truncated check's: the first layers and the 394M-parameter embedding, in
  float32, eager and in ONNX Runtime);
- the float32 ONNX export and the `--quantize int4` one (MatMulNBits and
  GatherBlockQuantized, quantized as the weights stream), alternating for
  `--rounds` rounds, each with its wall time, peak RSS and output size;
  ONNX Runtime then loads the int4 model in a process of its own and runs
  one forward over 8 tokens, its logits checked finite.

`--onnx-only` runs the float32 and int4 ONNX exports alone (no ONNX Runtime
session on the float model, no `.pt2`, no `--verify-layers`, no reference).

    cargo build --release -p hfx && cargo xtask build-plugins
    .venv/bin/python bench/large_model.py [--folder DIR] [--reference-timeout S]
        [--onnx-only] [--rounds N]

Needs ~26 GB of free disk (6.4 GB checkpoint, 12.8 GB ONNX data, then 6.4 GB
`.pt2` after the ONNX is removed; each export's output is removed once
measured).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PYTHON = sys.executable
sys.path.insert(0, HERE)
from trace_bench import tree_rss  # noqa: E402

GIB = 1 << 30
# Llama 3.2 3B's shapes (tied embeddings): 3.21B parameters.
CONFIG = dict(
    hidden_size=3072,
    intermediate_size=8192,
    num_hidden_layers=28,
    num_attention_heads=24,
    num_key_value_heads=8,
    vocab_size=128256,
    max_position_embeddings=131072,
    rope_theta=500000.0,
    tie_word_embeddings=True,
    rms_norm_eps=1e-5,
)
SHARD_BYTES = 2 * GIB


def write_folder(folder):
    """The checkpoint, shard by shard: each tensor made, written, dropped."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**CONFIG, dtype="bfloat16")
    with torch.device("meta"):
        shapes = [(name, tuple(p.shape)) for name, p in LlamaForCausalLM(config).named_parameters()]
    os.makedirs(folder, exist_ok=True)
    generator = torch.Generator().manual_seed(0)
    shards, current, size, weight_map, total = [], [], 0, {}, 0
    for name, shape in shapes + [(None, None)]:
        numel = 1
        for s in shape or ():
            numel *= s
        if name is None or (current and size + 2 * numel > SHARD_BYTES):
            shards.append(current)
            current, size = [], 0
        if name is not None:
            current.append((name, shape))
            size += 2 * numel
            total += numel
    count = len(shards)
    for i, shard in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{count:05d}.safetensors"
        tensors = {}
        for name, shape in shard:
            if name.endswith("norm.weight"):
                tensors[name] = torch.ones(shape, dtype=torch.bfloat16)
            else:
                tensors[name] = (torch.randn(shape, generator=generator) * 0.02).to(torch.bfloat16)
            weight_map[name] = file
        save_file(tensors, os.path.join(folder, file), metadata={"format": "pt"})
        del tensors
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 2 * total}, "weight_map": weight_map}, f)
    config.architectures = ["LlamaForCausalLM"]
    config.save_pretrained(folder)
    return total


def measured(command, timeout=None):
    """Wall time, peak RSS of the process tree, exit code and output tail."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    peak = 0
    import threading

    lines = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout))
    reader.start()
    while process.poll() is None:
        peak = max(peak, tree_rss(process.pid))
        if timeout and time.perf_counter() - start > timeout:
            os.killpg(process.pid, 9)
            process.wait()
            reader.join()
            return time.perf_counter() - start, peak, "timeout", "".join(lines[-20:])
        time.sleep(0.01)
    reader.join()
    return time.perf_counter() - start, peak, process.returncode, "".join(lines[-40:])


def hfx_command(backend, folder, out, *extra):
    hfx = os.path.join(ROOT, "target", "release", "hfx")
    return [
        hfx,
        "run",
        "--backend",
        backend,
        "--plugins",
        os.path.join(ROOT, "plugins", "dynamo"),
        "--plugins",
        os.path.join(ROOT, "plugins", "onnx"),
        "--model-dir",
        folder,
        "-o",
        out,
        "--python",
        PYTHON,
        *extra,
    ]


def reference_side(folder, out):
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.exporters.exporter_onnx import OnnxConfig, OnnxExporter

    model = AutoModelForCausalLM.from_pretrained(folder)
    inputs = {
        "input_ids": torch.randint(0, 1000, (2, 16)),
        "attention_mask": torch.ones(2, 16, dtype=torch.long),
    }
    with torch.no_grad():
        exported = OnnxExporter().export(model, inputs, config=OnnxConfig())
    exported.save_pretrained(out)


def ort_loads(path, forward=False):
    """A session on `path`; with `forward`, one forward over 8 tokens of
    batch 1, its first output checked finite."""
    import numpy as np
    import onnxruntime as ort

    start = time.perf_counter()
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    loaded = {
        "inputs": [i.name for i in session.get_inputs()],
        "outputs": len(session.get_outputs()),
        "seconds": round(time.perf_counter() - start, 1),
    }
    if forward:
        tokens = 8
        feeds = {}
        for i in session.get_inputs():
            if i.name == "input_ids":
                feeds[i.name] = np.arange(1, tokens + 1, dtype=np.int64)[None]
            elif i.name == "attention_mask":
                feeds[i.name] = np.ones((1, tokens), dtype=np.int64)
            elif i.name == "position_ids":
                feeds[i.name] = np.arange(tokens, dtype=np.int64)[None]
            else:
                raise SystemExit(f"no value for the input {i.name} {i.shape}")
        start = time.perf_counter()
        first = session.run(None, feeds)[0]
        loaded["forward_seconds"] = round(time.perf_counter() - start, 2)
        loaded["output_shape"] = list(first.shape)
        loaded["finite"] = bool(np.isfinite(first).all())
        if not loaded["finite"]:
            print(json.dumps(loaded))
            raise SystemExit("the forward's output is not finite")
    print(json.dumps(loaded))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--folder", default=os.path.join(ROOT, "target", "bench", "llama-3b"))
    parser.add_argument("--reference-timeout", type=float, default=1800)
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument("--skip-hfx", action="store_true")
    parser.add_argument(
        "--onnx-only",
        action="store_true",
        help="only the float32 and int4 ONNX exports (and the int4 model's session)",
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="alternating float32 / int4 export rounds"
    )
    args = parser.parse_args()
    out = os.path.join(ROOT, "target", "bench", "large")
    os.makedirs(out, exist_ok=True)
    folder = args.folder
    if not os.path.exists(os.path.join(folder, "model.safetensors.index.json")):
        wall, peak, code, tail = measured([PYTHON, __file__, "--write", folder])
        print(f"wrote {folder}: {wall:.0f} s, peak RSS {peak / GIB:.2f} GiB (exit {code})")
    size = sum(
        os.path.getsize(os.path.join(folder, f))
        for f in os.listdir(folder)
        if f.endswith(".safetensors")
    )
    print(f"checkpoint: {size / GIB:.2f} GiB of bfloat16 safetensors")
    results = {}
    if not args.skip_hfx:
        if not args.onnx_only:
            hfx_side(folder, out, results)
        int4_side(folder, out, results, args.rounds)
    if not args.skip_reference and not args.onnx_only:
        reference_run(folder, out, results, args.reference_timeout)
    print(
        json.dumps(
            {
                k: {"seconds": round(w, 1), "peak_rss_gib": round(p / GIB, 2), "exit": c}
                for k, (w, p, c) in results.items()
            }
        )
    )


def hfx_run(label, backend, folder, out, results, *extra):
    """One hfx export into `out` (removed after), measured; its output tail."""
    shutil.rmtree(out, ignore_errors=True)
    wall, peak, code, tail = measured(hfx_command(backend, folder, out + "/", "--dynamic", *extra))
    results[label] = (wall, peak, code)
    print(
        f"{label}: {wall:.0f} s, whole-pipeline peak RSS {peak / GIB:.2f} GiB (exit {code})\n{tail}"
    )
    return code


def folder_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def int4_side(folder, out, results, rounds):
    """The float32 and the `--quantize int4` ONNX exports, alternating, each
    output's size measured and removed before the next; the int4 model's
    last output loaded by ONNX Runtime (and run once) before it is removed."""
    sizes = {}
    for round_ in range(1, rounds + 1):
        for label, extra in [("float32", ()), ("int4", ("--quantize", "int4"))]:
            path = os.path.join(out, label)
            name = f"hfx onnx {label} (dynamic) round {round_}"
            if hfx_run(name, "onnx", folder, path, results, *extra) == 0:
                sizes[label] = folder_bytes(path)
                print(f"{name}: {sizes[label] / GIB:.2f} GiB written")
                if label == "int4" and round_ == rounds:
                    model = os.path.join(path, "model.onnx")
                    wall, peak, code, tail = measured([PYTHON, __file__, "--ort-forward", model])
                    last = tail.strip().splitlines()[-1] if tail.strip() else ""
                    print(
                        f"ONNX Runtime session + forward on the int4 model: exit {code}, "
                        f"{wall:.0f} s, peak RSS {peak / GIB:.2f} GiB: {last}"
                    )
                    results["ONNX Runtime int4 load + forward"] = (wall, peak, code)
            shutil.rmtree(path, ignore_errors=True)
    if len(sizes) == 2:
        print(
            f"int4 / float32 output size: {sizes['int4'] / GIB:.2f} / "
            f"{sizes['float32'] / GIB:.2f} GiB = {sizes['int4'] / sizes['float32']:.3f}x"
        )


def hfx_side(folder, out, results):
    onnx_out = os.path.join(out, "onnx")
    if hfx_run("hfx onnx (float32, dynamic)", "onnx", folder, onnx_out, results) == 0:
        wall, peak, code, tail = measured(
            [PYTHON, __file__, "--ort", os.path.join(onnx_out, "model.onnx")]
        )
        print(
            f"ONNX Runtime session on the 3.2B model: exit {code}, {wall:.0f} s, peak RSS {peak / GIB:.2f} GiB: {tail.strip().splitlines()[-1] if tail.strip() else ''}"
        )
    shutil.rmtree(onnx_out, ignore_errors=True)
    hfx_run(
        "hfx pt2 (bfloat16, dynamic)",
        "dynamo",
        folder,
        os.path.join(out, "pt2"),
        results,
        "--dtype",
        "bfloat16",
    )
    shutil.rmtree(os.path.join(out, "pt2"), ignore_errors=True)
    hfx_run(
        "hfx onnx --verify-layers 2",
        "onnx",
        folder,
        os.path.join(out, "verified"),
        results,
        "--verify-layers",
        "2",
    )
    shutil.rmtree(os.path.join(out, "verified"), ignore_errors=True)


def reference_run(folder, out, results, timeout):
    ref_out = os.path.join(out, "reference")
    shutil.rmtree(ref_out, ignore_errors=True)
    wall, peak, code, tail = measured(
        [PYTHON, __file__, "--reference", folder, ref_out], timeout=timeout
    )
    results["reference OnnxExporter"] = (wall, peak, code)
    print(
        f"reference from_pretrained + OnnxExporter + save_pretrained: {wall:.0f} s, peak RSS {peak / GIB:.2f} GiB "
        f"(exit {code})\n{tail[-2000:]}"
    )
    shutil.rmtree(ref_out, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        print(write_folder(sys.argv[2]))
    elif sys.argv[1:2] == ["--reference"]:
        reference_side(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["--ort"]:
        ort_loads(sys.argv[2])
    elif sys.argv[1:2] == ["--ort-forward"]:
        ort_loads(sys.argv[2], forward=True)
    else:
        main()
