"""Loads an hfx export folder with the reference runtime and checks it.

    python check_folder.py FOLDER REFERENCE.pt ATOL [RUNNER_KWARGS_JSON]
    python check_folder.py FOLDER REFERENCE.pt SHARExmax    # a quantized program

`transformers.exporters.ExportedModel.from_pretrained(FOLDER)` (transformers
5.24, unchanged) loads the export and runs it on the recorded inputs; its
outputs are the model's own output type (a `ModelOutput`, its cache included)
and match the recorded eager outputs within ATOL (absolute and relative), or,
for a program of a quantized model, within SHARE of each output's largest
eager magnitude (as hfx's `--verify` holds it: `0.05xmax`). RUNNER_KWARGS_JSON
goes to `from_pretrained` as the runner's keyword arguments (an OpenVINO
folder's `{"device": "cpu", "config": {"INFERENCE_PRECISION_HINT": "f32"}}`:
OpenVINO 2026.3 does not apply the precision the IR records, and its CPU
plugin runs in bfloat16 where the CPU has it).
"""

import json
import os
import sys

import torch
from transformers.exporters import ExportedModel
from transformers.utils import ModelOutput

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
from hfx_worker import pytree  # noqa: E402


def within(got, want, tolerance):
    """`got` is `want` within `tolerance` (`ATOL`, or `SHARExmax`)."""
    got, want = got.float(), want.float()
    if tolerance.endswith("xmax"):
        share = float(tolerance.removesuffix("xmax"))
        return bool((got - want).abs().max() <= share * want.abs().max())
    atol = float(tolerance)
    return torch.allclose(got, want, atol=atol, rtol=atol)


def main(folder, reference, tolerance, runner_kwargs="{}"):
    if tolerance.endswith("xmax"):
        # A quantized embedding runs ExecuTorch's `embedding_byte`/`embedding_4bit`,
        # whose kernels the runtime registers only once this is imported (as
        # ExecuTorch's own LLM runners link its quantized kernels).
        import executorch.kernels.quantized  # noqa: F401
    ref = torch.load(reference)
    exported = ExportedModel.from_pretrained(
        folder, trust_remote_code=True, **json.loads(runner_kwargs)
    )
    outputs = exported(**ref["inputs"])
    if not isinstance(outputs, ModelOutput):
        raise SystemExit(
            f"the export returns a {type(outputs).__name__}, not the model's ModelOutput"
        )
    got = pytree.flat_outputs(outputs)
    want = ref["outputs"]
    if len(got) != len(want):
        raise SystemExit(f"{len(got)} outputs vs {len(want)} eager")
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or not within(g, w, tolerance):
            raise SystemExit(f"output {i} differs")
    print(f"ok: {type(outputs).__name__} with {list(outputs.keys())}")


if __name__ == "__main__":
    main(*sys.argv[1:])
