"""The `verify` request: an artifact in its runtime against eager PyTorch (an
`.onnx` in ONNX Runtime, a `.pt2` as torch.export loads it, a `.pte` in the
ExecuTorch runtime, an OpenVINO IR on OpenVINO's CPU plugin)."""

import contextlib
import copy
import functools
import math
import os
import sys
import tempfile

from .messages import (
    Check,
    Comparison,
    Verify,
    VerifyModelOnnx,
    VerifyModelOpenvino,
    VerifyModelPt2,
    VerifyReply,
)
from .openvino_ir import openvino_runner
from .precompute import precomputed
from .protocol import ArtifactFailed
from .pytree import (
    flat_outputs,
    is_constant,
    load_exported,
    load_reference,
    named_leaves,
    sliding_positions,
)
from .round_trip import int4_weights
from .sources import (
    SECOND_BATCH,
    SECOND_SEQUENCE,
    config_flags,
    on_device,
    reference_attention,
    sample_inputs,
)


def finite_or_none(value):
    """A JSON number, or None for NaN and infinities (the protocol's JSON has neither)."""
    value = float(value)
    return value if math.isfinite(value) else None


def as_numpy(tensor):
    """`tensor` as a numpy array; a floating dtype numpy has not (bfloat16,
    float8) widened to float32, which holds each of its values exactly."""
    import torch

    tensor = tensor.detach().cpu()
    if tensor.is_floating_point() and tensor.dtype not in (
        torch.float16,
        torch.float32,
        torch.float64,
    ):
        tensor = tensor.float()
    return tensor.numpy()


def compared(outputs, eager, atol, rtol, atol_of_max=False, kept=None):
    """Per output: max abs and rel error, and whether it is within atol/rtol
    (`atol_of_max`: max abs within atol times the output's max |eager|).
    `kept`, per output (`sliding_positions`): the positions eager keeps of a
    sliding-window cache layer, which the artifact keeps whole (the layer
    traced as a full one, its window applied by the mask); its last ones are
    compared."""
    import numpy as np
    import torch

    if len(outputs) != len(eager):
        raise ValueError(f"the model has {len(outputs)} outputs, eager PyTorch {len(eager)}")
    report = []
    for got, want, keep in zip(outputs, eager, kept or [None] * len(eager)):
        want = (
            want.detach()
            .to(torch.float64 if want.is_floating_point() else want.dtype)
            .cpu()
            .numpy()
        )
        got = np.asarray(got)
        shape, trailing = list(got.shape), None
        if keep is not None and window_of(got.shape, want.shape, keep):
            got, trailing = got[..., -want.shape[-2] :, :], want.shape[-2]
        if got.shape != want.shape:
            report.append(
                Comparison(
                    shape=shape,
                    expected_shape=list(want.shape),
                    ok=False,
                    max_abs=None,
                    max_rel=None,
                    trailing=None,
                )
            )
            continue
        g, w = got.astype(np.float64), want.astype(np.float64)
        # Equal values (infinities of one sign) and NaN against NaN differ by nothing.
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        diff = np.where(same, 0.0, np.abs(g - w))
        report.append(
            Comparison(
                shape=shape,
                expected_shape=list(want.shape),
                max_abs=finite_or_none(diff.max()) if diff.size else 0.0,
                max_rel=finite_or_none((diff / (np.abs(w) + 1e-12)).max()) if diff.size else 0.0,
                ok=bool(diff.max() <= atol * np.abs(w).max() if diff.size else True)
                if atol_of_max
                else bool(np.allclose(g, w, atol=atol, rtol=rtol, equal_nan=True)),
                trailing=trailing,
            )
        )
    return report


def window_of(got, want, keep):
    """Whether `want` is exactly the window eager keeps (the last `keep`
    positions, along the second axis from the end) of `got`, longer."""
    return (
        len(got) == len(want) >= 2
        and got[:-2] == want[:-2]
        and got[-1] == want[-1]
        and got[-2] > want[-2] == min(keep, got[-2])
    )


