"""Export a live 125M-parameter Llama from Python to ONNX: `hfx.export(model,
inputs, backend="onnx")` against the reference
`OnnxExporter().export(model, inputs, config=OnnxConfig())` + `save_pretrained`,
same model (same seed and config, its weights changed in memory after it was
built, as a fine-tuned model's are), same inputs, dynamic axes on both sides.

    cargo build --release -p hfx && cargo xtask build-plugins
    .venv/bin/python bench/python_api_bench.py [--rounds N] [--hfx PATH]

Each side is a fresh Python process (and, for hfx, the binary it starts):
wall time around it; memory as the largest sum over the process tree,
sampled every 10 ms (`memory`): what the tree holds, its shared-memory pages
counted once, and VmRSS summed over the tree beside it. hfx maps the caller's
weights from shared memory, which VmRSS counts again in every process that
maps them. Rounds alternate the sides.
"""

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "target", "bench", "python_api")
PYTHON = sys.executable

sys.path.insert(0, HERE)
from trace_bench import llama125m, measured, tree  # noqa: E402  (the benchmark model, the sampler)


def live_model():
    """The benchmark Llama, its weights changed in memory."""
    import torch

    model, inputs = llama125m()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(0.5)
    return model, inputs


def reference_side():
    import torch
    from transformers.exporters.exporter_onnx import OnnxConfig, OnnxExporter

    model, inputs = live_model()
    start = time.perf_counter()
    with torch.no_grad():
        exported = OnnxExporter().export(model, inputs, config=OnnxConfig(dynamic=True))
    exported.save_pretrained(os.path.join(OUT, "reference"))
    print(json.dumps({"export_s": time.perf_counter() - start}))


def hfx_side(binary):
    import hfx

    os.environ["HFX_BINARY"] = binary
    model, inputs = live_model()
    start = time.perf_counter()
    hfx.export(
        model,
        inputs,
        backend="onnx",
        output=os.path.join(OUT, "hfx"),
        plugins=[os.path.join(ROOT, "plugins", name) for name in ("dynamo", "onnx")],
        no_default_plugins=True,
        progress=False,
    )
    print(json.dumps({"export_s": time.perf_counter() - start}))


def memory(pid):
    """(VmRSS, held) of `pid`'s tree, in bytes: VmRSS summed over the tree,
    and what the tree holds: each process's anonymous and file pages, plus
    the shared-memory pages once (the largest of any process's: hfx maps
    the pages the caller holds). From `/proc/PID/status`, which is cheap to
    read; `smaps_rollup` walks every page table and slows the process it
    samples."""
    rss = private = shared = 0
    for member in tree(pid):
        fields = {}
        try:
            with open(f"/proc/{member}/status") as f:
                for line in f:
                    if line.startswith(("VmRSS:", "RssAnon:", "RssFile:", "RssShmem:")):
                        name, value = line.split()[:2]
                        fields[name] = int(value) * 1024
        except OSError:
            continue
        rss += fields.get("VmRSS:", 0)
        private += fields.get("RssAnon:", 0) + fields.get("RssFile:", 0)
        shared = max(shared, fields.get("RssShmem:", 0))
    return rss, private + shared


def main(argv):
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 1
    binary = (
        argv[argv.index("--hfx") + 1]
        if "--hfx" in argv
        else os.path.join(ROOT, "target", "release", "hfx")
    )
    os.makedirs(OUT, exist_ok=True)
    pythonpath = os.pathsep.join(
        [HERE, os.path.join(ROOT, "python"), os.path.join(ROOT, "host", "worker")]
    )
    env = {**os.environ, "PYTHONPATH": pythonpath}
    subprocess.run([PYTHON, "-c", "import torch, transformers"], check=True)  # warm the page cache
    sides = {
        "reference": [PYTHON, __file__, "--reference"],
        "hfx": [PYTHON, __file__, "--hfx-side", binary],
    }
    results = {name: [] for name in sides}
    for _ in range(rounds):
        for name, command in sides.items():
            wall, (rss, held), stdout = measured(command, env, memory)
            results[name].append((wall, rss, held, json.loads(stdout.strip().splitlines()[-1])))
    gib = 2**30
    for name, runs in results.items():
        for wall, rss, held, inner in runs:
            print(
                f"{name:9} {wall:6.2f} s whole process ({inner['export_s']:.2f} s export + save), "
                f"peak held {held / gib:.2f} GiB, peak VmRSS {rss / gib:.2f} GiB"
            )

    def best(name, field):
        return min(run[field] for run in results[name])

    print(
        f"hfx / reference (best of {rounds}): whole process {best('hfx', 0) / best('reference', 0):.2f}x "
        f"the time (reference {best('reference', 0) / best('hfx', 0):.2f}x slower), "
        f"peak held {best('hfx', 2) / best('reference', 2):.2f}x, "
        f"peak VmRSS {best('hfx', 1) / best('reference', 1):.2f}x"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reference"]:
        reference_side()
    elif sys.argv[1:2] == ["--hfx-side"]:
        hfx_side(sys.argv[2])
    else:
        main(sys.argv[1:])
