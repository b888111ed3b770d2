"""Model functions that test the worker's box (`tests/it/trace.rs`): processes
the worker starts, lines it writes past the protocol. The tests find the
worker and what it started in /proc: the sandboxed worker may write nowhere
the test could read after the run."""

import os
import sys
import time


def spawns_and_hangs():
    """Starts a child process (which inherits the worker's stdout) and hangs.
    A fork, not a program: the worker's sandbox refuses `execve`."""
    child = os.fork()
    if child == 0:
        time.sleep(1000)
        os._exit(0)
    print("started a child, about to hang", file=sys.stderr, flush=True)
    time.sleep(3600)


def long_line():
    """Writes 65 MiB on the protocol's stdout without a newline."""
    chunk = b"x" * (1 << 20)
    for _ in range(65):
        os.write(1, chunk)
    time.sleep(3600)


def bad_line():
    """Writes a line that is not a protocol message."""
    os.write(1, b"this is not json\n")
    time.sleep(3600)
