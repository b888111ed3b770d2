"""The worker's `server.NoGpuLibraries`: on a machine without a GPU, the
imports of a trace (torch, transformers' modeling code, torch._dynamo,
torch.export) leave triton (the GPU kernel compiler) and cuda.bindings
(NVIDIA's runtime bindings) unloaded, and torch takes both as absent.

    python check_no_gpu_libraries.py

Exits non-zero with one line per failure.
"""

import os
import sys

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
import importlib.util  # noqa: E402

from hfx_worker import server  # noqa: E402

failures = []
if importlib.util.find_spec("triton") is None:
    failures.append("triton is not installed here: nothing to check (PyPI's torch installs it)")
if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None:
    failures.append(
        "cuda.bindings is not installed here: nothing to check (PyPI's torch installs it)"
    )
if any(os.path.exists(device) for device in server.NVIDIA_DEVICES):
    failures.append("an NVIDIA device is here: this check is for a machine without one")
sys.meta_path.insert(0, server.NoGpuLibraries())

import torch  # noqa: E402
import torch._dynamo  # noqa: E402,F401
import torch.export  # noqa: E402,F401
import transformers.models.llama.modeling_llama  # noqa: E402,F401
from torch.cuda import _utils as cuda_utils  # noqa: E402
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

if "cuda.bindings" in sys.modules or cuda_utils._HAS_CUDA_BINDINGS:
    failures.append(
        "cuda.bindings was imported, or torch takes it as installed, on a machine without an NVIDIA device"
    )
if "cuda.pathfinder" in sys.modules:
    failures.append("cuda.pathfinder (which runs `ldconfig -p`) was imported")

for failure in failures:
    print(failure, file=sys.stderr)
sys.exit(1 if failures else 0)
