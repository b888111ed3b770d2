"""The reference parity ledger: every workaround the pinned reference exporter
(transformers' `exporters/`) registers, and what answers it in hfx.

    python tools/reference-parity.py            # writes docs/reference-parity.md
    python tools/reference-parity.py --check    # exits 1 on a gap, a stale answer or a stale doc

The registrations are read from the reference's registries at run time
(`_PATCHES`, `_FX_NODE_FIXES`, `_FX_PROGRAM_FIXES`, `_ONNX_TRANSLATION_TABLE`,
`_IR_FIXES`, the ONNX Runtime fusion `_STEPS`, the ExecuTorch edge
configuration's core ATen exception list, `_EXPORT_INPUT_PREPARERS`,
`_OV_CONVERSION_EXTENSIONS`, read from its source), each under a stable key
`BACKEND KIND TARGET` (`onnx patch torch.roll`). An answer is stated once:
a plugin's `plugin.toml` names the keys it answers (`[reference] answers`);
`docs/reference-parity.toml` gives the reason for the keys hfx answers
without a plugin (`[[host]]`) or needs no answer for (`[[not-needed]]`),
each with the test that shows the reason holds, and lists the known gaps,
each group under the open issue that ports it (`[[not-ported]]`). A
registration none of these names fails the check, so a new reference
release's additions cannot go unnoticed.
"""

import argparse
import ast
import functools
import importlib
import inspect
import os
import re
import sys
import tomllib
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = "docs/reference-parity.toml"
DOC = "docs/reference-parity.md"
PLUGIN_FOLDERS = (
    "plugins/dynamo",
    "plugins/onnx",
    "plugins/executorch",
    "plugins/onnx-ort-cpu",
    "plugins/onnx-ort-cuda",
    "plugins/onnx-ort-webgpu",
    "plugins/onnx-ort-dml",
)
EXPORTERS = "transformers.exporters"
MODULES = ("exporter_dynamo", "exporter_onnx", "exporter_executorch", "exporter_openvino")

# What the reference keeps that no registry exposes, and so is not in the
# ledger: stated in the doc so a reader knows where the enumeration stops.
NOT_ENUMERATED = [
    "`exporter_dynamo.register_cache_pytrees_for_model`: cache classes are registered as pytree nodes per model "
    "while it is exported, not at import; hfx's worker does the same registration (`host/worker/hfx_worker/pytree.py`).",
    "`exporter_executorch._BACKEND_PREPARE` (`prepare_for_xnnpack`, `prepare_for_cuda`, `prepare_for_mlx`): "
    "per-delegate model preparation (device, dtype, MoE experts as `batched_mm`), code inside each function, not "
    "entries of a table of workarounds; hfx runs MoE experts as `batched_mm` for every `.pte` target "
    "(`host/src/pipeline/mod.rs`), as `prepare_for_xnnpack` does.",
    "Workarounds written inline in the exporters' `export` methods (no registry names them): the ONNX exporter's "
    "`dynamic_shapes` handling, the ExecuTorch exporter's `_make_contiguous`, the OpenVINO exporter's state "
    "handling.",
    "Rules inside composite ONNX Runtime steps: `optimize_for_ort` is onnxscript's rule set, one step here.",
]


def qualname(fn):
    return getattr(fn, "__qualname__", None) or repr(fn)


def op_name(op):
    """`aten.bincount.default`, `_operator.floordiv`: the name hfx's plugins use."""
    if isinstance(op, torch_op_types()):
        return str(op)
    return f"{op.__module__}.{op.__name__}"


@functools.cache
def torch_op_types():
    import torch

    return (torch._ops.OpOverload, torch._ops.OpOverloadPacket)


def step_name(step, module):
    """An ONNX Runtime fusion step by the name its module gives it: a
    function, a rule set's bound `apply_to_model` by the rule's global name,
    a `partial` with its keywords."""
    for name, value in vars(module).items():
        if value is step:
            return name
    if isinstance(step, functools.partial):
        keywords = ", ".join(f"{k}={v!r}" for k, v in step.keywords.items())
        return f"{step_name(step.func, module)}({keywords})"
    owner = getattr(step, "__self__", None)
    if owner is not None:
        for name, value in vars(module).items():
            if value is owner:
                return name
    return qualname(step)


