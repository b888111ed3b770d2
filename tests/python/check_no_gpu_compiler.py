"""The worker's `server.NoGpuCompiler`: where torch sees no GPU, the imports
of a trace (transformers' modeling code, torch._dynamo, torch.export) leave
triton, the GPU kernel compiler, unloaded, and torch takes it as absent.

    python check_no_gpu_compiler.py

Exits non-zero with one line per failure.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker"))
from hfx_worker import server  # noqa: E402

import importlib.util  # noqa: E402

failures = []
if importlib.util.find_spec("triton") is None:
    failures.append("triton is not installed here: nothing to check (PyPI's torch installs it)")
sys.meta_path.insert(0, server.NoGpuCompiler())

import torch  # noqa: E402
import torch._dynamo  # noqa: E402,F401
import torch.export  # noqa: E402,F401
import transformers.models.llama.modeling_llama  # noqa: E402,F401
from torch.utils._triton import has_triton_package  # noqa: E402

if torch.cuda.is_available():
    failures.append("a GPU is visible: this check is for a machine without one")
if "triton" in sys.modules:
    failures.append("triton was imported although torch sees no GPU")
if has_triton_package():
    failures.append("torch takes triton as installed")
try:
    import triton  # noqa: F401
    failures.append("`import triton` succeeded")
except ModuleNotFoundError as error:
    if "no GPU" not in str(error):
        failures.append(f"`import triton` refused without saying why: {error}")

for failure in failures:
    print(failure, file=sys.stderr)
sys.exit(1 if failures else 0)
