"""Python-level programs: a model as data, for a patch plugin's self-tests.

A patch rewrites Python calls (`torch.split`, `Tensor.roll`, a transformers
helper) while torch.export traces, so its test case must be a model whose
forward makes those calls. A case ships with an untrusted plugin and cannot
carry code; it carries a program instead: the calls of a forward in order, as
`torch.fx.symbolic_trace` records them (`capture`), with its parameters and
inputs as values. `build` turns the program back into a module whose forward
makes the same calls, so torch.export traces them with the patch in place.

Every call is decided on the resolved object by the patch sandbox's policy
(`Reach`), at the moment it is made: a function path (`torch.split`) is
resolved again on each call, so the shim a patch installed there is what runs,
and anything the policy refuses stops the program; a method (`x.split`) is one
of `torch.Tensor`'s, called on a tensor; an attribute is data
(`checked_attribute`); every result is checked like a patch program's. A
program may also use layers (`modules`): a layer class of the allowlist's
`layers` (by identity, as every entry), built from constants and, for a
transformers layer, a configuration class of the same section.

    {"nodes": [{"name": "x", "op": "placeholder"},
               {"name": "size", "op": "call_method", "target": "size", "args": [{"node": "x"}, 1]},
               {"name": "half", "op": "call_function", "target": "operator.floordiv", "args": [{"node": "size"}, 2]},
               {"name": "shape", "op": "getattr", "args": [{"node": "x"}, "shape"]},
               {"name": "norm", "op": "call_module", "target": "norm", "args": [{"node": "x"}]},
               {"name": "output", "op": "output", "args": [[{"node": "half"}]]}],
     "parameters": {"weight": {"tensor": {...}}},
     "modules": {"norm": {"class": "transformers.models.llama.modeling_llama.LlamaRMSNorm",
                          "config": "transformers.models.llama.modeling_llama.LlamaConfig",
                          "values": {"hidden_size": 8}, "args": [8]}}}

Arguments: JSON numbers, booleans, strings and null as themselves; lists (as
tuples); `{"node": name}`, `{"ref": path}` (a function or value the policy
allows, such as a mask function), `{"dtype": "float32"}`, `{"device": "cpu"}`,
`{"slice": [start, stop, step]}`, `{"float": "inf" | "-inf" | "nan"}`, `{"ellipsis": null}`.
"""

import functools
import math
import operator

from .graph import decode_value, encode_value, torch_constant
from .sandbox import checked_attribute

OPS = (
    "placeholder",
    "get_attr",
    "call_function",
    "call_method",
    "getattr",
    "call_module",
    "output",
)
# Bounds on what a program may ask the worker to build.
MAX_NODES = 10_000
MAX_DEPTH = 32


class ProgramError(ValueError):
    pass


# ── Capture: a module's forward, symbolic-traced, as data ──


def capture(module, inputs):
    """The program of `module`'s forward (every layer inlined, so its parameters
    are `get_attr` values) and the inputs as values."""
    import torch

    class Inlined(torch.fx.Tracer):
        def is_leaf_module(self, m, qualified_name):
            return False

    graph = Inlined().trace(module, concrete_args=None)
    names = {}
    nodes, parameters = [], {}
    for node in graph.nodes:
        entry = {"name": node.name, "op": node.op}
        if node.op == "placeholder":
            if node.target not in inputs:
                raise ProgramError(f"the forward's argument `{node.target}` has no sample input")
            entry["name"] = node.target
        elif node.op == "get_attr":
            value = operator.attrgetter(node.target)(module)
            key = node.target.replace(".", "_")
            parameters[key] = encode_value(value.detach())
            entry["target"] = key
        elif node.op == "call_function" and node.target is getattr:
            entry["op"] = "getattr"
        elif node.op == "call_function":
            entry["target"] = function_path(node.target)
        elif node.op == "call_method":
            entry["target"] = node.target
        elif node.op == "call_module":
            raise ProgramError(f"`{node.target}` stayed a module call")
        names[node] = entry["name"]
        if node.op != "placeholder":
            entry["args"] = encode_argument(list(node.args), names)
            if node.kwargs:
                entry["kwargs"] = {k: encode_argument(v, names) for k, v in node.kwargs.items()}
        nodes.append(entry)
    used = {n.target for n in graph.nodes if n.op == "placeholder"}
    program = {"nodes": nodes}
    if parameters:
        program["parameters"] = parameters
    return program, {k: encode_value(v) for k, v in inputs.items() if k in used}


def function_path(function):
    """The path model code reaches `function` by: `torch.X`, `torch.nn.functional.X`
    or its home, in that order (a patch replaces the attribute model code looks up)."""
    import torch
    import torch.nn.functional

    name = getattr(function, "__name__", None)
    for prefix, module in (
        ("torch", torch),
        ("torch.nn.functional", torch.nn.functional),
        ("operator", operator),
        ("math", math),
    ):
        if name and getattr(module, name, None) is function:
            return f"{prefix}.{name}"
    module = getattr(function, "__module__", None)
    if module and name:
        return f"{module}.{name}"
    raise ProgramError(f"cannot name the function {function!r}")


