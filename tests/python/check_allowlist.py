"""Every entry of the worker's allowlist is pure: a static scan of its code.

    python check_allowlist.py [ALLOWLIST_JSON]

Enumerates the allowlist (`host/worker/hfx_worker/allowlist.json` unless
given), resolves each entry, and scans what it can run: a Python function's
code object and the code objects nested in its constants, the globals it
names (resolved through its `__globals__`), the attributes it names on a
module it names, and, to a fixed depth (`DEPTH`), the Python functions and
classes those resolve to. C functions, builtins, method descriptors and ATen
ops are leaves. An entry fails if anything it reaches is a file, process,
network, import, pickle or Hub capability (`open`, `torch.load`, `importlib`,
`subprocess`, `os`, sockets, `hf_hub_download`, ...), named or resolved.
Over-approximates on purpose: a name that could be one of those fails the
entry, and a reviewer decides.

The scan is itself tested first: it must flag known loaders (a model's
`from_pretrained`, a modeling method calling `torch.load`, an adapter loader)
and an allowlist with such an entry added. Exits non-zero with one line per
failure.
"""

import builtins
import functools
import inspect
import json
import os
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "host", "worker"))
from hfx_worker import sandbox  # noqa: E402

DEPTH = 3
# Modules whose use is a capability an entry may not have.
BANNED_MODULES = (
    "os",
    "posix",
    "nt",
    "subprocess",
    "socket",
    "_socket",
    "ssl",
    "importlib",
    "pickle",
    "_pickle",
    "marshal",
    "shutil",
    "urllib",
    "http",
    "requests",
    "httpx",
    "huggingface_hub",
    "ctypes",
    "multiprocessing",
    "pathlib",
    "io",
    "tempfile",
    "zipfile",
    "tarfile",
    "runpy",
    "code",
    "torch.hub",
    "torch.serialization",
    "torch.utils.cpp_extension",
    "torch.package",
    "torch.multiprocessing",
    "torch.distributed",
    "transformers.utils.hub",
    "transformers.dynamic_module_utils",
    "safetensors",
)
# Names that are such a capability wherever they appear (a global, an attribute, a method).
BANNED_NAMES = {
    "open",
    "__import__",
    "eval",
    "exec",
    "compile",
    "import_module",
    "find_spec",
    "hf_hub_download",
    "snapshot_download",
    "cached_file",
    "cached_files",
    "from_pretrained",
    "save_pretrained",
    "push_to_hub",
    "load_state_dict_from_url",
    "system",
    "popen",
    "Popen",
    "urlopen",
    "create_connection",
    "getaddrinfo",
    "load_library",
    "load_inline",
    "get_class_from_dynamic_module",
    "check_torch_load_is_safe",
    "safe_open",
    "load_file",
    "from_file",
}


