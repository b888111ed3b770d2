"""Model functions that test the worker's box (`tests/it/trace.rs`): processes
the worker starts, lines it writes past the protocol. Each writes the pids it
knows to files in the current folder (hfx's, where the test looks)."""

import os
import sys
import time


def _write(name, pid):
    with open(name + ".tmp", "w") as f:
        f.write(str(pid))
    os.rename(name + ".tmp", name)


def spawns_and_hangs():
    """Starts a child process (which inherits the worker's stdout) and hangs.
    A fork, not a program: the worker's sandbox refuses `execve`."""
    child = os.fork()
    if child == 0:
        time.sleep(1000)
        os._exit(0)
    _write("child.pid", child)
    _write("worker.pid", os.getpid())
    print("started a child, about to hang", file=sys.stderr, flush=True)
    time.sleep(3600)


def long_line():
    """Writes 65 MiB on the protocol's stdout without a newline."""
    _write("worker.pid", os.getpid())
    chunk = b"x" * (1 << 20)
    for _ in range(65):
        os.write(1, chunk)
    time.sleep(3600)


def bad_line():
    """Writes a line that is not a protocol message."""
    _write("worker.pid", os.getpid())
    os.write(1, b"this is not json\n")
    time.sleep(3600)
