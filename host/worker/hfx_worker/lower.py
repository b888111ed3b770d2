"""The `lower` request: hfx's program (after its FX stages, as a `.pt2`)
through ExecuTorch's edge dialect with a delegate's partitioner, then
`to_executorch`, written as a `.pte`.

This is where hfx hands over to ExecuTorch, and only for a delegate: the
delegate's payload (XNNPACK's partitioner, its ~10 passes and its graph
serializer) is ExecuTorch's own code, which a native emitter would have to
track release by release. It runs with `lowering_shortcuts`: the same bytes,
without preprocessing a partition whose structure it has seen. Everything before it (trace, patches, FX fixes)
is hfx's. The edge configuration is the reference's
(`ExecutorchExporter._get_edge_compile_config`): core ATen, with the same
non-core ops kept whole.
"""

import builtins
import contextlib
import ctypes
import errno
import fcntl
import hashlib
import mmap
import os
import re
import time
import types

from . import resident
from .checkpoint import save_program, side_weights_supported
from .edge_rewrites import (
    identity_copies_dropped,
    matmul_scales_on_the_smaller_operand,
    mutated_inputs_updated_in_place,
)
from .lowering_shortcuts import patched, shortcuts
from .messages import EdgeProgram, EdgeProgramReply, Lower, LowerReply
from .pytree import load_exported_mapped
from .trace_shortcuts import pinned

# The non-core ATen ops the reference lets through the edge verifier for
# XNNPACK and CUDA (transformers 5.24, exporter_executorch.py): they have
# portable kernels, or a patch removes them first.
CORE_ATEN_EXCEPTIONS = (
    "_fft_c2c.default",
    "_is_all_true.default",
    "bincount.default",
    "bucketize.Tensor",
    "cummax.default",
    "cummin.default",
    "polar.default",
    "rand_like.default",
    "randint.low",
    "randn_like.default",
    "searchsorted.Tensor",
    "unique_consecutive.default",
)


@contextlib.contextmanager
def list_returns_verified_whole():
    """ExecuTorch 1.4.1's edge verifier (`EdgeOpArgValidator.call_function`)
    with one fix: for an op whose one return is a tensor list (`split`,
    `unbind`, ...) it takes the node's value, a list, for the sequence of
    returns, so the "list" it checks is the first tensor, and `len` of that
    is its first size. When that size is symbolic (a batch), the check
    specializes it to the traced value for the whole program, and the
    `.pte` then refuses any other batch ("Attempted to resize a static
    tensor"): GPT-2's and Phi-3's fused q/k/v projections are split. Here
    such a value is handed to it as the one return it is, for the check
    only. Other versions run as they are."""
    if not pinned({"executorch": "1.4.1"}):
        yield
        return
    import torch
    from executorch.exir.verification.arg_validator import EdgeOpArgValidator

    check = EdgeOpArgValidator.__dict__["call_function"]
    tensors = torch.ListType.ofTensors()

    def call_function(validator, target, args, kwargs):
        node = validator.node
        value = node.meta.get("val")
        returns = getattr(getattr(target, "_schema", None), "returns", ())
        if len(returns) == 1 and returns[0].type == tensors and isinstance(value, (list, tuple)):
            node.meta["val"] = (value,)
            try:
                return check(validator, target, args, kwargs)
            finally:
                node.meta["val"] = value
        return check(validator, target, args, kwargs)

    with patched([(EdgeOpArgValidator, "call_function", call_function)]):
        yield


