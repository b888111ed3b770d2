"""`--verify` of a sliding-window cache layer: eager keeps the last
`sliding_window - 1` positions, the artifact every one (the layer traced as a
full one, the mask applying the window), and the comparison reads the
artifact's last positions, and only for such a layer's keys and values. A
reference file whose counts are not one count (or none) per output is refused.

    python check_sliding_verify.py

Exits non-zero with one line per failure.
"""

import os
import sys

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from hfx_worker.pytree import flat_outputs, sliding_positions  # noqa: E402
from hfx_worker.verify import compared  # noqa: E402
from tiny_models import TINY_DECODER  # noqa: E402

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)


torch.manual_seed(0)
# Layer 0 slides (window 4), layer 1 attends to everything.
config = transformers.Gemma2Config(
    **TINY_DECODER,
    head_dim=8,
    sliding_window=4,
    layer_types=["sliding_attention", "full_attention"],
)
model = transformers.Gemma2ForCausalLM(config).eval()
with torch.no_grad():
    output = model(input_ids=torch.randint(0, 128, (2, 8)), use_cache=True)
eager = flat_outputs(output)
kept = sliding_positions(output)
sliding = [i for i, k in enumerate(kept) if k is not None]
full = [i for i, t in enumerate(eager) if t.dim() == 4 and kept[i] is None]
check(all(kept[i] == 3 for i in sliding), f"a window of 4 keeps 3 positions: {kept}")
check(len(sliding) == 2 and len(full) == 2, f"one sliding and one full layer: {kept}")
check(all(eager[i].shape[-2] == 3 for i in sliding), "eager's sliding layer keeps 3 positions")


def artifact(corrupt=None):
    """What an export gives: every position of each layer, eager's last ones
    equal; `corrupt`: an output whose last position is off."""
    got = []
    for i, tensor in enumerate(eager):
        value = tensor.numpy().copy()
        if i in sliding:
            earlier = np.random.default_rng(i).standard_normal((2, 2, 5, 8)).astype(np.float32)
            value = np.concatenate([earlier, value], axis=-2)
        if i == corrupt:
            value[..., -1, :] += 1.0
        got.append(value)
    return got


report = compared(artifact(), eager, 1e-3, 1e-3, kept=kept)
check(all(c.ok for c in report), f"equal last positions pass: {report}")
check(
    [c.trailing for c in report] == [3 if i in sliding else None for i in range(len(eager))],
    f"the sliding layer's outputs say 3 positions were compared: {report}",
)
check(all(report[i].shape[-2] == 8 for i in sliding), "the line shows the artifact's own shape")

for i in sliding:
    check(not compared(artifact(i), eager, 1e-3, 1e-3, kept=kept)[i].ok, f"output {i} off: caught")
check(
    not compared(artifact(), eager, 1e-3, 1e-3)[sliding[0]].ok,
    "without the positions eager keeps, a longer cache is a shape mismatch",
)
# A window other than eager's (5 kept of 8 where eager keeps 3) is a mismatch, not a slice.
wrong = [None if k is None else 5 for k in kept]
check(
    not compared(artifact(), eager, 1e-3, 1e-3, kept=wrong)[sliding[0]].ok, "a wrong window fails"
)
# A full layer is never sliced, even when the artifact's is longer.
longer = artifact()
longer[full[0]] = np.concatenate([np.zeros((2, 2, 1, 8), np.float32), longer[full[0]]], axis=-2)
check(not compared(longer, eager, 1e-3, 1e-3, kept=kept)[full[0]].ok, "a full layer is not sliced")

# A reference file is read back only with a count (or none) per output.
import tempfile  # noqa: E402

from hfx_worker.pytree import load_reference, save_reference  # noqa: E402

with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, "m.reference.pt")
    save_reference(path, {}, {}, {}, eager, kept)
    check(load_reference(path)["kept"] == kept, "a reference keeps its counts")
    for bad in (kept[:-1], ["3"] * len(kept), [-1] * len(kept), "3"):
        save_reference(path, {}, {}, {}, eager, bad)
        try:
            load_reference(path)
            failures.append(f"a reference whose `kept` is {bad!r} was read")
        except ValueError as error:
            check("`kept` is not a count" in str(error), f"{bad!r}: {error}")

for failure in failures:
    print(failure)
sys.exit(1 if failures else 0)
