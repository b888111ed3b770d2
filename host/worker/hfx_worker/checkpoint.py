"""Weights streamed from a model folder's safetensors (`weights: streamed`).

The model is built from its config with every parameter allocated but never
written (`torch.empty`: no page of it becomes resident), torch.export traces
it (it reads shapes and dtypes, never values), and the side-weights index
points each parameter at its bytes in the checkpoint's files. The host maps
those files and streams the bytes into the artifact: the worker neither
loads nor writes a weight. A parameter whose dtype differs from the
checkpoint's (`--dtype`) is converted by the host as it writes it (float32,
bfloat16, float16), or else here, a chunk at a time, into the side file.
Buffers the model computes at init (rotary `inv_freq`) are real and go to
the side file as before.

The weights are read only when the eager reference is asked for (`--verify`):
`StreamedModel.load` copies them into the same storages, so the index still
holds.

A traced program's own weights (not streamed) go beside its `.pt2` too
(`save_with_side_weights`), written once from the tensors' memory, in the
same index.
"""

import contextlib
import json
import mmap
import os
import struct
from typing import NamedTuple

from .errors import UserInputError
from .trace_shortcuts import saving

# safetensors' dtype names.
DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}
# Most bytes a safetensors header may hold (the format's own limit is 100 MB).
HEADER_LIMIT = 100 << 20
# Bytes converted at a time when a weight's dtype changes.
CHUNK = 64 << 20


class Stored(NamedTuple):
    """A checkpoint tensor: its file, its bytes' offset and length there, dtype, shape."""

    file: str
    offset: int
    length: int
    dtype: str
    shape: tuple

    @property
    def itemsize(self):
        import torch

        return getattr(torch, self.dtype).itemsize


def checkpoint_files(folder):
    """The folder's safetensors files: the index's shards, else `model.safetensors`; [] if neither."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        for shard in shards:
            # A shard is a file of the folder: a path would let the index point anywhere.
            if (
                not isinstance(shard, str)
                or shard in ("", ".", "..")
                or "/" in shard
                or "\\" in shard
            ):
                raise ValueError(
                    f"{index}: names the shard {shard!r}, which is not a file name in the model folder"
                )
        return [os.path.join(folder, shard) for shard in shards]
    single = os.path.join(folder, "model.safetensors")
    return [single] if os.path.exists(single) else []


def opened_checkpoint(path):
    """`path` opened for reading. A link the worker's sandbox will not follow
    (one leaving the model folder) is named as the host names it."""
    try:
        return open(path, "rb")
    except PermissionError:
        if os.path.islink(path):
            raise ValueError(
                f"{path}, a symbolic link to {os.readlink(path)}, outside what the worker may read: checkpoint files "
                "are read only as regular files inside the model folder, or as a Hub snapshot's links into its "
                "repository's blobs/ (copy the file there)"
            ) from None
        raise


def truncated(path, size, needed):
    """The user's error of a checkpoint file of `size` bytes whose header needs `needed`."""
    return UserInputError(
        "truncated_file",
        f"{path}: truncated: {size} bytes where its safetensors header needs at least {needed} "
        "(an interrupted download or copy): fetch or save the checkpoint again",
    )


