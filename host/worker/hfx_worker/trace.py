"""The `trace` request: a model, traced with torch.export, saved as a `.pt2`
with its eager reference beside it.

Laid out as the reference's DynamoExporter (transformers/exporters/exporter_dynamo.py),
whose stages keep their names here: `signature` (a flat forward), `patches`
(answered by WASM plugins through the host; `sandbox`), `pytree registration`
(`pytree`), `dynamic shapes`, `state cleanup`, then `export`. The request's
progress steps are `protocol.STEPS`: import, build, eager, export, decompose,
save.
"""

import contextlib
import copy
import os
import re
import time

from . import eager_quantize, messages, quantizers
from .checkpoint import save_program, side_weights_supported, weights_plan
from .errors import UserInputError
from .messages import ExportMetadata, TiedAxis, TraceParams, TraceReply, WeightsReport
from .precompute import precomputed
from .program import build as build_program
from .pytree import (
    flat_outputs,
    is_constant,
    named_leaves,
    output_names,
    register_cache_pytrees,
    save_reference,
    sliding_positions,
    spec_output_names,
    spec_paths,
)
from .sandbox import patch_status, patches_applied
from .sources import (
    SECOND_BATCH,
    SECOND_SEQUENCE,
    SEED,
    config_flags,
    from_architecture,
    from_directory,
    from_function,
    on_device,
    other_image_size,
    prepared,
    reference_attention,
    sample_inputs,
    streamed_from_directory,
)
from .trace_shortcuts import frame_stacks

# ── Dynamic shapes (the reference's `dynamic shapes` stage) ──


def dynamic_shapes(inputs, dynamic, explicit, ties=()):
    """The reference's `dynamic shapes` stage: `Dim.AUTO` on every tensor axis
    (batch and sequence; in a cache, past length too), or the explicit
    `input:axis=min..max` ranges (checked by the host), each a `Dim` that the
    axes `ties` pairs with it (`(input, axis, tied input, tied axis)`) share."""
    import torch

    if explicit:
        shapes = {name: ({} if torch.is_tensor(value) else None) for name, value in inputs.items()}
        dims = {}
        for spec in explicit:
            name, axis = spec.input, spec.axis
            value = inputs.get(name)
            said = f"--dynamic-shapes {spelled(spec)}"
            if not torch.is_tensor(value):
                takes = ", ".join(k for k, v in inputs.items() if torch.is_tensor(v))
                raise UserInputError(
                    "shape_spec",
                    f"{said}: the model takes no tensor input `{name}` (its inputs: {takes})",
                )
            if axis >= value.dim():
                raise UserInputError(
                    "shape_spec",
                    f"{said}: `{name}` has {value.dim()} axes (0 to {value.dim() - 1})",
                )
            size = value.shape[axis]
            if not spec.min <= size <= spec.max:
                raise UserInputError(
                    "shape_spec",
                    f"{said}: the sample input is {size} there, outside the range; "
                    f"give a range that holds {size}, or sample sizes within it (--sample)",
                )
            dims[name, axis] = torch.export.Dim(f"{name}_{axis}", min=spec.min, max=spec.max)
            shapes[name][axis] = dims[name, axis]
        for name, axis, other, other_axis in ties:
            shapes[other][other_axis] = dims[name, axis]
        return shapes
    if not dynamic:
        return None
    return {name: auto_shapes(value) for name, value in inputs.items()}


def spelled(spec):
    """An `AxisRange` as the flag spells it: `input_ids:1=2..2048`."""
    return f"{spec.input}:{spec.axis}={spec.min}..{spec.max}"


def refused_ranges(explicit, error):
    """torch.export's `Constraints violated` (tens of lines) as one line: each
    violation's first sentence."""
    reasons = [
        line.strip(" -").split(". ")[0]
        for line in str(error).splitlines()
        if line.startswith("  - ")
    ]
    why = "; ".join(reasons) or str(error).splitlines()[0]
    ranges = ",".join(spelled(spec) for spec in explicit)
    return UserInputError(
        "shape_spec", f"--dynamic-shapes {ranges}: torch.export refuses them: {why}"
    )


def tie_candidates(inputs, explicit):
    """The fixed axes a named axis may need tied to it: the same axis of
    another tensor input, of the same sample size (`attention_mask:1` for
    `input_ids:1`), as `(input, axis, tied input, tied axis)`."""
    import torch

    named = {(spec.input, spec.axis) for spec in explicit}
    candidates = []
    for spec in explicit:
        name, axis = spec.input, spec.axis
        size = inputs[name].shape[axis]
        for other, value in inputs.items():
            if (
                other != name
                and torch.is_tensor(value)
                and axis < value.dim()
                and value.shape[axis] == size
                and (other, axis) not in named
            ):
                candidates.append((name, axis, other, axis))
    return candidates


