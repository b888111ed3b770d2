"""The OpenVINO backend's worker half: `convert_openvino` (an ONNX model hfx
wrote, read by OpenVINO's ONNX frontend and saved as OpenVINO IR) and the IR
run on OpenVINO's CPU plugin for `verify`.

hfx's ONNX stages (patches, FX fixes, translation plugins, IR fixes) make the
graph; OpenVINO's frontend maps each ONNX op onto its opset, then its MOC
transformations run, as `convert_model` runs them.
Nothing here decides how an op converts: that is the translation plugins'.
"""

import os
import sys
import time

from .messages import ConvertOpenvino, ConvertOpenvinoReply, WeightInput

# The compile options the reference records on the IR (`_record_runtime_precision`),
# which its runner and OpenVINO's own tools read back.
RUNTIME_OPTIONS = ("INFERENCE_PRECISION_HINT", "KV_CACHE_PRECISION")


def imported_openvino():
    """`openvino`, imported without its telemetry. Importing `openvino` starts
    `ovc`'s telemetry, which reads and writes a client id under ~/intel and
    sends events over the network: the worker's sandbox refuses both, and a
    conversion has no business with either. With `openvino_telemetry`
    unimportable, `ovc` takes its own no-op stub (`telemetry_utils`' `except
    ImportError`)."""
    if "openvino" not in sys.modules:
        sys.modules.setdefault("openvino_telemetry", None)
    import openvino

    return openvino


def convert_openvino(session, params: ConvertOpenvino) -> ConvertOpenvinoReply:
    """`params.model` (`.onnx`, external data beside it) as OpenVINO IR at
    `params.output` (`.xml` + `.bin`), weights at the precision the ONNX
    model holds them in (`save_model` would otherwise halve float32 ones)."""
    openvino = imported_openvino()
    from openvino._offline_transformations import (
        apply_fused_names_cleanup,
        apply_moc_transformations,
        compress_model_transformation,
        compress_quantize_weights_transformation,
    )

    started = time.perf_counter()
    # `openvino.convert_model`'s steps for an ONNX file (`ovc`'s `moc_emit_ir`),
    # without `ovc` around them: it starts telemetry, which writes under
    # ~/intel and opens sockets, both of which the worker's sandbox refuses.
    model = openvino.Core().read_model(str(params.model))
    port_names = {name for port in model.inputs + model.outputs for name in port.get_names()}
    decompressions = keep_decompressions(model)
    apply_moc_transformations(model, cf=False, smart_reshape=True)
    if len(decompressions(model)) != len(decompressions.marked):
        raise RuntimeError(
            f"OpenVINO {openvino.get_version()}: its transformations folded the Converts of 16-bit weights marked "
            f"`{DISABLE_CONSTANT_FOLDING}` ({len(decompressions.marked)} before, {len(decompressions(model))} after): "
            "the IR would hold them float32; hfx checked the mark against OpenVINO 2026.3"
        )
    compress_quantize_weights_transformation(model)
    apply_fused_names_cleanup(model)
    keep_port_names(model, port_names)
    states = make_stateful(model) if params.stateful else 0
    if params.compress_to_fp16:
        compress_model_transformation(model)
    for option in RUNTIME_OPTIONS:
        model.set_rt_info(params.precision, ["runtime_options", option])
    ops = len(model.get_ordered_ops())
    weights = weights_as_inputs(model, params.weights_file) if params.weights_file else []
    converted = time.perf_counter()
    openvino.save_model(model, str(params.output), compress_to_fp16=False)
    return ConvertOpenvinoReply(
        ops=ops,
        states=states,
        convert_seconds=converted - started,
        save_seconds=time.perf_counter() - converted,
        weights=weights,
    )


# A constant smaller than this is saved by OpenVINO, as ONNX keeps a small
# initializer inline (the host's `onnx::external::THRESHOLD`).
WEIGHT_INPUT_BYTES = 1024


def mapped_ranges(path):
    """[(start, end, offset in the file)] of this process's read-only
    mappings of the file at `path`, from /proc/self/maps: the memory that is
    that file's bytes."""
    file = os.stat(path)
    device = f"{os.major(file.st_dev):02x}:{os.minor(file.st_dev):02x}"
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or "w" in fields[1]:
                continue
            addresses, _, offset, dev, inode, _ = fields
            if int(inode) != file.st_ino or dev != device:
                continue
            start, end = (int(a, 16) for a in addresses.split("-"))
            ranges.append((start, end, int(offset, 16)))
    return ranges


