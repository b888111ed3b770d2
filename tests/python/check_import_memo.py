"""The worker's `import_memo.ImportStructureMemo`: transformers' import
structures served from the memo folder are the ones transformers computes,
the lazy modules built from them are the same, and a changed or damaged
memo is computed again.

    python check_import_memo.py            # the checks (runs itself in subprocesses)
    python check_import_memo.py --dump MEMO_DIR|-|upstream   # one import, what it sees, as JSON

Exits non-zero with one line per failure.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
sys.path.insert(0, WORKER)
from hfx_worker.import_memo import ImportStructureMemo  # noqa: E402


def dump(memo_dir):
    """Imports transformers (and a model class) under the memo (`-`: with no
    folder; `upstream`: none at all) and prints what the lazy modules expose
    and how the structures were obtained."""
    memo = ImportStructureMemo(None if memo_dir == "-" else memo_dir)
    if memo_dir != "upstream":
        sys.meta_path.insert(0, memo)
    import transformers
    import transformers.models

    transformers.AutoConfig  # noqa: B018 - resolves through the lazy structure
    model_class = transformers.LlamaForCausalLM
    print(
        json.dumps(
            {
                "served": memo.served,
                "computed": memo.computed,
                "transformers": sorted(dir(transformers)),
                "models": sorted(dir(transformers.models)),
                "class_to_module": sorted(transformers._class_to_module.items()),
                "model_class": f"{model_class.__module__}.{model_class.__name__}",
            }
        )
    )


def run_dump(memo_dir):
    done = subprocess.run(
        [sys.executable, __file__, "--dump", memo_dir], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"the import under the memo failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    failures = []
    with tempfile.TemporaryDirectory() as memo_dir:
        # 1. Fresh processes: transformers alone, the memo without a folder
        # (the process-wide cache only), storing, then served from the folder.
        plain, unfiled, storing, served = (
            run_dump("upstream"),
            run_dump("-"),
            run_dump(memo_dir),
            run_dump(memo_dir),
        )
        if storing["computed"] == 0:
            failures.append("the first import with an empty memo computed nothing")
        if served["computed"] != 0 or served["served"] < 2:
            failures.append(
                f"an import with the memo stored still computed {served['computed']} structure(s), served {served['served']}"
            )
        for name in ("transformers", "models", "class_to_module", "model_class"):
            for label, seen in (
                ("without a folder", unfiled),
                ("storing", storing),
                ("served", served),
            ):
                if seen[name] != plain[name]:
                    failures.append(
                        f"{name}: the lazy module built from the memo ({label}) differs from transformers' own"
                    )

        # 2. The structures themselves, against transformers' function.
        sys.meta_path.insert(0, ImportStructureMemo(memo_dir))
        import transformers
        from transformers.utils import import_utils

        upstream = import_utils.define_import_structure.upstream

        def computed_by_transformers(path, prefix):
            upstream.cache_clear()
            import_utils.create_import_structure_from_path.cache_clear()
            return upstream(path, prefix)

        root = os.path.dirname(transformers.__file__)
        from pathlib import Path

        served = 0
        for path, prefix in (
            (Path(root) / "models", "models"),
            (os.path.join(root, "models", "__init__.py"), None),
            (os.path.join(root, "models", "llama", "__init__.py"), None),
            (os.path.join(root, "models", "bert"), "bert"),
        ):
            # Each call as a new process makes it (no structure or fingerprint kept in memory).
            for attempt in ("first", "second", "after a caller's change"):
                fresh = computed_by_transformers(path, prefix)
                memo = ImportStructureMemo(memo_dir)
                got = memo.define(upstream, path, prefix)
                served += memo.served
                if got != fresh:
                    failures.append(
                        f"{path} ({prefix}), {attempt} call: the memo's structure differs from transformers'"
                    )
                got.setdefault(
                    frozenset({"caller"}), {}
                )  # a caller's change must not reach the memo
        if served < 8:
            failures.append(
                f"the later calls of each structure were not served from the memo ({served} served)"
            )

        # 3. A changed file: computed again; a damaged memo: computed again.
        with tempfile.TemporaryDirectory() as package:
            module = os.path.join(package, "configuration_toy.py")
            with open(module, "w") as f:
                f.write('__all__ = ["ToyConfig"]\n')
            first = ImportStructureMemo(memo_dir).define(upstream, package, None)
            stat = os.stat(module)
            with open(module, "w") as f:
                f.write('__all__ = ["ToyConfig", "OtherConfig"]\n')
            os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))
            upstream.cache_clear()
            import_utils.create_import_structure_from_path.cache_clear()
            fresh_memo = ImportStructureMemo(memo_dir)  # a new process's view (no fingerprint kept)
            second = fresh_memo.define(upstream, package, None)
            if first != {frozenset(): {"configuration_toy": {"ToyConfig"}}}:
                failures.append(f"a toy package's structure is {first}")
            if (
                second != {frozenset(): {"configuration_toy": {"ToyConfig", "OtherConfig"}}}
                or fresh_memo.computed != 1
            ):
                failures.append(f"an edited file was served from the memo: {second}")
            for name in os.listdir(memo_dir):
                with open(os.path.join(memo_dir, name), "w") as f:
                    f.write("{damaged")
            upstream.cache_clear()
            import_utils.create_import_structure_from_path.cache_clear()
            damaged = ImportStructureMemo(memo_dir)
            if damaged.define(upstream, package, None) != second or damaged.computed != 1:
                failures.append("a damaged memo file was not computed again")
        leftovers = [n for n in os.listdir(memo_dir) if n.startswith(".")]
        if leftovers:
            failures.append(f"temp files left in the memo folder: {leftovers}")
    for failure in failures:
        print(failure)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--dump":
        dump(sys.argv[2])
    else:
        started = time.monotonic()
        code = main()
        print(f"checked in {time.monotonic() - started:.1f} s", file=sys.stderr)
        sys.exit(code)
