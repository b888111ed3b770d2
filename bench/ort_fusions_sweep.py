"""Which decoders of the sweep the reference fuses for ONNX Runtime (`OnnxConfig(ort_fusions="cpu")`), and hfx's
`--ort-fusions cpu` beside it: the table of `docs/ort-fusions.md`.

    .venv/bin/python bench/ort_fusions_sweep.py [--only llama,gpt2] [--out target/ort-fusions]
        [--report docs/ort-fusions.md] [--hfx target/debug/hfx] [--plugins plugins] [--timeout 300]
        [--resume] [--report-only] [--hfx-only]

Per decoder-only generative architecture of `bench/sweep_models/` (its tiny random config, seed 0; the
state-space models and the encoders left out), one at a time:

- a child process builds the model as the sweep does, saves it to OUT/models/<arch> (the folder hfx exports
  from), and runs the reference: `OnnxExporter().export_for_generation(model, inputs,
  config=OnnxConfig(dynamic=True, ort_fusions="cpu"))` + `save_pretrained(OUT/ref-fused/<arch>)`, the inputs
  being the sweep's size-A text inputs (batch 2, 8 tokens, an all-ones mask) as `generate` kwargs; it checks the
  fused folder (below), then exports the same model with `OnnxConfig(dynamic=True)` (OUT/ref-unfused/<arch>) for
  its node counts. Each stage prints one JSON line, so a crash or the timeout keeps what came before.
- hfx: `hfx run --backend onnx --plugins PLUGINS --model-dir OUT/models/<arch> --generation --ort-fusions cpu
  --verify -o OUT/hfx/<arch>/`; while hfx refuses `--ort-fusions` (an unknown argument) its columns say
  "not yet", and the same script fills them once it takes the flag (`--hfx-only`: hfx's side again, the
  reference's results kept). A folder hfx writes is checked as the reference's is, and its ONNX Runtime
  ops compared with the reference's fused ones (fewer of an op: named).

The check of a folder (a child process): `prefill.onnx` and `decode.onnx` in ONNX Runtime's CPU provider, fed
by input name (`transformers.exporters.utils.onnx_feed`) with the prefill and decode kwargs `generate`
passes (captured by the reference's `decompose_for_generation`, the same ones it exported with), their
`logits` against eager PyTorch's on the same kwargs (max abs error); then 8 greedy tokens: the prefill, then
7 decode steps fed by name (each `present` output as the next step's past, `input_ids`, `position_ids`,
`attention_mask` / `cache_position` where the graph takes them; `generate` drops an all-ones mask, which the
reference's graphs then do not take and hfx's do, so the check makes it as `generate` would) against eager
`generate(max_new_tokens=8, do_sample=False)` with no end-of-sequence token (so neither side stops early). The
reference's `ExportedModel` has no generate path of its own (its runners run one component a call), so the
loop is here.

Counted per component: each of ONNX Runtime's own ops (`com.microsoft`, and those it registers in the
default domain) and the total nodes (sub-graphs and functions included, as
the sweep counts them). Results land per architecture in OUT/results/<arch>.json (`--resume` keeps them).
"""

import argparse
import collections
import copy
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

from sweep import (  # noqa: E402  (the sweep's process handling, one-line reasons, node count, report bits)
    exception_line,
    log,
    machine,
    one_line,
    ort_line,
    run_step,
    versions,
    write,
)

COMPONENTS = ("prefill", "decode")
STEPS = 8
PARITY = 1e-3
# Decoder-only generative architectures of the sweep (its state-space models left out).
EXCLUDED = ("mamba", "mamba2")
# Short names for the table; any other ONNX Runtime op keeps its own name.
SHORT = {
    "GroupQueryAttention": "GQA",
    "MultiHeadAttention": "MHA",
    "Attention": "Attention",
    "RotaryEmbedding": "RoPE",
    "SkipSimplifiedLayerNormalization": "SkipSLN",
    "SimplifiedLayerNormalization": "SLN",
    "SkipLayerNormalization": "SkipLN",
    "LayerNormalization": "LN",
    "FastGelu": "FastGelu",
    "BiasGelu": "BiasGelu",
    "Gelu": "Gelu",
    "MatMulNBits": "MatMulNBits",
    "MoE": "MoE",
}
# hfx refusing the flag: clap's "unexpected argument" (or any "unknown/unrecognized" form naming it).
NOT_YET = re.compile(r"(unexpected|unknown|unrecognized)[^\n]*--ort-fusions")


