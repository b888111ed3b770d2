"""What the worker's import hooks share: a module found as Python finds it,
with a step of the worker's right after its body runs."""

import importlib.machinery


def found_then(name, path, after):
    """The spec the path finder finds for `name` (None: not found), whose
    loader calls `after(module)` right after the module's body has run (the
    module is in `sys.modules` then, complete)."""
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
        return spec
    execute = spec.loader.exec_module

    def exec_module(module):
        execute(module)
        after(module)

    spec.loader.exec_module = exec_module
    return spec
