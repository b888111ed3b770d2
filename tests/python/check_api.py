"""`hfx.export` on a live model, checked from the caller's side.

    python check_api.py live BACKEND WORK [PLUGINS...]
    python check_api.py generation BACKEND WORK [PLUGINS...]
    python check_api.py interrupt WORK [PLUGINS...]

`live`: a tiny Llama saved to a folder and loaded back, then changed in
memory (its weights scaled, so a model re-created from the folder differs),
is exported with `verify=True`; the artifact, loaded with `hfx.load` (the
reference's `ExportedModel`), matches the model in memory and not its
checkpoint; the model's parameters are the same objects, unchanged, in
train mode as they were.

`generation`: `hfx.export_for_generation` of a tiny Llama whose output
head was changed in memory, verified; the folder generates the live
model's greedy tokens, not its checkpoint's.

`interrupt`: a SIGINT arrives while the trace runs with the patch plugins'
shims in place; `hfx.export` raises KeyboardInterrupt, every patched target
is the object it was before, the model's settings are as they were, and hfx
left no scratch folder.

`PLUGINS` are plugin folders, used alone (a checkout's hfx has no default
sets); none: an installed hfx's default sets.
"""

import importlib
import os
import signal
import sys

import hfx
import torch
import transformers
from generation_loops import generate_dynamic
from tiny_models import tiny_llama

# What the ONNX patch plugins swap for shims while the trace runs.
PATCHED = [
    "torch.nn.functional.scaled_dot_product_attention",
    "transformers.masking_utils._vmap_expansion_sdpa",
]


def resolve(path):
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def saved_tiny_llama(folder):
    """A tiny random Llama saved to `folder` and loaded back from it."""
    tiny_llama(seed=0).save_pretrained(folder)
    return transformers.LlamaForCausalLM.from_pretrained(folder, attn_implementation="sdpa")


def inputs_of(batch, sequence, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.randint(0, 128, (batch, sequence), generator=generator),
        "attention_mask": torch.ones(batch, sequence, dtype=torch.long),
    }


def live(backend, work, plugins):
    checkpoint = os.path.join(work, "checkpoint")
    model = saved_tiny_llama(checkpoint)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1.5)  # in memory only: the checkpoint keeps the old weights
    model.train()  # the caller's mode, which the export must leave as it was
    before = {name: (p, p.detach().clone()) for name, p in model.named_parameters()}
    output = os.path.join(work, backend)
    result = hfx.export(
        model,
        inputs_of(2, 8),
        backend=backend,
        output=output,
        verify=True,
        plugins=plugins,
        no_default_plugins=bool(plugins),  # none given: the installed default sets
    )
    assert result.verified, f"not verified: {result.summary.get('components')}"
    assert result.artifacts and all(p.exists() for p in result.artifacts), result.artifacts
    assert "<html" in result._repr_html_().lower()
    assert model.training and all(m.training for m in model.modules()), "train mode not restored"
    for name, parameter in model.named_parameters():
        same, values = before[name]
        assert parameter is same, f"{name}: replaced"
        assert torch.equal(parameter, values), f"{name}: changed"
        # Read by hfx from the caller's memory, not from a copy written first.
        assert parameter.untyped_storage().is_shared(), f"{name}: not in shared memory"

    exported = hfx.load(output, trust_remote_code=True)
    reloaded = transformers.LlamaForCausalLM.from_pretrained(checkpoint).eval()
    model.eval()
    for batch, sequence in [(2, 8), (1, 13)]:  # the traced size and another (dynamic axes)
        inputs = inputs_of(batch, sequence, seed=batch + sequence)
        got = exported(**inputs).logits
        with torch.no_grad():
            live_logits = model(**inputs).logits
            checkpoint_logits = reloaded(**inputs).logits
        assert torch.allclose(got, live_logits, atol=1e-4, rtol=1e-4), (
            f"{backend} {batch}x{sequence}: the artifact differs from the model in memory "
            f"(max {float((got - live_logits).abs().max())})"
        )
        assert not torch.allclose(got, checkpoint_logits, atol=1e-2, rtol=1e-2), (
            f"{backend}: the artifact matches the checkpoint, not the model in memory"
        )
    print(f"ok: {backend} {[str(p) for p in result.artifacts]}")