def decoders():
    import sweep_models

    return [
        name
        for name, spec in sweep_models.ARCHS.items()
        if spec.category == "decoder" and name not in EXCLUDED
    ]


# ── Counting ──


def op_counts(path):
    """({ONNX Runtime op: count}, total nodes) of one saved graph, sub-graphs and functions
    included: its `com.microsoft` ops and those it registers in the default domain
    (`SimplifiedLayerNormalization`), which ONNX has no schema for."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    ops, total = collections.Counter(), 0

    def walk(nodes):
        nonlocal total
        for node in nodes:
            total += 1
            default = node.domain in ("", "ai.onnx")
            if node.domain == "com.microsoft" or (default and not onnx.defs.has(node.op_type)):
                ops[node.op_type] += 1
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    walk(attribute.g.node)
                for graph in attribute.graphs:
                    walk(graph.node)

    walk(model.graph.node)
    for function in model.functions:
        walk(function.node)
    return dict(sorted(ops.items())), total


def folder_counts(folder):
    """{component: {"ops": ..., "nodes": ...}} of an export folder."""
    counts = {}
    for component in COMPONENTS:
        path = os.path.join(folder, f"{component}.onnx")
        if os.path.exists(path):
            ops, nodes = op_counts(path)
            counts[component] = {"ops": ops, "nodes": nodes}
    return counts


def recounted(result, name, out):
    """`result` with its op counts taken again from the folders still on disk."""
    sides = [
        (result.get("reference", {}).get("fused"), "ref-fused"),
        (result.get("reference", {}).get("unfused"), "ref-unfused"),
        (result.get("hfx"), "hfx"),
    ]
    for side, folder in sides:
        folder = os.path.join(out, folder, name)
        if isinstance(side, dict) and "counts" in side and os.path.isdir(folder):
            side["counts"] = folder_counts(folder)
    return result


# ── The check: a folder's prefill and decode against eager, then greedy tokens ──


def check(arch, folder):
    """{"parity": {component: max abs logits error}, "tokens": {...}} of an export folder, or an "error"."""
    import numpy as np
    import onnxruntime
    import sweep_models
    import torch
    from transformers.exporters.utils import decompose_for_generation

    model, inputs = sweep_models.ARCHS[arch].build()
    stages = decompose_for_generation(model, copy.deepcopy(inputs))
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    sessions, result = {}, {"parity": {}}
    for component in COMPONENTS:
        path = os.path.join(folder, f"{component}.onnx")
        try:
            sessions[component] = onnxruntime.InferenceSession(
                path, options, providers=["CPUExecutionProvider"]
            )
        except Exception as error:
            return {**result, "error": f"ONNX Runtime refuses {component}: {ort_line(error)}"}
    for component in COMPONENTS:
        session = sessions[component]
        kwargs = stages[component][1]
        names = [i.name for i in session.get_inputs()]
        feed = feed_for(session, kwargs, inputs, component)
        missing = [n for n in names if n not in feed]
        if missing:
            return {**result, "error": f"{component} takes {missing}, which generate's kwargs lack"}
        try:
            got = run(session, feed)
        except Exception as error:
            return {**result, "error": f"ONNX Runtime runs {component}: {ort_line(error)}"}
        with torch.no_grad():
            want = model(**copy.deepcopy(kwargs)).logits.double().numpy()
        logits = got["logits"].astype(np.float64)
        if logits.shape != want.shape:
            result["parity"][component] = None
            result.setdefault("notes", []).append(
                f"{component} logits shape {list(logits.shape)} != eager {list(want.shape)}"
            )
            continue
        result["parity"][component] = float(np.abs(logits - want).max())
    try:
        result["tokens"] = greedy(model, inputs, stages, sessions, np, torch)
    except Exception as error:
        result["tokens"] = {"error": exception_line(error)}
    return result


def feed_for(session, kwargs, inputs, component):
    """`kwargs` (captured from `generate`) by the graph's input names; a mask, positions or cache positions the
    graph takes but `generate` did not pass (it drops an all-ones mask) made as `generate` would: all ones, and the
    positions after the past (the prompt, for a decode that takes one token)."""
    import numpy as np
    from transformers.exporters.utils import onnx_feed

    names = [i.name for i in session.get_inputs()]
    feed = onnx_feed(names, copy.deepcopy(kwargs))
    ids = kwargs.get("input_ids")
    if ids is None:
        return feed
    batch, length = ids.shape
    total = inputs["input_ids"].shape[1] + (component == "decode")
    past = total - length
    made = {
        "attention_mask": np.ones((batch, total), dtype=np.int64),
        "position_ids": np.tile(np.arange(past, total, dtype=np.int64), (batch, 1)),
        "cache_position": np.arange(past, total, dtype=np.int64),
    }
    for name in names:
        key = name.removeprefix("input.")
        if name not in feed and key in made:
            feed[name] = made[key]
    return feed


def run(session, feed):
    """Outputs by name, `output.` prefix (the reference's disambiguation of a present) stripped."""
    outputs = session.run(None, feed)
    return {o.name.removeprefix("output."): v for o, v in zip(session.get_outputs(), outputs)}


def greedy(model, inputs, stages, sessions, np, torch):
    """Eager `generate`'s STEPS greedy tokens (no end-of-sequence token) against the prefill and decode graphs
    run in a loop of their own, fed by name."""
    from transformers.exporters.utils import get_leaf_tensors

    model.generation_config.eos_token_id = None
    with torch.no_grad():
        eager = model.generate(
            **copy.deepcopy(inputs),
            max_new_tokens=STEPS,
            min_new_tokens=STEPS,
            do_sample=False,
            eos_token_id=None,
        )
    prompt = inputs["input_ids"].shape[1]
    eager = eager[:, prompt:].numpy()

    prefill, decode = sessions["prefill"], sessions["decode"]
    out = run(prefill, feed_for(prefill, stages["prefill"][1], inputs, "prefill"))
    template = {k: v.numpy() for k, v in get_leaf_tensors(stages["decode"][1]).items()}
    batch = inputs["input_ids"].shape[0]
    tokens = [out["logits"][:, -1].argmax(-1)]
    sequence = np.concatenate([inputs["input_ids"].numpy(), tokens[-1][:, None]], axis=1)
    # A model that generates without a cache (MPT's config: `use_cache=False`) has a decode that takes the whole
    # sequence again, as `generate` feeds it: no past among its inputs.
    cached = any(spec.name.removeprefix("input.") in out for spec in decode.get_inputs())
    past = prompt
    for _ in range(STEPS - 1):
        state = {k: v for k, v in out.items() if k != "logits"}
        if cached:
            step = {
                "input_ids": tokens[-1].reshape(batch, 1).astype(np.int64),
                "position_ids": np.full((batch, 1), past, dtype=np.int64),
                "attention_mask": np.ones((batch, past + 1), dtype=np.int64),
                "cache_position": np.array([past], dtype=np.int64),
            }
        else:
            total = sequence.shape[1]
            step = {
                "input_ids": sequence.astype(np.int64),
                "position_ids": np.tile(np.arange(total, dtype=np.int64), (batch, 1)),
                "attention_mask": np.ones((batch, total), dtype=np.int64),
                "cache_position": np.arange(total, dtype=np.int64),
            }
        feed = {}
        for spec in decode.get_inputs():
            key = spec.name.removeprefix("input.")
            if key in state:
                feed[spec.name] = state[key]
            elif key in step:
                feed[spec.name] = step[key]
            elif key in template:
                feed[spec.name] = template[key]
            else:
                raise ValueError(f"decode takes `{spec.name}`, which the loop cannot feed")
        out = run(decode, feed)
        tokens.append(out["logits"][:, -1].argmax(-1))
        sequence = np.concatenate([sequence, tokens[-1][:, None]], axis=1)
        past += 1
    onnx_tokens = np.stack(tokens, axis=1)
    same = onnx_tokens == eager
    first = next((i for i in range(STEPS) if not same[:, i].all()), None)
    return {
        "match": bool(same.all()),
        "agree": int(same.sum()),
        "total": int(same.size),
        "first_diff": first,
        "cached": cached,
        "eager": eager.tolist(),
        "onnx": onnx_tokens.tolist(),
    }


# ── The reference (a child process per architecture) ──


def reference_one(arch, out):
    """Child process: model folder, fused export + check, unfused export; one JSON line per stage."""
    import shutil
    import traceback

    import sweep_models
    import torch
    from transformers.exporters.exporter_onnx import OnnxConfig, OnnxExporter

    model, inputs = sweep_models.ARCHS[arch].build()
    fused_check = {}
    models = os.path.join(out, "models", arch)
    if not os.path.exists(os.path.join(models, "config.json")):
        model.save_pretrained(models)
    print(json.dumps({"stage": "model", "ok": True, "path": models}), flush=True)

    for stage, config in (
        ("fused", OnnxConfig(dynamic=True, ort_fusions="cpu")),
        ("unfused", OnnxConfig(dynamic=True)),
    ):
        folder = os.path.join(out, f"ref-{stage}", arch)
        if os.path.exists(folder):
            shutil.rmtree(folder)
        model, inputs = sweep_models.ARCHS[arch].build()
        start = time.perf_counter()
        try:
            with torch.no_grad():
                exported = OnnxExporter().export_for_generation(
                    model, copy.deepcopy(inputs), config=config
                )
            exported.save_pretrained(folder)
            reply = {
                "stage": stage,
                "ok": True,
                "seconds": round(time.perf_counter() - start, 1),
                "counts": folder_counts(folder),
            }
        except Exception as error:  # any failure of the exporter is a result, reduced to one line
            traceback.print_exc()
            reply = {"stage": stage, "ok": False, "reason": exception_line(error)}
        print(json.dumps(reply), flush=True)
        if stage == "fused" and reply["ok"]:
            fused_check = check(arch, folder)
            print(json.dumps({"stage": "fused-check", **fused_check}), flush=True)
        elif stage == "unfused" and reply["ok"] and fused_check.get("error"):
            # Whether the fusions are the cause: the unfused export checked the same way.
            print(json.dumps({"stage": "unfused-check", **check(arch, folder)}), flush=True)


def check_one(arch, folder):
    print(json.dumps({"stage": "check", **check(arch, folder)}), flush=True)


def stages_of(stdout):
    found = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if "stage" in entry:
                found[entry.pop("stage")] = entry
    return found


def reference_side(arch, args):
    command = [PYTHON, os.path.abspath(__file__), "--reference-one", arch, args.out]
    code, wall, stdout, stderr = run_step(command, args.timeout, child_env())
    write(
        os.path.join(args.out, "logs", f"ref-{arch}.log"),
        f"exit {code}\n{stdout}\n---- stderr ----\n{stderr}",
    )
    found = stages_of(stdout)
    result = {"seconds": round(wall, 1)}
    cause = (
        f"timeout after {args.timeout} s"
        if code == "timeout"
        else f"exit {code}: {one_line(stderr)}"
        if code != 0
        else "no result"
    )
    for stage in ("fused", "unfused"):
        result[stage] = found.get(stage) or {"ok": False, "reason": cause}
    if result["fused"]["ok"]:
        result["check"] = found.get("fused-check") or {"error": f"check: {cause}"}
    if "unfused-check" in found:
        result["unfused_check"] = found["unfused-check"]
    return result


# ── hfx ──


def hfx_side(arch, args):
    folder = os.path.join(args.out, "hfx", arch)
    if not os.access(args.hfx, os.X_OK):
        return {"status": "failed", "reason": f"no hfx binary at {args.hfx}"}
    command = [
        args.hfx,
        "run",
        "--backend",
        "onnx",
        "--plugins",
        args.plugins,
        "--model-dir",
        os.path.join(args.out, "models", arch),
        "--generation",
        "--ort-fusions",
        "cpu",
        "--verify",
        "-o",
        folder + "/",
        "--python",
        PYTHON,
    ]
    code, wall, stdout, stderr = run_step(command, args.timeout, child_env())
    write(
        os.path.join(args.out, "logs", f"hfx-{arch}.log"),
        f"exit {code}\n{stdout}\n---- stderr ----\n{stderr}",
    )
    result = {"seconds": round(wall, 1), "command": " ".join(command[1:]).replace(ROOT + "/", "")}
    if code != 0 and NOT_YET.search(stderr + stdout):
        return {**result, "status": "not yet", "reason": one_line(stderr)}
    if code != 0:
        reason = (
            f"timeout after {args.timeout} s"
            if code == "timeout"
            else one_line(stderr + "\n" + stdout)
        )
        return {**result, "status": "failed", "reason": re.sub(r"^(error|Error): ", "", reason)}
    verify = next(
        (l.strip() for l in (stdout + stderr).splitlines() if l.startswith("generate ")), None
    )
    result.update(status="ok", counts=folder_counts(folder), verify=verify)
    command = [PYTHON, os.path.abspath(__file__), "--check-one", arch, folder]
    code, _, stdout, stderr = run_step(command, args.timeout, child_env())
    result["check"] = stages_of(stdout).get("check") or {
        "error": f"check: exit {code}: {one_line(stderr)}"
    }
    return result


def child_env():
    return {**os.environ, "PYTHONPATH": HERE}


# ── The run ──


def run_arch(arch, args):
    import sweep_models

    spec = sweep_models.ARCHS[arch]
    result = {"arch": arch, "feature": spec.feature, "model_class": spec.model_class}
    log(f"{arch}: reference (fused, check, unfused)")
    result["reference"] = reference_side(arch, args)
    log(f"{arch}: reference -> {brief(result['reference'])}")
    if os.path.exists(os.path.join(args.out, "models", arch, "config.json")):
        log(f"{arch}: hfx --ort-fusions cpu")
        result["hfx"] = hfx_side(arch, args)
    else:
        result["hfx"] = {
            "status": "failed",
            "reason": "no model folder (the reference's child failed first)",
        }
    log(f"{arch}: hfx -> {result['hfx']['status']} {result['hfx'].get('reason', '')}")
    write(os.path.join(args.out, "results", f"{arch}.json"), json.dumps(result, indent=1))
    return result


def brief(reference):
    fused = reference["fused"]
    if not fused["ok"]:
        return f"fused FAIL: {fused['reason']}"
    check = reference.get("check", {})
    return (
        f"fused ok ({ops_cell(fused['counts'], 'decode')} in decode), parity {check.get('parity')}, "
        f"tokens {check.get('tokens')}, {check.get('error', '')}"
    )


# ── The report ──


def ops_cell(counts, component):
    ops = (counts or {}).get(component, {}).get("ops")
    if ops is None:
        return "—"
    return ", ".join(f"{SHORT.get(op, op)} {n}" for op, n in ops.items()) or "none"


def nodes_cell(unfused, fused):
    parts = []
    for component in COMPONENTS:
        u = (unfused or {}).get(component, {}).get("nodes")
        f = (fused or {}).get(component, {}).get("nodes")
        parts.append(
            f"{component[0]}: {u if u is not None else '—'} → {f if f is not None else '—'}"
        )
    return "<br>".join(parts)


def unfused_note(reference):
    """Where the fused export fails its check: whether the unfused one fails too (the fusions not the cause)."""
    unfused = reference.get("unfused_check")
    if not unfused:
        return ""
    if unfused.get("error") == reference.get("check", {}).get("error"):
        return "<br>(the unfused export fails the same way)"
    return "<br>unfused: " + parity_cell(unfused)


def parity_cell(check):
    if not check:
        return "—"
    parity = check.get("parity", {})
    parts = [
        f"{c[0]}: {parity[c]:.1e}" if parity.get(c) is not None else f"{c[0]}: —"
        for c in COMPONENTS
        if c in parity
    ]
    if check.get("error"):
        parts.append(cell(check["error"]))
    parts += [cell(n) for n in check.get("notes", [])]
    return "<br>".join(parts) or "—"


def tokens_cell(check):
    tokens = (check or {}).get("tokens")
    if not tokens:
        return "—"
    if "error" in tokens:
        return "error: " + cell(tokens["error"])
    if tokens["match"]:
        return f"same ({tokens['total']})"
    return f"differ: {tokens['agree']}/{tokens['total']}, first at step {tokens['first_diff'] + 1}"


def handled(check, counts):
    """The reference handles it: fused ops in both components, logits within PARITY, the same greedy tokens."""
    if not check or check.get("error") or not counts:
        return False
    parity = check.get("parity", {})
    fused = all(counts.get(c, {}).get("ops") for c in COMPONENTS)
    close = all(parity.get(c) is not None and parity[c] <= PARITY for c in COMPONENTS)
    return fused and close and bool(check.get("tokens", {}).get("match"))


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def reference_status(reference):
    fused = reference["fused"]
    if not fused["ok"]:
        return "failed: " + cell(fused["reason"])
    if not any(fused["counts"].get(c, {}).get("ops") for c in COMPONENTS):
        return "exported, nothing fused"
    if reference.get("check", {}).get("error"):
        return "fused, ONNX Runtime fails"
    if handled(reference.get("check"), fused["counts"]):
        return "**yes**"
    return "fused, but off eager"


def hfx_cells(h, reference_counts):
    if h["status"] == "not yet":
        return ["not yet"] * 5
    if h["status"] == "failed":
        return ["failed: " + cell(h["reason"]), "—", "—", "—", "—"]
    counts = h.get("counts", {})
    check = h.get("check")
    nodes = "<br>".join(f"{c[0]}: {counts.get(c, {}).get('nodes', '—')}" for c in COMPONENTS)
    verdict = "**yes**" if handled(check, counts) else "exported, off eager or not fused"
    fewer = fewer_ops(counts, reference_counts)
    if fewer:
        verdict += "<br>fewer fused ops than the reference: " + fewer
    if h.get("verify"):
        verdict += "<br>`--verify`: " + cell(h["verify"])
    return [
        verdict,
        "<br>".join(f"{c[0]}: {ops_cell(counts, c)}" for c in COMPONENTS),
        nodes,
        parity_cell(check),
        tokens_cell(check),
    ]


def hfx_summary(results, handled_by_ref):
    """hfx on the architectures the reference handles: as well (same checks, no fewer fused ops), or why not."""
    by = {r["arch"]: r for r in results}
    same, short, other = [], [], collections.defaultdict(list)
    for arch in handled_by_ref:
        h = by[arch]["hfx"]
        if h["status"] != "ok":
            other[h["status"]].append(arch)
        elif not handled(h.get("check"), h.get("counts")):
            other["exported, off eager or not fused"].append(arch)
        elif fewer_ops(h.get("counts"), by[arch]["reference"]["fused"]["counts"]):
            short.append(arch)
        else:
            same.append(arch)
    parts = [f"as well (no fewer fused ops): {len(same)} ({', '.join(same) or 'none'})"]
    if short:
        parts.append(f"checked, but fewer fused ops: {len(short)} ({', '.join(short)})")
    parts += [f"{status}: {len(archs)} ({', '.join(archs)})" for status, archs in other.items()]
    return f"hfx `--ort-fusions cpu` on those {len(handled_by_ref)}: " + "; ".join(parts) + "."


def node_summary(results, handled_by_ref):
    """hfx's fused node counts against the reference's fused ones, on the architectures both fuse and check."""
    by = {r["arch"]: r for r in results}
    at_most, more = [], []
    for arch in handled_by_ref:
        h = by[arch]["hfx"]
        if h["status"] != "ok":
            continue
        ours, theirs = h.get("counts", {}), by[arch]["reference"]["fused"]["counts"]
        over = [
            f"{c[0]}: {ours[c]['nodes']} > {theirs[c]['nodes']}"
            for c in COMPONENTS
            if c in ours and c in theirs and ours[c]["nodes"] > theirs[c]["nodes"]
        ]
        if over:
            more.append(f"{arch} ({', '.join(over)})")
        else:
            at_most.append(arch)
    return (
        f"Nodes, hfx fused against the reference's fused graph: at most as many in both components: "
        f"{len(at_most)} ({', '.join(at_most) or 'none'}); more: {len(more)} ({'; '.join(more) or 'none'})."
    )


def fewer_ops(counts, reference_counts):
    """The ops of which hfx's graph has fewer than the reference's fused one, per component (`d: GQA 2 < 2`)."""
    parts = []
    for component in COMPONENTS:
        theirs = (reference_counts or {}).get(component, {}).get("ops", {})
        ours = (counts or {}).get(component, {}).get("ops", {})
        short = [
            f"{SHORT.get(op, op)} {ours.get(op, 0)} < {n}"
            for op, n in theirs.items()
            if ours.get(op, 0) < n
        ]
        if short:
            parts.append(f"{component[0]}: {', '.join(short)}")
    return "; ".join(parts)


ATTENTION = ("GroupQueryAttention", "MultiHeadAttention", "Attention")


def attention_summary(results):
    """Where the fused exports got an attention op (per component), and where none: the fusions beyond the norms
    and rotary embeddings."""
    groups = collections.defaultdict(list)
    for result in results:
        fused = result["reference"]["fused"]
        if not fused["ok"]:
            continue
        where = {
            component: [
                op for op in ATTENTION if fused["counts"].get(component, {}).get("ops", {}).get(op)
            ]
            for component in COMPONENTS
        }
        if where["prefill"] == where["decode"]:
            key = (
                f"`{'`, `'.join(where['decode'])}` in prefill and decode"
                if where["decode"]
                else "no attention op fused"
            )
        else:
            key = "; ".join(
                f"{c}: `{'`, `'.join(ops)}`" if ops else f"{c}: no attention op"
                for c, ops in where.items()
            )
        groups[key].append(result["arch"])
    return [f"- {key}: {', '.join(archs)}" for key, archs in groups.items()]


def report(results, args, started, elapsed, command):
    handled_by_ref = [
        r["arch"]
        for r in results
        if r["reference"]["fused"]["ok"]
        and handled(r["reference"].get("check"), r["reference"]["fused"]["counts"])
    ]
    legend = ", ".join(f"{v} = {k}" for k, v in SHORT.items() if v != k)
    lines = [
        "# ONNX Runtime fusions on the sweep's decoders",
        "",
        "Which decoder-only generative architectures of `bench/sweep_models/` (the sweep's tiny random configs, "
        "seed 0; the state-space models mamba and mamba2 left out) the reference fuses for ONNX Runtime's CPU "
        "provider, and whether hfx's `--ort-fusions cpu` does the same. The reference: "
        '`OnnxExporter().export_for_generation(model, inputs, config=OnnxConfig(dynamic=True, ort_fusions="cpu"))` '
        "+ `save_pretrained`, with the sweep's size-A text inputs (batch 2, 8 tokens, an all-ones mask) as `generate` "
        "kwargs, and the same with `OnnxConfig(dynamic=True)` for the unfused node counts. hfx: `hfx run --backend "
        "onnx --plugins plugins --model-dir <the model's folder> --generation --ort-fusions cpu --verify -o DIR/` "
        '("not yet" while hfx refuses the flag).',
        "",
        f"- Produced by: `{command}`, {started:%Y-%m-%d %H:%M} UTC, {elapsed / 60:.0f} min for the whole run "
        f"(one architecture at a time, {args.timeout} s per step)",
        f"- Machine: {machine()}; shared with other jobs while it ran",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()),
        "- Check: each folder's `prefill.onnx` and `decode.onnx` in ONNX Runtime (CPU), fed by input name with the "
        "kwargs `generate` passes them (as the reference captured them), `logits` against eager PyTorch on the same "
        f"kwargs (max abs error, `p:` prefill, `d:` decode); then {STEPS} greedy tokens (prefill, then "
        f"{STEPS - 1} decode steps, each present fed back as the next past) against eager `generate(do_sample=False)` "
        "with no end-of-sequence token, both rows of the batch.",
        f"- **yes** = fused ops in both components, logits within {PARITY:g} of eager and the same greedy tokens; "
        "**fused, ONNX Runtime fails** = fused ops, but ONNX Runtime refuses or fails to run a component; "
        "**fused, but off eager** = fused ops, but the logits or the tokens differ; "
        "**exported, nothing fused** = none of ONNX Runtime's own ops in the graphs.",
        f"- Ops: ONNX Runtime's own ops (`com.microsoft`, and those it registers in the default domain, as `SimplifiedLayerNormalization`) of each component (`p:` prefill, `d:` decode); {legend}. Nodes: every node "
        "of the graph, sub-graphs and functions included, unfused → fused.",
        "",
        f"The reference handles {len(handled_by_ref)} of {len(results)}: {', '.join(handled_by_ref) or 'none'}.",
        "",
        hfx_summary(results, handled_by_ref),
        "",
        node_summary(results, handled_by_ref),
        "",
        *attention_summary(results),
        *[
            f"- {r['arch']}: its config says `use_cache=False`, so `generate` runs it without a cache and the "
            "reference's decode takes the whole sequence again (no past: no attention over a cache to fuse)"
            for r in results
            if (r["reference"].get("check") or {}).get("tokens", {}).get("cached") is False
        ],
        "",
        "| architecture | reference fused? | reference ops | nodes unfused → fused | parity | greedy tokens "
        "| hfx `--ort-fusions cpu` | hfx ops | hfx nodes | hfx parity | hfx tokens |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for result in results:
        ref = result["reference"]
        fused = ref["fused"]
        counts = fused.get("counts") if fused["ok"] else None
        unfused = ref["unfused"].get("counts") if ref["unfused"]["ok"] else None
        ops = "<br>".join(f"{c[0]}: {ops_cell(counts, c)}" for c in COMPONENTS) if counts else "—"
        nodes = nodes_cell(unfused, counts)
        if not ref["unfused"]["ok"]:
            nodes += "<br>unfused failed: " + cell(ref["unfused"]["reason"])
        lines.append(
            "| "
            + " | ".join(
                [
                    f"{result['arch']} ({cell(result['feature'])})",
                    reference_status(ref),
                    ops,
                    nodes,
                    (parity_cell(ref.get("check")) + unfused_note(ref)) if fused["ok"] else "—",
                    tokens_cell(ref.get("check")) if fused["ok"] else "—",
                    *hfx_cells(result["hfx"], counts),
                ]
            )
            + " |"
        )
    write(args.report, "\n".join(lines) + "\n")


# ── Command line ──


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", help="comma-separated architectures (default: every decoder)")
    parser.add_argument("--out", default=os.path.join(ROOT, "target", "ort-fusions"))
    parser.add_argument("--report", default=os.path.join(ROOT, "docs", "ort-fusions.md"))
    parser.add_argument("--hfx", default=os.path.join(ROOT, "target", "debug", "hfx"))
    parser.add_argument("--plugins", default=os.path.join(ROOT, "plugins"))
    parser.add_argument("--timeout", type=int, default=300, help="seconds per step")
    parser.add_argument("--resume", action="store_true", help="keep results already in OUT/results")
    parser.add_argument("--report-only", action="store_true", help="the report from OUT/results")
    parser.add_argument(
        "--hfx-only",
        action="store_true",
        help="run hfx's side again, keeping the reference's results in OUT/results (and its model folders)",
    )
    args = parser.parse_args()
    args.out, args.report, args.hfx, args.plugins = (
        os.path.abspath(p) for p in (args.out, args.report, args.hfx, args.plugins)
    )
    names = [n.strip() for n in args.only.split(",")] if args.only else decoders()
    unknown = [n for n in names if n not in decoders()]
    if unknown:
        parser.error(f"not a decoder of the sweep: {unknown}")
    command = "python bench/ort_fusions_sweep.py " + " ".join(
        a.replace(ROOT + "/", "") for a in sys.argv[1:]
    )
    started, clock = datetime.datetime.now(datetime.UTC), time.perf_counter()

    def stored(name):
        path = os.path.join(args.out, "results", f"{name}.json")
        return json.load(open(path)) if os.path.exists(path) else None

    results = {}
    for name in names:
        kept = stored(name)
        models = os.path.join(args.out, "models", name, "config.json")
        if args.hfx_only and kept and os.path.exists(models):
            log(f"{name}: hfx --ort-fusions cpu (the reference's results kept)")
            kept["hfx"] = hfx_side(name, args)
            log(f"{name}: hfx -> {kept['hfx']['status']} {kept['hfx'].get('reason', '')}")
            write(os.path.join(args.out, "results", f"{name}.json"), json.dumps(kept, indent=1))
            results[name] = kept
        elif (args.resume or args.report_only) and kept:
            results[name] = recounted(kept, name, args.out)
        elif not args.report_only:
            results[name] = run_arch(name, args)
    elapsed = time.perf_counter() - clock
    meta = os.path.join(args.out, "results", "_run.json")
    run_meta = (
        json.load(open(meta))
        if (args.report_only or args.resume or args.hfx_only) and os.path.exists(meta)
        else {}
    )
    if run_meta and args.hfx_only:
        # The reference's columns keep their run; hfx's are this one's.
        command = f"{run_meta['command']}` then `{command}"
        started = datetime.datetime.fromisoformat(run_meta["started"])
        elapsed = run_meta["elapsed"] + elapsed
    elif run_meta:
        started = datetime.datetime.fromisoformat(run_meta["started"])
        command = run_meta["command"]
        elapsed = run_meta["elapsed"] + (0 if args.report_only else elapsed)
    if not args.report_only:
        write(
            meta,
            json.dumps({"started": started.isoformat(), "elapsed": elapsed, "command": command}),
        )
    report([results[n] for n in names if n in results], args, started, elapsed, command)
    log(f"{len(results)} architectures in {elapsed / 60:.1f} min; report: {args.report}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reference-one"]:
        reference_one(*sys.argv[2:4])
    elif sys.argv[1:2] == ["--check-one"]:
        check_one(*sys.argv[2:4])
    else:
        main()
