"""ONNX you deploy, on a 125M-parameter Llama from its model folder, for
generation (`prefill` and `decode` components), every axis dynamic:

- hfx's float export, hfx `--ort-fusions cpu`, the reference's
  `OnnxConfig(dynamic=True)` and `OnnxConfig(dynamic=True, ort_fusions="cpu")`
  through `export_for_generation`;
- hfx `--quantize int4` (block 32) against ONNX Runtime's own
  `MatMulNBitsQuantizer` (RTN, block 32) applied to hfx's float export.

    cargo build --release -p hfx && cargo xtask build-plugins
    .venv/bin/python bench/deploy_bench.py

Exports alternate between the sides, each a fresh process tree (wall time,
peak RSS of the tree). Then, in one process, each export in ONNX Runtime's
CPU provider with 2 threads: prefill of 1x128 tokens and one decode step at
past 128, the median of 50 runs (`--rounds`) after 3 warm-up runs, the variants in turns, every
variant fed the same tensors by input name; node counts and file sizes (model and data);
the largest logit difference of each variant's prefill from eager PyTorch's;
and, for the comparisons the targets name, the median of the per-round
ratios of two variants' times. `--measure-only` times the exports of an
earlier run again. Nothing here is asserted.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "target", "bench", "deploy")
PYTHON = sys.executable
PROMPT = 128

sys.path.insert(0, HERE)
from generation_bench import MODEL, generate_inputs, write_model_folder  # noqa: E402
from trace_bench import measured  # noqa: E402  (the same sampler as every bench)


def reference_side(out, fusions):
    import torch
    import transformers
    from transformers.exporters.exporter_onnx import OnnxConfig, OnnxExporter

    model = transformers.AutoModelForCausalLM.from_pretrained(MODEL).eval()
    config = OnnxConfig(dynamic=True, ort_fusions=fusions) if fusions else OnnxConfig(dynamic=True)
    with torch.no_grad():
        exported = OnnxExporter().export_for_generation(model, generate_inputs(), config=config)
    exported.save_pretrained(out)


def ort_int4(source, out):
    """ONNX Runtime's RTN int4 quantizer (block 32, symmetric) on each component of `source`."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    # ONNX Runtime appends to an existing external data file: start empty.
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for component in ("prefill", "decode"):
        model = onnx.load(os.path.join(source, f"{component}.onnx"))
        quantizer = MatMulNBitsQuantizer(model, block_size=32, is_symmetric=True)
        quantizer.process()
        quantizer.model.save_model_to_file(
            os.path.join(out, f"{component}.onnx"), use_external_data_format=True
        )


def feeds():
    """Prefill and decode inputs by name (leaf names, as both exporters name
    them), and eager's prefill logits."""
    import torch
    import transformers
    from transformers.exporters.utils import get_leaf_tensors

    model = transformers.AutoModelForCausalLM.from_pretrained(MODEL).eval()
    ids = torch.randint(0, 32000, (1, PROMPT + 1), generator=torch.Generator().manual_seed(1))
    prompt = ids[:, :PROMPT]
    positions = torch.arange(PROMPT)[None]
    with torch.no_grad():
        out = model(input_ids=prompt, position_ids=positions, use_cache=True)
    prefill = {
        "input_ids": prompt,
        "attention_mask": torch.ones_like(prompt),
        "position_ids": positions,
    }
    decode = get_leaf_tensors(
        {
            "input_ids": ids[:, PROMPT:],
            "attention_mask": torch.ones(1, PROMPT + 1, dtype=torch.long),
            "position_ids": torch.tensor([[PROMPT]]),
            "cache": out.past_key_values,
        }
    )
    as_numpy = lambda tensors: {k: v.numpy() for k, v in tensors.items()}  # noqa: E731
    return as_numpy(prefill), as_numpy(decode), out.logits.numpy()


def session(path):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def by_name(sess, feed):
    inputs = {}
    for i in sess.get_inputs():
        name = i.name.removeprefix("input.")
        if name not in feed:
            raise SystemExit(f"{name}: no such input in the feed ({sorted(feed)})")
        inputs[i.name] = feed[name]
    return inputs


def measure(folders, prefill_feed, decode_feed, logits, rounds):
    """Each variant's sizes, and its latencies taken in turns (one run of
    every variant per round), so drift in the machine's speed hits all alike."""
    import onnx

    rows, runs = {}, []
    for side, folder in folders.items():
        files = os.listdir(folder)
        rows[side] = {"bytes": sum(os.path.getsize(os.path.join(folder, f)) for f in files)}
        for component, feed in (("prefill", prefill_feed), ("decode", decode_feed)):
            path = os.path.join(folder, f"{component}.onnx")
            nodes = len(onnx.load(path, load_external_data=False).graph.node)
            rows[side][f"{component}_nodes"] = nodes
            sess = session(path)
            inputs = by_name(sess, feed)
            first = sess.run(None, inputs)[0]
            if component == "prefill":
                rows[side]["max_abs_logit_error"] = float(abs(first - logits).max())
            runs.append((rows[side], f"{component}_ms", sess, inputs, []))
    for round in range(rounds + 3):
        for _, _, sess, inputs, times in runs:
            start = time.perf_counter()
            sess.run(None, inputs)
            if round >= 3:
                times.append(time.perf_counter() - start)
    for row, key, _, _, times in runs:
        row[key] = statistics.median(times) * 1e3
        row[key + "_runs"] = times
    return rows


