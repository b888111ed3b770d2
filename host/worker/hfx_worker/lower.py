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

import contextlib
import errno
import fcntl
import mmap
import os
import time

from .checkpoint import save_program, side_weights_supported
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


def partitioners(delegate):
    if delegate == "xnnpack":
        from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        configs = [
            one_dynamic_dimension(c) if c.target_name in RESHAPING_CONFIGS else c
            for c in ALL_PARTITIONER_CONFIGS
        ]
        return [XnnpackPartitioner(configs=configs)]
    raise ValueError(f"unknown ExecuTorch delegate `{delegate}` (xnnpack)")


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

    def _set_direct(self, on):
        flags = fcntl.fcntl(self.fd, fcntl.F_GETFL)
        try:
            fcntl.fcntl(self.fd, fcntl.F_SETFL, flags | os.O_DIRECT if on else flags & ~os.O_DIRECT)
        except OSError:
            return False
        return on

    def write(self, data):
        view = memoryview(data).cast("B")
        while len(view):
            n = min(len(view), self.SIZE - self.used)
            self.buffer[self.used : self.used + n] = view[:n]
            self.used += n
            view = view[n:]
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
    with list_returns_verified_whole(), shortcuts() as counts:
        started = time.monotonic()
        edge = to_edge_transform_and_lower(
            program,
            partitioner=partitioners(params.delegate),
            compile_config=EdgeCompileConfig(_core_aten_ops_exception_list=exceptions),
        )
        edge_seconds = time.monotonic() - started
        edge = fused_quantized_embeddings(edge)
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
