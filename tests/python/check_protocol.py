"""The worker's half of the typed protocol (`hfx_worker/protocol.py`).

    python check_protocol.py

Every message refuses unknown fields, names a missing or mistyped one, and
`hello` refuses another protocol version; the request loop answers a bad line
with a typed error and keeps serving. Exits non-zero with one line per failure.
"""

import io
import json
import os
import sys

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
from hfx_worker import messages, protocol, server  # noqa: E402
from hfx_worker.messages import (  # noqa: E402
    CheckSample,
    Hello,
    OpSamples,
    PatchAnswer,
    TraceParams,
    Verify,
)
from hfx_worker.protocol import ProtocolError, parse  # noqa: E402

TRACE = {
    "source": {"kind": "architecture", "name": "llama", "overrides": {"vocab_size": "128"}},
    "task": None,
    "dynamic": False,
    "dynamic_shapes": [],
    "batch": 2,
    "sequence": 8,
    "output": "m.pt2",
    "reference": "r.pt",
    "decompose": {"kind": "none"},
    "device": "cpu",
    "dtype": "float32",
    "weights_dtype": None,
    "experts": None,
    "quantize": None,
    "folder": None,
    "weights": "side",
    "plan_weights": None,
    "patches": [{"plugin": "p", "targets": ["torch.where"]}],
}


def refused(cls, data, why):
    try:
        parse(cls, data)
    except ProtocolError as error:
        if why not in str(error) or "\n" in str(error):
            return f"{cls.__name__} {data}: the error does not say `{why}`: {error}"
        return None
    return f"{cls.__name__} {data}: accepted"


def main():
    failures = []
    params = parse(TraceParams, TRACE)
    if not isinstance(params.source, messages.SourceParamsArchitecture) or params.patches[
        0
    ].targets != ["torch.where"]:
        failures.append(f"the trace request was not typed: {params}")
    caller = parse(TraceParams, {**TRACE, "source": {"kind": "caller"}})
    if not isinstance(caller.source, messages.SourceParamsCaller):
        failures.append(f"the caller's source was not typed: {caller.source}")
    # A worker hfx started holds no caller's model.
    try:
        server.Session(None).caller_model(caller)
        failures.append("a started worker answered for the caller's model")
    except ProtocolError as error:
        if "this worker was started by hfx" not in str(error):
            failures.append(f"the missing caller's model is not said: {error}")
    cases = [
        (TraceParams, {**TRACE, "seed": 1}, "`trace` request: unknown field `seed`"),
        (
            TraceParams,
            {k: v for k, v in TRACE.items() if k != "batch"},
            "`trace` request: missing field `batch`",
        ),
        (TraceParams, {**TRACE, "batch": "2"}, "field `batch`: expected int, got str"),
        (TraceParams, {**TRACE, "dynamic": 1}, "field `dynamic`: expected bool, got int"),
        (TraceParams, {**TRACE, "source": {"kind": "hub", "name": "x"}}, "unknown kind `hub`"),
        (
            TraceParams,
            {**TRACE, "source": {"kind": "function", "spec": "a:b:c", "x": 1}},
            "unknown field `x`",
        ),
        (TraceParams, {**TRACE, "source": {"kind": "caller", "x": 1}}, "unknown field `x`"),
        (
            TraceParams,
            {**TRACE, "patches": [{"plugin": "p"}]},
            "field `patches`[0]: missing field `targets`",
        ),
        (
            TraceParams,
            {**TRACE, "weights": "lazy"},
            "field `weights`: `lazy` is not in_archive, side or streamed",
        ),
        (
            Verify,
            {
                "model": {"kind": "onnx", "path": "m.onnx"},
                "reference": "r.pt",
                "second_size": True,
                "atol": 1e-3,
            },
            "missing field `rtol`",
        ),
        (
            Verify,
            {
                "model": {"kind": "tflite", "path": "m"},
                "reference": "r.pt",
                "second_size": True,
                "atol": 1e-3,
                "rtol": 1e-3,
            },
            "unknown kind `tflite`",
        ),
        (Hello, {"protocol": 2, "debug": True}, "unknown field `debug`"),
        (
            OpSamples,
            {
                "name": "abs",
                "variant": "",
                "dtypes": ["float32"],
                "per_dtype": "4",
                "handled": [],
                "folder": "/t",
            },
            "field `per_dtype`: expected int, got str",
        ),
        (CheckSample, {"index": 0, "onnx": "0.onnx", "atol": 1e-3}, "missing field `rtol`"),
        (Hello, [], "expected a JSON object"),
        (PatchAnswer, {}, "exactly one of `program` and `error`"),
        (PatchAnswer, {"program": {"steps": []}, "error": "x"}, "exactly one of"),
        (
            PatchAnswer,
            {"program": {"steps": [], "output": 0, "extra": 1}},
            "expected `steps` and `output`",
        ),
        (PatchAnswer, {"program": {"steps": [], "output": 0}, "note": ""}, "unknown field `note`"),
    ]
    failures += [f for f in (refused(*case) for case in cases) if f]
    try:
        server.hello(None, Hello(protocol=protocol.PROTOCOL + 1, warm_up=False))
        failures.append("hello accepted another protocol version")
    except ProtocolError as error:
        if f"protocol {protocol.PROTOCOL + 1}, this worker {protocol.PROTOCOL}" not in str(error):
            failures.append(f"the version mismatch does not name both versions: {error}")
    # The loop: a bad line is a typed error for its request, and the next request is served.
    lines = [
        json.dumps({"id": 1, "method": "hello", "params": {"protocol": protocol.PROTOCOL, "x": 1}}),
        "not json",
        json.dumps(
            {
                "id": 3,
                "method": "hello",
                "params": {"protocol": protocol.PROTOCOL, "warm_up": False},
            }
        ),
    ]
    out = io.StringIO()
    stdin, stdout = sys.stdin, sys.stdout
    sys.stdin, sys.stdout = io.StringIO("\n".join(lines) + "\n"), out
    try:
        server.main()
    finally:
        sys.stdin, sys.stdout = stdin, stdout
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    if (
        [r["id"] for r in replies] != [1, 0, 3]
        or "error" not in replies[0]
        or "error" not in replies[1]
        or replies[2].get("result", {}).get("protocol") != protocol.PROTOCOL
    ):
        failures.append(f"the request loop answered {replies}")
    elif set(replies[0]["error"]) != {"type", "message", "traceback", "user"}:
        failures.append(f"an error reply has fields {sorted(replies[0]['error'])}")
    # Non-finite floats never reach the host's JSON.
    try:
        protocol.to_json({"x": float("nan")})
        failures.append("a NaN was written")
    except ValueError:
        pass
    if failures:
        print("\n".join(failures), file=sys.stderr)
        raise SystemExit(1)
    print(
        f"{len(cases)} malformed messages refused; hello checks the version; the loop survives bad lines"
    )


if __name__ == "__main__":
    main()
