"""Writes host/src/executorch/kernels.json: for every op a program may hold
after ExecuTorch's edge decomposition, the kernel the portable runtime runs
it with and that kernel's schema, laid out as the emitter needs it.

Generated from the pinned torch and executorch (host/worker/requirements*.txt)
and committed: the host reads the table, never torch, at emission time.
Run: .venv/bin/python tools/executorch-kernels.py

What maps to what is ExecuTorch's own rule (`to_out_variant`), kept only
where the runtime registers the out-variant kernel:
- a functional op to its `.out` overload (`aten.add.Tensor` -> `aten::add.out`);
- a view op to its copy's out overload (`aten.permute.default` ->
  `aten::permute_copy.out`), as `to_edge` replaces views;
- `_to_copy` / `clone` / `empty` to the dim-order ops (`MemoryFormatOpsPass`);
- the scalar ops on sizes (`sym_size`, `_operator.add`, ...) to
  `aten::sym_size.int` and `executorch_prim::*.Scalar`.
"""

import json
import pathlib
import sys

import executorch
import executorch.exir.passes.dim_order_ops_registry  # noqa: F401  (registers dim_order_ops)
import torch
from executorch.exir.operator.convert import to_out_variant
from executorch.exir.passes.executorch_prim_ops_registry import (
    _PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS,
)
from executorch.extension.pybindings import _portable_lib

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "host/src/executorch/kernels.json"

REGISTERED = set(_portable_lib._get_operator_names())


def qualified(op):
    name = op._schema.name
    overload = op._schema.overload_name
    return f"{name}.{overload}" if overload else name


def arg_type(t):
    """The argument's type as the emitter lays it out."""
    optional = isinstance(t, torch.OptionalType)
    if optional:
        t = t.getElementType()
    if isinstance(t, torch.ListType):
        e = t.getElementType()
        if isinstance(e, torch.OptionalType) and isinstance(e.getElementType(), torch.TensorType):
            kind = "optional_tensor_list"
        elif isinstance(e, torch.TensorType):
            kind = "tensor_list"
        elif isinstance(e, (torch.IntType, torch.SymIntType)):
            kind = "int_list"
        elif isinstance(e, torch.FloatType):
            kind = "float_list"
        elif isinstance(e, torch.BoolType):
            kind = "bool_list"
        else:
            raise TypeError(f"list of {e}")
    elif isinstance(t, torch.TensorType):
        kind = "tensor"
    elif isinstance(t, (torch.IntType, torch.SymIntType)):
        kind = "int"
    elif isinstance(t, torch.FloatType):
        kind = "float"
    elif isinstance(t, torch.BoolType):
        kind = "bool"
    elif isinstance(t, torch.NumberType):
        kind = "scalar"
    elif isinstance(t, torch.StringType):
        kind = "str"
    else:
        s = str(t)
        kind = {
            "ScalarType": "scalar_type",
            "MemoryFormat": "memory_format",
            "Layout": "layout",
            "Device": "device",
        }.get(s)
        if kind is None:
            raise TypeError(f"type {s}")
    return kind, optional


