"""The requests behind plugin self-tests (`hfx plugins capture`, `hfx plugins test`).

`capture_program` records a model function's forward as a Python-level
program (`program.py`), the model of a patch plugin's case.
`capture_values` runs a traced program (a `.pt2` hfx wrote) on its sample
inputs and records the values at the nodes a case is cut around: a case's
inputs are what really flowed there. `run_case` runs a case's program in the
IR interpreter (`graph.py`) and a candidate (the program after the plugin, or
its ONNX translation in ONNX Runtime) on the case's values and compares them.
"""

from . import program
from .graph import decode_value, encode_value, run_graph
from .messages import (
    CandidateGraph,
    CaptureProgram,
    CaptureProgramReply,
    CaptureValues,
    CaptureValuesReply,
    RunCase,
    RunCaseReply,
)
from .pytree import load_exported, load_reference
from .sources import SEED, from_function
from .verify import compared


def capture_program(session, params: CaptureProgram) -> CaptureProgramReply:
    import torch

    torch.manual_seed(SEED)  # as the trace builds a model function's model
    module, inputs = from_function(params.spec)
    captured, values = program.capture(module.eval(), inputs)
    return CaptureProgramReply(program=captured, inputs=values)


def capture_values(session, params: CaptureValues) -> CaptureValuesReply:
    import torch

    program = load_exported(params.program)
    reference = load_reference(params.reference)
    kwargs = {**reference["inputs"], **reference.get("constants", {})}
    try:
        flat = program._graph_module_flat_inputs((), kwargs)
    except Exception:  # constants the program was not traced with as inputs
        flat = program._graph_module_flat_inputs((), dict(reference["inputs"]))
    wanted = set(params.names)
    found = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node):
            result = super().run_node(node)
            if node.name in wanted:
                found[node.name] = encode_value(result)
            return result

    with torch.no_grad():
        Recorder(program.graph_module).run(*flat)
    missing = sorted(wanted - set(found))
    if missing:
        raise ValueError(f"the program has no value named {', '.join(f'`{m}`' for m in missing)}")
    return CaptureValuesReply(values=found)


def run_case(session, params: RunCase) -> RunCaseReply:
    import torch

    values = {name: decode_value(v) for name, v in params.values.items()}
    expected = run_graph(session.policy, params.program, values)
    # The piece may write its inputs in place (a cache state's `copy_`): the
    # candidate gets the values as captured, not as the piece left them.
    values = {name: decode_value(v) for name, v in params.values.items()}
    if isinstance(params.candidate, CandidateGraph):
        got = [
            v.detach().numpy() if torch.is_tensor(v) else v
            for v in run_graph(session.policy, params.candidate.program, values)
        ]
    else:
        import onnxruntime

        onnx = onnxruntime.InferenceSession(
            params.candidate.path, providers=["CPUExecutionProvider"]
        )
        feeds = {}
        for i in onnx.get_inputs():
            if i.name not in values:
                raise ValueError(
                    f"the ONNX model wants the input `{i.name}`; the case has {sorted(values)}"
                )
            v = values[i.name]
            feeds[i.name] = v.numpy() if torch.is_tensor(v) else torch.tensor(v).numpy()
        got = onnx.run(None, feeds)
        # ONNX has no complex type: hfx's ONNX path holds a complex value as
        # its real pairs (plugins/onnx/fix-complex-pairs), so that is what a
        # translation's output is compared with.
        expected = [
            torch.view_as_real(v.resolve_conj()) if torch.is_tensor(v) and v.is_complex() else v
            for v in expected
        ]
    expected = [v if torch.is_tensor(v) else torch.tensor(v) for v in expected]
    return RunCaseReply(outputs=compared(got, expected, params.atol, params.rtol))
