"""Five shortcuts through ExecuTorch's delegate lowering that give the bytes
it gives, for less of its work.

ExecuTorch's lowering (`to_edge_transform_and_lower`) costs one to two
thirds of an XNNPACK export, and most of that is work repeated, not work
needed (a 125M Llama with dynamic shapes: 135 partitions, 65 s):

- **Partitions that repeat.** A transformer's layers are the same graph with
  other weights, so most partitions are one of a dozen shapes, and
  XNNPACK's `preprocess` (17 passes, each re-tracing the partition with fake
  tensors, ~0.2 s a partition) computes the same delegate graph again and
  again. Here a partition's *structure* (its nodes, their arguments and
  metadata with names replaced by first-use ids, its value shapes and
  symbols, the values of its small constants) keys the XNNPACK graph
  preprocess made of it. A partition with a known structure gets that graph
  back with its own debug handles and its own weights, which go through
  XNNPACK's own serializer call (`get_serialized_buffer_index`), so they are
  converted, hashed and stored as XNNPACK stores them. A weight quantized
  per channel or per channel group (what XNNPACK makes of torchao's 8da4w,
  4w and 8w) goes through it with the `QuantParams` XNNPACK's visitors made
  for it, rebuilt: the recorded settings around the partition's own
  weight, scales and zero points (its placeholders where the recorded
  partition's were), and its scales through `get_quant_params`. Scales and
  zero points are keyed as weights are (by value only when small): like
  weights, only those serializer calls read them. A structure is trusted
  only once replaying it on the partition it was recorded from gives
  preprocess's bytes and data exactly, each rebuilt `QuantParams` equal to
  the original field by field. A structure whose graph used anything this
  cannot replay (a weight quantized otherwise, a permuted or channels-last
  weight, a constant made by a pass, data in the payload, external data,
  scales or zero points in tensors that a quantize or dequantize node's
  visitor validates) is never replayed: each of its partitions is
  preprocessed.
- **Re-sorting by copying.** After cutting out each partition, ExecuTorch
  re-sorts the whole program topologically (`legalize_graph`) by copying
  every node into a new graph and recompiling its Python code: quadratic in
  the program's size. Here the nodes are moved into the order that sort
  gives (the same queue discipline) within the graph, each node's users put
  in the order a copy would register them, and the program is recompiled
  once, after the last partition.
- **Retraces that change nothing.** Before partitioning, ExecuTorch
  retraces the whole program three times (`_gen_edge_manager_for_partitioners`,
  5-8 s each on that Llama): with no decompositions, to functionalize it;
  with the edge table minus the ops XNNPACK keeps; and with the whole table,
  after renaming the kept ops XNNPACK takes so that they survive it. The
  third decomposes only kept ops XNNPACK did not take, so when the table
  decomposes none of the program's ops it is a retrace of what the second
  gave, and is skipped. (Skipping the first, on the grounds that the second
  functionalizes as it decomposes, changes the bytes: a static program's
  `reshape(x, [2, 8, -1])` then decomposes to a view of `[2, 8, 32]`.)
  Likewise three of the edge dialect's op-replacing passes, each a
  whole-program retrace (1.3-3 s), are skipped when the program holds
  nothing they replace: `aten.t` (`NormalizeTransposePass`), a view op
  (`ReplaceBrokenOpsWithFunctionalOpsPass`, after the views became copies),
  a symbolic size given for a tensor (`SymToTensorPass`). Each comes right
  after another retrace, and retracing a retraced program gives it back.
  Two more are skipped only when the graph is the one the last retrace
  made, unchanged since: `RemoveMixedTypeOperators` when no call mixes
  dtypes it would promote, and `to_executorch`'s `SpecPropPass` refresh
  (an `ExportPass` right after `LegalizePortableDimOrderPass` retraced).
- **A check of a graph it checked.** The edge dialect's verifier checks
  every operator's tensor dtypes by running the whole graph on fake
  tensors (`_check_tensor_args_matching_op_allowed_dtype`, a few seconds
  on a quantized 125M Llama), and the lowering verifies the same graph
  module five times over. A graph module whose nodes, inputs' values and
  attributes are those it last passed with passes again without the run:
  the check reads nothing else. A check that fails is never remembered.
- **Guards printed for nothing.** Every `ExportedProgram` the lowering
  constructs (each pass, decomposition and partition makes one) prints all
  of torch.export's shape guards into `_guards_code` with sympy; a dynamic
  program's nested `FloorDiv` guards (a window partition) take seconds to
  minutes each time, and deep enough ones overflow the C stack. Only
  `ExportedProgram.module()`'s guard function reads them, which torch
  leaves out for ExecuTorch's callers, and the `.pte` holds none: they are
  left empty (the reference's `_patch_convert_guards_to_code` does the same).

The output is ExecuTorch's own, byte for byte (`tests/it/executorch.rs`
compares the `.pte` with and without). All five reach into ExecuTorch 1.4.1
and torch 2.13 internals, so they apply only to those versions; any other runs
ExecuTorch's lowering as it is.
"""

import collections
import contextlib
import copy
import dataclasses
import operator

from .trace_shortcuts import pinned

SUPPORTED = {"executorch": "1.4.1", "torch": "2.13."}


def supported():
    return pinned(SUPPORTED)


