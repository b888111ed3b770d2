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
import importlib
import importlib.metadata
import io
import json
import os
import sys
import time
import traceback

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
    auto = getattr(transformers, task) if task else None
    if auto is None:
        auto = transformers.AutoModelForCausalLM if arch in CAUSAL_LM else transformers.AutoModel
    return auto.from_config(config)


def from_directory(path, task):
    import transformers

    config = transformers.AutoConfig.from_pretrained(path)
    if task:
        return getattr(transformers, task).from_pretrained(path)
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
    if main == "pixel_values":
        size = getattr(config, "image_size", 224)
        channels = getattr(config, "num_channels", 3)
        return {"pixel_values": torch.randn(batch, channels, size, size, generator=generator)}
    vocab = getattr(config, "vocab_size", 1000)
    ids = torch.randint(0, vocab, (batch, sequence), generator=generator)
    inputs = {"input_ids": ids, "attention_mask": torch.ones(batch, sequence, dtype=torch.long)}
    if getattr(config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = torch.randint(0, vocab, (batch, sequence), generator=generator)
    if hasattr(config, "use_cache"):
        # No KV-cache outputs: caches need pytree registration (the reference's stage 3), not here yet.
        inputs["use_cache"] = False
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
    return {name: ({axis: auto for axis in range(min(value.dim(), 2))} if torch.is_tensor(value) else None)
            for name, value in inputs.items()}


# ── Stage 2: Patches (answered by WASM plugins through the host) ──

class Host:
    """The channel back to the host while a request is running."""

    def __init__(self, out):
        self.out = out

    def ask(self, message):
        self.out.write(json.dumps(message) + "\n")
        self.out.flush()
        answer = json.loads(sys.stdin.readline())
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer["program"]


HOST = None


def resolve(path):
    """`torch.where` → (torch, "where"); `torch.Tensor.split` → (torch.Tensor, "split")."""
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:-1]:
            owner = getattr(owner, name)
        return owner, parts[-1]
    raise AttributeError(path)


def describe(values, value):
    """Appends `value` to the call's value table (nested sequences first); returns its slot."""
    import torch

    if isinstance(value, (list, tuple)):
        slots = [describe(values, v) for v in value]
        values.append(({"sequence": slots}, value))
    elif torch.is_tensor(value):
        shape = [d if isinstance(d, int) else {"symbolic": str(d)} for d in value.shape]
        meta = {"dtype": str(value.dtype).replace("torch.", ""), "shape": shape, "device": value.device.type}
        values.append(({"tensor": meta}, value))
    elif value is None or isinstance(value, (bool, int, float, str)):
        values.append(({"scalar": value}, value))
    elif isinstance(value, torch.SymInt):
        values.append(({"sym_int": str(value)}, value))
    else:
        values.append(({"object": type(value).__name__}, value))
    return len(values) - 1


def resolve_op(name):
    import torch

    name = name.removeprefix("torch.ops.")
    if name.startswith("aten."):
        namespace, op, overload = name.split(".")
        return getattr(getattr(getattr(torch.ops, namespace), op), overload)
    owner, attribute = resolve(name)
    return getattr(owner, attribute)


def run_program(program, slots, original):
    for step in program["steps"]:
        kind, body = next(iter(step.items()))
        if kind in ("call", "original"):
            function = original if kind == "original" else resolve_op(body["op"])
            args = [slots[i] for i in body["args"]]
            kwargs = {k: slots[i] for k, i in body["kwargs"]}
            slots.append(function(*args, **kwargs))
        elif kind == "getattr":
            slots.append(getattr(slots[body[0]], body[1]))
        elif kind == "item":
            slots.append(slots[body[0]][body[1]])
        elif kind == "constant":
            slots.append(body)
        elif kind == "pack":
            slots.append(tuple(slots[i] for i in body))
    return slots[program["output"]]


def shim(plugin, target, original):
    def patched(*args, **kwargs):
        values = []
        arg_slots = [describe(values, a) for a in args]
        kwarg_slots = [[k, describe(values, v)] for k, v in kwargs.items()]
        call = {"plugin": plugin, "target": target, "values": [v for v, _ in values], "args": arg_slots, "kwargs": kwarg_slots}
        program = HOST.ask({"patch_call": call})
        return run_program(program, [live for _, live in values], original)
    return patched


@contextlib.contextmanager
def patches_applied(patches):
    """Swaps each target for a shim; restores every original on exit, also on failure.
    An unresolvable target is skipped with a warning, as the reference does."""
    installed = []
    try:
        for patch in patches:
            for target in patch["targets"]:
                try:
                    owner, attribute = resolve(target)
                    original = getattr(owner, attribute)
                except (AttributeError, ImportError):
                    print(f"hfx: patch target {target} not found; skipped", file=sys.stderr)
                    continue
                setattr(owner, attribute, shim(patch["plugin"], target, original))
                installed.append((owner, attribute, original))
        yield installed
    finally:
        for owner, attribute, original in reversed(installed):
            setattr(owner, attribute, original)


def patch_status(patches):
    """For each target: is the original in place (not one of our shims)?"""
    status = {}
    for patch in patches:
        for target in patch["targets"]:
            try:
                owner, attribute = resolve(target)
                status[target] = getattr(getattr(owner, attribute), "__name__", "") != "patched"
            except (AttributeError, ImportError):
                pass
    return status


# ── Trace ──

def flat_outputs(output):
    import torch

    if torch.is_tensor(output):
        return [output]
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    if isinstance(output, (list, tuple)):
        return [t for o in output for t in flat_outputs(o)]
    return []


def trace(params):
    import torch

    torch.manual_seed(params.get("seed", 0))
    started = time.perf_counter()
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
    if hasattr(model, "set_attn_implementation"):
        with contextlib.suppress(Exception):
            model.set_attn_implementation("sdpa")
    if inputs is None:
        inputs = sample_inputs(model, params.get("batch", 2), params.get("sequence", 8))
    shapes = dynamic_shapes(inputs, params.get("dynamic", False), params.get("dynamic_shapes") or [])
    built = time.perf_counter()
    patches = params.get("patches") or []
    with torch.no_grad():
        eager = flat_outputs(model(**inputs))
        with patches_applied(patches):
            program = torch.export.export(
                model, (), inputs, dynamic_shapes=shapes, strict=False,
                prefer_deferred_runtime_asserts_over_guards=bool(params.get("dynamic_shapes")),
            )
    traced = time.perf_counter()
    output = params["output"]
    torch.export.save(program, output)
    # The eager reference, next to the archive, for later verification.
    torch.save({"inputs": {k: v for k, v in inputs.items() if torch.is_tensor(v)},
                "constants": {k: v for k, v in inputs.items() if not torch.is_tensor(v)},
                "outputs": eager}, params["reference"])
    return {
        "model_class": type(model).__name__,
        "inputs": {k: list(v.shape) for k, v in inputs.items() if torch.is_tensor(v)},
        "outputs": len(eager),
        "patches_restored": patch_status(patches),
        "versions": versions(),
        "seconds": {"build": built - started, "trace": traced - built, "save": time.perf_counter() - traced},
    }


def patches_restored(params):
    return patch_status(params.get("patches") or [])


METHODS = {"hello": hello, "trace": trace, "patches_restored": patches_restored}


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
