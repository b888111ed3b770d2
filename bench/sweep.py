"""The architecture sweep (`cargo xtask sweep [ARGS]`): every architecture of
`bench/sweep_models/` (tiny random configs) exported to ONNX static and
`--dynamic` by hfx and by the reference `transformers.exporters.OnnxExporter`,
side by side in one run, then both artifacts checked the same way.

    cargo build --release -p hfx && cargo xtask build-plugins
    .venv/bin/python bench/sweep.py [--only llama,bloom] [--out target/sweep] [--report docs/sweep.md]
                                    [--jobs 1] [--hfx target/release/hfx] [--timeout 600] [--resume]

Per architecture, alternating the two exporters (hfx static, reference static,
hfx dynamic, reference dynamic), each a fresh process with a timeout:

- hfx: `hfx run --backend onnx --plugins plugins/dynamo --plugins plugins/onnx
  --model-fn python:sweep_models:<arch>_model [--static] -o OUT/hfx-<arch>-<mode>.onnx`;
- the reference: `OnnxExporter().export(model, inputs, config=OnnxConfig(dynamic=...))`
  (its default optimization) and `save_pretrained(OUT/ref-<arch>-<mode>)`.

hfx runs without `--verify`: the check below verifies both sides alike, the
reference exports without verifying (so the times compare like with like), and
hfx's own `--verify` compares a sliding-window layer's cache with eager's
cut one, so it would refuse artifacts the check passes (see `sliding_window_part`).

Both build the same model from the same function (seed 0). Each records the
process's wall time, its exit status, one line naming the cause of a failure,
and the saved graph's node count. Then one Python process checks every
artifact of the architecture in ONNX Runtime against eager PyTorch of the
same model: at size A (the traced inputs) and, for a dynamic export, at size B
(another batch and sequence / frame / image size where the model allows one);
outputs mapped by name (the reference's names are in its `export.json` and
graph, hfx's follow them), pass = every output within atol = rtol = 1e-3.

Results land per architecture in OUT/results/<arch>.json (`--resume` keeps
those already there) and the table in `--report` (docs/sweep.md).
"""

import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PYTHON = sys.executable
MODES = ("static", "dynamic")
# The heading of the OpenVINO sweep's section of the report (`bench/openvino_sweep.py`), after this sweep's.
OPENVINO_SECTION = "## OpenVINO (`--backend openvino`)"
ATOL = RTOL = 1e-3
NODE_SLACK = (
    1.10  # the bound: no graph larger than the reference's optimized one by more than 10%
)

sys.path.insert(0, HERE)


# ── Running a step: a fresh process, a timeout, one line on failure ──


def run_step(command, timeout, env=None):
    """(returncode or "timeout", wall seconds, stdout, stderr) of a command in its own process group."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
        code = process.returncode
    except subprocess.TimeoutExpired:
        # SIGTERM first: hfx then stops its worker and removes its scratch folders.
        os.killpg(process.pid, signal.SIGTERM)
        try:
            stdout, stderr = process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        code = "timeout"
    return code, time.perf_counter() - start, stdout, stderr


NOISE = re.compile(
    r"^\s*(\[transformers\]|warnings\.warn|W\d{4} |.*Warning:|Traceback|\s*File \"|\s*\^+\s*$)"
)


def one_line(text, limit=240):
    """The line of `text` that names the cause: an `Error:` line when there is one, else the last meaningful line."""
    lines = [l.strip() for l in text.splitlines() if l.strip() and not NOISE.match(l)]
    if not lines:
        return "no output"
    chosen = next((l for l in lines if l.startswith(("Error:", "error:"))), lines[-1])
    chosen = re.sub(r"\s+", " ", chosen)
    return chosen if len(chosen) <= limit else chosen[: limit - 1] + "…"


def node_count(path):
    """Nodes of an ONNX graph: the main graph's, plus those of sub-graphs (If/Loop/Scan bodies) and of local
    functions, so a graph that hides work in either is not undercounted."""
    import onnx

    model = onnx.load(path, load_external_data=False)

    def count(graph):
        total = 0
        for node in graph.node:
            total += 1
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    total += count(attribute.g)
                total += sum(count(g) for g in attribute.graphs)
        return total

    return count(model.graph) + sum(len(f.node) for f in model.functions)


def guard_node_count(path):
    """The nodes with which an hfx ONNX model checks torch.export's size guards at run time
    (`host/src/onnx/guards.rs` names their outputs so); the reference's graph has no such check."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    return sum(
        1
        for node in model.graph.node
        if node.output
        and (node.output[0].startswith("size_guard_") or "torch.export's guard" in node.output[0])
    )