@dataclasses.dataclass
class Counts:
    """What the shortcuts did in one lowering (the summary reports it)."""

    partitions: int = 0
    preprocessed: int = 0  # by XNNPACK's preprocess
    replayed: int = 0  # from the graph of a partition with the same structure
    resorts_in_place: int = 0
    retraces_skipped: int = 0  # retraces that would have changed nothing (a decomposition, passes)
    checks_skipped: int = 0  # dtype checks of a graph module that passed them as it is
    guards_unprinted: int = 0  # programs constructed without printing their shape guards


def guards_unprinted(counts):
    """`_convert_guards_to_code` for a program under lowering: no guards'
    code (see the module's docstring)."""

    def convert(_graph_module):
        counts.guards_unprinted += 1
        return []

    return convert


@contextlib.contextmanager
def shortcuts(enabled=True):
    """Within: ExecuTorch's lowering with the shortcuts (when `enabled` and the
    versions are the ones they were written against). Yields the `Counts`."""
    counts = Counts()
    if not (enabled and supported()):
        yield counts
        return
    import executorch.backends.xnnpack.xnnpack_preprocess as xnnpack_preprocess
    import executorch.exir.backend.backend_api as backend_api
    import executorch.exir.lowered_backend_module as lowered_backend_module
    import executorch.exir.passes.spec_prop_pass as spec_prop_pass
    import executorch.exir.program._program as edge_manager
    import executorch.exir.verification.verifier as verifier
    import torch.export.exported_program as exported_program
    from executorch.backends.xnnpack.operators.node_visitor import NodeVisitor
    from executorch.backends.xnnpack.operators.op_quant_dequant import OpStaticQDQNode
    from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
    from executorch.exir.pass_base import _ExportPassBase
    from executorch.exir.passes.normalize_transpose_pass import NormalizeTransposePass
    from executorch.exir.passes.remove_mixed_type_operators import RemoveMixedTypeOperators
    from executorch.exir.passes.replace_broken_ops_with_function_ops_pass import (
        ReplaceBrokenOpsWithFunctionalOpsPass,
    )
    from executorch.exir.passes.sym_to_tensor_pass import SymToTensorPass
    from torch.export import ExportedProgram

    memo = PreprocessMemo(counts)
    retraces = Retraces(counts)
    patches = [
        (exported_program, "_convert_guards_to_code", guards_unprinted(counts)),
        (
            verifier,
            "_check_tensor_args_matching_op_allowed_dtype",
            unless_passed_as_it_is(verifier._check_tensor_args_matching_op_allowed_dtype, counts),
        ),
        (
            NormalizeTransposePass,
            "call",
            retraces.unless_nothing_to_replace(NormalizeTransposePass.call, holds_transpose),
        ),
        (
            ReplaceBrokenOpsWithFunctionalOpsPass,
            "call",
            retraces.unless_nothing_to_replace(
                ReplaceBrokenOpsWithFunctionalOpsPass.call, holds_view
            ),
        ),
        (
            SymToTensorPass,
            "call",
            retraces.unless_nothing_to_replace(SymToTensorPass.call, holds_size_for_tensor),
        ),
        (_ExportPassBase, "call", retraces.noting(_ExportPassBase.call)),
        (
            RemoveMixedTypeOperators,
            "call",
            retraces.unless_retraced_and_nothing_to_replace(mixes_types),
        ),
        (spec_prop_pass, "ExportPass", retraces.retrace_unless_retraced(spec_prop_pass.ExportPass)),
        (
            edge_manager,
            "_replace_aten_ops_with_transformed_ops",
            retraces.renaming(edge_manager._replace_aten_ops_with_transformed_ops),
        ),
        (
            ExportedProgram,
            "run_decompositions",
            retraces.decomposing(ExportedProgram.run_decompositions),
        ),
        (lowered_backend_module, "legalize_graph", resort_in_place(counts)),
        (
            backend_api,
            "_create_partitions_in_graph_module",
            recompiled_after(backend_api._create_partitions_in_graph_module),
        ),
        (XnnpackBackend, "preprocess", staticmethod(memo.preprocess(XnnpackBackend.preprocess))),
        (
            xnnpack_preprocess,
            "serialize_xnnpack_binary",
            memo.recording_graphs(xnnpack_preprocess.serialize_xnnpack_binary),
        ),
        (
            NodeVisitor,
            "get_serialized_buffer_index",
            memo.recording_constants(NodeVisitor.get_serialized_buffer_index),
        ),
        (NodeVisitor, "get_quant_params", memo.recording_scales(NodeVisitor.get_quant_params)),
        (
            OpStaticQDQNode,
            "check_scales_zeropoints",
            memo.recording_checks(OpStaticQDQNode.check_scales_zeropoints),
        ),
    ]
    with patched(patches):
        yield counts


