"""Test fixtures for the .pt2 reader/writer: real torch.export traces of tiny
random transformers models, and an exact comparison of two archives.

    python pt2_fixture.py export ARCH {static,dynamic} OUT.pt2
    python pt2_fixture.py export-all OUTDIR          # every ARCH x mode, as OUTDIR/ARCH_MODE.pt2
    python pt2_fixture.py compare ORIGINAL.pt2 OTHER.pt2 ARCH {static,dynamic}
    python pt2_fixture.py compare-all ORIGINAL OTHER ARCH MODE [ORIGINAL OTHER ARCH MODE ...]
    python pt2_fixture.py pickle-payload MARKER OUT  # a torch.save pickle that creates MARKER when unpickled
    python pt2_fixture.py load ARCHIVE.pt2            # torch.export.load, as anyone who receives it would

`export` writes OUT.pt2 (torch.export.save). `compare` loads both archives,
runs `.module()` on the architecture's sample inputs (and, for a dynamic
archive, on a second input size) and exits non-zero unless every output is
bit-for-bit equal. Models are built from `*Config(...)`: no hub downloads.
"""

import sys

import torch
import transformers


def tiny(arch):
    """(model, sample-input factory) for a tiny random config of `arch`."""
    torch.manual_seed(0)
    text = dict(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
    )
    if arch == "llama":
        model = transformers.LlamaForCausalLM(
            transformers.LlamaConfig(num_key_value_heads=2, **text)
        )
    elif arch == "qwen2":
        model = transformers.Qwen2ForCausalLM(
            transformers.Qwen2Config(num_key_value_heads=2, **text)
        )
    elif arch == "qwen3":
        model = transformers.Qwen3ForCausalLM(
            transformers.Qwen3Config(num_key_value_heads=2, head_dim=8, **text)
        )
    elif arch == "gpt2":
        model = transformers.GPT2LMHeadModel(
            transformers.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64)
        )
    elif arch == "bert":
        model = transformers.BertModel(transformers.BertConfig(**text))
    elif arch == "vit":
        model = transformers.ViTModel(
            transformers.ViTConfig(
                image_size=32,
                patch_size=8,
                num_channels=3,
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
            )
        )
        return model.eval(), lambda batch, _seq: {"pixel_values": torch.randn(batch, 3, 32, 32)}
    else:
        raise SystemExit(f"unknown architecture {arch}")

    def inputs(batch, seq):
        g = torch.Generator().manual_seed(batch * 100 + seq)
        ids = torch.randint(0, 128, (batch, seq), generator=g)
        kwargs = {"input_ids": ids, "attention_mask": torch.ones(batch, seq, dtype=torch.long)}
        if arch in ("llama", "qwen2", "qwen3", "gpt2"):
            kwargs["use_cache"] = False
        return kwargs

    return model.eval(), inputs


def export(arch, mode, out):
    model, inputs = tiny(arch)
    sample = inputs(2, 8)
    dynamic = None
    if mode == "dynamic":
        auto = torch.export.Dim.AUTO
        dynamic = {
            k: ({0: auto} if k == "pixel_values" else {0: auto, 1: auto})
            if torch.is_tensor(v)
            else None
            for k, v in sample.items()
        }
    with torch.no_grad():
        ep = torch.export.export(model, (), sample, dynamic_shapes=dynamic, strict=False)
    torch.export.save(ep, out)


def flat(output):
    if torch.is_tensor(output):
        return [output]
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    if isinstance(output, (list, tuple)):
        return [t for o in output for t in flat(o)]
    if output is None:
        return []
    raise TypeError(type(output))


def compare(original, other, arch, mode):
    _, inputs = tiny(arch)
    a = torch.export.load(original)
    b = torch.export.load(other)
    sizes = [(2, 8)] + ([(3, 5)] if mode == "dynamic" else [])
    for batch, seq in sizes:
        x = inputs(batch, seq)
        with torch.no_grad():
            ya, yb = flat(a.module()(**x)), flat(b.module()(**x))
        if not ya or len(ya) != len(yb):
            raise SystemExit(f"{len(ya)} outputs vs {len(yb)}")
        for i, (p, q) in enumerate(zip(ya, yb)):
            if p.shape != q.shape or p.dtype != q.dtype or not torch.equal(p, q):
                raise SystemExit(f"output {i} differs at size {(batch, seq)}")
    print(f"equal on {len(sizes)} input size(s)")


ARCHS = ("llama", "qwen2", "qwen3", "gpt2", "bert", "vit")


def export_all(outdir):
    import os

    os.makedirs(outdir, exist_ok=True)
    for arch in ARCHS:
        for mode in ("static", "dynamic"):
            path = os.path.join(outdir, f"{arch}_{mode}.pt2")
            if not os.path.exists(path):
                # Same file name in a temp folder: the archive's inner folder is named after it.
                tmp = os.path.join(outdir, f".tmp-{os.getpid()}", f"{arch}_{mode}.pt2")
                os.makedirs(os.path.dirname(tmp), exist_ok=True)
                export(arch, mode, tmp)
                os.replace(tmp, path)


def compare_all(*quads):
    failures = []
    for i in range(0, len(quads), 4):
        original, other, arch, mode = quads[i : i + 4]
        try:
            compare(original, other, arch, mode)
        except SystemExit as e:
            failures.append(f"{arch} {mode}: {e}")
    if failures:
        raise SystemExit("; ".join(failures))


class Payload:
    """Unpickled, it opens (creates) the marker file: the code a hostile
    archive runs in whoever loads it with `weights_only=False`."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def pickle_payload(marker, out):
    torch.save(Payload(marker), out)


def load(path):
    import transformers.modeling_outputs  # noqa: F401  (the output types the specs name)

    torch.export.load(path)
    print("loaded")


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {
        "export": export,
        "export-all": export_all,
        "compare": compare,
        "compare-all": compare_all,
        "pickle-payload": pickle_payload,
        "load": load,
    }[command](*args)