def onnx_runner(path):
    """(run(inputs) -> outputs, providers) for an ONNX model in ONNX Runtime,
    after the ONNX checker (full check, with shape inference) accepts it. A
    model holding an op ONNX has no schema for (ONNX Runtime's contrib ops,
    some of which it registers in the default domain, as
    `SimplifiedLayerNormalization`) is checked by ONNX Runtime's session alone."""
    import onnx
    import onnxruntime

    try:
        nodes = onnx.load(path, load_external_data=False).graph.node
        if all(onnx.defs.has(n.op_type, "" if n.domain == "ai.onnx" else n.domain) for n in nodes):
            onnx.checker.check_model(path, full_check=True)
    except Exception as error:  # the checker's errors are several types
        raise ValueError(
            f"the ONNX checker refuses the model: {str(error).strip().splitlines()[0]}"
        ) from None

    try:
        onnx_session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime's pybind errors share no base class but their name
        text = str(error).strip()
        if "NOT_IMPLEMENTED" not in text:
            raise
        # The CPU provider lacks a kernel for an op at this dtype (bfloat16 for most ops).
        what = text.split("Could not find an implementation for", 1)[-1].strip().rstrip(".")
        raise ArtifactFailed(
            f"ONNX Runtime's CPU provider has no kernel for {what}, so the model cannot be "
            "verified here: export with --dtype float32 to verify, or drop --verify and check "
            "it where a provider has the kernels"
        ) from None
    names = [i.name for i in onnx_session.get_inputs()]
    # The new values of the inputs and buffers the program writes in place
    # (`updated.<name>`) are outputs of the program, not of the model.
    model_outputs = [
        o.name for o in onnx_session.get_outputs() if not o.name.startswith("updated.")
    ]

    def run(inputs):
        return onnx_session.run(model_outputs, onnx_feed(names, inputs))

    run.input_names = names
    return run, onnx_session.get_providers()


def onnx_feed(names, inputs):
    """The arrays an ONNX model's inputs `names` take from `inputs` (a pytree
    of tensors or arrays), by leaf path (`cache.layers.0.keys`); an input an
    output also names carries an `input.` prefix, as the reference names it."""
    import numpy as np
    import torch

    leaves = dict(named_leaves(inputs))
    missing = [n for n in names if n.removeprefix("input.") not in leaves]
    if missing:
        raise ValueError(f"the ONNX model wants inputs {missing}; the sample has {sorted(leaves)}")
    feed = {}
    for name in names:
        value = leaves[name.removeprefix("input.")]
        feed[name] = value.detach().cpu().numpy() if torch.is_tensor(value) else np.asarray(value)
    return feed


def pt2_runner(path, constants):
    """(run(inputs) -> outputs, providers) for a `.pt2`, as `torch.export.load` gives it."""
    import torch

    module = load_exported(path).module()

    def run(inputs):
        with torch.no_grad():
            outputs = flat_outputs(module(**inputs, **constants))
        return [as_numpy(o) if torch.is_tensor(o) else o for o in outputs]

    return run, ["torch.export"]


def pte_runner(path, in_spec, constants, flatten=None):
    """(run(inputs) -> outputs, providers) for a `.pte` in the ExecuTorch
    runtime, its inputs flattened as the program's `in_spec` says (the
    reference's `ExecutorchModelRunner` does the same), or by `flatten`; the
    method's trailing values are the outputs."""
    import executorch.kernels.quantized  # noqa: F401  (registers the quantized ops' kernels: `embedding_byte`, ...)
    import torch
    from executorch.runtime import Runtime
    from torch.fx._pytree import tree_flatten_spec
    from torch.utils._pytree import treespec_loads

    method = Runtime.get().load_program(path).load_method("forward")
    spec = treespec_loads(in_spec)

    def run(inputs):
        leaves = (
            flatten(inputs) if flatten else tree_flatten_spec(((), {**constants, **inputs}), spec)
        )
        feed = [leaf.contiguous() if torch.is_tensor(leaf) else leaf for leaf in leaves]
        with runtime_log() as log:
            try:
                outputs = method.execute(feed)
            except RuntimeError as error:
                failed = error
            else:
                failed = None
        if failed is not None:
            sizes = ", ".join(f"{k} {list(v.shape)}" for k, v in named_leaves(inputs))
            said = "; ".join(
                line for line in log() if "failed" in line.lower() or "attempted" in line.lower()
            )
            raise ArtifactFailed(
                f"the .pte fails in the ExecuTorch runtime on inputs {sizes}: {failed}"
                + (f" (the runtime: {said})" if said else "")
            )
        return [as_numpy(o) if torch.is_tensor(o) else o for o in outputs]

    return run, ["ExecuTorch"]