def read_header(path):
    """The tensors of one safetensors file, from its header alone."""
    with opened_checkpoint(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size < 8:
            raise truncated(path, size, 8)
        (length,) = struct.unpack("<Q", f.read(8))
        if length > HEADER_LIMIT:
            raise ValueError(
                f"{path}: a safetensors header of {length} bytes (the file has {size})"
            )
        if length > size - 8:
            raise truncated(path, size, 8 + length)
        header = json.loads(f.read(length))
    tensors = {}
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        if entry["dtype"] not in DTYPES or not 0 <= begin <= end:
            raise ValueError(
                f"{path}: tensor `{key}`: dtype {entry['dtype']}, bytes {begin}..{end} of {size - 8 - length}"
            )
        if 8 + length + end > size:
            raise truncated(path, size, 8 + length + end)
        tensors[key] = Stored(
            path, 8 + length + begin, end - begin, DTYPES[entry["dtype"]], tuple(entry["shape"])
        )
    return tensors


def check_complete(folder):
    """Raises the user's error of a truncated checkpoint file in `folder`, if there is one."""
    for path in checkpoint_files(folder):
        read_header(path)


def checkpoint_tensors(folder):
    tensors = {}
    for path in checkpoint_files(folder):
        tensors.update(read_header(path))
    return tensors


@contextlib.contextmanager
def parameters_on_meta():
    """Modules built inside get their parameters on the meta device (no
    memory, no initialization); buffers stay real, so values a module
    computes at init (rotary frequencies) are right."""
    import torch

    register = torch.nn.Module.register_parameter

    def on_meta(module, name, param):
        register(module, name, param)
        # One already on meta is kept as it is: a tied parameter stays the same object.
        if param is not None and param.device.type != "meta":
            param = module._parameters[name]
            module._parameters[name] = type(param)(
                param.to("meta"), requires_grad=param.requires_grad
            )

    torch.nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register


def source_of(names, tensors, prefix):
    """The checkpoint key holding a parameter known by `names` (tied ones have
    several): the name itself, or with the base model's prefix added or removed
    (a `LlamaModel` from a `LlamaForCausalLM` checkpoint, and the reverse)."""
    for name in names:
        candidates = [name]
        if prefix:
            candidates += (
                [name[len(prefix) + 1 :]] if name.startswith(prefix + ".") else [f"{prefix}.{name}"]
            )
        for key in candidates:
            if key in tensors:
                return key
    return None


def renamed_tensors(model, tensors, prefix):
    """The checkpoint's tensors under the names transformers loads them by:
    the model's own conversion mapping's renamings applied, as
    `from_pretrained` applies them (ViT's `attention.attention.query` is the
    model's `attention.q_proj`), the base model's prefix added or removed.
    A key a converter claims (tensors merged or split on load) is left out:
    no one tensor holds that parameter. Empty where transformers has no such
    mapping (another version) or the model none."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import (
            WeightConverter,
            WeightRenaming,
            rename_source_key,
        )
    except ImportError:
        return {}
    try:
        transforms = get_model_conversion_mapping(model)
    except Exception:  # noqa: BLE001 - a model transformers cannot map: its own names stand
        return {}
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    if not renamings and not converters:
        return {}
    state = model.state_dict()  # parameters on meta: names and nothing else
    renamed = {}
    for key, stored in tensors.items():
        name, converter = rename_source_key(key, renamings, converters, prefix or None, state)
        if converter is None and name != key and name in state:
            renamed.setdefault(name, stored)
    return renamed


class StreamedModel:
    """A model whose parameters are empty storages, each backed by a checkpoint tensor."""

    def __init__(self, model, sources):
        self.model = model
        # Each parameter's storage address → the checkpoint tensor it stands for.
        self.sources = sources
        self.loaded = False

    def load(self):
        """Reads every parameter's value from the checkpoint into its storage
        (the eager reference needs them): the whole model becomes resident."""
        import torch

        with torch.no_grad():
            for param in unique_parameters(self.model):
                stored = self.sources[param.untyped_storage().data_ptr()]
                param.copy_(mapped(stored).view(stored.shape))
        self.loaded = True


def unique_parameters(model):
    seen = set()
    for module in model.modules():
        for param in module._parameters.values():
            if param is not None and id(param) not in seen:
                seen.add(id(param))
                yield param


def mapped(stored, first=0, count=None):
    """Elements `first`..`first + count` of `stored`, read from its file's map (copy-on-write: never written)."""
    import torch

    dtype = getattr(torch, stored.dtype)
    element = torch.empty(0, dtype=dtype).element_size()
    count = stored.length // element - first if count is None else count
    with open(stored.file, "rb") as f:
        view = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    return torch.frombuffer(view, dtype=dtype, count=count, offset=stored.offset + first * element)


def write_converted(out, stored, dtype):
    """Writes `stored`'s values converted to `dtype`, a chunk at a time."""
    import torch

    source = getattr(torch, stored.dtype)
    element = torch.empty(0, dtype=source).element_size()
    total = stored.length // element
    step = max(1, CHUNK // element)
    for first in range(0, total, step):
        chunk = mapped(stored, first, min(step, total - first)).to(dtype)
        out.write(memoryview(chunk.view(torch.uint8).numpy()))


def streamed_model(build, folder, dtype_name, weights_dtype_name=None):
    """The model `build()` makes, its parameters empty and backed by the
    folder's checkpoint; or None and why the weights cannot be streamed.
    `weights_dtype_name`: the model computes in `dtype_name` over weights
    rounded to this dtype (`sources.prepared`), which only a checkpoint
    holding its floating tensors in it gives without reading them."""
    import torch

    tensors = checkpoint_tensors(folder)
    if not tensors:
        return None, "the folder has no safetensors checkpoint"
    dtype = getattr(torch, dtype_name)
    with parameters_on_meta():
        model = build()
    names = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    prefix = getattr(model, "base_model_prefix", "")
    # A parameter's tensor by its own name first, else by the name loading
    # gives it: the renames (~50 ms for a 125M Llama) are worked out only
    # when a parameter's name is missing, and kept for the ones after it.
    renames_added = False
    empty, sources = {}, {}
    for param in list(unique_parameters(model)):
        key = source_of(names[id(param)], tensors, prefix)
        if key is None and not renames_added:
            renames_added = True
            for name, stored in renamed_tensors(model, tensors, prefix).items():
                tensors.setdefault(name, stored)
            key = source_of(names[id(param)], tensors, prefix)
        if key is None:
            return None, f"parameter `{names[id(param)][0]}` has no tensor in the checkpoint"
        stored = tensors[key]
        if (
            weights_dtype_name is not None
            and param.is_floating_point()
            and stored.dtype != weights_dtype_name
        ):
            return (
                None,
                f"checkpoint tensor `{key}` is {stored.dtype}, and the model's weights are rounded to "
                f"{weights_dtype_name} in memory",
            )
        if tuple(stored.shape) != tuple(param.shape):
            return (
                None,
                f"parameter `{names[id(param)][0]}` is {list(param.shape)}, checkpoint tensor `{key}` {list(stored.shape)}",
            )
        target = dtype if param.is_floating_point() else param.dtype
        fresh = torch.nn.Parameter(
            torch.empty(param.shape, dtype=target), requires_grad=param.requires_grad
        )
        empty[id(param)] = fresh
        sources[fresh.untyped_storage().data_ptr()] = stored
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is not None:
                module._parameters[name] = empty[id(param)]
    # Buffers the checkpoint holds (a batch norm's statistics) take its values;
    # they are small. (Under the renamed names too, where a parameter needed them.)
    buffers = {name: buffer for name, buffer in model.named_buffers()}
    with torch.no_grad():
        for name, buffer in buffers.items():
            key = source_of([name], tensors, prefix)
            if key is not None and tuple(tensors[key].shape) == tuple(buffer.shape):
                buffer.copy_(mapped(tensors[key]).view(buffer.shape))
    return StreamedModel(model, sources), None


# The dtypes the host converts streamed weights between (`graph/pt2/cast.rs`).
HOST_CONVERTS = {"float32", "bfloat16", "float16"}


def host_reads(stored, storage, dtype):
    """Whether the host writes `storage` (a tensor's of `dtype`) straight from
    its checkpoint tensor `stored` (None: it has none): the same number of
    elements, stored in `dtype` or in one the host converts from as it
    writes. Otherwise the worker writes it to the side file."""
    if stored is None or stored.length * dtype.itemsize != storage.nbytes() * stored.itemsize:
        return False
    name = str(dtype).removeprefix("torch.")
    return name == stored.dtype or {name, stored.dtype} <= HOST_CONVERTS


def weights_plan(module, sources, output, kind):
    """The weights the host will write for `module`'s program, in the order
    it writes them, each with the checkpoint bytes that fill it: `[{"name",
    "file", "offset", "length", "stored", "dtype", "shape", "linear_weight"}]`,
    up to the first one that is not a checkpoint tensor's bytes (a buffer
    computed at init, a dtype the host does not convert). The host writes
    them while torch.export runs and keeps them only if the artifact it gets
    starts with exactly these (`host/src/prewrite.rs`). `kind`:

    - "archive_entries": the weight entries `torch.export.save` will write
      first into the `.pt2` at `output` (`name`: the entry's), made by
      torch's own code: its packaging of a state dict (`_package_state_dict`:
      the entries' order, names and tied storages grouped) run over the state
      dict torch.export gives a program of `module`
      (`_get_original_state_dict`), with no bytes read or written. Those are
      torch internals: only with the torch the trace shortcuts were checked
      against.
    - "parameters": the program's parameters, then its buffers, in the order
      of its signature (`named_parameters` / `named_buffers` with tied names
      kept: torch.export lifts each name), `name` each one's; what an ONNX
      model's initializers are, in its order. `linear_weight` says the tensor
      is the `weight` of `torch.nn.Linear` modules only (which the ONNX
      translation reads transposed).

    Any failure is an empty plan: the weights are then written at the emit
    step, as before."""
    from .trace_shortcuts import supported

    try:
        if kind == "parameters":
            return planned_parameters(module, sources)
        return planned(module, sources, output) if supported() else []
    except Exception:  # noqa: BLE001 - a plan is a head start, never a reason to fail
        return []


def planned_weight(name, tensor, stored, linear_weight=False):
    """One plan entry: `tensor` (named `name`) filled from checkpoint tensor `stored`."""
    return {
        "name": name,
        "file": os.path.abspath(stored.file),
        "offset": stored.offset,
        "length": stored.length,
        "stored": stored.dtype,
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "shape": list(tensor.shape),
        "linear_weight": linear_weight,
    }


def planned_parameters(module, sources):
    """`weights_plan`'s "parameters" entries."""
    import torch

    named = [
        *module.named_parameters(remove_duplicate=False),
        *module.named_buffers(remove_duplicate=False),
    ]
    # A tensor several names reach (tied embeddings) is lifted once per name,
    # and the graph reads it through the last: the others are initializers
    # no node reads, which the ONNX model leaves out.
    last = {id(tensor): fqn for fqn, tensor in named}
    linear = {}
    for fqn, tensor in named:
        owner, _, attribute = fqn.rpartition(".")
        is_linear = attribute == "weight" and type(module.get_submodule(owner)) is torch.nn.Linear
        linear[id(tensor)] = linear.get(id(tensor), True) and is_linear
    plan = []
    for fqn, tensor in named:
        if last[id(tensor)] != fqn:
            continue
        storage = tensor.untyped_storage()
        stored = sources.get(storage.data_ptr())
        # The whole storage, as the host's initializer reads it.
        whole = (
            tensor.storage_offset() == 0
            and tensor.is_contiguous()
            and tensor.nbytes == storage.nbytes()
        )
        if not whole or not host_reads(stored, storage, tensor.dtype):
            break
        plan.append(planned_weight(fqn, tensor, stored, linear[id(tensor)]))
    return plan


def planned(module, sources, output):
    """`weights_plan`'s entries."""
    import torch
    from torch.export._trace import _get_original_state_dict
    from torch.export.pt2_archive import _package

    class Names:
        """What `_package_state_dict` asks of an archive writer: the entries' names, in order."""

        def __init__(self):
            self.written = []

        def count_prefix(self, prefix):
            return 0

        def write_bytes(self, name, data):
            self.written.append(name)

    class Program:
        state_dict = _get_original_state_dict(module)

    if any(
        not torch.is_tensor(t) or _package._should_use_pickle(t)
        for t in Program.state_dict.values()
    ):
        return []  # pickled entries (subclasses) come first and are torch's to write
    names = Names()
    raw_bytes = _package._get_raw_tensor_bytes
    _package._get_raw_tensor_bytes = lambda value: b""
    try:
        config = _package._package_state_dict("model", Program, names)
    finally:
        _package._get_raw_tensor_bytes = raw_bytes
    by_path = {}
    for fqn, meta in config.config.items():
        by_path.setdefault(meta.path_name, fqn)
    archive = os.path.splitext(os.path.basename(output))[0]  # torch's archive name: the file's stem
    plan = []
    for name in names.written:
        fqn = by_path.get(name.rsplit("/", 1)[-1])
        tensor = Program.state_dict.get(fqn)
        storage = tensor.untyped_storage() if tensor is not None else None
        stored = sources.get(storage.data_ptr()) if storage is not None else None
        if not host_reads(stored, storage, tensor.dtype):
            break
        plan.append(planned_weight(f"{archive}/{name}", tensor, stored))
    return plan


# ── Side weights: a program's weights beside its `.pt2` ──


def side_weights_supported():
    """Whether this torch's archive writer has the hook `save_with_side_weights` uses."""
    from torch.export.pt2_archive import _package

    return all(hasattr(_package, name) for name in ("_get_raw_tensor_bytes", "_is_fake_tensor"))


def save_program(program, output, side_weights, written_before=None, sources=None, share=False):
    """`program` saved for the host at `output`: its size rounding in
    functions the serializer takes (`rounding_serializable`), then with its
    weights beside it (`save_with_side_weights`) where `side_weights`, else by
    `torch.export.save`; either way through `trace_shortcuts.saving`. Whether
    any weight was indexed in this process's shared memory (`share`)."""
    import torch

    rounding_serializable(program)
    with saving():
        if side_weights:
            return save_with_side_weights(program, output, written_before, sources, share)
        torch.export.save(program, output)
        return False


def rounding_serializable(program):
    """`math.floor` and `math.ceil` of a symbolic size (`math.ceil(seq / chunk)`)
    written in functions torch's `.pt2` serializer takes (its `_SYM_OPS`),
    which has neither: `floor(x)` as `sym_int(x // 1)` and `ceil(x)` as
    `-sym_int(-x // 1)`. The floor division floors (a float for a float),
    `sym_int` truncates an integral value exactly. Each new node carries the
    symbolic value torch computes for it, the last the rounded node's own, so
    the sizes it feeds keep their expressions. In place, every graph of the
    program; a retrace (the edge decomposition) writes `math.floor` again, so
    every save rewrites."""
    import math
    import operator

    import torch

    def call(graph, node, function, args, value):
        new = graph.call_function(function, args)
        new.meta.update({k: v for k, v in node.meta.items() if k != "val"})
        new.meta["val"] = value
        return new

    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        graph = module.graph
        rounded = [
            node
            for node in graph.nodes
            if node.op == "call_function" and node.target in (math.floor, math.ceil)
        ]
        for node in rounded:
            (x,) = node.args
            value = x.meta["val"]
            with graph.inserting_before(node):
                if node.target is math.floor:
                    floored = call(graph, node, operator.floordiv, (x, 1), value // 1)
                    new = call(graph, node, torch.sym_int, (floored,), node.meta["val"])
                else:
                    negated = call(graph, node, operator.neg, (x,), -value)
                    floored = call(graph, node, operator.floordiv, (negated, 1), -value // 1)
                    truncated = torch.sym_int(floored.meta["val"])
                    whole = call(graph, node, torch.sym_int, (floored,), truncated)
                    new = call(graph, node, operator.neg, (whole,), node.meta["val"])
            node.replace_all_uses_with(new)
            graph.erase_node(node)
        if rounded:
            module.recompile()


def save_with_side_weights(program, output, written_before=None, sources=None, share=False):
    """`torch.export.save` without the weights' bytes, which go to `<output>.weights`
    straight from the tensors' memory (no copy of each storage as a `bytes`, no
    CRC), indexed by `<output>.weights.json`: {"files": [...], "weights"|"constants":
    {fqn: [file, offset, length]}}, where file 0 is the side file (named relative
    to the index) and the others a model folder's checkpoint files (absolute).
    Storages in the side file are 64-byte aligned, shared storages written once.
    Measured on a 125M Llama: torch's `write_record` of the weights was 2.0 s of
    a 2.8 s save, and each storage's `bytes` copy up to 190 MB of peak memory.

    `sources` ({storage address: `checkpoint.Stored`}: a streamed model's,
    or a program's mapped by `pytree.load_exported_mapped`): a storage backed
    by a file's tensor of its own dtype is indexed where that file holds it
    (nothing written); of another dtype, written converted.

    `written_before` (a `SideWeights` the session keeps) is the last file
    written: a program whose every storage it holds (the generation components
    of one model) gets that file hard-linked rather than written again.

    `share` (the worker is hfx's caller, `hfx.export`): each CPU storage is
    moved into shared memory instead (`shared_memory_file`: the same storage
    object, its tensors and views unchanged) and indexed as `{"caller_fd": N}`,
    its descriptor in this process, which the host maps: the caller's weights
    are never copied to a file. One that cannot be shared is written.
    Returns whether any storage was indexed in shared memory."""
    import torch
    from torch.export.pt2_archive import _package

    tables = []
    for kind, table in (("weights", program.state_dict), ("constants", program.constants)):
        for fqn, value in table.items():
            if (
                not torch.is_tensor(value)
                or type(value.data) is not torch.Tensor
                or value.device.type != "cpu"
            ):
                continue  # subclasses and non-cpu tensors stay in the archive, as torch saves them
            tables.append((kind, fqn, value.untyped_storage(), value._version, value.dtype))
    index = {"files": [os.path.basename(output) + ".weights"], "weights": {}, "constants": {}}
    sources = sources or {}
    # A storage by address and size, and the version counter of the tensor
    # over it (bumped by every in-place change: a buffer a forward updated
    # since is written again).
    keys = [(storage.data_ptr(), storage.nbytes(), version) for _, _, storage, version, _ in tables]
    # A storage the host reads from a file stays there; any other is shared.
    shared = (
        shared_memory_files(
            [
                storage
                for (_, _, storage, _, _), key in zip(tables, keys)
                if sources.get(key[0]) is None
            ]
        )
        if share
        else {}
    )
    if (
        written_before is not None
        and keys
        and not sources
        and not share
        and written_before.holds(keys)
        and written_before.link(output + ".weights")
    ):
        written = written_before.offsets
        for (kind, fqn, _, _, _), key in zip(tables, keys):
            index[kind][fqn] = written[key]
    else:
        written = {}
        with open(output + ".weights", "wb") as side:
            offset = 0
            for (kind, fqn, storage, _, dtype), key in zip(tables, keys):
                stored = sources.get(key[0])
                if host_reads(stored, storage, dtype):
                    if stored.file not in index["files"]:
                        index["files"].append(stored.file)
                    place = [index["files"].index(stored.file), stored.offset, stored.length]
                    same = str(dtype).removeprefix("torch.") == stored.dtype
                    index[kind][fqn] = (
                        place if same else place + [stored.dtype]
                    )  # else the host converts it as it writes it
                    continue
                fd = shared.get(key[0]) if stored is None else None
                if fd is not None:
                    entry = {"caller_fd": fd}
                    if entry not in index["files"]:
                        index["files"].append(entry)
                    index[kind][fqn] = [index["files"].index(entry), 0, storage.nbytes()]
                    continue
                if key not in written:
                    padding = -offset % 64
                    side.write(b"\0" * padding)
                    offset += padding
                    if stored is not None:  # never loaded: its values come from the checkpoint
                        write_converted(side, stored, dtype)
                    else:
                        raw = torch.empty(0, dtype=torch.uint8).set_(
                            storage, 0, (storage.nbytes(),), (1,)
                        )
                        side.write(memoryview(raw.numpy()))
                    written[key] = [0, offset, storage.nbytes()]
                    offset += storage.nbytes()
                index[kind][fqn] = written[key]
        if written_before is not None and not sources and not share:
            written_before.remember(
                output + ".weights", written, [storage for _, _, storage, _, _ in tables]
            )
    with open(output + ".weights.json", "w") as f:
        json.dump(index, f)
    raw_bytes = _package._get_raw_tensor_bytes
    # Addresses as they are now: a storage moved into shared memory has a new one.
    side_storages = {storage.data_ptr() for _, _, storage, _, _ in tables}

    def without_side_weights(value):
        # torch asks for each storage group's complete tensor: one written to the side is left empty
        if (
            not _package._is_fake_tensor(value)
            and value.untyped_storage().data_ptr() in side_storages
        ):
            return b""
        return raw_bytes(value)

    # torch's discarded canonical-form check is skipped by the caller's
    # `trace_shortcuts.saving` (`save_program`).
    _package._get_raw_tensor_bytes = without_side_weights
    try:
        torch.export.save(program, output)
    finally:
        _package._get_raw_tensor_bytes = raw_bytes
    return bool(shared)  # each shared storage is indexed by its descriptor


def shared_memory_files(storages):
    """{address before the move: descriptor}: each CPU storage of `storages`
    moved into a shared-memory file of this process (torch's
    `UntypedStorage._share_fd_cpu_`, which `share_memory_()` calls: the storage
    object keeps its identity and its tensors, the file stays open as long as
    it lives). One that cannot move (another allocator's, or no descriptor
    left) is left out: it is written to the side file instead. The process's
    soft limit of open files is raised toward its hard limit when the moves
    need more."""
    import resource

    unique = {storage.data_ptr(): storage for storage in storages if storage.nbytes()}
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = len(os.listdir("/proc/self/fd")) + len(unique) + 64
    if soft != resource.RLIM_INFINITY and wanted > soft:
        limit = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    shared = {}
    for address, storage in unique.items():
        try:
            fd, _ = storage._share_fd_cpu_()
        except (RuntimeError, OSError):
            continue
        shared[address] = fd
    return shared


class SideWeights:
    """The last side-weights file a session wrote: where, and each storage's
    `[offset, length]` in it. The storages are kept referenced, so no other
    tensor can take their addresses while the file stands for them."""

    def __init__(self):
        self.path, self.offsets, self.storages = None, {}, []

    def holds(self, keys):
        return (
            self.path is not None
            and os.path.exists(self.path)
            and all(k in self.offsets for k in keys)
        )

    def link(self, to):
        try:
            os.link(self.path, to)
            return True
        except OSError:  # another filesystem, or links refused: written again
            return False

    def remember(self, path, offsets, storages):
        self.path, self.offsets, self.storages = path, dict(offsets), storages
