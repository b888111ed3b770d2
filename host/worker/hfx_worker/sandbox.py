"""The patch sandbox's deciding half: what a patch program may reach, and the
interpreter that runs a program under that policy.

Security-critical. A patch plugin (WebAssembly, untrusted) answers a patched
call with a straight-line program; the host's `check_program`
(`host/src/trace/patch.rs`) filters its paths as strings, and this module
decides on the resolved objects, by capability: the values a call hands a
program and the entries of `allowlist.json`, by identity. Proven by
`tests/python/check_reach.py` (hostile programs, targets, layers, tasks),
`tests/python/check_allowlist.py` (every entry scanned for files, processes,
sockets, imports, pickles and the Hub) and the hostile plugins of
`tests/plugins/`; see docs/security.md.

State: the policy (`Reach`) is built once per worker session and holds the
shims installed right now; nothing here is a module-level mutable global.
"""

import contextlib
import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import io
import json
import math
import os
import sys
import types

from .imports import found_then
from .messages import PatchCall

# ── What a patch program may reach: capabilities, decided on the resolved object ──
#
# The host's `check_program` filters paths as strings first; this is the half
# that decides. A program (a patch plugin's, or a self-test case's) may use the
# values its call hands it (tensors, the module instance, its layers, the
# original) and the entries of one explicit allowlist (`allowlist.json`,
# reviewed like code and scanned by `tests/python/check_allowlist.py`): pure
# functions, classes and tensor methods, each admitted by identity (the object
# a path resolves to is the very object found at the entry's canonical path),
# plus ATen/prims operator overloads as a family. Nothing is admitted for the
# module it lives in. A path starts at a module an entry lives in and goes
# through classes and attributes only (never through another module, so
# re-exports such as `modeling_llama.torch.os` lead nowhere), with no `_` name
# unless the whole path is an entry the allowlist reviews as private, and no
# dunder at all. Every value a step produces is judged again before it lands
# in a slot: no module, frame, code object or module namespace, no callable
# that is not an entry (a bound method never is), no object whose type is not.

ALLOWLIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "allowlist.json")
# The longest error a refusal carries (a recursion must not grow a line without bound).
MAX_MESSAGE = 512
# How deep a program's callbacks may nest (each one a plugin round trip).
MAX_CALLBACK_DEPTH = 16
# The longest dotted path a program may name (the longest entry is ~90).
MAX_PATH = 256


# The operator namespaces admitted by rule (`operator_allowed`): ATen, prims,
# and PT2E quantization's quantize/dequantize ops, which torch registers in
# Python over ATen arithmetic (`torch.ao.quantization.fx._decomposed`,
# imported before one is looked up).
OPERATOR_NAMESPACES = ("aten", "prims", "quantized_decomposed")

# ATen ops the dispatcher knows that map files, reach a process's state, or
# hand out memory nobody wrote (`empty`, a growing `resize_`: whatever the
# allocator held before, the worker's secrets included).
DENIED_OPERATORS = frozenset(
    {
        "from_file",
        "set_",
        "set",
        "seed",
        "manual_seed",
        "initial_seed",
        "Generator",
        "record_stream",
        "share_memory_",
        "pin_memory",
        "is_pinned",
        "to_mkldnn",
        "empty",
        "empty_like",
        "empty_strided",
        "empty_permuted",
        "new_empty",
        "new_empty_strided",
        "resize_",
        "resize_as_",
        "resize_as_sparse_",
        "sparse_resize_",
        "sparse_resize_and_clear_",
    }
)


def attribute_of(owner, name, path):
    """`owner.name`, where a module's attribute is read from its own namespace:
    a lazy module imports a submodule on `getattr` (`torch.onnx` registers ops)."""
    if isinstance(owner, types.ModuleType):
        if name not in vars(owner):
            raise PermissionError(
                f"`{path}` names `{name}`, which `{owner.__name__}` does not hold"
            )
        return vars(owner)[name]
    return getattr(owner, name)