def weights_as_inputs(model, weights_file):
    """Makes each constant of `model`'s own graph whose bytes are
    `weights_file`'s, where OpenVINO's ONNX frontend mapped it, an input
    `hfx.weight.N` of the same type, shape and tensor names, so `save_model`
    writes none of them; they are the bytes the ONNX model's initializers
    are (a constant a transformation made is new memory, and stays). Returns
    the inputs with the constants they stand for and their bytes, which the
    host makes constants again (`openvino::ir`). A frontend that read the
    file into memory leaves none."""
    import openvino.opset13 as ops

    try:
        ranges = mapped_ranges(weights_file)
    except OSError:
        return []
    weights, parameters = [], []
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Constant" or op.get_byte_size() < WEIGHT_INPUT_BYTES:
            continue
        try:
            address = op.get_tensor_view().data.ctypes.data
        except (RuntimeError, TypeError, ValueError):  # an element type numpy has no view of
            continue
        size = op.get_byte_size()
        offset = next(
            (
                at + address - start
                for start, end, at in ranges
                if start <= address and address + size <= end
            ),
            None,
        )
        if offset is None:
            continue
        name = f"hfx.weight.{len(weights)}"
        tensor_names = op.output(0).get_names()
        parameter = ops.parameter(op.get_output_partial_shape(0), op.get_element_type(), name=name)
        op.output(0).replace(parameter.output(0))
        parameter.output(0).get_tensor().set_names(tensor_names)
        parameters.append(parameter)
        weights.append(
            WeightInput(name=name, constant=op.get_friendly_name(), offset=offset, size=size)
        )
    model.add_parameters(parameters)
    return weights


# The rt_info key of OpenVINO's `DisableConstantFolding` attribute (its type
# name and version), which `ov::pass::disable_constant_folding` sets and
# constant folding tests by key alone; Python has no binding that sets it.
# Set as a string it is not serialized: the IR is as OpenVINO writes it.
DISABLE_CONSTANT_FOLDING = "DisableConstantFolding_0"
SIXTEEN_BIT = ("bf16", "f16")


def keep_decompressions(model):
    """Marks each `Convert` of a 16-bit weight to float32 (a `Cast` of a
    16-bit initializer in the ONNX model: `onnx/compress.rs`) so that the
    transformations leave it: the IR keeps the weight 16-bit, as the
    reference's does, and OpenVINO's CPU plugin decompresses it inside its
    matmuls and gathers. MOC's transformations fold such a `Convert` into a
    float32 constant otherwise (OpenVINO 2026.3), doubling the `.bin`. Returns
    the function that lists a model's such `Convert`s, with the ones marked
    as its `marked`."""

    def decompressions(model):
        return [
            op
            for op in model.get_ordered_ops()
            if op.get_type_name() == "Convert"
            and op.get_output_element_type(0).get_type_name() == "f32"
            and op.input_value(0).get_node().get_type_name() == "Constant"
            and op.get_input_element_type(0).get_type_name() in SIXTEEN_BIT
        ]

    decompressions.marked = decompressions(model)
    for op in decompressions.marked:
        op.get_rt_info()[DISABLE_CONSTANT_FOLDING] = ""
    return decompressions


def keep_port_names(model, port_names):
    """Leaves the model's inputs and outputs only the names the ONNX model
    gave them (`port_names`): a transformation that removes a node moves its
    output's name onto the tensor that replaces it, so an input a `Concat`
    with an empty tensor read also carries that `Concat`'s name, and
    `get_any_name` (the first name in order) would name the input by it."""
    for port in model.inputs + model.outputs:
        names = port.get_names()
        kept = names & port_names
        if kept and kept != names:
            port.get_tensor().set_names(kept)


# The batch axis of every cache tensor (transformers' caches are batch-first).
STATE_BATCH_AXIS = 0
# Where the IR records its outputs' names in their traced order before the
# state folding took the cache's away: the runner returns the state in
# their places, so the model's output is rebuilt as the trace recorded it.
TRACED_OUTPUTS = ["hfx", "traced_outputs"]


