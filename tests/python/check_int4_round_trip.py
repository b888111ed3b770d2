"""The int4 eager reference (`hfx_worker/round_trip.py`) is the artifact's
weights exactly: every `MatMulNBits` and `GatherBlockQuantized` of an int4
export, dequantized as ONNX Runtime reads its blocks, equals the round trip
of its checkpoint weight, bit for bit.

    python check_int4_round_trip.py MODEL.onnx MODEL_DIR   # a causal LM's folder

Prints how many weights it compared; exits non-zero with one line per
difference.
"""

import os
import sys

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from hfx_worker.round_trip import round_trip  # noqa: E402
from onnx import numpy_helper  # noqa: E402

model_path, folder = sys.argv[1], sys.argv[2]
model = onnx.load(model_path)
initializers = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
# Every name of each weight, a tied one's too, as the traced model has them.
loaded = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
checkpoint = {n: p.detach() for n, p in loaded.named_parameters(remove_duplicate=False)}
# A `Conv1D` stores its weight K x N (blocks along its columns), an `nn.Linear` N x K.
stored_k_by_n = {
    f"{module_name}.{name}"
    for module_name, module in loaded.named_modules(remove_duplicate=False)
    if type(module).__name__ == "Conv1D"
    for name, _ in module.named_parameters(recurse=False)
}


def dequantized(packed, scales, zero_points, rows, length, block):
    """[rows, length] from 4-bit values two a byte (the first in the low
    nibble), a scale per block and a zero point per block (8 where none)."""
    values = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(rows, -1).astype(np.float32)
    blocks = values.shape[1] // block
    scales = scales.reshape(rows, blocks, 1).astype(np.float32)
    if zero_points is None:
        zero = np.full((rows, blocks, 1), 8.0, np.float32)
    else:
        nibbles = np.stack([zero_points & 0x0F, zero_points >> 4], axis=-1).reshape(rows, -1)
        zero = nibbles[:, :blocks].reshape(rows, blocks, 1).astype(np.float32)
    out = (values.reshape(rows, blocks, block) - zero) * scales
    return out.reshape(rows, -1)[:, :length]


failures, compared = [], {"MatMulNBits": 0, "GatherBlockQuantized": 0}
for node in model.graph.node:
    if node.op_type not in compared:
        continue
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    block = attributes["block_size"]
    symmetric = len(node.input) < 4 or not node.input[3]
    suffix = "_Q4" if node.op_type == "MatMulNBits" else "_gather_Q4"
    weight_name = node.input[0 if node.op_type == "GatherBlockQuantized" else 1]
    name = weight_name[: -len(suffix)]
    packed = initializers[weight_name]
    scales = initializers[node.input[2]]
    zero_points = None if symmetric else initializers[node.input[3]]
    weight = checkpoint[name].float()
    if node.op_type == "MatMulNBits":
        k, n = attributes["K"], attributes["N"]
        got = dequantized(packed.reshape(n, -1), scales, zero_points, n, k, block)
        # Blocks run along K: a row of an N x K weight, a column of a K x N one.
        axis = 0 if name in stored_k_by_n else 1
        got = got if axis == 1 else got.T
    else:
        vocabulary, hidden = weight.shape
        got = dequantized(packed, scales, zero_points, vocabulary, hidden, block)
        axis = 1
    want = round_trip(weight, axis, block, symmetric).numpy()
    compared[node.op_type] += 1
    if not np.array_equal(got, want):
        differ = int((got != want).sum())
        failures.append(f"{node.op_type} {name}: {differ} of {want.size} values differ")

# `int4_weights` swaps each weight in only while a module holding it runs:
# the model's outputs are those of the whole model round-tripped, and its
# float weights are back afterwards, also after a forward that raised.
import types  # noqa: E402

from hfx_worker.round_trip import int4_weights  # noqa: E402

axes = {}
for node in model.graph.node:
    if node.op_type == "MatMulNBits":
        name = node.input[1][: -len("_Q4")]
        axes[name] = 0 if name in stored_k_by_n else 1
    elif node.op_type == "GatherBlockQuantized":
        axes[node.input[0][: -len("_gather_Q4")]] = 1
spec = types.SimpleNamespace(weights=axes, block=block, symmetric=symmetric)
ids = torch.arange(16).reshape(2, 8) % loaded.config.vocab_size
floats = {n: p.detach().clone() for n, p in loaded.named_parameters()}
parameters = dict(loaded.named_parameters(remove_duplicate=False))
with torch.no_grad():
    with int4_weights(loaded, spec):
        swapped = loaded(input_ids=ids).logits
    originals = {}
    for name, axis in axes.items():
        parameter = parameters[name]
        if id(parameter) not in originals:
            originals[id(parameter)] = (parameter, parameter.data)
            parameter.data = round_trip(parameter.data, axis, block, symmetric)
    whole = loaded(input_ids=ids).logits
    for parameter, data in originals.values():
        parameter.data = data
    if not torch.equal(swapped, whole):
        failures.append("int4_weights' outputs are not the whole round-tripped model's")
    try:
        with int4_weights(loaded, spec):
            # An id past the vocabulary: the embedding raises after its weight was swapped in.
            loaded(input_ids=ids + loaded.config.vocab_size)
        failures.append("an id past the vocabulary did not raise")
    except (IndexError, RuntimeError):
        pass
if any(not torch.equal(floats[n], p) for n, p in loaded.named_parameters()):
    failures.append("int4_weights left a weight round-tripped")

print(f"compared {compared}")
if not all(compared.values()):
    failures.append(f"no MatMulNBits or no GatherBlockQuantized in {model_path}")
for failure in failures:
    print(failure)
sys.exit(1 if failures else 0)