def auto_shapes(value):
    """`Dim.AUTO` on every axis of every tensor in `value`, laid out as
    torch.export compares it with the input: a registered pytree node (a
    cache, a `ModelOutput`) one entry per child of its flattening."""
    import torch

    if torch.is_tensor(value):
        return dict.fromkeys(range(value.dim()), torch.export.Dim.AUTO)
    if value is None or isinstance(value, (bool, int, float, str)):
        return None
    if type(value) in (list, tuple):
        return type(value)(auto_shapes(v) for v in value)
    if type(value) is dict:
        return {k: auto_shapes(v) for k, v in value.items()}
    node = torch.utils._pytree.SUPPORTED_NODES.get(type(value))
    if node is not None:
        children, _ = node.flatten_fn(value)
        return [auto_shapes(child) for child in children]
    return None


# ── Signature (the reference's `model signature` stage) ──

OUTPUT_FLAGS = (
    "use_cache",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "return_loss",
)


@contextlib.contextmanager
def flat_signature(model, inputs):
    """`forward` with exactly the traced keyword arguments, so `torch.export` does not expand
    `**kwargs` into a bundle that mismatches the dynamic shapes. Yields a list that
    receives what each call returned (the trace's own output: fake tensors)."""
    import inspect

    original = model.forward
    own = "forward" in vars(model)  # a model function may have set an instance forward
    returned = []

    def forward(**kwargs):
        output = original(**kwargs)
        returned.append(output)
        return output

    forward.__signature__ = inspect.Signature(
        [
            inspect.Parameter(k, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
            for k in inputs
        ]
    )
    model.forward = forward
    try:
        yield returned
    finally:
        if own:
            model.forward = original
        else:
            del model.forward  # the class's forward shows again


# ── State cleanup (the reference's `model state cleanup` stage) ──

STATEFUL_ATTRIBUTES = (
    "cached_rotary_positional_embedding",  # wav2vec2_bert, seamless_m4t, clvp
    "cached_sequence_length",
)


@contextlib.contextmanager
def clean_state(model):
    """Stateful attributes are emptied for the trace (no stale eager state leaks in) and
    restored after it (no fake tensors the trace planted leak out)."""
    saved = [
        (m, a, getattr(m, a)) for m in model.modules() for a in STATEFUL_ATTRIBUTES if hasattr(m, a)
    ]
    for module, attribute, _ in saved:
        setattr(module, attribute, None)
    try:
        yield
    finally:
        for module, attribute, value in saved:
            setattr(module, attribute, value)


# ── Export, side weights and the eager reference ──


def peak_rss_mib():
    """The worker's peak resident memory so far (Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Streaming:
    """`weights: streamed` asked: the model built from its checkpoint's
    headers (`checkpoint.StreamedModel`), or why it could not be."""

    def __init__(self):
        self.model, self.fallback = None, None


def weights_report(streaming, streamed, caller_memory):
    if streaming is None:
        return WeightsReport(
            streamed=False, loaded=True, fallback=None, caller_memory=caller_memory
        )
    model = streaming.model
    fallback = streaming.fallback or (
        None if streamed else "this torch's archive writer has no side-weights hook"
    )
    return WeightsReport(
        streamed=streamed,
        loaded=model is None or model.loaded,
        fallback=fallback,
        caller_memory=caller_memory,
    )


def eager_forward(model, inputs, flags, streamed):
    """The model's outputs for `inputs`, its weights read first if `streamed`."""
    import torch

    if streamed is not None:
        streamed.load()
    # On a copy: a cache input grows in place.
    with torch.no_grad(), config_flags(model, flags), reference_attention(model):
        return model(**copy.deepcopy(inputs))


def traced_output(returned):
    """What the traced forward returned (`flat_signature`), as the outputs'
    structure: fake tensors where eager has tensors. None unless the forward
    ran once and its other leaves are plain values: a size the trace kept
    symbolic (an int in eager) is eager's to say."""
    import torch

    if len(returned) != 1:
        return None
    leaves = torch.utils._pytree.tree_leaves(returned[0])
    if any(isinstance(leaf, (torch.SymInt, torch.SymFloat, torch.SymBool)) for leaf in leaves):
        return None
    return returned[0]


def fake_outputs(model, inputs, flags):
    """The model's outputs on fake tensors (shapes and structure, no values),
    or None where the forward needs real values (a data-dependent size)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    inputs = copy.deepcopy(inputs)  # outside the mode: a copy made inside would be fake
    try:
        with (
            FakeTensorMode(allow_non_fake_inputs=True),
            torch.no_grad(),
            config_flags(model, flags),
        ):
            return model(**inputs)
    except Exception:  # noqa: BLE001 - any failure means: run it for real
        return None


@contextlib.contextmanager
def step(session, name, seconds, peaks=None):
    """One step of the request: announced as progress, timed, its peak memory recorded."""
    session.progress(name)
    started = time.perf_counter()
    yield
    seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - started
    if peaks is not None:
        peaks[name] = peak_rss_mib()


def built_model(session, params, generative=False, streamed=None, quantize=True):
    """The model of `params.source` on the backend's device and dtype, and its
    inputs (the source's own, else sample inputs of `params.batch` x
    `params.sequence`); `generative`: an architecture's generative class;
    `streamed` (a `Streaming`): a folder's weights are left in its checkpoint
    where they can be; `quantize`: quantized as `params.quantize` says (else
    the caller quantizes it)."""
    import torch

    torch.manual_seed(SEED)
    source = params.source
    if isinstance(source, messages.SourceParamsArchitecture):
        quantizers.import_for(None)
    elif isinstance(source, messages.SourceParamsDirectory):
        quantizers.import_for(quantizers.folder_method(source.path))
    if isinstance(source, messages.SourceParamsArchitecture):
        model = from_architecture(source.name, source.overrides, params.task, generative)
        inputs = None
    elif (
        isinstance(source, messages.SourceParamsDirectory)
        and streamed is not None
        and params.device == "cpu"
    ):
        streamed.model, streamed.fallback = streamed_from_directory(
            source.path,
            params.task,
            source.trust_remote_code,
            params.dtype,
            source.layers,
            params.weights_dtype,
        )
        if streamed.model is not None:
            model = streamed.model.model
        else:
            model = from_directory(
                source.path, params.task, source.trust_remote_code, source.layers
            )
        inputs = None
    elif isinstance(source, messages.SourceParamsDirectory):
        model = from_directory(source.path, params.task, source.trust_remote_code, source.layers)
        inputs = None
    elif isinstance(source, messages.SourceParamsProgram):
        model, inputs = build_program(session.policy, source.program, source.inputs)
    elif isinstance(source, messages.SourceParamsCaller):
        model, inputs = session.caller_model(params)
    else:
        model, inputs = from_function(source.spec)
    model = model.eval()
    model, device, dtype = prepared(
        model,
        params.device,
        params.dtype,
        params.weights_dtype,
        streamed=streamed is not None and streamed.model is not None,
    )
    # Backend preparation the host asks for: a MoE model's experts run as
    # the backend can (the reference's `prepare_for_xnnpack`).
    if params.experts and getattr(model, "_can_set_experts_implementation", lambda: False)():
        model.set_experts_implementation(params.experts)
    if quantize and params.quantize is not None:
        eager_quantize.quantize_model(model, params.quantize)
    if hasattr(model, "set_attn_implementation"):
        with contextlib.suppress(Exception):
            model.set_attn_implementation("sdpa")
    if inputs is None:
        inputs = sample_inputs(model, params.batch, params.sequence)
    return model, {k: on_device(v, device, dtype) for k, v in inputs.items()}


def captured(session, component):
    """A component `capture_generation` captured: the model, and a copy of its kwargs."""
    generation = session.generation
    if generation is None or component not in generation.components:
        raise ValueError(
            f"trace: no captured component `{component}` in this worker (send `capture_generation` first)"
        )
    return generation.modules[component], copy.deepcopy(generation.components[component])


def disambiguated(inputs, outputs):
    """A name both an input and an output carry (a cache's leaves in a decode
    step) becomes `input.<name>` and `output.<name>`, as the reference's
    `disambiguate_io_names` names them."""
    both = set(inputs) & set(outputs)
    return (
        [f"input.{n}" if n in both else n for n in inputs],
        [f"output.{n}" if n in both else n for n in outputs],
    )


def trace(session, params: TraceParams) -> TraceReply:
    seconds, peaks = {}, {}
    with step(session, "import", seconds, peaks):
        import torch

    with step(session, "build", seconds, peaks):
        source = params.source
        streaming = Streaming() if params.weights == "streamed" else None
        if isinstance(source, messages.SourceParamsCaptured):
            model, inputs = captured(session, source.component)
        else:
            model, inputs = built_model(session, params, streamed=streaming)
            # What an encoder derives from its size inputs by loops over their
            # values, computed as a captured component's are (the reference
            # precomputes them on every export, `precompute_export_inputs`).
            inputs = precomputed(model, inputs)
        streamed = streaming.model if streaming is not None else None
        flags = {k: inputs.pop(k) for k in OUTPUT_FLAGS if k in inputs}
        register_cache_pytrees(model)
        shapes = dynamic_shapes(inputs, params.dynamic, params.dynamic_shapes)
    # Without `--verify` the outputs' structure (names, spec, constants) is the
    # trace's own (`traced_output`), and an eager forward only costs: for a
    # streamed model, reading every weight first; for a generation component,
    # a forward `generate` already ran at capture (a quantized prefill's is
    # the slowest forward of its export).
    eager_runs = params.reference is not None or not (
        streamed is not None or isinstance(source, messages.SourceParamsCaptured)
    )
    with step(session, "eager", seconds):
        eager = eager_forward(model, inputs, flags, streamed) if eager_runs else None
    # The policy is built only when a patch may need it (it resolves its lists once).
    policy = session.policy if params.patches else None
    # The reference's order: patches, state cleanup, config flags, signature, then export.
    with step(session, "export", seconds, peaks):
        if params.plan_weights is not None and streamed is not None:
            session.weights_plan(
                weights_plan(model, streamed.sources, params.output, params.plan_weights)
            )

        def export(shapes):
            with (
                torch.no_grad(),
                patches_applied(policy, params.patches, session.ask) as answers,
                clean_state(model),
                config_flags(model, flags),
                flat_signature(model, inputs) as returned,
                frame_stacks(),
            ):
                program = torch.export.export(
                    model,
                    (),
                    copy.deepcopy(dict(inputs)),
                    dynamic_shapes=shapes,
                    strict=False,
                    prefer_deferred_runtime_asserts_over_guards=bool(params.dynamic_shapes),
                )
            return program, answers, returned

        ties = []
        try:
            program, answers, returned = export(shapes)
        except torch._dynamo.exc.UserError as error:
            violated = torch._dynamo.exc.UserErrorType.CONSTRAINT_VIOLATION
            if not params.dynamic_shapes or error.error_type != violated:
                raise
            # An axis the model needs equal to a named one (`attention_mask:1`
            # to `input_ids:1`) is fixed at the named one's sample size, which
            # then specializes: the candidates are tied to it, and each one
            # the trace does without is untied again.
            ties = tie_candidates(inputs, params.dynamic_shapes)
            if not ties:
                raise refused_ranges(params.dynamic_shapes, error) from None
            try:
                traced = export(dynamic_shapes(inputs, True, params.dynamic_shapes, ties))
            except torch._dynamo.exc.UserError:
                raise refused_ranges(params.dynamic_shapes, error) from None
            for tie in list(ties):
                kept = [t for t in ties if t != tie]
                if not kept:
                    break  # no tie at all is the trace that failed
                with contextlib.suppress(torch._dynamo.exc.UserError):
                    traced = export(dynamic_shapes(inputs, True, params.dynamic_shapes, kept))
                    ties = kept
            program, answers, returned = traced
        if eager is None:
            eager = traced_output(returned)
        if (
            eager is None
        ):  # a structure the trace cannot give: eager's, on fake tensors, else for real
            eager = fake_outputs(model, inputs, flags)
        if eager is None:
            eager = eager_forward(model, inputs, flags, streamed)
        names = output_names(eager)
        eager_output = eager
        eager = flat_outputs(eager)
        if len(names) != len(eager):
            names = [f"output_{i}" for i in range(len(eager))]
        guards = size_guards(program, inputs)
        generated = isinstance(
            source, (messages.SourceParamsArchitecture, messages.SourceParamsDirectory)
        )
        second_image = second_image_size(model, program) if generated and params.dynamic else None
        out_spec, out_constants, own_spec = output_spec(program, eager_output)
        metadata = export_metadata(model, inputs, program, out_spec, out_constants)
        if own_spec:
            names = spec_output_names(out_spec, {i for i, _ in out_constants})
        decomposed = []
        if isinstance(params.decompose, messages.DecomposeAll):
            session.progress("decompose")
            program = program.run_decompositions()
        elif isinstance(params.decompose, messages.DecomposeMissing):
            program, decomposed = decompose_missing(session, program, params.decompose.handled)
    with step(session, "save", seconds, peaks):
        side_weights = params.weights != "in_archive" and side_weights_supported()
        caller_memory = save_program(
            program,
            params.output,
            side_weights,
            session.side_weights,
            streamed.sources if streamed is not None else None,
            share=session.caller is not None,
        )
        # The eager reference, next to the archive, for later verification.
        if params.reference is not None:
            save_reference(
                params.reference,
                {k: v for k, v in inputs.items() if not is_constant(v)},
                {k: v for k, v in inputs.items() if is_constant(v)},
                flags,
                eager,
                sliding_positions(eager_output),
            )
        if params.folder:
            save_configs(model, params.folder)
    # Each user input's leaf path: its name in an ONNX model, where a component's runner finds it.
    input_paths = spec_paths(program.call_spec.in_spec)
    if len(input_paths) != len(program.graph_signature.user_inputs):
        input_paths = []  # inputs torch.export lays out otherwise: its own names stand
    input_names, names = disambiguated(input_paths, names)
    if isinstance(source, messages.SourceParamsCaptured):
        session.generation.traced[source.component] = TracedComponent(
            kwargs=list(inputs),
            input_paths=input_paths,
            out_spec=metadata["out_spec"],
            out_constants=metadata["out_constants"],
        )
    # Kept for `verify` at a second input size (generated inputs only).
    parameter = next(model.parameters(), None)
    session.last_trace = LastTrace(
        model=model,
        flags=flags,
        device=parameter.device if parameter is not None else torch.device("cpu"),
        dtype=parameter.dtype if parameter is not None else torch.get_default_dtype(),
        generated=generated,
        # A second size that `--dynamic-shapes` ranges would fix stays unchecked.
        dynamic=params.dynamic,
        image_size=second_image,
    )
    return TraceReply(
        model_class=type(model).__name__,
        inputs={k: list(v.shape) for k, v in named_leaves(inputs)},
        outputs=len(eager),
        input_names=input_names,
        output_names=names,
        export_metadata=ExportMetadata(**metadata),
        nodes=len(program.graph.nodes),
        patches_restored=patch_status(policy, params.patches),
        patch_calls_cached=answers.hits,
        versions=session.versions(),
        seconds=seconds,
        peak_rss_mib=peaks,
        side_weights=side_weights,
        weights=weights_report(streaming, side_weights and streamed is not None, caller_memory),
        decomposed=decomposed,
        size_guards=guards,
        tied_axes=[
            TiedAxis(input=other, axis=other_axis, to_input=name, to_axis=axis)
            for name, axis, other, other_axis in ties
        ],
        axis_kinds=axis_kinds(program, params, sized_by_hfx(source)),
        max_positions=max_positions(model),
    )


def sized_by_hfx(source):
    """Whether the inputs are hfx's sample inputs (`params.batch` x
    `params.sequence`), or a captured call of a model built from them."""
    return isinstance(
        source,
        (
            messages.SourceParamsArchitecture,
            messages.SourceParamsDirectory,
            messages.SourceParamsCaptured,
        ),
    )


# transformers' names of inputs laid out `[batch, sequence, ...]`, and of
# inputs whose first axis alone is the batch: what an axis is when hfx did
# not size the inputs (`--model-fn`, `hfx.export`'s own inputs).
BATCH_SEQUENCE_INPUTS = (
    "input_ids",
    "attention_mask",
    "token_type_ids",
    "position_ids",
    "inputs_embeds",
    "decoder_input_ids",
    "decoder_attention_mask",
    "decoder_inputs_embeds",
)
BATCH_INPUTS = ("pixel_values", "input_features", "input_values", "pixel_mask")


def axis_kinds(program, params, sized_by_hfx):
    """Each size symbol of an input axis that is a batch or a sequence, with
    the size it was traced at. Where hfx sized the inputs, by that size: the
    sample batch or the sample sequence (`--sample` keeps the two apart);
    else by the input's name, as transformers lays its inputs out.
    ExecuTorch plans memory for the largest size a symbol takes, and the
    host bounds each by what it is."""
    import torch

    sample_sizes = {params.sequence: "sequence", params.batch: "batch"}
    kinds = {}
    for node in program.graph.nodes:
        value = node.meta.get("val") if node.op == "placeholder" else None
        if not torch.is_tensor(value):
            continue
        for axis, size in enumerate(value.shape):
            if not (isinstance(size, torch.SymInt) and size.node.expr.is_symbol):
                continue
            traced = size.node.hint
            if sized_by_hfx:
                kind = sample_sizes.get(traced)
            elif node.name in BATCH_SEQUENCE_INPUTS:
                kind = ("batch", "sequence")[axis] if axis < 2 else None
            else:
                kind = "batch" if axis == 0 and node.name in BATCH_INPUTS else None
            if kind is not None:
                kinds.setdefault(str(size.node.expr), messages.KnownAxis(kind=kind, traced=traced))
    return kinds


# The names configs give the longest sequence their positions cover.
MAX_POSITIONS = ("max_position_embeddings", "n_positions", "max_target_positions")


def max_positions(model):
    """The longest sequence the model's config allows, if it names one."""
    config = getattr(model, "config", None)
    for name in MAX_POSITIONS:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