def encode_argument(value, names):
    import torch

    if isinstance(value, torch.fx.Node):
        return {"node": names[value]}
    if isinstance(value, (list, tuple)):
        return [encode_argument(v, names) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, slice):
        return {"slice": [encode_argument(v, names) for v in (value.start, value.stop, value.step)]}
    if value is Ellipsis:
        return {"ellipsis": None}
    raise ProgramError(f"cannot record an argument of type {type(value).__name__}")


# ── Build: the program as a module, every call decided when it is made ──


def build(policy, program, inputs):
    """(module, inputs) for `program` and its input values."""

    if not isinstance(program, dict) or not set(program) <= {"nodes", "parameters", "modules"}:
        raise ProgramError("a program is an object of `nodes`, `parameters` and `modules`")
    nodes = program.get("nodes")
    if not isinstance(nodes, list) or not nodes or len(nodes) > MAX_NODES:
        raise ProgramError(f"a program has 1 to {MAX_NODES} nodes")
    seen = set()
    for index, node in enumerate(nodes):
        if (
            not isinstance(node, dict)
            or node.get("op") not in OPS
            or not isinstance(node.get("name"), str)
        ):
            raise ProgramError(
                f"node {index}: expected an object with a `name` and an `op` of {', '.join(OPS)}"
            )
        unknown = set(node) - {"name", "op", "target", "args", "kwargs"}
        if unknown:
            raise ProgramError(f"node {node['name']}: unknown field `{sorted(unknown)[0]}`")
        if node["name"] in seen:
            raise ProgramError(f"node {node['name']}: defined twice")
        seen.add(node["name"])
    if nodes[-1]["op"] != "output" or any(n["op"] == "output" for n in nodes[:-1]):
        raise ProgramError("a program ends with its one `output` node")
    module = program_module_class()(policy, nodes)
    for name, value in (program.get("parameters") or {}).items():
        if not name.isidentifier():
            raise ProgramError(f"parameter `{name}` is not a plain name")
        module.register_buffer(name, decode_value(value))
    for name, spec in (program.get("modules") or {}).items():
        if not name.isidentifier():
            raise ProgramError(f"module `{name}` is not a plain name")
        module.layers[name] = layer(policy, name, spec)
    values = {name: decode_value(value) for name, value in inputs.items()}
    placeholders = [n["name"] for n in nodes if n["op"] == "placeholder"]
    missing = [p for p in placeholders if p not in values]
    if missing:
        raise ProgramError(f"the program's input `{missing[0]}` has no value")
    module.check_references()
    return module.eval(), {p: values[p] for p in placeholders}


def layer(policy, name, spec):
    """A layer: a `torch.nn.Module` class of torch.nn or of a transformers modeling
    module, built from constants, and for a transformers layer its configuration
    (a `PreTrainedConfig` class reached through its modeling module)."""
    import transformers

    fields = {"class", "config", "values", "args", "kwargs"}
    if not isinstance(spec, dict) or not set(spec) <= fields or "class" not in spec:
        raise ProgramError(
            f"module `{name}`: expected `class`, and optionally `config`, `values`, `args` and `kwargs`"
        )
    where = f"module `{name}`"
    cls = layer_class(policy, spec["class"], where)
    args = [constant(a, where) for a in spec.get("args", [])]
    kwargs = {k: constant(v, where) for k, v in (spec.get("kwargs") or {}).items()}
    if "config" in spec:
        owner, attribute = policy.resolve(str(spec["config"]))
        config_class = getattr(owner, attribute)
        if not (
            policy.layer_allowed(config_class)
            and issubclass(config_class, transformers.PreTrainedConfig)
        ):
            raise PermissionError(
                f"{where}: `{spec['config']}` is not a configuration class of the allowlist's layers"
            )
        values = {k: constant(v, where) for k, v in (spec.get("values") or {}).items()}
        for key in values:
            if not config_key_allowed(key):
                raise PermissionError(
                    f"{where}: configuration value `{key}` may name code or files; a case sets sizes and flags only"
                )
        args.insert(0, config_class(**values))
    return cls(*args, **kwargs)


# Configuration keys a case may not set: they name code, kernels or files to load.
CONFIG_KEYS_DENIED = (
    "auto_map",
    "attn_implementation",
    "experts_implementation",
    "trust_remote_code",
    "name_or_path",
    "quantization_config",
    "kernel_config",
)


def config_key_allowed(key):
    return (
        isinstance(key, str)
        and not key.startswith("_")
        and key not in CONFIG_KEYS_DENIED
        and "implementation" not in key
    )


def layer_class(policy, path, where):
    """The layer class at `path`: one of the allowlist's `layers`, by identity."""
    import torch

    owner, attribute = policy.resolve(str(path))
    cls = getattr(owner, attribute)
    if not (policy.layer_allowed(cls) and issubclass(cls, torch.nn.Module)):
        raise PermissionError(f"{where}: `{path}` is not a layer class of the allowlist")
    return cls