@contextlib.contextmanager
def inputs_updated_in_place_planned():
    """ExecuTorch 1.4.1's `to_executorch` with two fixes for a program that
    updates a mutated user input in place (a static cache's `index_put_`:
    `edge_rewrites.mutated_inputs_updated_in_place`); yields whether they
    apply (if not, the program keeps its copies). Programs whose mutations
    are all copied are ordered and planned as before.
    - The write-back (`insert_write_back_for_buffers_pass`): its
      `_insert_copy` puts the outputs it writes back with a `copy_` first and
      the others after them, then pairs the signature's mutations with the
      outputs by position, so an input updated in place followed by one
      that is copied swap their values. Here each output keeps its place.
    - Memory planning: the in-place op's value takes its input's spec
      (`_alias_inplace_result_specs`), but the lifetimes are computed without
      the in-place node, so a planned input's memory is free after its
      update and later values overwrite the cache it returns. Here an input
      updated in place lives to the end of the program, as a mutable buffer
      does."""
    if not pinned({"executorch": "1.4.1"}):
        yield False
        return
    import importlib

    import torch
    from executorch.exir import memory_planning
    from torch.utils import _pytree as pytree

    # The package exports the pass function under its module's name.
    write_back = importlib.import_module(
        "executorch.exir.passes.insert_write_back_for_buffers_pass"
    )

    def insert_copy(module, mutated_outputs, input_name_to_node):
        graph = module.graph
        output = graph.output_node()
        values = pytree.tree_flatten(output.args)[0]
        kept = []
        with graph.inserting_before(output):
            for value, mutated in zip(values, mutated_outputs, strict=True):
                if mutated is not None:
                    value = graph.call_function(
                        torch.ops.aten.copy_.default, (input_name_to_node[mutated], value)
                    )
                kept.append(value)
            output.replace_all_uses_with(graph.output(tuple(kept)))
        graph.erase_node(output)
        return kept

    lifetimes = memory_planning.update_all_tensors_lifetime

    def update_all_tensors_lifetime(module, signature=None):
        specs = lifetimes(module, signature)
        last = len(module.graph.nodes) - 1
        for node in module.graph.nodes:
            if node.op == "placeholder" and any(
                memory_planning._is_inplace_node(user) and user.args[0] is node
                for user in node.users
            ):
                spec = node.meta["spec"]
                spec.lifetime = [spec.lifetime[0], last]
        return specs

    with patched(
        [
            (write_back, "_insert_copy", insert_copy),
            (memory_planning, "update_all_tensors_lifetime", update_all_tensors_lifetime),
        ]
    ):
        yield True


@contextlib.contextmanager
def output_clones_kept():
    """XNNPACK's delegate preprocessing (`XNNPACKRemoveCloneOpsTransform`)
    with clones that feed the partition's outputs kept. The pass folds a clone
    that keeps its input's dim order onto that input; when both are outputs
    of the partition (a value returned with its copy, `return y, y.clone()`),
    the fold leaves the input twice among the outputs and the delegate is
    refused ("Output node ... is already in the inputs"). Kept, the clone is
    serialized as XNNPACK's copy: XNNPACK's partitioner takes only clones that
    keep the dim order. Other clones fold as before."""
    from executorch.backends.xnnpack._passes import XNNPACKRemoveCloneOpsTransform

    fold = XNNPACKRemoveCloneOpsTransform._is_non_identity_clone

    def is_non_identity_clone(self, node):
        return any(user.op == "output" for user in node.users) or fold(self, node)

    with patched(
        [(XNNPACKRemoveCloneOpsTransform, "_is_non_identity_clone", is_non_identity_clone)]
    ):
        yield


# The Python functions on sizes ExecuTorch's edge verifier admits in the
# lowering: those `to_executorch` swaps for its own sym ops that no FX fix
# swaps first (plugins/executorch/fix-python-sym-op swaps `sym_max`,
# `sym_min` and `math.trunc`, as the reference's `_fix_python_sym_op`).
VERIFIED_SYM_FUNCTIONS = ("sym_float", "sym_int", "sym_ite", "sym_not")


@contextlib.contextmanager
def python_sym_functions_verified():
    """ExecuTorch's edge verifier admitting `torch.sym_not`, `torch.sym_ite`,
    `torch.sym_int` and `torch.sym_float`. torch.export records them as the
    Python functions themselves; the verifier, run by
    `to_edge_transform_and_lower`, admits a Python function only if it is
    `alloc` (`assert op.__name__ in ("alloc",)`), while the pass that swaps
    them for ExecuTorch's sym ops (`EdgeToBackendOpsPass`, with
    `_PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS`) runs only later, in
    `to_executorch`. The verifier's allowlist (its `_EXECUTORCH_SYM_OPS`) is
    extended with those of them that have an ExecuTorch counterpart, for the
    lowering only."""
    import torch
    from executorch.exir.passes.executorch_prim_ops_registry import (
        _PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS,
    )
    from executorch.exir.verification import verifier

    functions = {getattr(torch, name) for name in VERIFIED_SYM_FUNCTIONS}
    allowed = set(verifier._EXECUTORCH_SYM_OPS) | (
        functions & set(_PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS)
    )
    with patched([(verifier, "_EXECUTORCH_SYM_OPS", allowed)]):
        yield


