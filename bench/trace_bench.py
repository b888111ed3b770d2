"""Trace a 125M-parameter Llama to a `.pt2`: `hfx run --backend dynamo` against
the reference `DynamoExporter().export(...)` + `save_pretrained`, same model
(same seed and config), same inputs, one run each, side by side.

    cargo build --release -p hfx && .venv/bin/python bench/trace_bench.py

Each side is a fresh process tree; its wall time is measured around it, and
its peak RSS is the largest sum of VmRSS over the tree (hfx + its worker),
sampled every 10 ms (`tree_rss`). hfx's own overhead is its wall time minus the time the
worker spends in the trace request, compared with torch.export's time.
"""

import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "target", "bench", "trace")
PYTHON = sys.executable


def llama125m():
    """The benchmark model and its inputs (`--model-fn python:trace_bench:llama125m`)."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=12,
        max_position_embeddings=512,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 32000, (2, 16), generator=generator)
    return model, {"input_ids": ids, "attention_mask": torch.ones(2, 16, dtype=torch.long)}


def reference_side():
    import torch
    from transformers.exporters.exporter_dynamo import DynamoConfig, DynamoExporter

    model, inputs = llama125m()
    start = time.perf_counter()
    with torch.no_grad():
        exported = DynamoExporter().export(model, inputs, config=DynamoConfig())
    traced = time.perf_counter()
    exported.save_pretrained(os.path.join(OUT, "reference"))
    print(json.dumps({"export_s": traced - start, "save_s": time.perf_counter() - traced}))


def tree(pid):
    """`pid` and all its descendants (the children of each of their threads)."""
    found, stack = [], [pid]
    while stack:
        p = stack.pop()
        found.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                stack.extend(int(c) for c in open(f"/proc/{p}/task/{task}/children").read().split())
        except (FileNotFoundError, ProcessLookupError):
            pass
    return found


def tree_rss(pid):
    """VmRSS of `pid` and all its descendants, in bytes. A child that has
    not exec'd yet runs in its parent's pages (vfork: the same address
    space; fork: shared until written), so summing its VmRSS counts the
    parent twice: `subprocess` starting ExecuTorch's `flatc` from a 2 GiB
    worker would add 2 GiB for a few milliseconds. Such a child counts
    nothing for its first second; one that stays unexec'd longer (a worker
    forked to compute) counts in full from then on."""
    total = 0
    for p in tree(pid):
        try:
            if is_spawning(p):
                continue
            for line in open(f"/proc/{p}/status"):
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


# When each unexec'd fork child (pid, start time) was first seen.
UNEXECED_SINCE = {}
SPAWN_WINDOW_S = 1.0


def stat(pid):
    """`/proc/PID/stat`'s fields from field 3 on (the name may hold spaces)."""
    text = open(f"/proc/{pid}/stat").read()
    return text[text.rindex(")") + 2 :].split()


def layout(fields):
    """Where a process's code, stack, heap and arguments start (fields 26,
    28, 47, 48): an exec moves them all; a fork keeps its parent's."""
    return tuple(int(fields[n - 3]) for n in (26, 28, 47, 48))


def is_spawning(pid):
    """Whether `pid` is a fork child that has not exec'd, seen so for less
    than `SPAWN_WINDOW_S`."""
    fields = stat(pid)
    parent, own = int(fields[1]), layout(fields)
    if own[1] == 0 or parent <= 1 or layout(stat(parent)) != own:
        return False
    since = UNEXECED_SINCE.setdefault((pid, fields[19]), time.monotonic())
    return time.monotonic() - since < SPAWN_WINDOW_S


def measured(command, env=None, memory=tree_rss):
    """(wall seconds, peak memory, stdout) of `command` run to its end; the
    peak of `memory(pid)` sampled every 10 ms (a tuple: each element's own)."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    peak = [memory(process.pid)]

    def sample():
        while process.poll() is None:
            now = memory(process.pid)
            if isinstance(now, tuple):
                peak[0] = tuple(max(a, b) for a, b in zip(peak[0], now))
            else:
                peak[0] = max(peak[0], now)
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    stdout, stderr = process.communicate()
    wall = time.perf_counter() - start
    sampler.join()
    if process.returncode != 0:
        raise SystemExit(f"{command[0]} failed:\n{stderr[-4000:]}")
    return wall, peak[0], stdout


def main():
    os.makedirs(OUT, exist_ok=True)
    hfx = os.path.join(ROOT, "target", "release", "hfx")
    env = {**os.environ, "PYTHONPATH": HERE}
    # Warm the page cache and the component cache for both sides alike.
    subprocess.run([PYTHON, "-c", "import torch, transformers"], check=True)
    ref_wall, ref_rss, ref_out = measured([PYTHON, __file__, "--reference"], env)
    ref = json.loads(ref_out.strip().splitlines()[-1])
    command = [
        hfx,
        "run",
        "--backend",
        "dynamo",
        "--plugins",
        os.path.join(ROOT, "plugins", "dynamo"),
        "--model-fn",
        "python:trace_bench:llama125m",
        "-o",
        os.path.join(OUT, "hfx.pt2"),
        "--python",
        PYTHON,
        "--static",
    ]
    hfx_wall, hfx_rss, hfx_out = measured(command, env)
    times = {}
    for line in hfx_out.splitlines():
        if line.startswith("stage trace"):
            # stage trace  N s   import I s, build B s, eager E s, torch.export T s, save S s; ...
            words = line.replace(",", "").replace(";", "").split()
            times = {
                "trace_request": float(words[2]),
                "import": float(words[5]),
                "build": float(words[8]),
                "eager": float(words[11]),
                "export": float(words[14]),
                "save": float(words[17]),
            }
    host_overhead = hfx_wall - times["trace_request"] if times else float("nan")
    print("125M Llama, inputs (2, 16), static, one run each")
    print(
        f"  reference DynamoExporter + save_pretrained: {ref_wall:6.2f} s wall ({ref['export_s']:.2f} s export, "
        f"{ref['save_s']:.2f} s save), peak RSS {ref_rss / 2**30:.2f} GiB"
    )
    print(
        f"  hfx run --backend dynamo:                   {hfx_wall:6.2f} s wall ({times.get('export', 0):.2f} s torch.export, "
        f"{times.get('import', 0):.2f} s import torch, {times.get('build', 0):.2f} s build, {times.get('eager', 0):.2f} s eager, "
        f"{times.get('save', 0):.2f} s save), peak RSS {hfx_rss / 2**30:.2f} GiB"
    )
    print(
        f"  wall time: hfx / reference = {hfx_wall / ref_wall:.2f}x;  peak RSS: hfx / reference = {hfx_rss / ref_rss:.2f}x"
    )
    emit = next(
        (float(l.split()[2]) / 1e3 for l in hfx_out.splitlines() if l.startswith("stage emit")),
        float("nan"),
    )
    print(
        f"  hfx host overhead (wall - worker's trace request) = {host_overhead:.2f} s = "
        f"{100 * host_overhead / times['trace_request']:.1f}% of the trace stage ({times['trace_request']:.2f} s), "
        f"{100 * host_overhead / times['export']:.1f}% of the torch.export call; "
        f"of it {emit:.2f} s emit (fsync of the traced archive before its rename)"
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--reference"]:
        reference_side()
    else:
        main()