# ── The two exporters ──


def hfx_export(hfx, arch, mode, out, timeout):
    path = os.path.join(out, f"hfx-{arch}-{mode}.onnx")
    for stale in (path, path + ".data"):
        if os.path.exists(stale):
            os.remove(stale)
    command = [
        hfx,
        "run",
        "--backend",
        "onnx",
        "--plugins",
        os.path.join(ROOT, "plugins", "dynamo"),
        "--plugins",
        os.path.join(ROOT, "plugins", "onnx"),
        "--model-fn",
        f"python:sweep_models:{arch}_model",
        "-o",
        path,
        "--python",
        PYTHON,
        "-v",
    ]
    if mode == "static":
        command.append("--static")
    env = {**os.environ, "PYTHONPATH": HERE}
    code, wall, stdout, stderr = run_step(command, timeout, env)
    result = {"seconds": round(wall, 2), "command": " ".join(command[1:]).replace(ROOT + "/", "")}
    if code == 0 and os.path.exists(path):
        # The graph's computation, its size-guard checks counted apart.
        guards = guard_node_count(path)
        result.update(ok=True, path=path, nodes=node_count(path) - guards, guard_nodes=guards)
        # hfx says which input axes torch.export fixed although the export is dynamic.
        fixed = next(
            (
                l.split(":", 1)[1].split("(")[0].strip()
                for l in stdout.splitlines()
                if "fixed by torch.export in a dynamic export" in l
            ),
            None,
        )
        if fixed:
            result["fixed_axes"] = fixed
        # ... and the first guard of torch.export's that another size breaks (unchecked where hfx names one so).
        guard = next(
            (
                l.split("`")[1]
                for l in stdout.splitlines()
                if "valid only where torch.export's guard" in l
            ),
            None,
        )
        if guard:
            result["size_guard"] = guard
    else:
        result["log"] = os.path.join(out, "logs", f"hfx-{arch}-{mode}.log")
        write(result["log"], f"exit {code}\n{stdout}\n---- stderr ----\n{stderr}")
        result.update(ok=False, reason=hfx_reason(code, stdout, stderr, timeout))
    return result


PROGRESS = re.compile(r"^\[\s*[\d.]+ s\] (.+)$")


def hfx_reason(code, stdout, stderr, timeout):
    """One line for a failed hfx run: its `error:` line; for a timeout, the last step hfx had started (`-v`)."""
    if code == "timeout":
        steps = [m.group(1) for m in map(PROGRESS.match, stderr.splitlines()) if m]
        return f"timeout after {timeout} s" + (f" (in {steps[-1]})" if steps else "")
    lines = [l for l in stderr.splitlines() if not PROGRESS.match(l)]
    line = one_line("\n".join(lines) + "\n" + stdout)
    line = re.sub(r"\S*/\.hfx-trace-\d+/", "", line)  # the run's scratch folder
    return re.sub(r"^(error|Error): ", "", line)


def reference_export(arch, mode, out, timeout):
    folder = os.path.join(out, f"ref-{arch}-{mode}")
    command = [PYTHON, os.path.abspath(__file__), "--reference-one", arch, mode, folder]
    code, wall, stdout, stderr = run_step(command, timeout, {**os.environ, "PYTHONPATH": HERE})
    result = {"seconds": round(wall, 2)}
    reply = last_json(stdout)
    path = os.path.join(folder, "model.onnx")
    if code == 0 and reply and reply.get("ok") and os.path.exists(path):
        result.update(
            ok=True,
            path=path,
            nodes=node_count(path),
            export_s=reply["export_s"],
            save_s=reply["save_s"],
        )
    else:
        reference_failed(result, (arch, mode, out), code, reply, stdout, stderr, timeout, onnx_step)
    return result


def onnx_step(stdout, stderr):
    """Where a timed-out torch.onnx export was: torch.onnx prints each of its
    steps (`[torch.onnx] Run decomposition...`)."""
    steps = [l.strip() for l in (stdout + stderr).splitlines() if l.startswith("[torch.onnx]")]
    return f" (after `{steps[-1]}`)" if steps else " (in torch.export)"


