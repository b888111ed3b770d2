"""The sweep's architectures (`bench/sweep_models.py`) through `hfx run
--backend openvino --verify`, static and dynamic: each a fresh process with a
timeout; pass = OpenVINO's CPU plugin matched eager PyTorch within 1e-3 on
the traced inputs (hfx's `--verify`; a `--model-fn` model is checked at the
traced size only). Prints one Markdown row per architecture.

    .venv/bin/python bench/openvino_sweep.py [--only llama,gpt2] [--hfx target/debug/hfx]
"""

import argparse
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PYTHON = sys.executable
sys.path.insert(0, HERE)


def export(hfx, arch, mode, out, timeout):
    """(status, seconds, one line on failure)."""
    shutil.rmtree(out, ignore_errors=True)
    command = [hfx, "run", "--backend", "openvino", "--verify", f"--{mode}", "-o", out + "/"]
    for plugins in ("dynamo", "onnx"):
        command += ["--plugins", os.path.join(ROOT, "plugins", plugins)]
    command += ["--model-fn", f"python:sweep_models:{arch}_model", "--python", PYTHON]
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONPATH": HERE},
        )
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - start, ""
    seconds = time.perf_counter() - start
    if done.returncode == 0:
        return "pass", seconds, ""
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    why = lines[-1] if lines else f"exit {done.returncode}"
    status = "mismatch" if "differs from eager" in why else "fail"
    return status, seconds, why.replace("|", "\\|")[:300]


def main():
    from sweep_models import ARCHS

    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default=",".join(ARCHS))
    parser.add_argument("--hfx", default=os.path.join(ROOT, "target", "release", "hfx"))
    parser.add_argument("--out", default=os.path.join(ROOT, "target", "openvino-sweep"))
    parser.add_argument("--timeout", type=int, default=600)
    args = parser.parse_args()
    print("| architecture | static | dynamic | time (s) static / dynamic | failure |")
    print("| --- | --- | --- | --- | --- |")
    for arch in args.only.split(","):
        results = [
            export(args.hfx, arch, mode, os.path.join(args.out, f"{arch}-{mode}"), args.timeout)
            for mode in ("static", "dynamic")
        ]
        why = "; ".join(f"{mode}: {r[2]}" for mode, r in zip(("s", "d"), results) if r[2])
        print(
            f"| {arch} ({ARCHS[arch].category}) | {results[0][0]} | {results[1][0]} | "
            f"{results[0][1]:.0f} / {results[1][1]:.0f} | {why} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
