"""Checks an `hfx run --backend onnx --keep-reference -o OUT.onnx` export
whose inputs or outputs numpy cannot hold (bfloat16), and its output types.

    python check_onnx_types.py OUT.onnx REFERENCE.pt ATOL

1. The model passes the ONNX checker (full check, with shape inference).
2. Each output's element type is its eager output's dtype.
3. ONNX Runtime on the recorded inputs matches the recorded outputs within
   ATOL (absolute and relative): bfloat16 values are fed as ONNX Runtime's
   own tensors and read through a `Cast` to float32 appended to the model.
"""

import sys

import numpy as np
import onnx
import onnxruntime
import torch
from onnx import TensorProto, helper

ONNX_TYPE = {
    torch.float32: TensorProto.FLOAT,
    torch.float64: TensorProto.DOUBLE,
    torch.float16: TensorProto.FLOAT16,
    torch.bfloat16: TensorProto.BFLOAT16,
    torch.int64: TensorProto.INT64,
    torch.int32: TensorProto.INT32,
    torch.bool: TensorProto.BOOL,
}


def main(path, reference, atol):
    onnx.checker.check_model(path, full_check=True)
    model = onnx.load(path)
    ref = torch.load(reference)
    inputs, outputs = ref["inputs"], ref["outputs"]
    for output, want in zip(model.graph.output, outputs):
        got = output.type.tensor_type.elem_type
        if got != ONNX_TYPE[want.dtype]:
            raise SystemExit(
                f"output `{output.name}` is {TensorProto.DataType.Name(got)}, eager {want.dtype}"
            )
    # bfloat16 outputs read as float32: numpy has no bfloat16.
    for output in model.graph.output:
        if output.type.tensor_type.elem_type == TensorProto.BFLOAT16:
            widened = f"{output.name}.float32"
            model.graph.node.append(
                helper.make_node("Cast", [output.name], [widened], to=TensorProto.FLOAT)
            )
            output.name = widened
            output.type.tensor_type.elem_type = TensorProto.FLOAT
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    feeds = {}
    for i in session.get_inputs():
        value = inputs[i.name]
        if value.dtype == torch.bfloat16:
            feeds[i.name] = onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(
                value.view(torch.int16).numpy(), TensorProto.BFLOAT16
            )
        else:
            feeds[i.name] = onnxruntime.OrtValue.ortvalue_from_numpy(value.numpy())
    got = [v.numpy() for v in session.run_with_ort_values(None, feeds)]
    for index, (g, w) in enumerate(zip(got, outputs)):
        w = w.double().numpy()
        if g.shape != w.shape or not np.allclose(g.astype(np.float64), w, atol=atol, rtol=atol):
            raise SystemExit(f"output {index}: {g} vs eager {w}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