def reference_failed(result, run, code, reply, stdout, stderr, timeout, where=None):
    """`result` of the reference's failed export `run` (arch, mode, out
    folder): its one-line reason (a timeout's with `where(stdout, stderr)`
    when given), and its output written to a log it names."""
    arch, mode, out = run
    if code == "timeout":
        reason = f"timeout after {timeout} s" + (where(stdout, stderr) if where else "")
    elif reply and reply.get("error"):
        reason = reply["error"]
    else:
        reason = f"exit {code}: " + one_line(stderr)
    result.update(ok=False, reason=reason)
    result["log"] = os.path.join(out, "logs", f"ref-{arch}-{mode}.log")
    write(result["log"], stdout + "\n---- stderr ----\n" + stderr)


def reference_one(arch, mode, folder):
    """Child process: the reference exporter on one architecture; prints one JSON line."""
    import shutil
    import traceback

    import sweep_models
    import torch
    from transformers.exporters import OnnxConfig, OnnxExporter

    if os.path.exists(folder):
        shutil.rmtree(folder)
    model, inputs = sweep_models.ARCHS[arch].build()
    try:
        start = time.perf_counter()
        with torch.no_grad():
            exported = OnnxExporter().export(
                model, inputs, config=OnnxConfig(dynamic=mode == "dynamic")
            )
        exported_at = time.perf_counter()
        exported.save_pretrained(folder)
        reply = {
            "ok": True,
            "export_s": round(exported_at - start, 2),
            "save_s": round(time.perf_counter() - exported_at, 2),
        }
    except Exception as error:  # any failure of the exporter is a result, reduced to one line
        traceback.print_exc()
        reply = {"ok": False, "error": exception_line(error)}
    print(json.dumps(reply), flush=True)


def exception_line(error):
    """`Type: first meaningful line` of an exception, following the chain to the root cause when the outer
    message is generic (torch.onnx wraps the real error)."""
    chain = [error]
    while chain[-1].__cause__ is not None and len(chain) < 8:
        chain.append(chain[-1].__cause__)
    for candidate in (chain[-1], error):
        lines = [l.strip() for l in str(candidate).splitlines() if l.strip()]
        generic = not lines or re.match(
            r"^(Failed to (export|convert)|An error occurred|Error when|See the stack)", lines[0]
        )
        if not generic or candidate is error:
            text = lines[0] if lines else ""
            return re.sub(r"\s+", " ", f"{type(candidate).__name__}: {text}")[:240]
    return type(error).__name__


# ── The check: both artifacts against eager, in one process ──


def check_arch(arch, artifacts, timeout, script=__file__):
    """Runs `script --check` in a fresh process; a crash (ORT can segfault) fails the artifacts it did not reach."""
    if not artifacts:
        return {}
    command = [PYTHON, os.path.abspath(script), "--check", arch, json.dumps(artifacts)]
    code, _, stdout, stderr = run_step(command, timeout, {**os.environ, "PYTHONPATH": HERE})
    results = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            results[entry.pop("key")] = entry
    for key in artifacts:
        if key not in results:
            cause = (
                f"timeout after {timeout} s"
                if code == "timeout"
                else f"check process exit {code}: {one_line(stderr)}"
            )
            results[key] = {"ok": False, "max_abs": None, "reason": cause}
    return results


def check(arch, artifacts):
    """Child process: eager outputs at sizes A and B (same seed as both exports), then each artifact in ONNX
    Runtime; prints one JSON line per artifact."""
    import numpy as np
    import onnxruntime
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
            options = onnxruntime.SessionOptions()
            options.log_severity_level = 3
            session = onnxruntime.InferenceSession(
                path, options, providers=["CPUExecutionProvider"]
            )
        except Exception as error:
            entry.update(
                ok=False, max_abs=None, reason="ONNX Runtime refuses the model: " + ort_line(error)
            )
            print(json.dumps(entry), flush=True)
            continue
        for size in ("A", "B") if mode == "dynamic" else ("A",):
            where = f"size {size} ({shape_of(sizes[size])})"
            try:
                ok, worst, reason = compare(session, sizes[size], eager[size], np)
            except Exception as error:
                entry.update(ok=False, reason=f"ONNX Runtime at {where}: {ort_line(error)}")
                break
            entry["sizes"][size] = {"ok": ok, "max_abs": worst}
            entry["max_abs"] = (
                max(entry["max_abs"], worst) if worst is not None else entry["max_abs"]
            )
            if not ok:
                entry.update(ok=False, reason=f"{where}: {reason}")
                break
        print(json.dumps(entry), flush=True)