# An input's size as torch.export's guards spell it: `L['kwargs']['input_ids'].size()[1]`.
GUARDED_SIZE = re.compile(r"L(?:\['[^']*'\])*\['([^']+)'\]\.size\(\)\[(\d+)\]")


def size_guard_expressions(program):
    """(code, expression) of each guard of `program` on input sizes alone, the
    expression over `S[input][axis]` (`guard_holds`)."""
    for code in getattr(program, "_guards_code", None) or []:
        expression = GUARDED_SIZE.sub(lambda m: f"S[{m.group(1)!r}][{m.group(2)}]", code)
        if "L[" not in expression:  # else a guard on something other than sizes (strides, values)
            yield code, expression


def guard_holds(expression, shapes):
    """Whether a size guard's expression holds at `shapes` ({input: shape}),
    None where it cannot be evaluated."""
    try:
        return bool(eval(expression, {"__builtins__": {}, "max": max, "min": min, "S": shapes}))
    except Exception:
        return None


def second_image_size(model, program):
    """The image size of `verify`'s second inputs (`other_image_size`) where
    the program left the image's height and width symbolic, within their
    ranges, and every size guard holds at those inputs' shapes; else None,
    and that check varies the batch alone, as for an image size torch.export
    fixed. Where a guard breaks, the artifact (a `.pt2` checks no guards) does
    not claim that size."""
    import torch

    config = getattr(model, "config", None)
    size = other_image_size(config) if config is not None else None
    image = next(
        (
            n.meta.get("val")
            for n in program.graph.nodes
            if n.op == "placeholder" and n.name == "pixel_values"
        ),
        None,
    )
    if size is None or not torch.is_tensor(image) or image.dim() != 4:
        return None
    for dim in image.shape[2:]:
        if not isinstance(dim, torch.SymInt) or not dim.node.expr.is_symbol:
            return None
        bounds = program.range_constraints.get(dim.node.expr)
        if bounds is not None and not (bool(bounds.lower <= size) and bool(size <= bounds.upper)):
            return None
    second = sample_inputs(model, SECOND_BATCH, SECOND_SEQUENCE, image_size=size)
    shapes = {k: list(v.shape) for k, v in second.items() if torch.is_tensor(v)}
    if all(guard_holds(e, shapes) for _, e in size_guard_expressions(program)):
        return size
    return None


