"""hfx's deployment options on every decoder of `docs/ort-fusions.md`: each
architecture's model folder (the ones `bench/ort_fusions_sweep.py` saved)
exported for generation with `--quantize int4` composed with `--ort-fusions
cpu`, with `--quantize int8-dynamic`, with `--quantize int8-static`, and as an
ONNX Runtime GenAI package (`--genai`, float32), each with `--verify`; the
table in `docs/deploy-sweep.md`: hfx's own verdict per run (greedy tokens
identical to eager `generate`, or the agreement a quantized scheme is held
to, or why it was refused or failed).

    cargo build -p hfx && cargo xtask build-plugins
    .venv/bin/python bench/ort_fusions_sweep.py ...   # once: the model folders
    .venv/bin/python bench/deploy_sweep.py [--only A,B] [--hfx PATH] [--report docs/deploy-sweep.md]
"""

import argparse
import datetime
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PYTHON = sys.executable
sys.path.insert(0, HERE)

from ort_fusions_sweep import child_env, decoders  # noqa: E402
from sweep import machine, one_line, run_step, versions, write  # noqa: E402

VARIANTS = {
    "int4 + fusions": ["--quantize", "int4", "--ort-fusions", "cpu"],
    "int8-dynamic": ["--quantize", "int8-dynamic"],
    "int8-static": ["--quantize", "int8-static"],
    "GenAI float32": ["--genai"],
}


def export(hfx, plugins, model, out, extra, timeout):
    """(ok, what hfx's check said or why it stopped) of one export for generation."""
    command = [hfx, "run", "--backend", "onnx", "--plugins", plugins, "--model-dir", model]
    command += ["--generation", "--verify", *extra, "-o", out + "/", "--python", PYTHON]
    code, _, stdout, stderr = run_step(command, timeout, child_env())
    if code != 0:
        reason = f"timeout after {timeout} s" if code == "timeout" else one_line(stderr)
        return False, re.sub(r"^(error|Error): ", "", reason)
    # Each check's line (the components', GenAI's `Generator`'s), and the
    # agreement lines that follow it: with the reference its tokens differ
    # from, and an int4 model's with the float model.
    checks = []
    for line in (stdout + stderr).splitlines():
        if line.startswith(("generate ", "genai ")):
            checks.append(line.strip())
        elif line.startswith(("  greedy-token agreement", "  against the float model")) and checks:
            checks[-1] += ", " + line.strip()
    return True, "; ".join(checks) or "exported (no check line)"


def cell(ok, text):
    text = text.replace("|", "\\|")
    return ("**ok**: " if ok else "**no**: ") + text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated architectures (default: every decoder)")
    parser.add_argument("--out", default=os.path.join(ROOT, "target", "ort-fusions"))
    parser.add_argument("--hfx", default=os.path.join(ROOT, "target", "debug", "hfx"))
    parser.add_argument("--plugins", default=os.path.join(ROOT, "plugins"))
    parser.add_argument("--report", default=os.path.join(ROOT, "docs", "deploy-sweep.md"))
    parser.add_argument("--timeout", type=int, default=300, help="seconds per export")
    args = parser.parse_args()
    archs = args.only.split(",") if args.only else decoders()
    started, clock = datetime.datetime.now(datetime.UTC), time.monotonic()
    rows = []
    for arch in archs:
        model = os.path.join(args.out, "models", arch)
        if not os.path.exists(os.path.join(model, "config.json")):
            rows.append((arch, [(False, "no model folder: run bench/ort_fusions_sweep.py")] * 4))
            continue
        cells = []
        for name, extra in VARIANTS.items():
            out = os.path.join(args.out, "deploy", arch, name.split(" ")[0])
            ok, said = export(args.hfx, args.plugins, model, out, extra, args.timeout)
            print(f"[{datetime.datetime.now():%H:%M:%S}] {arch} {name}: {said}", flush=True)
            cells.append((ok, said))
        rows.append((arch, cells))
    elapsed = (time.monotonic() - clock) / 60
    passed = {name: sum(cells[i][0] for _, cells in rows) for i, name in enumerate(VARIANTS)}
    command = "python bench/deploy_sweep.py" + (f" --only {args.only}" if args.only else "")
    lines = [
        "# Deploying the sweep's decoders",
        "",
        "hfx's deployment options on every decoder of `docs/ort-fusions.md` (the sweep's tiny random "
        "configs, seed 0, from their model folders): `hfx run --backend onnx --plugins plugins "
        "--model-dir DIR --generation --verify` with "
        + ", ".join(f"{name} (`{' '.join(extra)}`)" for name, extra in VARIANTS.items())
        + ". Each cell is hfx's own check: greedy tokens of the captured batch against eager "
        "`generate` (identical for float32; a quantized scheme's agreement, teacher forced (each "
        "step given eager's tokens before it), reported against the floor it is held to), or why the run stopped, in hfx's one line.",
        "",
        f"- Produced by: `{command}`, {started:%Y-%m-%d %H:%M} UTC, {elapsed:.0f} min",
        f"- Machine: {machine()}",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()),
        "- Passed: " + ", ".join(f"{name} {n} of {len(rows)}" for name, n in passed.items()),
        "",
        "| architecture | " + " | ".join(VARIANTS) + " |",
        "| --- |" + " --- |" * len(VARIANTS),
    ]
    for arch, cells in rows:
        lines.append(f"| {arch} | " + " | ".join(cell(ok, said) for ok, said in cells) + " |")
    write(args.report, "\n".join(lines) + "\n")
    print(f"{len(rows)} architectures in {elapsed:.0f} min; report: {args.report}")


if __name__ == "__main__":
    main()
