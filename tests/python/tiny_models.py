"""The tiny random Llama the tests' fixtures and the benchmarks build, and the
files `save_pretrained` writes for a model.

`TINY_DECODER` is the config of the tests' tiny decoders (`tiny::LLAMA` in
tests/it/common.rs), shared by Llama's and Qwen2's configs and the text
halves of the multimodal models."""

import os
import tempfile

TINY_DECODER = dict(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)


def tiny_llama(seed=0):
    """A `LlamaForCausalLM` of `TINY_DECODER`, its weights drawn after `torch.manual_seed(seed)`."""
    import torch
    import transformers

    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINY_DECODER))


def saved(model, **options):
    """The files `model.save_pretrained(folder, **options)` writes, name -> bytes."""
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder, **options)
        files = {}
        for name in os.listdir(folder):
            with open(os.path.join(folder, name), "rb") as f:
                files[name] = f.read()
        return files


def llama_with_its_inputs():
    """`--model-fn python:tiny_models:llama_with_its_inputs`: `tiny_llama()`
    and inputs of its own sizes (a batch of 6, a sequence of 7), which hfx
    did not choose."""
    import torch

    model = tiny_llama().eval()
    input_ids = torch.randint(0, TINY_DECODER["vocab_size"], (6, 7))
    return model, {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