def banned_objects():
    import torch

    found = {
        builtins.open,
        builtins.__import__,
        builtins.eval,
        builtins.exec,
        builtins.compile,
        torch.load,
        torch.save,
        torch.from_file,
    }
    for module, name in (
        ("io", "open"),
        ("importlib", "import_module"),
        ("os", "system"),
        ("subprocess", "run"),
        ("subprocess", "Popen"),
        ("socket", "socket"),
        ("pickle", "load"),
        ("pickle", "loads"),
        ("huggingface_hub", "hf_hub_download"),
        ("transformers.utils.hub", "cached_file"),
        ("safetensors.torch", "load_file"),
    ):
        try:
            found.add(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return {id(o): o for o in found}


BANNED = None
# Callees treated as leaves after review (the allowlist's `scan_reviewed`, each with its reason).
REVIEWED = {}


def module_banned(module):
    name = getattr(module, "__name__", "") or ""
    return any(name == banned or name.startswith(banned + ".") for banned in BANNED_MODULES)


def function_of(obj):
    """The Python function behind `obj` (a method's, a wrapper's, a partial's), else None."""
    for _ in range(8):
        if isinstance(obj, (types.MethodType, classmethod, staticmethod)):
            obj = obj.__func__
        elif isinstance(obj, functools.partial):
            obj = obj.func
        elif isinstance(obj, functools._lru_cache_wrapper) or hasattr(obj, "__wrapped__"):
            obj = inspect.unwrap(obj)
            if not isinstance(obj, types.FunctionType):
                return None
        else:
            break
    return obj if isinstance(obj, types.FunctionType) else None


def codes(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from codes(const)


def static_attribute(owner, name):
    """`owner.name` without running a property or a lazy module's import."""
    try:
        return inspect.getattr_static(owner, name)
    except AttributeError:
        return None


def scan(obj, depth=0, seen=None, trail=""):
    """The capabilities `obj` reaches: a list of `trail: what` lines (empty: none found)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    trail = trail or describe(obj)
    if id(obj) in BANNED:
        return [f"{trail}: is {describe(obj)}"]
    if isinstance(obj, types.ModuleType):
        return [f"{trail}: reaches the module {obj.__name__}"] if module_banned(obj) else []
    if isinstance(obj, type):
        found = []
        for name in ("__init__", "__new__", "__call__", "forward", "__post_init__"):
            method = static_attribute(obj, name)
            function = function_of(method)
            if function is not None and depth < DEPTH:
                found += scan(function, depth + 1, seen, f"{trail}.{name}")
        return found
    function = function_of(obj)
    if function is None:
        return []  # a C function, builtin, method descriptor, operator overload or data: a leaf
    if depth > 0 and f"{function.__module__}.{function.__qualname__}" in REVIEWED:
        return []  # a callee the allowlist's `scan_reviewed` says why it may reach what it does
    found = []
    namespace = function.__globals__
    for code in codes(function.__code__):
        names = set(code.co_names)
        for name in sorted(names & BANNED_NAMES):
            found.append(f"{trail}: names `{name}`")
        for name in sorted(names):
            target = namespace.get(
                name,
                getattr(builtins, name, None)
                if name in namespace.get("__builtins__", vars(builtins))
                else None,
            )
            if target is None:
                continue
            if id(target) in BANNED:
                found.append(f"{trail}: uses {describe(target)} as `{name}`")
                continue
            if isinstance(target, types.ModuleType):
                if module_banned(target):
                    found.append(f"{trail}: uses the module {target.__name__} as `{name}`")
                    continue
                # `torch.load`, `torch.hub`: the attributes it names on the module.
                for attribute in sorted(names):
                    value = static_attribute(target, attribute)
                    if value is None:
                        continue
                    if id(value) in BANNED or (
                        isinstance(value, types.ModuleType) and module_banned(value)
                    ):
                        found.append(f"{trail}: reaches {target.__name__}.{attribute}")
                    elif depth < DEPTH and (
                        function_of(value) is not None or isinstance(value, type)
                    ):
                        found += scan(
                            value, depth + 1, seen, f"{trail} → {target.__name__}.{attribute}"
                        )
            elif depth < DEPTH and (function_of(target) is not None or isinstance(target, type)):
                found += scan(target, depth + 1, seen, f"{trail} → {name}")
    return found


def describe(obj):
    module = getattr(obj, "__module__", None) or type(obj).__module__
    name = (
        getattr(obj, "__qualname__", None)
        or getattr(obj, "__name__", None)
        or type(obj).__qualname__
    )
    return f"{module}.{name}"


def entries(path):
    """(section, canonical path, object) for every entry of the allowlist at `path`; imports each module."""
    import importlib

    sections = sandbox.load_allowlist(path)
    for section in ("call", "layers", "targets"):
        for canonical, module_name in sorted(sections[section].items()):
            module = importlib.import_module(module_name)
            obj = module
            for index, name in enumerate(canonical[len(module_name) + 1 :].split(".")):
                obj = vars(obj).get(name) if index == 0 else getattr(obj, name, None)
                if obj is None:
                    break
            yield section, canonical, obj, sections["private"]


def check(path):
    """One line per problem of the allowlist at `path`."""
    failures = []
    count = 0
    for section, canonical, obj, private in entries(path):
        count += 1
        if obj is None:
            failures.append(f"{section} entry {canonical}: not found")
            continue
        problem = sandbox.entry_problem(canonical, obj, private)
        if problem is not None:
            failures.append(f"{section} entry {canonical}: {problem}")
        failures += [f"{section} entry {canonical}: {line}" for line in scan(obj)]
    return failures, count


def self_test():
    """The scan must see known loaders, also as an allowlist entry."""
    import transformers
    from transformers.models.qwen2_5_omni import modeling_qwen2_5_omni
    from transformers.models.rag import modeling_rag
    from transformers.models.wav2vec2 import modeling_wav2vec2

    failures = []
    loaders = {
        "PreTrainedModel.from_pretrained": transformers.modeling_utils.PreTrainedModel.from_pretrained,
        "a modeling method calling torch.load": modeling_qwen2_5_omni.Qwen2_5OmniForConditionalGeneration.load_speakers,
        "an adapter loader": modeling_wav2vec2.Wav2Vec2PreTrainedModel.load_adapter,
        "a classmethod loading configs with trust_remote_code": modeling_rag.RagPreTrainedModel.from_pretrained_question_encoder_generator.__func__,
        "torch.hub.load": __import__("torch").hub.load,
        "a function using os": sandbox.load_allowlist,
    }
    for what, obj in loaders.items():
        found = scan(obj)
        if not found:
            failures.append(f"self-test: the scan does not flag {what}")
        else:
            print(f"flagged ({what}): {found[0]}")
    # A bad entry added to a copy of the allowlist fails the check.
    with open(sandbox.ALLOWLIST, encoding="utf-8") as file:
        data = json.load(file)
    for module, name in (
        ("transformers.modeling_utils", "PreTrainedModel.from_pretrained"),
        (
            "transformers.models.qwen2_5_omni.modeling_qwen2_5_omni",
            "Qwen2_5OmniForConditionalGeneration.load_speakers",
        ),
        ("torch", "load"),
    ):
        bad = json.loads(json.dumps(data))
        bad["call"].setdefault(module, []).append(name)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
            json.dump(bad, file)
        try:
            found, _ = check(file.name)
        finally:
            os.unlink(file.name)
        if not any(f"{module}.{name}" in line for line in found):
            failures.append(f"self-test: an allowlist with {module}.{name} passes the check")
    return failures


def main():
    global BANNED, REVIEWED
    BANNED = banned_objects()
    with open(sys.argv[1] if len(sys.argv) > 1 else sandbox.ALLOWLIST, encoding="utf-8") as file:
        REVIEWED = json.load(file)["scan_reviewed"]
    failures = self_test()
    found, count = check(sys.argv[1] if len(sys.argv) > 1 else sandbox.ALLOWLIST)
    failures += found
    if failures:
        print("\n".join(failures), file=sys.stderr)
        raise SystemExit(1)
    print(
        f"{count} allowlist entries scanned to depth {DEPTH}: none reaches files, processes, the network, imports, "
        "pickles or the Hub"
    )


if __name__ == "__main__":
    main()