def size_guards(program, inputs):
    """The guards torch.export checks on a call's input sizes beyond its range
    constraints (`ExportedProgram._guards_code`, what `.module()` refuses
    other sizes with) that some other size breaks. A `.pt2` and an ONNX model
    keep only the ranges, so such a size runs and computes garbage (a branch
    the trace took at its own size, such as a chunked scan's
    `if pad_size > 0`): the host says them. Most guards hold at every size
    (`s0 >= 2`, `s0*s1 != 1`); each is evaluated at probe sizes (every
    dynamic size, one at a time and together, moved up by 1, 5 and to
    2n + 1, within its range) and kept only where one breaks it, with the
    inputs' shapes there. Inputs are named as the model names them."""
    import torch

    traced = {k: list(v.shape) for k, v in inputs.items() if torch.is_tensor(v)}
    # Each input axis that varies: the sympy expression of its size.
    axes, symbols = [], {}
    for node in program.graph.nodes:
        value = node.meta.get("val") if node.op == "placeholder" else None
        if node.name not in traced or not torch.is_tensor(value):
            continue
        for axis, dim in enumerate(value.shape):
            if isinstance(dim, torch.SymInt):
                expr = dim.node.expr
                axes.append((node.name, axis, expr))
                if expr.is_symbol:
                    symbols[expr] = traced[node.name][axis]
    ranges = program.range_constraints

    def fits(symbol, n):
        bounds = ranges.get(symbol)
        return bounds is None or (bool(bounds.lower <= n) and bool(n <= bounds.upper))

    probes = []
    moves = (lambda n: n + 1, lambda n: n + 5, lambda n: 2 * n + 1)
    for move in moves:
        for symbol, n in symbols.items():
            probes.append({symbol: move(n)})
        probes.append({symbol: move(n) for symbol, n in symbols.items()})
    shapes_at = []
    for probe in probes:
        if not all(fits(s, n) for s, n in probe.items()):
            continue
        values = {**symbols, **probe}
        shapes = {k: list(v) for k, v in traced.items()}
        try:
            for name, axis, expr in axes:
                shapes[name][axis] = int(expr.xreplace(values))
        except (TypeError, ValueError):  # an axis of a symbol that is no input's own size
            continue
        shapes_at.append(shapes)
    found = []
    for code, expression in size_guard_expressions(program):
        for shapes in shapes_at:
            holds = guard_holds(expression, shapes)
            if holds is None:  # an expression torch writes and these names do not cover
                break
            if not holds:
                readable = GUARDED_SIZE.sub(lambda m: f"{m.group(1)}.shape[{m.group(2)}]", code)
                breaks_at = {k: v for k, v in shapes.items() if v != traced[k]}
                found.append(messages.SizeGuard(guard=readable, breaks_at=breaks_at))
                break
    # The simplest first: a chain of derived sizes repeats one cause many times.
    found.sort(key=lambda g: len(g.guard))
    return found


