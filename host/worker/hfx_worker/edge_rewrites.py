"""Rewrites of an edge program before ExecuTorch partitions it: nodes that
copy a tensor into an identical one, and a scale computed on the larger of a
matrix product's operands.

A generation component's static cache is a user input updated in place.
Functionalized, each update is an out-of-place `index_put` of the whole
cache, then `copy(cache, updated)` twice (the in-place op's epilogue, then
the input mutation's), then the write-back `copy_` that `to_executorch`
inserts: four cache-sized copies per cache per step, and SDPA's math
decomposition adds an `expand_copy` of the keys and of the values to their
own shape. `identity_copies_dropped` replaces each such node by a value
equal to it in shape, dtype and dim order, so the program computes the
same values; the mutation's output is then the `index_put` itself, which
`mutated_inputs_updated_in_place` makes an `index_put_` on the input, and
`to_executorch` inserts no write-back (the output's lineage reaches the
input). ExecuTorch's own reinplace pass (`run_reinplace_pass`) is not used:
it rewrites every `index_put` whose input nothing reads later, fresh
tensors the program returns too (a prefill's cache made by `full`), and the
writes of those programs land in memory the planner hands to other values.
Only the inputs' updates are rewritten here, and `lower` plans them with
its fixes (`inputs_updated_in_place_planned`).

SDPA's math decomposition scales both the queries and the transposed keys
by the square root of the softmax scale before their product; in a decode
step the keys are the whole cache, so that is one more cache-sized pass per
layer. `matmul_scales_on_the_smaller_operand` moves both factors onto the
smaller operand: (q·a)(kᵀ·b) = (q·ab)kᵀ, exact up to float rounding.
"""


def edge_op(namespace, name):
    """The edge dialect's op `namespace::name` (`name` as `op.overload`)."""
    from executorch.exir.dialects._ops import ops

    op, overload = name.split(".")
    return getattr(getattr(getattr(ops.edge, namespace), op), overload)


def same_layout(a, b):
    """Whether the fake values of nodes `a` and `b` are tensors of one shape
    (provably, for symbolic sizes), dtype and dim order."""
    import torch
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    va, vb = a.meta.get("val"), b.meta.get("val")
    if not (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor)):
        return False
    if va.dtype != vb.dtype or va.dim() != vb.dim():
        return False
    if not all(statically_known_true(x == y) for x, y in zip(va.shape, vb.shape)):
        return False
    try:
        return va.dim_order() == vb.dim_order()
    except (RuntimeError, ValueError):  # strides a dim order cannot be read from
        return False


def returned_twice(node, value):
    """Whether replacing `node` by `value` would put `value` among the
    program's outputs twice (ExecuTorch plans one buffer per output)."""
    return any(u.op == "output" for u in node.users) and any(u.op == "output" for u in value.users)


def identity_copies_dropped(module):
    """`copy(dst, src)` whose value has `src`'s layout, and `expand_copy(x,
    size)` to `x`'s own shape: each replaced by its source."""
    from torch.fx.passes.infra.pass_base import PassResult

    copy = edge_op("aten", "copy.default")
    expand = edge_op("aten", "expand_copy.default")
    graph = module.graph
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in (copy, expand):
            continue
        source = node.args[1] if node.target == copy else node.args[0]
        if not same_layout(node, source) or returned_twice(node, source):
            continue
        node.replace_all_uses_with(source)
        graph.erase_node(node)
        changed = True
    if changed:
        graph.eliminate_dead_code()
        module.recompile()
    return PassResult(module, changed)


def mutated_inputs_updated_in_place(program):
    """Each `index_put` whose result is the new value of a mutated user input
    or buffer, whose `self` is that input and has no other use, made an
    `index_put_` on it; returns how many. Nothing can read the input's old
    value after the update, since the update is its only use."""
    from torch.export.graph_signature import InputKind, OutputKind

    signature = program.graph_signature
    graph = program.graph_module.graph
    placeholders = {node.name: node for node in graph.nodes if node.op == "placeholder"}
    buffers = {
        spec.target: spec.arg.name
        for spec in signature.input_specs
        if spec.kind == InputKind.BUFFER
    }
    index_put = edge_op("aten", "index_put.default")
    in_place = edge_op("aten", "index_put_.default")
    updated = 0
    for spec, value in zip(signature.output_specs, graph.output_node().args[0]):
        if spec.kind == OutputKind.USER_INPUT_MUTATION:
            target = placeholders.get(spec.target)
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            target = placeholders.get(buffers.get(spec.target))
        else:
            continue
        if (
            getattr(value, "target", None) == index_put
            and value.args[0] is target
            and len(target.users) == 1
            and same_layout(value, target)
        ):
            value.target = in_place
            updated += 1
    if updated:
        program.graph_module.recompile()
    return updated


# Ops that only move or repeat elements: a scalar factor commutes with them.
LAYOUT_OPS = (
    ("aten", "view_copy.default"),
    ("aten", "expand_copy.default"),
    ("aten", "permute_copy.default"),
    ("aten", "unsqueeze_copy.default"),
    ("aten", "squeeze_copy.dims"),
    ("aten", "squeeze_copy.dim"),
    ("aten", "alias_copy.default"),
    ("dim_order_ops", "_clone_dim_order.default"),
)


def scaled_source(node, layout, scale):
    """The `scale` node (`mul.Scalar`) that `node` is a scaled tensor moved
    by `layout` ops from, if each node on the way (the `mul` too) has one
    user; else None."""
    while node.op == "call_function" and len(node.users) == 1:
        if node.target == scale:
            return node if isinstance(node.args[1], (int, float)) else None
        if node.target not in layout:
            return None
        node = node.args[0]
    return None


def static_numel(node):
    value = node.meta.get("val")
    numel = 1
    for size in getattr(value, "shape", (None,)):
        if not isinstance(size, int):
            return None
        numel *= size
    return numel


def matmul_scales_on_the_smaller_operand(module):
    """`bmm(A, B)` whose operands are both scaled (`mul.Scalar`, then layout
    ops only): both factors applied to the smaller scaled tensor, the larger
    one used as it is."""
    from torch.fx.passes.infra.pass_base import PassResult

    bmm = edge_op("aten", "bmm.default")
    layout = {edge_op(namespace, name) for namespace, name in LAYOUT_OPS}
    scale = edge_op("aten", "mul.Scalar")
    changed = False
    for node in list(module.graph.nodes):
        if node.op != "call_function" or node.target != bmm:
            continue
        scales = [scaled_source(operand, layout, scale) for operand in node.args[:2]]
        if None in scales or scales[0] is scales[1]:
            continue
        sizes = [static_numel(scale) for scale in scales]
        if None in sizes or sizes[0] == sizes[1]:
            continue
        small, large = scales if sizes[0] < sizes[1] else scales[::-1]
        small.args = (small.args[0], small.args[1] * large.args[1])
        large.replace_all_uses_with(large.args[0])
        module.graph.erase_node(large)
        changed = True
    if changed:
        module.recompile()
    return PassResult(module, changed)