@contextlib.contextmanager
def views_as_dynamic_as_their_base():
    """ExecuTorch's `ReplaceViewCopyWithViewPass` (in `to_executorch`)
    replacing only the `view_copy` nodes whose shape is as dynamic as their
    base's. A view shares its base's memory, so ExecuTorch's view spec wants
    the same dynamism and refuses another ("_ViewSpec is incompatible with its
    base"): a parameter reshaped to sizes read from the input (a position
    embedding reshaped to the image's patch grid, as Pvt, DepthPro and VitDet
    do) is a dynamic view of a static base. Such a node stays a `view_copy`,
    a copy into memory of its own; the pass's `ensures` asks the same
    question, so it expects such nodes to be left."""
    from executorch.exir.passes import replace_view_copy_with_view_pass as views
    from executorch.exir.tensor import determine_tensor_dynanism

    is_view_copy = views._is_view_copy

    def replaceable_view_copy(node):
        if not is_view_copy(node):
            return False
        value = node.meta.get("val")
        spec = node.args[0].meta.get("spec")
        if value is None or spec is None:
            return True
        return determine_tensor_dynanism(value.shape) == spec.shape_dynamism

    with patched([(views, "_is_view_copy", replaceable_view_copy)]):
        yield


# The modules that call ExecuTorch's `dim_order_from_stride` by a name of
# their own (each imported it).
DIM_ORDER_CALLERS = (
    "executorch.exir.tensor",
    "executorch.exir.tensor_layout",
    "executorch.exir.emit._emitter",
    "executorch.exir.passes.replace_view_copy_with_view_pass",
)


@contextlib.contextmanager
def dim_orders_of_unbacked_strides():
    """ExecuTorch's `dim_order_from_stride` for strides it cannot compare.
    It sorts a tensor's dims by stride, largest first, and compares strides
    that hold a data-dependent size (`x[:, :n.item()]`: strides `8*u0`, `8`,
    `1`) by guarding, which fails (`GuardOnDataDependentSymNode`: `8*u0 < 8`)
    and stops the lowering. Where it raises, the dims are sorted again with a
    comparison nobody can decide counted as "not smaller": a stable sort then
    keeps such dims in their order, the order of a tensor laid out in its
    dims' order, which is how torch creates it. A zero stride is refused as
    ExecuTorch refuses it."""
    import importlib

    from executorch.exir import tensor
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode, guard_or_false

    order = tensor.dim_order_from_stride

    class Stride:
        __slots__ = ("value",)

        def __init__(self, value):
            self.value = value

        def __lt__(self, other):
            return guard_or_false(self.value < other.value)

    def dim_order_from_stride(stride):
        try:
            return order(stride)
        except GuardOnDataDependentSymNode:
            if any(guard_or_false(s == 0) for s in stride):
                raise ValueError("0 in strides is not supported for ExecuTorch.") from None
            ranked = sorted(enumerate(stride), key=lambda d: Stride(d[1]), reverse=True)
            return tuple(d for d, _ in ranked)

    modules = [importlib.import_module(name) for name in DIM_ORDER_CALLERS]
    with patched([(m, "dim_order_from_stride", dim_order_from_stride) for m in modules]):
        yield


# JSON's non-finite tokens as Python's `json` writes them, outside strings
# (a delimiter on each side), and as flatc's JSON parser reads them.
NONFINITE_JSON = (
    (re.compile(r"(?<=[:\[,\s])-Infinity(?=[,\]}\s])"), "-inf"),
    (re.compile(r"(?<=[:\[,\s])Infinity(?=[,\]}\s])"), "inf"),
    (re.compile(r"(?<=[:\[,\s])NaN(?=[,\]}\s])"), "nan"),
)


@contextlib.contextmanager
def nonfinite_floats_serialized():
    """XNNPACK's graph serializer with non-finite floats written as flatc
    reads them. It writes the delegate's graph as JSON with Python's `json`,
    which writes an infinite or NaN float as `-Infinity`, `Infinity` or `NaN`,
    and has `flatc` compile it; flatc's parser takes `-inf`, `inf` and `nan`
    and refuses the others ("cannot parse value starting with: -"), so a pad
    with `-inf` (a mask's padding before a softmax) stops the lowering. The
    rewrite gives flatc the same IEEE values."""
    from executorch.backends.xnnpack.serialization import xnnpack_graph_serialize as serialize

    compile_json = serialize._flatc_compile

    def flatc_compile(output_dir, schema_path, json_path):
        with open(json_path, encoding="ascii") as f:
            text = original = f.read()
        for pattern, literal in NONFINITE_JSON:
            text = pattern.sub(literal, text)
        if text != original:
            with open(json_path, "w", encoding="ascii") as f:
                f.write(text)
        return compile_json(output_dir, schema_path, json_path)

    with patched([(serialize, "_flatc_compile", flatc_compile)]):
        yield