def decompose_missing(session, program, handled):
    """The ONNX-friendly decomposition (as torch.onnx builds it from its registry):
    when the program holds an op no plugin handles and torch's default table (or
    the op's composite kernel) decomposes, or an op that writes one of its
    arguments (`copy_`, `index_put_`, `add_` through a view: ONNX values are
    immutable), the program decomposed by that table minus the handled ops, so
    ops with a translation (or a fix) stay whole. The decomposition retraces
    through torch's functionalization, which turns every write into its
    functional op and a scatter of the result into the written tensor's base
    (`slice_scatter`), and a write into a buffer or an input into an output
    of the program (its graph signature's mutation outputs). Returns the
    program and what was decomposed or functionalized (from each new node's
    provenance)."""
    import torch

    handled = set(handled)
    table = torch.export.default_decompositions()
    for op in list(table.keys()):
        if str(op) in handled:
            table.pop(op)
    # Ops torch.export keeps whole although they are compositions of others
    # (`x.T` as `numpy_T`, `broadcast_to`): their own composite kernel decomposes them.
    for node in program.graph.nodes:
        op = node.target
        if (
            node.op == "call_function"
            and isinstance(op, torch._ops.OpOverload)
            and op not in table
            and str(op) not in handled
            and torch._C._dispatch_has_kernel_for_dispatch_key(
                op.name(), "CompositeImplicitAutograd"
            )
        ):
            table[op] = op.decompose
    missing = {}
    # `detach_` writes no values (autograd's metadata only): each is its input,
    # dropped here, where functionalizing it would retrace the whole program
    # (a traced Llama holds two a layer: half of its torch.export step).
    detached = [
        node
        for node in program.graph.nodes
        if node.op == "call_function"
        and node.target is torch.ops.aten.detach_.default
        and str(node.target) not in handled
        and not any(user.op == "output" for user in node.users)
    ]
    for node in detached:
        node.replace_all_uses_with(node.args[0])
        program.graph.erase_node(node)
    if detached:
        program.graph_module.recompile()
    dropped = (
        [messages.Decomposed(op=str(torch.ops.aten.detach_.default), nodes=len(detached), became=0)]
        if detached
        else []
    )
    for node in program.graph.nodes:
        if (
            node.op == "call_function"
            and isinstance(node.target, torch._ops.OpOverload)
            and node.target in table
        ):
            name = str(node.target)  # popped above when handled
            missing[name] = missing.get(name, 0) + 1
    for node in writes(program):
        if node.target not in table:  # else counted above
            name = str(node.target)
            missing[name] = missing.get(name, 0) + 1
    if not missing:
        return program, dropped
    session.progress("decompose")
    program = program.run_decompositions(table)
    became = dict.fromkeys(missing, 0)
    for node in program.graph.nodes:
        sources = node.meta.get("from_node") or []
        if node.op == "call_function" and sources and sources[0].target in became:
            became[sources[0].target] += 1
    return program, dropped + [
        messages.Decomposed(op=op, nodes=count, became=became[op]) for op, count in missing.items()
    ]


