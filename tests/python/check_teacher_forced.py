"""The generation check's teacher forcing (`ForcedTokens`, a logits
processor inside transformers' `generate`): the sequence is the forced
tokens whatever the model scores, `output_logits` keeps each step's scores
as the model gave them, and `chosen_tokens` reads the model's own choice
from them. Forced with its own greedy tokens, a model's logits are its free
run's; forced with other tokens, they are the logits of that context.

    python check_teacher_forced.py

Exits non-zero with one line per failure.
"""

import os
import sys

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
import torch  # noqa: E402
from hfx_worker.generation import ForcedTokens, chosen_tokens, new_tokens  # noqa: E402
from tiny_models import tiny_llama  # noqa: E402

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)


model = tiny_llama().eval()
ids = torch.randint(0, 128, (2, 6), generator=torch.Generator().manual_seed(0))
prompt = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
steps = 6


def generate(forced=None):
    with torch.no_grad():
        return model.generate(
            **prompt,
            max_new_tokens=steps,
            min_new_tokens=steps,
            do_sample=False,
            logits_processor=[] if forced is None else [ForcedTokens(forced)],
            return_dict_in_generate=True,
            output_logits=True,
        )


free = generate()
own = generate(new_tokens(free))
check(
    torch.equal(new_tokens(own), new_tokens(free)), "forced with its own tokens: the same sequence"
)
check(
    all(torch.equal(a, b) for a, b in zip(own.logits, free.logits)),
    "forced with its own tokens: the free run's logits",
)
check(torch.equal(chosen_tokens(own), new_tokens(free)), "its choices are its greedy tokens")

other = torch.randint(0, 128, (2, steps), generator=torch.Generator().manual_seed(1))
forced = generate(other)
check(torch.equal(new_tokens(forced), other), "the sequence is the forced tokens")
check(
    torch.equal(chosen_tokens(forced)[:, 0], new_tokens(free)[:, 0]),
    "the first choice is the model's own (the prompt is the same)",
)
# Each step's logits are those of the forced context: the model run on the prompt and the forced tokens.
with torch.no_grad():
    whole = model(input_ids=torch.cat([prompt["input_ids"], other], dim=1)).logits
for i, step in enumerate(forced.logits):
    check(
        torch.allclose(step, whole[:, prompt["input_ids"].shape[1] - 1 + i], atol=1e-5),
        f"step {i}: the logits of the forced context",
    )

if failures:
    print("\n".join(failures))
    sys.exit(1)
