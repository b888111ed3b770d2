"""The request loop, and the session every request runs in.

The protocol owns stdout: anything else printed (model code, warnings) goes
to stderr. Each request line is parsed into its typed params (`protocol`);
every failure, a protocol error included, goes back to the host as the
request's error, with its traceback, and the one line for the user where it
is the input's fault (`errors.classify`).
"""

import contextlib
import ctypes
import dataclasses
import functools
import gc
import importlib.abc
import importlib.metadata
import json
import os
import sys
import traceback

from . import confine, protocol
from .calibrate import calibrate
from .checkpoint import SideWeights
from .errors import UserInputError, classify
from .generation import capture_generation, generate_check, generate_text
from .import_memo import ImportStructureMemo
from .lower import edge_program, lower
from .messages import (
    Calibrate,
    CaptureGeneration,
    CaptureProgram,
    CaptureValues,
    CheckSample,
    ConvertOpenvino,
    EdgeProgram,
    Generate,
    GenerateCheck,
    Hello,
    HelloReply,
    Lower,
    OpInfos,
    OpSamples,
    PatchesRestored,
    PythonError,
    RunCase,
    TraceParams,
    Verify,
)
from .openvino_ir import convert_openvino
from .opinfo import check_sample, op_infos, op_samples
from .protocol import ArtifactFailed, Channel, ProtocolError, Request, Unsupported
from .sandbox import Reach, patch_status
from .selftest import capture_program, capture_values, run_case
from .trace import trace
from .verify import verify

# Upstream packages whose versions plugins resolve against (reported by `hello` and `trace`).
PACKAGES = (
    "torch",
    "transformers",
    "onnx",
    "onnxscript",
    "onnxruntime",
    "executorch",
    "openvino",
)


def versions():
    found = {}
    for package in PACKAGES:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


class Session:
    """The state of one worker process across its requests, passed to each: the
    channel to the host, the patch policy (built on first use: it imports torch),
    what `verify` needs of the last trace and `check_sample` of the last `op_samples`."""

    def __init__(self, channel, caller=None):
        self.channel = channel
        self.caller = caller  # the live model of the process that started hfx (`Caller`)
        self._policy = None
        self.last_trace = None
        self.generation = None  # what `capture_generation` captured (`generation.Generation`)
        self.side_weights = SideWeights()  # the last side-weights file a trace wrote
        self.op_samples = []
        self.step = None  # the running request's last progress step, else its method
        self.warm_up = False  # torch imported right after `hello` (`Hello.warm_up`)

    @property
    def policy(self):
        if self._policy is None:
            self._policy = Reach()
        return self._policy

    def progress(self, stage):
        self.step = stage
        self.channel.progress(stage)

    @contextlib.contextmanager
    def during(self, step):
        """`step` is what the session is doing inside the block, unannounced;
        an exception leaves it set, for `classify` to read."""
        outer, self.step = self.step, step
        yield
        self.step = outer

    def weights_plan(self, entries):
        self.channel.weights_plan(entries)

    def ask(self, call):
        return self.channel.ask(call)

    def versions(self):
        return versions()

    def caller_model(self, params):
        """The caller's model and its inputs (None: sample inputs), for a
        request naming the `caller` source: only where this process is hfx's caller."""
        if self.caller is None:
            raise ProtocolError(
                f"{params.NAME}: source `caller` names the model of the process that started hfx, "
                "and this worker was started by hfx"
            )
        model = self.caller.model
        # The caller's model is traced where it lives: what would change it in place is refused.
        if params.quantize is not None:
            raise UserInputError(
                "unsupported_option",
                "quantize: torchao quantizes the model in place, and this model is the caller's: "
                "export a quantized copy (copy.deepcopy) or export from a model folder",
            )
        if params.weights_dtype is not None:
            raise UserInputError(
                "unsupported_option",
                f"dtype={params.weights_dtype} to OpenVINO computes the model in float32 over its weights rounded "
                f"to {params.weights_dtype}, in place, and this model is the caller's: export a copy "
                "(copy.deepcopy) or export from a model folder",
            )
        parameter = next(model.parameters(), None)
        if parameter is not None and (
            str(parameter.device) != params.device
            or str(parameter.dtype) != f"torch.{params.dtype}"
        ):
            raise UserInputError(
                "unsupported_option",
                f"device={params.device}, dtype={params.dtype}: the caller's model is on "
                f"{parameter.device} in {parameter.dtype}, and is traced where it lives: "
                "move or cast it first (model.to(...))",
            )
        return model, self.caller.inputs


