"""Runs an ONNX model exported from a model folder at another input size than
the traced one, against the folder's model in eager: `run_onnx_at.py ONNX
FOLDER BATCH SEQUENCE` exits 0 when the first output is within 1e-3."""

import os
import sys

import numpy as np
import onnxruntime
import torch
import transformers

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
from hfx_worker.sources import sample_inputs  # noqa: E402

path, folder, batch, sequence = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
model = transformers.AutoModel.from_pretrained(folder).eval()
inputs = sample_inputs(model, batch, sequence)
session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
feeds = {i.name: inputs[i.name].numpy() for i in session.get_inputs()}
got = session.run(None, feeds)[0]
with torch.no_grad():
    want = model(**inputs)[0].numpy()
assert got.shape == want.shape, (got.shape, want.shape)
error = float(np.abs(got - want).max())
assert error <= 1e-3, error
print(f"{batch}x{sequence}: max abs {error:.2e}")
