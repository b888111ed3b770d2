"""Runs a program in the host's IR JSON form on given values: the numeric half
of a plugin's self-test (`hfx plugins test`).

The program comes from a plugin's folder, so it is untrusted like the plugin:
a node's target is resolved through the patch sandbox's capability policy
(`Reach`), as a patch program's paths are: an ATen/prims operator overload,
or an entry of the allowlist by identity (the symbolic arithmetic of
`operator`, `math` and `torch.sym_*`); nothing else is imported or called. Sub-graphs (control flow), operators as values and opaque objects are
refused: a captured case is a straight-line piece of a traced program.

Values cross the protocol as `{"tensor": {"dtype", "shape", "data"}}` (data:
base64 of the little-endian bytes, row-major) or `{"int"|"float"|"bool": x}`.
"""

import base64

# IR targets name `operator`'s functions by their C module.
TARGET_ALIASES = {"_operator.": "operator."}


def torch_constant(name, expected):
    """torch's dtype, layout or memory format called `name`, else None: looked up
    in torch's own namespace, where a name torch does not hold yet would make it
    import a submodule (`_dynamo`, `onnx`) just to find it."""
    import torch

    found = vars(torch).get(name) if isinstance(name, str) and not name.startswith("_") else None
    return found if isinstance(found, expected) else None


def decode_value(value):
    import torch

    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError(f"a value is one of tensor, int, float, bool; got {value!r:.80}")
    ((kind, body),) = value.items()
    if kind == "tensor":
        dtype = torch_constant(body["dtype"], torch.dtype)
        if dtype is None:
            raise ValueError(f"unknown dtype `{body['dtype']}`")
        shape = [int(d) for d in body["shape"]]
        data = base64.b64decode(body["data"], validate=True)
        count = 1
        for d in shape:
            count *= d
        if len(data) != count * dtype.itemsize:
            raise ValueError(
                f"a {body['dtype']} tensor of shape {shape} has {count * dtype.itemsize} bytes, not {len(data)}"
            )
        if count == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape).clone()
    if kind == "int" and type(body) is int:
        return body
    if kind == "float" and type(body) in (int, float):
        return float(body)
    if kind == "bool" and type(body) is bool:
        return body
    raise ValueError(f"a value is one of tensor, int, float, bool; got `{kind}`")


def encode_value(value):
    import torch

    if torch.is_tensor(value):
        value = value.detach().contiguous().cpu()
        data = value.reshape(-1).view(torch.uint8).numpy().tobytes() if value.numel() else b""
        return {
            "tensor": {
                "dtype": str(value.dtype).removeprefix("torch."),
                "shape": list(value.shape),
                "data": base64.b64encode(data).decode("ascii"),
            }
        }
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"float": value}
    if isinstance(value, torch.SymInt):
        return {"int": int(value)}
    raise ValueError(f"cannot record a {type(value).__name__}")


def resolve_target(policy, target):
    for alias, name in TARGET_ALIASES.items():
        if target.startswith(alias):
            target = name + target[len(alias) :]
    if target.startswith(("aten.", "prims.")) and target.count(".") != 2:
        raise PermissionError(f"`{target}` is not an operator overload (namespace.op.overload)")
    found = policy.resolve_op(target)
    if not callable(found):
        raise PermissionError(f"`{target}` is not callable")
    return found


def float_of(value):
    if isinstance(value, str):
        return {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}[value]
    return float(value)


def argument(value, env):
    """The Python value of an IR argument, reading graph values from `env`."""
    import torch

    if value == "none":
        return None
    ((kind, body),) = value.items()

    def sym(s, cast):
        ((form, x),) = s.items()
        return env[x] if form == "value" else cast(x)

    simple = {
        "tensor": lambda: env[body],
        "tensors": lambda: [env[v] for v in body],
        "optional_tensors": lambda: [None if v is None else env[v] for v in body],
        "int": lambda: int(body),
        "ints": lambda: [int(v) for v in body],
        "float": lambda: float_of(body),
        "floats": lambda: [float_of(v) for v in body],
        "bool": lambda: bool(body),
        "bools": lambda: [bool(v) for v in body],
        "str": lambda: str(body),
        "strs": lambda: [str(v) for v in body],
        "sym_int": lambda: sym(body, int),
        "sym_ints": lambda: [sym(s, int) for s in body],
        "sym_float": lambda: sym(body, float_of),
        "sym_floats": lambda: [sym(s, float_of) for s in body],
        "sym_bool": lambda: sym(body, bool),
        "sym_bools": lambda: [sym(s, bool) for s in body],
        "device": lambda: torch.device(body["kind"], body.get("index")),
    }
    if kind in simple:
        return simple[kind]()
    if kind in ("dtype", "layout", "memory_format"):
        expected = {
            "dtype": torch.dtype,
            "layout": torch.layout,
            "memory_format": torch.memory_format,
        }[kind]
        found = torch_constant(body, expected)
        if found is None:
            raise ValueError(f"unknown {kind} `{body}`")
        return found
    raise ValueError(f"a `{kind}` argument cannot run in a self-test (straight-line programs only)")


def bind(output, result, env):
    if output == "none":
        return
    ((kind, body),) = output.items()
    if kind == "tensor":
        env[body] = result
    elif kind in ("tensors", "optional_tensors"):
        for v, r in zip(body, result):
            if v is not None:
                env[v] = r
    elif kind in ("sym_int", "sym_float", "sym_bool"):
        ((form, x),) = body.items()
        if form == "value":
            env[x] = result
    else:
        raise ValueError(f"a node output of kind `{kind}` cannot run in a self-test")


def run_graph(policy, graph, inputs):
    """Runs the root graph of `graph` (IR JSON, decoded) on `inputs` (by input
    name); returns its outputs, flat, in order."""
    import torch

    values, nodes, root = graph["values"], graph["nodes"], graph["subgraphs"][0]
    env = {}
    for vid in root["inputs"]:
        name = values[vid]["name"]
        if name not in inputs:
            raise ValueError(f"the case has no value for the graph input `{name}`")
        env[vid] = inputs[name]
    ops = {}
    with torch.no_grad():
        for nid in root["order"]:
            node = nodes[nid]
            target = node["target"]
            if target not in ops:
                ops[target] = resolve_target(policy, target)
            args, kwargs = [], {}
            for named in node["inputs"]:
                v = argument(named["value"], env)
                if named.get("keyword"):
                    kwargs[named["name"]] = v
                else:
                    args.append(v)
            result = ops[target](*args, **kwargs)
            outputs = node["outputs"]
            results = [] if not outputs else [result] if len(outputs) == 1 else list(result)
            for output, r in zip(outputs, results):
                bind(output, r, env)
    flat = []
    for output in root["outputs"]:
        value = argument(output, env)
        flat.extend(value if isinstance(value, list) else [value])
    return flat
