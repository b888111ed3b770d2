"""The MoE fusion of `--ort-fusions cuda`, checked on ONNX Runtime's CPU provider.

    check_moe_fusion.py folder OUT          # a tiny Mixtral folder, as `save_pretrained` writes it
    check_moe_fusion.py compare PLAIN FUSED # the fused model computes what the plain one does

The fused model's `com.microsoft::MoE` nodes take their gate and up weights apart (`fc3`), as ONNX Runtime's CUDA
kernel does; its CPU kernel has no `fc3` ("FC3 is not implemented for CPU MoE") but runs the same experts with
gate and up interleaved in one weight (`swiglu_fusion=1`, SwiGLU with alpha 1, beta 0 and no limit: SiLU(gate) *
up). `compare` rewrites each MoE so, with the same inputs, routing and weights, then runs both models on the same
tokens and prints the max abs difference of each output; it fails past 1e-4.
"""

import sys

import numpy as np
from tiny_models import TINY_DECODER


def folder(out):
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    config = MixtralConfig(**TINY_DECODER, num_local_experts=4, num_experts_per_tok=2)
    MixtralForCausalLM(config).save_pretrained(out)


def cpu_runnable(model):
    """`model` with each MoE's separate gate and up weights interleaved into its `fc1` (CPU's SwiGLU form)."""
    from onnx import helper, numpy_helper

    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    values = {}

    def value(name):
        if name in initializers:
            return numpy_helper.to_array(initializers[name])
        # The gate and up halves: a `Split` of an initializer along axis 1.
        split = next(n for n in graph.node if name in n.output)
        assert split.op_type == "Split", split
        whole = numpy_helper.to_array(initializers[split.input[0]])
        return np.split(whole, 2, axis=1)[list(split.output).index(name)]

    rewritten = 0
    for node in graph.node:
        if node.op_type != "MoE" or len(node.input) < 7 or not node.input[6]:
            continue
        gate, up = value(node.input[2]), value(node.input[6])
        experts, inter, hidden = gate.shape
        interleaved = np.stack([gate, up], axis=2).reshape(experts, 2 * inter, hidden)
        name = f"{node.output[0]}_fc1_interleaved"
        values[name] = interleaved
        graph.initializer.append(numpy_helper.from_array(interleaved, name))
        del node.input[6:]
        node.input[2] = name
        kept = [a for a in node.attribute if a.name in ("k", "normalize_routing_weights")]
        del node.attribute[:]
        node.attribute.extend(kept)
        node.attribute.extend(
            [
                helper.make_attribute("activation_type", "swiglu"),
                helper.make_attribute("swiglu_fusion", 1),
                helper.make_attribute("activation_alpha", 1.0),
                helper.make_attribute("activation_beta", 0.0),
                helper.make_attribute("swiglu_limit", 3.0e38),
            ]
        )
        rewritten += 1
    assert rewritten, "the fused model holds no MoE with separate gate and up weights"
    return model, rewritten


def compare(plain, fused):
    import onnx
    import onnxruntime

    def session(model):
        return onnxruntime.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )

    plain_session = session(onnx.load(plain))
    fused_model, rewritten = cpu_runnable(onnx.load(fused))
    fused_session = session(fused_model)
    rng = np.random.default_rng(0)
    feeds = {}
    for i in plain_session.get_inputs():
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(0, TINY_DECODER["vocab_size"], size=(2, 8), dtype=np.int64)
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones((2, 8), dtype=np.int64)
        else:
            raise SystemExit(f"unexpected input {i.name}")
    expected = plain_session.run(None, feeds)
    found = fused_session.run(None, feeds)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(expected, found))
    print(f"{rewritten} MoE; max abs difference {worst:.2e}")
    if not worst <= 1e-4:
        raise SystemExit(f"the fused model differs from the plain one by {worst}")


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"folder": folder, "compare": compare}[command](*args)
