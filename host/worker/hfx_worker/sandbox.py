"""The patch sandbox's deciding half: what a patch program may reach, and the
interpreter that runs a program under that policy.

Security-critical. A patch plugin (WebAssembly, untrusted) answers a patched
call with a straight-line program; the host's `check_program`
(`host/src/trace/patch.rs`) filters its paths as strings, and this module
decides on the resolved objects. Proven by `tests/python/check_reach.py` and
the hostile plugins of `tests/plugins/`; see docs/security.md.

State: the policy (`Reach`) is built once per worker session and holds the
shims installed right now; nothing here is a module-level mutable global.
"""

import contextlib
import dataclasses
import functools
import importlib
import importlib.abc
import importlib.machinery
import inspect
import io
import json
import sys
import types

from .imports import found_then
from .protocol import PatchCall

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
    """The resolved-object policy, built once per worker session (torch imported)."""

    def __init__(self):
        import torch

        self.torch = torch
        # The shims in place now, by identity: a program may call a path another patch
        # replaced (its original passed the target check when the shim was installed).
        self.shims = {}
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
        if id(obj) in self.named or id(obj) in self.shims:
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
            if context_allowed(self, value):
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


def contiguous(value, known):
    """Whether `value` is contiguous at every size its symbols may take (torch's
    `is_contiguous_or_false`, as the reference asks it). That check is
    symbolic algebra (~6 ms a tensor on a 125M Llama) and a trace asks it of
    few layouts many times, so: a layout proven contiguous is remembered in
    `known` by its sizes' and strides' expressions (facts only accumulate
    during a trace: it stays proven), and one not contiguous at the sample's
    sizes is not contiguous at every size, which needs no algebra."""
    from torch._prims_common import is_contiguous_or_false

    if known is None:
        return bool(is_contiguous_or_false(value))
    key = (tuple(map(str, value.shape)), tuple(map(str, value.stride())))
    if key in known:
        return True
    sizes, strides = [size_hint(d) for d in value.shape], [size_hint(d) for d in value.stride()]
    if -1 not in sizes and -1 not in strides and 0 not in sizes:
        expected = 1
        for size, stride in reversed(list(zip(sizes, strides))):
            if size != 1 and stride != expected:
                return False
            expected *= size
    proven = bool(is_contiguous_or_false(value))
    if proven:
        known.add(key)
    return proven


def describe(values, value, known=None):
    """Appends `value` to the call's value table (nested sequences first); returns
    its slot. `known`: layouts whose contiguity was decided (`contiguous`)."""
    import torch

    if isinstance(value, (list, tuple)):
        slots = [describe(values, v, known) for v in value]
        values.append(({"sequence": slots}, value))
    elif torch.is_tensor(value):
        shape = [d if isinstance(d, int) else {"symbolic": str(d)} for d in value.shape]
        meta = {"dtype": str(value.dtype).replace("torch.", ""), "shape": shape, "device": value.device.type,
                "contiguous": contiguous(value, known), "sizes": [size_hint(d) for d in value.shape]}
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


def context_allowed(policy, value):
    """`sdpa_kernel(...)`: a context manager made by an allowed `@contextmanager` function."""
    if not isinstance(value, contextlib._GeneratorContextManager):
        return False
    func = getattr(value, "func", None)
    module = sys.modules.get(getattr(func, "__module__", None) or "")
    wrapper = getattr(module, getattr(func, "__name__", ""), None) if module is not None else None
    return getattr(wrapper, "__wrapped__", None) is func and policy.callable_allowed(wrapper)


def checked_attribute(policy, value, name):
    """An attribute is data or a layer, never a bound method, class or module."""
    import torch

    if name.startswith("_"):
        raise PermissionError(f"attribute `{name}` is private")
    found = getattr(value, name)
    if callable(found) and not isinstance(found, torch.nn.Module):
        raise PermissionError(f"attribute `{name}` of {type(value).__name__} is callable; call ops by name instead")
    return policy.check_value(found, f"attribute `{name}` of {type(value).__name__}")