def constant(value, where, depth=0):
    """A JSON constant (numbers, strings, booleans, null, lists of them)."""
    if depth > MAX_DEPTH:
        raise ProgramError(f"{where}: nested too deep")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [constant(v, where, depth + 1) for v in value]
    raise ProgramError(f"{where}: a configuration value is a number, string, boolean, null or list")


@functools.cache
def program_module_class():
    """The module class a program builds (made on first use: torch is imported by then)."""
    import torch

    class ProgramModule(torch.nn.Module):
        """Its forward interprets the program's nodes."""

        def __init__(self, policy, nodes):
            super().__init__()
            self.policy = policy
            self.nodes = nodes
            self.layers = torch.nn.ModuleDict()

        def check_references(self):
            """Every `node` argument names an earlier node; every target exists and is allowed."""
            defined = set()
            for node in self.nodes:
                for name in references(node.get("args", []), 0) + references(
                    node.get("kwargs", {}), 0
                ):
                    if name not in defined:
                        raise ProgramError(f"node {node['name']}: `{name}` is not an earlier node")
                op, target = node["op"], node.get("target")
                if op in (
                    "call_function",
                    "call_method",
                    "get_attr",
                    "call_module",
                ) and not isinstance(target, str):
                    raise ProgramError(f"node {node['name']}: `{op}` needs a `target` name")
                if op == "get_attr" and target not in dict(self.named_buffers()):
                    raise ProgramError(f"node {node['name']}: no parameter `{target}`")
                if op == "call_module" and target not in self.layers:
                    raise ProgramError(f"node {node['name']}: no module `{target}`")
                if op == "call_function":
                    self.policy.resolve_op(target)  # refused now rather than mid-trace
                if op == "call_method":
                    tensor_method(self.policy, target)
                defined.add(node["name"])

        def forward(self, **inputs):
            policy = self.policy
            env = {}
            for node in self.nodes:
                op, name = node["op"], node["name"]
                if op == "placeholder":
                    env[name] = inputs[name]
                    continue
                args = argument(policy, node.get("args", []), env, 0)
                kwargs = {
                    k: argument(policy, v, env, 0) for k, v in (node.get("kwargs") or {}).items()
                }
                if op == "output":
                    return args[0]
                where = f"node {name}"
                if op == "get_attr":
                    result = getattr(self, node["target"])
                elif op == "call_function":
                    # Resolved now: the shim a patch installed at this path is what runs.
                    result = policy.resolve_op(node["target"])(*args, **kwargs)
                elif op == "call_method":
                    if not args or not isinstance(args[0], torch.Tensor):
                        raise PermissionError(
                            f"{where}: `{node['target']}` is called on a tensor only"
                        )
                    result = tensor_method(policy, node["target"])(*args, **kwargs)
                elif op == "getattr":
                    if len(args) != 2 or not isinstance(args[1], str) or kwargs:
                        raise ProgramError(
                            f"{where}: `getattr` takes a value and an attribute name"
                        )
                    result = checked_attribute(policy, args[0], args[1])
                else:
                    result = self.layers[node["target"]](*args, **kwargs)
                env[name] = policy.check_value(result, f"the result of {where}")
            raise ProgramError("the program has no output")

    return ProgramModule


def tensor_method(policy, name):
    """`torch.Tensor.<name>` as it is now (a patch's shim included), if the policy allows it."""
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
        raise PermissionError(f"`{name}` is not a public tensor method")
    return policy.resolve_op(f"torch.Tensor.{name}")


def references(value, depth):
    if depth > MAX_DEPTH:
        raise ProgramError("an argument is nested too deep")
    if isinstance(value, dict):
        if set(value) == {"node"}:
            return [value["node"]]
        return [r for v in value.values() for r in references(v, depth + 1)]
    if isinstance(value, list):
        return [r for v in value for r in references(v, depth + 1)]
    return []


def argument(policy, value, env, depth):
    """The Python value of an encoded argument."""
    import torch

    if depth > MAX_DEPTH:
        raise ProgramError("an argument is nested too deep")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return tuple(argument(policy, v, env, depth + 1) for v in value)
    if not isinstance(value, dict) or len(value) != 1:
        raise ProgramError(
            f"an argument is a constant, a list or a one-key object; got {value!r:.80}"
        )
    ((kind, body),) = value.items()
    if kind == "node":
        return env[body]
    if kind == "ref":
        if not isinstance(body, str):
            raise ProgramError("`ref` names a path")
        return policy.resolve_op(body)
    if kind == "dtype":
        dtype = torch_constant(body, torch.dtype)
        if dtype is None:
            raise ProgramError(f"unknown dtype `{body}`")
        return dtype
    if kind == "device":
        return torch.device(str(body))
    if kind == "slice":
        if not isinstance(body, list) or len(body) != 3:
            raise ProgramError("`slice` is [start, stop, step]")
        return slice(*(argument(policy, v, env, depth + 1) for v in body))
    if kind == "float":
        if body not in ("inf", "-inf", "nan"):
            raise ProgramError("`float` is inf, -inf or nan")
        return float(body)
    if kind == "ellipsis":
        return Ellipsis
    raise ProgramError(f"unknown argument kind `{kind}`")