def default(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [default(v) for v in value]
    if isinstance(value, torch.dtype):
        from executorch.exir.scalar_type import ScalarType  # noqa
        from executorch.exir.tensor import scalar_type_enum

        return int(scalar_type_enum(value))
    if isinstance(value, torch.memory_format):
        from executorch.exir.tensor import memory_format_enum

        return int(memory_format_enum(value))
    if isinstance(value, torch.layout):
        from executorch.exir.tensor import layout_enum

        return int(layout_enum(value))
    raise TypeError(f"default {value!r}")


def kernel(op):
    schema = op._schema
    args = []
    for a in schema.arguments:
        kind, optional = arg_type(a.type)
        entry = {"name": a.name, "type": kind}
        if optional:
            entry["optional"] = True
        if a.kwarg_only:
            entry["keyword"] = True
        if a.is_out:
            entry["out"] = True
        if a.has_default_value():
            entry["default"] = default(a.default_value)
        args.append(entry)
    returns = [arg_type(r.type)[0] for r in schema.returns]
    return {"kernel": qualified(op), "args": args, "returns": returns}


def same_arguments_out(op):
    schema = op._schema
    if schema.is_mutable:
        return None
    packet = getattr(torch.ops.aten, schema.name.split("::")[1])
    key = [(a.name, str(a.type)) for a in schema.arguments]
    for overload in packet.overloads():
        candidate = getattr(packet, overload)
        arguments = candidate._schema.arguments
        if (
            any(a.is_out for a in arguments)
            and [(a.name, str(a.type)) for a in arguments if not a.is_out] == key
        ):
            return candidate
    return None


def main():
    table = {}
    skipped = []
    for packet_name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, packet_name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            schema = op._schema
            source = f"aten.{packet_name}.{overload}"
            target = op
            # A view op: to_edge replaces it by its copy (`permute` -> `permute_copy`).
            if (
                any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
                and not schema.is_mutable
            ):
                copy = getattr(torch.ops.aten, packet_name + "_copy", None)
                if copy is None or overload not in copy.overloads():
                    continue
                target = getattr(copy, overload)
            try:
                out, _ = to_out_variant(target)
            except Exception:
                # ExecuTorch's mapping fails on packets that also hold scalar overloads
                # (`pow.int_to_int`): the out overload whose other arguments are the op's.
                out = same_arguments_out(target)
            if out is None or qualified(out) not in REGISTERED:
                continue
            try:
                table[source] = kernel(out)
            except TypeError as e:
                skipped.append(f"{source}: {e}")
    # The dim-order ops ExecuTorch's MemoryFormatOpsPass puts in place of
    # memory-format ones (an argument `dim_order` instead of `memory_format`).
    for source, op in [
        ("aten._to_copy.default", torch.ops.dim_order_ops._to_dim_order_copy.out),
        ("aten.clone.default", torch.ops.dim_order_ops._clone_dim_order.out),
        ("aten.empty.memory_format", torch.ops.dim_order_ops._empty_dim_order.out),
    ]:
        table[source] = kernel(op)
    # Scalar ops on sizes (EdgeToBackendOpsPass).
    sym = {
        "aten.sym_size.int": torch.ops.aten.sym_size.int,
        "aten.sym_numel.default": torch.ops.aten.sym_numel.default,
        "aten._local_scalar_dense.default": torch.ops.aten._local_scalar_dense.default,
    }
    python_names = {
        "round": "builtins.round",
        "ceil": "math.ceil",
        "trunc": "math.trunc",
    }
    for fn, op in _PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS.items():
        module = getattr(fn, "__module__", None) or "builtins"
        name = fn.__name__
        if module == "operator":
            module = "_operator"
        source = python_names.get(name, f"{module}.{name}")
        sym[source] = op
    for source, op in sym.items():
        entry = kernel(op)
        entry["scalar"] = True
        table[source] = entry
    missing = sorted(k for k in table if table[k]["kernel"] not in REGISTERED)
    if missing:
        sys.exit(f"not registered in the runtime: {missing}")
    document = {
        "generated_by": "tools/executorch-kernels.py",
        "torch": torch.__version__.split("+")[0],
        "executorch": __import__("importlib.metadata").metadata.version("executorch").split("+")[0],
        "kernels": dict(sorted(table.items())),
    }
    # One op per line: diffs show which ops a new torch or ExecuTorch changed.
    lines = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in document.pop("kernels").items()]
    head = json.dumps(document, indent=1)[:-2]
    OUT.write_text(head + ',\n "kernels": {\n' + ",\n".join(lines) + "\n }\n}\n")
    print(
        f"{len(table)} ops -> {len({v['kernel'] for v in table.values()})} kernels; {OUT.relative_to(ROOT)}"
    )
    for s in skipped:
        print("skipped", s)


if __name__ == "__main__":
    main()
