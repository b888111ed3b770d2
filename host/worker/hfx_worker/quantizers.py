"""transformers' quantizers, imported without the quantization libraries a
model does not use.

Importing any transformers model class imports `transformers.quantizers`,
and with it every installed quantization library that a quantizer module
imports at its top: torchao (`quantizer_torchao`), which pulls in
inductor's decompositions. That is 0.26 s of a 125M Llama's build step on
this machine (medians of 5 alternating runs, 1.45 -> 1.18 s for the
transformers imports), paid by every export although only a checkpoint
quantized by torchao needs it. So the first model a worker builds imports
`transformers.quantizers` with those libraries hidden (`sys.modules[name] =
None`, which `importlib.util.find_spec` and `import` read as "not
installed"), unless the model's config names their method; right after,
they are importable again (and transformers' cached answer to "is it
installed" is cleared), so a model's own code, ExecuTorch and a later
request import them as usual. A later model that is quantized by one gets
its quantizer module executed again (`importlib.reload`: its classes keep
their module's namespace, which now holds what the library gives). Checked
against transformers 5.24 (`tests/python/check_quantizers.py`); any other
version imports its quantizers as it does.
"""

import importlib
import json
import os
import sys

from .trace_shortcuts import pinned

SUPPORTED = {"transformers": "5.24."}


class Library:
    """A quantization library transformers' quantizers import at their top:
    its top-level package, the quantizer module that imports it, and
    transformers' (cached) check of whether it is installed."""

    def __init__(self, package, module, check):
        self.package, self.module, self.check = package, module, check


# By the `quant_method` a config names.
LIBRARIES = {
    "torchao": Library(
        "torchao", "transformers.quantizers.quantizer_torchao", "is_torchao_available"
    )
}

# The methods whose libraries the quantizer modules were imported without.
_imported_without = set()


def folder_method(path):
    """The quantization method a model folder's `config.json` names, or None
    (none named, or no config to read: transformers says why when it reads it)."""
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    quantization = config.get("quantization_config") if isinstance(config, dict) else None
    method = quantization.get("quant_method") if isinstance(quantization, dict) else None
    return method if isinstance(method, str) else None


def import_for(method):
    """`transformers.quantizers` imported for a model quantized by `method`
    (None: not quantized): without the other methods' libraries, on the
    first call; with `method`'s, reloading its quantizer module if it was
    imported without them."""
    if "transformers.quantizers" not in sys.modules:
        if not pinned(SUPPORTED):
            return
        hidden = {
            other: library
            for other, library in LIBRARIES.items()
            if other != method and library.package not in sys.modules
        }
        for library in hidden.values():
            sys.modules[library.package] = None
        try:
            import transformers.quantizers  # noqa: F401
        finally:
            import_utils = sys.modules.get("transformers.utils.import_utils")
            for library in hidden.values():
                if library.package in sys.modules and sys.modules[library.package] is None:
                    del sys.modules[library.package]
                check = getattr(import_utils, library.check, None)
                if hasattr(check, "cache_clear"):
                    check.cache_clear()
        _imported_without.update(hidden)
    elif method in _imported_without:
        _imported_without.discard(method)
        module = sys.modules.get(LIBRARIES[method].module)
        if module is not None:
            importlib.reload(module)
