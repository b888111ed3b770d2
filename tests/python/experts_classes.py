"""The experts classes plugins/onnx/patch-tiled-experts targets are exactly
transformers' whose experts OpenVINO fuses tiled.

    python experts_classes.py PLUGIN_SOURCE

Imports every modeling module of the installed transformers that uses
`@use_experts_implementation`, finds the classes it decorated (their
`forward` is the decorator's dispatch), and keeps those whose form is the
one OpenVINO's CPU plugin turns into `GatherMatmul`s when traced tiled: the
default gating (`_apply_gate` is `_default_apply_gate`) of concatenated gate
and up projections, stored `(experts, out, in)`, without biases or a norm
after each expert. Exits non-zero naming the classes that differ from the
targets `PLUGIN_SOURCE` (the plugin's `src/lib.rs`) lists.
"""

import importlib
import pathlib
import re
import sys

# The decorator's flags the fused form has.
FUSED_FORM = {
    "has_gate": True,
    "is_concatenated": True,
    "is_transposed": False,
    "has_bias": False,
    "has_post_expert_norm": False,
}


def decorated(cls):
    """Whether `cls` is a class `use_experts_implementation` decorated (its own `forward` is the dispatch)."""
    forward = vars(cls).get("forward")
    code = getattr(forward, "__code__", None)
    return code is not None and code.co_filename.endswith("integrations/moe.py")


def flags(cls):
    """The decorator's flags, as its `__init__` wrapper holds them."""
    init = cls.__init__
    cells = dict(zip(init.__code__.co_freevars, init.__closure__ or (), strict=True))
    return {name: cells[name].cell_contents for name in FUSED_FORM if name in cells}


def fused_classes():
    import transformers
    from transformers.integrations.moe import _default_apply_gate

    found = set()
    models = pathlib.Path(transformers.__file__).parent / "models"
    for path in sorted(models.glob("*/modeling_*.py")):
        if "@use_experts_implementation" not in path.read_text(encoding="utf-8"):
            continue
        name = f"transformers.models.{path.parent.name}.{path.stem}"
        module = importlib.import_module(name)
        for class_name, cls in vars(module).items():
            if not (isinstance(cls, type) and cls.__module__ == name and decorated(cls)):
                continue
            if cls._apply_gate is _default_apply_gate and flags(cls) == FUSED_FORM:
                found.add(f"{name}.{class_name}.forward")
    return found


def main():
    source = pathlib.Path(sys.argv[1]).read_text(encoding="utf-8")
    targets = set(re.findall(r'"(transformers\.models\.[\w.]+\.forward)"', source))
    expected = fused_classes()
    missing, extra = sorted(expected - targets), sorted(targets - expected)
    if missing or extra:
        sys.exit(f"patch-tiled-experts targets: missing {missing}; not of the fused form {extra}")
    print(f"{len(targets)} experts classes, each of the form OpenVINO fuses tiled")


if __name__ == "__main__":
    main()
