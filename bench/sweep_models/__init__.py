"""The architectures of the sweep (`bench/sweep.py`): tiny random configs built
with transformers' `*Config` classes (no hub, no internet), the model class,
and realistic inputs at a given (batch, sequence) size.

Each architecture is also a module-level function returning `(model, inputs)`
at size A, with `torch.manual_seed(0)` before the model is built, for hfx's
`--model-fn python:sweep_models:<name>` and for the reference exporter: both
build identical weights.

    ARCHS["bloom"].build()                   # (model, inputs at size A)
    ARCHS["bloom"].inputs(model, 3, 13)      # inputs at another size

One module per family (`FAMILIES`), each registering its architectures in `ARCHS` with
`@arch`; the order they are imported in is the report's order.
"""

import importlib

from .registry import ARCHS, SEED, SIZE_A, SIZE_B, Arch  # noqa: F401 (the package's interface)

# Each family registers its architectures when imported, in this order: the report's.
FAMILIES = (
    "decoders",
    "sparse_and_state_space",
    "encoders",
    "encoder_decoders",
    "audio",
    "vision",
    "video",
    "multimodal",
)
for _family in FAMILIES:
    importlib.import_module(f".{_family}", __name__)

# ── `--model-fn python:sweep_models:<name>` ──


def model_fn(name):
    def build():
        return ARCHS[name].build()

    build.__name__ = build.__qualname__ = f"{name}_model"
    build.__doc__ = (
        f"(model, inputs at size A) for {name} (`--model-fn python:sweep_models:{name}_model`)."
    )
    return build


for _name in ARCHS:
    globals()[f"{_name}_model"] = model_fn(_name)
