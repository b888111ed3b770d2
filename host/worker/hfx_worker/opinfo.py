"""The requests behind `hfx plugins test-ops`: torch's own test inputs for its
operators (`op_db`, the OpInfo database torch and torch.onnx test their ops
with) as small exported programs, and the ONNX models the host translated them
into checked against eager PyTorch.

`op_infos` picks the OpInfos whose first sample dispatches only ops the host's
translations declare: their samples exercise translations, not missing ones.
`op_samples` exports the samples of one OpInfo per dtype (as `hfx run` traces:
`torch.export`, then the decomposition of what no plugin handles) into `.pt2`
files and keeps their inputs and eager outputs; `check_sample` runs one ONNX
model on them.
"""

import itertools
import os

from .messages import (
    CheckSample,
    OpInfoRef,
    OpInfos,
    OpInfosReply,
    OpSample,
    OpSamples,
    OpSamplesReply,
    RunCaseReply,
    SampleExportProgram,
    SampleExportSkipped,
)
from .trace import decompose_missing
from .verify import compared, onnx_runner

DTYPES = {"float32", "float16", "int64", "bool"}
# Ops whose output is uninitialized memory: any values are right (hfx writes zeros).
UNINITIALIZED = {
    "aten.empty.memory_format",
    "aten.empty_like.default",
    "aten.new_empty.default",
    "aten.empty_strided.default",
    "aten.empty_permuted.default",
}


def StableSort():
    """A dispatch mode running every sort of unspecified stability as a stable
    sort; `replaced` says whether it met one."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten

    class Mode(TorchDispatchMode):
        replaced = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func is aten.sort.default:
                names = ("dim", "descending")
                kwargs.update(zip(names, args[1:]))
                self.replaced = True
                return aten.sort.stable(args[0], stable=True, **kwargs)
            if func is aten.sort.stable and not (
                kwargs.get("stable") or (len(args) > 1 and args[1])
            ):
                kwargs["stable"] = True
                self.replaced = True
                return aten.sort.stable(args[0], **kwargs)
            return func(*args, **kwargs)

    return Mode()


def op_database():
    # Importing it builds every OpInfo (~10 s); torch's test utilities want `expecttest`.
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def dispatched(info):
    """The ATen overloads one call of `info`'s first sample reaches, or None when it cannot run."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.add(str(func))
            return func(*args, **(kwargs or {}))

    dtypes = info.supported_dtypes("cpu")
    dtype = torch.float32 if torch.float32 in dtypes else next(iter(sorted(dtypes, key=str)), None)
    if dtype is None:
        return None
    try:
        sample = next(iter(info.sample_inputs("cpu", dtype)))
        with torch.no_grad(), Recorder() as recorder:
            info.op(sample.input, *sample.args, **sample.kwargs)
    except Exception:  # an OpInfo that cannot run here (a missing backend, a deprecated API)
        return None
    return recorder.ops


def op_infos(session, params: OpInfos) -> OpInfosReply:
    import torch

    translated = set(params.translated)
    chosen = []
    for info in op_database():
        ops = dispatched(info)
        if ops and ops <= translated:
            chosen.append(
                OpInfoRef(name=info.name, variant=info.variant_test_name, ops=sorted(ops))
            )
    core = sorted(
        f"aten.{name}.{overload}"
        for name in dir(torch.ops.aten)
        for overload in _overloads(getattr(torch.ops.aten, name, None))
        if torch.Tag.core in getattr(getattr(torch.ops.aten, name), overload).tags
    )
    return OpInfosReply(infos=chosen, core=core)


def _overloads(packet):
    import torch

    return packet.overloads() if isinstance(packet, torch._ops.OpOverloadPacket) else []


def sample_module(op, spec, fixed):
    """A module calling one OpInfo's op on a sample: the sample's tensors are
    its inputs (`fixed[i]` is None), every other leaf (`(value,)`) is baked in."""
    import torch
    import torch.utils._pytree as pytree

    class Sample(torch.nn.Module):
        def forward(self, *tensors):
            given = iter(tensors)
            leaves = [next(given) if f is None else f[0] for f in fixed]
            first, args, kwargs = pytree.tree_unflatten(leaves, spec)
            return op(first, *args, **kwargs)

    return Sample()


def describe(tensors, fixed):
    shapes = ", ".join(f"{'x'.join(map(str, t.shape)) or 'scalar'}" for t in tensors)
    others = [repr(f[0]) for f in fixed if f is not None and not callable(f[0])]
    text = f"[{shapes}]" + (f" {', '.join(others)}" if others else "")
    return text if len(text) <= 120 else text[:117] + "..."


def op_samples(session, params: OpSamples) -> OpSamplesReply:
    import torch
    import torch.utils._pytree as pytree

    info = next(
        (
            i
            for i in op_database()
            if (i.name, i.variant_test_name) == (params.name, params.variant)
        ),
        None,
    )
    if info is None:
        raise ValueError(f"no OpInfo `{params.name}` (variant `{params.variant}`) in torch's op_db")
    unknown = set(params.dtypes) - DTYPES
    if unknown:
        raise ValueError(f"dtypes {sorted(unknown)}: test-ops runs {sorted(DTYPES)}")
    session.op_samples = []
    samples = []
    supported = info.supported_dtypes("cpu")
    for dtype_name in params.dtypes:
        dtype = getattr(torch, dtype_name)
        if dtype not in supported:
            continue
        for sample in itertools.islice(info.sample_inputs("cpu", dtype), params.per_dtype):
            leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
            fixed = [None if torch.is_tensor(leaf) else (leaf,) for leaf in leaves]
            tensors = tuple(leaf.detach() for leaf in leaves if torch.is_tensor(leaf))
            about = describe(tensors, fixed)
            path = os.path.join(params.folder, f"{len(session.op_samples)}.pt2")
            exported, held = export_sample(
                session, info.op, spec, fixed, tensors, params.handled, path
            )
            samples.append(
                OpSample(
                    index=len(session.op_samples), dtype=dtype_name, about=about, exported=exported
                )
            )
            session.op_samples.append(held)
    return OpSamplesReply(samples=samples)


