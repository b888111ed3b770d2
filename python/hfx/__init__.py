"""hfx from Python: export a model where it lives.

    import hfx

    result = hfx.export(model, backend="onnx", output="exported", verify=True)
    result.artifacts        # the files written
    result                  # in Jupyter: the run's report
    hfx.load("exported")    # the reference's ExportedModel

`hfx.export` starts the `hfx` binary installed beside this package as a child
process and serves the trace worker's protocol for it in this process, over
two pipes: the model is traced where it is, as it is (no re-creation, no
copy of it first), and the patch plugins apply here, restored afterwards.

Modules: `caller` (this process as the worker of one run: the model's
settings kept and restored, the binary's output kept), `api` (`export`,
`export_for_generation`, `load`, the result).
"""

from .api import ExportError, ExportResult, export, export_for_generation, load

__all__ = ["ExportError", "ExportResult", "export", "export_for_generation", "load"]
