"""`export`, `export_for_generation`, `load`, and what an export returns."""

import json
import os
import tempfile
from pathlib import Path

from . import caller
from .caller import ExportError

# The backends `hfx run --backend` takes, and the names this API also accepts for them.
BACKEND_NAMES = {"pt2": "dynamo", "torch.export": "dynamo"}


class ExportResult:
    """One export: `output` (the artifact or export folder written),
    `artifacts` (each component's file), `summary` (the run's report as
    data: `docs/report.md`'s JSON), `report_html` (the same report as a
    self-contained page, which Jupyter renders for the result), `log` (what
    hfx printed)."""

    def __init__(self, output, summary, report_html, log):
        self.output = Path(output)
        self.summary = summary
        self.report_html = report_html
        self.log = log

    @property
    def artifacts(self):
        return [
            Path(component["artifact"]["path"])
            for component in self.summary.get("components", [])
            if component.get("artifact")
        ]

    @property
    def verified(self):
        """Whether the artifacts were checked against this model (an artifact
        lands only if it matched): every component's parity, or the
        generation check's identical tokens."""
        generation = self.summary.get("generation")
        if generation is not None:
            return bool(generation.get("identical"))
        components = self.summary.get("components", [])
        return bool(components) and all(c.get("parity") for c in components)

    def _repr_html_(self):
        return self.report_html

    def __repr__(self):
        names = ", ".join(str(path) for path in self.artifacts)
        return f"ExportResult({self.summary.get('backend')}: {names or self.output})"


def flags(options):
    """`hfx run` flags from keyword options: `opset=20` is `--opset 20`,
    `external_data=True` `--external-data`, a list repeats the flag, False
    and None leave it out."""
    found = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        values = value if isinstance(value, (list, tuple)) else [value]
        for one in values:
            if one is None or one is False:
                continue
            found += [flag] if one is True else [flag, str(one)]
    return found


def model_place(model):
    """The device and dtype of the model's parameters, which hfx traces it in
    (hfx's own defaults, cpu and float32, would convert it in place)."""
    parameter = next(model.parameters(), None)
    if parameter is None:
        return []
    return [
        "--device",
        str(parameter.device),
        "--dtype",
        str(parameter.dtype).removeprefix("torch."),
    ]


def export(
    model,
    inputs=None,
    *,
    backend="onnx",
    output,
    dynamic=True,
    generation=False,
    verify=False,
    plugins=(),
    progress=True,
    **options,
):
    """Exports `model` (a live `torch.nn.Module` / `PreTrainedModel`) as it is
    in this process: `inputs` (a dict of keyword arguments of its forward; None:
    hfx's sample inputs for its config) trace it; `backend` is `onnx`,
    `dynamo` (a `.pt2`; also `pt2`), `executorch`, ...; `output` is the artifact
    file or the export folder; `dynamic=False` fixes the sizes; `verify` runs
    the artifact against this model before it lands; `plugins` adds plugin
    folders; any other option is `hfx run`'s flag of that name
    (`opset=20`, `quantize="int4"`). Returns an `ExportResult`; raises
    ExportError with hfx's error line."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"hfx.export takes a torch.nn.Module, not {type(model).__name__}")
    if inputs is not None and not isinstance(inputs, dict):
        raise TypeError(
            "inputs: a dict of the forward's keyword arguments (`{'input_ids': ...}`), "
            f"not {type(inputs).__name__}"
        )
    backend = BACKEND_NAMES.get(backend, backend)
    output = Path(os.fspath(output)).absolute()
    arguments = ["--backend", backend, "-o", str(output), *model_place(model)]
    if not dynamic:
        arguments.append("--static")
    if generation:
        arguments.append("--generation")
    if verify:
        arguments.append("--verify")
    for folder in plugins:
        arguments += ["--plugins", os.fspath(folder)]
    arguments += flags(options)
    with tempfile.TemporaryDirectory(prefix="hfx-report-") as reports:
        page, data = Path(reports, "report.html"), Path(reports, "report.json")
        arguments += ["--report", str(page), "--report", str(data)]
        log = caller.run(arguments, model, inputs, echo_progress=progress)
        summary = json.loads(data.read_text(encoding="utf-8"))
        report_html = page.read_text(encoding="utf-8")
    return ExportResult(output, summary, report_html, log)


def export_for_generation(model, inputs=None, *, output, **options):
    """`export` of the components a `generate` call is made of (`prefill`,
    `decode`), each traced from one `generate` call of this model, into the
    export folder `output`; `verify=True` generates greedy tokens through
    them against the model's own `generate`."""
    return export(model, inputs, output=output, generation=True, **options)


def load(folder, **options):
    """An export folder as the reference loads it:
    `transformers.exporters.ExportedModel.from_pretrained(folder, **options)`
    (a `.pt2` is a pickle, loaded only with `trust_remote_code=True`)."""
    from transformers.exporters import ExportedModel

    return ExportedModel.from_pretrained(os.fspath(folder), **options)


__all__ = ["ExportError", "ExportResult", "export", "export_for_generation", "load"]
