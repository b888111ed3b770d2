"""A Llama to ExecuTorch, three programs side by side in one run, on the
user's path: the model saved as a folder (safetensors) and exported from it,
`--dynamic` (add `--static` for fixed shapes):

- the reference: `from_pretrained(FOLDER)` + `ExecutorchExporter().export(
  model, inputs, config=ExecutorchConfig(backend="xnnpack", dynamic=...))`
  + `save_pretrained`;
- hfx's XNNPACK program: `hfx run --backend executorch --delegate xnnpack
  --model-dir FOLDER` (hfx traces and fixes, ExecuTorch's partitioner lowers
  in the worker, the weights mapped from the checkpoint);
- hfx's portable program: `hfx run --backend executorch --model-dir FOLDER`
  (hfx decomposes in the worker, then lowers, plans memory and writes the
  `.pte` natively, the weights streamed from the checkpoint into it).

Same model (same seed and config), alternating, ROUNDS runs each (medians
reported).

    cargo build --release -p hfx && cargo xtask build-plugins
    .venv/bin/python bench/executorch_bench.py [tiny|125m] [ROUNDS] [--static]     # HFX=PATH for another hfx binary

Each side is a fresh process tree: wall time around it, peak RSS as the
largest sum of VmRSS over the tree (hfx + its worker), sampled every 10 ms.
hfx's own stage times come from its summary (`stage edge-decompose` is the
worker's decomposition, `stage pte-emit` the native lowering, planning and
writing). With `--static`, the planned arena of hfx's portable program is
compared with ExecuTorch's own planner (`to_edge` + `to_executorch`,
greedy, no delegate) on the same model and inputs, (2, 8) (a dynamic program is
planned at its upper bounds, which ExecuTorch's planner does not see).
Then every `.pte` runs in the ExecuTorch runtime on the same inputs (one
process, alternating, median of 20 forwards each) and against eager.
"""

import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "target", "bench", "executorch")
PYTHON = sys.executable

sys.path.insert(0, HERE)
# The tests' tiny Llama (`tests/python/tiny_models.py`).
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from tiny_models import tiny_llama  # noqa: E402
from trace_bench import llama125m, measured  # noqa: E402  (same model, same sampler)


def tiny():
    """A tiny random Llama (`--model-fn python:executorch_bench:tiny`)."""
    import torch

    model = tiny_llama(seed=0).eval()
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    return model, {"input_ids": ids, "attention_mask": torch.ones(2, 16, dtype=torch.long)}


MODELS = {"tiny": ("tiny", tiny), "125m": ("trace_bench:llama125m", llama125m)}


def sample_inputs(size):
    """The inputs every side traces with and runs on: batch 2, sequence 8, the
    sizes of hfx's own sample inputs for a model folder."""
    _, inputs = MODELS[size][1]()
    return {name: value[:, :8].contiguous() for name, value in inputs.items()}


def model_folder(size):
    """The model saved as users have it (`save_pretrained`: config + safetensors), written once."""
    folder = os.path.join(
        ROOT, "target", "bench", "llama125m" if size == "125m" else f"llama-{size}"
    )
    if not os.path.exists(os.path.join(folder, "config.json")):
        model, _ = MODELS[size][1]()
        model.save_pretrained(folder)
    return folder


def reference_side(size, folder, dynamic):
    import torch
    import transformers
    from transformers.exporters.exporter_executorch import ExecutorchConfig, ExecutorchExporter

    inputs = sample_inputs(size)
    start = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(model_folder(size)).eval()
    with torch.no_grad():
        exported = ExecutorchExporter().export(
            model, inputs, config=ExecutorchConfig(backend="xnnpack", dynamic=dynamic)
        )
    exported_at = time.perf_counter()
    exported.save_pretrained(folder)
    print(
        json.dumps({"export_s": exported_at - start, "save_s": time.perf_counter() - exported_at})
    )


def planner_side(size):
    """ExecuTorch's own portable program for the same model: its planner's arena
    (memory id 1 of `non_const_buffer_sizes`) and its `.pte` size."""
    import torch
    from executorch.exir import to_edge

    # The cache an output as in hfx's program (the same pytree registration as hfx's worker).
    sys.path.insert(0, os.path.join(ROOT, "host", "worker"))
    from hfx_worker.pytree import register_cache_pytrees

    model, _ = MODELS[size][1]()
    inputs = sample_inputs(size)
    register_cache_pytrees(model)
    with torch.no_grad():
        program = torch.export.export(model, (), kwargs=inputs, strict=False)
    executorch = to_edge(program).to_executorch()
    plan = executorch.executorch_program.execution_plan[0]
    print(
        json.dumps({"arena": plan.non_const_buffer_sizes[1], "pte_bytes": len(executorch.buffer)})
    )


def runtime_side(size, paths):
    """Median forward latency of each `.pte` in the ExecuTorch runtime, and its max error against eager."""
    import torch
    from executorch.runtime import Runtime

    model, _ = MODELS[size][1]()
    inputs = sample_inputs(size)
    with torch.no_grad():
        eager = model(**inputs).logits
    methods = {p: Runtime.get().load_program(p).load_method("forward") for p in paths}
    feed = [inputs["input_ids"], inputs["attention_mask"]]
    times = {p: [] for p in paths}
    errors = {}
    for _ in range(20):
        for p, method in methods.items():
            start = time.perf_counter()
            outputs = method.execute(feed)
            times[p].append(time.perf_counter() - start)
            errors[p] = float((outputs[0] - eager).abs().max())
    print(
        json.dumps(
            {
                p: {"latency_ms": statistics.median(t) * 1e3, "max_abs": errors[p]}
                for p, t in times.items()
            }
        )
    )


