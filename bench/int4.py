"""hfx `--quantize int4` against ONNX Runtime's own `MatMulNBitsQuantizer`
(round to nearest, the same block size and symmetry), or `--quantize
int8-dynamic` against its `quantize_dynamic(per_channel=True,
reduce_range=True)` (the 7-bit weights hfx writes), applied to
hfx's float export of the same model folder: file sizes, and each model's max
abs logit error against eager PyTorch on the same inputs.

    cargo build --release -p hfx
    .venv/bin/python bench/int4.py [--model DIR] [--block-size 32] [--asymmetric]
        [--accuracy-level N] [--exclude PATTERN]
    .venv/bin/python bench/int4.py --scheme int8-dynamic [--model DIR]

Without --model, a random Llama of hidden 768 and 12 layers (the 125M
benchmark model's shape, `trace_bench.llama125m`) is saved in target/bench/.
"""

import argparse
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "target", "bench", "int4")
MODEL = os.path.join(ROOT, "target", "bench", "llama125m")
HFX = os.path.join(ROOT, "target", "release", "hfx")
sys.path.insert(0, HERE)


def model_folder(path):
    if path is None:
        path = MODEL
        if not os.path.exists(os.path.join(path, "config.json")):
            from trace_bench import llama125m

            model, _ = llama125m()
            model.save_pretrained(path)
    return path


def export(hfx, model, out, extra):
    plugins = []
    for p in ("plugins/dynamo", "plugins/onnx"):
        plugins += ["--plugins", os.path.join(ROOT, p)]
    command = [hfx, "run", "--backend", "onnx", "--model-dir", model, "-o", out + "/"]
    subprocess.run(
        command + ["--external-data"] + extra + plugins, check=True, stdout=subprocess.DEVNULL
    )
    return os.path.join(out, "model.onnx")


def ort_quantized(float_model, out, block, symmetric):
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    config = DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=symmetric)
    quantizer = MatMulNBitsQuantizer(onnx.load(float_model), algo_config=config)
    quantizer.process()
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "model.onnx")
    quantizer.model.save_model_to_file(path, use_external_data_format=True)
    return path


def ort_int8_dynamic(float_model, out):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "model.onnx")
    quantize_dynamic(
        float_model,
        path,
        per_channel=True,
        weight_type=QuantType.QInt8,
        reduce_range=True,
        op_types_to_quantize=["MatMul"],
        use_external_data_format=True,
    )
    return path


def size(model):
    folder = os.path.dirname(model)
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if "onnx" in f)


def logits(model, inputs):
    import onnxruntime

    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, {k: v for k, v in inputs.items() if k in names})[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model")
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--asymmetric", action="store_true")
    parser.add_argument(
        "--accuracy-level",
        type=int,
        help="hfx's --quantize-accuracy-level (0: float32 compute, as ONNX Runtime's quantizer"
        " writes by default) [default: hfx's]",
    )
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        help="hfx's --quantize-exclude (e.g. model.embed_tokens: the weights ONNX Runtime's"
        " quantizer leaves float, as it quantizes MatMuls only)",
    )
    parser.add_argument("--scheme", choices=["int4", "int8-dynamic"], default="int4")
    parser.add_argument("--hfx", default=HFX, help="the hfx binary [default: target/release/hfx]")
    args = parser.parse_args()
    import numpy as np
    import torch
    import transformers

    model = model_folder(args.model)
    # Sizes sum each folder's files: none left from another model's run.
    shutil.rmtree(OUT, ignore_errors=True)
    float_model = export(args.hfx, model, os.path.join(OUT, "float32"), [])
    if args.scheme == "int4":
        quantize = ["--quantize", "int4", "--quantize-block-size", str(args.block_size)]
        if args.asymmetric:
            quantize.append("--quantize-asymmetric")
        if args.accuracy_level is not None:
            quantize += ["--quantize-accuracy-level", str(args.accuracy_level)]
        for pattern in args.exclude:
            quantize += ["--quantize-exclude", pattern]
        ort = os.path.join(OUT, "ort-int4")
        ort = ort_quantized(float_model, ort, args.block_size, not args.asymmetric)
    else:
        quantize = ["--quantize", "int8-dynamic"]
        ort = ort_int8_dynamic(float_model, os.path.join(OUT, "ort-int8-dynamic"))
    hfx = export(args.hfx, model, os.path.join(OUT, f"hfx-{args.scheme}"), quantize)
    eager = transformers.AutoModelForCausalLM.from_pretrained(model).eval()
    ids = torch.randint(
        0, eager.config.vocab_size, (1, 128), generator=torch.Generator().manual_seed(0)
    )
    inputs = {"input_ids": ids.numpy(), "attention_mask": np.ones_like(ids.numpy())}
    with torch.no_grad():
        want = eager(input_ids=ids).logits.double().numpy()
    print(f"eager logits max |x| {np.abs(want).max():.3f}")
    for name, path in [
        ("float32", float_model),
        (f"hfx {args.scheme}", hfx),
        (f"ORT {args.scheme}", ort),
    ]:
        error = np.abs(logits(path, inputs).astype(np.float64) - want).max()
        print(
            f"{name:<16} {size(path) / 1e6:8.1f} MB ({size(path) / size(float_model):.2f}x)"
            f"  max abs logit error {error:.4f}"
        )


if __name__ == "__main__":
    main()