def export_sample(session, op, spec, fixed, tensors, handled, path):
    """The sample's program saved at `path` and what `check_sample` needs of it
    (its inputs, the eager outputs it may match, whether they are compared by
    shape only), or why it is skipped (and None)."""
    import torch
    import torch.utils._pytree as pytree

    module = sample_module(op, spec, fixed)
    try:
        with torch.no_grad():
            eager, _ = pytree.tree_flatten(module(*[t.clone() for t in tensors]))
            again, _ = pytree.tree_flatten(module(*[t.clone() for t in tensors]))
    except Exception as error:
        return SampleExportSkipped(reason=f"eager PyTorch fails: {first_line(error)}"), None
    if not eager or not all(torch.is_tensor(o) for o in eager):
        return SampleExportSkipped(reason="returns a value that is not a tensor"), None
    if any(o.is_complex() or o.layout != torch.strided for o in [*eager, *tensors]):
        return SampleExportSkipped(reason="complex or sparse tensors"), None
    if any(o.dtype == torch.bfloat16 for o in [*eager, *tensors]):
        return SampleExportSkipped(
            reason="bfloat16 values (numpy, which the comparison runs in, has none)"
        ), None
    # Random outputs (differing between two calls) are compared by shape only.
    changed = any(
        not torch.equal(a, b) and not (a.is_floating_point() and torch.isnan(a).any())
        for a, b in zip(eager, again)
    )
    references = [eager]
    if any(t.dtype == torch.float16 for t in tensors):
        # torch's float16 CPU kernels differ in where they round (some accumulate in
        # float32, some in float16): a float16 result may match either.
        wide = [t.float() if t.dtype == torch.float16 else t for t in tensors]
        try:
            with torch.no_grad():
                widened, _ = pytree.tree_flatten(module(*wide))
            references.append(
                [w.to(e.dtype) if torch.is_tensor(w) else w for w, e in zip(widened, eager)]
            )
        except Exception:  # the op insists on float16 operands
            pass
    # torch's unstable sort leaves the order of equal elements unspecified; a
    # stable sort's (lower index first) is one valid order, and ONNX TopK's.
    try:
        with torch.no_grad(), StableSort() as stable:
            ordered, _ = pytree.tree_flatten(module(*[t.clone() for t in tensors]))
        if stable.replaced:
            references.append(ordered)
    except Exception:  # eager ran above: a stable sort of the same values runs too
        pass
    try:
        program = torch.export.export(module, tensors, strict=False)
        program, _ = decompose_missing(session, program, handled)
        torch.export.save(program, path)
    except Exception as error:
        return SampleExportSkipped(reason=f"torch.export fails: {first_line(error)}"), None
    targets = {
        n.target
        for n in program.graph.nodes
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
    }
    # So are outputs of seeded random ops (OpInfo seeds them: two calls agree) and of uninitialized memory.
    shape_only = changed or any(
        torch.Tag.nondeterministic_seeded in t.tags or str(t) in UNINITIALIZED for t in targets
    )
    return SampleExportProgram(path=path, ops=sorted(map(str, targets)), shape_only=shape_only), (
        tensors,
        references,
        shape_only,
    )


def first_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:200]


def check_sample(session, params: CheckSample) -> RunCaseReply:
    import numpy as np
    import torch

    held = session.op_samples[params.index] if 0 <= params.index < len(session.op_samples) else None
    if held is None:
        raise ValueError(f"no exported sample {params.index} in the last `op_samples`")
    tensors, references, shape_only = held
    run, _ = onnx_runner(params.onnx)
    got = run_positional(run, tensors)
    if shape_only:
        # Shape only: such an output is compared with itself where the shapes agree.
        got = [np.asarray(g) for g in got]
        eager = references[0]
        return RunCaseReply(
            outputs=compared(
                got,
                [
                    torch.from_numpy(g.copy()) if g.shape == tuple(e.shape) else e
                    for g, e in zip(got, eager)
                ],
                params.atol,
                params.rtol,
            )
        )
    reports = [compared(got, eager, params.atol, params.rtol) for eager in references]
    return RunCaseReply(outputs=next((r for r in reports if all(c.ok for c in r)), reports[0]))


def run_positional(run, tensors):
    """The model's inputs are the sample's tensors by name: `forward(*tensors)`
    names them `tensors_0`, `tensors_1`, ... (hfx names user inputs as the
    program does), and an input only read for its static shape (`expand_as`'s
    `other`) is no ONNX input."""
    named = {f"tensors_{i}": t for i, t in enumerate(tensors)}
    unknown = [n for n in run.input_names if n not in named]
    if unknown:
        raise ValueError(
            f"the ONNX model's inputs {unknown} are none of the sample's {sorted(named)}"
        )
    return run({n: named[n] for n in run.input_names})
