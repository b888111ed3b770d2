"""The worker's protocol: reading and writing its messages, and the version both ends check.

One JSON object per line. The host writes requests and patch answers on the
worker's stdin; the worker writes responses, progress and patch calls on its
stdout:

    host → worker   {"id": 1, "method": "hello", "params": {"protocol": 4}}
    worker → host   {"id": 1, "result": {"protocol": 4, "python": "3.11.9", "versions": {...}}}
    host → worker   {"id": 2, "method": "trace", "params": {...TraceParams}}
    worker → host   {"progress": {"stage": "import"}}
    worker → host   {"patch_call": {...PatchCall}}       (during `trace` only)
    worker → host   {"weights_plan": [...]}              (during `trace`, when asked)
    worker → host   {"generated": {"text": "..."}}        (during `generate`)
    host → worker   {"program": {...}} | {"error": "..."}  (the answer, no id)
    worker → host   {"id": 2, "result": {...TraceReply}} | {"id": 2, "error": {...PythonError}}

The messages are `messages`, generated from the host's types
(`host/src/trace/protocol.rs`, `tools/protocol-gen`), their version
`messages.PROTOCOL` derived from them. `parse` builds one from a decoded JSON
object and refuses unknown and missing fields and wrong types with one line
naming the message and the field, as the host's serde types (with
`deny_unknown_fields`) refuse the worker's.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Union

from .messages import PROTOCOL, Generated, PatchAnswer, PatchCall, Progress, TraceStep

# The steps of a `trace` request, in order, as progress names them. `export`
# runs torch.export under the reference exporter's signature, patches and
# state-cleanup stages; see `trace`.
STEPS = typing.get_args(TraceStep)


class ProtocolError(ValueError):
    """A message that is not what the protocol says; one line naming message and field."""


@dataclass
class Request:
    """The envelope of every request (`params` is typed by its method's message)."""

    NAME: ClassVar[str] = "request"
    id: int
    method: str
    params: dict[str, Any]


def check_version(spoken):
    """`hello`: the host's protocol is this worker's."""
    if spoken != PROTOCOL:
        raise ProtocolError(
            f"the host speaks protocol {spoken}, this worker {PROTOCOL}; "
            "the host and its embedded worker must come from the same hfx"
        )


class ArtifactFailed(RuntimeError):
    """The artifact itself fails in its runtime: the message says where and
    why, and no traceback is sent (the worker's Python is not at fault)."""


class Unsupported(ValueError):
    """The model cannot be exported as asked: the message says why and what to
    do instead, and no traceback is sent (nothing failed but the request)."""


# ── Reading and writing ──


def parse(cls, data, where=None):
    """`cls` from a decoded JSON value; unknown, missing and mistyped fields
    refused. A `ONE_OF` message (`{"variant": payload}`) is checked and
    returned as the JSON it is: its readers (`graph.decode_value`,
    `sandbox.run_program`) read JSON."""
    where = where or getattr(cls, "NAME", cls.__name__)
    if not isinstance(data, dict):
        raise ProtocolError(f"{where}: expected a JSON object, got {type(data).__name__}")
    # Names resolve in the module, not the class: a field named `int` does not hide the type.
    hints = typing.get_type_hints(cls, globalns=vars(sys.modules[cls.__module__]), localns={})
    known = [f for f in dataclasses.fields(cls) if f.init]
    names = [f.name for f in known]
    unknown = [key for key in data if key not in names]
    if unknown:
        expected = _listed([f"`{n}`" for n in names], "and") if names else "none"
        raise ProtocolError(f"{where}: unknown field `{unknown[0]}` (expected {expected})")
    if getattr(cls, "ONE_OF", False):
        present = [f for f in known if f.name in data]
        if len(present) != 1:
            expected = _listed([f"`{n}`" for n in names], "and")
            raise ProtocolError(f"{where}: exactly one of {expected} is expected")
        name = present[0].name
        _convert(hints[name], data[name], f"{where}, field `{name}`")
        return data
    values = {}
    for f in known:
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ProtocolError(f"{where}: missing field `{f.name}`")
            continue
        values[f.name] = _convert(hints[f.name], data[f.name], f"{where}, field `{f.name}`")
    return cls(**values)


def _listed(items, last):
    """`a, b and c` (or `or`)."""
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}"


