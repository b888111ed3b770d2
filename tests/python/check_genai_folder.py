"""Generates with ONNX Runtime GenAI from an `hfx run --generation --genai`
folder, as a user does, and holds its greedy tokens against eager
`generate` on the model folder it was exported from:
`check_genai_folder.py EXPORT_DIR MODEL_DIR`, on prompts of token ids (the
tests' word-level tokenizer is not one GenAI's tokenizer reads)."""

import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime_genai as og
import torch
from transformers import AutoModelForCausalLM

STEPS = 8


def genai_tokens(model, ids):
    params = og.GeneratorParams(model)
    length = len(ids) + STEPS
    # min_length: an end-of-sequence token does not stop it, as eager's `min_new_tokens`.
    params.set_search_options(do_sample=False, max_length=length, min_length=length)
    generator = og.Generator(model, params)
    generator.append_tokens(np.asarray([ids], dtype=np.int32))
    tokens = []
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    return tokens


def eager_tokens(model, ids):
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=STEPS,
            min_new_tokens=STEPS,
            do_sample=False,
        )
    return [int(t) for t in out[0, len(ids) :]]


def main(export_dir, model_dir):
    config = json.loads((Path(export_dir) / "genai_config.json").read_text())
    decoder = config["model"]["decoder"]
    assert (Path(export_dir) / decoder["filename"]).is_file(), decoder["filename"]
    assert config["model"]["type"] == "llama", config["model"]["type"]
    genai = og.Model(export_dir)
    eager = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    prompts = [[1, 17, 230, 5, 999], [1, 4]]
    for ids in prompts:
        got, want = genai_tokens(genai, ids), eager_tokens(eager, ids)
        assert got == want, f"prompt {ids}: GenAI {got}, eager {want}"
        print(f"prompt {ids}: {got}")


if __name__ == "__main__":
    main(*sys.argv[1:])
