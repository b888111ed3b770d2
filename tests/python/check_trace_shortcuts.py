"""torch.export with hfx's `trace_shortcuts.frame_stacks()` gives the program
it gives without, byte for byte, node stack traces included; and torch's
serializer inside `trace_shortcuts.saving()` gives the bytes it gives without.

    python check_trace_shortcuts.py ARCH OVERRIDES_JSON {static,dynamic}

The model is built as the worker builds `--model ARCH --set ...` (a tiny
random one), on its sample inputs (2, 8), and exported twice with
torch.export (the batch, and the sequence of 2-D inputs, dynamic for
`dynamic`): once as torch traces, once inside the shortcut. The two
programs serialize to the same bytes, and most nodes carry a stack trace
into the model's code (so the comparison is not of empty strings). The
program serialized inside `saving()` (its canonical-form check skipped, the
collector paused) is the same bytes, and both are restored after.
"""

import gc
import json
import os
import sys

import torch

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
from check_lowering_shortcuts import model_and_inputs  # noqa: E402  (the model as the worker builds it)
from hfx_worker.trace_shortcuts import FrameStack, frame_stacks, saving, supported  # noqa: E402


def exported(model, inputs, dynamic):
    with torch.no_grad():
        return torch.export.export(model, (), inputs, dynamic_shapes=dynamic, strict=False)


def serialized(program):
    from torch._export.serde.serialize import serialize

    return serialize(program).exported_program


def main():
    arch, overrides, shapes = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    if not supported():
        raise SystemExit(
            "the shortcut does not apply to the installed torch: update trace_shortcuts.SUPPORTED and this check"
        )
    import torch.fx.proxy as proxy

    model, inputs, dynamic = model_and_inputs(arch, overrides, shapes)
    plain = exported(model, inputs, dynamic)
    original = proxy.CapturedTraceback
    with frame_stacks():
        if proxy.CapturedTraceback is not FrameStack:
            raise SystemExit(
                "frame_stacks(): torch.fx's tracer does not use FrameStack inside the block"
            )
        fast = exported(model, inputs, dynamic)
    if proxy.CapturedTraceback is not original:
        raise SystemExit(
            "frame_stacks(): torch.fx's CapturedTraceback is not restored after the block"
        )

    traces = [(n.format_node(), n.meta.get("stack_trace")) for n in plain.graph.nodes]
    fast_traces = [(n.format_node(), n.meta.get("stack_trace")) for n in fast.graph.nodes]
    for (node, expected), (_, got) in zip(traces, fast_traces):
        if expected != got:
            raise SystemExit(
                f"{arch} {shapes}: node `{node}`: stack trace differs:\n--- torch\n{expected}\n--- shortcut\n{got}"
            )
    if len(traces) != len(fast_traces):
        raise SystemExit(
            f"{arch} {shapes}: {len(traces)} nodes, with the shortcut {len(fast_traces)}"
        )
    if serialized(plain) != serialized(fast):
        raise SystemExit(f"{arch} {shapes}: the serialized programs differ")
    from torch._export.serde import serialize

    canonicalize = serialize.canonicalize
    with saving():
        if gc.isenabled() or serialize.canonicalize is canonicalize:
            raise SystemExit(
                "saving(): the collector runs or torch's canonical-form check is still in place inside the block"
            )
        saved = serialized(plain)
    if not gc.isenabled() or serialize.canonicalize is not canonicalize:
        raise SystemExit(
            "saving(): the collector or torch's canonical-form check is not restored after the block"
        )
    if saved != serialized(plain):
        raise SystemExit(f"{arch} {shapes}: the program serialized inside saving() differs")
    calls = [n for n in plain.graph.nodes if n.op == "call_function"]
    into_model = [n for n in calls if "modeling_" in (n.meta.get("stack_trace") or "")]
    if len(into_model) < len(calls) // 2:
        raise SystemExit(
            f"{arch} {shapes}: only {len(into_model)} of {len(calls)} calls have a stack trace into the model's code"
        )
    print(
        f"{arch} {shapes}: {len(traces)} nodes, the same program; {len(into_model)} of {len(calls)} calls traced into the model"
    )


main()