@contextlib.contextmanager
def constants_written_from_their_storage():
    """ExecuTorch 1.4.1's emitter with each constant tensor's bytes a
    read-only view of its storage instead of a copy. The emitter copies
    every constant it serializes (`bytes` of a ctypes array over the
    storage) to hash it and to hold it until the write; a 125M Llama's
    float embedding is 98 MB of copy at the lowering's peak, beside the
    storage it reads (mapped from the traced program's weights). A view
    hashes and writes the same bytes; the pages of a mapped file its hash
    read leave this process's memory again (`resident.page_out`), as the
    write's do (`DirectFile`). Where the serializer handles the
    copies as the immutable `bytes` they are, the views go the same way:
    its `deepcopy` of the program keeps them as they are (as it keeps
    `bytes`), and the constant segment's `Cord` takes them. The storage
    outlives its view: the program's tensor specs hold it until the program
    manager goes, after the write. Other versions run as they are."""
    if not pinned({"executorch": "1.4.1"}):
        yield
        return
    import copy

    from executorch.exir._serialize import _cord
    from executorch.exir.emit import _emitter

    def viewed_or_copied(value=b"", *args):
        if isinstance(value, ctypes.Array) and not args:
            return memoryview(value).cast("B").toreadonly()
        return builtins.bytes(value, *args)

    append = _cord.Cord.append

    def append_view(self, data):
        if isinstance(data, memoryview):
            self._buffers.append(data)
            self._byte_size += data.nbytes
        else:
            append(self, data)

    mappings = resident.file_mappings()

    def sha256_released(data):
        digest = hashlib.sha256(data)
        if isinstance(data, memoryview):
            resident.page_out([resident.buffer_span(data)], mappings)
        return digest

    hashing = types.SimpleNamespace(sha256=sha256_released)
    atomic = {**copy._deepcopy_dispatch, memoryview: copy._deepcopy_atomic}
    with patched(
        [
            (_emitter, "bytes", viewed_or_copied),
            (_emitter, "hashlib", hashing),
            (_cord.Cord, "append", append_view),
            (copy, "_deepcopy_dispatch", atomic),
        ]
    ):
        yield


@contextlib.contextmanager
def delegated_weights_read_once():
    """ExecuTorch 1.4.1's delegate lowering with each partition's weights
    read once and then let go. ExecuTorch deep-copies every partition's
    program before the backend preprocesses any ("in case backends change
    graph inside preprocess"), so every delegated weight exists twice until
    the last partition is done; and each weight XNNPACK reads to pack it
    stays resident where it is a mapped file's (the traced program's
    weights). Here a partition's copy shares its weights (a preprocess
    changes its copy's graph and state dict, which stay copies, never a
    weight's values in place), and once XNNPACK has packed a partition its
    weights' pages of a mapped file leave this process's memory
    (`resident.page_out`): the lowering reads them again only where a weight
    also feeds a node left to the portable program, which reads it from the
    file. On a 125M Llama in 8da4w these are 0.1-0.3 GiB of the lowering's
    peak. The bytes are ExecuTorch's own. Other versions run as they are."""
    if not pinned({"executorch": "1.4.1"}):
        yield
        return
    import copy

    import torch
    from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
    from executorch.exir.backend import backend_api
    from torch.export import ExportedProgram

    def weights(program):
        values = (*program.state_dict.values(), *program.constants.values())
        return [value for value in values if isinstance(value, torch.Tensor)]

    def deepcopy(value, memo=None):
        memo = {} if memo is None else memo
        if isinstance(value, ExportedProgram):
            for weight in weights(value):
                memo[id(weight)] = weight
        return copy.deepcopy(value, memo)

    mappings = resident.file_mappings()
    preprocess = XnnpackBackend.preprocess

    def preprocess_released(program, compile_specs):
        try:
            return preprocess(program, compile_specs)
        finally:
            resident.page_out([resident.storage_span(w) for w in weights(program)], mappings)

    with patched(
        [
            (backend_api, "copy", types.SimpleNamespace(deepcopy=deepcopy)),
            (XnnpackBackend, "preprocess", staticmethod(preprocess_released)),
        ]
    ):
        yield