def run_program(policy, program, slots, original, invokable, make_callback):
    """Runs a host-checked program under `policy`; `invokable` holds the slots a
    program may call. The first `len(slots)` slots are the call's own values (the model's)."""
    import torch

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
                    result = checked_attribute(policy, slots[body[0]], body[1])
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
                    if body >= given and not context_allowed(policy, slots[body]):
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


# ── Patches (the reference's `model patches` stage), answered by WASM plugins through the host ──

class Answers:
    """The programs plugins answered during one trace, by the call exactly as
    the plugin saw it (its described values: kinds, dtypes, static and
    symbolic sizes, scalar values; its argument slots). A call described the
    same way gets the same program without a round trip to the host: the
    plugin saw nothing that could tell the two apart, so its decision stands
    (83 reshape calls of a 125M Llama are one shape of call)."""

    def __init__(self):
        self.programs = {}
        self.hits = 0
        self.layouts = set()  # layouts proven contiguous (`contiguous`)

    def get(self, call, ask):
        try:
            key = json.dumps(dataclasses.asdict(call), sort_keys=True)
        except (TypeError, ValueError):  # a value JSON cannot hold: asked every time
            return ask(call)
        program = self.programs.get(key)
        if program is None:
            program = self.programs[key] = ask(call)
        else:
            self.hits += 1
        return program


def shim(policy, ask, plugin, target, original, answers):
    """The replacement of `target`: each call is answered by the plugin (`ask` sends
    the described call to the host and returns the program it answers), or
    by `answers` where the plugin answered the same call before."""
    def patched(*args, **kwargs):
        return answer_call(policy, ask, plugin, target, original, args, kwargs, answers)
    patched.hfx_shim = True
    return patched


def answer_call(policy, ask, plugin, target, original, args, kwargs, answers):
    """Describes the call to the host, which asks the plugin; runs the program it answers."""
    values = []
    arg_slots = [describe(values, a, answers.layouts) for a in args]
    kwarg_slots = [[k, describe(values, v, answers.layouts)] for k, v in kwargs.items()]
    call = PatchCall(plugin=plugin, target=target, values=[v for v, _ in values], args=arg_slots, kwargs=kwarg_slots)
    program = answers.get(call, ask)

    def make_callback(name, captured):
        def callback(*more, **more_kwargs):
            return answer_call(policy, ask, plugin, name, original, (*captured, *more), more_kwargs, answers)
        return callback

    live = [v for _, v in values]
    try:
        return run_program(policy, program, live, original, set(range(len(live))), make_callback)
    except PatchProgramError as error:
        raise PatchProgramError(f"patch plugin `{plugin}` on `{target}`: {error}") from error.__cause__


def target_root(name):
    return name.split(".")[0] in ("torch", "transformers")


def resolve_target(policy, plugin, target):
    """(owner, attribute, original) of a patch target. The original is what the
    plugin's `original` step runs, so it is judged like any callable a program
    reaches; a target outside torch and transformers is never imported."""
    try:
        owner, attribute = policy.resolve(target, root_allowed=target_root)
    except PermissionError as error:
        raise PermissionError(f"patch plugin `{plugin}` targets `{target}`: {error}") from None
    original = getattr(owner, attribute)
    if not getattr(original, "hfx_shim", False) and not policy.target_allowed(original):
        raise PermissionError(f"patch plugin `{plugin}` targets `{target}` ({describe_object(original)}), "
                              "which is not a function a patch may replace")
    return owner, attribute, original