class Registration:
    """One entry of a reference registry: `source` is the function it registers."""

    def __init__(self, backend, kind, target, source):
        self.backend, self.kind, self.target, self.source = backend, kind, target, source

    @property
    def key(self):
        return f"{self.backend} {self.kind} {self.target}"


def openvino_conversions(module):
    """`(op, converter)` of each `ConversionExtension` the reference's OpenVINO
    exporter registers, read from its source: `_OV_CONVERSION_EXTENSIONS` is
    filled only where openvino imports, and its entries do not expose their op.
    A target written as an expression (`str(torch.sym_float)`) is named by it."""
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if (
            not isinstance(node, ast.Call)
            or getattr(node.func, "id", None) != "ConversionExtension"
        ):
            continue
        target, converter = node.args
        name = str(target.value) if isinstance(target, ast.Constant) else ast.unparse(target)
        yield name, ast.unparse(converter)


def registrations():
    """Every registration of the reference, from its registries."""
    utils = importlib.import_module(f"{EXPORTERS}.utils")
    modules = {name: importlib.import_module(f"{EXPORTERS}.{name}") for name in MODULES}
    found = []
    for backend, patches in utils._PATCHES.items():
        for owner, attribute, factory in patches:
            found.append(Registration(backend, "patch", f"{owner}.{attribute}", qualname(factory)))
    for backend, fixes in utils._FX_NODE_FIXES.items():
        found += [Registration(backend, "fx-node-fix", qualname(f), qualname(f)) for f in fixes]
    for backend, fixes in utils._FX_PROGRAM_FIXES.items():
        found += [Registration(backend, "fx-program-fix", qualname(f), qualname(f)) for f in fixes]
    onnx = modules["exporter_onnx"]
    for op, fn in onnx._ONNX_TRANSLATION_TABLE.items():
        found.append(Registration("onnx", "translation", op_name(op), qualname(fn)))
    found += [Registration("onnx", "ir-fix", qualname(f), qualname(f)) for f in onnx._IR_FIXES]
    fusions = importlib.import_module(f"{EXPORTERS}.onnxruntime_fusions")
    for step, providers in fusions._STEPS:
        name = step_name(step, fusions)
        for provider in providers or ("all",):
            found.append(Registration("onnxruntime-fusion", provider, name, name))
    executorch = modules["exporter_executorch"]
    for backend in ("xnnpack", "cuda"):
        config = executorch._get_edge_compile_config(backend)
        for op in config._core_aten_ops_exception_list:
            found.append(
                Registration(
                    f"executorch.{backend}",
                    "core-aten-exception",
                    op_name(op),
                    "_get_edge_compile_config",
                )
            )
    for markers, fn in utils._EXPORT_INPUT_PREPARERS.items():
        found.append(Registration("all", "input-preparer", "+".join(markers), qualname(fn)))
    for target, converter in openvino_conversions(modules["exporter_openvino"]):
        found.append(Registration("openvino", "conversion-extension", target, converter))
    unique = {}
    for r in found:
        unique.setdefault(r.key, r)
    return list(unique.values())


def serves(backends, key_backend):
    """Whether a plugin of `backends` (its manifest's) runs where a registration
    of `key_backend` applies: a dynamo plugin serves every backend, a fusion
    step is ONNX's, a delegate's plugin answers its backend's registration
    (the reference registers for `executorch`; hfx may need it for XNNPACK only),
    and an onnx plugin answers an openvino registration: hfx's OpenVINO IR is
    the model its ONNX stages write, so those plugins run for it
    (`Backends::serve`, host/src/plugins/manifest.rs)."""
    wanted = "onnx" if key_backend == "onnxruntime-fusion" else key_backend
    if wanted == "all" or "dynamo" in backends:
        return True
    if wanted == "openvino" and "onnx" in backends:
        return True
    return any(
        b == wanted or wanted.startswith(b + ".") or b.startswith(wanted + ".") for b in backends
    )


def plugin_answers(problems):
    """`{key: [plugin folder, ...]}` from each plugin's `[reference] answers`."""
    answers = defaultdict(list)
    for folder in PLUGIN_FOLDERS:
        base = os.path.join(ROOT, folder)
        for name in sorted(os.listdir(base)):
            path = os.path.join(base, name, "plugin.toml")
            if not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                manifest = tomllib.load(f)
            backends = manifest["plugin"]["backend"]
            backends = [backends] if isinstance(backends, str) else backends
            for key in manifest.get("reference", {}).get("answers", []):
                if not serves(backends, key.split(" ")[0]):
                    problems.append(
                        f"{folder}/{name} answers `{key}` but serves {', '.join(backends)}"
                    )
                answers[key].append(f"{folder}/{name}")
    return answers


