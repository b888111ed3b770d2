"""The OpenVINO sweep: every architecture of `bench/sweep_models/` exported to
an OpenVINO IR static and dynamic by hfx and by the reference
`transformers.exporters` `OpenVINOExporter`, side by side in one run, then both
IRs checked the same way in OpenVINO's CPU runtime.

    cargo build --release -p hfx && cargo xtask build-plugins
    .venv/bin/python bench/openvino_sweep.py [--only llama,bloom] [--out target/openvino-sweep]
                     [--report docs/sweep.md] [--jobs 1] [--hfx target/release/hfx] [--timeout 600] [--resume]

Per architecture, alternating the two exporters (hfx static, reference static,
hfx dynamic, reference dynamic), each a fresh process with a timeout:

- hfx: `hfx run --backend openvino --verify --plugins plugins/dynamo --plugins
  plugins/onnx --model-fn python:sweep_models:<arch>_model --static|--dynamic
  -o OUT/hfx-<arch>-<mode>/` (its own `--verify`, at the traced size, is
  recorded beside the sweep's check);
- the reference: `OpenVINOExporter().export(model, inputs,
  config=OpenVINOConfig(dynamic=...))` (its defaults: stateful, float32
  weights) and `save_pretrained(OUT/ref-<arch>-<mode>)`.

Then one Python process checks both sides' `openvino_model.xml` alike, with
`bench/sweep.py`'s comparison (`compare`: inputs fed and outputs matched by
name, a sliding-window cache compared on the positions eager keeps): compiled
for OpenVINO's CPU plugin with `INFERENCE_PRECISION_HINT` f32, against eager
PyTorch of the same model at size A (the traced inputs) and, for a dynamic
export, at size B; pass = every output within atol = rtol = 1e-3.

Results land per architecture in OUT/results/<arch>.json and the table in the
OpenVINO section of `--report` (docs/sweep.md, whose ONNX part it leaves).
"""

import argparse
import concurrent.futures
import datetime
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PYTHON = sys.executable
sys.path.insert(0, HERE)

import sweep  # noqa: E402  (bench/ on the path first)
from sweep import (  # noqa: E402
    MODES,
    categories,
    cell,
    error_of,
    exception_line,
    last_json,
    log,
    machine,
    per_mode,
    run_step,
    write,
)

SECTION = sweep.OPENVINO_SECTION
# Compiled alike for both sides: float32 inference (the CPU plugin would pick bfloat16 where the CPU has it).
COMPILE = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}


# ── The two exporters ──


def hfx_export(hfx, arch, mode, out, timeout):
    folder = os.path.join(out, f"hfx-{arch}-{mode}")
    command = [hfx, "run", "--backend", "openvino", "--verify", f"--{mode}"]
    for plugins in ("dynamo", "onnx"):
        command += ["--plugins", os.path.join(ROOT, "plugins", plugins)]
    command += ["--model-fn", f"python:sweep_models:{arch}_model", "-o", folder + "/"]
    command += ["--python", PYTHON, "-v"]
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))
    code, wall, stdout, stderr = run_step(command, timeout, {**os.environ, "PYTHONPATH": HERE})
    path = os.path.join(folder, "openvino_model.xml")
    result = {"seconds": round(wall, 2), "command": " ".join(command[1:]).replace(ROOT + "/", "")}
    verified = code == 0
    if code != 0:
        result["log"] = os.path.join(out, "logs", f"hfx-{arch}-{mode}.log")
        write(result["log"], f"exit {code}\n{stdout}\n---- stderr ----\n{stderr}")
    if os.path.exists(path) and code != "timeout":
        result.update(ok=True, path=path, verify=verified)
        if not verified:
            result["verify_reason"] = sweep.hfx_reason(code, stdout, stderr, timeout)
    else:
        result.update(ok=False, reason=sweep.hfx_reason(code, stdout, stderr, timeout))
    return refused_by_verify(result)


def detailed(step):
    """A failure whose one line ends at OpenVINO's `Exception from <source>:` gets the lines that say what
    failed (its conversion report's failed op and message), from the step's log."""
    reason = step.get("reason", "")
    if step["ok"] or not reason.endswith(":") or not os.path.exists(step.get("log", "")):
        return step
    text = open(step["log"]).read().split("---- stderr ----")[-1]
    after = text.split(reason.removeprefix("converting to OpenVINO IR: "), 1)[-1].splitlines()[1:]
    noise = ("Check 'false'", "FrontEnd API", "Model wasn't", "While validating node", "Traceback")
    said = []
    for line in (l.strip() for l in after):
        if not line or line.startswith(("File ", "^")):
            break
        if not line.startswith(noise):
            said.append(re.sub(r" at src/\S+:\d+:", ":", line))
    step["reason"] = reason + " " + " ".join(said)[:400]
    return step


