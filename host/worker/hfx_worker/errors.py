"""Failures the user's input caused, each said in one line that names the
input and the fix (the protocol's `UserError`): the host prints the line and
keeps the traceback for `-v`. A check of the input raises `UserInputError`;
`classify` recognizes the rest after the fact: transformers refusing a
model or its inputs, the patch sandbox refusing a plugin's program, a file
that is not there. Anything else is a failure of hfx or its upstreams and
keeps its traceback."""

import difflib

from .messages import UserError, UserErrorKind
from .sandbox import PatchProgramError


class UserInputError(Exception):
    """A failure of the user's input: `kind` (a `UserErrorKind`) and its one line."""

    def __init__(self, kind: UserErrorKind, line: str):
        super().__init__(line)
        self.kind = kind
        self.line = line


def nearest(word, names, count=3):
    """`; did you mean a, b or c?` naming the names closest to `word`, or "" if none is close."""
    close = difflib.get_close_matches(word, sorted(set(names)), n=count, cutoff=0.6)
    if not close:
        return ""
    said = ", ".join(f"`{name}`" for name in close[:-1])
    return f"; did you mean {said + ' or ' if said else ''}`{close[-1]}`?"


def first_line(text):
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def raised_in(error, fragment):
    """Whether the innermost frame of `error`'s traceback is in a file whose path holds `fragment`."""
    frame = error.__traceback__
    if frame is None:
        return False
    while frame.tb_next is not None:
        frame = frame.tb_next
    return fragment in frame.tb_frame.f_code.co_filename.replace("\\", "/")


# Where the worker runs plugin code under its policy (`sandbox.Reach`): a
# patch program, a patch case's program, a self-test case's graph.
POLICY_FILES = ("hfx_worker/sandbox.py", "hfx_worker/program.py", "hfx_worker/graph.py")


def refused_by_sandbox(error):
    """A `PermissionError` the plugin sandbox raised (not the OS: no errno)."""
    return (
        isinstance(error, PermissionError)
        and error.errno is None
        and any(raised_in(error, path) for path in POLICY_FILES)
    )


def classify(error, step):
    """The protocol's `UserError` for `error`, raised during `step` (a
    trace's step, else the request's method), or None when it is not the
    input's fault."""
    if isinstance(error, UserInputError):
        return UserError(kind=error.kind, line=error.line)
    if refused_by_sandbox(error) or (
        isinstance(error, PatchProgramError) and refused_by_sandbox(error.__cause__)
    ):
        return UserError(
            kind="sandbox_refusal",
            line=f"{first_line(str(error))} (refused by the plugin sandbox: fix or drop the plugin)",
        )
    # Past `build` the files and inputs are hfx's own (its scratch, its sample
    # inputs): a missing file or a refusal there is hfx's failure, traceback kept.
    if step != "build":
        return None
    if isinstance(error, FileNotFoundError) and error.filename:
        return UserError(kind="missing_file", line=f"{error.filename}: no such file")
    refusal = transformers_refusal(error)
    if refusal is not None:
        return UserError(
            kind="model",
            line=f"transformers refused the model while building it: {first_line(str(refusal))} "
            "(its config: --set, or the folder's config.json)",
        )
    return None


def transformers_refusal(error):
    """The `ValueError` transformers raised that `error` is or was caused by
    (a config's validation wraps it in huggingface_hub's error), or None."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, ValueError) and raised_in(error, "/transformers/"):
            return error
        error = error.__cause__
    return None
