"""Runs an ONNX model exported from a `packed_vision` encoder on another
packing of images than the traced one (`OTHER_GRID`: more images, other
sizes), against the same encoder in eager: `check_packed_vision.py ONNX
FUNCTION` exits 0 when every output is within 1e-3."""

import sys

import numpy as np
import onnxruntime
import packed_vision
import torch

path, function = sys.argv[1], sys.argv[2]
model, inputs = getattr(packed_vision, function)(packed_vision.OTHER_GRID)
session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
feeds = {i.name: inputs[i.name].numpy() for i in session.get_inputs()}
got = session.run(None, feeds)
with torch.no_grad():
    want = [w.numpy() for w in model(**inputs)]
assert len(got) == len(want), (len(got), len(want))
for index, (g, w) in enumerate(zip(got, want)):
    assert g.shape == w.shape, (index, g.shape, w.shape)
    error = float(np.abs(g - w).max())
    assert error <= 1e-3, (index, error)
    print(f"output {index} {list(g.shape)}: max abs {error:.2e}")
print(f"segments {inputs['cu_seqlens'].tolist()}")