def input_of(output_name):
    """The input a cache output `output.P` round-trips: `input.P`."""
    return "input." + output_name.removeprefix("output.")


def state_pairs(model):
    """`{input name: output name}` of the tensors the model takes and returns
    under one leaf path: hfx names them `input.P` and `output.P` (as the
    reference does), which only a cache round-trip makes."""
    inputs = {name for port in model.inputs for name in port.get_names()}
    pairs = {}
    for port in model.outputs:
        name = port.get_any_name()
        if name.startswith("output.") and input_of(name) in inputs:
            pairs[input_of(name)] = name
    return pairs


def make_stateful(model):
    """Folds the model's cache round-trips (`state_pairs`) into OpenVINO
    state variables, as the reference's `OpenVINOConfig.stateful` does: a
    `beam_idx` input and a batch-axis `Gather` in front of every state input
    (beam search's cache reorder inside the model; greedy passes
    `arange(batch)`), then OpenVINO's `apply_make_stateful_transformation`,
    then a zero initial value per variable (the batch of the model's first
    input, an empty growing axis, the other axes at their traced length), so
    a first call starts from an empty cache. The number of variables."""
    import numpy as np

    openvino = imported_openvino()
    import openvino.opset13 as ops
    from openvino._offline_transformations import apply_make_stateful_transformation

    pairs = state_pairs(model)
    if not pairs:
        return 0
    model.set_rt_info(" ".join(p.get_any_name() for p in model.outputs), TRACED_OUTPUTS)
    # The axes the cache grows along are the ones its input leaves dynamic
    # besides the batch (the past length); the others are its heads and widths.
    init_dims = {}
    for input_name, output_name in pairs.items():
        shape = model.input(input_name).get_partial_shape()
        init_dims[input_name + output_name] = [
            "batch" if axis == STATE_BATCH_AXIS else "grow" if dim.is_dynamic else dim.get_length()
            for axis, dim in enumerate(shape)
        ]
    main = next(p for p in model.inputs if not (p.get_names() & pairs.keys()))
    beam_idx = ops.parameter(
        openvino.PartialShape([main.get_partial_shape()[STATE_BATCH_AXIS]]),
        np.int32,
        name="beam_idx",
    )
    beam_idx.output(0).get_tensor().set_names({"beam_idx"})
    model.add_parameters([beam_idx])
    for input_name in pairs:
        port = model.input(input_name)
        consumers = port.get_target_inputs()
        gather = ops.gather(port, beam_idx, ops.constant(np.int64(STATE_BATCH_AXIS)))
        for consumer in consumers:
            consumer.replace_source_output(gather.output(0))
    model.validate_nodes_and_infer_types()
    apply_make_stateful_transformation(model, pairs)

    batch = ops.gather(
        ops.shape_of(model.input(main.get_any_name()), output_type="i64"),
        ops.constant(np.array([STATE_BATCH_AXIS], dtype=np.int64)),
        ops.constant(np.int64(0)),
    )
    for op in model.get_ops():
        if op.get_type_name() != "ReadValue":
            continue
        dims = init_dims[op.get_variable_id()]
        # The empty axis as `batch - batch`, not a constant 0: OpenVINO's CPU
        # plugin folds a constant-shaped initial value into the variable's
        # descriptor, which then refuses a cache of any other length.
        empty = ops.subtract(batch, batch)
        shape = ops.concat(
            [
                batch
                if d == "batch"
                else empty
                if d == "grow"
                else ops.constant(np.array([d], dtype=np.int64))
                for d in dims
            ],
            axis=0,
        )
        zero = ops.constant(np.zeros((), dtype=op.get_output_element_type(0).to_dtype()))
        op.set_arguments([ops.broadcast(zero, shape)])
    model.validate_nodes_and_infer_types()
    return len(pairs)


