"""Runs an ONNX model that checks a size guard (`hfx_test_models`'s
`chunked_scan`, dynamic) at every length from 1 to 24 and checks that ONNX
Runtime stops exactly where the guard, evaluated by Python, breaks, with an
error naming the guard, and runs everywhere else:

    python check_size_guards.py MODEL.onnx 'GUARD'

GUARD is the readable form hfx prints (`x.shape[1]` for the input `x`)."""

import sys

import numpy as np
import onnxruntime as ort


class Sized:
    def __init__(self, shape):
        self.shape = shape


def main(path, guard):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    broken = []
    for length in range(1, 25):
        x = np.random.default_rng(length).random((2, length), dtype=np.float32)
        holds = eval(guard, {"__builtins__": {}, "max": max, "min": min}, {"x": Sized(x.shape)})
        try:
            session.run(None, {"x": x})
            ran = True
        except Exception as error:
            ran = False
            assert f"guard `{guard}`" in str(error), f"length {length}: {error}"
        assert ran == holds, (
            f"length {length}: the guard {'holds' if holds else 'breaks'}, ONNX Runtime {'ran' if ran else 'stopped'}"
        )
        if not holds:
            broken.append(length)
    assert broken and len(broken) < 24, broken
    print(f"stopped at lengths {broken}, ran at the others")


if __name__ == "__main__":
    main(*sys.argv[1:])