def ort_line(error):
    """ONNX Runtime's error in one line: the node and the message, without source paths."""
    text = re.sub(r"\s+", " ", str(error))
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    text = re.sub(
        r"Non-zero status code returned while running (\w+) node\. Name:'([^']*)' Status Message: ",
        r"\1 node `\2`: ",
        text,
    )
    text = re.sub(r"/onnxruntime_src/\S+:\d+ (\S+\([^)]*\)(?: const)?)? ?", "", text)
    return text[:240]


def shape_of(inputs):
    first = next(iter(inputs.values()))
    return "x".join(str(d) for d in first.shape)


def compare(session, inputs, eager, np):
    """(ok, max abs error, one-line reason) of one run: inputs fed by name (`input.` prefix of the reference's
    disambiguation stripped), outputs mapped by name, else by position when no name matches."""
    feeds = {}
    for spec in session.get_inputs():
        name = spec.name[len("input.") :] if spec.name.startswith("input.") else spec.name
        if name not in inputs:
            return (
                False,
                None,
                f"the graph wants input `{spec.name}`, the model takes {sorted(inputs)}",
            )
        feeds[spec.name] = inputs[name].numpy()
    names = [
        o.name[len("output.") :] if o.name.startswith("output.") else o.name
        for o in session.get_outputs()
    ]
    got = session.run(None, feeds)
    eager_names = list(eager)
    if not set(names) & set(eager_names) and len(names) == len(eager_names):
        names = eager_names  # neither names nor count say otherwise: by position
    missing = [n for n in eager_names if n not in names and eager[n].is_floating_point()]
    worst, failures = 0.0, []
    for name, value in zip(names, got):
        if name not in eager:
            return (
                False,
                None,
                f"graph output `{name}` is no output of the model ({', '.join(eager_names[:6])}…)",
            )
        want = eager[name].to(torch_float64(eager[name])).numpy()
        value = np.asarray(value)
        value = sliding_window_part(name, value, want, eager)
        if value.shape != want.shape:
            failures.append(f"`{name}` shape {list(value.shape)} != {list(want.shape)}")
            continue
        if value.size == 0:
            continue
        diff = np.abs(value.astype(np.float64) - want.astype(np.float64))
        error = float(np.nanmax(diff)) if not np.isnan(diff).all() else float("nan")
        worst = max(worst, error) if error == error else float("nan")
        if not np.allclose(
            value.astype(np.float64), want.astype(np.float64), atol=ATOL, rtol=RTOL, equal_nan=True
        ):
            failures.append(f"`{name}` max abs {error:.2e}")
    if missing:
        failures.append(f"outputs missing from the graph: {', '.join(missing[:4])}")
    return not failures, (worst if worst == worst else None), "; ".join(failures[:3])


def sliding_window_part(name, value, want, eager):
    """Both exporters trace a sliding-window cache layer as a full layer (the reference's patch, which hfx
    ports: a trace would bake in the window's cut), so its keys/values hold every position where eager keeps
    the window: compare the positions eager keeps, the last ones."""
    layer = name.rsplit(".", 1)[0]
    if (
        f"{layer}._sliding_window_tensor" in eager
        and value.ndim == want.ndim >= 2
        and value.shape[:-2] == want.shape[:-2]
        and value.shape[-1] == want.shape[-1]
        and value.shape[-2] > want.shape[-2]
    ):
        return value[..., value.shape[-2] - want.shape[-2] :, :]
    return value


def torch_float64(tensor):
    import torch

    return torch.float64 if tensor.is_floating_point() else tensor.dtype


# ── The sweep ──


def sweep_arch(arch, args):
    """hfx and the reference, alternating, then the check; the result is written to OUT/results/<arch>.json."""
    import sweep_models

    spec = sweep_models.ARCHS[arch]
    result = {
        "arch": arch,
        "category": spec.category,
        "feature": spec.feature,
        "model_class": spec.model_class,
        "hfx": {},
        "reference": {},
    }
    for mode in args.modes:
        log(f"{arch}: hfx {mode}")
        result["hfx"][mode] = hfx_export(args.hfx, arch, mode, args.out, args.timeout)
        log(f"{arch}: hfx {mode} -> {summary(result['hfx'][mode])}")
        if not args.no_reference:
            log(f"{arch}: reference {mode}")
            result["reference"][mode] = reference_export(arch, mode, args.out, args.timeout)
            log(f"{arch}: reference {mode} -> {summary(result['reference'][mode])}")
    checked(result, args)
    write(os.path.join(args.out, "results", f"{arch}.json"), json.dumps(result, indent=1))
    return result


