"""The OpenVINO backend's worker half: `convert_openvino` (an ONNX model hfx
wrote, read by OpenVINO's ONNX frontend and saved as OpenVINO IR) and the IR
run on OpenVINO's CPU plugin for `verify`.

hfx's ONNX stages (patches, FX fixes, translation plugins, IR fixes) make the
graph; OpenVINO's frontend maps each ONNX op onto its opset, then its MOC
transformations run, as `convert_model` runs them.
Nothing here decides how an op converts: that is the translation plugins'.
"""

import sys
import time

from .messages import ConvertOpenvino, ConvertOpenvinoReply

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
        compress_quantize_weights_transformation,
    )

    started = time.perf_counter()
    # `openvino.convert_model`'s steps for an ONNX file (`ovc`'s `moc_emit_ir`),
    # without `ovc` around them: it starts telemetry, which writes under
    # ~/intel and opens sockets, both of which the worker's sandbox refuses.
    model = openvino.Core().read_model(str(params.model))
    apply_moc_transformations(model, cf=False, smart_reshape=True)
    compress_quantize_weights_transformation(model)
    apply_fused_names_cleanup(model)
    for option in RUNTIME_OPTIONS:
        model.set_rt_info(params.precision, ["runtime_options", option])
    converted = time.perf_counter()
    openvino.save_model(model, str(params.output), compress_to_fp16=False)
    return ConvertOpenvinoReply(
        ops=len(model.get_ordered_ops()),
        convert_seconds=converted - started,
        save_seconds=time.perf_counter() - converted,
    )


def openvino_runner(path, feed_of):
    """(run(inputs) -> outputs, providers) for an OpenVINO IR compiled for the
    CPU; `feed_of(names, inputs)`
    binds the inputs by name as the ONNX runner does (the IR keeps the ONNX
    model's input and output names)."""
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
    compiled = core.compile_model(model, "CPU", config)
    names = [port.get_any_name() for port in compiled.inputs]
    outputs = [port for port in compiled.outputs if not port.get_any_name().startswith("updated.")]
    request = compiled.create_infer_request()

    def run(inputs):
        results = request.infer(feed_of(names, inputs), share_inputs=False, share_outputs=False)
        return [results[port] for port in outputs]

    run.input_names = names
    return run, ["OpenVINO CPU"]