@contextlib.contextmanager
def runtime_log():
    """What the ExecuTorch runtime logs (C++, to file descriptor 2) while the
    block runs, as a function returning its lines once the block is done."""
    sys.stderr.flush()
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        lines = []
        try:
            os.dup2(captured.fileno(), 2)
            yield lambda: lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines.extend(
                line.strip()
                for line in captured.read().decode(errors="replace").splitlines()
                if line.strip()
            )


def verify(session, params: Verify) -> VerifyReply:
    """Runs the model on the recorded inputs (and, for a dynamic export of a
    generated model, on a second input size: another batch and sequence,
    and another image size where the export left height and width dynamic)
    and compares with eager."""
    import torch

    atol, rtol = params.atol, params.rtol
    ref = load_reference(params.reference)
    if isinstance(params.model, VerifyModelOnnx):
        run, providers = onnx_runner(params.model.path)
    elif isinstance(params.model, VerifyModelOpenvino):
        run, providers = openvino_runner(params.model.path, onnx_feed)
    elif isinstance(params.model, VerifyModelPt2):
        run, providers = pt2_runner(params.model.path, ref.get("constants", {}))
    else:
        run, providers = pte_runner(
            params.model.path, params.model.in_spec, ref.get("constants", {})
        )
    last = session.last_trace
    # An int4 model's eager reference: the traced model, its weights round-tripped.
    weights = contextlib.nullcontext
    eager, kept = ref["outputs"], ref.get("kept")
    if params.int4 is not None:
        if last is None:
            raise ValueError(
                "--verify: an int4 model is checked against the model this worker traced, "
                "and it traced none"
            )
        weights = functools.partial(int4_weights, last.model, params.int4)
        constants = ref.get("constants", {})
        with (
            weights(),
            torch.no_grad(),
            config_flags(last.model, last.flags),
            reference_attention(last.model),
        ):
            output = last.model(**copy.deepcopy(ref["inputs"]), **constants)
        eager, kept = flat_outputs(output), sliding_positions(output)
    checks = [
        Check(
            inputs={k: list(v.shape) for k, v in named_leaves(ref["inputs"])},
            outputs=compared(run(ref["inputs"]), eager, atol, rtol, params.atol_of_max, kept),
        )
    ]
    if params.second_size and last is not None and last.generated and last.dynamic:
        model = last.model
        second = sample_inputs(model, SECOND_BATCH, SECOND_SEQUENCE, image_size=last.image_size)
        inputs = {k: on_device(v, last.device, last.dtype) for k, v in second.items()}
        inputs = precomputed(model, inputs)
        with (
            weights(),
            torch.no_grad(),
            config_flags(model, last.flags),
            reference_attention(model),
        ):
            output = model(**inputs)
        eager, kept = flat_outputs(output), sliding_positions(output)
        # The program holds the first size's constants (sizes as ints): where
        # this size's differ, its outputs do and the check says so.
        inputs = {k: v for k, v in inputs.items() if not is_constant(v)}
        checks.append(
            Check(
                inputs={k: list(v.shape) for k, v in named_leaves(inputs)},
                outputs=compared(run(inputs), eager, atol, rtol, params.atol_of_max, kept),
            )
        )
    return VerifyReply(checks=checks, providers=providers)


