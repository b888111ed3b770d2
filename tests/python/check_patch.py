"""Checks a `.pt2` traced with a patch plugin.

    python check_patch.py OUT.pt2 REFERENCE.pt PATTERN [--absent OP,...] [--present OP,...]
                          [--compare K] [--shape I=D0xD1x...]

1. Every op in `--absent` is gone from the graph, every op in `--present` is in it
   (matched against `str(node.target)`, so `aten.split.Tensor` or `_add_batch_dim`).
2. The program on the recorded inputs matches the recorded eager outputs (1e-4);
   with `--compare K`, the first K outputs only (a patch may change the others on
   purpose, as the sliding-window cache patch keeps the whole cache), and the
   program's output I has the `--shape` given.
3. When `patch_patterns.second_inputs(PATTERN)` has inputs of another size, the
   program and the eager module agree on them, without a retrace.
"""

import argparse
import os
import sys

import torch
import transformers.modeling_outputs  # noqa: F401  (ModelOutput pytrees the archives name)

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
import patch_patterns  # noqa: E402
from hfx_worker import pytree  # noqa: E402


def close(got, want, what, atol, compare=None):
    got, want = pytree.flat_outputs(got)[:compare], pytree.flat_outputs(want)[:compare]
    if len(got) != len(want) or not got:
        raise SystemExit(f"{what}: {len(got)} outputs vs {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            raise SystemExit(
                f"{what}: output {i}: {tuple(g.shape)} {g.dtype} vs {tuple(w.shape)} {w.dtype}"
            )
        if not torch.allclose(g.double(), w.double(), atol=atol, rtol=atol, equal_nan=True):
            raise SystemExit(
                f"{what}: output {i} differs by {(g.double() - w.double()).abs().max().item()}"
            )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("program")
    parser.add_argument("reference")
    parser.add_argument("pattern")
    parser.add_argument("--absent", default="")
    parser.add_argument("--present", default="")
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument("--compare", type=int, default=None)
    parser.add_argument("--shape", default="")
    parser.add_argument("--weights-dtype", default="")
    args = parser.parse_args()
    pytree.register_cache_pytrees()
    ep = torch.export.load(args.program)
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    for op in filter(None, args.absent.split(",")):
        if any(op in t for t in targets):
            raise SystemExit(f"{op} is still in the graph: {sorted(set(targets))}")
    for op in filter(None, args.present.split(",")):
        if not any(op in t for t in targets):
            raise SystemExit(f"{op} is not in the graph: {sorted(set(targets))}")
    if args.weights_dtype:
        dtypes = {
            str(p.dtype).removeprefix("torch.")
            for p in ep.state_dict.values()
            if p.is_floating_point()
        }
        if dtypes != {args.weights_dtype}:
            raise SystemExit(f"weights are {dtypes}, expected {args.weights_dtype}")
    ref = torch.load(args.reference, weights_only=False)
    with torch.no_grad():
        outputs = ep.module()(**ref["inputs"], **ref["constants"])
    close(outputs, ref["outputs"], "recorded sample", args.atol, args.compare)
    if args.shape:
        index, dims = args.shape.split("=")
        shape = tuple(pytree.flat_outputs(outputs)[int(index)].shape)
        if shape != tuple(int(d) for d in dims.split("x")):
            raise SystemExit(f"output {index} has shape {shape}, expected {dims}")
    second = (
        patch_patterns.second_inputs(args.pattern)
        if hasattr(patch_patterns, args.pattern)
        else None
    )
    if second is not None:
        torch.manual_seed(0)
        model, _ = getattr(patch_patterns, args.pattern)()
        with torch.no_grad():
            close(ep.module()(**second), model(**second), "second size", args.atol)
    print("ok")


if __name__ == "__main__":
    main()