def partitioners(delegate):
    if delegate == "xnnpack":
        from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        configs = [
            one_dynamic_dimension(c)
            if c.target_name in RESHAPING_CONFIGS
            else four_dimensional_input(c)
            if c.target_name in CHANNELS_LAST_CONFIGS
            else c
            for c in ALL_PARTITIONER_CONFIGS
        ]
        return [XnnpackPartitioner(configs=configs)]
    raise ValueError(f"unknown ExecuTorch delegate `{delegate}` (xnnpack)")


# The ops XNNPACK computes channels-last (its `ChannelsLastTaggedReshapePass`
# converts their input to NHWC) whose partitioner configs take them at any rank.
CHANNELS_LAST_CONFIGS = ("prelu.default",)


def four_dimensional_input(config):
    """`config` (an XNNPACK partitioner config of an op XNNPACK computes
    channels-last) that also leaves a node whose input is not 4-D to the
    portable kernels. XNNPACK's channels-last pass converts the op's input to
    NHWC and refuses any other rank ("Attempting to convert non-NHWC
    compatible node to NHWC"), so without this a PReLU on a transformer's 3-D
    activations stops the lowering."""

    def check_constraints(self, node, ep):
        value = node.all_input_nodes[0].meta.get("val") if node.all_input_nodes else None
        if getattr(value, "dim", lambda: None)() != 4:
            return False
        return config.check_constraints(self, node, ep)

    return type(config.__name__, (config,), {"check_constraints": check_constraints})


# The ops XNNPACK serializes as a static reshape whose partitioner configs
# take them whatever their output's shape.
RESHAPING_CONFIGS = ("unsqueeze_copy.default",)


def one_dynamic_dimension(config):
    """`config` (an XNNPACK partitioner config of an op it serializes as a
    static reshape) that also leaves a node whose output has more than one
    dynamic dimension to the portable kernels. XNNPACK's static reshape
    infers at most one dimension at run time, and its serializer refuses
    more ("XNNPACK reshape only supports 1 dynamic dimension"), so without
    this a dynamic batch and sequence through `torch.stack` (Cohere's
    interleaved rotary: an unsqueeze of `[batch, heads, sequence, half]`)
    stop the lowering. The reference instead has the serializer write such a
    reshape with each dynamic dimension as 0 (`_patch_squeeze_node_visitors`),
    where XNNPACK's static reshape infers one dimension at most."""
    from torch.fx.experimental.symbolic_shapes import free_symbols

    def check_constraints(self, node, ep):
        value = node.meta.get("val")
        if value is not None and sum(1 for d in value.shape if free_symbols(d)) > 1:
            return False
        return config.check_constraints(self, node, ep)

    return type(config.__name__, (config,), {"check_constraints": check_constraints})


def counted_nodes(program):
    """(delegated, portable): call nodes inside the lowered delegates' programs,
    and kernel calls left to the portable runtime."""
    delegated = portable = 0
    module = program.exported_program().graph_module
    for node in module.graph.nodes:
        if node.op != "call_function":
            continue
        if "executorch_call_delegate" in str(node.target):
            lowered = getattr(module, node.args[0].target)
            delegated += sum(
                1 for n in lowered.original_module.graph.nodes if n.op == "call_function"
            )
        elif "getitem" not in str(node.target):
            portable += 1
    return delegated, portable


