"""transformers' import structures, computed once per installed transformers
rather than twice per worker.

`import transformers` builds its lazy module from an *import structure*:
which object each of its ~1,700 model files exports, and which backends it
needs (`transformers.utils.import_utils.define_import_structure`). It is
computed by reading every one of those files and scanning its lines for
`__all__` and `@requires`, and 5.24 computes it twice per process: for the
top-level package and again for `transformers.models`, whose
`create_import_structure_from_path` results no longer sit in that
function's 128-entry cache by then (a tree of ~560 folders). That is
0.55-0.65 s of every worker's start, for a value that depends only on the
files.

`ImportStructureMemo` keeps each structure in the host's cache folder
(`memo_dir`, which the host checked as it checks the worker package's), keyed
by transformers' version, Python's, the folder and the prefix, and valid
while every file below the folder has the size and modification time it had
when the structure was computed (the rule of Python's own bytecode cache).
A structure that is missing, stale or unreadable is computed by
transformers, as without the memo, and stored. Where no folder is given,
the second computation still reads nothing: `create_import_structure_from_path`
keeps every folder's result for the process.

Reaches into transformers internals, so it applies only to the version it
was checked against (`tests/python/check_import_memo.py`: the structures it
gives are the ones transformers computes).
"""

import functools
import hashlib
import importlib.abc
import importlib.metadata
import json
import os
import sys
import tempfile

from .imports import found_then
from .trace_shortcuts import pinned

SUPPORTED = {"transformers": "5.24."}
MODULE = "transformers.utils.import_utils"
FORMAT = 1


class ImportStructureMemo(importlib.abc.MetaPathFinder):
    """Installed first on `sys.meta_path`: when transformers' `import_utils`
    is loaded, its `define_import_structure` is replaced (before any module
    binds it) by one that reads and stores structures in `memo_dir` (set
    once the host says where, in `hello`; None: the process-wide cache only).
    `served` and `computed` count the calls each way."""

    def __init__(self, memo_dir=None):
        self.memo_dir = memo_dir
        self.served = self.computed = 0
        self._fingerprints = {}

    def find_spec(self, name, path=None, target=None):
        if name != MODULE or not pinned(SUPPORTED):
            return None
        return found_then(name, path, self.install)

    def install(self, module):
        """Replaces `module`'s `create_import_structure_from_path` by one that
        keeps every folder's result, and its `define_import_structure` by the
        memoized one. The module looks both up by name when it calls them
        (the first recursively), so the replacements are what it runs."""
        upstream_create = module.create_import_structure_from_path
        module.create_import_structure_from_path = functools.cache(
            getattr(upstream_create, "__wrapped__", upstream_create)
        )
        upstream = module.define_import_structure

        # Cached as transformers caches its own (`lru_cache`): a second call
        # with the same arguments gets the same object.
        @functools.lru_cache(maxsize=128)
        @functools.wraps(upstream)
        def define_import_structure(module_path, prefix=None):
            return self.define(upstream, module_path, prefix)

        define_import_structure.upstream = upstream
        module.define_import_structure = define_import_structure

    def define(self, upstream, module_path, prefix):
        folder = os.path.abspath(os.fspath(module_path))
        if os.path.isfile(folder):
            folder = os.path.dirname(folder)
        fingerprint = self.fingerprint(folder) if self.memo_dir is not None else None
        if fingerprint is None:
            self.computed += 1
            return upstream(module_path, prefix)
        path = os.path.join(self.memo_dir, f"import-structure-{memo_key(folder, prefix)}.json")
        found = read(path, fingerprint)
        if found is not None:
            self.served += 1
            return found
        structure = upstream(module_path, prefix)
        self.computed += 1
        encoded = encode(structure)
        if encoded is not None:
            write(path, {"format": FORMAT, "fingerprint": fingerprint, "structure": encoded})
        return structure

    def fingerprint(self, folder):
        """Every entry below `folder` (as transformers walks it, `__pycache__`
        left out): names, and each file's size and modification time. None
        for a folder that cannot be walked (transformers then says what is
        wrong with it)."""
        if folder not in self._fingerprints:
            digest = hashlib.sha256()
            try:
                walk(folder, digest)
            except OSError:
                return None
            self._fingerprints[folder] = digest.hexdigest()
        return self._fingerprints[folder]


@functools.cache
def transformers_version():
    return importlib.metadata.version("transformers")


def memo_key(folder, prefix):
    key = json.dumps([transformers_version(), sys.version, folder, prefix])
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def walk(folder, digest):
    with os.scandir(folder) as entries:
        ordered = sorted(entries, key=lambda e: e.name)
    for entry in ordered:
        if entry.name == "__pycache__":
            continue
        if entry.is_dir():
            digest.update(b"d" + os.fsencode(entry.name) + b"\0")
            walk(entry.path, digest)
            digest.update(b"u")
        else:
            stat = entry.stat()
            digest.update(
                b"f" + os.fsencode(entry.name) + f"\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode()
            )


def encode(structure):
    """{frozenset(backends): {module: {object, ...}}} as JSON lists, in the
    structure's own order; None for anything else (then it is not stored)."""
    encoded = []
    for backends, modules in structure.items():
        if not isinstance(backends, frozenset) or not isinstance(modules, dict):
            return None
        entries = []
        for module, objects in modules.items():
            if (
                not isinstance(module, str)
                or not isinstance(objects, set)
                or not all(isinstance(o, str) for o in objects)
            ):
                return None
            entries.append([module, sorted(objects)])
        if not all(isinstance(b, str) for b in backends):
            return None
        encoded.append([sorted(backends), entries])
    return encoded


def decode(encoded):
    return {
        frozenset(backends): {module: set(objects) for module, objects in entries}
        for backends, entries in encoded
    }


def read(path, fingerprint):
    try:
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
        if stored.get("format") != FORMAT or stored.get("fingerprint") != fingerprint:
            return None
        return decode(stored["structure"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # missing or damaged: computed again


def write(path, stored):
    """Written to a temp file and renamed: a reader sees a whole file or none."""
    try:
        fd, temp = tempfile.mkstemp(prefix=".import-structure-", dir=os.path.dirname(path))
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(stored, f)
        os.replace(temp, path)
    except OSError:
        try:
            os.unlink(temp)
        except OSError:
            pass
