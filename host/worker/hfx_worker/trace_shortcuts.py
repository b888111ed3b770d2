"""A shortcut through torch.export's tracing that gives the program it gives,
for less of its work.

Each node torch.export's tracer makes records where the model's code made it
(`node.meta["stack_trace"]`, which the host names in its errors and a `.pt2`
keeps). For that, torch.fx captures the whole Python stack
(`CapturedTraceback.extract().summary()`: ~100 frames deep inside
torch.export), symbolizes it, and builds a `FrameSummary` per frame that
reads the frame's source line, then keeps the model's frames: ~250 us a
node, ~0.9 s of a 125M Llama's ~3.5 s torch.export. Here the same frames
(file, line, function, outermost first) are read from the frames themselves
(`sys._getframe`), and a source line is read only for a frame that is kept,
when it is formatted. torch's own filter and formatting run on them
unchanged, so each node's stack trace is the same string
(`tests/python/check_trace_shortcuts.py` compares whole programs).

It reaches into torch.fx's tracer (`torch.fx.proxy.CapturedTraceback`), so
it applies only to the torch version it was checked against; any other
traces as torch does.
"""

import contextlib
import importlib.metadata
import sys
import traceback

SUPPORTED_TORCH = "2.13."


def supported():
    try:
        return importlib.metadata.version("torch").startswith(SUPPORTED_TORCH)
    except importlib.metadata.PackageNotFoundError:
        return False


class FrameStack:
    """What torch.fx's tracer uses of `CapturedTraceback`: `extract()` of the
    caller's Python stack, and its `summary()`, outermost frame first.

    Nodes are made from the same few hundred places: a frame's
    `FrameSummary` is made once per code object and line within a
    `frame_stacks()` block and shared (torch only reads it; it keeps the
    code object, so its id is not reused meanwhile)."""

    __slots__ = ("frames",)
    seen = {}  # (id(code), line) -> (code, FrameSummary), emptied after each block

    def __init__(self, frames):
        self.frames = frames

    @staticmethod
    def extract(*, script=False, cpp=False, skip=0):
        if script or cpp:  # TorchScript or C++ frames: torch's own
            from torch.utils._traceback import CapturedTraceback

            return CapturedTraceback.extract(script=script, cpp=cpp, skip=skip)
        seen = FrameStack.seen
        frames = []
        frame = sys._getframe(1 + skip)  # the caller's, as torch's elides `extract` itself
        while frame is not None:
            code, line = frame.f_code, frame.f_lineno
            known = seen.get((id(code), line))
            if known is None:
                known = seen[id(code), line] = (code, traceback.FrameSummary(code.co_filename, line, code.co_name, lookup_line=False))
            frames.append(known[1])
            frame = frame.f_back
        frames.reverse()
        return FrameStack(frames)

    def summary(self):
        return traceback.StackSummary(self.frames)


@contextlib.contextmanager
def frame_stacks():
    """torch.fx's tracer records node stack traces through `FrameStack`
    within the block (on a supported torch)."""
    if not supported():
        yield
        return
    import torch.fx.proxy as proxy

    original = proxy.CapturedTraceback
    proxy.CapturedTraceback = FrameStack
    try:
        yield
    finally:
        proxy.CapturedTraceback = original
        FrameStack.seen.clear()