def refused_by_verify(step):
    """An IR hfx's --verify refuses is not written: exported all the same, and a mismatch at size A as hfx
    found it (the sweep's check has no IR to judge)."""
    reason = step.get("reason", "")
    if not step["ok"] and "differs from eager" in reason:
        step.update(ok=True, verify=False, verify_reason=reason)
        step["check"] = {"ok": False, "max_abs": None, "reason": "size A (hfx --verify): " + reason}
    return step


def reference_export(arch, mode, out, timeout):
    folder = os.path.join(out, f"ref-{arch}-{mode}")
    command = [PYTHON, os.path.abspath(__file__), "--reference-one", arch, mode, folder]
    code, wall, stdout, stderr = run_step(command, timeout, {**os.environ, "PYTHONPATH": HERE})
    result = {"seconds": round(wall, 2)}
    reply = last_json(stdout)
    path = os.path.join(folder, "openvino_model.xml")
    if code == 0 and reply and reply.get("ok") and os.path.exists(path):
        result.update(ok=True, path=path, export_s=reply["export_s"])
    else:
        sweep.reference_failed(result, (arch, mode, out), code, reply, stdout, stderr, timeout)
    return result


def reference_one(arch, mode, folder):
    """Child process: the reference exporter on one architecture; prints one JSON line."""
    import shutil
    import traceback

    import sweep_models
    import torch
    from transformers.exporters import OpenVINOConfig, OpenVINOExporter

    if os.path.exists(folder):
        shutil.rmtree(folder)
    model, inputs = sweep_models.ARCHS[arch].build()
    try:
        start = time.perf_counter()
        with torch.no_grad():
            exported = OpenVINOExporter().export(
                model, inputs, config=OpenVINOConfig(dynamic=mode == "dynamic")
            )
        exported.save_pretrained(folder)
        reply = {"ok": True, "export_s": round(time.perf_counter() - start, 2)}
    except Exception as error:  # any failure of the exporter is a result, reduced to one line
        traceback.print_exc()
        reply = {"ok": False, "error": exception_line(error)}
    print(json.dumps(reply), flush=True)


# ── The check: both IRs in OpenVINO's CPU runtime against eager ──


class Port:
    def __init__(self, name):
        self.name = name


class OpenvinoSession:
    """A compiled IR behind the face of an ONNX Runtime session (`get_inputs`, `get_outputs`, `run`), so both
    runtimes go through `sweep.compare`. A port is named by the one of its names that is a leaf path of the
    model's inputs or outputs (an IR port may carry several). A stateful IR (the cache fed back as OpenVINO
    state) gets `beam_idx` = arange(batch) and an empty state each run: the sweep's inputs hold no cache."""

    def __init__(self, path, input_names, output_names):
        import openvino

        core = openvino.Core()
        self.compiled = core.compile_model(core.read_model(path), "CPU", COMPILE)
        self.inputs = [self.named(p, input_names, "input.") for p in self.compiled.inputs]
        self.outputs = [self.named(p, output_names, "output.") for p in self.compiled.outputs]
        self.request = self.compiled.create_infer_request()

    @staticmethod
    def named(port, names, prefix):
        found = sorted(port.get_names())
        return next((n for n in found if n.removeprefix(prefix) in names), port.get_any_name())

    def get_inputs(self):
        return [Port(n) for n in self.inputs if n != "beam_idx"]

    def get_outputs(self):
        return [Port(n) for n in self.outputs]

    def run(self, _, feeds):
        import numpy as np

        feeds = dict(feeds)
        if "beam_idx" in self.inputs:
            feeds["beam_idx"] = np.arange(next(iter(feeds.values())).shape[0], dtype=np.int32)
        self.request.reset_state()
        results = self.request.infer(
            [feeds[n] for n in self.inputs], share_inputs=False, share_outputs=False
        )
        return [np.asarray(results[port]) for port in self.compiled.outputs]