def generation(backend, work, plugins):
    """`hfx.export_for_generation` of a Llama changed in memory, verified
    (greedy tokens through the components equal to the model's `generate`);
    the folder, loaded with `hfx.load`, generates the live model's tokens,
    not its checkpoint's."""
    checkpoint = os.path.join(work, "checkpoint")
    model = saved_tiny_llama(checkpoint)
    with torch.no_grad():
        model.lm_head.weight.mul_(-2.0)  # in memory only: the checkpoint's tokens differ
    model.eval()
    output = os.path.join(work, f"{backend}-generation")
    result = hfx.export_for_generation(
        model,
        backend=backend,
        output=output,
        verify=True,
        plugins=plugins,
        no_default_plugins=bool(plugins),
    )
    assert result.verified, f"not verified: {result.summary.get('generation')}"
    names = sorted(p.name for p in result.artifacts)
    assert len(names) == 2 and any("decode" in n for n in names), names

    exported = hfx.load(output, trust_remote_code=True)
    reloaded = transformers.LlamaForCausalLM.from_pretrained(checkpoint).eval()
    prompt = inputs_of(1, 5, seed=7)
    steps = 8
    arguments = dict(max_new_tokens=steps, min_new_tokens=steps, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        live_tokens = model.generate(**prompt, **arguments)[:, 5:]
        checkpoint_tokens = reloaded.generate(**prompt, **arguments)[:, 5:]
    got = generate_dynamic(
        exported.runners["prefill"],
        exported.runners["decode"],
        model.config,
        prompt["input_ids"],
        prompt["attention_mask"],
        steps,
    )
    assert torch.equal(got, live_tokens), f"{backend}: {got.tolist()} != {live_tokens.tolist()}"
    assert not torch.equal(got, checkpoint_tokens), f"{backend}: the checkpoint's tokens"
    print(f"ok: {backend} generation {names}")


# The targets found patched when the SIGINT was sent (kept off the module,
# whose attributes torch.export watches).
PATCHED_SEEN = []


class InterruptedDuringTrace(torch.nn.Module):
    """A model whose forward sends this process a SIGINT once the patch
    plugins' shims are in place (torch.export's trace, never eager)."""

    def __init__(self, inner, originals):
        super().__init__()
        self.inner = inner
        self.originals = originals

    def forward(self, input_ids, attention_mask):
        now = [path for path, original in self.originals.items() if resolve(path) is not original]
        if now:
            PATCHED_SEEN.extend(now)
            os.kill(os.getpid(), signal.SIGINT)
        return self.inner(input_ids=input_ids, attention_mask=attention_mask).logits


def interrupt(work, plugins):
    # Python's own Ctrl-C handler, as an interactive session has it: a process
    # started with SIGINT ignored (a background job of a shell) inherits that.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    importlib.import_module("transformers.masking_utils")
    originals = {path: resolve(path) for path in PATCHED}
    inner = saved_tiny_llama(os.path.join(work, "checkpoint"))
    model = InterruptedDuringTrace(inner, originals)
    model.train()
    attention = inner.config._attn_implementation
    parameters = [(p, p.detach().clone()) for p in model.parameters()]
    output = os.path.join(work, "interrupted")
    try:
        hfx.export(
            model,
            inputs_of(2, 8),
            backend="onnx",
            output=output,
            plugins=plugins,
            no_default_plugins=True,
        )
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("hfx.export returned: the SIGINT did not interrupt it")
    assert PATCHED_SEEN, "the trace never ran with a patch in place: nothing was tested"
    for path, original in originals.items():
        assert resolve(path) is original, f"{path}: still patched after the interrupt"
    assert model.training and inner.training, "train mode not restored"
    assert inner.config._attn_implementation == attention, "attention implementation changed"
    for parameter, values in parameters:
        assert torch.equal(parameter, values), "a parameter changed"
    assert not os.path.exists(output), f"{output} written by an interrupted export"
    left = [name for name in os.listdir(work) if name.startswith(".hfx")]
    assert not left, f"scratch left behind: {left}"
    print(f"ok: interrupted with {PATCHED_SEEN} patched; all restored")


def main(argv):
    if argv[0] == "live":
        live(argv[1], argv[2], argv[3:])
    elif argv[0] == "generation":
        generation(argv[1], argv[2], argv[3:])
    elif argv[0] == "interrupt":
        interrupt(argv[1], argv[2:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