def python_json(args, env):
    """The last stdout line of `python executorch_bench.py ARGS`, as JSON."""
    done = subprocess.run(
        [PYTHON, __file__, *args], capture_output=True, text=True, env=env, cwd=ROOT
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def stage_lines(stdout, names):
    """hfx's summary lines of the named stages (`stage pte-emit ...`)."""
    return [
        line.strip()
        for line in stdout.splitlines()
        if any(line.startswith(f"stage {name}") for name in names)
    ]


def stage_ms(line):
    """The milliseconds of a `stage NAME  12.34 ms ...` summary line."""
    return float(line.split()[2])


def main(size, rounds, dynamic):
    os.makedirs(OUT, exist_ok=True)
    folder = model_folder(size)
    # HFX=target/debug/hfx measures a debug build (the host's part of an ExecuTorch export is small).
    hfx = os.environ.get("HFX", os.path.join(ROOT, "target", "release", "hfx"))
    env = {**os.environ, "PYTHONPATH": HERE}
    ref_dir = os.path.join(OUT, f"reference-{size}")
    ptes = {
        "reference": os.path.join(ref_dir, "model.pte"),
        "hfx-xnnpack": os.path.join(OUT, f"hfx-xnnpack-{size}.pte"),
        "hfx-portable": os.path.join(OUT, f"hfx-portable-{size}.pte"),
    }
    mode = "dynamic" if dynamic else "static"
    commands = {"reference": [PYTHON, __file__, "--reference", size, ref_dir, mode]}
    for side, delegate in (("hfx-xnnpack", ["--delegate", "xnnpack"]), ("hfx-portable", [])):
        commands[side] = [
            hfx,
            "run",
            "--backend",
            "executorch",
            *delegate,
            "--plugins",
            os.path.join(ROOT, "plugins"),
            "--model-dir",
            folder,
            "-o",
            ptes[side],
            "--python",
            PYTHON,
        ] + (["--dynamic"] if dynamic else ["--static"])
    results = {side: [] for side in commands}
    stages = {side: [] for side in commands}
    for _ in range(rounds):
        for side, command in commands.items():
            wall, rss, out = measured(command, env)
            results[side].append((wall, rss))
            if side != "reference":
                stages[side].append(stage_lines(out, ("lower", "edge-decompose", "pte-emit")))
    planner = python_json(["--planner", size], env) if not dynamic else None
    run = python_json(["--runtime", size, *ptes.values()], env)
    median = {
        side: (statistics.median(w for w, _ in r), statistics.median(m for _, m in r))
        for side, r in results.items()
    }
    print(
        f"Llama {size} from a model folder to ExecuTorch, {mode}, {rounds} alternating run(s) each, medians; forward on inputs (2, 8)"
    )
    for side, pte in ptes.items():
        wall, rss = median[side]
        print(
            f"  {side:<13} {wall:7.2f} s wall, peak RSS {rss / 2**30:.2f} GiB, .pte {os.path.getsize(pte)} bytes, "
            f"forward {run[pte]['latency_ms']:.3f} ms, logits max abs error vs eager {run[pte]['max_abs']:.1e}"
        )
    ref_wall, ref_rss = median["reference"]
    for side in ("hfx-xnnpack", "hfx-portable"):
        wall, rss = median[side]
        print(
            f"  {side}: whole process reference / hfx = {ref_wall / wall:.2f}x; peak RSS hfx / reference = {rss / ref_rss:.2f}x; "
            f"forward hfx / reference = {run[ptes[side]]['latency_ms'] / run[ptes['reference']]['latency_ms']:.2f}x"
        )
    for side in ("hfx-xnnpack", "hfx-portable"):
        for line in stages[side][-1]:
            print(f"  {side} {line}")
    emits = [
        stage_ms(line)
        for lines in stages["hfx-portable"]
        for line in lines
        if line.startswith("stage pte-emit")
    ]
    arena = [
        int(line.split("planned arena ")[1].split()[0])
        for line in stages["hfx-portable"][-1]
        if "planned arena" in line
    ]
    if emits:
        print(
            f"  hfx native portable emission (lowering, memory plan, .pte): median {statistics.median(emits):.0f} ms"
        )
    if arena and planner:
        print(
            f"  planned arena: hfx {arena[0]} bytes, ExecuTorch's planner {planner['arena']} bytes "
            f"(hfx / ExecuTorch = {arena[0] / planner['arena']:.2f}x); ExecuTorch's portable .pte {planner['pte_bytes']} bytes"
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reference"]:
        reference_side(sys.argv[2], sys.argv[3], sys.argv[4] == "dynamic")
    elif sys.argv[1:2] == ["--planner"]:
        planner_side(sys.argv[2])
    elif sys.argv[1:2] == ["--runtime"]:
        runtime_side(sys.argv[2], sys.argv[3:])
    else:
        positional = [a for a in sys.argv[1:] if not a.startswith("--")]
        main(
            positional[0] if positional else "tiny",
            int(positional[1]) if len(positional) > 1 else 2,
            "--static" not in sys.argv,
        )
