"""Runs a `.pte` exported from a `--model-fn` at other input sizes than the
traced one, against the model in eager: `run_pte_at.py PTE MODULE:FN
SHAPE...` (a shape is `3x9`) exits 0 when every output is within 1e-3."""

import importlib
import sys

import torch
from executorch.runtime import Runtime

pte, function, shapes = sys.argv[1], sys.argv[2], sys.argv[3:]
module, name = function.split(":")
model, inputs = getattr(importlib.import_module(module), name)()
(key,) = inputs
method = Runtime.get().load_program(pte).load_method("forward")
for shape in shapes:
    x = torch.randn(*map(int, shape.split("x")))
    want = model(**{key: x})
    (got,) = method.execute([x])
    assert got.shape == want.shape, (shape, got.shape, want.shape)
    error = (got - want).abs().max().item()
    assert error <= 1e-3, (shape, error)
    print(f"{shape}: max abs {error:.2e}")
