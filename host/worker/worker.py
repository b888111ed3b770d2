"""The hfx trace worker: the only place PyTorch model code runs.

The host starts it (`python worker.py`), sends one JSON request per line on
stdin and reads one JSON response per line on stdout; anything the model
prints goes to stderr, which the host keeps for error reports.

    {"id": 1, "method": "hello"}
    {"id": 2, "method": "trace", "params": {...}}

A response is {"id", "result"} or {"id", "error": {"type", "message",
"traceback"}}. The protocol is versioned (PROTOCOL); the host refuses a
worker that speaks another version.
"""

import contextlib
import functools
import importlib
import inspect
import importlib.metadata
import io
import json
import os
import sys
import time
import traceback
import types

PROTOCOL = 1
PACKAGES = ("torch", "transformers", "onnx", "onnxscript", "onnxruntime", "executorch")


def versions():
    found = {}
    for package in PACKAGES:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def hello(_params):
    return {"protocol": PROTOCOL, "python": sys.version.split()[0], "versions": versions()}


# ── Model sources ──

def parse_value(text):
    """`--set` values: JSON where it parses (ints, floats, bools, lists), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def from_architecture(arch, overrides, task):
    import transformers

    config = transformers.AutoConfig.for_model(arch, **{k: parse_value(v) for k, v in overrides.items()})
    if task:
        return built(model_class(task, config), config)
    auto = transformers.AutoModelForCausalLM if arch in CAUSAL_LM else transformers.AutoModel
    return auto.from_config(config)


def model_class(task, config):
    """`--task`: a transformers class (`BertModel`), a dotted path, or a class of the
    architecture's modeling module (`WhisperEncoder`)."""
    import transformers

    if hasattr(transformers, task):
        return getattr(transformers, task)
    if "." in task:
        module, name = task.rsplit(".", 1)
        return getattr(importlib.import_module(module), name)
    kind = config.model_type.replace("-", "_")
    module = importlib.import_module(f"transformers.models.{kind}.modeling_{kind}")
    if not hasattr(module, task):
        raise ValueError(f"--task {task}: not a transformers class, nor one of transformers.models.{kind}")
    return getattr(module, task)


def built(cls, config):
    """A model of class `cls` from `config`: auto classes have `from_config`, models `_from_config`."""
    if hasattr(cls, "from_config"):
        return cls.from_config(config)
    return cls._from_config(config) if hasattr(cls, "_from_config") else cls(config)


def from_directory(path, task):
    import transformers

    config = transformers.AutoConfig.from_pretrained(path)
    if task:
        return model_class(task, config).from_pretrained(path)
    names = getattr(config, "architectures", None) or []
    cls = getattr(transformers, names[0]) if names else transformers.AutoModel
    return cls.from_pretrained(path)


def from_function(spec):
    # python:module:function returning (model, inputs)
    _, module, function = spec.split(":", 2)
    sys.path.insert(0, os.getcwd())
    return getattr(importlib.import_module(module), function)()


CAUSAL_LM = {"llama", "qwen2", "qwen3", "gpt2", "mistral", "phi3", "gemma", "gemma2", "olmo"}


# ── Sample inputs ──

