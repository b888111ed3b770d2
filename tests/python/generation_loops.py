"""The README's generation loops: greedy decoding with the components of an
hfx `--generation` export folder of a decoder-only model, loaded by the
reference's `ExportedModel.from_pretrained`, for a left-padded batch of two
prompts of different lengths; checked against eager `generate` on the same
batch. One loop per cache kind; the same code for every backend (ONNX in ONNX
Runtime, `.pt2` in torch, `.pte` in the ExecuTorch runtime: the reference's
runner of the folder's format).

    python generation_loops.py DIR [DIR...] [--model-dir MODEL_FOLDER]

Several folders are checked in turn, in one process.

The eager model: the model folder's (`--model-dir`), else the one the
folder's config builds with the seed hfx builds random models with.
"""

import sys

import torch
import transformers
from transformers.exporters import ExportedModel

STEPS = 8


# ── README: loading ──
def load(folder):
    """The components of an export folder. A `.pt2` is a pickle, which the
    reference loads only when told the folder is trusted."""
    exported = ExportedModel.from_pretrained(folder, trust_remote_code=True)
    return exported, exported.runners["prefill"], exported.runners["decode"]


# ── README: a growing cache (the default) ──
def generate_dynamic(prefill, decode, config, input_ids, attention_mask, steps):
    """Greedy tokens: prefill takes an empty cache (as `generate` makes it),
    the 2D padding mask grows by one column a step, positions count the
    prompt's real tokens."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    out = prefill(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        cache=transformers.DynamicCache(config=config),
    )
    tokens = []
    for _ in range(steps):
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        tokens.append(token)
        attention_mask = torch.cat([attention_mask, torch.ones_like(token)], dim=1)
        position_ids = position_ids[:, -1:] + 1
        out = decode(
            input_ids=token,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=out.cache,
        )
    return torch.cat(tokens, dim=1)


# ── README: a static cache (--cache static --max-cache-len N) ──
def generate_static(prefill, decode, config, max_cache_len, input_ids, attention_mask, steps):
    """Greedy tokens with a `StaticCache` of `max_cache_len` positions: the
    cache is an input of prefill too (as `generate` makes it), and the mask
    is the 4D one `generate` builds for it, a query at cache slot `p` seeing
    the slots up to `p` that hold a real token."""
    batch, length = input_ids.shape
    cache = transformers.StaticCache(config=config, max_cache_len=max_cache_len)
    padding = torch.zeros(batch, max_cache_len, dtype=torch.bool)
    padding[:, :length] = attention_mask.bool()
    slots = torch.arange(max_cache_len)

    def mask(first, count):  # (batch, 1, count, max_cache_len), for the queries at slots first..
        queries = torch.arange(first, first + count)[:, None]
        return ((slots[None, :] <= queries)[None, None] & padding[:, None, None, :]).contiguous()

    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    out = prefill(
        input_ids=input_ids,
        attention_mask=mask(0, length),
        position_ids=position_ids,
        cache=cache,
    )
    tokens = []
    for step in range(steps):
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        tokens.append(token)
        padding[:, length + step] = True
        position_ids = position_ids[:, -1:] + 1
        out = decode(
            input_ids=token,
            attention_mask=mask(length + step, 1),
            position_ids=position_ids,
            cache=out.cache,
        )
    return torch.cat(tokens, dim=1)


# ── end of the README's loops ──


def main(folder, *options):
    exported, prefill, decode = load(folder)
    config, generation = exported.config, exported.generation_config
    if "--model-dir" in options:
        model_dir = options[options.index("--model-dir") + 1]
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    else:
        torch.manual_seed(0)  # the seed hfx builds a random model with
        model = transformers.AutoModelForCausalLM.from_config(config)
    model = model.eval()
    # Two prompts, of 6 and 4 tokens, the shorter left-padded.
    input_ids = torch.randint(
        3, config.vocab_size, (2, 6), generator=torch.Generator().manual_seed(1)
    )
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :2] = 0
    static = getattr(generation, "cache_implementation", None) == "static"
    if static:
        tokens = generate_static(
            prefill, decode, config, generation.max_cache_len, input_ids, attention_mask, STEPS
        )
    else:
        tokens = generate_dynamic(prefill, decode, config, input_ids, attention_mask, STEPS)
    with torch.no_grad():
        eager = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=STEPS,
            min_new_tokens=STEPS,
            do_sample=False,
        )[:, input_ids.shape[1] :]
    print("exported", tokens.tolist())
    print("eager   ", eager.tolist())
    if not torch.equal(tokens, eager):
        raise SystemExit(
            f"{folder}: the {'static' if static else 'growing'}-cache loop generates other tokens than eager"
        )
    print(
        f"ok: identical greedy tokens ({exported.export_format}, {'static' if static else 'growing'} cache)"
    )


if __name__ == "__main__":
    args = sys.argv[1:]
    options = args.index("--model-dir") if "--model-dir" in args else len(args)
    for folder in args[:options]:
        main(folder, *args[options:])