def is_modeling_module(name):
    parts = name.split(".")
    return (
        len(parts) == 4
        and parts[:2] == ["transformers", "models"]
        and parts[2] != "auto"
        and parts[3].startswith("modeling_")
    )


def bounded(message):
    """One line of at most `MAX_MESSAGE` characters."""
    line = " ".join(str(message).split())
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 15] + " … (truncated)"


def load_allowlist(path=ALLOWLIST):
    """The allowlist as {section: {canonical path: module}}: `call` (what a program
    may call or look up), `layers` (what a program case may build), `targets`
    (what a patch may replace besides `call` entries); `private` the `_` paths reviewed."""
    with open(path, encoding="utf-8") as file:
        data = json.load(file)
    sections = {}
    for section in ("call", "layers", "targets"):
        sections[section] = {
            f"{module}.{name}": module for module, names in data[section].items() for name in names
        }
    sections["private"] = dict(data["private"])
    sections["target_roots"] = list(data["target_roots"])
    return sections


def private_segment(path):
    return any(part.startswith("_") for part in path.split("."))


def dunder_segment(path):
    return any(part.startswith("__") or part.endswith("__") for part in path.split("."))


class Reach:
    """The capability policy, built once per worker session (torch imported).

    Entries are resolved lazily, when their module has been imported (the
    policy never imports a modeling module to build itself), and kept by
    identity; a program's path imports only a module an entry lives in."""

    def __init__(self, allowlist=ALLOWLIST):
        import torch

        self.torch = torch
        self.sections = load_allowlist(allowlist)
        self.private = self.sections["private"]
        # The shims in place now, by identity: a program may call a path another patch
        # replaced (its original passed the target check when the shim was installed).
        self.shims = {}
        # id -> (object, path), per section; `pending` what is not resolved yet.
        self.admitted = {section: {} for section in ("call", "layers", "targets")}
        self.pending = {
            section: dict(self.sections[section]) for section in ("call", "layers", "targets")
        }
        self.roots = {
            module for section in ("call", "layers") for module in self.sections[section].values()
        }
        self.target_roots = (
            set(self.sections["target_roots"]) | set(self.sections["targets"].values()) | self.roots
        )
        self.value_types = (
            bool,
            int,
            float,
            complex,
            str,
            type(None),
            torch.dtype,
            torch.memory_format,
            torch.layout,
            torch.device,
            torch.SymInt,
            torch.SymFloat,
            torch.SymBool,
        )

    # Entries: resolved when their module is loaded, refused if they are not what an entry may be.
    def entry_object(self, path, module_name):
        """The object at an entry's canonical path, or None while its module is not imported."""
        module = sys.modules.get(module_name)
        if module is None:
            return None
        owner = module
        for index, name in enumerate(path[len(module_name) + 1 :].split(".")):
            # From the module, its own namespace only (a lazy module would import on getattr).
            owner = vars(owner).get(name) if index == 0 else getattr(owner, name, None)
            if owner is None or isinstance(owner, types.ModuleType):
                return None
        return owner

    def settle(self, section):
        """Resolves the entries of `section` whose module is imported now."""
        pending = self.pending[section]
        for path, module_name in list(pending.items()):
            obj = self.entry_object(path, module_name)
            if obj is None or id(obj) in self.shims:
                continue  # not imported yet, or a shim stands there now: the original is the entry
            del pending[path]
            problem = entry_problem(path, obj, self.private)
            if problem is not None:
                raise RuntimeError(f"allowlist entry `{path}`: {problem}")
            self.admitted[section][id(obj)] = (obj, path)

    def entry(self, obj, sections=("call",)):
        """The canonical path of the entry `obj` is (by identity), else None."""
        for section in sections:
            found = self.admitted[section].get(id(obj))
            if found is None and self.pending[section]:
                self.settle(section)
                found = self.admitted[section].get(id(obj))
            if found is not None and found[0] is obj:
                return found[1]
        return None

    # Resolution: an entry's module, then classes and attributes only.
    def check_path(self, path):
        if (
            not isinstance(path, str)
            or not path
            or len(path) > MAX_PATH
            or any(not p.isidentifier() for p in path.split("."))
        ):
            raise PermissionError(
                f"`{path!s:.80}` is not a dotted path of at most {MAX_PATH} characters"
            )
        if dunder_segment(path):
            raise PermissionError(f"`{path}` names a dunder attribute")
        if private_segment(path) and path not in self.private:
            raise PermissionError(f"`{path}` names a private (`_`) attribute")

    def resolve(self, path, root_allowed=None):
        """(owner, attribute) of `path`; refuses to pass through a second module."""
        self.check_path(path)
        root_allowed = root_allowed or self.roots.__contains__
        parts = path.split(".")
        for split in range(len(parts) - 1, 0, -1):
            root = ".".join(parts[:split])
            if not root_allowed(root):
                continue
            owner = importlib.import_module(root)
            for name in parts[split:-1]:
                owner = attribute_of(owner, name, path)
                if isinstance(owner, types.ModuleType):
                    raise PermissionError(f"`{path}` passes through the module `{owner.__name__}`")
                if not isinstance(owner, type):
                    # Only a class's attributes are walked: an object's (a logger's handlers) never.
                    raise PermissionError(
                        f"`{path}` passes through `{name}`, a {type(owner).__name__}, not a class"
                    )
            return owner, parts[-1]
        raise PermissionError(f"`{path}` does not start at a module of the allowlist")

    def resolve_op(self, path):
        """The callable or value at `path`, judged by what it is."""
        torch = self.torch
        if not isinstance(path, str):
            raise PermissionError("a path is a string")
        name = path.removeprefix("torch.ops.")
        if name.startswith(tuple(f"{n}." for n in OPERATOR_NAMESPACES)):
            namespace, _, rest = name.partition(".")
            if namespace == "quantized_decomposed":
                importlib.import_module("torch.ao.quantization.fx._decomposed")
            parts = rest.split(".")
            if len(parts) != 2 or not all(
                p.isidentifier() and not p.startswith("__") for p in parts
            ):
                raise PermissionError(
                    f"`{path}` is not an operator overload (namespace.op.overload)"
                )
            found = getattr(getattr(getattr(torch.ops, namespace), parts[0]), parts[1])
            if not self.operator_allowed(found):
                raise PermissionError(
                    f"`{path}` is not an ATen operator a patch program may call (an effect, a file, a storage or an unchecked internal)"
                )
        else:
            owner, attribute = self.resolve(path)
            found = attribute_of(owner, attribute, path)
        self.check_value(found, f"`{path}`", looked_up=True)
        return found

    # Judgement.
    def home(self, obj):
        """The module an object is found in under its qualified name, else None."""
        module_name = getattr(obj, "__module__", None)
        qualname = getattr(obj, "__qualname__", None)
        module = sys.modules.get(module_name) if isinstance(module_name, str) else None
        if module is None or not isinstance(qualname, str) or "<" in qualname:
            return None
        owner = module
        for name in qualname.split("."):
            owner = getattr(owner, name, None)
        return module_name if owner is obj else None

    def is_operator(self, obj):
        torch = self.torch
        return (
            isinstance(obj, (torch._ops.OpOverload, torch._ops.OpOverloadPacket))
            and obj.namespace in OPERATOR_NAMESPACES
        )

    def operator_allowed(self, obj):
        """An ATen or prims operator that only computes. `torch.ops.aten` also
        holds TorchScript's builtins (`_print` writes to fd 1, `manual_seed`,
        `set_grad_enabled`), which the dispatcher does not know; factories that
        map files (`from_file`); ops over storages (`set_`); and unchecked
        internals (`_reshape_alias` reads past its storage). An overload must be
        a dispatcher op with no `Storage` argument, not denied by name, and a
        `_` op only if it is core ATen (the set PyTorch defines for backends)
        or the allowlist's `private` map reviews it; a packet only if every
        overload is."""
        torch = self.torch
        if not self.is_operator(obj):
            return False
        overloads = (
            [getattr(obj, name) for name in obj.overloads()]
            if isinstance(obj, torch._ops.OpOverloadPacket)
            else [obj]
        )
        return bool(overloads) and all(self.overload_allowed(op) for op in overloads)

    def overload_allowed(self, op):
        schema = op._schema
        namespace, _, base = schema.name.partition("::")
        if base in DENIED_OPERATORS:
            return False
        if (
            base.startswith("_")
            and self.torch.Tag.core not in op.tags
            and f"{namespace}.{base}" not in self.private
        ):
            return False
        if any("Storage" in str(argument.type) for argument in schema.arguments):
            return False
        try:
            self.torch._C._dispatch_find_schema_or_throw(schema.name, schema.overload_name)
        except RuntimeError:
            return False  # a TorchScript builtin
        return True

    def callable_allowed(self, obj):
        return self.operator_allowed(obj) or id(obj) in self.shims or self.entry(obj) is not None

    def target_allowed(self, obj):
        """A patch target: an entry, or one of `targets` (its original runs only as the model would run it)."""
        return self.callable_allowed(obj) or self.entry(obj, ("targets",)) is not None

    def layer_allowed(self, obj):
        """A layer or configuration class a program case may build."""
        return isinstance(obj, type) and self.entry(obj, ("layers",)) is not None

    def check_value(self, value, what, depth=0, looked_up=False):
        """Refuses a value no slot may hold; returns it otherwise. A value a path
        resolves to (`looked_up`) must be plain data, an entry or a value of an
        entry's class; a value a step produced may also be another object (a
        model output, a configuration), whose callables stay refused."""
        torch = self.torch
        if depth > 8:
            raise PermissionError(f"{what} nests deeper than 8")
        if isinstance(value, types.ModuleType):
            raise PermissionError(f"{what} is a module, not a value a patch program may use")
        if isinstance(value, UNREACHABLE_TYPES):
            raise PermissionError(
                f"{what} is a {type(value).__name__}, not a value a patch program may use"
            )
        if isinstance(value, dict) and any(
            value is vars(m) for m in list(sys.modules.values()) if m is not None
        ):
            raise PermissionError(
                f"{what} is a module's namespace, not a value a patch program may use"
            )
        if isinstance(value, (list, tuple)):
            for item in value:
                self.check_value(item, what, depth + 1, looked_up)
            return value
        if (
            torch.is_tensor(value)
            or isinstance(value, torch.nn.Module)
            or isinstance(value, self.value_types)
        ):
            return value
        if callable(value):
            if context_allowed(self, value):
                return value  # sdpa_kernel(...): a context made by an allowed function
            if not self.callable_allowed(value):
                raise PermissionError(
                    f"{what} ({describe_object(value)}) is not a callable of the allowlist"
                )
            return value
        if not looked_up or self.entry(value) is not None or self.entry(type(value)) is not None:
            return value  # SDPBackend.MATH: an entry, or a value of an entry's class
        raise PermissionError(
            f"{what} is a {describe_object(type(value))}, not a value a patch program may use"
        )


