"""The reference exporter's `pytree registration` stage, and the model output's
leaves and their names.

Caches are outputs (and inputs) of causal LMs; torch.export flattens them
through pytree. One generic flattener: tensors (and still-symbolic ints) are
leaves, everything else a JSON-native context naming classes by
`module:qualname`.
"""

import contextlib
import enum
import importlib
import json
import os

# ── Pytree registration (the reference's `pytree registration` stage) ──


def class_path(cls):
    return f"{cls.__module__}:{cls.__qualname__}"


def class_at(path):
    module, name = path.split(":") if ":" in path else path.rsplit(".", 1)
    owner = importlib.import_module(module)
    for part in name.split("."):
        owner = getattr(owner, part)
    return owner


def flatten_context(obj, leaves):
    """A JSON-native context for `obj`, its tensors (and still-symbolic sizes) collected as
    leaves. The format is the reference exporters' (`{"_t": "tensor", "i": 0}`, ...), so a
    program or spec hfx writes reads back in `ExportedModel.from_pretrained`."""
    import torch

    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if type(obj) is list:
        return [flatten_context(v, leaves) for v in obj]
    if type(obj) is dict:
        if all(type(k) is str for k in obj):
            return {k: flatten_context(v, leaves) for k, v in obj.items()}
        return {"_t": "items", "v": [[k, flatten_context(v, leaves)] for k, v in obj.items()]}
    if isinstance(obj, torch.Tensor):
        leaves.append(obj)
        return {"_t": "tensor", "i": len(leaves) - 1}
    if isinstance(obj, torch.Size):
        return {"_t": "size", "v": list(obj)}
    if isinstance(obj, torch.device):
        return {"_t": "device", "s": str(obj)}
    if isinstance(obj, (torch.dtype, torch.layout)):
        return {
            "_t": "dtype" if isinstance(obj, torch.dtype) else "layout",
            "n": str(obj).removeprefix("torch."),
        }
    if isinstance(obj, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        node = obj.node
        constant = (
            node.maybe_as_bool()
            if isinstance(obj, torch.SymBool)
            else node.maybe_as_float()
            if isinstance(obj, torch.SymFloat)
            else node.maybe_as_int()
        )
        if constant is not None:  # already specialized: a constant, not a leaf
            return constant
        leaves.append(obj)
        return {"_t": "sym", "i": len(leaves) - 1}
    if isinstance(obj, type):
        return {"_t": "type", "p": class_path(obj)}
    if isinstance(obj, dict):
        return {
            "_t": "map",
            "p": class_path(type(obj)),
            "v": {k: flatten_context(v, leaves) for k, v in obj.items()},
        }
    if isinstance(obj, (tuple, list, set, frozenset)):
        return {
            "_t": "seq",
            "p": class_path(type(obj)),
            "v": [flatten_context(v, leaves) for v in obj],
        }
    if hasattr(obj, "__dict__") and not callable(obj):
        return {
            "_t": "obj",
            "p": class_path(type(obj)),
            "s": {k: flatten_context(v, leaves) for k, v in vars(obj).items()},
        }
    raise TypeError(f"cannot flatten a {type(obj).__name__} into a pytree context")


def unflatten_context(ctx, leaves):
    import torch

    if ctx is None or type(ctx) in (bool, int, float, str):
        return ctx
    if type(ctx) is list:
        return [unflatten_context(v, leaves) for v in ctx]
    if type(ctx) is dict and "_t" not in ctx:
        return {k: unflatten_context(v, leaves) for k, v in ctx.items()}
    kind = ctx["_t"]
    if kind == "tensor":
        return leaves[ctx["i"]]
    if kind == "sym":
        # A size the program returns (a static cache's traced batch size): a
        # runtime that gives it back as a 0-dim tensor (ONNX Runtime's array,
        # made a tensor by the component's runner) gives back its number, as
        # eager has it.
        value = leaves[ctx["i"]]
        return value.item() if type(value) is torch.Tensor else value
    if kind == "items":
        return {k: unflatten_context(v, leaves) for k, v in ctx["v"]}
    if kind == "size":
        return torch.Size(ctx["v"])
    if kind == "device":
        return torch.device(ctx["s"])
    if kind in ("dtype", "layout"):
        return getattr(torch, ctx["n"])
    if kind == "type":
        return class_at(ctx["p"])
    cls = class_at(ctx["p"])
    if kind == "seq":
        items = [unflatten_context(v, leaves) for v in ctx["v"]]
        try:
            return cls(items)
        except TypeError:
            return cls(*items)  # a NamedTuple
    if kind == "map":
        return cls({k: unflatten_context(v, leaves) for k, v in ctx["v"].items()})
    instance = cls.__new__(cls)
    for key, value in ctx["s"].items():
        instance.__dict__[key] = unflatten_context(value, leaves)
    return instance


def pytree_flatten(obj):
    leaves = []
    return leaves, flatten_context(obj, leaves)


def pytree_flatten_with_keys(obj):
    import torch

    leaves, context = pytree_flatten(obj)
    return [(torch.utils._pytree.SequenceKey(i), leaf) for i, leaf in enumerate(leaves)], context


def pytree_unflatten(values, context):
    return unflatten_context(context, list(values))


def subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)