def paired_ratios(rows, side, against):
    """The median over rounds of `side`'s time over `against`'s in the same
    round, per component: drift in the machine's speed between rounds cancels."""
    ratios = {}
    for key in ("prefill_ms", "decode_ms"):
        pairs = zip(rows[side][key + "_runs"], rows[against][key + "_runs"])
        ratios[key] = statistics.median(a / b for a, b in pairs)
    return ratios


def main(hfx, rounds, measure_only):
    os.makedirs(OUT, exist_ok=True)
    write_model_folder()
    env = {**os.environ, "PYTHONPATH": HERE}
    subprocess.run([PYTHON, "-c", "import torch, transformers, onnxscript"], check=True)
    base = [hfx, "run", "--backend", "onnx", "--plugins", os.path.join(ROOT, "plugins")]
    base += ["--model-dir", MODEL, "--generation", "--python", PYTHON]

    def reference(name, fusions):
        folder = os.path.join(OUT, name)
        return folder, [PYTHON, __file__, "--reference", folder, fusions]

    def ours(name, *flags):
        folder = os.path.join(OUT, name)
        return folder, base + list(flags) + ["-o", folder + "/"]

    exports = {
        "reference": reference("reference", ""),
        "reference fused": reference("reference-fused", "cpu"),
        "hfx": ours("hfx"),
        "hfx fused": ours("hfx-fused", "--ort-fusions", "cpu"),
        "hfx int4": ours("hfx-int4", "--quantize", "int4"),
    }
    export_cost = {}
    folders = {side: folder for side, (folder, _) in exports.items()}
    folders["ort int4 (RTN) of hfx"] = os.path.join(OUT, "ort-int4")
    if not measure_only:
        for side, (_, command) in exports.items():
            wall, rss, _ = measured(command, env)
            export_cost[side] = (wall, rss)
        ort_int4(folders["hfx"], folders["ort int4 (RTN) of hfx"])

    prefill_feed, decode_feed, logits = feeds()
    rows = measure(folders, prefill_feed, decode_feed, logits, rounds)
    print(
        f"125M Llama folder, --generation, dynamic; ONNX Runtime CPU, 2 threads; "
        f"prefill 1x{PROMPT}, decode at past {PROMPT} (median of {rounds})"
    )
    print(
        f"  {'':24} {'prefill ms':>10} {'decode ms':>10} {'nodes p/d':>11} "
        f"{'MiB':>7} {'logit err':>10} {'export s':>9} {'peak GiB':>8}"
    )
    for side, row in rows.items():
        wall, rss = export_cost.get(side, (float("nan"), float("nan")))
        print(
            f"  {side:24} {row['prefill_ms']:10.1f} {row['decode_ms']:10.2f} "
            f"{row['prefill_nodes']:5}/{row['decode_nodes']:<5} {row['bytes'] / 2**20:7.1f} "
            f"{row['max_abs_logit_error']:10.2e} {wall:9.1f} {rss / 2**30:8.2f}"
        )
    print("  paired ratios (median over rounds of the two times in one round), prefill / decode:")
    for side, against in (
        ("hfx fused", "reference fused"),
        ("hfx fused", "hfx"),
        ("hfx", "reference"),
        ("hfx int4", "hfx"),
        ("hfx int4", "ort int4 (RTN) of hfx"),
    ):
        ratios = paired_ratios(rows, side, against)
        print(
            f"  {side + ' / ' + against:42} {ratios['prefill_ms']:6.3f} {ratios['decode_ms']:6.3f}"
        )
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump({"rows": rows, "export": export_cost}, f, indent=1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reference"]:
        reference_side(sys.argv[2], sys.argv[3] or None)
    else:
        import argparse

        parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        parser.add_argument("--rounds", type=int, default=50, help="timed runs of each variant")
        parser.add_argument(
            "--measure-only",
            action="store_true",
            help="time the exports an earlier run left in target/bench/deploy",
        )
        parser.add_argument(
            "--hfx",
            default=os.path.join(ROOT, "target", "release", "hfx"),
            help="the hfx binary (a debug build writes the same files, slower)",
        )
        args = parser.parse_args()
        main(args.hfx, args.rounds, args.measure_only)
