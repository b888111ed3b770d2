"""Writes the `.pt2` seeds of the fuzz corpus: real torch.export archives of
the smallest transformers model that still has every part (embedding,
attention, MLP, norms; symbolic sizes in the dynamic one), and of small
modules with what models rarely have (a `cond` sub-graph, a tied weight, a
buffer and a tensor constant, a view at a storage offset): each under 200 KB.

    .venv/bin/python fuzz/make_seeds.py fuzz/seeds/pt2_open

Then `hfx run --backend dynamo fuzz/seeds/pt2_open/llama_dynamic.pt2 -o
fuzz/seeds/ir_json/llama_dynamic.json` gives the IR JSON seed (see the README).
"""

import os
import sys

import torch
import transformers


def main(out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    text = dict(
        vocab_size=16,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=16,
    )
    small_modules(out)
    models = {
        "bert": transformers.BertModel(transformers.BertConfig(**text)),
    }
    for name, model in models.items():
        model.eval()
        ids = torch.randint(0, 16, (2, 4))
        kwargs = {"input_ids": ids, "attention_mask": torch.ones(2, 4, dtype=torch.long)}
        if name == "llama":
            kwargs["use_cache"] = False
        for mode in ("static", "dynamic"):
            dynamic = None
            if mode == "dynamic":
                batch, seq = (
                    torch.export.Dim("batch", min=1, max=8),
                    torch.export.Dim("seq", min=2, max=16),
                )
                dynamic = {
                    k: ({0: batch, 1: seq} if isinstance(v, torch.Tensor) else None)
                    for k, v in kwargs.items()
                }
            program = torch.export.export(model, (), kwargs, dynamic_shapes=dynamic, strict=False)
            path = os.path.join(out, f"{name}_{mode}.pt2")
            torch.export.save(program, path)
            print(path, os.path.getsize(path))


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(6, 4)
        self.head = torch.nn.Linear(4, 6, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.register_buffer("scale", torch.arange(4, dtype=torch.float32))
        self.register_buffer("window", torch.arange(12, dtype=torch.float32)[4:8], persistent=False)
        self.table = torch.tensor([1, 2, 3])  # a tensor constant

    def forward(self, ids, x):
        h = self.embed(ids) * self.scale + self.window + self.table.sum()
        h = torch.cond(x.sum() > 0, lambda h: h.relu(), lambda h: h.tanh(), (h,))
        return self.head(h), h.shape[1] * 2


def small_modules(out):
    model = Small().eval()
    ids, x = torch.tensor([[1, 2, 3]]), torch.ones(3)
    for mode in ("static", "dynamic"):
        dynamic = None
        if mode == "dynamic":
            dynamic = {"ids": {1: torch.export.Dim("seq", min=2, max=16)}, "x": None}
        program = torch.export.export(model, (ids, x), dynamic_shapes=dynamic, strict=False)
        path = os.path.join(out, f"small_{mode}.pt2")
        torch.export.save(program, path)
        print(path, os.path.getsize(path))


if __name__ == "__main__":
    main(sys.argv[1])