class DirectFile:
    """A new file written front to back past the page cache (`O_DIRECT`
    where the file system takes it), as the host's `atomic::DirectWriter`
    writes ONNX and portable `.pte` files: a `.pte` is mostly weights, written
    once, and on this project's VM filling the page cache with them costs
    seconds where a direct write costs a fraction of one. Every write but the
    last is a whole aligned buffer (an anonymous map is page-aligned); the last
    is padded to a block and the file cut back to its length in `close`.
    `direct=False` writes the same way through the page cache."""

    BLOCK = 4096
    SIZE = 8 << 20

    def __init__(self, path, direct=True):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.buffer = mmap.mmap(-1, self.SIZE)
        self.used = self.written = 0
        self.direct = direct and self._set_direct(True)
        self.mappings = resident.file_mappings()

    def _set_direct(self, on):
        flags = fcntl.fcntl(self.fd, fcntl.F_GETFL)
        try:
            fcntl.fcntl(self.fd, fcntl.F_SETFL, flags | os.O_DIRECT if on else flags & ~os.O_DIRECT)
        except OSError:
            return False
        return on

    def write(self, data):
        view = memoryview(data).cast("B")
        address, _ = resident.buffer_span(view)
        while len(view):
            n = min(len(view), self.SIZE - self.used)
            self.buffer[self.used : self.used + n] = view[:n]
            resident.page_out([(address, n)], self.mappings)
            self.used += n
            view = view[n:]
            address += n
            if self.used == self.SIZE:
                self._write_block(self.SIZE)
        return len(data)

    def _write_block(self, n):
        block = memoryview(self.buffer)[:n]
        done = 0
        while done < n:
            try:
                done += os.pwrite(self.fd, block[done:], self.written + done)
            except OSError as e:
                # A file system that took the flag but refuses the write: buffered from here on.
                if e.errno != errno.EINVAL or not self.direct:
                    raise
                self.direct = self._set_direct(False)
        block.release()
        self.written += n
        self.used = 0

    def close(self):
        """Writes the last block and closes the file (closed on failure too)."""
        try:
            length = self.written + self.used
            if self.used:
                padded = -(-self.used // self.BLOCK) * self.BLOCK if self.direct else self.used
                self.buffer[self.used : padded] = bytes(padded - self.used)
                self._write_block(padded)
                os.ftruncate(self.fd, length)
        finally:
            os.close(self.fd)
            self.buffer.close()

    def __enter__(self):
        return self

    def __exit__(self, kind, *_):
        if kind is None:
            self.close()
        else:
            os.close(self.fd)
            self.buffer.close()


def lower(_session, params: Lower) -> LowerReply:
    import torch
    from executorch.exir import (
        EdgeCompileConfig,
        ExecutorchBackendConfig,
        to_edge_transform_and_lower,
    )
    from executorch.exir.passes import MemoryPlanningPass

    program, _ = load_exported_mapped(params.program)
    in_spec = torch.utils._pytree.treespec_dumps(program.call_spec.in_spec)
    exceptions = [
        getattr(getattr(torch.ops.aten, op), overload)
        for op, overload in (n.split(".") for n in CORE_ATEN_EXCEPTIONS)
    ]
    with (
        list_returns_verified_whole(),
        output_clones_kept(),
        dim_orders_of_unbacked_strides(),
        python_sym_functions_verified(),
        views_as_dynamic_as_their_base(),
        nonfinite_floats_serialized(),
        constants_written_from_their_storage(),
        inputs_updated_in_place_planned() as in_place,
        shortcuts() as counts,
        # After the shortcuts: the page-out follows a replayed partition too.
        delegated_weights_read_once(),
    ):
        started = time.monotonic()
        edge = to_edge_transform_and_lower(
            program,
            transform_passes=[identity_copies_dropped, matmul_scales_on_the_smaller_operand],
            partitioner=partitioners(params.delegate),
            compile_config=EdgeCompileConfig(_core_aten_ops_exception_list=exceptions),
        )
        edge_seconds = time.monotonic() - started
        edge = fused_quantized_embeddings(edge)
        if in_place:
            mutated_inputs_updated_in_place(edge.exported_program())
        delegated, portable = counted_nodes(edge)
        started = time.monotonic()
        memory = params.memory
        executorch = edge.to_executorch(
            ExecutorchBackendConfig(
                memory_planning_pass=MemoryPlanningPass(
                    alloc_graph_input=memory.graph_inputs,
                    alloc_graph_output=memory.graph_outputs,
                    alloc_mutable_buffers=memory.mutable_buffers,
                )
            )
        )
        with DirectFile(params.output) as out:
            executorch.write_to_file(out)
        executorch_seconds = time.monotonic() - started

    reply = LowerReply(
        in_spec=in_spec,
        delegated_nodes=delegated,
        portable_nodes=portable,
        partitions=counts.partitions,
        partitions_replayed=counts.replayed,
        retraces_skipped=counts.retraces_skipped,
        checks_skipped=counts.checks_skipped,
        edge_seconds=edge_seconds,
        executorch_seconds=executorch_seconds,
        bytes=os.path.getsize(params.output),
        # Buffer 0 is reserved (constants); the others are the planned memory.
        arena_bytes=sum(executorch.executorch_program.execution_plan[0].non_const_buffer_sizes[1:]),
    )
    release_lowered()
    return reply


def release_lowered():
    """Lets go of the lowering's programs where ExecuTorch and torch keep them
    after it returns, so the collection after the request frees them before
    the next component is lowered. Three places hold nodes of the lowered
    program, and through their metadata every partition's program and its
    weights (a 125M Llama's prefill: 0.3-0.5 GiB, which the decode
    component's lowering then piled on top of): ExecuTorch's
    `is_same_node` cache (unbounded, keyed by nodes), the module-level
    `WhyNoPartition` of XNNPACK's partitioner configs (the last node each
    refused), and torch's fake tensor dispatch cache where a key holds the
    lowered modules a delegate call was traced with. All three are caches or
    diagnostics: what a later lowering computes does not depend on them."""
    import sys

    import torch

    same_node = getattr(sys.modules.get("executorch.exir.backend.utils"), "is_same_node", None)
    if hasattr(same_node, "cache_clear"):
        same_node.cache_clear()
    why = getattr(sys.modules.get("executorch.exir.backend.utils"), "WhyNoPartition", None)
    if why is not None:
        for name, module in list(sys.modules.items()):
            if module is None or not name.startswith("executorch.backends."):
                continue
            for value in list(vars(module).values()):
                if isinstance(value, why):
                    value.node = None
    cache = getattr(torch._subclasses.fake_tensor.FakeTensorMode, "cache", None)
    if isinstance(cache, dict):
        for key in [k for k in cache if holds_module(getattr(k, "key", ()))]:
            del cache[key]


def holds_module(value):
    """Whether `value` (a fake tensor cache key's tuple) holds a module."""
    import torch

    if isinstance(value, torch.nn.Module):
        return True
    if isinstance(value, (tuple, list)):
        return any(holds_module(v) for v in value)
    if isinstance(value, dict):
        return any(holds_module(v) for v in value.values())
    return False


def fused_quantized_embeddings(edge):
    """`edge` with each embedding of torchao-quantized weights (a
    `dequantize_affine` read by `embedding`, which XNNPACK does not take)
    as ExecuTorch's quantized embedding kernel (`embedding_byte`,
    `embedding_4bit`), as ExecuTorch's own `QuantFusionPass` rewrites it;
    `edge` itself when it has none."""
    import torch
    from executorch.exir.passes.quant_fusion_pass import QuantFusionPass, _get_node_value_dict

    dequantize = (
        torch.ops.torchao.dequantize_affine.default if hasattr(torch.ops, "torchao") else None
    )
    graph = edge.exported_program().graph_module.graph
    if dequantize is None or not any(
        node.op == "call_function" and getattr(node.target, "_op", node.target) is dequantize
        for node in graph.nodes
    ):
        return edge
    values = _get_node_value_dict(edge.exported_program())
    return edge.transform([QuantFusionPass(_fix_node_meta_val=True, node_value_dict=values)])


def edge_program(session, params: EdgeProgram) -> EdgeProgramReply:
    """The program in ExecuTorch's edge opset (its decomposition table, as
    `to_edge` runs it), for hfx's native portable emitter: the only step of
    the portable path that needs Python, because decompositions are Python
    functions traced by torch."""
    import torch
    from executorch.exir.tracer import _default_decomposition_table

    program, sources = load_exported_mapped(params.program)
    started = time.monotonic()
    edge = program.run_decompositions(_default_decomposition_table())
    # The edge program is intermediate, as a trace for ONNX is: its weights go
    # beside it straight from tensor memory, and the host maps them; a weight
    # still over the map it was loaded from is indexed where it is (a model
    # folder's checkpoint, the trace's side file), never written again.
    side_weights = side_weights_supported()
    save_program(
        edge, params.output, side_weights, sources=sources, share=session.caller is not None
    )
    dumps = torch.utils._pytree.treespec_dumps
    return EdgeProgramReply(
        in_spec=dumps(edge.call_spec.in_spec),
        out_spec=dumps(edge.call_spec.out_spec),
        seconds=time.monotonic() - started,
        side_weights=side_weights,
    )