def load_exported(path):
    """A `.pt2` as `torch.export.load` gives it, with the pytree types its specs
    may name registered first: transformers' output types (pytree nodes once
    imported) and its caches, and the ops it may call that torch registers
    only on import (`quantized_decomposed.*`, which a PT2E-quantized program
    calls). Nothing in it is unpickled (`no_pickles`)."""
    import torch
    import torch.ao.quantization.fx._decomposed  # noqa: F401
    import transformers.modeling_outputs  # noqa: F401

    register_cache_pytrees()
    with no_pickles(path):
        return torch.export.load(path)


class PickleRefused(Exception):
    """A `.pt2` asked the worker to unpickle something."""


@contextlib.contextmanager
def no_pickles(path):
    """While torch loads the `.pt2` at `path`: every `torch.load` is
    `weights_only=True` (torch's loader falls back to `weights_only=False` for
    sample inputs, and uses it for a weight marked `use_pickle`), and the
    object loaders (`pickle.loads`, `torch._C._pickle_load_obj`) refuse. The
    sample inputs, which hfx never uses, read as none: torch pickles a cache
    object among them, and a program traced with one must still load. The
    host rebuilds every `.pt2` it hands over without such entries; this holds
    for any file that reaches the loader anyway."""
    import torch
    from torch.export.pt2_archive import _package
    from torch.export.pt2_archive.constants import SAMPLE_INPUTS_FILENAME_FORMAT

    load = torch.load
    read_bytes = _package.PT2ArchiveReader.read_bytes
    sample_inputs = SAMPLE_INPUTS_FILENAME_FORMAT.split("{}")[0]

    def without_sample_inputs(self, name):
        return b"" if name.startswith(sample_inputs) else read_bytes(self, name)

    def plain_load(*args, **kwargs):
        if kwargs.get("weights_only") is False:
            raise PickleRefused(
                f"{path}: holds a pickled object; pickled weights are not loaded from untrusted files"
            )
        kwargs["weights_only"] = True
        return load(*args, **kwargs)

    def refused(*_args, **_kwargs):
        raise PickleRefused(
            f"{path}: holds a pickled object; pickled weights are not loaded from untrusted files"
        )

    class NoPickle:
        loads = load_obj = staticmethod(refused)

    saved = (torch.load, _package.pickle, torch._C._pickle_load_obj, read_bytes)
    torch.load, _package.pickle, torch._C._pickle_load_obj, _package.PT2ArchiveReader.read_bytes = (
        plain_load,
        NoPickle,
        refused,
        without_sample_inputs,
    )
    try:
        yield
    finally:
        (
            torch.load,
            _package.pickle,
            torch._C._pickle_load_obj,
            _package.PT2ArchiveReader.read_bytes,
        ) = saved