def writes(program):
    """The nodes of `program` (its sub-graphs' too: a `cond` branch) whose op
    writes an argument in place, by its schema."""
    import torch

    return [
        node
        for module in program.graph_module.modules()
        if isinstance(module, torch.fx.GraphModule)
        for node in module.graph.nodes
        if node.op == "call_function"
        and isinstance(node.target, torch._ops.OpOverload)
        and node.target._schema.is_mutable
    ]


class TracedComponent:
    """A traced component's call: the kwargs it takes, its tensor inputs'
    leaf paths (its ONNX inputs, before disambiguation), and how its flat
    outputs rebuild the model's output."""

    def __init__(self, kwargs, input_paths, out_spec, out_constants):
        self.kwargs = kwargs
        self.input_paths = input_paths
        self.out_spec = out_spec
        self.out_constants = out_constants


class LastTrace:
    """What `verify` needs of the last trace to check a second input size."""

    def __init__(self, model, flags, device, dtype, generated, dynamic, image_size):
        self.model, self.flags, self.device, self.dtype = model, flags, device, dtype
        self.generated, self.dynamic = generated, dynamic
        # The second inputs' image size (`second_image_size`); None: the config's.
        self.image_size = image_size


# ── Export folder: what `ExportedModel.save_pretrained` writes besides the program ──