def check(arch, artifacts):
    """Child process: eager outputs at sizes A and B, then each IR on OpenVINO's CPU plugin; one JSON line each."""
    import numpy as np
    import sweep_models
    import torch
    from transformers.exporters.utils import get_leaf_tensors

    spec = sweep_models.ARCHS[arch]
    model, inputs_a = spec.build()
    if spec.eager_attention:
        model.set_attn_implementation("eager")  # why: the architecture's `eager_attention`
    sizes = {"A": inputs_a, "B": spec.inputs(model, *spec.size_b())}
    eager = {}
    for size, inputs in sizes.items():
        with torch.no_grad():
            eager[size] = {k: v.detach() for k, v in get_leaf_tensors(model(**inputs)).items()}

    for key, path in artifacts.items():
        mode = key.split("/")[1]
        entry = {"key": key, "ok": True, "max_abs": 0.0, "sizes": {}}
        try:
            session = OpenvinoSession(path, set(inputs_a), set(eager["A"]))
        except Exception as error:
            entry.update(
                ok=False, max_abs=None, reason="OpenVINO refuses the IR: " + ov_line(error)
            )
            print(json.dumps(entry), flush=True)
            continue
        for size in ("A", "B") if mode == "dynamic" else ("A",):
            where = f"size {size} ({sweep.shape_of(sizes[size])})"
            try:
                ok, worst, reason = sweep.compare(session, sizes[size], eager[size], np)
            except Exception as error:
                entry.update(ok=False, reason=f"OpenVINO at {where}: {ov_line(error)}")
                break
            entry["sizes"][size] = {"ok": ok, "max_abs": worst}
            entry["max_abs"] = (
                max(entry["max_abs"], worst) if worst is not None else entry["max_abs"]
            )
            if not ok:
                entry.update(ok=False, reason=f"{where}: {reason}")
                break
        print(json.dumps(entry), flush=True)


def ov_line(error):
    """OpenVINO's error in one line: its first meaningful line, without source paths and `Check` boilerplate."""
    import re

    lines = [
        l.strip()
        for l in str(error).splitlines()
        if l.strip() and not l.strip().startswith(("Exception from", "Traceback"))
    ]
    text = re.sub(r"\s+", " ", " ".join(lines[:2]))
    text = re.sub(r"/\S+:\d+:?\s*", "", text)
    return text[:240]


# ── The sweep ──


def sweep_arch(arch, args):
    import sweep_models

    spec = sweep_models.ARCHS[arch]
    result = {
        "arch": arch,
        "category": spec.category,
        "feature": spec.feature,
        "hfx": {},
        "reference": {},
    }
    for mode in args.modes:
        log(f"{arch}: hfx {mode}")
        result["hfx"][mode] = hfx_export(args.hfx, arch, mode, args.out, args.timeout)
        log(f"{arch}: hfx {mode} -> {summary(result['hfx'][mode])}")
        log(f"{arch}: reference {mode}")
        result["reference"][mode] = reference_export(arch, mode, args.out, args.timeout)
        log(f"{arch}: reference {mode} -> {summary(result['reference'][mode])}")
    sweep.checked(result, args, script=__file__)
    write(os.path.join(args.out, "results", f"{arch}.json"), json.dumps(result, indent=1))
    return result


def summary(step):
    if not step["ok"]:
        return f"FAIL ({step['seconds']:.1f} s): {step['reason']}"
    verify = "" if step.get("verify", True) else f", --verify: {step['verify_reason']}"
    return f"ok, {step['seconds']:.1f} s{verify}"


def status(step):
    if not step:
        return "—"
    if not step["ok"]:
        return "timeout" if step["reason"].startswith("timeout") else "export fail"
    check = step.get("check")
    if check is None:
        return "unchecked"
    if check["ok"]:
        return "pass"
    return "OV error" if check.get("reason", "").startswith("OpenVINO") else "mismatch"


def reason_of(step):
    if not step:
        return None
    if not step["ok"]:
        return step["reason"]
    check = step.get("check")
    reason = check.get("reason", "check failed") if check and not check["ok"] else None
    if not step.get("verify", True) and (reason is None or not reason.startswith("size A")):
        # hfx's own --verify refused what the sweep's check did not (or failed otherwise): both said.
        reason = "; ".join(r for r in (reason, f"hfx --verify: {step['verify_reason']}") if r)
    return reason


