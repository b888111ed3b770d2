"""Backend preparation for ExecuTorch's `--quantize`: the eager model's
linear layers and embeddings quantized in place by torchao's `quantize_`
before the trace, as ExecuTorch's own LLM export (`export_llama`'s qmode,
optimum-executorch's `--qlinear`/`--qembedding`) does. The traced program
then carries torchao's quantize/dequantize ops around integer weights, which
ExecuTorch's XNNPACK partitioner lowers to its quantized kernels; the eager
reference is the quantized model, so `--verify` checks the program against
what it was traced from."""

from . import resident
from .errors import UserInputError

# torchao's weight dtype per scheme's bits.
BITS = {"4w": "int4", "8w": "int8", "8da4w": "int4"}


def quantize_model(model, spec):
    """Quantizes `model` in place as `spec` (a `messages.EagerQuantize`)
    says: each `nn.Linear` by `spec.linear`, each `nn.Embedding` by
    `spec.embeddings`; 4-bit weights in groups of `spec.group_size` along
    the input axis, 8-bit weight-only ones per output channel."""
    import torch
    from torchao.quantization import (
        Int8DynamicActivationIntxWeightConfig,
        IntxWeightOnlyConfig,
    )
    from torchao.quantization.granularity import PerAxis, PerGroup
    from torchao.utils import unwrap_tensor_subclass

    def granularity(bits):
        return PerGroup(spec.group_size) if bits.startswith("4") else PerAxis(0)

    grouped = {
        "linear": (spec.linear, torch.nn.Linear),
        "embedding": (spec.embeddings, torch.nn.Embedding),
    }
    for kind, (scheme, module_type) in grouped.items():
        if scheme is None or BITS[scheme] != "int4":
            continue
        for name, module in model.named_modules():
            if isinstance(module, module_type) and module.weight.shape[-1] % spec.group_size:
                raise UserInputError(
                    f"--quantize-block-size {spec.group_size}: {kind} `{name}` has rows of "
                    f"{module.weight.shape[-1]} weights, not a multiple of the group: give a "
                    "group size that divides it (32, 64, 128 or 256)"
                )

    if spec.embeddings is not None:
        embeddings = IntxWeightOnlyConfig(
            weight_dtype=getattr(torch, BITS[spec.embeddings]),
            granularity=granularity(spec.embeddings),
        )
        quantized_one_at_a_time(model, embeddings, torch.nn.Embedding)
    if spec.linear == "8da4w":
        config = Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int4, weight_granularity=PerGroup(spec.group_size)
        )
    elif spec.linear is not None:
        config = IntxWeightOnlyConfig(
            weight_dtype=getattr(torch, BITS[spec.linear]), granularity=granularity(spec.linear)
        )
    if spec.linear is not None:
        quantized_one_at_a_time(model, config, torch.nn.Linear)
    # The quantized weights are torchao tensor subclasses, which torch.export
    # would save pickled: as plain tensors (the integers, scales, zero points)
    # that a parametrization recombines, the program holds them as weights.
    unwrap_tensor_subclass(model)


def quantized_one_at_a_time(model, config, module_type):
    """Quantizes every `module_type` module of `model` by torchao's
    `quantize_` with `config`, one module at a time (each picked by
    identity), and hands back the float weight's pages each replaced where
    they are a file's (`resident`): a model folder's checkpoint is mapped,
    and its pages would otherwise stay resident beside the quantized copies
    (a 125M Llama's linears: 0.35 GiB of the worker's peak)."""
    from torchao.quantization import quantize_

    mappings = resident.file_mappings()
    targets = [module for module in model.modules() if isinstance(module, module_type)]
    for target in targets:
        float_weight = resident.storage_span(target.weight)
        quantize_(model, config, lambda module, _name, target=target: module is target)
        resident.page_out([float_weight], mappings)