def hello(session, params: Hello):
    protocol.check_version(params.protocol)
    # Before any request imports transformers.
    IMPORT_MEMO.memo_dir = params.memo_dir
    session.warm_up = params.warm_up
    return HelloReply(
        protocol=protocol.PROTOCOL, python=sys.version.split()[0], versions=versions()
    )


def patches_restored(session, params: PatchesRestored):
    return patch_status(session.policy, params.patches)


# Each method: its params' type and its handler (session, params) → reply.
METHODS = {
    "hello": (Hello, hello),
    "trace": (TraceParams, trace),
    "patches_restored": (PatchesRestored, patches_restored),
    "verify": (Verify, verify),
    "capture_generation": (CaptureGeneration, capture_generation),
    "generate_check": (GenerateCheck, generate_check),
    "generate": (Generate, generate_text),
    "calibrate": (Calibrate, calibrate),
    "lower": (Lower, lower),
    "convert_openvino": (ConvertOpenvino, convert_openvino),
    "edge_program": (EdgeProgram, edge_program),
    "capture_values": (CaptureValues, capture_values),
    "capture_program": (CaptureProgram, capture_program),
    "run_case": (RunCase, run_case),
    "op_infos": (OpInfos, op_infos),
    "op_samples": (OpSamples, op_samples),
    "check_sample": (CheckSample, check_sample),
}


# Device nodes of an NVIDIA driver (Linux, and WSL's GPU paravirtualization).
NVIDIA_DEVICES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")


class NoGpuLibraries(importlib.abc.MetaPathFinder):
    """Refuses the GPU-only libraries torch imports whenever they are
    installed, where there is no GPU for them. PyPI's torch installs both:

    - `triton`, the GPU kernel compiler. torch._dynamo (which transformers and
      torch.export import) loads it: its library alone is ~67 MiB resident
      and ~0.1 s per worker, for kernels a CPU export never compiles. torch
      asks through `torch.utils._triton.has_triton_package`, which takes the
      refusal as "not installed". Decided when triton is first asked for,
      from what torch sees then.
    - `cuda.bindings`, NVIDIA's runtime bindings, which `import torch` loads
      (`torch.cuda._utils`, which takes an ImportError as "not installed"):
      ~0.13 s of every worker's start, most of it `cuda.pathfinder` running
      `ldconfig -p` to look for driver libraries. torch asks while it is
      being imported, before it can say whether it sees a GPU, so this is
      decided by the driver's device nodes: without them torch sees no GPU
      either.

    With a GPU, both load as usual."""

    def find_spec(self, name, path=None, target=None):
        if name == "triton":
            cuda = getattr(sys.modules.get("torch"), "cuda", None)
            if cuda is None or cuda.is_available():
                return None  # torch not imported yet (not its request) or a GPU is there
            raise ModuleNotFoundError(
                "triton is not loaded by the hfx worker: torch sees no GPU to run its kernels",
                name=name,
            )
        if name == "cuda.bindings" and not any(os.path.exists(device) for device in NVIDIA_DEVICES):
            raise ModuleNotFoundError(
                "cuda.bindings is not loaded by the hfx worker: this machine has no NVIDIA device",
                name=name,
            )
        return None


# Python's cyclic collector at its defaults (a young collection per 700 new
# objects, an older one per 10 of those) walks torch's, transformers' and the
# program's objects again and again: importing torch alone makes ~900
# collections, and a 125M Llama's trace spends 1.2 s in ~2,500 of them. So it
# does not run inside a request: it is off while one runs and collects once
# after the reply is written, while the host works on what it got (emits, or
# loads the next request's plugins). What the warm-up imported is frozen
# (`gc.freeze`), never walked again. Measured on a 125M Llama from a model
# folder: a `.pt2` export 0.4-0.8 s faster (of 6-8) at +10 MiB of peak
# memory; an XNNPACK export 3 s faster (of 60-64) at +150-230 MiB (of 2.3
# GiB; with the collector on inside ExecuTorch's lowering, everything else
# frozen, it kept the memory and lost the time). These thresholds hold only
# where a library turns the collector back on.
GC_THRESHOLDS = (50_000, 10, 10)