def reasons(result):
    lines = []
    for side, label in (("hfx", "hfx"), ("reference", "ref")):
        found = {mode: reason_of(result[side].get(mode)) for mode in MODES}
        found = {m: r for m, r in found.items() if r}
        if len(found) == 2 and len(set(found.values())) == 1:
            lines.append(f"**{label}**: {next(iter(found.values()))}")
        else:
            lines.extend(f"**{label} {mode}**: {reason}" for mode, reason in found.items())
    return "<br>".join(cell(l) for l in lines)


def section(results, args, run):
    import importlib.metadata as metadata

    import sweep_models

    versions = ", ".join(
        f"{p} {metadata.version(p)}" for p in ("torch", "transformers", "openvino")
    )
    started = datetime.datetime.fromisoformat(run["started"])
    lines = [
        SECTION,
        "",
        "The same architectures exported to an OpenVINO IR static and dynamic by hfx (`hfx run --backend "
        "openvino --verify --plugins plugins/dynamo --plugins plugins/onnx --model-fn "
        "python:sweep_models:<arch>_model --static|--dynamic`: stateful, as by default) and by the reference "
        "(`transformers.exporters.OpenVINOExporter().export(model, inputs, config=OpenVINOConfig(dynamic=...))`, "
        "its defaults: stateful, float32 weights; then `save_pretrained`), alternating per architecture in one "
        "run. Both IRs are then checked alike by the sweep, in one process: compiled for OpenVINO's CPU plugin "
        "(`PERFORMANCE_HINT` LATENCY, `INFERENCE_PRECISION_HINT` f32), against eager PyTorch of the same model "
        f"at size A (batch {sweep_models.SIZE_A[0]}, sequence {sweep_models.SIZE_A[1]}: the traced inputs) and, "
        f"for dynamic exports, at size B (batch {sweep_models.SIZE_B[0]}, sequence {sweep_models.SIZE_B[1]}, as "
        "in the ONNX sweep), by `bench/sweep.py`'s comparison (inputs and outputs by name, a sliding-window "
        "cache on the positions eager keeps); pass = every output within atol = rtol = 0.001. The sweep's "
        "inputs hold no cache, so neither side's IR has state variables here: the caches are outputs, compared.",
        "",
        f"- Produced by: `{run['command']}`, {started:%Y-%m-%d %H:%M} UTC, {run['elapsed'] / 60:.0f} min for "
        "the whole run",
    ]
    again = {}
    for result in results:
        measured = result.get("measured")
        if measured and measured["command"] != run["command"]:
            again.setdefault((measured["command"], measured["started"][:16]), []).append(
                result["arch"]
            )
    lines += [
        f"- Rows measured by another run: {', '.join(archs)} by `{command}`, {when.replace('T', ' ')} UTC"
        for (command, when), archs in again.items()
    ]
    lines += [
        f'- {name}: the check\'s eager PyTorch runs with `attn_implementation="eager"`, as in the ONNX sweep (see '
        "its note), and so does hfx's `--verify` for a model whose config asks for attention modules built "
        "non-causal (`use_bidirectional_attention`) while its mask is causal"
        for name, spec in sweep_models.ARCHS.items()
        if spec.eager_attention and name in {r["arch"] for r in results}
    ]
    lines += [
        f"- Machine: {machine()}; shared with other jobs while it ran, so times are indicative only",
        f"- Versions: {versions}; hfx {sweep.hfx_version(args.hfx)}",
        "- Status: **pass** = exported and matched eager at every size checked; **mismatch** = an output off "
        "eager beyond tolerance (or missing), or for hfx where its `--verify` refused the IR (which it then "
        "does not write); **OV error** = OpenVINO refused to compile or run the IR; **export "
        f"fail** / **timeout** = no IR ({args.timeout} s per step). hfx's own `--verify` (size A only for a "
        "`--model-fn` model) is named in the failure column where it refused. Times are the wall time of each "
        "exporter's whole process (hfx's includes its `--verify`); `s:` static, `d:` dynamic; each cell is hfx "
        "/ reference.",
        "",
        "| architecture | hfx static | hfx dynamic | reference static | reference dynamic "
        "| max abs error hfx / reference | time (s) hfx / reference | failure reason |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for result in results:
        h, r = result["hfx"], result["reference"]
        lines.append(
            "| "
            + " | ".join(
                [
                    f"{result['arch']} ({result['category']})",
                    status(h.get("static")),
                    status(h.get("dynamic")),
                    status(r.get("static")),
                    status(r.get("dynamic")),
                    per_mode(result, error_of, lambda v: f"{v:.1e}"),
                    per_mode(result, lambda s: s.get("seconds"), lambda v: f"{v:.0f}"),
                    reasons(result),
                ]
            )
            + " |"
        )
    count = len(results)
    lines += [
        "",
        "### OpenVINO totals",
        "",
        f"{count} architectures ({', '.join(f'{n} {c}' for c, n in categories(results))}).",
        "",
    ]
    lines += sweep.totals(results)
    return "\n".join(lines) + "\n"


def report(results, args, run):
    """Replaces the OpenVINO section of `args.report` (from its heading to the end) by this run's."""
    text = open(args.report).read() if os.path.exists(args.report) else ""
    at = text.find(SECTION)
    kept = (text[:at] if at >= 0 else text).rstrip("\n")
    write(args.report, (kept + "\n\n" if kept else "") + section(results, args, run))


def main():
    import sweep_models

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", help="comma-separated architectures (default: all)")
    parser.add_argument("--out", default=os.path.join(ROOT, "target", "openvino-sweep"))
    parser.add_argument("--report", default=os.path.join(ROOT, "docs", "sweep.md"))
    parser.add_argument("--jobs", type=int, default=1, help="architectures run at once")
    parser.add_argument("--hfx", default=os.path.join(ROOT, "target", "release", "hfx"))
    parser.add_argument("--timeout", type=int, default=600, help="seconds per step")
    parser.add_argument("--modes", default="static,dynamic")
    parser.add_argument("--resume", action="store_true", help="keep results already in OUT/results")
    parser.add_argument("--report-only", action="store_true", help="the report from OUT/results")
    parser.add_argument("--recheck", action="store_true", help="check OUT's IRs again, then report")
    args = parser.parse_args()
    args.out, args.report, args.hfx = (
        os.path.abspath(p) for p in (args.out, args.report, args.hfx)
    )
    args.modes = [m for m in args.modes.split(",") if m]
    names = [n.strip() for n in args.only.split(",")] if args.only else list(sweep_models.ARCHS)
    unknown = [n for n in names if n not in sweep_models.ARCHS]
    if unknown:
        parser.error(f"unknown architectures {unknown}")
    if not os.access(args.hfx, os.X_OK) and not (args.report_only or args.recheck):
        parser.error(f"no hfx binary at {args.hfx} (cargo build --release -p hfx, or --hfx PATH)")
    command = "python bench/openvino_sweep.py " + " ".join(
        a.replace(ROOT + "/", "") for a in sys.argv[1:]
    )
    started, clock = datetime.datetime.now(datetime.UTC), time.perf_counter()

    def stored(name):
        path = os.path.join(args.out, "results", f"{name}.json")
        return json.load(open(path)) if os.path.exists(path) else None

    results = {}
    if args.report_only or args.recheck:
        results = {n: stored(n) for n in names if stored(n)}
        for name, result in results.items() if args.recheck else ():
            sweep.checked(result, args, script=__file__)
            write(os.path.join(args.out, "results", f"{name}.json"), json.dumps(result, indent=1))
    else:
        todo = [n for n in names if not (args.resume and stored(n))]
        results = {n: stored(n) for n in names if n not in todo}
        log(f"{len(todo)} architectures to run ({len(results)} kept), {args.jobs} at a time")
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for name, result in zip(todo, pool.map(lambda n: sweep_arch(n, args), todo)):
                results[name] = result
    elapsed = time.perf_counter() - clock
    if not (args.report_only or args.recheck):
        for name in todo:
            results[name]["measured"] = {"command": command, "started": started.isoformat()}
            write(
                os.path.join(args.out, "results", f"{name}.json"),
                json.dumps(results[name], indent=1),
            )
    meta = os.path.join(args.out, "results", "_run.json")
    fresh = not (args.report_only or args.recheck)
    run = json.load(open(meta)) if os.path.exists(meta) and (args.resume or not fresh) else None
    if run is None:
        run = {"started": started.isoformat(), "elapsed": elapsed, "command": command}
    elif fresh:
        run["elapsed"] += elapsed
    if fresh:
        write(meta, json.dumps(run))
    for result in results.values():
        for step in result["hfx"].values():
            detailed(refused_by_verify(step))
    report([results[n] for n in names if n in results], args, run)
    log(f"{len(results)} architectures in {elapsed / 60:.1f} min; report: {args.report}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reference-one"]:
        reference_one(*sys.argv[2:5])
    elif sys.argv[1:2] == ["--check"]:
        check(sys.argv[2], json.loads(sys.argv[3]))
    else:
        main()
