"""Checks a stateful OpenVINO decode's `beam_idx` reorders its cache, and
that the worker's runner refuses an IR whose recorded outputs do not name
its own.

    python check_openvino_state.py FOLDER

`FOLDER/openvino_decode.xml` (a stateful decode hfx wrote):

- beam search's reorder: two rows decoded one token, then a step with
  `beam_idx = [1, 0]` gives the logits of the same rows decoded in the
  other order, then a step with `beam_idx = [0, 1]`; the two rows' logits
  differ, so a `beam_idx` the model ignored fails the check;
- it loads in the runner; a copy whose `hfx/traced_outputs` names a cache
  layer the IR does not have (an IR from elsewhere) is refused with one line
  naming the file.
"""

import os
import sys
import tempfile

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)

from hfx_worker.openvino_ir import TRACED_OUTPUTS, imported_openvino, openvino_runner  # noqa: E402
from hfx_worker.verify import onnx_feed  # noqa: E402


def decode_step(request, tokens, past, beam_idx):
    """Logits of one decode step of `tokens` (one per row) after `past`
    tokens, the cache reordered by `beam_idx` first."""
    import numpy as np

    rows = len(tokens)
    values = {
        "input_ids": np.array([[t] for t in tokens], dtype=np.int64),
        "attention_mask": np.ones((rows, past + 1), dtype=np.int64),
        "position_ids": np.full((rows, 1), past, dtype=np.int64),
        "cache_position": np.array([past], dtype=np.int64),
        "beam_idx": np.array(beam_idx, dtype=np.int32),
    }
    feed = {}
    for port in request.model_inputs:
        name = port.get_any_name()
        if name not in values:
            raise SystemExit(f"the stateful decode takes an input this check cannot make: {name}")
        feed[name] = values[name]
    return np.array(request.infer(feed)[request.model_outputs[0]], copy=True)


def check_beam_reorder(openvino, decode):
    import numpy as np

    compiled = openvino.Core().compile_model(decode, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    swapped, straight = compiled.create_infer_request(), compiled.create_infer_request()
    decode_step(swapped, [5, 9], 0, [0, 1])
    reordered = decode_step(swapped, [3, 3], 1, [1, 0])
    decode_step(straight, [9, 5], 0, [0, 1])
    expected = decode_step(straight, [3, 3], 1, [0, 1])
    if np.allclose(expected[0], expected[1], atol=1e-4):
        raise SystemExit("the two rows' logits are equal: the check could not see a reorder")
    if not np.allclose(reordered, expected, atol=1e-4, rtol=1e-4):
        error = float(np.abs(reordered - expected).max())
        raise SystemExit(f"beam_idx [1, 0] did not reorder the cache (max abs error {error:.2e})")


def main(folder):
    decode = os.path.join(folder, "openvino_decode.xml")
    openvino = imported_openvino()
    check_beam_reorder(openvino, decode)
    run, _ = openvino_runner(decode, onnx_feed)
    if run.state_loads() != 0:
        raise SystemExit("a runner no call went through has loaded a cache")
    model = openvino.Core().read_model(decode)
    model.set_rt_info("logits output.cache.layers.9.keys", TRACED_OUTPUTS)
    with tempfile.TemporaryDirectory() as scratch:
        altered = os.path.join(scratch, "altered.xml")
        openvino.save_model(model, altered, compress_to_fp16=False)
        try:
            openvino_runner(altered, onnx_feed)
        except ValueError as error:
            text = str(error)
            if altered not in text or len(text.splitlines()) != 1:
                raise SystemExit(f"refused, but not in one line naming the file: {text}") from None
        else:
            raise SystemExit("an IR whose recorded outputs name a missing cache layer was run")
    print(
        "ok: beam_idx reorders the stateful decode's cache; it loads; "
        "an IR with foreign recorded outputs is refused"
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