def collect_between_requests():
    """The collection the request skipped (see `GC_THRESHOLDS`), and the heap
    it freed handed back to the system: glibc keeps freed small blocks for
    reuse, so without a trim a worker stays at the high-water mark of its
    largest request (0.3-0.5 GiB above what it holds after an XNNPACK
    lowering of a 125M Llama) into the next one."""
    gc.collect()
    trim = malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def malloc_trim():
    """glibc's `malloc_trim`, or None where the C library has none."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


# transformers' import structures, kept where `hello` says (`import_memo`).
IMPORT_MEMO = ImportStructureMemo()


def main():
    # Before any request: nothing a request runs may start a program.
    confine.from_environment()
    gc.set_threshold(*GC_THRESHOLDS)
    gc.disable()
    sys.meta_path.insert(0, NoGpuLibraries())
    sys.meta_path.insert(0, IMPORT_MEMO)
    protocol_out = sys.stdout
    sys.stdout = sys.stderr
    session = Session(Channel(protocol_out, sys.stdin))
    for line in sys.stdin:
        if not line.strip():
            continue
        text, greeted = answer(session, line)
        protocol_out.write(text + "\n")
        protocol_out.flush()
        if greeted and session.warm_up:
            warm_up()
        collect_between_requests()


def answer(session, line, passed_through=()):
    """The reply line to one request line, and whether it greeted (`hello`).
    Every failure becomes the request's error, but those of `passed_through`
    (a caller's KeyboardInterrupt), which propagate."""
    request_id = 0  # until the line gives one: the host then reports a mismatch
    greeted = False
    session.step = None
    try:
        try:
            data = json.loads(line)
        except ValueError as error:
            raise ProtocolError(f"request: not JSON ({error})") from None
        if isinstance(data, dict) and type(data.get("id")) is int:
            request_id = data["id"]
        request = protocol.parse(Request, data)
        if request.method not in METHODS:
            raise ProtocolError(
                f"request: unknown method `{request.method}` (expected one of {', '.join(METHODS)})"
            )
        params_type, handler = METHODS[request.method]
        session.step = request.method
        reply = handler(session, protocol.parse(params_type, request.params))
        greeted = request.method == "hello"
        text = protocol.to_json(
            {
                "id": request_id,
                "result": dataclasses.asdict(reply) if dataclasses.is_dataclass(reply) else reply,
            }
        )
    except passed_through:
        raise
    except BaseException as error:  # every failure goes back to the host, typed
        text = protocol.to_json(
            {
                "id": request_id,
                "error": dataclasses.asdict(
                    PythonError(
                        type=type(error).__name__,
                        message=str(error),
                        traceback=""
                        if isinstance(error, (ArtifactFailed, Unsupported))
                        else traceback.format_exc(),
                        user=classify(error, session.step),
                    )
                ),
            }
        )
    return text, greeted


def serve_caller(caller, requests, replies):
    """The request loop of a worker that is hfx's caller (`hfx.export`): this
    process's `caller` (its model and inputs) traced in place, one request line
    from `requests` answered on `replies` until hfx closes its end. Nothing
    global changes: no execve filter, no import hooks, the collector as it is.
    A KeyboardInterrupt propagates to the caller, every patch and model
    setting already restored by the request's own context managers."""
    session = Session(Channel(replies, requests), caller)
    for line in requests:
        if not line.strip():
            continue
        text, _ = answer(session, line, passed_through=(KeyboardInterrupt, SystemExit))
        replies.write(text + "\n")
        replies.flush()


def warm_up():
    """torch imported right after `hello`, while the host loads its plugins
    (where the host says the worker's requests need torch; a trace's `import`
    step then reports what was left of it). A failure is the next request's
    to report."""
    try:
        import torch  # noqa: F401
    except Exception:  # noqa: BLE001 - said by the request that needs it
        pass
    gc.freeze()  # torch's objects: alive until the worker ends, never walked again