def entry_problem(path, obj, private):
    """Why `obj` cannot be an allowlist entry, else None."""
    if dunder_segment(path) or (private_segment(path) and path not in private):
        return "a private or dunder name that the allowlist does not review"
    if isinstance(obj, (types.MethodType, classmethod, staticmethod)):
        return "a bound method (or a class/static method object)"
    self_of = getattr(obj, "__self__", None)
    if (
        isinstance(obj, types.BuiltinFunctionType)
        and self_of is not None
        and not isinstance(self_of, (types.ModuleType, type))
    ):
        return "a bound builtin method"
    if isinstance(obj, types.ModuleType):
        return "a module"
    return None


def describe_object(value):
    module = getattr(value, "__module__", None) or type(value).__module__
    qualname = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"{module}.{qualname}"


UNREACHABLE_TYPES = (
    io.IOBase,
    types.FrameType,
    types.CodeType,
    types.TracebackType,
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
    types.CellType,
    types.MappingProxyType,
)

MAX_ATTRIBUTES = 64


def scalar_attributes(value):
    """Public scalar attributes of an object (a module's `eps`, `elementwise_affine`)."""
    found = {}
    for name, attribute in getattr(value, "__dict__", {}).items():
        if len(found) == MAX_ATTRIBUTES:
            break
        if not name.startswith("_") and (
            attribute is None or isinstance(attribute, (bool, int, float, str))
        ):
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
        meta = {
            "dtype": str(value.dtype).replace("torch.", ""),
            "shape": shape,
            "device": value.device.type,
            "contiguous": contiguous(value, known),
            "sizes": [size_hint(d) for d in value.shape],
        }
        values.append(({"tensor": meta}, value))
    elif isinstance(value, float) and not math.isfinite(value):
        # The host's JSON has no inf or NaN (Mamba2 passes its step limit as
        # `(0.0, inf)`): an opaque value, which a program can still pass on.
        values.append(({"object": {"type": "float", "attributes": {}}}, value))
    elif value is None or isinstance(value, (bool, int, float, str)):
        values.append(({"scalar": value}, value))
    elif isinstance(value, torch.SymInt):
        hint = size_hint(value)
        values.append(
            ({"sym_int": {"expr": str(value), "hint": hint if hint >= 0 else None}}, value)
        )
    elif isinstance(value, torch.dtype):
        values.append(({"dtype": str(value).replace("torch.", "")}, value))
    else:
        values.append(
            (
                {"object": {"type": type(value).__name__, "attributes": scalar_attributes(value)}},
                value,
            )
        )
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
        raise PermissionError(
            f"attribute `{name}` of {type(value).__name__} is callable; call ops by name instead"
        )
    return policy.check_value(found, f"attribute `{name}` of {type(value).__name__}")


