"""ExecuTorch's XNNPACK lowering with hfx's shortcuts gives the `.pte` it
gives without them, byte for byte, and the shortcuts were taken.

    python check_lowering_shortcuts.py {llama,vit} {static,dynamic} MIN_REPLAYED

Each model is a tiny random one (two layers), exported with torch.export,
then lowered twice from identical exports: once as ExecuTorch lowers it, once
inside `lowering_shortcuts.shortcuts()`. At least MIN_REPLAYED partitions must
have been replayed (0 for a model whose partitions all need preprocess).
"""

import os
import sys

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker"))
from hfx_worker.lowering_shortcuts import shortcuts, supported  # noqa: E402


def llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": ids, "attention_mask": torch.ones(2, 8, dtype=torch.long), "use_cache": False}
    batch, sequence = torch.export.Dim("batch", max=64), torch.export.Dim("sequence", max=64)
    dynamic = {"input_ids": {0: batch, 1: sequence}, "attention_mask": {0: batch, 1: sequence}, "use_cache": None}
    return model, inputs, dynamic


def vit():
    torch.manual_seed(0)
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                    image_size=32, patch_size=8, num_labels=3)
    model = transformers.ViTForImageClassification(config).eval()
    inputs = {"pixel_values": torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))}
    return model, inputs, {"pixel_values": {0: torch.export.Dim("batch", max=64)}}


def lowered(model, inputs, dynamic, fast):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    with torch.no_grad():
        program = torch.export.export(model, (), inputs, dynamic_shapes=dynamic, strict=False)
    with shortcuts(enabled=fast) as counts:
        edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    return edge.to_executorch().buffer, counts


def main():
    arch, shapes, min_replayed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if not supported():
        raise SystemExit("the shortcuts do not apply to the installed executorch/torch: update SUPPORTED and this check")
    model, inputs, dynamic = {"llama": llama, "vit": vit}[arch]()
    dynamic = dynamic if shapes == "dynamic" else None
    plain, _ = lowered(model, inputs, dynamic, fast=False)
    fast, counts = lowered(model, inputs, dynamic, fast=True)
    print(f"{arch} {shapes}: {counts}, {len(plain)} bytes")
    if fast != plain:
        first = next((i for i, (a, b) in enumerate(zip(fast, plain)) if a != b), min(len(fast), len(plain)))
        raise SystemExit(f"{arch} {shapes}: the .pte differs with the shortcuts (sizes {len(fast)} vs {len(plain)}, first difference at byte {first})")
    if counts.partitions == 0 or counts.replayed < min_replayed:
        raise SystemExit(f"{arch} {shapes}: expected at least {min_replayed} replayed partition(s), got {counts}")


if __name__ == "__main__":
    main()
