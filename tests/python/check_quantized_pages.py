"""Quantizing a model folder's model hands the float weights' checkpoint
pages back (`eager_quantize`, `resident`) and quantizes as torchao's
`quantize_` over the whole model does.

    python check_quantized_pages.py

A tiny Llama saved as a folder, loaded by `from_pretrained` (transformers
maps the safetensors file: the parameters view its pages), run once so every
weight's page is resident, then quantized 8da4w by the worker's
`quantize_model`: the checkpoint's resident pages (`/proc/self/smaps`) must
fall to what the weights left in float (the embedding, the norms) plus a
page at each edge, and the quantized weights must equal those of one
`quantize_` call over a second copy of the model.

A third copy runs its forward inside `quantized_as_it_runs`, as a
generation's capture runs `generate`: after each linear layer's call, the
checkpoint's resident pages must be at most the float weights left plus one
linear layer's (a forward of the float model makes all of them resident at
once), and its quantized weights must equal the same.
"""

import os
import sys
import tempfile

import torch
import transformers

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
from hfx_worker import eager_quantize, messages  # noqa: E402

PAGE = 4096


def resident_bytes(path):
    """Bytes of `path` resident in this process's mappings of it."""
    file = os.stat(path)
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:
                inside = (
                    len(fields) >= 6
                    and os.path.exists(fields[5])
                    and os.path.samestat(os.stat(fields[5]), file)
                )
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


def main():
    config = transformers.LlamaConfig(
        vocab_size=1024,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        transformers.LlamaForCausalLM(config).save_pretrained(folder)
        checkpoint = os.path.join(folder, "model.safetensors")
        # Written back, as a folder's checkpoint is: a dirty page is written before it is reclaimed.
        with open(checkpoint, "rb") as f:
            os.fsync(f.fileno())
        model = transformers.LlamaForCausalLM.from_pretrained(folder).eval()
        with torch.no_grad():
            model(torch.arange(8).reshape(1, 8))
        before = resident_bytes(checkpoint)
        linear = sum(m.weight.nbytes for m in model.modules() if isinstance(m, torch.nn.Linear))
        if before < linear:
            raise SystemExit(
                f"the checkpoint's pages are not the model's: {before} bytes resident, "
                f"{linear} of linear weights (transformers copied the weights?)"
            )
        spec = messages.EagerQuantize(linear="8da4w", embeddings=None, group_size=32)
        eager_quantize.quantize_model(model, spec)
        after = resident_bytes(checkpoint)
        left = sum(p.nbytes for n, p in model.named_parameters() if "embed" in n or "norm" in n)
        edges = 2 * PAGE * sum(1 for m in model.modules() if isinstance(m, torch.nn.Linear))
        print(f"checkpoint resident: {before} bytes before, {after} after ({left} left in float)")
        if after > left + edges:
            raise SystemExit(
                f"quantizing kept {after} bytes of the checkpoint resident; the float weights "
                f"left are {left} bytes (+ {edges} of page edges)"
            )

        running = transformers.LlamaForCausalLM.from_pretrained(folder).eval()
        largest = max(m.weight.nbytes for m in running.modules() if isinstance(m, torch.nn.Linear))
        seen = []
        with eager_quantize.quantized_as_it_runs(running, spec), torch.no_grad():
            # Registered after the context's own hooks: each runs once its layer is quantized.
            for module in running.modules():
                if isinstance(module, torch.nn.Linear):
                    module.register_forward_hook(lambda *_: seen.append(resident_bytes(checkpoint)))
            running(torch.arange(8).reshape(1, 8))
        print(f"checkpoint resident while running quantized as it runs: at most {max(seen)} bytes")
        if len(seen) != sum(1 for m in running.modules() if isinstance(m, torch.nn.Linear)):
            raise SystemExit(f"{len(seen)} linear calls seen")
        if max(seen) > left + largest + edges:
            raise SystemExit(
                f"quantizing as the forward runs kept {max(seen)} bytes of the checkpoint resident; "
                f"the float weights left and one linear layer's are {left + largest} (+ {edges} of page edges)"
            )

        from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
        from torchao.quantization.granularity import PerGroup
        from torchao.utils import unwrap_tensor_subclass

        whole = transformers.LlamaForCausalLM.from_pretrained(folder).eval()
        config = Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int4, weight_granularity=PerGroup(32)
        )
        quantize_(whole, config, lambda module, _name: isinstance(module, torch.nn.Linear))
        unwrap_tensor_subclass(whole)
        theirs = whole.state_dict()
        for how, quantized in (("quantize_model", model), ("quantized_as_it_runs", running)):
            ours = quantized.state_dict()
            if ours.keys() != theirs.keys():
                raise SystemExit(f"{how}: other tensors: {sorted(ours.keys() ^ theirs.keys())}")
            for name, value in ours.items():
                if value.dtype != theirs[name].dtype or not torch.equal(value, theirs[name]):
                    raise SystemExit(
                        f"{how}: `{name}` differs from one quantize_ over the whole model"
                    )


if __name__ == "__main__":
    main()