def sample_inputs(model, batch, sequence):
    """Inputs for the architecture; every axis meant to be dynamic has size >= 2
    (torch specializes sizes 0 and 1)."""
    import torch

    config = model.config
    generator = torch.Generator().manual_seed(0)
    main = getattr(model, "main_input_name", "input_ids")
    if main == "input_features":
        # Speech encoders take log-mel frames; their length is fixed by the model (2 x positions).
        frames = 2 * getattr(config, "max_source_positions", 1500)
        return {"input_features": torch.randn(batch, config.num_mel_bins, frames, generator=generator)}
    if main == "pixel_values":
        size = getattr(config, "image_size", 224)
        channels = getattr(config, "num_channels", 3)
        return {"pixel_values": torch.randn(batch, channels, size, size, generator=generator)}
    vocab = getattr(config, "vocab_size", 1000)
    ids = torch.randint(0, vocab, (batch, sequence), generator=generator)
    inputs = {"input_ids": ids, "attention_mask": torch.ones(batch, sequence, dtype=torch.long)}
    if getattr(config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = torch.randint(0, vocab, (batch, sequence), generator=generator)
    return inputs


def dynamic_shapes(inputs, dynamic, explicit):
    """Stage 4 of the reference DynamoExporter: `Dim.AUTO` on every tensor axis
    (batch and sequence), or the explicit `name:axis=min..max` ranges."""
    import torch

    if explicit:
        shapes = {name: ({} if torch.is_tensor(value) else None) for name, value in inputs.items()}
        for spec in explicit:
            name_axis, bounds = spec.split("=")
            name, axis = name_axis.split(":")
            low, high = bounds.split("..")
            shapes[name][int(axis)] = torch.export.Dim(f"{name}_{axis}", min=int(low), max=int(high))
        return shapes
    if not dynamic:
        return None
    auto = torch.export.Dim.AUTO
    return {name: ({axis: auto for axis in range(value.dim())} if torch.is_tensor(value) else None)
            for name, value in inputs.items()}


# ── Stage 2: Patches (answered by WASM plugins through the host) ──

class Host:
    """The channel back to the host while a request is running."""

    def __init__(self, out):
        self.out = out

    def notify(self, message):
        self.out.write(json.dumps(message) + "\n")
        self.out.flush()

    def ask(self, message):
        self.notify(message)
        answer = json.loads(sys.stdin.readline())
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer["program"]


HOST = None


# ── What a patch program may reach: decided on the resolved object ──
#
# The host's `check_program` filters paths as strings first; this is the half
# that decides. Every path is resolved from an importable root through classes
# and attributes only (never through another module, so re-exports such as
# `modeling_llama.torch.os` lead nowhere), and what it resolves to is judged by
# identity: ATen/prims ops, the tensor functions of torch's C namespace and of
# `torch.Tensor`, the functions and classes that live in a pure module (their
# own definitions, found again at their home), and a few named objects. Every
# value a step produces is judged again before it lands in a slot: no module,
# frame, code object or module namespace, and no callable outside the policy.

# Modules a path may start from (imported on demand) and the modeling modules
# of transformers (`transformers.models.<model>.modeling_<name>`).
ROOT_MODULES = (
    "torch", "torch.nn.functional", "torch.fft", "torch.linalg", "torch.special", "torch.return_types",
    "torch.nn.attention", "torch.fx.experimental.symbolic_shapes", "math", "operator", "builtins",
    "transformers.masking_utils", "transformers.cache_utils", "transformers.pytorch_utils",
    "transformers.activations", "transformers.modeling_rope_utils", "transformers.integrations.sdpa_attention",
)
# Modules whose own functions and classes are pure computation on their arguments.
PURE_MODULES = (
    "torch.functional", "torch.nn.functional", "torch.fft", "torch._C._fft", "torch.linalg", "torch._C._linalg",
    "torch.special", "torch._C._special", "torch._C._nn", "torch.return_types", "torch.nn.attention", "math",
    "transformers.masking_utils", "transformers.cache_utils", "transformers.pytorch_utils",
    "transformers.activations", "transformers.modeling_rope_utils", "transformers.integrations.sdpa_attention",
)
# Named objects allowed beyond those rules (resolved once, compared by identity).
NAMED = (
    "builtins.int", "builtins.float", "builtins.bool", "builtins.len", "builtins.min", "builtins.max",
    "builtins.abs", "builtins.range", "builtins.tuple", "builtins.list", "builtins.slice", "builtins.round",
    "builtins.sum", "builtins.divmod", "builtins.pow",
    "torch._check", "torch._check_is_size", "torch._check_with", "torch.sym_min", "torch.sym_max", "torch.sym_int",
    "torch.sym_float", "torch.sym_not", "torch.sym_ite", "torch.sym_sum", "torch.is_tensor",
    "torch.is_floating_point", "torch.is_complex", "torch.Size", "torch.device", "torch.finfo", "torch.iinfo",
    "torch.fx.experimental.symbolic_shapes.guard_or_false", "torch.fx.experimental.symbolic_shapes.guard_or_true",
    "torch.fx.experimental.symbolic_shapes.statically_known_true",
    "torch.fx.experimental.symbolic_shapes.definitely_true", "torch.fx.experimental.symbolic_shapes.definitely_false",
    "torch.fx.experimental.symbolic_shapes.sym_eq",
) + tuple(f"operator.{name}" for name in (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos", "abs", "eq", "ne", "lt", "le", "gt",
    "ge", "and_", "or_", "xor", "not_", "invert", "lshift", "rshift", "matmul", "getitem", "index", "truth",
    "is_", "is_not", "contains",
))
# Objects the rules above would admit but that touch files, processes, global
# state or autograd internals (resolved once, compared by identity).
DENIED = (
    "torch.from_file", "torch.Tensor.storage", "torch.Tensor.untyped_storage", "torch.Tensor.share_memory_",
    "torch.Tensor.set_", "torch.Tensor.record_stream", "torch.Tensor.register_hook",
    "torch.Tensor.register_post_accumulate_grad_hook", "torch.Tensor.backward", "torch.Tensor.pin_memory",
    "torch.Tensor.apply_", "torch.Tensor.map_", "torch.Tensor.map2_", "torch.Tensor.retain_grad",
    "torch.Tensor.module_load", "torch.Tensor.share_memory_", "torch.Tensor.is_shared",
)
# Patch targets may also be the methods of torch's layers and transformers'
# availability probes: their originals run only as the model would run them.
TARGET_MODULE_PREFIXES = ("torch.nn.modules.",)
AVAILABILITY_MODULE = "transformers.utils.import_utils"


def is_modeling_module(name):
    parts = name.split(".")
    return (len(parts) == 4 and parts[:2] == ["transformers", "models"] and parts[2] != "auto"
            and parts[3].startswith("modeling_"))


class Reach:
    """The resolved-object policy, built once per worker (torch imported)."""

    def __init__(self):
        import torch

        self.torch = torch
        self.named = {id(self._walk(path)): path for path in NAMED if self._try_walk(path) is not None}
        self.denied = {id(obj) for obj in map(self._try_walk, DENIED) if obj is not None}
        self.tensor_base = torch._C.TensorBase
        self.variable_functions = torch._C._VariableFunctions

    @staticmethod
    def _walk(path):
        """The object at a trusted path of this file's own lists."""
        parts = path.split(".")
        for split in range(len(parts) - 1, 0, -1):
            try:
                owner = importlib.import_module(".".join(parts[:split]))
            except ImportError:
                continue
            for name in parts[split:]:
                owner = getattr(owner, name)
            return owner
        raise ImportError(path)

    def _try_walk(self, path):
        try:
            return self._walk(path)
        except (AttributeError, ImportError):
            return None

    # Resolution: an importable root, then classes and attributes only.
    def resolve(self, path, root_allowed=lambda name: name in ROOT_MODULES or is_modeling_module(name)):
        """(owner, attribute) of `path`; refuses to pass through a second module."""
        types_module = type(sys)
        parts = path.split(".")
        for split in range(len(parts) - 1, 0, -1):
            root = ".".join(parts[:split])
            if not root_allowed(root):
                continue
            try:
                owner = importlib.import_module(root)
            except ImportError:
                continue
            for name in parts[split:-1]:
                owner = getattr(owner, name)
                if isinstance(owner, types_module):
                    raise PermissionError(f"`{path}` passes through the module `{owner.__name__}`")
            return owner, parts[-1]
        raise PermissionError(f"`{path}` does not start at a module a patch program may use")

    def resolve_op(self, path):
        """The callable or value at `path`, judged by what it is."""
        torch = self.torch
        name = path.removeprefix("torch.ops.")
        if name.startswith(("aten.", "prims.")):
            namespace, op, overload = name.split(".")
            found = getattr(getattr(getattr(torch.ops, namespace), op), overload)
        else:
            owner, attribute = self.resolve(path)
            found = getattr(owner, attribute)
        self.check_value(found, f"`{path}`")
        return found

    # Judgement.
    def home(self, obj):
        """The module an object is defined in: `__module__` names a loaded module
        and the object is found there under its qualified name, or (a function
        the module's name was since rebound away from) its code is that module's."""
        module_name = getattr(obj, "__module__", None)
        qualname = getattr(obj, "__qualname__", None)
        module = sys.modules.get(module_name) if isinstance(module_name, str) else None
        if module is None or not isinstance(qualname, str) or "<" in qualname:
            return None
        owner = module
        for name in qualname.split("."):
            owner = getattr(owner, name, None)
        if owner is obj:
            return module_name
        try:
            code = getattr(inspect.unwrap(obj), "__code__", None)
        except ValueError:  # a `__wrapped__` cycle
            return None
        defined_in = getattr(code, "co_filename", None)
        return module_name if defined_in is not None and defined_in == getattr(module, "__file__", "") else None

    def callable_allowed(self, obj):
        torch = self.torch
        if id(obj) in self.denied:
            return False
        if isinstance(obj, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            return obj.namespace in ("aten", "prims")
        if id(obj) in self.named or id(obj) in INSTALLED_SHIMS:
            return True
        name = getattr(obj, "__name__", None)
        if isinstance(obj, types.BuiltinFunctionType) and isinstance(name, str) and not name.startswith("_"):
            # torch.where, torch.cat, ...: the tensor functions of torch's C namespace.
            if getattr(self.variable_functions, name, None) is obj:
                return True
        if getattr(obj, "__objclass__", None) is self.tensor_base:
            # torch.Tensor.narrow, .to, .size, ...: methods of the C tensor.
            return isinstance(name, str) and not name.startswith("_")
        home = self.home(obj)
        if home is None:
            return False
        last = obj.__qualname__.rsplit(".", 1)[-1]
        if home == "torch._tensor":
            # torch.Tensor.split, ...: methods written in Python.
            return obj.__qualname__.startswith("Tensor.") and not last.startswith("_")
        if home in PURE_MODULES or is_modeling_module(home):
            if isinstance(obj, type):
                return home in ("torch.return_types", "torch.nn.attention") or issubclass(obj, torch.nn.Module)
            return isinstance(obj, (types.FunctionType, types.BuiltinFunctionType))
        return False

    def target_allowed(self, obj):
        """A patch target: its original is what a program's `original` step runs."""
        if self.callable_allowed(obj):
            return True
        home = self.home(obj)
        if home is None:
            return False
        if isinstance(obj, types.FunctionType) and (home.startswith(TARGET_MODULE_PREFIXES) or is_modeling_module(home)):
            return True  # a layer's or a model's own method (NllbMoeTop2Router._cast_classifier)
        # transformers' availability probes (`@lru_cache`d functions answering a bool).
        name = obj.__qualname__
        return (home == AVAILABILITY_MODULE and isinstance(obj, (types.FunctionType, functools._lru_cache_wrapper))
                and name.startswith("is_") and name.endswith("_available"))

    def check_value(self, value, what):
        """Refuses a value no slot may hold; returns it otherwise."""
        torch = self.torch
        if isinstance(value, type(sys)):
            raise PermissionError(f"{what} is a module, not a value a patch program may use")
        if isinstance(value, UNREACHABLE_TYPES):
            raise PermissionError(f"{what} is a {type(value).__name__}, not a value a patch program may use")
        if isinstance(value, dict) and any(value is vars(m) for m in list(sys.modules.values()) if m is not None):
            raise PermissionError(f"{what} is a module's namespace, not a value a patch program may use")
        if isinstance(value, (list, tuple)):
            for item in value:
                self.check_value(item, what)
            return value
        if callable(value) and not torch.is_tensor(value) and not isinstance(value, torch.nn.Module):
            if context_allowed(value):
                return value  # sdpa_kernel(...): a context made by an allowed function
            if not self.callable_allowed(value):
                raise PermissionError(f"{what} ({describe_object(value)}) is not a callable a patch program may use")
        return value


def describe_object(value):
    module = getattr(value, "__module__", None) or type(value).__module__
    qualname = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"{module}.{qualname}"


UNREACHABLE_TYPES = (io.IOBase, types.FrameType, types.CodeType, types.TracebackType, types.GeneratorType, types.CoroutineType,
                     types.AsyncGeneratorType, types.CellType, types.MappingProxyType)

REACH = None


def reach():
    global REACH
    if REACH is None:
        REACH = Reach()
    return REACH


MAX_ATTRIBUTES = 64


def scalar_attributes(value):
    """Public scalar attributes of an object (a module's `eps`, `elementwise_affine`)."""
    found = {}
    for name, attribute in getattr(value, "__dict__", {}).items():
        if len(found) == MAX_ATTRIBUTES:
            break
        if not name.startswith("_") and (attribute is None or isinstance(attribute, (bool, int, float, str))):
            found[name] = attribute
    return found


def size_hint(size):
    """The sample's value of a size (-1 for a data-dependent one)."""
    if isinstance(size, int):
        return size
    hint = getattr(size.node, "hint", None)
    return int(hint) if hint is not None else -1


def describe(values, value):
    """Appends `value` to the call's value table (nested sequences first); returns its slot."""
    import torch
    from torch._prims_common import is_contiguous_or_false

    if isinstance(value, (list, tuple)):
        slots = [describe(values, v) for v in value]
        values.append(({"sequence": slots}, value))
    elif torch.is_tensor(value):
        shape = [d if isinstance(d, int) else {"symbolic": str(d)} for d in value.shape]
        meta = {"dtype": str(value.dtype).replace("torch.", ""), "shape": shape, "device": value.device.type,
                "contiguous": bool(is_contiguous_or_false(value)), "sizes": [size_hint(d) for d in value.shape]}
        values.append(({"tensor": meta}, value))
    elif value is None or isinstance(value, (bool, int, float, str)):
        values.append(({"scalar": value}, value))
    elif isinstance(value, torch.SymInt):
        hint = size_hint(value)
        values.append(({"sym_int": {"expr": str(value), "hint": hint if hint >= 0 else None}}, value))
    elif isinstance(value, torch.dtype):
        values.append(({"dtype": str(value).replace("torch.", "")}, value))
    else:
        values.append(({"object": {"type": type(value).__name__, "attributes": scalar_attributes(value)}}, value))
    return len(values) - 1


def context_allowed(value):
    """`sdpa_kernel(...)`: a context manager made by an allowed `@contextmanager` function."""
    if not isinstance(value, contextlib._GeneratorContextManager):
        return False
    func = getattr(value, "func", None)
    module = sys.modules.get(getattr(func, "__module__", None) or "")
    wrapper = getattr(module, getattr(func, "__name__", ""), None) if module is not None else None
    return getattr(wrapper, "__wrapped__", None) is func and reach().callable_allowed(wrapper)


def checked_attribute(value, name):
    """An attribute is data or a layer, never a bound method, class or module."""
    import torch

    if name.startswith("_"):
        raise PermissionError(f"attribute `{name}` is private")
    found = getattr(value, name)
    if callable(found) and not isinstance(found, torch.nn.Module):
        raise PermissionError(f"attribute `{name}` of {type(value).__name__} is callable; call ops by name instead")
    return reach().check_value(found, f"attribute `{name}` of {type(value).__name__}")


def run_program(program, slots, original, invokable, make_callback):
    """Runs a host-checked program; `invokable` holds the slots a program may call.
    The first `len(slots)` slots are the call's own values (the model's)."""
    import torch

    policy = reach()
    given = len(slots)
    looked_up = set()
    with contextlib.ExitStack() as contexts:
        for index, step in enumerate(program["steps"]):
            kind, body = next(iter(step.items()))
            try:
                if kind in ("call", "original"):
                    function = original if kind == "original" else policy.resolve_op(body["op"])
                    result = function(*[slots[i] for i in body["args"]], **{k: slots[i] for k, i in body["kwargs"]})
                    if kind == "call":
                        result = policy.check_value(result, f"the result of `{body['op']}`")
                elif kind == "invoke":
                    callee = slots[body["callee"]]
                    if body["callee"] not in invokable and not isinstance(callee, torch.nn.Module):
                        raise PermissionError(f"slot {body['callee']} ({type(callee).__name__}) may not be invoked")
                    result = callee(*[slots[i] for i in body["args"]], **{k: slots[i] for k, i in body["kwargs"]})
                    if body["callee"] in looked_up:
                        result = policy.check_value(result, f"the result of slot {body['callee']}")
                elif kind == "getattr":
                    result = checked_attribute(slots[body[0]], body[1])
                elif kind == "item":
                    result = policy.check_value(slots[body[0]][body[1]], f"item {body[1]} of slot {body[0]}")
                elif kind == "constant":
                    result = body
                elif kind == "lookup":
                    result = policy.resolve_op(body)
                    invokable.add(len(slots))
                    looked_up.add(len(slots))
                elif kind == "pack":
                    result = tuple(slots[i] for i in body)
                elif kind == "enter":
                    if body >= given and not context_allowed(slots[body]):
                        raise PermissionError(f"slot {body} ({type(slots[body]).__name__}) is not a context a patch program may enter")
                    result = contexts.enter_context(slots[body])
                elif kind == "callback":
                    result = make_callback(body["target"], [slots[i] for i in body["captured"]])
                    invokable.add(len(slots))
                else:
                    raise ValueError(f"unknown step kind `{kind}`")
            except Exception as error:
                raise PatchProgramError(f"step {index} ({kind}): {type(error).__name__}: {error}") from error
            slots.append(result)
        return slots[program["output"]]


class PatchProgramError(RuntimeError):
    pass


# The shims in place now, by identity: a program may call a path another patch
# replaced (its original passed the target check when the shim was installed).
INSTALLED_SHIMS = {}


def shim(plugin, target, original):
    def patched(*args, **kwargs):
        return answer_call(plugin, target, original, args, kwargs)
    patched.hfx_shim = True
    return patched


def answer_call(plugin, target, original, args, kwargs):
    """Describes the call to the host, which asks the plugin; runs the program it answers."""
    values = []
    arg_slots = [describe(values, a) for a in args]
    kwarg_slots = [[k, describe(values, v)] for k, v in kwargs.items()]
    call = {"plugin": plugin, "target": target, "values": [v for v, _ in values], "args": arg_slots, "kwargs": kwarg_slots}
    program = HOST.ask({"patch_call": call})

    def make_callback(name, captured):
        def callback(*more, **more_kwargs):
            return answer_call(plugin, name, original, (*captured, *more), more_kwargs)
        return callback

    live = [v for _, v in values]
    try:
        return run_program(program, live, original, set(range(len(live))), make_callback)
    except PatchProgramError as error:
        raise PatchProgramError(f"patch plugin `{plugin}` on `{target}`: {error}") from error.__cause__


def target_root(name):
    return name.split(".")[0] in ("torch", "transformers")


def resolve_target(plugin, target):
    """(owner, attribute, original) of a patch target. The original is what the
    plugin's `original` step runs, so it is judged like any callable a program
    reaches; a target outside torch and transformers is never imported."""
    policy = reach()
    try:
        owner, attribute = policy.resolve(target, root_allowed=target_root)
    except PermissionError as error:
        raise PermissionError(f"patch plugin `{plugin}` targets `{target}`: {error}") from None
    original = getattr(owner, attribute)
    if not getattr(original, "hfx_shim", False) and not policy.target_allowed(original):
        raise PermissionError(f"patch plugin `{plugin}` targets `{target}` ({describe_object(original)}), "
                              "which is not a function a patch may replace")
    return owner, attribute, original


@contextlib.contextmanager
def patches_applied(patches):
    """Swaps each target for a shim; restores every original on exit, also on failure.
    An unresolvable target is skipped with a warning, as the reference does; a
    target the policy refuses stops the trace."""
    installed = []
    try:
        for patch in patches:
            for target in patch["targets"]:
                try:
                    owner, attribute, original = resolve_target(patch["plugin"], target)
                except (AttributeError, ImportError):
                    print(f"hfx: patch target {target} not found; skipped", file=sys.stderr)
                    continue
                replacement = shim(patch["plugin"], target, original)
                setattr(owner, attribute, replacement)
                INSTALLED_SHIMS[id(replacement)] = replacement
                installed.append((owner, attribute, original, replacement))
        yield installed
    finally:
        for owner, attribute, original, replacement in reversed(installed):
            setattr(owner, attribute, original)
            INSTALLED_SHIMS.pop(id(replacement), None)


def patch_status(patches):
    """For each target: is the original in place (not one of our shims)?"""
    status = {}
    for patch in patches:
        for target in patch["targets"]:
            try:
                owner, attribute = reach().resolve(target, root_allowed=target_root)
                status[target] = not getattr(getattr(owner, attribute), "hfx_shim", False)
            except (AttributeError, ImportError, PermissionError):
                pass
    return status


# ── Backend preparation: device and dtype ──

def prepared(model, device, dtype_name):
    """The model on the backend's device, in its dtype (cpu/float32 unless asked)."""
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device `{device}` asked for, but this torch has no CUDA device")
    dtype = getattr(torch, dtype_name, None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype `{dtype_name}` is not a floating torch dtype")
    return model.to(device=device, dtype=dtype), device, dtype


def on_device(value, device, dtype):
    """Input tensors follow the model: floating ones take its dtype, all its device."""
    import torch

    if not torch.is_tensor(value):
        return value
    return value.to(device=device, dtype=dtype) if value.is_floating_point() else value.to(device)


# ── Stage 1: Signature ──

OUTPUT_FLAGS = ("use_cache", "output_attentions", "output_hidden_states", "return_dict", "return_loss")


@contextlib.contextmanager
def flat_signature(model, inputs):
    """`forward` with exactly the traced keyword arguments, so `torch.export` does not expand
    `**kwargs` into a bundle that mismatches the dynamic shapes."""
    import inspect

    original = model.forward
    own = "forward" in vars(model)  # a model function may have set an instance forward

    def forward(**kwargs):
        return original(**kwargs)

    forward.__signature__ = inspect.Signature(
        [inspect.Parameter(k, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None) for k in inputs])
    model.forward = forward
    try:
        yield
    finally:
        if own:
            model.forward = original
        else:
            del model.forward  # the class's forward shows again


@contextlib.contextmanager
def config_flags(model, flags):
    """Output flags (`use_cache`, ...) become config values for the trace, not traced inputs."""
    config = getattr(model, "config", None)
    saved = [(k, getattr(config, k)) for k, v in flags.items() if v is not None and hasattr(config, k)]
    for key, _ in saved:
        setattr(config, key, flags[key])
    try:
        yield
    finally:
        for key, value in saved:
            setattr(config, key, value)


# ── Stage 3: Pytree registration ──
# Caches are outputs (and inputs) of causal LMs; torch.export flattens them through
# pytree. One generic flattener: tensors (and still-symbolic ints) are leaves,
# everything else a JSON-native context naming classes by `module:qualname`.

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
        return {"_t": "dtype" if isinstance(obj, torch.dtype) else "layout", "n": str(obj).removeprefix("torch.")}
    if isinstance(obj, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        node = obj.node
        constant = (node.maybe_as_bool() if isinstance(obj, torch.SymBool)
                    else node.maybe_as_float() if isinstance(obj, torch.SymFloat) else node.maybe_as_int())
        if constant is not None:  # already specialized: a constant, not a leaf
            return constant
        leaves.append(obj)
        return {"_t": "sym", "i": len(leaves) - 1}
    if isinstance(obj, type):
        return {"_t": "type", "p": class_path(obj)}
    if isinstance(obj, dict):
        return {"_t": "map", "p": class_path(type(obj)), "v": {k: flatten_context(v, leaves) for k, v in obj.items()}}
    if isinstance(obj, (tuple, list, set, frozenset)):
        return {"_t": "seq", "p": class_path(type(obj)), "v": [flatten_context(v, leaves) for v in obj]}
    if hasattr(obj, "__dict__") and not callable(obj):
        return {"_t": "obj", "p": class_path(type(obj)), "s": {k: flatten_context(v, leaves) for k, v in vars(obj).items()}}
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
    if kind in ("tensor", "sym"):
        return leaves[ctx["i"]]
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
        found += [obj for _, obj in inspect.getmembers(module, inspect.isclass)
                  if obj.__module__ == type(model).__module__ and obj.__name__.endswith("Cache")]
    for cls in found:
        if cls in torch.utils._pytree.SUPPORTED_NODES:
            continue
        torch.utils._pytree.register_pytree_node(
            cls, pytree_flatten, pytree_unflatten, serialized_type_name=class_path(cls),
            flatten_with_keys_fn=pytree_flatten_with_keys)


# ── Stage 5: State cleanup ──

STATEFUL_ATTRIBUTES = (
    "cached_rotary_positional_embedding",  # wav2vec2_bert, seamless_m4t, clvp
    "cached_sequence_length",
)


@contextlib.contextmanager
def clean_state(model):
    """Stateful attributes are emptied for the trace (no stale eager state leaks in) and
    restored after it (no fake tensors the trace planted leak out)."""
    saved = [(m, a, getattr(m, a)) for m in model.modules() for a in STATEFUL_ATTRIBUTES if hasattr(m, a)]
    for module, attribute, _ in saved:
        setattr(module, attribute, None)
    try:
        yield
    finally:
        for module, attribute, value in saved:
            setattr(module, attribute, value)


# ── Trace ──

def flat_outputs(output):
    """The tensor leaves of a model output, in the order the exported program returns them."""
    import torch

    with contextlib.suppress(Exception):
        register_cache_pytrees()
    return [leaf for leaf in torch.utils._pytree.tree_leaves(output) if torch.is_tensor(leaf)]


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


def output_names(output):
    """Names for the flattened outputs, as the reference exporters name them: dotted
    paths (`logits`, `cache.layers.0.keys`, `encoder_last_hidden_state`), unique."""
    paths = []
    leaf_paths(output, "", paths)
    names = []
    for path in paths:
        path = path.lstrip(".") or "output"
        name, n = path, 1
        while name in names:
            n += 1
            name = f"{path}_{n}"
        names.append(name)
    return names


def progress(stage, **fields):
    """A progress line on the protocol: the host shows it while the request runs."""
    if HOST is not None:
        HOST.notify({"progress": {"stage": stage, **fields}})


def peak_rss_mib():
    """The worker's peak resident memory so far (Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def side_weights_supported():
    """Whether this torch's archive writer has the hook `save_with_side_weights` uses."""
    from torch._export.serde import serialize as serde
    from torch.export.pt2_archive import _package

    return all(hasattr(_package, name) for name in ("_get_raw_tensor_bytes", "_is_fake_tensor")) and hasattr(serde, "canonicalize")


def save_with_side_weights(program, output):
    """`torch.export.save` without the weights' bytes, which go to `<output>.weights`
    straight from the tensors' memory (no copy of each storage as a `bytes`, no
    CRC), indexed by `<output>.weights.json` ({"weights"|"constants": {fqn:
    [offset, length]}}, storages 64-byte aligned, shared storages once). For an
    ONNX export, where the `.pt2` is intermediate and the host maps the weights;
    measured on a 125M Llama: torch's `write_record` of the weights was 2.0 s of
    a 2.8 s save, and each storage's `bytes` copy up to 190 MB of peak memory."""
    import torch
    from torch.export.pt2_archive import _package

    index = {"weights": {}, "constants": {}}
    written = {}
    with open(output + ".weights", "wb") as side:
        offset = 0
        for kind, table in (("weights", program.state_dict), ("constants", program.constants)):
            for fqn, value in table.items():
                if not torch.is_tensor(value) or type(value.data) is not torch.Tensor or value.device.type != "cpu":
                    continue  # subclasses and non-cpu tensors stay in the archive, as torch saves them
                storage = value.untyped_storage()
                key = (storage.data_ptr(), storage.nbytes())
                if key not in written:
                    padding = -offset % 64
                    side.write(b"\0" * padding)
                    offset += padding
                    raw = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,))
                    side.write(memoryview(raw.numpy()))
                    written[key] = [offset, storage.nbytes()]
                    offset += storage.nbytes()
                index[kind][fqn] = written[key]
    with open(output + ".weights.json", "w") as f:
        json.dump(index, f)
    raw_bytes = _package._get_raw_tensor_bytes
    side_storages = {pointer for pointer, _ in written}

    def without_side_weights(value):
        # torch asks for each storage group's complete tensor: one written to the side is left empty
        if not _package._is_fake_tensor(value) and value.untyped_storage().data_ptr() in side_storages:
            return b""
        return raw_bytes(value)

    # torch's serializer canonicalizes a deep copy of the program only to test that
    # it can, and drops the result (torch 2.13, serialize.py: "Test canonical form
    # is well defined"): ~1 s on a 125M Llama, for nothing the intermediate needs.
    from torch._export.serde import serialize as serde

    canonicalize = serde.canonicalize
    _package._get_raw_tensor_bytes = without_side_weights
    serde.canonicalize = lambda program, constants=None: program
    try:
        torch.export.save(program, output)
    finally:
        _package._get_raw_tensor_bytes = raw_bytes
        serde.canonicalize = canonicalize


def trace(params):
    started = time.perf_counter()
    progress("import")
    import torch

    imported = time.perf_counter()
    peaks = {"import": peak_rss_mib()}
    torch.manual_seed(params.get("seed", 0))
    progress("build")
    source = params["source"]
    if source["kind"] == "architecture":
        model = from_architecture(source["name"], source.get("overrides", {}), params.get("task"))
        inputs = None
    elif source["kind"] == "directory":
        model = from_directory(source["path"], params.get("task"))
        inputs = None
    else:
        model, inputs = from_function(source["spec"])
    model = model.eval()
    model, device, dtype = prepared(model, params.get("device") or "cpu", params.get("dtype") or "float32")
    if hasattr(model, "set_attn_implementation"):
        with contextlib.suppress(Exception):
            model.set_attn_implementation("sdpa")
    if inputs is None:
        inputs = sample_inputs(model, params.get("batch", 2), params.get("sequence", 8))
    inputs = {k: on_device(v, device, dtype) for k, v in inputs.items()}
    flags = {k: inputs.pop(k) for k in OUTPUT_FLAGS if k in inputs}
    shapes = dynamic_shapes(inputs, params.get("dynamic", False), params.get("dynamic_shapes") or [])
    built = time.perf_counter()
    peaks["build"] = peak_rss_mib()
    patches = params.get("patches") or []
    progress("eager")
    with torch.no_grad(), config_flags(model, flags):
        eager = model(**inputs)
    register_cache_pytrees(model)
    names = output_names(eager)
    eager_output = eager
    eager = flat_outputs(eager)
    if len(names) != len(eager):
        names = [f"output_{i}" for i in range(len(eager))]
    ran = time.perf_counter()
    progress("export")
    with torch.no_grad(), patches_applied(patches), clean_state(model), config_flags(model, flags), \
            flat_signature(model, inputs):
        program = torch.export.export(
            model, (), dict(inputs), dynamic_shapes=shapes, strict=False,
            prefer_deferred_runtime_asserts_over_guards=bool(params.get("dynamic_shapes")),
        )
    if params.get("decompose"):
        progress("decompose")
        program = program.run_decompositions()
    traced = time.perf_counter()
    peaks["export"] = peak_rss_mib()
    progress("save")
    output = params["output"]
    side_weights = bool(params.get("side_weights")) and side_weights_supported()
    if side_weights:
        save_with_side_weights(program, output)
    else:
        torch.export.save(program, output)
    # The eager reference, next to the archive, for later verification.
    torch.save({"inputs": {k: v for k, v in inputs.items() if torch.is_tensor(v)},
                "constants": {k: v for k, v in inputs.items() if not torch.is_tensor(v)},
                "flags": flags, "outputs": eager}, params["reference"])
    if params.get("folder"):
        save_configs(model, params["folder"])
    peaks["save"] = peak_rss_mib()
    # Kept for `verify` at a second input size (generated inputs only).
    LAST_TRACE.update(model=model, flags=flags, device=device, dtype=dtype, generated=source["kind"] != "function",
                      dynamic=bool(params.get("dynamic") or params.get("dynamic_shapes")))
    return {
        "model_class": type(model).__name__,
        "inputs": {k: list(v.shape) for k, v in inputs.items() if torch.is_tensor(v)},
        "outputs": len(eager),
        "output_names": names,
        "export_metadata": export_metadata(model, inputs, program, eager_output),
        "nodes": len(program.graph.nodes),
        "patches_restored": patch_status(patches),
        "versions": versions(),
        "seconds": {"import": imported - started, "build": built - imported, "eager": ran - built,
                    "export": traced - ran, "save": time.perf_counter() - traced},
        "peak_rss_mib": peaks,
        "side_weights": side_weights,
    }


def patches_restored(params):
    return patch_status(params.get("patches") or [])


# ── Export folder: what `ExportedModel.save_pretrained` writes besides the program ──

def describe_kwarg(value):
    import torch

    if torch.is_tensor(value):
        return {"rank": value.dim(), "shape": [int(d) for d in value.shape], "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, dict):
        return {"leaves": {str(k): describe_kwarg(v) for k, v in value.items()}}
    return {"container": type(value).__name__}


def export_metadata(model, inputs, program, output):
    """The fields of the reference's `ExportMetadata` the worker knows: architecture,
    precision, traced kwargs and constants, the input and output pytree specs (the output's
    non-tensor leaves as constants). The host adds the packages and the export config."""
    import torch

    leaves, spec = torch.utils._pytree.tree_flatten(output)
    parameter = next(model.parameters(), None)
    return {
        "architecture": type(model).__name__,
        "export_dtype": str(parameter.dtype if parameter is not None else torch.get_default_dtype()).removeprefix("torch."),
        "export_device": str(parameter.device if parameter is not None else torch.device("cpu")),
        "kwargs": {name: describe_kwarg(value) for name, value in inputs.items()},
        "in_spec": torch.utils._pytree.treespec_dumps(program.call_spec.in_spec),
        "out_spec": torch.utils._pytree.treespec_dumps(spec),
        "in_constants": {k: v for k, v in inputs.items() if v is None or isinstance(v, (bool, int, float, str))},
        "out_constants": [[i, leaf] for i, leaf in enumerate(leaves) if not torch.is_tensor(leaf)],
    }


def save_configs(model, folder):
    """`config.json`, and `generation_config.json` for a model that generates."""
    os.makedirs(folder, exist_ok=True)
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "save_pretrained"):
        config.save_pretrained(folder)
    generation = getattr(model, "generation_config", None)
    if generation is not None and hasattr(model, "can_generate") and model.can_generate():
        generation.save_pretrained(folder)


# ── Verify: the ONNX artifact in ONNX Runtime against eager PyTorch ──

LAST_TRACE = {}


def compared(outputs, eager, atol, rtol):
    """Per output: max abs and rel error, and whether it is within atol/rtol."""
    import numpy as np
    import torch

    if len(outputs) != len(eager):
        raise ValueError(f"the model has {len(outputs)} outputs, eager PyTorch {len(eager)}")
    report = []
    for got, want in zip(outputs, eager):
        want = want.detach().to(torch.float64 if want.is_floating_point() else want.dtype).cpu().numpy()
        got = np.asarray(got)
        if got.shape != want.shape:
            report.append({"shape": list(got.shape), "expected_shape": list(want.shape), "ok": False,
                           "max_abs": None, "max_rel": None})
            continue
        g, w = got.astype(np.float64), want.astype(np.float64)
        diff = np.abs(g - w)
        report.append({
            "shape": list(got.shape),
            "max_abs": float(diff.max()) if diff.size else 0.0,
            "max_rel": float((diff / (np.abs(w) + 1e-12)).max()) if diff.size else 0.0,
            "ok": bool(np.allclose(g, w, atol=atol, rtol=rtol, equal_nan=True)),
        })
    return report


def verify(params):
    """Runs the ONNX model in ONNX Runtime on the recorded inputs (and, for a dynamic
    export of a generated model, on a second input size) and compares with eager."""
    import onnxruntime
    import torch

    atol, rtol = params.get("atol", 1e-3), params.get("rtol", 1e-3)
    session = onnxruntime.InferenceSession(params["onnx"], providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def run(inputs):
        missing = [n for n in names if n not in inputs]
        if missing:
            raise ValueError(f"the ONNX model wants inputs {missing}; the sample has {sorted(inputs)}")
        return session.run(None, {n: inputs[n].detach().cpu().numpy() for n in names})

    ref = torch.load(params["reference"])
    checks = [{"inputs": {k: list(v.shape) for k, v in ref["inputs"].items()},
               "outputs": compared(run(ref["inputs"]), ref["outputs"], atol, rtol)}]
    last = LAST_TRACE
    if params.get("second_size") and last.get("generated") and last.get("dynamic"):
        model = last["model"]
        inputs = {k: on_device(v, last["device"], last["dtype"]) for k, v in sample_inputs(model, 3, 5).items()}
        with torch.no_grad(), config_flags(model, last["flags"]):
            eager = flat_outputs(model(**inputs))
        checks.append({"inputs": {k: list(v.shape) for k, v in inputs.items()}, "outputs": compared(run(inputs), eager, atol, rtol)})
    return {"checks": checks, "providers": session.get_providers()}


METHODS = {"hello": hello, "trace": trace, "patches_restored": patches_restored, "verify": verify}


def main():
    # The protocol owns stdout: anything else printed goes to stderr.
    global HOST
    protocol_out = sys.stdout
    sys.stdout = sys.stderr
    HOST = Host(protocol_out)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            response = {"id": request.get("id"), "result": METHODS[request["method"]](request.get("params") or {})}
        except BaseException as error:  # every failure goes back to the host, typed
            response = {"id": request.get("id"), "error": {
                "type": type(error).__name__, "message": str(error), "traceback": traceback.format_exc()}}
        protocol_out.write(json.dumps(response) + "\n")
        protocol_out.flush()


if __name__ == "__main__":
    main()
