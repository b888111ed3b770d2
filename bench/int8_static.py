"""hfx `--quantize int8-static` against ONNX Runtime's own `quantize_static`
(QDQ, per-channel int8 weights, MinMax calibration) applied to hfx's float
export of the same model folder, both calibrated on the same inputs (a
`.npz` hfx reads with `--calibration`, and a data reader over the same
arrays for ONNX Runtime): file sizes, each model's max abs logit error
against eager PyTorch on held-out inputs, and ONNX Runtime CPU latency of
one 1x128 forward (2 threads, the models run alternately).

    cargo build --release -p hfx
    .venv/bin/python bench/int8_static.py [--model DIR] [--samples 8] [--runs 20]

Without --model, a random Llama of hidden 768 and 12 layers (the 125M
benchmark model's shape, `trace_bench.llama125m`) is saved in target/bench/.
ONNX Runtime's model is also written with int8 activations (`QInt8`), the
other choice of activation type, to compare their speed on this CPU.
"""

import argparse
import os
import shutil
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "target", "bench", "int8-static")
sys.path.insert(0, HERE)

from int4 import HFX, export, logits, model_folder, size  # noqa: E402


def ort_int8_static(float_model, out, samples, activation_type):
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.rows = iter(samples)

        def get_next(self):
            return next(self.rows, None)

    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "model.onnx")
    quantize_static(
        float_model,
        path,
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=activation_type,
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul"],
        calibrate_method=CalibrationMethod.MinMax,
        use_external_data_format=True,
    )
    return path


def latencies(models, inputs, runs):
    """Median ms of one forward per model, the models run alternately."""
    import onnxruntime

    sessions = {}
    for name, path in models:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 2
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        feed = {k: v for k, v in inputs.items() if k in names}
        session.run(None, feed)  # warm-up
        sessions[name] = (session, feed)
    times = {name: [] for name in sessions}
    for _ in range(runs):
        for name, (session, feed) in sessions.items():
            started = time.perf_counter()
            session.run(None, feed)
            times[name].append((time.perf_counter() - started) * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--hfx", default=HFX, help="the hfx binary [default: target/release/hfx]")
    args = parser.parse_args()
    import numpy as np
    import torch
    import transformers
    from onnxruntime.quantization import QuantType

    model = model_folder(args.model)
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    eager = transformers.AutoModelForCausalLM.from_pretrained(model).eval()
    vocab = eager.config.vocab_size
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, (args.samples, 1, 128))
    calibration = os.path.join(OUT, "calibration.npz")
    np.savez(calibration, input_ids=ids, attention_mask=np.ones_like(ids))
    samples = [
        {"input_ids": ids[i], "attention_mask": np.ones_like(ids[i])} for i in range(len(ids))
    ]
    float_model = export(args.hfx, model, os.path.join(OUT, "float32"), [])
    quantize = ["--quantize", "int8-static", "--calibration", calibration]
    hfx = export(args.hfx, model, os.path.join(OUT, "hfx-int8-static"), quantize)
    ort = ort_int8_static(float_model, os.path.join(OUT, "ort-u8"), samples, QuantType.QUInt8)
    ort_s8 = ort_int8_static(float_model, os.path.join(OUT, "ort-s8"), samples, QuantType.QInt8)
    # Held out: not among the calibration samples.
    held = torch.from_numpy(np.random.default_rng(1).integers(0, vocab, (1, 128)))
    inputs = {"input_ids": held.numpy(), "attention_mask": np.ones_like(held.numpy())}
    with torch.no_grad():
        want = eager(input_ids=held).logits.double().numpy()
    print(f"eager logits max |x| {np.abs(want).max():.3f}; calibrated on {args.samples} samples")
    models = [
        ("float32", float_model),
        ("hfx int8-static", hfx),
        ("ORT int8-static", ort),
        ("ORT s8 activations", ort_s8),
    ]
    speed = latencies(models, inputs, args.runs)
    for name, path in models:
        error = np.abs(logits(path, inputs).astype(np.float64) - want).max()
        print(
            f"{name:<20} {size(path) / 1e6:8.1f} MB ({size(path) / size(float_model):.2f}x)"
            f"  max abs logit error {error:.4f}  1x128 forward {speed[name]:7.1f} ms"
        )


if __name__ == "__main__":
    main()