def test_exists(test):
    """`tests/it/x.rs::name` (a Rust test), `tests/python/x.py::name` (a Python
    function), or a file (a plugin's self-test case)."""
    path, _, name = test.partition("::")
    full = os.path.join(ROOT, path)
    if not os.path.isfile(full):
        return False
    if not name:
        return True
    with open(full, encoding="utf-8") as f:
        text = f.read()
    keyword = "fn" if path.endswith(".rs") else "def"
    return re.search(rf"\b{keyword} {re.escape(name)}\b", text) is not None


def core_aten_exceptions_differ(found):
    """The XNNPACK lowering's kept ops (`lower.CORE_ATEN_EXCEPTIONS`, the
    worker's answer to the reference's exception list) against the reference's."""
    sys.path.insert(0, os.path.join(ROOT, "host/worker"))
    from hfx_worker.lower import CORE_ATEN_EXCEPTIONS

    reference = {
        r.target for r in found if r.key.startswith("executorch.xnnpack core-aten-exception ")
    }
    kept = {f"aten.{op}" for op in CORE_ATEN_EXCEPTIONS}
    if kept == reference:
        return []
    return [
        "host/worker/hfx_worker/lower.py: CORE_ATEN_EXCEPTIONS differs from the reference's "
        f"(missing: {sorted(reference - kept)}, extra: {sorted(kept - reference)})"
    ]


def ledger():
    """`(rows, problems)`: one row per registration, and what the check refuses."""
    with open(os.path.join(ROOT, DATA), "rb") as f:
        data = tomllib.load(f)
    problems = []
    found = registrations()
    keys = {r.key for r in found}
    by_plugin = plugin_answers(problems)
    reasons = {}
    for section, label in (("host", "host"), ("not-needed", "not needed")):
        for entry in data.get(section, []):
            for field in ("reason", "test", "keys") + (("module",) if section == "host" else ()):
                if field not in entry:
                    problems.append(f"{DATA}: a [[{section}]] entry has no `{field}`")
            for test in (
                [entry.get("test", "")]
                if isinstance(entry.get("test"), str)
                else entry.get("test", [])
            ):
                if not test_exists(test):
                    problems.append(f"{DATA}: test `{test}` does not exist")
            for key in entry.get("keys", []):
                if key in reasons:
                    problems.append(f"{DATA}: `{key}` is answered twice")
                reasons[key] = (label, entry)
    not_ported = {}
    for group in data.get("not-ported", []):
        issue = group.get("issue")
        if not isinstance(issue, int):
            problems.append(f"{DATA}: a [[not-ported]] group names no issue (`issue = N`)")
        for entry in group.get("keys", []):
            if entry["key"] in not_ported:
                problems.append(f"{DATA}: `{entry['key']}` is listed as not ported twice")
            not_ported[entry["key"]] = (issue, entry.get("note", group.get("note", "")))
    named = [(key, f"plugin {p}") for key, plugins in by_plugin.items() for p in plugins]
    named += [(key, f"{DATA} [[{label}]]") for key, (label, _) in reasons.items()]
    named += [(key, f"{DATA} [not-ported]") for key in not_ported]
    for key, where in named:
        if key not in keys:
            problems.append(f"{where} names `{key}`, which the reference does not register")
    problems += core_aten_exceptions_differ(found)
    rows = []
    for r in found:
        plugins = by_plugin.get(r.key, [])
        reason = reasons.get(r.key)
        if reason and r.key in not_ported:
            problems.append(f"`{r.key}` has a reason in {DATA} and is listed as not ported")
        if plugins and r.key in not_ported:
            problems.append(
                f"`{r.key}` is answered by {', '.join(plugins)} and listed as not ported"
            )
        if plugins:
            status, answer = "plugin", ", ".join(f"`{p}`" for p in plugins)
            if reason:
                problems.append(f"`{r.key}` is answered by {', '.join(plugins)} and by {DATA}")
        elif reason:
            label, entry = reason
            status = label
            tests = entry.get("test", [])
            tests = [tests] if isinstance(tests, str) else tests
            where = f"`{entry['module']}`: " if label == "host" else ""
            answer = (
                f"{where}{entry.get('reason', '')} (test: {', '.join(f'`{t}`' for t in tests)})"
            )
        elif r.key in not_ported:
            issue, note = not_ported[r.key]
            status, answer = "NOT ANSWERED", f"not ported (#{issue}){': ' + note if note else ''}"
        else:
            status, answer = "NOT ANSWERED", "**no answer and not a known gap**"
            problems.append(
                f"`{r.key}` ({r.source}): no plugin's [reference] answers it and {DATA} gives no reason "
                f"(answer it, or list it under a [[not-ported]] group with the issue that ports it)"
            )
        rows.append((r, status, answer))
    return rows, problems