def load_exported_mapped(path):
    """(program, sources): a `.pt2` hfx wrote for a step of its own with its
    weights left where they are (empty entries, indexed by `<path>.weights.json`
    as `save_with_side_weights` indexes them: `[file, offset, length, stored
    dtype?]`, file 0 named relative to the index, the others absolute or this
    process's shared memory by descriptor), each
    weight a tensor over a private memory map of its file: nothing is read
    until a step touches it. `sources` tells `save_with_side_weights` where
    each mapped storage is, so a program saved from this one indexes those
    weights in place instead of writing them again. Without an index, as
    `load_exported`."""
    import mmap

    import torch
    from torch.export.pt2_archive import _package

    from .checkpoint import Stored

    index_path = path + ".weights.json"
    if not os.path.exists(index_path):
        return load_exported(path), {}
    with open(index_path) as f:
        index = json.load(f)
    maps = []
    for name in index["files"]:
        if isinstance(
            name, dict
        ):  # this process's shared memory (`checkpoint.shared_memory_files`)
            fd = name["caller_fd"]
            size = os.fstat(fd).st_size
            maps.append((name, mmap.mmap(fd, size, access=mmap.ACCESS_COPY) if size else None))
            continue
        file = (
            name
            if os.path.isabs(name)
            else os.path.join(os.path.dirname(os.path.abspath(path)), name)
        )
        with open(file, "rb") as f:
            # ACCESS_COPY: writable to torch (no non-writable-buffer warning), never to the file.
            maps.append(
                (
                    file,
                    mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
                    if os.path.getsize(file)
                    else None,
                )
            )
    sources = {}
    build_file_map = _package._build_file_map
    entries = {"weights/": index.get("weights", {}), "constants/": index.get("constants", {})}

    def mapped_file_map(archive_reader, config, base_dir):
        # torch's own map for what the archive holds; a mapped tensor for each empty
        # entry the index places (the storage a payload's tensors are strided over)
        file_map = build_file_map(archive_reader, config, base_dir)
        table = next(
            (t for d, t in entries.items() if base_dir.rstrip("/").endswith(d.rstrip("/"))), {}
        )
        for fqn, meta in config.config.items():
            place = table.get(fqn)
            if place is None or meta.use_pickle:
                continue
            record = os.path.join(base_dir, meta.path_name)
            if archive_reader.archive_file.get_record_size(record) != 0:
                continue
            file, offset, length = place[:3]
            name, buffer = maps[file]
            if length == 0:
                continue  # no elements: torch's loader made the tensor already
            dtype = _package.deserialize_scalar_type(meta.tensor_meta.dtype)
            stored = getattr(torch, place[3]) if len(place) > 3 else dtype
            flat = torch.frombuffer(
                buffer, dtype=stored, count=length // stored.itemsize, offset=offset
            )
            if stored != dtype:
                flat = flat.to(dtype)  # converted: a tensor of its own (only with --dtype)
            else:
                sources[flat.untyped_storage().data_ptr()] = Stored(
                    name, offset, length, str(dtype).removeprefix("torch."), tuple(flat.shape)
                )
            if meta.tensor_meta.requires_grad:
                flat.requires_grad_(True)
            file_map[meta.path_name] = flat
        return file_map

    _package._build_file_map = mapped_file_map
    try:
        return load_exported(path), sources
    finally:
        _package._build_file_map = build_file_map


# ── The eager reference file ──


def is_constant(value):
    """A kwarg torch.export folds into the program: a scalar (`use_cache=False`,
    `None`) or a list or tuple of them (images' sizes as ints)."""
    if type(value) in (list, tuple):
        return all(is_constant(item) for item in value)
    return value is None or isinstance(value, (bool, int, float, str))