def unimported_module(path):
    """The first module on `path` that is not imported yet but exists (the
    import system finds it), else None. Nothing is imported to tell."""
    parts = path.split(".")
    owner = sys.modules.get(parts[0])
    if owner is None:
        return parts[0] if importlib.machinery.PathFinder.find_spec(parts[0]) is not None else None
    for depth in range(1, len(parts) - 1):
        name = ".".join(parts[:depth + 1])
        if name in sys.modules:
            owner = sys.modules[name]
            continue
        # An attribute (a class, or what a lazy module makes on first access):
        # the rest of the path resolves as it is now.
        if parts[depth] in vars(owner) or not hasattr(owner, "__path__"):
            return None
        return name if importlib.machinery.PathFinder.find_spec(name, owner.__path__) is not None else None
    return None


class ImportWatch(importlib.abc.MetaPathFinder):
    """Patch targets waiting for their module: each handed to `install`
    right after that module's body has run (first on `sys.meta_path` while
    any waits)."""

    def __init__(self, install):
        self.install = install
        self.waiting = {}  # module not imported yet -> [(plugin, target)] inside it

    def wait(self, module, plugin, target):
        self.waiting.setdefault(module, []).append((plugin, target))

    def find_spec(self, name, path=None, target=None):
        if name not in self.waiting:
            return None
        return found_then(name, path, lambda _module: self.arrived(name))

    def arrived(self, name):
        for plugin, target in self.waiting.pop(name, []):
            self.install(plugin, target)


@contextlib.contextmanager
def patches_applied(policy, patches, ask):
    """Swaps each target of `patches` (`PatchSpec`s) for a shim whose calls `ask`
    answers; restores every original on exit, also on failure.
    An unresolvable target is skipped with a warning, as the reference does; a
    target the policy refuses stops the trace.
    A target in a module not imported yet is not imported to be patched (the
    dynamo set names four model modules a Llama never loads: ~65 ms): it is
    patched if and when that module is imported inside the block.
    A module first imported inside the block may have bound a shim by name
    (`from ..utils import is_kernels_available`): on exit, its original goes
    back there too."""
    installed = []
    imported_before = set(sys.modules)
    answers = Answers()

    def install(plugin, target):
        # A target outside torch and transformers is refused now, imported or not.
        module = unimported_module(target) if target_root(target) else None
        if module is not None:
            watch.wait(module, plugin, target)
            return
        try:
            owner, attribute, original = resolve_target(policy, plugin, target)
        except (AttributeError, ImportError):
            print(f"hfx: patch target {target} not found; skipped", file=sys.stderr)
            return
        replacement = shim(policy, ask, plugin, target, original, answers)
        setattr(owner, attribute, replacement)
        policy.shims[id(replacement)] = replacement
        installed.append((owner, attribute, original, replacement))

    watch = ImportWatch(install)
    try:
        for patch in patches:
            for target in patch.targets:
                install(patch.plugin, target)
        if watch.waiting:
            sys.meta_path.insert(0, watch)
        yield answers
    finally:
        if watch in sys.meta_path:
            sys.meta_path.remove(watch)
        for owner, attribute, original, replacement in reversed(installed):
            setattr(owner, attribute, original)
            policy.shims.pop(id(replacement), None)
        originals = {id(replacement): (replacement, original) for _, _, original, replacement in installed}
        for name in set(sys.modules) - imported_before:
            namespace = getattr(sys.modules.get(name), "__dict__", None)
            for key, value in list(namespace.items()) if isinstance(namespace, dict) else ():
                replacement, original = originals.get(id(value), (None, None))
                if value is replacement:
                    # A shim over a shim (the bound one) unwinds to the first original.
                    while getattr(original, "hfx_shim", False) and id(original) in originals:
                        original = originals[id(original)][1]
                    namespace[key] = original


def patch_status(policy, patches):
    """For each target: is the original in place (not one of our shims)?"""
    status = {}
    for patch in patches:
        for target in patch.targets:
            if unimported_module(target) is not None:
                status[target] = True  # never imported, never patched
                continue
            try:
                owner, attribute = policy.resolve(target, root_allowed=target_root)
                status[target] = not getattr(getattr(owner, attribute), "hfx_shim", False)
            except (AttributeError, ImportError, PermissionError):
                pass
    return status

