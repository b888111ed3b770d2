"""Checks an `hfx run --model ...` export against eager PyTorch.

    python check_trace.py OUT.pt2 REFERENCE.pt ARCH OVERRIDES_JSON {static,dynamic}

1. The archive run on the recorded sample inputs matches the recorded eager
   outputs within atol/rtol 1e-4.
2. For a dynamic export: the same model rebuilt (same seed, same config, as
   the worker builds it) and the archive agree on a second input size, with
   no retrace.
"""

import json
import os
import sys

import torch
import transformers.modeling_outputs  # noqa: F401  (ModelOutput pytrees the archives name)

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
from hfx_worker import (
    pytree,  # noqa: E402
    sources,  # noqa: E402
)


def close(a, b, what):
    a, b = pytree.flat_outputs(a), pytree.flat_outputs(b)
    if len(a) != len(b) or not a:
        raise SystemExit(f"{what}: {len(a)} outputs vs {len(b)}")
    for i, (p, q) in enumerate(zip(a, b)):
        if p.shape != q.shape or not torch.allclose(p, q, atol=1e-4, rtol=1e-4):
            raise SystemExit(
                f"{what}: output {i} differs (shapes {tuple(p.shape)} vs {tuple(q.shape)})"
            )


def main(program, reference, arch, overrides, mode):
    ref = torch.load(reference)
    pytree.register_cache_pytrees()  # KV caches in the outputs
    ep = torch.export.load(program)
    with torch.no_grad():
        got = ep.module()(**ref["inputs"], **ref["constants"])
    close(got, ref["outputs"], "recorded sample")
    if mode == "dynamic":
        torch.manual_seed(0)
        model = sources.from_architecture(arch, json.loads(overrides), None).eval()
        inputs = sources.sample_inputs(model, 3, 5)
        with torch.no_grad():
            close(ep.module()(**inputs), model(**inputs), "second size (3, 5)")
    print("ok")


if __name__ == "__main__":
    main(*sys.argv[1:])