def save_reference(path, inputs, constants, flags, outputs, kept):
    """The eager reference beside a traced program: its inputs, constants,
    output flags, flat outputs and the positions eager keeps of each
    (`sliding_positions`). A structured input (a cache) is stored as
    its tensor leaves and this module's JSON context, so the file loads with
    `torch.load`'s `weights_only` (no pickled objects, no code run on load)."""
    import json

    import torch

    tensors, structured = {}, {}
    for name, value in inputs.items():
        if torch.is_tensor(value):
            tensors[name] = value
        else:
            leaves, context = pytree_flatten(value)
            if not all(torch.is_tensor(leaf) for leaf in leaves):
                raise TypeError(
                    f"input `{name}` holds a symbolic size; the reference keeps tensors only"
                )
            structured[name] = {"leaves": leaves, "context": json.dumps(context)}
    torch.save(
        {
            "inputs": tensors,
            "structured": structured,
            "constants": constants,
            "flags": flags,
            "outputs": outputs,
            "kept": kept,
        },
        path,
    )


def load_reference(path):
    """What `save_reference` wrote, structured inputs rebuilt (their classes
    looked up only in transformers)."""
    import json

    import torch

    reference = torch.load(path, weights_only=True)
    inputs = dict(reference["inputs"])
    for name, stored in reference.get("structured", {}).items():
        context = json.loads(stored["context"])
        for found in class_paths(context):
            if not found.startswith("transformers."):
                raise ValueError(
                    f"{path}: input `{name}` names the class `{found}`, outside transformers"
                )
        inputs[name] = unflatten_context(context, list(stored["leaves"]))
    reference["inputs"] = inputs
    kept = reference.get("kept")
    counts = isinstance(kept, list) and len(kept) == len(reference["outputs"])
    if kept is not None and not (
        counts and all(k is None or (type(k) is int and k >= 0) for k in kept)
    ):
        raise ValueError(f"{path}: `kept` is not a count of positions (or none) per output")
    return reference


def class_paths(context):
    """Every class path a flattened context names."""
    if isinstance(context, list):
        for item in context:
            yield from class_paths(item)
    elif isinstance(context, dict):
        if isinstance(context.get("p"), str):
            yield context["p"]
        for value in context.values():
            yield from class_paths(value)


def register_cache_pytrees(model=None):
    """Every `Cache` subclass (and the model module's own `*Cache` classes) as a pytree node.
    `ModelOutput`s register themselves when transformers defines them. Also needed by whoever
    loads the `.pt2` (the names are `module:qualname`)."""
    import inspect

    import torch
    from transformers.cache_utils import Cache

    found = list(subclasses(Cache))
    if model is not None:
        module = inspect.getmodule(model)
        found += [
            obj
            for _, obj in inspect.getmembers(module, inspect.isclass)
            if obj.__module__ == type(model).__module__ and obj.__name__.endswith("Cache")
        ]
    for cls in found:
        if cls in torch.utils._pytree.SUPPORTED_NODES:
            continue
        torch.utils._pytree.register_pytree_node(
            cls,
            pytree_flatten,
            pytree_unflatten,
            serialized_type_name=class_path(cls),
            flatten_with_keys_fn=pytree_flatten_with_keys,
        )


# ── The model output: its tensor leaves and their names ──


def flat_outputs(output):
    """The tensor leaves of a model output, in the order the exported program returns them."""
    import torch

    with contextlib.suppress(Exception):
        register_cache_pytrees()
    return [leaf for leaf in torch.utils._pytree.tree_leaves(output) if torch.is_tensor(leaf)]


def sliding_positions(output):
    """Per `flat_outputs(output)` leaf: how many positions along the sequence
    eager keeps of it, if it is a sliding-window cache layer's keys or values
    (the layer's window less one), else None. Found by identity."""
    import torch

    def sliding(value):
        window = getattr(value, "sliding_window", None)
        return getattr(type(value), "is_sliding", False) and isinstance(window, int)

    def tensor_or_sliding(value):
        return torch.is_tensor(value) or sliding(value)

    kept = {}
    for _, layer in named_leaves(output, is_leaf=tensor_or_sliding):
        if sliding(layer):
            for name in ("keys", "values"):
                if torch.is_tensor(vars(layer).get(name)):
                    kept[id(vars(layer)[name])] = layer.sliding_window - 1
    return [kept.get(id(leaf)) for leaf in flat_outputs(output)]