def run_program(policy, program, slots, original, invokable, make_callback):
    """Runs a host-checked program under `policy`; `invokable` holds the slots a
    program may call. The first `len(slots)` slots are the call's own values (the model's)."""
    import torch

    given = len(slots)
    with contextlib.ExitStack() as contexts:
        for index, step in enumerate(program["steps"]):
            kind, body = next(iter(step.items()))
            try:
                if kind in ("call", "original"):
                    function = original if kind == "original" else policy.resolve_op(body["op"])
                    result = function(
                        *[slots[i] for i in body["args"]],
                        **{k: slots[i] for k, i in body["kwargs"]},
                    )
                    what = "the original" if kind == "original" else f"`{body['op']}`"
                    result = policy.check_value(result, f"the result of {what}")
                elif kind == "invoke":
                    callee = slots[body["callee"]]
                    if body["callee"] not in invokable and not isinstance(callee, torch.nn.Module):
                        raise PermissionError(
                            f"slot {body['callee']} ({type(callee).__name__}) may not be invoked"
                        )
                    result = callee(
                        *[slots[i] for i in body["args"]],
                        **{k: slots[i] for k, i in body["kwargs"]},
                    )
                    result = policy.check_value(result, f"the result of slot {body['callee']}")
                elif kind == "getattr":
                    result = checked_attribute(policy, slots[body[0]], body[1])
                elif kind == "item":
                    result = policy.check_value(
                        slots[body[0]][body[1]], f"item {body[1]} of slot {body[0]}"
                    )
                elif kind == "constant":
                    result = body
                elif kind == "lookup":
                    result = policy.resolve_op(body)
                    invokable.add(len(slots))
                elif kind == "pack":
                    result = tuple(slots[i] for i in body)
                elif kind == "enter":
                    if body >= given and not context_allowed(policy, slots[body]):
                        raise PermissionError(
                            f"slot {body} ({type(slots[body]).__name__}) is not a context a patch program may enter"
                        )
                    result = contexts.enter_context(slots[body])
                elif kind == "callback":
                    result = make_callback(body["target"], [slots[i] for i in body["captured"]])
                    invokable.add(len(slots))
                else:
                    raise ValueError(f"unknown step kind `{kind}`")
            except PatchProgramError:
                raise  # a callback's own program failed: its line already says which step, not wrapped per level
            except RecursionError:
                raise PatchProgramError(
                    f"step {index} ({kind}): RecursionError: the program recursed too deep"
                ) from None
            except Exception as error:
                raise PatchProgramError(
                    bounded(f"step {index} ({kind}): {type(error).__name__}: {error}")
                ) from error
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