@contextlib.contextmanager
def patched(patches):
    """Within: each `(owner, name, value)` set; after: each put back as it
    was. An inherited attribute (a pass's `call` is its base class's) is set
    on the owner itself and deleted again rather than restored."""
    originals = [(owner, name, owner.__dict__.get(name, INHERITED)) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, original in originals:
            if original is INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


INHERITED = object()


# --- A check of a graph it checked -----------------------------------------


def unless_passed_as_it_is(check, counts):
    """`check(graph_module)`, skipped when the graph module is the one that
    passed it last, as it was then (`_checked_state`). Only the last is
    kept: the lowering checks one graph module over and over before it
    moves to the next, and each state kept holds its graph alive."""
    last = None  # (the graph module that passed, its state then)

    def check_unless_passed(graph_module):
        nonlocal last
        state = _checked_state(graph_module)
        if last is not None and last[0] is graph_module and last[1] == state:
            counts.checks_skipped += 1
            return
        last = None
        check(graph_module)
        last = (graph_module, state)

    return check_unless_passed


def _checked_state(graph_module):
    """What a graph's dtype check reads: its nodes (`_graph_state`), the
    values its placeholders carry (by identity: fake tensors are not
    compared by value) and the attributes its `get_attr` nodes fetch."""
    values = [
        node.meta.get("val") if node.op == "placeholder" else _attribute(graph_module, node.target)
        for node in graph_module.graph.nodes
        if node.op in ("placeholder", "get_attr")
    ]
    return _graph_state(graph_module), [Identity(v) for v in values]


def _attribute(module, target):
    for name in target.split("."):
        module = getattr(module, name, None)
    return module


class Identity:
    """`value`, equal to another only when it is the same object (a tensor's
    `==` compares elements)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, Identity) and self.value is other.value


# --- Retraces that change nothing ------------------------------------------


class Retraces:
    """Skips retraces that change nothing: the decomposition after
    `_replace_aten_ops_with_transformed_ops` renamed a program's kept ops,
    and op-replacing passes with nothing to replace."""

    def __init__(self, counts):
        self.counts = counts
        self.renamed = None
        self.retraced = None  # (graph module, its nodes) the last retrace made

    def renaming(self, replace):
        def replace_noted(name, program, partitioner):
            preserved = replace(name, program, partitioner)
            self.renamed = program
            return preserved

        return replace_noted

    def decomposing(self, run_decompositions):
        def run_unless_unchanged(program, decomp_table=None, *args, **kwargs):
            if self.renamed is program:
                self.renamed = None
                if (
                    decomp_table is not None
                    and not args
                    and not kwargs
                    and decomposes_none(program, decomp_table)
                ):
                    self.counts.retraces_skipped += 1
                    return program
            return run_decompositions(program, decomp_table, *args, **kwargs)

        return run_unless_unchanged

    def unless_nothing_to_replace(self, call, replaces):
        """An op-replacing pass's `call`, skipped (its graph module given
        back unchanged) when the program has only calls, none of which
        `replaces` is true of."""

        def call_unless_nothing(pass_, graph_module):
            from torch.fx.passes.infra.pass_base import PassResult

            calls = _only_calls(graph_module)
            if calls is not None and not any(replaces(node) for node in calls):
                self.counts.retraces_skipped += 1
                return PassResult(graph_module, False)
            return call(pass_, graph_module)

        return call_unless_nothing

    def noting(self, call):
        """`_ExportPassBase.call`, the retrace every `ExportPass` runs,
        noting the graph module it made and its nodes as made."""

        def call_noted(pass_, graph_module):
            result = call(pass_, graph_module)
            made = result.graph_module
            self.retraced = (made, _graph_state(made))
            return result

        return call_noted

    def as_retraced(self, graph_module):
        """Whether `graph_module` is the one the last retrace made, its nodes
        unchanged since (no pass in between rewrote it in place)."""
        if self.retraced is None or self.retraced[0] is not graph_module:
            return False
        return _graph_state(graph_module) == self.retraced[1]

    def unless_retraced_and_nothing_to_replace(self, replaces):
        """An op-replacing `ExportPass`'s `call` (the base retrace), skipped
        when its graph module is the last retrace's unchanged and no call in
        it is one `replaces` is true of: the retrace would give it back."""

        def call_unless_nothing(pass_, graph_module):
            from executorch.exir.pass_base import _ExportPassBase
            from torch.fx.passes.infra.pass_base import PassResult

            calls = _only_calls(graph_module)
            if (
                calls is not None
                and self.as_retraced(graph_module)
                and not any(replaces(node) for node in calls)
            ):
                self.counts.retraces_skipped += 1
                return PassResult(graph_module, False)
            return _ExportPassBase.call(pass_, graph_module)

        return call_unless_nothing

    def retrace_unless_retraced(self, export_pass):
        """`ExportPass` as `SpecPropPass` calls it to refresh the metadata
        before reading it: a retrace, skipped when the graph module is the
        one the last retrace made, unchanged (`LegalizePortableDimOrderPass`
        retraces right before it in `to_executorch`)."""
        retraces = self

        class RetraceUnlessRetraced(export_pass):
            def __call__(self, graph_module):
                from torch.fx.passes.infra.pass_base import PassResult

                if retraces.as_retraced(graph_module) and _only_calls(graph_module) is not None:
                    retraces.counts.retraces_skipped += 1
                    return PassResult(graph_module, True)
                return super().__call__(graph_module)

        return RetraceUnlessRetraced


def _graph_state(graph_module):
    """The graph's nodes as they are (each one's op, target and arguments),
    to tell whether a pass rewrote it in place since."""
    return [(n, n.op, n.target, n.args, n.kwargs) for n in graph_module.graph.nodes]


def _only_calls(graph_module):
    """The graph's call nodes, or None when it has anything a retrace would
    walk into: a subgraph (control flow), a module or method call."""
    import torch

    if any(isinstance(m, torch.fx.GraphModule) for m in graph_module.children()):
        return None
    calls = []
    for node in graph_module.graph.nodes:
        if node.op in ("call_module", "call_method"):
            return None
        if node.op == "call_function":
            calls.append(node)
    return calls


def holds_transpose(node):
    import torch

    return node.target is torch.ops.aten.t.default


def holds_view(node):
    """A view op, or a call the pass might take for one (anything but an
    ATen op and arithmetic on sizes)."""
    import torch

    if isinstance(node.target, torch._ops.OpOverload):
        return node.target.is_view
    return not _size_arithmetic(node.target)


# The ops `RemoveMixedTypeOperators` promotes the arguments of, by whether
# their promotion turns integers into floats (its allow list, ExecuTorch 1.4.1).
PROMOTED_OPS = {
    ("add", "Tensor"): False,
    ("mul", "Tensor"): False,
    ("sub", "Tensor"): False,
    ("div", "Tensor"): True,
    ("div", "Tensor_mode"): None,  # to float unless a rounding mode is given
    ("minimum", "default"): False,
}


def mixes_types(node):
    """A call `RemoveMixedTypeOperators` might give a `_to_copy`: one of its
    ops over more than one argument, unless every argument is a tensor
    (traced) of one dtype that its promotion keeps (a float one where
    integers would become floats). Anything else (a scalar, a constant tensor,
    a symbolic size, two dtypes) counts as mixed."""
    import torch

    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
        return False
    key = (target._schema.name.split("::")[-1], target._overloadname)
    if key not in PROMOTED_OPS or len(node.args) <= 1:
        return False
    to_float = PROMOTED_OPS[key]
    if to_float is None:
        to_float = node.kwargs.get("rounding_mode") is None
    dtypes = set()
    for argument in node.args:
        value = argument.meta.get("val") if isinstance(argument, torch.fx.Node) else None
        if not isinstance(value, torch.Tensor):
            return True
        dtypes.add(value.dtype)
    dtype = dtypes.pop()
    return bool(dtypes) or (to_float and not dtype.is_floating_point)


def holds_size_for_tensor(node):
    """A symbolic size given where the op's schema takes a tensor (as
    `SymToTensorPass` maps the arguments), or a call it might change
    (anything but an ATen op and arithmetic on sizes)."""
    import torch

    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return not _size_arithmetic(target)
    for i, argument in enumerate(target._schema.arguments):
        if argument.name in node.kwargs:
            value = node.kwargs[argument.name]
        elif not argument.kwarg_only and i < len(node.args):
            value = node.args[i]
        else:
            continue
        if (
            isinstance(argument.type, torch.TensorType)
            and isinstance(value, torch.fx.Node)
            and isinstance(value.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool))
        ):
            return True
    return False


def _size_arithmetic(target):
    """Python's operators and math on sizes, and torch's `sym_*` functions."""
    module = getattr(target, "__module__", None)
    return module in ("_operator", "math") or (
        module == "torch" and getattr(target, "__name__", "").startswith("sym_")
    )


def decomposes_none(program, table):
    """Whether retracing `program` with `table` has nothing to do but retrace:
    no control flow, no module or method call, no call but arithmetic on
    sizes and ATen ops the table does not decompose (the program is the
    output of a retrace: functional). `aten.sym_size.int` and its kin are
    in the table (they are composite) but no retrace decomposes them: they
    are how a trace reads a symbolic size, made again by each."""
    import torch

    calls = _only_calls(program.graph_module)
    if calls is None:
        return False
    aten = torch.ops.aten
    sizes = {
        aten.sym_size.int,
        aten.sym_stride.int,
        aten.sym_numel.default,
        aten.sym_storage_offset.default,
    }
    for node in calls:
        target = node.target
        if isinstance(target, torch._ops.OpOverload):
            if target not in sizes and target in table:
                return False
        elif not _size_arithmetic(target):
            return False
    return True


# --- Re-sorting in place ---------------------------------------------------


def _prioritized_ops():
    """`legalize_graph`'s PRIORITIZED_OPS (torch 2.13): nodes it moves to the
    front of its queue."""
    import torch

    aten = torch.ops.aten
    return {
        operator.add,
        operator.mul,
        operator.sub,
        operator.floordiv,
        operator.truediv,
        operator.mod,
        operator.le,
        operator.lt,
        operator.ge,
        operator.gt,
        operator.eq,
        operator.ne,
        aten.sym_constrain_range.default,
        aten.sym_constrain_range_for_size.default,
        aten._assert_async.msg,
        aten.scalar_tensor.default,
        aten._assert_scalar.default,
    }


def legalized_order(graph, prioritized):
    """The order `legalize_graph` copies nodes in (Kahn's algorithm, its queue
    discipline), without copying them."""
    indegree = dict.fromkeys(graph.nodes, 0)
    for node in graph.nodes:
        for user in node.users:
            indegree[user] += 1
    queue = collections.deque(node for node in graph.nodes if indegree[node] == 0)
    order = []
    while queue:
        node = queue.popleft()
        order.append(node)
        for user in node.users:
            indegree[user] -= 1
            if indegree[user] == 0:
                if user.op == "call_function" and user.target in prioritized:
                    queue.appendleft(user)
                else:
                    queue.append(user)
    return order


def resort_in_place(counts):
    """`legalize_graph` without its copy: the nodes moved into the order it
    would copy them in, and each node's users put in the order the copies
    would register them (the graph's new order), which the next sort walks.
    The Python code is recompiled once, after the last partition."""
    prioritized = _prioritized_ops()

    def resort(gm):
        graph = gm.graph
        order = legalized_order(graph, prioritized)
        if len(order) < len(graph.nodes):
            raise RuntimeError("the program has a cycle after cutting out a partition")
        previous = graph._root
        for node in order:
            if previous.next is not node:
                previous.append(node)
            previous = node
        position = {node: i for i, node in enumerate(order)}
        for node in order:
            node.users = dict(sorted(node.users.items(), key=lambda item: position[item[0]]))
        counts.resorts_in_place += 1
        return gm

    return resort


def recompiled_after(create_partitions):
    def create(tagged_graph_module, *args, **kwargs):
        try:
            return create_partitions(tagged_graph_module, *args, **kwargs)
        finally:
            # The re-sorts in place did not recompile the program's code.
            tagged_graph_module.recompile()

    return create


# --- Partitions that repeat -------------------------------------------------


class NotReplayable(Exception):
    pass


@dataclasses.dataclass
class Recorded:
    """What XNNPACK's preprocess made of a partition, as far as a partition
    of the same structure needs it: its graph (before serialization), the
    debug handles of the partition's nodes in order, and each constant it
    serialized, in the order it did (`RecordedConstant`)."""

    graph: object
    handles: list
    constants: list


@dataclasses.dataclass
class RecordedConstant:
    """One constant of a recorded graph and how a replay makes it again: a
    weight (`kind` "weight": the placeholder at `position` serialized by
    `get_serialized_buffer_index` with `flags`), or a quantized weight's
    scales (`kind` "scales": `get_quant_params`, whose answer other than
    its buffer index was `params`). `quant` rebuilds the weight's
    `QuantParams`, None for a float weight."""

    kind: str
    index: int  # in the graph's constant data
    position: int  # of the weight's placeholder among the partition's nodes
    flags: dict
    quant: object  # RecordedQuant, or None
    params: object = None  # the scales' XNNPACK quantization parameters


@dataclasses.dataclass
class RecordedQuant:
    """A `QuantParams` in terms of a partition: its constructor's settings
    (all but the tensors), the position of the placeholder it quantizes, and
    for its scales and zero points, the position of the placeholder holding
    them and the shape XNNPACK viewed them in."""

    settings: dict
    q_input: int
    scale: tuple  # (position, shape)
    zp: tuple

    def rebuilt(self, partition):
        """The `QuantParams` XNNPACK's visitors make for the same weight of
        `partition`: its own placeholder and tensors."""
        from executorch.backends.xnnpack.operators.quant_params import QuantParams

        def viewed(position, shape):
            return partition.tensor(position).reshape(shape)

        return QuantParams(
            q_input=partition.nodes[self.q_input],
            scale=viewed(*self.scale),
            zp=viewed(*self.zp),
            **self.settings,
        )


@dataclasses.dataclass
class Partition:
    """A partition as it came to preprocess (preprocess's in-place passes
    change its graph): its nodes, its placeholders and its nodes' debug
    handles, in order."""

    program: object
    nodes: list
    placeholders: list
    handles: list

    @staticmethod
    def of(program):
        nodes = list(program.graph.nodes)
        return Partition(
            program=program,
            nodes=nodes,
            placeholders=[node for node in nodes if node.op == "placeholder"],
            handles=[node.meta.get("debug_handle") for node in nodes],
        )

    def tensor(self, position):
        from executorch.backends.xnnpack.utils.utils import get_param_tensor

        return get_param_tensor(self.program, self.nodes[position])

    def holding(self, tensor):
        """The position of the one placeholder whose tensor is a view of
        `tensor`'s memory, or None when there is not exactly one."""
        from executorch.backends.xnnpack.utils.utils import is_param_node

        storage = tensor.untyped_storage()
        found = [
            i
            for i, node in enumerate(self.nodes)
            if node.op == "placeholder"
            and is_param_node(self.program, node)
            and self.tensor(i).untyped_storage().data_ptr() == storage.data_ptr()
            and self.tensor(i).untyped_storage().nbytes() == storage.nbytes()
        ]
        return found[0] if len(found) == 1 else None


@dataclasses.dataclass
class Recording:
    """What the serializer calls of one preprocess saw: each graph it
    serialized (a copy, the constant bytes' length, whether it had more
    arguments), each constant in the order they were stored (`Serialized`)."""

    graphs: list = dataclasses.field(default_factory=list)
    constants: list = dataclasses.field(default_factory=list)
    # Whether a quantize or dequantize node's visitor validated scales or
    # zero points held in tensors (a replay does not validate them).
    checked_tensors: bool = False


@dataclasses.dataclass
class Serialized:
    """One constant a serializer call stored: its kind ("weight" or
    "scales"), buffer index, the name of the weight's placeholder, the call's other
    arguments, the fields its `QuantParams` had then (a weight's
    serialization may change them after), the scales' XNNPACK parameters,
    and whether a replay can reproduce it (as far as the call shows)."""

    kind: str
    index: int
    name: str
    flags: dict
    quant: dict  # or None
    params: object
    replayable: bool


class PreprocessMemo:
    def __init__(self, counts):
        self.counts = counts
        self.known = {}  # structure -> Recorded, or None: preprocess each
        self.recording = None  # the `Recording` of the partition being preprocessed

    def recording_graphs(self, serialize):
        def serialize_recorded(xnnpack_graph, constant_data_bytes, *args, **kwargs):
            if self.recording is not None:
                self.recording.graphs.append(
                    (copy.deepcopy(xnnpack_graph), len(constant_data_bytes), bool(args or kwargs))
                )
            return serialize(xnnpack_graph, constant_data_bytes, *args, **kwargs)

        return serialize_recorded

    def recording_constants(self, serialized_buffer_index):
        def index_recorded(
            visitor,
            tensor,
            xnn_graph,
            vals_to_ids,
            convert_to_nhwc,
            swap_in_out_for_weights,
            quant_params,
            force_fp32=False,
            groups=1,
        ):
            quant = None if quant_params is None else dict(vars(quant_params))
            index = serialized_buffer_index(
                visitor,
                tensor,
                xnn_graph,
                vals_to_ids,
                convert_to_nhwc,
                swap_in_out_for_weights,
                quant_params,
                force_fp32,
                groups,
            )
            if self.recording is not None and index:
                # A quantized weight's data is its `QuantParams`'s placeholder's;
                # the node it is serialized for (a pass's dequantization) only
                # names it, and could place it in external data.
                custom = tensor.meta.get("custom") or {}
                replayable = (
                    (quant is None or replayable_quant(quant))
                    and custom.get("delegate_constant_tag") is None
                    and not (convert_to_nhwc or swap_in_out_for_weights)
                )
                self.recording.constants.append(
                    Serialized(
                        kind="weight",
                        index=index,
                        name=tensor.name if quant is None else quant["q_input"].name,
                        flags=dict(force_fp32=force_fp32, groups=groups),
                        quant=quant,
                        params=None,
                        replayable=replayable,
                    )
                )
            return index

        return index_recorded

    def recording_scales(self, quant_params_of):
        """`NodeVisitor.get_quant_params`, noting the scales it stores (a
        per-channel weight's, in the graph's constant data)."""

        def quant_params_recorded(visitor, quant_params, xnn_graph, external_tag=None):
            quant = dict(vars(quant_params))
            stored = len(xnn_graph.constant_data)
            params = quant_params_of(visitor, quant_params, xnn_graph, external_tag)
            if self.recording is not None and len(xnn_graph.constant_data) != stored:
                self.recording.constants.append(
                    Serialized(
                        kind="scales",
                        index=stored,
                        name=quant_params.q_input.name,
                        flags={},
                        quant=quant,
                        params=copy.deepcopy(params),
                        replayable=(
                            replayable_quant(quant)
                            and external_tag is None
                            and len(xnn_graph.constant_data) == stored + 1
                            and getattr(params, "scale_buffer_idx", None) == stored
                        ),
                    )
                )
            return params

        return quant_params_recorded

    def recording_checks(self, check_scales_zeropoints):
        """`OpStaticQDQNode.check_scales_zeropoints`, noting whether it read
        scales or zero points from tensors: the values of a large one are
        not in the structure, so a replay could take what preprocess refuses."""
        import torch

        def check_recorded(visitor, node):
            if self.recording is not None and any(
                isinstance(argument, torch.fx.Node) for argument in node.args[1:3]
            ):
                self.recording.checked_tensors = True
            return check_scales_zeropoints(visitor, node)

        return check_recorded

    def preprocess(self, preprocess):
        def memoized(edge_program, compile_specs):
            self.counts.partitions += 1
            try:
                key = structure(edge_program, compile_specs)
            except NotReplayable:
                key = None
            partition = Partition.of(edge_program)
            recorded = self.known.get(key) if key is not None else None
            if recorded is not None:
                # A replay that finds a weight unlike the recorded one (its
                # size, its quantization) leaves the partition to preprocess.
                with contextlib.suppress(NotReplayable):
                    replayed = replay(recorded, partition)
                    self.counts.replayed += 1
                    return replayed
            self.recording = Recording()
            try:
                result = preprocess(edge_program, compile_specs)
            finally:
                recording, self.recording = self.recording, None
            self.counts.preprocessed += 1
            if key is not None and key not in self.known:
                self.known[key] = record(recording, partition, result)
            return result

        return memoized


def replayable_quant(quant):
    """Whether a weight's `QuantParams` (its fields) is one a replay
    rebuilds: per channel (or per channel group), static, its scales and
    zero points tensors."""
    import torch

    return (
        quant["per_channel"]
        and not quant["is_dynamic"]
        and isinstance(quant["scale"], torch.Tensor)
        and isinstance(quant["zp"], torch.Tensor)
    )


def recorded_quant(quant, partition):
    """`quant` (a `QuantParams`'s fields) as a `RecordedQuant` of
    `partition`, or None when its weight, scales or zero points are not the
    partition's own placeholders, or rebuilding it from them does not give
    it back field by field."""
    import inspect

    from executorch.backends.xnnpack.operators.quant_params import QuantParams

    names = [node.name for node in partition.nodes]
    q_input = quant["q_input"]
    if q_input.name not in names or partition.nodes[names.index(q_input.name)].op != "placeholder":
        return None
    scale, zp = partition.holding(quant["scale"]), partition.holding(quant["zp"])
    if scale is None or zp is None:
        return None
    tensors = ("q_input", "scale", "zp")
    arguments = [name for name in inspect.signature(QuantParams).parameters if name not in tensors]
    if any(name not in quant for name in arguments):
        return None
    recorded = RecordedQuant(
        settings={name: quant[name] for name in arguments},
        q_input=names.index(q_input.name),
        scale=(scale, tuple(quant["scale"].shape)),
        zp=(zp, tuple(quant["zp"].shape)),
    )
    try:
        rebuilt = vars(recorded.rebuilt(partition))
    except Exception:
        return None
    if set(rebuilt) != set(quant) or not all(
        same_field(quant[name], rebuilt[name]) for name in quant
    ):
        return None
    return recorded


def same_field(original, rebuilt):
    """Whether a rebuilt `QuantParams` field is the original one: a tensor
    the same view of the same memory, a node the same-named one, any other
    value equal."""
    import torch

    if isinstance(original, torch.Tensor) or isinstance(rebuilt, torch.Tensor):
        return (
            isinstance(original, torch.Tensor)
            and isinstance(rebuilt, torch.Tensor)
            and original.dtype == rebuilt.dtype
            and original.shape == rebuilt.shape
            and original.stride() == rebuilt.stride()
            and original.storage_offset() == rebuilt.storage_offset()
            and original.untyped_storage().data_ptr() == rebuilt.untyped_storage().data_ptr()
        )
    if isinstance(original, torch.fx.Node) or isinstance(rebuilt, torch.fx.Node):
        return (
            isinstance(original, torch.fx.Node)
            and isinstance(rebuilt, torch.fx.Node)
            and original.name == rebuilt.name
        )
    return type(original) is type(rebuilt) and original == rebuilt


def record(recording, partition, result):
    """The partition's `Recorded`, or None when any of it cannot be replayed."""
    from executorch.backends.xnnpack.xnnpack_preprocess import DEFAULT_DEBUG_HANDLE

    graphs, constants = recording.graphs, recording.constants
    if (
        len(graphs) != 1
        or recording.checked_tensors
        or result.debug_handle_map
        or getattr(result, "_delegate_info_meta", None) is not None
    ):
        return None
    graph, data_bytes, extra_arguments = graphs[0]
    output = result.data_store_output
    if data_bytes or extra_arguments or output is None or output.external_data:
        return None
    names = [node.name for node in partition.nodes]
    replayed = []
    for constant in constants:
        if not constant.replayable or constant.name not in names:
            return None
        position = names.index(constant.name)
        if partition.nodes[position].op != "placeholder":
            return None
        quant = None
        if constant.quant is not None:
            quant = recorded_quant(constant.quant, partition)
            if quant is None:
                return None
        replayed.append(
            RecordedConstant(
                kind=constant.kind,
                index=constant.index,
                position=position,
                flags=constant.flags,
                quant=quant,
                params=constant.params,
            )
        )
    # Every datum the payload names came from a recorded constant.
    if set(output.pte_data) != {graph.constant_data[c.index].named_key for c in replayed}:
        return None
    known = {handle for handle in partition.handles if handle is not None}
    if any(
        xnode.debug_handle not in known and xnode.debug_handle != DEFAULT_DEBUG_HANDLE
        for xnode in graph.xnodes
    ):
        return None
    recorded = Recorded(graph=graph, handles=partition.handles, constants=replayed)
    # The proof that replaying loses nothing: replayed on the partition it
    # was recorded from, it gives preprocess's bytes and data exactly (a
    # pass that rewrote a weight or scales under its name, or put anything
    # else in the graph, fails here).
    try:
        again = replay(recorded, partition)
    except NotReplayable:
        return None
    if (
        again.processed_bytes != result.processed_bytes
        or again.data_store_output != result.data_store_output
    ):
        return None
    return recorded


def replay(recorded, partition):
    """What XNNPACK's preprocess makes of `partition`, whose structure is the
    recorded one's: the recorded graph with this partition's debug handles,
    and its weights and their scales serialized by XNNPACK's own serializer
    calls."""
    from executorch.backends.xnnpack.operators.node_visitor import NodeVisitor
    from executorch.backends.xnnpack.serialization.xnnpack_graph_schema import (
        ConstantDataOffset,
        XNNGraph,
    )
    from executorch.backends.xnnpack.xnnpack_preprocess import serialize_xnnpack_binary
    from executorch.exir._serialize._named_data_store import NamedDataStore
    from executorch.exir.backend.backend_details import PreprocessResult

    # The structure keys which nodes share a handle, so this maps one to one.
    handles = {old: new for old, new in zip(recorded.handles, partition.handles) if old is not None}
    graph = copy.deepcopy(recorded.graph)
    for xnode in graph.xnodes:
        xnode.debug_handle = handles.get(xnode.debug_handle, xnode.debug_handle)

    store = NamedDataStore()
    visitor = NodeVisitor(partition.program, {}, store)
    scratch = XNNGraph(
        version="0",
        xnodes=[],
        xvalues=[],
        num_externs=0,
        input_ids=[],
        output_ids=[],
        constant_data=[ConstantDataOffset(0, 0)],
    )
    # In the recorded order: the store lists its data in the order it got them.
    for constant in recorded.constants:
        quant = None if constant.quant is None else constant.quant.rebuilt(partition)
        if constant.kind == "weight":
            weight = partition.nodes[constant.position]
            visitor.get_serialized_buffer_index(
                weight, scratch, {}, False, False, quant, **constant.flags
            )
        else:
            params = visitor.get_quant_params(quant, scratch, None)
            if dataclasses.replace(params, scale_buffer_idx=constant.index) != constant.params:
                raise NotReplayable("a weight's quantization differs from the recorded one's")
        serialized = scratch.constant_data[-1]
        if serialized.size != graph.constant_data[constant.index].size:
            raise NotReplayable(
                "a replayed XNNPACK partition's weight differs in size from the recorded one's"
            )
        graph.constant_data[constant.index].named_key = serialized.named_key
    return PreprocessResult(
        processed_bytes=serialize_xnnpack_binary(graph, bytearray()),
        debug_handle_map={},
        data_store_output=store.get_named_data_store_output(),
    )


# --- A partition's structure ------------------------------------------------

SMALL_CONSTANT = 64  # elements: a constant this small keys by value (a visitor may read it)
# The node metadata XNNPACK 1.4.1's preprocess reads: its passes and
# visitors read these of any node (`custom` holds `delegate_constant_tag`); torch's `get_source_partitions`
# (ConvertToLinearPass) reads a call's last `source_fn_stack` entry and,
# without one, its innermost `nn_module_stack` entry, grouping calls by the
# name there. The rest (stack traces, provenance, outer modules, the
# partitioner's notes) varies from layer to layer and changes nothing it makes.
READ_META = ("val", "custom", "quantization_annotation")


def structure(program, compile_specs):
    """A key equal for two partitions exactly when XNNPACK's preprocess
    would make the same graph of them up to debug handles and weights."""
    import torch

    names = collections.defaultdict(dict)  # per kind of name: name -> first-use id

    def canonical(text, kind="name"):
        return (kind, names[kind].setdefault(text, len(names[kind])))

    index = {}  # node -> its position

    def value(v, in_meta):
        if isinstance(v, torch.fx.Node):
            return ("node", index[v])
        if v is None or isinstance(v, (bool, int)):
            return v
        if isinstance(v, float):
            return ("float", repr(v))
        if isinstance(v, str):
            return canonical(v) if in_meta else ("str", v)
        if isinstance(v, (list, tuple)):
            return (type(v).__name__, tuple(value(x, in_meta) for x in v))
        if isinstance(v, dict):
            return ("dict", tuple((value(k, in_meta), value(x, in_meta)) for k, x in v.items()))
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return ("sym", str(v))
        if isinstance(v, torch.Tensor):
            return (
                "tensor",
                str(v.dtype),
                tuple(str(s) for s in v.shape),
                tuple(str(s) for s in v.stride()),
                v.device.type,
            )
        if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            return ("torch", str(v))
        if isinstance(v, type) or callable(v):
            return ("callable", getattr(v, "__module__", ""), getattr(v, "__qualname__", repr(v)))
        if dataclasses.is_dataclass(v):
            return (type(v).__qualname__, value(dataclasses.asdict(v), in_meta))
        raise NotReplayable(type(v).__qualname__)

    signature = program.graph_signature
    inputs = {spec.arg.name: spec for spec in signature.input_specs if hasattr(spec.arg, "name")}
    rows = [
        ("specs", tuple(repr(spec) for spec in compile_specs)),
        ("ranges", tuple(sorted((str(k), str(v)) for k, v in program.range_constraints.items()))),
        ("outputs", tuple(spec.kind.name for spec in signature.output_specs)),
    ]
    for i, node in enumerate(program.graph.nodes):
        index[node] = i
        meta = tuple((key, value(node.meta[key], True)) for key in READ_META if key in node.meta)
        if node.op == "call_function":
            sources, modules = node.meta.get("source_fn_stack"), node.meta.get("nn_module_stack")
            if sources:
                name, source = sources[-1]
                meta += (("source", canonical(name, "source"), value(source, False)),)
            elif modules:
                name, module = list(modules.values())[-1]
                meta += (("module", canonical(name, "module"), value(module, False)),)
        # Which nodes share a debug handle (not the handles: a replay maps them).
        handle = node.meta.get("debug_handle")
        meta += (("debug_handle", None if handle is None else canonical(handle, "debug_handle")),)
        row = [
            node.op,
            None
            if node.op == "placeholder"
            else canonical(node.target)
            if node.op == "get_attr"
            else ("target", str(node.target)),
            value(node.args, False),
            value(node.kwargs, False),
            meta,
        ]
        spec = inputs.get(node.name)
        if spec is not None:
            row.append((spec.kind.name, spec.persistent))
            tensor = program.state_dict.get(spec.target, program.constants.get(spec.target))
            if isinstance(tensor, torch.Tensor):
                row.append(value(tensor, False))
                if tensor.numel() <= SMALL_CONSTANT:
                    row.append(("values", tensor.detach().reshape(-1).tolist()))
        rows.append(tuple(row))
    return repr(rows)
