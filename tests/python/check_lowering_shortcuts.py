"""ExecuTorch's XNNPACK lowering with hfx's shortcuts gives the `.pte` it
gives without them, byte for byte, and the shortcuts were taken.

    python check_lowering_shortcuts.py ARCH OVERRIDES_JSON {static,dynamic} MIN_REPLAYED MIN_RETRACES_SKIPPED [SCHEME]

The model is built as the worker builds `--model ARCH --set ...` (a tiny
random one), its linear layers quantized as the worker quantizes them for
`--quantize SCHEME` when one is given (torchao's 8da4w, 4w or 8w, groups of
32), on its sample inputs (2, 8), exported with torch.export (the
batch, and the sequence of 2-D inputs, dynamic for `dynamic`), saved with
its weights beside it and loaded over a map of them as the worker saves and
loads a traced program (`checkpoint.save_program`,
`pytree.load_exported_mapped`), then lowered twice from that one file:
first as the worker lowers, inside `lowering_shortcuts.shortcuts()` with the
constants written from their storage
(`lower.constants_written_from_their_storage`) and each partition's weights
shared and let go (`lower.delegated_weights_read_once`); then as ExecuTorch
lowers it. At least MIN_REPLAYED partitions must have been replayed, at
least MIN_RETRACES_SKIPPED whole-program retraces skipped, and the
programs' guards left unprinted. After the worker's lowering, the pages of
the weights' file resident in this process must be at most the weights the
portable program still reads (the pages they lie in); after
ExecuTorch's, more than that.

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
from check_quantized_pages import PAGE, resident_bytes  # noqa: E402
from hfx_worker import eager_quantize, messages, sources  # noqa: E402
from hfx_worker.checkpoint import save_program  # noqa: E402
from hfx_worker.lower import (  # noqa: E402
    DirectFile,
    constants_written_from_their_storage,
    delegated_weights_read_once,
)
from hfx_worker.lowering_shortcuts import (  # noqa: E402
    decomposes_none,
    holds_size_for_tensor,
    holds_transpose,
    holds_view,
    shortcuts,
    supported,
)
from hfx_worker.pytree import load_exported_mapped  # noqa: E402


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


def lowered(path, fast):
    """The program saved at `path` lowered to XNNPACK, as ExecuTorch lowers
    it or (`fast`) as the worker does; the `Counts`; and the bytes of the
    weights' file then resident, with the bound the worker's lowering keeps
    them under: the weights the lowered program left to portable ops."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    program, _ = load_exported_mapped(path)
    written = constants_written_from_their_storage() if fast else contextlib.nullcontext()
    read_once = delegated_weights_read_once() if fast else contextlib.nullcontext()
    with shortcuts(enabled=fast) as counts, written, read_once:
        edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
        lowered = edge.to_executorch()
    portable = edge.exported_program()
    kept = [
        value
        for value in (*portable.state_dict.values(), *portable.constants.values())
        if isinstance(value, torch.Tensor)
    ]
    bound = pages_spanned(value.untyped_storage() for value in kept)
    return lowered, counts, resident_bytes(path + ".weights"), bound


def pages_spanned(storages):
    """Bytes of the pages the storages' memory lies in, each page once."""
    pages = set()
    for storage in storages:
        if storage.nbytes():
            start = storage.data_ptr()
            pages.update(range(start // PAGE, (start + storage.nbytes() - 1) // PAGE + 1))
    return len(pages) * PAGE


def saved_program(model, inputs, dynamic, folder):
    """The program torch.export makes of `model`, saved in `folder` as the
    worker saves a traced program (its weights beside it): its path."""
    with torch.no_grad():
        program = torch.export.export(model, (), inputs, dynamic_shapes=dynamic, strict=False)
    path = os.path.join(folder, "model.pt2")
    save_program(program, path, side_weights=True)
    if not os.path.exists(path + ".weights"):
        raise SystemExit(f"{path}: saved without its weights beside it, which this check maps")
    return path


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
    name = f"{arch} {shapes}" + (f" {scheme}" if scheme else "")
    with tempfile.TemporaryDirectory() as folder:
        path = saved_program(model, inputs, dynamic, folder)
        # The worker's lowering first, so its measure counts its own pages only.
        fast_program, counts, fast_resident, bound = lowered(path, fast=True)
        check_direct_file(fast_program)
        fast = fast_program.buffer
        del fast_program
        plain, _, plain_resident, _ = lowered(path, fast=False)
        plain = plain.buffer
    print(
        f"{name}: {counts}, {len(plain)} bytes; weights resident after lowering "
        f"{fast_resident} (bound {bound}), as ExecuTorch lowers {plain_resident}"
    )
    if fast_resident > bound:
        raise SystemExit(
            f"{name}: {fast_resident} bytes of the weights' file stay resident after the lowering, "
            f"more than the {bound} the portable program reads"
        )
    # The first lowering's pages may still be mapped: the second's own must exceed the bound.
    if plain_resident - fast_resident <= bound:
        raise SystemExit(
            f"{name}: as ExecuTorch lowers, only {plain_resident} bytes of the weights' file stay "
            f"resident (bound {bound}): this check shows nothing"
        )
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