def leaf_paths(value, path, out):
    """Dotted paths of the tensor leaves of a model output, in `flat_outputs` order:
    `ModelOutput` fields by name, caches by attribute (the order of the pytree flattener,
    and the reference's `_iter_leaf_tensors` naming)."""
    import torch
    from transformers.utils import ModelOutput

    if torch.is_tensor(value):
        out.append(path)
    elif isinstance(value, ModelOutput):
        for key in value.keys():
            leaf_paths(value[key], f"{path}.{key}" if path else key, out)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            leaf_paths(item, f"{path}.{i}", out)
    elif isinstance(value, dict):
        for key, item in value.items():
            leaf_paths(item, f"{path}.{key}", out)
    elif hasattr(value, "__dict__") and not callable(value):
        for key, item in vars(value).items():
            leaf_paths(item, f"{path}.{key}", out)


def named_leaves(value, path="", is_leaf=None):
    """`(dotted path, tensor)` for every tensor in a call's kwargs, in the
    order torch.export flattens them (this module's flattener: a cache's
    attributes in order): `input_ids`, `cache.layers.0.keys`. The reference's
    `_iter_leaf_tensors`, whose paths name the ONNX inputs. `is_leaf`: what
    counts as a leaf instead of a tensor."""
    import torch

    if (is_leaf or torch.is_tensor)(value):
        yield path or "output", value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from named_leaves(item, f"{path}.{i}" if path else str(i), is_leaf)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from named_leaves(item, f"{path}.{key}" if path else str(key), is_leaf)
    elif (
        hasattr(value, "__dict__")
        and not callable(value)
        and not isinstance(value, (type, enum.Enum))
    ):
        yield from named_leaves(vars(value), path, is_leaf)


class _Slot:
    """A placeholder for one flat leaf of an input spec (see `spec_paths`)."""

    def __init__(self, index):
        self.index = index


def spec_paths(spec):
    """The leaf path (`named_leaves`' naming) of every flat leaf of a
    program's input spec `((), kwargs)`, in order: tensors and the leaves
    torch.export keeps for other inputs (a `None` kwarg: `attention_mask`)."""
    from torch.utils._pytree import tree_unflatten

    _, kwargs = tree_unflatten([_Slot(i) for i in range(spec.num_leaves)], spec)
    found = {
        slot.index: path
        for path, slot in named_leaves(kwargs, is_leaf=lambda v: isinstance(v, _Slot))
    }
    return [found.get(i, f"input_{i}") for i in range(spec.num_leaves)]


def spec_output_names(spec, constants):
    """Names for a program's computed outputs (the leaves of its output `spec`
    but the `constants` indices), as `output_names` names eager's: for a
    program whose output has leaves eager's has not (a size the trace kept
    symbolic: `cache.layers.0.batch_size`)."""
    from torch.utils._pytree import tree_unflatten

    output = tree_unflatten([_Slot(i) for i in range(spec.num_leaves)], spec)
    found = {
        slot.index: path
        for path, slot in named_leaves(output, is_leaf=lambda v: isinstance(v, _Slot))
    }
    return unique(
        [found.get(i, f"output_{i}") for i in range(spec.num_leaves) if i not in constants]
    )


def output_names(output):
    """Names for the flattened outputs, as the reference exporters name them: dotted
    paths (`logits`, `cache.layers.0.keys`, `encoder_last_hidden_state`), unique."""
    paths = []
    leaf_paths(output, "", paths)
    return unique([path.lstrip(".") or "output" for path in paths])


def unique(paths):
    """`paths` as names, a repeated one suffixed `_2`, `_3`, ..."""
    names = []
    for path in paths:
        name, n = path, 1
        while name in names:
            n += 1
            name = f"{path}_{n}"
        names.append(name)
    return names
