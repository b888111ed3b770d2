"""Checks the worker's runner of a stateful OpenVINO IR refuses one whose
recorded outputs do not name its own.

    python check_openvino_state.py FOLDER

`FOLDER/openvino_decode.xml` (a stateful decode hfx wrote) loads; a copy
whose `hfx/traced_outputs` names a cache layer the IR does not have (an IR
from elsewhere) is refused with one line naming the file.
"""

import os
import sys
import tempfile

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)

from hfx_worker.openvino_ir import TRACED_OUTPUTS, imported_openvino, openvino_runner  # noqa: E402
from hfx_worker.verify import onnx_feed  # noqa: E402


def main(folder):
    decode = os.path.join(folder, "openvino_decode.xml")
    run, _ = openvino_runner(decode, onnx_feed)
    if run.state_loads() != 0:
        raise SystemExit("a runner no call went through has loaded a cache")
    openvino = imported_openvino()
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
    print("ok: the stateful decode loads; an IR with foreign recorded outputs is refused")


if __name__ == "__main__":
    main(*sys.argv[1:])
