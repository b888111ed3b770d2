"""Read + write a 125M-parameter Llama `.pt2`: hfx against torch.export.load +
torch.export.save of the same file, side by side in one run.

    cargo build --release -p hfx-bench && .venv/bin/python bench/pt2_bench.py

Each side runs in its own process (3 runs, median), so peak RSS is its own.
Reported: seconds, peak RSS above the process's baseline, and the ratios
(torch / hfx for time; hfx RSS / weight bytes). Page cache is warm for both.
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "target", "bench")
MODEL = os.path.join(OUT, "llama125m.pt2")


def make_model():
    import torch
    from trace_bench import llama125m  # the one 125M Llama of the benchmarks

    model, _ = llama125m()
    params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, 32000, (1, 16))
    with torch.no_grad():
        ep = torch.export.export(model, (), {"input_ids": ids, "use_cache": False}, strict=False)
    os.makedirs(os.path.join(OUT, ".tmp"), exist_ok=True)
    tmp = os.path.join(OUT, ".tmp", "llama125m.pt2")
    torch.export.save(ep, tmp)
    os.replace(tmp, MODEL)
    print(f"made {MODEL}: {params / 1e6:.1f}M parameters", file=sys.stderr)


def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def torch_side():
    import torch
    import transformers.modeling_outputs  # noqa: F401  (registers the ModelOutput pytrees the archive names)

    baseline = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    start = time.perf_counter()
    ep = torch.export.load(MODEL)
    read = time.perf_counter() - start
    start = time.perf_counter()
    torch.export.save(ep, os.path.join(OUT, "torch-out.pt2"))
    write = time.perf_counter() - start
    print(
        json.dumps({"read_s": read, "write_s": write, "peak_rss_above_baseline": rss() - baseline})
    )


def run(cmd):
    out = (
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        .stdout.strip()
        .splitlines()[-1]
    )
    return json.loads(out)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-side":
        return torch_side()
    if not os.path.exists(MODEL):
        make_model()
    hfx = os.path.join(ROOT, "target", "release", "pt2-bench")
    if not os.path.exists(hfx):
        raise SystemExit("build it first: cargo build --release -p hfx-bench")
    import zipfile

    weights = sum(
        i.file_size
        for i in zipfile.ZipFile(MODEL).infolist()
        if "/data/weights/weight_" in i.filename
    )
    sides = {}
    for name, cmd in (
        ("torch", [sys.executable, __file__, "--torch-side"]),
        ("hfx", [hfx, MODEL, os.path.join(OUT, "hfx-out.pt2")]),
    ):
        runs = [run(cmd) for _ in range(3)]
        sides[name] = {
            k: statistics.median(r[k] for r in runs)
            for k in ("read_s", "write_s", "peak_rss_above_baseline")
        }
    t, h = sides["torch"], sides["hfx"]
    total_t, total_h = t["read_s"] + t["write_s"], h["read_s"] + h["write_s"]
    print(f"model: {MODEL} ({weights / 1e6:.0f} MB of weights)")
    print(f"{'':28}{'torch':>12}{'hfx':>12}{'torch/hfx':>12}")
    for key, label in (("read_s", "read (s)"), ("write_s", "write (s)")):
        print(f"{label:28}{t[key]:>12.3f}{h[key]:>12.3f}{t[key] / h[key]:>11.1f}x")
    print(f"{'read + write (s)':28}{total_t:>12.3f}{total_h:>12.3f}{total_t / total_h:>11.1f}x")
    print(
        f"{'peak RSS above baseline (MB)':28}{t['peak_rss_above_baseline'] / 1e6:>12.1f}{h['peak_rss_above_baseline'] / 1e6:>12.1f}"
    )
    print(
        f"hfx peak RSS / weight bytes: {h['peak_rss_above_baseline'] / weights:.3f} (target <= 0.2); "
        f"speed-up {total_t / total_h:.1f}x (target >= 5x)"
    )


if __name__ == "__main__":
    main()
