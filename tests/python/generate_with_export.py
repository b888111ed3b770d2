"""The README's loop: greedy generation with the components of an hfx
`--generation` export folder, loaded by the reference's
`ExportedModel.from_pretrained`, checked against eager `generate` on the model
the folder's config builds (the seed hfx traced it with).

    python generate_with_export.py DIR [TOKENS]
"""

import sys

import torch
import transformers
from transformers.exporters import ExportedModel

folder, new_tokens = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 8

# ── what the README shows ──
exported = ExportedModel.from_pretrained(folder)
prefill, decode = exported.runners["prefill"], exported.runners["decode"]

input_ids = torch.randint(
    0, exported.config.vocab_size, (2, 6), generator=torch.Generator().manual_seed(1)
)
batch, length = input_ids.shape
out = prefill(input_ids=input_ids, position_ids=torch.arange(length).expand(batch, -1))
tokens = []
for step in range(new_tokens):
    token = out.logits[:, -1].argmax(-1, keepdim=True)
    tokens.append(token)
    out = decode(
        input_ids=token, position_ids=torch.full((batch, 1), length + step), cache=out.cache
    )
tokens = torch.cat(tokens, dim=1)
# ── end ──

torch.manual_seed(0)  # the seed hfx builds a random model with
model = transformers.AutoModelForCausalLM.from_config(exported.config).eval()
with torch.no_grad():
    eager = model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
    )[:, length:]
print("exported", tokens.tolist())
print("eager   ", eager.tolist())
assert torch.equal(tokens, eager), "the exported components generate other tokens than eager"
print("ok: identical greedy tokens")