def answer_call(policy, ask, plugin, target, original, args, kwargs, answers, depth=0):
    """Describes the call to the host, which asks the plugin; runs the program it answers."""
    values = []
    arg_slots = [describe(values, a, answers.layouts) for a in args]
    kwarg_slots = [[k, describe(values, v, answers.layouts)] for k, v in kwargs.items()]
    call = PatchCall(
        plugin=plugin,
        target=target,
        values=[v for v, _ in values],
        args=arg_slots,
        kwargs=kwarg_slots,
    )
    program = answers.get(call, ask)

    def make_callback(name, captured):
        def callback(*more, **more_kwargs):
            if depth >= MAX_CALLBACK_DEPTH:
                raise PermissionError(
                    f"callbacks nest deeper than {MAX_CALLBACK_DEPTH} (a callback that calls itself?)"
                )
            return answer_call(
                policy,
                ask,
                plugin,
                name,
                original,
                (*captured, *more),
                more_kwargs,
                answers,
                depth + 1,
            )

        return callback

    live = [v for _, v in values]
    try:
        return run_program(policy, program, live, original, set(range(len(live))), make_callback)
    except PatchProgramError as error:
        if depth:
            raise  # the outermost call names plugin and target, once
        raise PatchProgramError(
            bounded(f"patch plugin `{plugin}` on `{target}`: {error}")
        ) from error.__cause__