def render(rows):
    import transformers

    counts = defaultdict(int)
    for _, status, _ in rows:
        counts[status] += 1
    out = [
        "# Reference parity",
        "",
        "Every workaround the reference exporter (transformers "
        f"{transformers.__version__}, `transformers/exporters/`) registers, and what answers it in hfx. "
        "Generated by `python tools/reference-parity.py` from the reference's registries, read at run time, "
        f"each plugin's `[reference] answers` in its `plugin.toml`, and `{DATA}`; never edited by hand. "
        "`python tools/reference-parity.py --check` (run by the tests: `parity::`) fails on a registration with "
        "no answer that is not a known gap, on an answer naming a registration that does not exist, on a reason "
        "whose test does not exist, and on this file out of date.",
        "",
        "A key is `BACKEND KIND TARGET`: the backend the reference registers it for (`executorch.xnnpack` is a "
        "delegate; `all` serves every backend), the registry, and the patched path, the fix's function, the "
        "translated op, the fusion step (its providers as the kind) or the input preparer's markers.",
        "",
        "## Summary",
        "",
        f"- registrations: {len(rows)}",
        f"- answered by a plugin: {counts['plugin']}",
        f"- answered by the host (no plugin): {counts['host']}",
        f"- not needed (a tested reason): {counts['not needed']}",
        f"- NOT ANSWERED (known gaps, each with the open issue that ports it): {counts['NOT ANSWERED']}",
        "",
    ]
    per_backend = defaultdict(lambda: defaultdict(int))
    for r, status, _ in rows:
        per_backend[r.backend][status] += 1
    statuses = ("plugin", "host", "not needed", "NOT ANSWERED")
    out += ["| backend | " + " | ".join(statuses) + " |", "| --- |" + " --- |" * len(statuses)]
    for backend in sorted(per_backend):
        out.append(
            f"| {backend} | " + " | ".join(str(per_backend[backend][s]) for s in statuses) + " |"
        )
    out.append("")
    groups = defaultdict(list)
    for row in rows:
        groups[(row[0].backend, row[0].kind)].append(row)
    for backend, kind in sorted(groups):
        group = groups[(backend, kind)]
        out += [
            f"## {backend} {kind}",
            "",
            "| target | reference | answer |",
            "| --- | --- | --- |",
        ]
        for r, status, answer in sorted(group, key=lambda row: row[0].target):
            mark = "**NOT ANSWERED**" if status == "NOT ANSWERED" else status
            answer = answer.replace("|", "\\|")
            out.append(f"| `{r.target}` | `{r.source}` | {mark}: {answer} |")
        out.append("")
    out += ["## Not enumerated", "", "What the reference does outside its registries:", ""]
    out += [f"- {line}" for line in NOT_ENUMERATED]
    return "\n".join(out).rstrip() + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help=f"fail on a gap or a stale {DOC}, write nothing"
    )
    args = parser.parse_args()
    rows, problems = ledger()
    text = render(rows)
    doc = os.path.join(ROOT, DOC)
    if args.check:
        current = open(doc, encoding="utf-8").read() if os.path.exists(doc) else ""
        if current != text:
            problems.append(f"{DOC} is out of date: run `python tools/reference-parity.py`")
        for problem in problems:
            print(problem, file=sys.stderr)
        sys.exit(1 if problems else 0)
    with open(doc, "w", encoding="utf-8") as f:
        f.write(text)
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{DOC}: {len(rows)} registrations", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
