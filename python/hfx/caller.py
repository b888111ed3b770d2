"""This process as the trace worker of one `hfx run`.

The binary starts as a child with `--model-caller READ,WRITE`: two pipes,
on which this process answers its requests with `hfx_worker.server`'s own
handlers, the model and inputs given here standing for the model source.
The child runs in its own process group, so a Ctrl-C reaches this process
alone: the request in progress unwinds (each patch and model setting the
worker changed restored by its own context manager), the binary is stopped
(SIGTERM: it removes its scratch folders) and the KeyboardInterrupt goes on.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading

# How much of the binary's stderr an error keeps.
STDERR_TAIL = 16 << 10


class ExportError(RuntimeError):
    """hfx refused or failed the export: its one-line error (the binary's)."""


class Caller:
    """What the worker's `caller` source names: the model and its inputs
    (None: hfx's sample inputs for the model's config)."""

    def __init__(self, model, inputs):
        self.model = model
        self.inputs = inputs


def binary():
    """The `hfx` binary: `$HFX_BINARY`, else the one installed with this
    package (the environment's scripts folder), else the first on PATH."""
    given = os.environ.get("HFX_BINARY")
    if given:
        return given
    beside = os.path.join(sysconfig.get_path("scripts"), "hfx")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("hfx")
    if found:
        return found
    raise ExportError(
        "no hfx binary: install the hfx wheel into this environment (pip install hfx-*.whl), "
        "or name the binary with HFX_BINARY"
    )


def configs_of(model):
    """Every config object the model's modules hold, their sub-configs
    included (`text_config`), each once."""
    seen, found = set(), []

    def visit(config):
        if config is None or id(config) in seen or not hasattr(config, "to_dict"):
            return
        seen.add(id(config))
        found.append(config)
        for value in list(vars(config).values()):
            if hasattr(value, "to_dict") and hasattr(value, "model_type"):
                visit(value)

    for module in model.modules():
        visit(getattr(module, "config", None))
    return found


@contextlib.contextmanager
def settings_kept(model):
    """The model's settings a trace changes (`eval()`, the attention and
    experts implementations in its configs), as they were after the block,
    however it ends. Parameters and buffers are never replaced by a trace."""
    training = [(module, module.training) for module in model.modules()]
    configs = [(config, dict(vars(config))) for config in configs_of(model)]
    try:
        yield
    finally:
        for module, mode in training:
            module.training = mode
        for config, saved in configs:
            vars(config).clear()
            vars(config).update(saved)


class Output:
    """A pipe of the binary read on a thread: kept (its tail), and copied to
    `echo` as it comes."""

    def __init__(self, stream, echo, keep):
        self.text = []
        self.size = 0
        self.keep = keep
        self.thread = threading.Thread(target=self.read, args=(stream, echo), daemon=True)
        self.thread.start()

    def read(self, stream, echo):
        for chunk in iter(lambda: stream.readline(), ""):
            if echo is not None:
                echo.write(chunk)
                echo.flush()
            self.text.append(chunk)
            self.size += len(chunk)
            while self.keep and self.size > self.keep and len(self.text) > 1:
                self.size -= len(self.text.pop(0))

    def value(self):
        self.thread.join(timeout=5)
        return "".join(self.text)


def run(arguments, model, inputs, echo_progress=True):
    """`hfx run ARGUMENTS --model-caller ...` with this process as its worker
    for `model`: the binary's stdout once it succeeded, else ExportError
    with its error line."""
    from hfx_worker.server import serve_caller

    requests_read, requests_write = os.pipe()  # the binary writes requests, this process reads
    replies_read, replies_write = os.pipe()  # this process writes replies, the binary reads
    command = [
        binary(),
        "run",
        *arguments,
        "--model-caller",
        f"{replies_read},{requests_write}",
    ]
    try:
        process = subprocess.Popen(
            command,
            pass_fds=(replies_read, requests_write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            process_group=0,
        )
    except BaseException:
        for fd in (requests_read, requests_write, replies_read, replies_write):
            os.close(fd)
        raise
    # The binary's ends are its own now: this process keeps only its own, so
    # the binary's exit is the end of `requests`.
    os.close(replies_read)
    os.close(requests_write)
    stdout = Output(process.stdout, None, 0)
    stderr = Output(process.stderr, sys.stderr if echo_progress else None, STDERR_TAIL)
    try:
        with (
            settings_kept(model),
            os.fdopen(requests_read, "r", encoding="utf-8") as requests,
            os.fdopen(replies_write, "w", encoding="utf-8") as replies,
        ):
            with contextlib.suppress(BrokenPipeError):
                serve_caller(Caller(model, inputs), requests, replies)
        status = process.wait()
    except BaseException:
        stopped(process)
        raise
    if status != 0:
        lines = [line for line in stderr.value().splitlines() if line.strip()]
        raise ExportError(lines[-1] if lines else f"hfx exited with status {status}")
    return stdout.value()


def stopped(process):
    """The binary stopped: SIGTERM (it removes its scratch folders), then SIGKILL."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
