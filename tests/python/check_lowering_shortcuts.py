"""ExecuTorch's XNNPACK lowering with hfx's shortcuts gives the `.pte` it
gives without them, byte for byte, and the shortcuts were taken.

    python check_lowering_shortcuts.py ARCH OVERRIDES_JSON {static,dynamic} MIN_REPLAYED MIN_RETRACES_SKIPPED [SCHEME]

The model is built as the worker builds `--model ARCH --set ...` (a tiny
random one), its linear layers quantized as the worker quantizes them for
`--quantize SCHEME` when one is given (torchao's 8da4w, 4w or 8w, groups of
32), on its sample inputs (2, 8), exported with torch.export (the
batch, and the sequence of 2-D inputs, dynamic for `dynamic`), then lowered
twice from identical exports: once as ExecuTorch lowers it, once inside
`lowering_shortcuts.shortcuts()` with the constants written from their
storage (`lower.constants_written_from_their_storage`), as the worker
lowers. At least MIN_REPLAYED partitions must have been replayed, at least
MIN_RETRACES_SKIPPED whole-program retraces skipped, and the programs'
guards left unprinted.

First, the skip's condition: a program with an op the edge table
decomposes is not taken for decomposing none.

The lowered program is also written as the worker writes it (`lower.DirectFile`,
past the page cache), and so is a stream of writes across its buffer, direct
and buffered, and read back: the same bytes.
"""

import contextlib
import json
import os
import sys
import tempfile

import torch

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
from hfx_worker import eager_quantize, messages, sources  # noqa: E402
from hfx_worker.lower import DirectFile, constants_written_from_their_storage  # noqa: E402
from hfx_worker.lowering_shortcuts import (  # noqa: E402
    decomposes_none,
    holds_size_for_tensor,
    holds_transpose,
    holds_view,
    shortcuts,
    supported,
)


def model_and_inputs(arch, overrides, shapes, scheme=None):
    """The model (its linears quantized by `scheme`, `8da4w`, as the worker
    quantizes them; float without one), its sample inputs and their dynamic
    shapes (None: `static`)."""
    torch.manual_seed(0)
    model = sources.from_architecture(arch, overrides, None).eval()
    model.config.use_cache = False  # a causal LM's cache is not what this checks
    if scheme is not None:
        eager_quantize.quantize_model(
            model, messages.EagerQuantize(linear=scheme, embeddings=None, group_size=32)
        )
    inputs = sources.sample_inputs(model, 2, 8)
    if shapes == "static":
        return model, inputs, None
    batch, sequence = torch.export.Dim("batch", max=64), torch.export.Dim("sequence", max=64)
    return (
        model,
        inputs,
        {
            name: {0: batch, 1: sequence} if value.dim() == 2 else {0: batch}
            for name, value in inputs.items()
        },
    )


def lowered(model, inputs, dynamic, fast):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    with torch.no_grad():
        program = torch.export.export(model, (), inputs, dynamic_shapes=dynamic, strict=False)
    written = constants_written_from_their_storage() if fast else contextlib.nullcontext()
    with shortcuts(enabled=fast) as counts, written:
        edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
        return edge.to_executorch(), counts


def check_direct_file(program):
    """`program` written by `DirectFile` reads back as its bytes, and so does a
    stream of writes of odd sizes longer than the file's buffer."""
    expected = program.buffer
    stream = [expected[i : i + 4097] for i in range(0, len(expected), 4097)] * (
        2 * DirectFile.SIZE // len(expected) + 1
    )
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.pte")
        for direct in (True, False):
            with DirectFile(path, direct) as out:
                program.write_to_file(out)
            with open(path, "rb") as f:
                if f.read() != expected:
                    raise SystemExit(
                        f"DirectFile (direct {direct}): the .pte read back differs from ExecuTorch's bytes"
                    )
            with DirectFile(path, direct) as out:
                for chunk in stream:
                    out.write(chunk)
            with open(path, "rb") as f:
                if f.read() != b"".join(stream):
                    raise SystemExit(
                        f"DirectFile (direct {direct}): a stream of {len(stream)} writes read back differs"
                    )


class Projects(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.nn.functional.silu(self.linear(x)).reshape(-1)


def check_skip_condition():
    """The skip's condition refuses a program the table would change, and
    takes the same program once the table has decomposed it."""
    from executorch.exir.tracer import _default_decomposition_table

    program = torch.export.export(Projects(), (torch.ones(2, 4),))
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    table = _default_decomposition_table()
    if "aten.linear.default" not in targets or decomposes_none(program, table):
        raise SystemExit(
            f"the edge table decomposes `aten.linear` ({sorted(targets)}), yet was taken for decomposing none"
        )
    program = program.run_decompositions(table)
    if not decomposes_none(program, table):
        raise SystemExit("a program the edge table decomposed was not taken for decomposing none")

    # The passes' conditions: each sees what its pass replaces, and only that.
    program = torch.export.export(
        Replaceable(), (torch.ones(3, 4),), dynamic_shapes=({0: torch.export.Dim("rows", min=2)},)
    )
    seen = {
        test.__name__: sorted(
            str(n.target) for n in program.graph.nodes if n.op == "call_function" and test(n)
        )
        for test in (holds_transpose, holds_view, holds_size_for_tensor)
    }
    expected = {
        "holds_transpose": ["aten.t.default"],
        "holds_view": ["aten.t.default", "aten.view.default"],
        "holds_size_for_tensor": ["aten.add.Tensor"],
    }
    if seen != expected:
        raise SystemExit(f"the passes' conditions saw {seen}, expected {expected}")


class Replaceable(torch.nn.Module):
    """An `aten.t`, a view, and a symbolic size added to a tensor."""

    def forward(self, x):
        return x.t().sum() + x.view(-1).sum() + torch.ops.aten.add.Tensor(x, x.shape[0])


def main():
    arch, overrides, shapes, min_replayed = (
        sys.argv[1],
        json.loads(sys.argv[2]),
        sys.argv[3],
        int(sys.argv[4]),
    )
    min_retraces_skipped = int(sys.argv[5])
    scheme = sys.argv[6] if len(sys.argv) > 6 else None
    if not supported():
        raise SystemExit(
            "the shortcuts do not apply to the installed executorch/torch: update SUPPORTED and this check"
        )
    check_skip_condition()
    model, inputs, dynamic = model_and_inputs(arch, overrides, shapes, scheme)
    plain, _ = lowered(model, inputs, dynamic, fast=False)
    fast_program, counts = lowered(model, inputs, dynamic, fast=True)
    check_direct_file(fast_program)
    plain, fast = plain.buffer, fast_program.buffer
    name = f"{arch} {shapes}" + (f" {scheme}" if scheme else "")
    print(f"{name}: {counts}, {len(plain)} bytes")
    if fast != plain:
        first = next(
            (i for i, (a, b) in enumerate(zip(fast, plain)) if a != b), min(len(fast), len(plain))
        )
        raise SystemExit(
            f"{name}: the .pte differs with the shortcuts (sizes {len(fast)} vs {len(plain)}, first difference at byte {first})"
        )
    if counts.partitions == 0 or counts.replayed < min_replayed:
        raise SystemExit(
            f"{name}: expected at least {min_replayed} replayed partition(s), got {counts}"
        )
    if counts.retraces_skipped < min_retraces_skipped:
        raise SystemExit(
            f"{name}: expected at least {min_retraces_skipped} whole-program retrace(s) skipped, got {counts}"
        )
    if counts.guards_unprinted == 0:
        raise SystemExit(f"{name}: expected the programs' guards left unprinted, got {counts}")


if __name__ == "__main__":
    main()