def describe_kwarg(value):
    import torch

    if torch.is_tensor(value):
        return {
            "rank": value.dim(),
            "shape": [int(d) for d in value.shape],
            "dtype": str(value.dtype).removeprefix("torch."),
        }
    if isinstance(value, dict):
        return {"leaves": {str(k): describe_kwarg(v) for k, v in value.items()}}
    return {"container": type(value).__name__}


def output_spec(program, output):
    """(spec, constants, own): the output pytree spec the program's outputs
    follow, the leaves it computes none for ([index, value]), and whether
    that is the program's own spec rather than eager `output`'s. It is the
    program's where its output has leaves eager's has not: a size the trace
    kept symbolic where eager holds an int (a static cache allocated at
    prefill for a dynamic batch)."""
    import torch

    leaves, spec = torch.utils._pytree.tree_flatten(output)
    traced = program.call_spec.out_spec
    if traced is None or traced.num_leaves == spec.num_leaves:
        return (
            spec,
            [[i, leaf] for i, leaf in enumerate(leaves) if not torch.is_tensor(leaf)],
            False,
        )
    from torch.export.graph_signature import ConstantArgument, OutputKind

    users = [
        s.arg for s in program.graph_signature.output_specs if s.kind == OutputKind.USER_OUTPUT
    ]
    return (
        traced,
        [[i, arg.value] for i, arg in enumerate(users) if isinstance(arg, ConstantArgument)],
        True,
    )


