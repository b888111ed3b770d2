"""The worker's protocol: every message, typed, and the version both ends check.

One JSON object per line. The host writes requests and patch answers on the
worker's stdin; the worker writes responses, progress and patch calls on its
stdout:

    host → worker   {"id": 1, "method": "hello", "params": {"protocol": 4}}
    worker → host   {"id": 1, "result": {"protocol": 4, "python": "3.11.9", "versions": {...}}}
    host → worker   {"id": 2, "method": "trace", "params": {...TraceParams}}
    worker → host   {"progress": {"stage": "import"}}
    worker → host   {"patch_call": {...PatchCall}}       (during `trace` only)
    worker → host   {"weights_plan": [...]}              (during `trace`, when asked)
    host → worker   {"program": {...}} | {"error": "..."}  (the answer, no id)
    worker → host   {"id": 2, "result": {...TraceReply}} | {"id": 2, "error": {...ErrorReply}}

Each message is a dataclass; `parse` builds one from a decoded JSON object
and refuses unknown and missing fields and wrong types with one line naming
the message and the field. The host (`host/src/trace/protocol.rs`) has the
same types as serde structs with `deny_unknown_fields`. A change to any
message is a new `PROTOCOL`, checked at `hello` on both sides.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Union

# The protocol version; the host's `trace::protocol::PROTOCOL` is the same number.
PROTOCOL = 15

# The steps of a `trace` request, in order, as progress names them (the host's
# `TraceStep`). `export` runs torch.export under the reference exporter's
# signature, patches and state-cleanup stages; see `trace`.
STEPS = ("import", "build", "eager", "export", "decompose", "save")


class ProtocolError(ValueError):
    """A message that is not what the protocol says; one line naming message and field."""


# ── Requests (host → worker) ──


@dataclass
class Request:
    NAME: ClassVar[str] = "request"
    id: int
    method: str
    params: dict[str, Any]


@dataclass
class HelloParams:
    NAME: ClassVar[str] = "`hello` request"
    protocol: int
    memo_dir: str | None = (
        None  # where `import_memo` keeps what it computes (a folder the host checked)
    )


@dataclass
class PatchSpec:
    """A patch plugin and the targets the worker swaps for shims."""

    NAME: ClassVar[str] = "patch"
    plugin: str
    targets: list[str]


@dataclass
class ArchitectureSource:
    """A random model from an architecture name and config overrides (`--set` values, as text)."""

    NAME: ClassVar[str] = "`architecture` source"
    KIND: ClassVar[str] = "architecture"
    name: str
    overrides: dict[str, str]


@dataclass
class DirectorySource:
    """A local Hugging Face model folder (or a Hub model's snapshot in the local cache);
    `trust_remote_code` goes to `from_pretrained` as the host gives it."""

    NAME: ClassVar[str] = "`directory` source"
    KIND: ClassVar[str] = "directory"
    path: str
    trust_remote_code: bool
    # Only the first N layers (a truncated config over the same checkpoint: `--verify-layers`).
    layers: int | None


@dataclass
class FunctionSource:
    """`python:module:function` returning `(model, inputs)`."""

    NAME: ClassVar[str] = "`function` source"
    KIND: ClassVar[str] = "function"
    spec: str


@dataclass
class ProgramSource:
    """A Python-level program (`program.py`) and its inputs (encoded values): a patch plugin's self-test."""

    NAME: ClassVar[str] = "`program` source"
    KIND: ClassVar[str] = "program"
    program: dict[str, Any]
    inputs: dict[str, Any]


@dataclass
class CapturedSource:
    """A component `capture_generation` captured in this worker (`prefill`, `decode`)."""

    NAME: ClassVar[str] = "`captured` source"
    KIND: ClassVar[str] = "captured"
    component: str


@dataclass
class DecomposeNone:
    """Nothing: the program as torch.export traced it."""

    NAME: ClassVar[str] = "`none` decomposition"
    KIND: ClassVar[str] = "none"


@dataclass
class DecomposeAll:
    """Everything torch's default decomposition table covers (`--decompose`)."""

    NAME: ClassVar[str] = "`all` decomposition"
    KIND: ClassVar[str] = "all"


@dataclass
class DecomposeMissing:
    """Only when an op outside `handled` (the ops the backend's translations and FX
    node fixes declare) is in the default table: the table minus `handled`."""

    NAME: ClassVar[str] = "`missing` decomposition"
    KIND: ClassVar[str] = "missing"
    handled: list[str]


@dataclass
class TraceParams:
    NAME: ClassVar[str] = "`trace` request"
    source: ArchitectureSource | DirectorySource | FunctionSource | ProgramSource | CapturedSource
    task: str | None
    dynamic: bool
    dynamic_shapes: list[str]
    batch: int
    sequence: int
    output: str
    # Where the eager reference goes; None: no eager run on real weights (a
    # streamed model's weights are then never read).
    reference: str | None
    decompose: DecomposeNone | DecomposeAll | DecomposeMissing
    device: str
    dtype: str
    experts: str | None
    folder: str | None
    # "in_archive" (torch.export.save packs them), "side" (`save_with_side_weights`),
    # "streamed" (side, and a model folder's parameters left in its checkpoint).
    weights: str
    # Streamed weights: send the weights the host will write, "archive_entries"
    # (the `.pt2`'s) or "parameters" (an ONNX model's initializers), with
    # where each one's bytes are (`checkpoint.weights_plan`) before
    # torch.export runs, for the host to write them meanwhile; None: no plan.
    plan_weights: str | None
    patches: list[PatchSpec]

    def validate(self):
        if self.weights not in ("in_archive", "side", "streamed"):
            raise ProtocolError(
                f"{self.NAME}: field `weights`: `{self.weights}` is not in_archive, side or streamed"
            )
        if self.plan_weights not in (None, "archive_entries", "parameters"):
            raise ProtocolError(
                f"{self.NAME}: field `plan_weights`: `{self.plan_weights}` is not archive_entries or parameters"
            )


@dataclass
class CaptureGenerationParams:
    """`capture_generation`: build the model and capture the kwargs of its
    generation components from one `generate` call on its inputs; kept in the
    worker for the `trace` requests (`CapturedSource`) that follow. The
    model's configs go to `folder` when given."""

    NAME: ClassVar[str] = "`capture_generation` request"
    source: ArchitectureSource | DirectorySource | FunctionSource
    task: str | None
    batch: int
    sequence: int
    device: str
    dtype: str
    experts: str | None
    multi_token_decode: bool
    max_cache_len: int | None
    folder: str | None


@dataclass
class PatchesRestoredParams:
    NAME: ClassVar[str] = "`patches_restored` request"
    patches: list[PatchSpec]


@dataclass
class OnnxModel:
    """An `.onnx` artifact, run in ONNX Runtime."""

    NAME: ClassVar[str] = "`onnx` model"
    KIND: ClassVar[str] = "onnx"
    path: str


@dataclass
class Pt2Model:
    """A `.pt2` artifact (weights inside), run as `torch.export.load(path).module()`."""

    NAME: ClassVar[str] = "`pt2` model"
    KIND: ClassVar[str] = "pt2"
    path: str


@dataclass
class PteModel:
    """A `.pte` artifact, run in the ExecuTorch runtime; its method takes the
    inputs flattened by `in_spec` (torch's pytree JSON of `((), kwargs)`)."""

    NAME: ClassVar[str] = "`pte` model"
    KIND: ClassVar[str] = "pte"
    path: str
    in_spec: str


@dataclass
class VerifyParams:
    NAME: ClassVar[str] = "`verify` request"
    model: OnnxModel | Pt2Model | PteModel
    reference: str
    second_size: bool
    atol: float
    rtol: float


@dataclass
class GenerateCheckParams:
    """`generate_check`: `steps` greedy tokens through the exported components
    (by name, each in its runtime) against `model.generate` in eager."""

    NAME: ClassVar[str] = "`generate_check` request"
    components: dict[str, OnnxModel | Pt2Model | PteModel]
    steps: int
    atol: float
    rtol: float


@dataclass
class LowerParams:
    """`lower`: the `.pt2` at `program` (the program after hfx's FX stages,
    its weights indexed where they are by `<program>.weights.json` and
    mapped, `pytree.load_exported_mapped`) through ExecuTorch's edge lowering
    with `delegate`'s partitioner, then `to_executorch`, written to `output`
    (a `.pte`)."""

    NAME: ClassVar[str] = "`lower` request"
    program: str
    output: str
    delegate: str


@dataclass
class EdgeProgramParams:
    """`edge_program`: the `.pt2` at `program` (its weights mapped where they
    are, as for `lower`) decomposed with ExecuTorch's edge decomposition
    table (core ATen), saved to `output` (a `.pt2` whose weights are indexed
    in the same files): what hfx's native portable emitter starts from."""

    NAME: ClassVar[str] = "`edge_program` request"
    program: str
    output: str


@dataclass
class CaptureValuesParams:
    """The values flowing through the program at `names` (node outputs and
    inputs) when it runs on the reference's sample inputs."""

    NAME: ClassVar[str] = "`capture_values` request"
    program: str
    reference: str
    names: list[str]


@dataclass
class CaptureProgramParams:
    """The program of a `python:module:function` model's forward, for a patch case."""

    NAME: ClassVar[str] = "`capture_program` request"
    spec: str


@dataclass
class GraphCandidate:
    """A program in the IR's JSON form, run by the worker's interpreter."""

    NAME: ClassVar[str] = "`graph` candidate"
    KIND: ClassVar[str] = "graph"
    program: dict[str, Any]


@dataclass
class OnnxCandidate:
    """An ONNX model, run in ONNX Runtime."""

    NAME: ClassVar[str] = "`onnx` candidate"
    KIND: ClassVar[str] = "onnx"
    path: str


@dataclass
class RunCaseParams:
    """A self-test case: `program` (IR JSON) and `candidate` on the same `values`
    (by input name), compared output by output."""

    NAME: ClassVar[str] = "`run_case` request"
    program: dict[str, Any]
    candidate: GraphCandidate | OnnxCandidate
    values: dict[str, Any]
    atol: float
    rtol: float


@dataclass
class OpInfosParams:
    """The OpInfos whose first sample dispatches only `translated` ops, and torch's core ATen overloads."""

    NAME: ClassVar[str] = "`op_infos` request"
    translated: list[str]


@dataclass
class OpSamplesParams:
    """The samples of one OpInfo, up to `per_dtype` per dtype, exported into
    `folder` (decomposing what `handled` lacks, as a trace does)."""

    NAME: ClassVar[str] = "`op_samples` request"
    name: str
    variant: str
    dtypes: list[str]
    per_dtype: int
    handled: list[str]
    folder: str


@dataclass
class CheckSampleParams:
    """Sample `index` of the last `op_samples`, its ONNX model at `onnx` in ONNX Runtime against eager."""

    NAME: ClassVar[str] = "`check_sample` request"
    index: int
    onnx: str
    atol: float
    rtol: float


@dataclass
class PatchAnswer:
    """The host's answer to a `patch_call`: the plugin's program (host-checked), or why not."""

    NAME: ClassVar[str] = "patch answer"
    program: dict[str, Any] | None = None
    error: str | None = None

    def validate(self):
        if (self.program is None) == (self.error is None):
            raise ProtocolError("patch answer: exactly one of `program` and `error` is expected")
        if self.program is not None:
            if set(self.program) != {"steps", "output"}:
                raise ProtocolError(
                    f"patch answer: `program` has fields {sorted(self.program)}, expected `steps` and `output`"
                )
            if (
                not isinstance(self.program["steps"], list)
                or type(self.program["output"]) is not int
            ):
                raise ProtocolError(
                    "patch answer: `program.steps` must be a list and `program.output` a slot number"
                )


# ── Replies and notifications (worker → host) ──


@dataclass
class HelloReply:
    protocol: int
    python: str
    versions: dict[str, str]


@dataclass
class ExportMetadata:
    """The fields of the reference's `ExportMetadata` the worker knows (the host adds
    `packages` and `export_config`). `kwargs` and the constants are JSON as the
    reference writes them."""

    architecture: str
    export_dtype: str
    export_device: str
    kwargs: dict[str, Any]
    in_spec: str
    out_spec: str
    in_constants: dict[str, Any]
    out_constants: list[Any]


@dataclass
class Decomposed:
    """An op decomposed after the trace: how many nodes of it, into how many nodes."""

    op: str
    nodes: int
    became: int


@dataclass
class SizeGuard:
    """A guard of torch.export on input sizes (`((4 - input_ids.shape[1] % 4) % 4) <= 0`)
    and input shapes where it breaks (the inputs whose shape differs from the trace's)."""

    guard: str
    breaks_at: dict[str, list[int]]


@dataclass
class WeightsReport:
    """Where the traced program's parameters came from."""

    # Indexed where the model folder's checkpoint holds them (`weights: streamed`).
    streamed: bool
    # Read into the worker's memory (always, unless streamed without a reference).
    loaded: bool
    # Why `weights: streamed` was asked but the weights were loaded.
    fallback: str | None


@dataclass
class TraceReply:
    model_class: str
    inputs: dict[str, list[int]]
    outputs: int
    # The tensor inputs' names, in order: leaf paths (`cache.layers.0.keys`),
    # `input.`-prefixed where an output has the same; empty where the
    # program's own placeholder names stand.
    input_names: list[str]
    output_names: list[str]
    export_metadata: ExportMetadata
    nodes: int
    patches_restored: dict[str, bool]
    # Patched calls answered by a program the plugin gave for the same call before.
    patch_calls_cached: int
    versions: dict[str, str]
    # Seconds per step: import, build, eager, export, save.
    seconds: dict[str, float]
    # Peak resident memory (MiB) after: import, build, export, save.
    peak_rss_mib: dict[str, float]
    side_weights: bool
    weights: WeightsReport
    decomposed: list[Decomposed]
    # torch.export's guards on input sizes that no range constraint states and
    # some other size breaks, simplest first: the program is valid only where
    # they hold, and no artifact carries them.
    size_guards: list[SizeGuard]


@dataclass
class CapturedComponent:
    """A captured component and its tensor inputs' shapes, by leaf path."""

    name: str
    inputs: dict[str, list[int]]


@dataclass
class CaptureGenerationReply:
    model_class: str
    components: list[CapturedComponent]
    seconds: float


@dataclass
class GenerateStep:
    """One generated position: the token per batch row from the components and
    from eager, and the max abs error of the logits that chose it (null if not finite)."""

    tokens: list[int]
    eager_tokens: list[int]
    max_abs: float | None
    # The logits within atol/rtol of eager's.
    ok: bool


@dataclass
class ComponentCalls:
    name: str
    calls: int


@dataclass
class GenerateCheckReply:
    identical: bool
    steps: list[GenerateStep]
    # How many times `generate` called each component.
    calls: list[ComponentCalls]
    providers: list[str]


@dataclass
class Comparison:
    """One output against eager; `max_abs`/`max_rel` are null when the shapes differ or the error is not finite."""

    shape: list[int]
    expected_shape: list[int]
    max_abs: float | None
    max_rel: float | None
    ok: bool


@dataclass
class Check:
    inputs: dict[str, list[int]]
    outputs: list[Comparison]


@dataclass
class VerifyReply:
    checks: list[Check]
    providers: list[str]


@dataclass
class LowerReply:
    """The lowered program: its inputs' pytree spec (what the method's flat
    inputs are), how many of its nodes the delegate took, seconds per step."""

    in_spec: str
    delegated_nodes: int
    portable_nodes: int
    partitions: int  # the delegate's partitions, of which
    partitions_replayed: int  # took the graph of a partition of the same structure
    retraces_skipped: int  # retraces that would have changed nothing (a decomposition, passes)
    edge_seconds: float
    executorch_seconds: float
    bytes: int


@dataclass
class EdgeProgramReply:
    """The method's input and output pytree specs, the decomposition's seconds,
    and whether the weights went beside the program (`<output>.weights`)."""

    in_spec: str
    out_spec: str
    seconds: float
    side_weights: bool


@dataclass
class CaptureValuesReply:
    values: dict[str, Any]


@dataclass
class CaptureProgramReply:
    program: dict[str, Any]
    inputs: dict[str, Any]


@dataclass
class OpInfo:
    name: str
    variant: str
    # What its first sample dispatches.
    ops: list[str]


@dataclass
class OpInfosReply:
    infos: list[OpInfo]
    core: list[str]


@dataclass
class SampleProgram:
    """An exported sample: its `.pt2`, the ATen overloads it holds, whether its
    outputs are compared by shape only (random, or uninitialized memory)."""

    path: str
    ops: list[str]
    shape_only: bool
    kind: str = "program"


@dataclass
class SampleSkipped:
    reason: str
    kind: str = "skipped"


@dataclass
class OpSample:
    index: int
    dtype: str
    about: str
    exported: SampleProgram | SampleSkipped


@dataclass
class OpSamplesReply:
    samples: list[OpSample]


@dataclass
class RunCaseReply:
    outputs: list[Comparison]


@dataclass
class Progress:
    stage: str

    def validate(self):
        if self.stage not in STEPS:
            raise ProtocolError(f"progress: unknown stage `{self.stage}`")


@dataclass
class PatchCall:
    """A patched call, described: `values` is the table of the call's values
    (`{"tensor": ...}`, `{"scalar": ...}`, ...; `sandbox.describe`), `args` and
    `kwargs` name their slots."""

    plugin: str
    target: str
    values: list[dict[str, Any]]
    args: list[int]
    kwargs: list[list[Any]]


class ArtifactFailed(RuntimeError):
    """The artifact itself fails in its runtime: the message says where and
    why, and no traceback is sent (the worker's Python is not at fault)."""


class Unsupported(ValueError):
    """The model cannot be exported as asked: the message says why and what to
    do instead, and no traceback is sent (nothing failed but the request)."""


@dataclass
class ErrorReply:
    """A request's exception: its type, message and traceback."""

    type: str
    message: str
    traceback: str


# ── Reading and writing ──


def parse(cls, data, where=None):
    """`cls` from a decoded JSON value; unknown, missing and mistyped fields refused."""
    where = where or cls.NAME
    if not isinstance(data, dict):
        raise ProtocolError(f"{where}: expected a JSON object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = [f for f in dataclasses.fields(cls)]
    names = {f.name for f in known}
    unknown = [key for key in data if key not in names]
    if unknown:
        raise ProtocolError(f"{where}: unknown field `{unknown[0]}`")
    values = {}
    for f in known:
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ProtocolError(f"{where}: missing field `{f.name}`")
            continue
        values[f.name] = _convert(hints[f.name], data[f.name], f"{where}, field `{f.name}`")
    message = cls(**values)
    if hasattr(message, "validate"):
        message.validate()
    return message


def _convert(tp, value, where):
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if all(dataclasses.is_dataclass(a) for a in options) and len(options) > 1:
            # A tagged union: `kind` picks the dataclass.
            if not isinstance(value, dict) or "kind" not in value:
                raise ProtocolError(f"{where}: expected an object with a `kind`")
            for option in options:
                if option.KIND == value["kind"]:
                    return parse(
                        option,
                        {k: v for k, v in value.items() if k != "kind"},
                        f"{where} ({option.NAME})",
                    )
            kinds = ", ".join(f"`{o.KIND}`" for o in options)
            raise ProtocolError(f"{where}: unknown kind `{value['kind']}` (expected {kinds})")
        if len(options) != 1:
            raise TypeError(f"protocol type {tp} is not supported")
        return _convert(options[0], value, where)
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
        message = Progress(stage)
        message.validate()
        self.write({"progress": dataclasses.asdict(message)})

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
        if answer.error is not None:
            raise RuntimeError(answer.error)
        return answer.program
