"""What eager transformers generates from a model folder: `eager_generate.py
MODEL PROMPT N` prints the greedy continuation of PROMPT (at most N new
tokens), decoded as `hfx generate` decodes it, as JSON `{"text", "ids"}`;
with `--write KIND`, it first writes MODEL as `model_folders.py KIND MODEL`
does (one Python start for both)."""

import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main(folder, prompt, new_tokens):
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    inputs = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        sequences = model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False)
    ids = sequences[0, inputs["input_ids"].shape[1] :].tolist()
    text = tokenizer.decode(ids, skip_special_tokens=True)
    print(json.dumps({"text": text, "ids": ids}))


if __name__ == "__main__":
    if len(sys.argv) > 5 and sys.argv[4] == "--write":
        import model_folders

        model_folders.main(sys.argv[5], sys.argv[1])
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