def export_metadata(model, inputs, program, out_spec, out_constants):
    """The fields of the reference's `ExportMetadata` the worker knows: architecture,
    precision, traced kwargs and constants, the input and output pytree specs
    (`output_spec`'s: the output's non-tensor leaves as constants). The host adds
    the packages and the export config."""
    import torch

    parameter = next(model.parameters(), None)
    return {
        "architecture": type(model).__name__,
        "export_dtype": str(
            parameter.dtype if parameter is not None else torch.get_default_dtype()
        ).removeprefix("torch."),
        "export_device": str(parameter.device if parameter is not None else torch.device("cpu")),
        "kwargs": {name: describe_kwarg(value) for name, value in inputs.items()},
        "in_spec": torch.utils._pytree.treespec_dumps(program.call_spec.in_spec),
        "out_spec": torch.utils._pytree.treespec_dumps(out_spec),
        "in_constants": {
            k: v for k, v in inputs.items() if v is None or isinstance(v, (bool, int, float, str))
        },
        "out_constants": out_constants,
    }


def save_configs(model, folder, generation=None):
    """`config.json`, and `generation_config.json` for a model that generates
    (`generation` when given: a static cache's)."""
    os.makedirs(folder, exist_ok=True)
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "save_pretrained"):
        config.save_pretrained(folder)
    generation = generation or getattr(model, "generation_config", None)
    if generation is not None and hasattr(model, "can_generate") and model.can_generate():
        generation.save_pretrained(folder)