def checked(result, args, script=__file__):
    """The check (`script --check`) of every artifact of one architecture,
    recorded in `result`."""
    arch = result["arch"]
    artifacts = {
        f"{side}/{mode}": r["path"]
        for side in ("hfx", "reference")
        for mode, r in result[side].items()
        if r["ok"] and r.get("path")
    }
    checks = check_arch(arch, artifacts, args.timeout, script)
    for key, entry in checks.items():
        side, mode = key.split("/")
        result[side][mode]["check"] = entry
        log(
            f"{arch}: check {side} {mode}: {'pass' if entry['ok'] else 'FAIL ' + entry.get('reason', '')} "
            f"(max abs {entry.get('max_abs')})"
        )


def summary(step):
    return (
        f"ok, {step['nodes']} nodes, {step['seconds']:.1f} s"
        if step["ok"]
        else f"FAIL ({step['seconds']:.1f} s): {step['reason']}"
    )


def status(step):
    """One word per side and mode: pass, mismatch, export fail, missing."""
    if not step:
        return "—"
    if not step["ok"]:
        return "timeout" if step["reason"].startswith("timeout") else "export fail"
    check = step.get("check")
    if check is None:
        return "unchecked"
    return (
        "pass"
        if check["ok"]
        else ("ORT error" if check.get("reason", "").startswith("ONNX Runtime") else "mismatch")
    )


def passed(step):
    return bool(step) and step["ok"] and bool(step.get("check", {}).get("ok"))


def reason_of(step):
    if not step:
        return None
    if not step["ok"]:
        return step["reason"]
    check = step.get("check")
    if check is not None and not check["ok"]:
        reason = check.get("reason", "check failed")
        if step.get("fixed_axes") and step.get("size_guard"):
            # Both causes, as the exporter said them (which one size B meets, ONNX Runtime's error shows).
            reason = (
                f"torch.export fixed {step['fixed_axes']} and left its guard `{step['size_guard']}` to hold "
                "(the model's code depends on these sizes); size B breaks them: " + reason
            )
        elif step.get("fixed_axes"):
            # The cause, as the exporter said it; ONNX Runtime's error is its effect.
            reason = (
                f"torch.export fixed {step['fixed_axes']} (the model's code depends on these sizes), so "
                + reason
            )
        elif step.get("size_guard"):
            reason = (
                f"valid only where torch.export's guard `{step['size_guard']}` holds, which size B breaks: "
                + reason
            )
        return reason
    return None


def log(message):
    print(f"[{datetime.datetime.now():%H:%M:%S}] {message}", flush=True)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


# ── The report ──