def _kind(cls):
    """A tagged variant's `kind` (its field's default), None for another class."""
    if not dataclasses.is_dataclass(cls):
        return None
    return next((f.default for f in dataclasses.fields(cls) if f.name == "kind"), None)


def _convert(tp, value, where):
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) > 1 and all(_kind(a) is not None for a in options):
            # A tagged union: `kind` picks the dataclass.
            if not isinstance(value, dict) or "kind" not in value:
                raise ProtocolError(f"{where}: expected an object with a `kind`")
            for option in options:
                if _kind(option) == value["kind"]:
                    return parse(
                        option,
                        {k: v for k, v in value.items() if k != "kind"},
                        f"{where} ({option.NAME})",
                    )
            kinds = ", ".join(f"`{_kind(o)}`" for o in options)
            raise ProtocolError(f"{where}: unknown kind `{value['kind']}` (expected {kinds})")
        if len(options) != 1:
            raise TypeError(f"protocol type {tp} is not supported")
        return _convert(options[0], value, where)
    if origin is Literal:
        if not isinstance(value, str) or value not in args:
            raise ProtocolError(f"{where}: `{value}` is not {_listed(args, 'or')}")
        return value
    if dataclasses.is_dataclass(tp):
        return parse(tp, value, where)
    if origin is list:
        if not isinstance(value, list):
            raise ProtocolError(f"{where}: expected a list, got {type(value).__name__}")
        return [_convert(args[0], item, f"{where}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ProtocolError(f"{where}: expected an object, got {type(value).__name__}")
        return {key: _convert(args[1], item, f"{where}.{key}") for key, item in value.items()}
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = type(value) is int
    elif tp is float:
        ok = type(value) in (int, float)
        value = float(value) if ok else value
    elif tp is str:
        ok = isinstance(value, str)
    else:
        raise TypeError(f"protocol type {tp} is not supported")
    if not ok:
        raise ProtocolError(f"{where}: expected {tp.__name__}, got {type(value).__name__}")
    return value


def to_json(message):
    """A message (a dataclass, or JSON-native data) as JSON. Non-finite floats are
    refused: the host's JSON has no NaN or Infinity. A surrogate code point
    in a string (a byte no UTF-8 decodes, as Python keeps it: a non-UTF-8
    file name in an error) goes as its escape's text, `\\udce9`: the host's
    JSON holds only Unicode characters."""
    if dataclasses.is_dataclass(message):
        message = dataclasses.asdict(message)
    text = json.dumps(message, allow_nan=False)
    if "\\ud" in text:  # a surrogate escaped (or a character beyond the BMP, left as it is)
        text = json.dumps(_unicode(message), allow_nan=False)
    return text


def _unicode(value):
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_unicode(k): _unicode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_unicode(v) for v in value]
    return value


class Channel:
    """The worker's end of the pipes: one JSON line per message."""

    def __init__(self, out, inp):
        self.out = out
        self.inp = inp

    def write(self, message):
        self.out.write(to_json(message) + "\n")
        self.out.flush()

    def progress(self, stage):
        message = parse(Progress, {"stage": stage})
        self.write({"progress": dataclasses.asdict(message)})

    def generated(self, text):
        """`{"generated": {"text": ...}}`: text a `generate` request produced since the last."""
        message = parse(Generated, {"text": text})
        self.write({"generated": dataclasses.asdict(message)})

    def weights_plan(self, entries):
        """`{"weights_plan": [...]}`: the weights the host will write, with
        where each one's bytes are (`checkpoint.weights_plan`), during the request."""
        self.write({"weights_plan": entries})

    def ask(self, call: PatchCall):
        """Sends a patch call and waits for the host's answer: the program, or the host's error raised."""
        self.write({"patch_call": dataclasses.asdict(call)})
        line = self.inp.readline()
        if not line:
            raise ProtocolError("patch answer: the host closed the worker's input")
        try:
            data = json.loads(line)
        except ValueError as error:
            raise ProtocolError(f"patch answer: not JSON ({error})") from None
        answer = parse(PatchAnswer, data)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer["program"]
