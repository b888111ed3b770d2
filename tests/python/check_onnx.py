"""Checks an `hfx run --backend onnx -o OUT.onnx` export.

    python check_onnx.py OUT.onnx REFERENCE.pt [ARCH OVERRIDES_JSON [TASK]]
    python check_onnx.py OUT.onnx REFERENCE.pt pattern NAME   (a `patch_patterns` module)
    ... --atol=1e-4                                           (a tighter tolerance)

1. The model passes the ONNX checker (full check, with shape inference).
2. ONNX Runtime on the recorded sample inputs matches the recorded eager
   outputs within atol/rtol 1e-3 (the reference exporters' tolerance; `--atol`
   sets another). A NaN where eager has a number is a mismatch.
3. With ARCH and OVERRIDES (a dynamic export): the model rebuilt as the worker
   builds it and ONNX Runtime agree on a second input size (3, 5).
"""

import json
import os
import sys

import numpy as np
import onnx
import onnxruntime
import torch

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
from hfx_worker import (
    pytree,  # noqa: E402
    sources,  # noqa: E402
)


def run(session, inputs):
    names = [i.name for i in session.get_inputs()]
    missing = [n for n in names if n not in inputs]
    if missing:
        raise SystemExit(f"the model wants inputs {missing} the reference does not have")
    return session.run(None, {n: inputs[n].numpy() for n in names})


TOLERANCE = 1e-3


def close(got, want, what):
    if len(got) != len(want):
        raise SystemExit(f"{what}: {len(got)} outputs vs {len(want)} eager")
    for i, (g, w) in enumerate(zip(got, want)):
        w = w.detach().float().numpy() if w.dtype == torch.bfloat16 else w.detach().numpy()
        if g.shape != w.shape:
            raise SystemExit(f"{what}: output {i} has shape {g.shape}, eager {w.shape}")
        if not np.allclose(
            g.astype(np.float64), w.astype(np.float64), atol=TOLERANCE, rtol=TOLERANCE
        ):
            diff = np.abs(g.astype(np.float64) - w.astype(np.float64)).max()
            raise SystemExit(f"{what}: output {i} differs by {diff}")
    return max(
        (
            float(np.abs(g.astype(np.float64) - w.detach().numpy().astype(np.float64)).max())
            if g.size
            else 0.0
        )
        for g, w in zip(got, want)
    )


def main(path, reference, arch=None, overrides=None, task=None):
    onnx.checker.check_model(path, full_check=True)
    ref = torch.load(reference)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    worst = close(run(session, ref["inputs"]), ref["outputs"], "recorded sample")
    if arch == "pattern":
        import patch_patterns

        second = patch_patterns.second_inputs(overrides)
        if second is not None:
            torch.manual_seed(0)
            model, _ = getattr(patch_patterns, overrides)()
            with torch.no_grad():
                eager = pytree.flat_outputs(model(**second))
            close(run(session, second), eager, "second size")
    elif arch:
        torch.manual_seed(0)
        model = sources.from_architecture(arch, json.loads(overrides), task).eval()
        inputs = sources.sample_inputs(model, 3, 5)
        with torch.no_grad():
            eager = pytree.flat_outputs(model(**inputs))
        close(run(session, inputs), eager, "second size (3, 5)")
    print(f"ok (max abs error {worst:.2e})")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--atol=")]
    for a in sys.argv[1:]:
        if a.startswith("--atol="):
            TOLERANCE = float(a.removeprefix("--atol="))
    main(*args)