def openvino_runner(path, feed_of):
    """(run(inputs) -> outputs, providers) for an OpenVINO IR compiled for the
    CPU; `feed_of(names, inputs)`
    binds the inputs by name as the ONNX runner does (the IR keeps the ONNX
    model's input and output names). A stateful IR's cache is its state
    (`stateful_run`)."""
    openvino = imported_openvino()

    core = openvino.Core()
    model = core.read_model(str(path))
    # Latency-tuned, as the reference's runner compiles it, at the precision the
    # IR records: OpenVINO 2026.3 does not apply an IR's `runtime_options` by
    # itself, and its CPU plugin would run in bfloat16 where the CPU has it.
    config = {"PERFORMANCE_HINT": "LATENCY"}
    for option in RUNTIME_OPTIONS:
        if model.has_rt_info(["runtime_options", option]):
            config[option] = model.get_rt_info(["runtime_options", option]).astype(str)
    traced_outputs = (
        model.get_rt_info(TRACED_OUTPUTS).astype(str).split()
        if model.has_rt_info(TRACED_OUTPUTS)
        else None
    )
    compiled = core.compile_model(model, "CPU", config)
    # Named by the IR's ports: the CPU plugin's compilation moves a removed
    # node's output name onto the port that replaces it, as the conversion's
    # transformations do (`keep_port_names`). Compiled ports keep the IR's order.
    names = [port.get_any_name() for port in model.inputs]
    outputs = [
        (compiled.outputs[i], port.get_any_name())
        for i, port in enumerate(model.outputs)
        if not port.get_any_name().startswith("updated.")
    ]
    request = compiled.create_infer_request()

    if traced_outputs is not None:
        run = stateful_run(openvino, request, names, outputs, traced_outputs, feed_of)
        if run is None:
            raise ValueError(
                f"{path}: its recorded outputs (rt_info hfx/traced_outputs) do not name its "
                "outputs and state variables; re-export it with hfx"
            )
    else:

        def run(inputs):
            results = request.infer(feed_of(names, inputs), share_inputs=False, share_outputs=False)
            return [results[port] for port, _ in outputs]

    run.input_names = names
    return run, ["OpenVINO CPU"]


def stateful_run(openvino, request, names, outputs, traced_outputs, feed_of):
    """run(inputs) -> outputs for a stateful IR, as its stateless form is
    called: the cache comes in as inputs and goes out as outputs. The state
    carries the cache from call to call; a cache that is not the one the last
    call returned (a new sequence: prefill's, or another generation's) is
    loaded into the state first, and an absent one empties it. The cache
    returned is the state read back after the call, in the places the
    traced outputs give it. None if the traced outputs do not name exactly
    the IR's outputs and its variables."""
    import numpy as np

    model_names = [n for n in names if n != "beam_idx"]
    # A variable is named by its input's and output's names, concatenated.
    variables = {state.name for state in request.query_state()}
    state_inputs = {}  # {input name: variable}
    for name in traced_outputs:
        if input_of(name) + name in variables:
            state_inputs[input_of(name)] = input_of(name) + name
    # An IR from elsewhere may record names that are neither.
    present = {name for _, name in outputs}
    traced = set(traced_outputs)
    if set(state_inputs.values()) != variables or not present <= traced:
        return None
    if traced - present - {name for name in traced if input_of(name) in state_inputs}:
        return None
    returned = {}  # the cache the last call returned, by variable
    loads = [0]

    def same_memory(given, kept):
        return (
            kept is not None
            and given.shape == kept.shape
            and given.__array_interface__["data"][0] == kept.__array_interface__["data"][0]
        )

    def run(inputs):
        states = {state.name: state for state in request.query_state()}
        try:
            given = feed_of(list(state_inputs), inputs)
        except ValueError:  # no cache given: a new sequence from an empty cache
            given = None
        if given is None:
            request.reset_state()
        elif not all(same_memory(given[i], returned.get(v)) for i, v in state_inputs.items()):
            loads[0] += 1
            for input_name, variable in state_inputs.items():
                states[variable].state = openvino.Tensor(np.ascontiguousarray(given[input_name]))
        feed = feed_of(model_names, inputs)
        # `beam_idx` follows the batch of the first input, as its shape does.
        batch = feed[model_names[0]].shape[STATE_BATCH_AXIS]
        feed["beam_idx"] = np.arange(batch, dtype=np.int32)
        results = request.infer(feed, share_inputs=False, share_outputs=False)
        by_name = {name: results[port] for port, name in outputs}
        returned.clear()
        for state in request.query_state():
            returned[state.name] = np.array(state.state.data, copy=True)
        return [
            by_name[name] if name in by_name else returned[state_inputs[input_of(name)]]
            for name in traced_outputs
            if not name.startswith("updated.")
        ]

    run.state_loads = lambda: loads[0]
    return run
