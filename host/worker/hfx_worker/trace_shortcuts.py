"""Shortcuts through torch.export's tracing and saving that give the program
and the bytes it gives, for less of its work.

- **Node stack traces** (`frame_stacks`). Each node torch.export's tracer
  makes records where the model's code made it (`node.meta["stack_trace"]`,
  which the host names in its errors and a `.pt2` keeps). For that,
  torch.fx captures the whole Python stack
  (`CapturedTraceback.extract().summary()`: ~100 frames deep inside
  torch.export), symbolizes it, and builds a `FrameSummary` per frame that
  reads the frame's source line, then keeps the model's frames: 250-360 us a
  node. Here the same frames (file, line, function, outermost first) are
  read from the frames themselves (`sys._getframe`), one `FrameSummary` per
  code object and line, and a source line is read only for a frame that is
  kept, when it is formatted: ~45 us. torch's own filter and formatting run
  on them unchanged, so each node's stack trace is the same string.
- **Saving** (`saving`, through `checkpoint.save_program`: every program the
  worker hands the host). torch's serializer deep-copies the whole
  serialized program and canonicalizes the copy only to check that a
  canonical form exists, and throws the copy away
  (`ExportedProgramSerializer.serialize`): about half of `torch.export.save`
  of a 125M Llama, and its peak memory. Here that check is skipped (the host
  reads and checks the program it is handed), and the cyclic collector is
  off while the program is serialized (hundreds of thousands of short-lived
  objects, no cycles worth a collection). `torch.export.save` of the 125M
  program: 0.75-0.86 s -> 0.23-0.25 s, the same bytes. (The side-weights
  save, the worker's usual one, skipped the check before; for it the
  collector's pause is what is new: the trace's save step 0.56-0.84 s ->
  0.37-0.53 s.)

`tests/python/check_trace_shortcuts.py` compares programs and bytes with and
without. Both reach into torch internals (`torch.fx.proxy.CapturedTraceback`,
`torch._export.serde.serialize.canonicalize`), so they apply only to the
torch version they were checked against; any other traces and saves as torch
does (the collector is still paused while saving).
"""

import contextlib
import gc
import importlib.metadata
import sys
import traceback

SUPPORTED = {"torch": "2.13."}


def pinned(versions):
    """Whether each installed package's version starts with `versions`'
    (`{"torch": "2.13."}`): the versions a shortcut was checked against."""
    try:
        return all(
            importlib.metadata.version(package).startswith(version)
            for package, version in versions.items()
        )
    except importlib.metadata.PackageNotFoundError:
        return False


def supported():
    return pinned(SUPPORTED)


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
                known = seen[id(code), line] = (
                    code,
                    traceback.FrameSummary(code.co_filename, line, code.co_name, lookup_line=False),
                )
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


@contextlib.contextmanager
def saving():
    """torch.export's serializer within the block skips its discarded
    canonical-form check (on a supported torch), and the cyclic collector
    pauses (as it was after)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        if not supported():
            yield
            return
        from torch._export.serde import serialize

        original = serialize.canonicalize
        serialize.canonicalize = unchecked
        try:
            yield
        finally:
            serialize.canonicalize = original
    finally:
        if collecting:
            gc.enable()


def unchecked(program, constants=None):
    """`canonicalize` where its caller discards the canonical program."""
    return program