def versions():
    import importlib.metadata as metadata

    found = {}
    for package in ("torch", "transformers", "onnx", "onnxruntime", "onnxscript"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def machine():
    cpu = next(
        (l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
        platform.machine(),
    )
    memory = next((int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
    return f"{os.cpu_count()} cores ({cpu}), {memory / 2**20:.0f} GiB, {platform.system()} {platform.release()}"


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def pair(a, b, fmt):
    return f"{fmt(a) if a is not None else '—'} / {fmt(b) if b is not None else '—'}"


def per_mode(result, fn, fmt):
    """`s: hfx / ref<br>d: hfx / ref` for a value fn(step) of each side."""
    parts = []
    for mode in MODES:
        h, r = result["hfx"].get(mode), result["reference"].get(mode)
        if h is None and r is None:
            continue
        parts.append(f"{mode[0]}: {pair(fn(h) if h else None, fn(r) if r else None, fmt)}")
    return "<br>".join(parts)


def error_of(step):
    check = step.get("check") if step and step["ok"] else None
    return check.get("max_abs") if check else None


def reasons(result):
    """One line per side: its failure reasons, the static and dynamic ones merged when they agree."""
    lines = []
    for side, label in (("hfx", "hfx"), ("reference", "ref")):
        found = {mode: reason_of(result[side].get(mode)) for mode in MODES}
        found = {m: r for m, r in found.items() if r}
        if not found:
            continue
        if len(found) == 2 and len(set(found.values())) == 1:
            lines.append(f"**{label}**: {next(iter(found.values()))}")
        else:
            lines.extend(f"**{label} {mode}**: {reason}" for mode, reason in found.items())
    return "<br>".join(cell(l) for l in lines)


def report(results, args, started, elapsed, command):
    import sweep_models

    lines = [
        "# Architecture sweep",
        "",
        "Every architecture of `bench/sweep_models/` (a tiny random config: hidden size 32, 2 layers, vocabulary "
        "128, 32x32 images, built with `torch.manual_seed(0)`) exported to ONNX static and dynamic by hfx "
        "(`hfx run --backend onnx --plugins plugins/dynamo --plugins plugins/onnx --model-fn "
        "python:sweep_models:<arch>_model [--static]`; without `--verify`, since the check below verifies both "
        "sides alike and the reference exports without verifying) and by the reference "
        "(`transformers.exporters.OnnxExporter().export(model, inputs, config=OnnxConfig(dynamic=...))`, its default "
        "optimization, then `save_pretrained`), alternating per architecture in one run. Each artifact is then "
        "checked by the sweep itself, both sides in one process, in ONNX Runtime (CPU) against eager PyTorch of "
        f"the same model: at size A (batch {sweep_models.SIZE_A[0]}, sequence {sweep_models.SIZE_A[1]}: the traced "
        f"inputs) and, for dynamic exports, at size B (batch {sweep_models.SIZE_B[0]}, sequence "
        f"{sweep_models.SIZE_B[1]}, or 48x48 images / 600-sample audio where the model allows another size; "
        "models with fixed image or frame sizes change only the batch); pass = every output within atol = rtol = "
        f"{ATOL:g}.",
        "",
        f"- Produced by: `{command}` (`cargo xtask sweep` runs `bench/sweep.py`), {started:%Y-%m-%d %H:%M} UTC, "
        f"{elapsed / 60:.0f} min for the whole run",
        f"- Machine: {machine()}; shared with other jobs while it ran, so times are indicative only",
        "- Versions: "
        + ", ".join(f"{k} {v}" for k, v in versions().items())
        + f"; hfx {hfx_version(args.hfx)}",
        "- Status: **pass** = exported and matched eager at every size checked; **mismatch** = exported, an "
        "output off eager beyond tolerance (or missing); **ORT error** = exported, ONNX Runtime refused or "
        "failed to run it; **export fail** / **timeout** = no artifact "
        f"({args.timeout} s per step). Nodes count the saved graph (with sub-graphs and functions); hfx's leave out "
        "the nodes with which its ONNX model checks torch.export's size guards at run time (counted apart below; "
        "the reference's graph checks none). Times are "
        "the wall time of each exporter's whole process (Python start, model build, export, save). `s:` static, "
        "`d:` dynamic; each cell is hfx / reference.",
        "- Outputs are matched by name (both sides name them as the reference does: `logits`, "
        "`cache.layers.0.keys`). Both exporters trace a sliding-window cache layer as a full layer (the reference's "
        "patch, which hfx ports), so its keys/values hold every position where eager keeps only the window: the "
        "check compares the positions eager keeps (the last ones).",
    ]
    lines += [
        f'- {name}: eager PyTorch runs with `attn_implementation="eager"` for the check: {spec.eager_attention}'
        for name, spec in sweep_models.ARCHS.items()
        if spec.eager_attention and name in {r["arch"] for r in results}
    ]
    lines += [
        "",
        "| architecture | what it exercises | hfx static | hfx dynamic | reference static | reference dynamic "
        "| nodes hfx / reference | max abs error hfx / reference | export time (s) hfx / reference | failure reason |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for result in results:
        h, r = result["hfx"], result["reference"]
        lines.append(
            "| "
            + " | ".join(
                [
                    f"{result['arch']} ({result['category']})",
                    cell(result["feature"]),
                    status(h.get("static")),
                    status(h.get("dynamic")),
                    status(r.get("static")),
                    status(r.get("dynamic")),
                    per_mode(result, lambda s: s.get("nodes"), str),
                    per_mode(result, error_of, lambda v: f"{v:.1e}"),
                    per_mode(result, lambda s: s.get("seconds"), lambda v: f"{v:.0f}"),
                    reasons(result),
                ]
            )
            + " |"
        )

    lines += ["", "## Totals", ""]
    count = len(results)
    lines.append(
        f"{count} architectures ({', '.join(f'{n} {c}' for c, n in categories(results))})."
    )
    lines.append("")
    lines += totals(results)
    lines += [
        "",
        f"## Node counts above the reference's optimized graph by more than {100 * (NODE_SLACK - 1):.0f}%",
        "",
    ]
    outliers = []
    for result in results:
        for mode in MODES:
            h, r = result["hfx"].get(mode), result["reference"].get(mode)
            if h and r and h["ok"] and r["ok"] and h["nodes"] > NODE_SLACK * r["nodes"]:
                outliers.append(
                    f"- {result['arch']} {mode}: hfx {h['nodes']}, reference {r['nodes']} "
                    f"({h['nodes'] / r['nodes']:.2f}x)"
                )
    lines += outliers or ["None (where both exported)."]
    both = [
        (x["hfx"][m]["nodes"], x["reference"][m]["nodes"])
        for x in results
        for m in MODES
        if x["hfx"].get(m, {}).get("ok") and x["reference"].get(m, {}).get("ok")
    ]
    if both:
        lines += [
            "",
            f"Over the {len(both)} exports both sides produced: hfx {sum(a for a, _ in both)} nodes, "
            f"reference {sum(b for _, b in both)} ({sum(a for a, _ in both) / sum(b for _, b in both):.2f}x).",
        ]
    checks = [
        (x["arch"], m, x["hfx"][m]["guard_nodes"])
        for x in results
        for m in MODES
        if x["hfx"].get(m, {}).get("guard_nodes")
    ]
    if checks:
        lines += [
            "",
            f"hfx's ONNX models check torch.export's size guards at run time in {len(checks)} exports, with "
            f"{sum(n for *_, n in checks)} nodes beside the counts above (most: "
            + ", ".join(f"{a} {m} {n}" for a, m, n in sorted(checks, key=lambda c: -c[2])[:5])
            + ").",
        ]
    write(args.report, "\n".join(lines) + "\n" + other_sweeps(args.report))


def other_sweeps(path):
    """The sections other sweeps keep in the report after this one's
    (`bench/openvino_sweep.py`'s), as they are."""
    try:
        text = open(path).read()
    except FileNotFoundError:
        return ""
    at = text.find(OPENVINO_SECTION)
    return "\n" + text[at:] if at >= 0 else ""


def totals(results):
    """The totals table's lines (exported, and exported and verified, per
    side and mode out of every architecture), then where one side passes and
    the other does not."""
    count = len(results)
    lines = [
        "| | hfx static | hfx dynamic | reference static | reference dynamic |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, test in (
        ("exported", lambda s: bool(s) and s["ok"]),
        ("exported and verified", passed),
    ):
        row = [
            sum(1 for x in results if test(x[side].get(mode)))
            for side in ("hfx", "reference")
            for mode in MODES
        ]
        lines.append(f"| {label} | " + " | ".join(f"{n} / {count}" for n in row) + " |")
    lines.append("")
    for mode in MODES:
        only_hfx = [
            x["arch"]
            for x in results
            if passed(x["hfx"].get(mode)) and not passed(x["reference"].get(mode))
        ]
        only_ref = [
            x["arch"]
            for x in results
            if passed(x["reference"].get(mode)) and not passed(x["hfx"].get(mode))
        ]
        lines.append(
            f"- {mode}: hfx exports and verifies where the reference does not: "
            f"{', '.join(only_hfx) or 'none'}; the reverse: {', '.join(only_ref) or 'none'}"
        )
    return lines


def categories(results):
    seen = {}
    for result in results:
        seen[result["category"]] = seen.get(result["category"], 0) + 1
    return sorted(seen.items(), key=lambda item: -item[1])


def hfx_version(hfx):
    try:
        text = subprocess.run(
            [hfx, "--version"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except OSError:
        text = "?"
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout.strip()
    return f"{text.split()[-1] if text else '?'} (commit {commit}{', with uncommitted changes' if dirty else ''})"


# ── Command line ──


def main():
    import sweep_models

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", help="comma-separated architectures (default: all); see --list")
    parser.add_argument("--list", action="store_true", help="print the architectures and exit")
    parser.add_argument(
        "--out", default=os.path.join(ROOT, "target", "sweep"), help="artifacts, logs and results"
    )
    parser.add_argument(
        "--report", default=os.path.join(ROOT, "docs", "sweep.md"), help="the Markdown table"
    )
    parser.add_argument("--jobs", type=int, default=1, help="architectures run at once")
    parser.add_argument(
        "--hfx", default=os.path.join(ROOT, "target", "release", "hfx"), help="the hfx binary"
    )
    parser.add_argument(
        "--timeout", type=int, default=600, help="seconds per step (each export, each check)"
    )
    parser.add_argument(
        "--modes", default="static,dynamic", help="static,dynamic (default) or one of them"
    )
    parser.add_argument("--no-reference", action="store_true", help="hfx only")
    parser.add_argument("--resume", action="store_true", help="keep results already in OUT/results")
    parser.add_argument(
        "--report-only", action="store_true", help="write the report from OUT/results"
    )
    parser.add_argument(
        "--recheck", action="store_true", help="check the artifacts in OUT again, then report"
    )
    parser.add_argument(
        "--expect",
        metavar="REPORT",
        help="exit 1 if an architecture hfx passed in REPORT (docs/sweep.md) no longer passes",
    )
    args = parser.parse_args()
    if args.list:
        for name, spec in sweep_models.ARCHS.items():
            print(f"{name:14} {spec.category:16} {spec.model_class:34} {spec.feature}")
        return
    args.out, args.report, args.hfx = (
        os.path.abspath(p) for p in (args.out, args.report, args.hfx)
    )
    args.modes = [m for m in args.modes.split(",") if m]
    if any(m not in MODES for m in args.modes):
        parser.error(f"--modes: {args.modes} (static, dynamic)")
    names = [n.strip() for n in args.only.split(",")] if args.only else list(sweep_models.ARCHS)
    unknown = [n for n in names if n not in sweep_models.ARCHS]
    if unknown:
        parser.error(f"unknown architectures {unknown}; --list shows them")
    if not os.access(args.hfx, os.X_OK) and not (args.report_only or args.recheck):
        parser.error(f"no hfx binary at {args.hfx} (cargo build --release -p hfx, or --hfx PATH)")
    command = "python bench/sweep.py " + " ".join(a.replace(ROOT + "/", "") for a in sys.argv[1:])
    started, clock = datetime.datetime.now(datetime.UTC), time.perf_counter()

    def stored(name):
        path = os.path.join(args.out, "results", f"{name}.json")
        return json.load(open(path)) if os.path.exists(path) else None

    results = {}
    if args.report_only or args.recheck:
        results = {n: stored(n) for n in names if stored(n)}
        for name, result in results.items() if args.recheck else ():
            checked(result, args)
            write(os.path.join(args.out, "results", f"{name}.json"), json.dumps(result, indent=1))
        args.report_only = True  # the run's time and command stay those of the export run
    else:
        todo = []
        for name in names:
            if args.resume and stored(name):
                results[name] = stored(name)
            else:
                todo.append(name)
        log(
            f"{len(todo)} architectures to run ({len(results)} kept), {args.jobs} at a time, out {args.out}"
        )
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for name, result in zip(todo, pool.map(lambda n: sweep_arch(n, args), todo)):
                results[name] = result
    ordered = [results[n] for n in names if n in results]
    elapsed = time.perf_counter() - clock
    # The run's start, command and time; a resumed run adds its time to the run it completes.
    meta = os.path.join(args.out, "results", "_run.json")
    run = (
        json.load(open(meta)) if (args.report_only or args.resume) and os.path.exists(meta) else {}
    )
    if run:
        started = datetime.datetime.fromisoformat(run["started"])
        command = run["command"]
        elapsed = run["elapsed"] + (0 if args.report_only else elapsed)
    if not args.report_only:
        write(
            meta,
            json.dumps({"started": started.isoformat(), "elapsed": elapsed, "command": command}),
        )
    report(ordered, args, started, elapsed, command)
    log(f"{len(ordered)} architectures in {elapsed / 60:.1f} min; report: {args.report}")
    if args.expect:
        lost = regressions(ordered, recorded_hfx_passes(args.expect))
        for line in lost:
            log(f"REGRESSION {line}")
        if lost:
            sys.exit(1)


def recorded_hfx_passes(path):
    """{(arch, mode)} hfx exported and verified in a report this script
    wrote (its first table's hfx static and hfx dynamic cells; the tables
    after its first section are other sweeps')."""
    passes = set()
    for line in open(path):
        if line.startswith("## ") and passes:
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or " (" not in cells[0]:
            continue
        arch = cells[0].split(" (")[0]
        for mode, cell in zip(MODES, cells[2:4]):
            if cell == "pass":
                passes.add((arch, mode))
    return passes


def regressions(results, recorded):
    """One line per architecture and mode `recorded` as hfx passing that
    this run ran and hfx did not pass."""
    return [
        f"{x['arch']} {mode}: {status(x['hfx'].get(mode))}: {reason_of(x['hfx'].get(mode))}"
        for x in results
        for mode in MODES
        if (x["arch"], mode) in recorded and mode in x["hfx"] and not passed(x["hfx"].get(mode))
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reference-one"]:
        reference_one(*sys.argv[2:5])
    elif sys.argv[1:2] == ["--check"]:
        check(sys.argv[2], json.loads(sys.argv[3]))
    else:
        main()
