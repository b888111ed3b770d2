"""Runs an ONNX model at another input size than the traced one, against its
model in eager: `run_onnx_at.py ONNX MODEL BATCH SEQUENCE` exits 0 when every
output (a cache's states too, in the program's order) is within 1e-3. MODEL
is the model folder it was exported from, or `arch:NAME:K=V,...` for a random
model of an architecture as `hfx run --model NAME --set K=V,...` builds it."""

import os
import sys

import numpy as np
import onnxruntime
import torch
import transformers

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
from hfx_worker.pytree import flat_outputs  # noqa: E402
from hfx_worker.sources import SEED, from_architecture, sample_inputs  # noqa: E402

path, source, batch, sequence = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if source.startswith("arch:"):
    _, name, settings = source.split(":", 2)
    torch.manual_seed(SEED)
    overrides = dict(item.split("=", 1) for item in settings.split(",") if item)
    model = from_architecture(name, overrides, None).eval()
else:
    model = transformers.AutoModel.from_pretrained(source).eval()
inputs = sample_inputs(model, batch, sequence)
session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
feeds = {i.name: inputs[i.name].numpy() for i in session.get_inputs()}
got = session.run(None, feeds)
with torch.no_grad():
    want = [t.numpy() for t in flat_outputs(model(**inputs))]
assert len(got) == len(want), (len(got), len(want))
errors = []
for index, (g, w) in enumerate(zip(got, want)):
    assert g.shape == w.shape, (index, g.shape, w.shape)
    errors.append(float(np.abs(g - w).max()))
assert max(errors) <= 1e-3, errors
print(f"{batch}x{sequence}: max abs {max(errors):.2e} over {len(got)} outputs")