def flat_inputs(kwargs, paths):
    """A component's flat inputs, by leaf path (as the ONNX runner binds
    them), in the order of its program's input spec: a cache's Python
    attributes (a sliding layer's token count, whether a static layer is
    allocated yet) are constants of the trace, and only its tensors are read."""
    import torch

    given = dict(named_leaves(kwargs))
    flat = []
    for path in paths:
        value = given[path] if path in given else value_at(kwargs, path)
        if value is None or torch.is_tensor(value) or isinstance(value, (bool, int, float)):
            # None: traced as None (`attention_mask`, `attention_mask.full_attention`);
            # a number: a size the trace fixed (an image's height as an int),
            # which the program checks it is called with.
            flat.append(value)
        else:
            raise ValueError(f"the component takes `{path}`, which the call does not hold")
    return flat


def value_at(kwargs, path):
    """What `path` (named as `named_leaves` names) leads to in `kwargs`; None where nothing."""
    value = kwargs
    for key in path.split("."):
        if value is None:
            return None
        if isinstance(value, dict):
            value = value.get(key)
        elif isinstance(value, (list, tuple)) and key.isdigit():
            value = value[int(key)] if int(key) < len(value) else None
        else:
            value = vars(value).get(key) if hasattr(value, "__dict__") else None
    return value


def component_runner(artifact, traced, run=None):
    """(call(**kwargs) -> the model's output, providers) for an exported
    component, as the model is called: the kwargs it was traced with, its flat
    outputs rebuilt into the model's output (`CausalLMOutputWithPast`, its
    cache) by the output spec the trace recorded. `run`: an ONNX runner
    (inputs → flat outputs) in place of the artifact's own."""
    import numpy as np
    import torch
    from torch.utils._pytree import tree_unflatten, treespec_loads

    spec = treespec_loads(traced.out_spec)
    constants = dict(traced.out_constants)

    def rebuilt(flat):
        # A program that updates an input in place (a static cache) returns
        # the updated values first: the model's outputs are the last ones.
        outputs = flat[len(flat) - (spec.num_leaves - len(constants)) :]
        # (a size the program returns comes back from the ExecuTorch runtime as an int)
        tensors = iter(torch.from_numpy(o) if isinstance(o, np.ndarray) else o for o in outputs)
        return tree_unflatten(
            [constants[i] if i in constants else next(tensors) for i in range(spec.num_leaves)],
            spec,
        )

    if run is not None:

        def call(**kwargs):
            return rebuilt(run(kwargs))

        providers = ["CPUExecutionProvider"]
    elif isinstance(artifact, VerifyModelPt2):
        program = load_exported(artifact.path)
        module, in_spec = program.module(), program.call_spec.in_spec

        def call(**kwargs):
            if not traced.input_paths:  # the trace could not name them: as the model is called
                with torch.no_grad():
                    return module(**kwargs)
            args, kwargs = tree_unflatten(flat_inputs(kwargs, traced.input_paths), in_spec)
            with torch.no_grad():
                return module(*args, **kwargs)

        providers = ["torch.export"]
    else:
        if isinstance(artifact, VerifyModelOnnx):
            run, providers = onnx_runner(artifact.path)
        elif isinstance(artifact, VerifyModelOpenvino):
            run, providers = openvino_runner(artifact.path, onnx_feed)
        elif traced.input_paths:
            run, providers = pte_runner(
                artifact.path,
                artifact.in_spec,
                {},
                flatten=lambda kwargs: flat_inputs(kwargs, traced.input_paths),
            )
        else:
            run, providers = pte_runner(artifact.path, artifact.in_spec, {})

        def call(**kwargs):
            return rebuilt(run(kwargs))

        if hasattr(run, "state_loads"):
            call.state_loads = run.state_loads
    call.kwargs = traced.kwargs
    return call, providers