def target_root(name):
    return name.split(".")[0] in ("torch", "transformers")


def target_module(policy):
    """The modules a target path may start at: the allowlist's, and transformers'
    modeling modules (a patch replaces the name model code looks up there)."""
    return lambda root: root in policy.target_roots or is_modeling_module(root)


def resolve_target(policy, plugin, target):
    """(owner, attribute, original) of a patch target. The original is what the
    plugin's `original` step runs, so it is judged like any callable a program
    reaches; a target outside torch and transformers is never imported."""
    try:
        owner, attribute = policy.resolve(target, root_allowed=target_module(policy))
    except PermissionError as error:
        raise PermissionError(f"patch plugin `{plugin}` targets `{target}`: {error}") from None
    original = getattr(owner, attribute)
    if id(original) not in policy.shims and not policy.target_allowed(original):
        raise PermissionError(
            f"patch plugin `{plugin}` targets `{target}` ({describe_object(original)}), "
            "which is not a function of the allowlist a patch may replace"
        )
    return owner, attribute, original


def unimported_module(path):
    """The first module on `path` that is not imported yet but exists (the
    import system finds it), else None. Nothing is imported to tell."""
    parts = path.split(".")
    owner = sys.modules.get(parts[0])
    if owner is None:
        return parts[0] if importlib.machinery.PathFinder.find_spec(parts[0]) is not None else None
    for depth in range(1, len(parts) - 1):
        name = ".".join(parts[: depth + 1])
        if name in sys.modules:
            owner = sys.modules[name]
            continue
        # An attribute (a class, or what a lazy module makes on first access):
        # the rest of the path resolves as it is now.
        if parts[depth] in vars(owner) or not hasattr(owner, "__path__"):
            return None
        return (
            name
            if importlib.machinery.PathFinder.find_spec(name, owner.__path__) is not None
            else None
        )
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
        originals = {
            id(replacement): (replacement, original) for _, _, original, replacement in installed
        }
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
                owner, attribute = policy.resolve(target, root_allowed=target_module(policy))
                status[target] = not getattr(getattr(owner, attribute), "hfx_shim", False)
            except (AttributeError, ImportError, PermissionError):
                pass
    return status
