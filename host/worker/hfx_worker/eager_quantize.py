"""Backend preparation for ExecuTorch's `--quantize`: the eager model's
linear layers and embeddings quantized in place by torchao's `quantize_`
before the trace, as ExecuTorch's own LLM export (`export_llama`'s qmode,
optimum-executorch's `--qlinear`/`--qembedding`) does. The traced program
then carries torchao's quantize/dequantize ops around integer weights, which
ExecuTorch's XNNPACK partitioner lowers to its quantized kernels; the eager
reference is the quantized model, so `--verify` checks the program against
what it was traced from."""

import contextlib

from . import resident
from .errors import UserInputError

# torchao's weight dtype per scheme's bits.
BITS = {"4w": "int4", "8w": "int8", "8da4w": "int4"}


def quantize_model(model, spec):
    """Quantizes `model` in place as `spec` (a `messages.EagerQuantize`)
    says: each `nn.Linear` by `spec.linear`, each `nn.Embedding` by
    `spec.embeddings`; 4-bit weights in groups of `spec.group_size` along
    the input axis, 8-bit weight-only ones per output channel."""
    with quantized_as_it_runs(model, spec):
        pass


@contextlib.contextmanager
def quantized_as_it_runs(model, spec):
    """Within: `model` quantizes each module `spec` names right after the
    module's first call (each picked by identity, as `quantize_model`
    quantizes it), handing back the float weight's pages where they are a
    file's (`resident`); after: every module quantized, as `quantize_model`
    leaves it. A model folder's checkpoint is mapped, and a forward reads
    every weight: quantized only after a whole forward, a 125M Llama's float
    linears (0.35 GiB) would all be resident at once beside the rest.
    Nothing with `spec` None."""
    if spec is None:
        yield
        return
    import torch
    from torchao.utils import unwrap_tensor_subclass

    check_group_size(model, spec)
    # Embeddings first, as ExecuTorch's LLM export quantizes them: a tied
    # head's weight is then quantized from the float one either way.
    targets = [
        (module, config)
        for module_type, config in configs(spec)
        for module in model.modules()
        if isinstance(module, module_type)
    ]
    mappings = resident.file_mappings()
    hooks = {}

    def quantize(module, config):
        hooks.pop(id(module)).remove()
        quantized_in_place(model, module, config, mappings)

    for module, config in targets:
        hooks[id(module)] = module.register_forward_hook(
            lambda module, _args, _output, config=config: quantize(module, config)
        )
    try:
        yield
    except BaseException:
        for hook in hooks.values():
            hook.remove()
        raise
    with torch.no_grad():
        for module, config in targets:
            if id(module) in hooks:
                quantize(module, config)
    # The quantized weights are torchao tensor subclasses, which torch.export
    # would save pickled: as plain tensors (the integers, scales, zero points)
    # that a parametrization recombines, the program holds them as weights.
    unwrap_tensor_subclass(model)


def check_group_size(model, spec):
    """A one-line error where a 4-bit scheme's group does not divide a row."""
    import torch

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


def configs(spec):
    """[(module type, torchao config)] that `spec` quantizes, embeddings first."""
    import torch
    from torchao.quantization import (
        Int8DynamicActivationIntxWeightConfig,
        IntxWeightOnlyConfig,
    )
    from torchao.quantization.granularity import PerAxis, PerGroup

    def granularity(bits):
        return PerGroup(spec.group_size) if bits.startswith("4") else PerAxis(0)

    chosen = []
    if spec.embeddings is not None:
        embeddings = IntxWeightOnlyConfig(
            weight_dtype=getattr(torch, BITS[spec.embeddings]),
            granularity=granularity(spec.embeddings),
        )
        chosen.append((torch.nn.Embedding, embeddings))
    if spec.linear == "8da4w":
        linear = Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int4, weight_granularity=PerGroup(spec.group_size)
        )
        chosen.append((torch.nn.Linear, linear))
    elif spec.linear is not None:
        linear = IntxWeightOnlyConfig(
            weight_dtype=getattr(torch, BITS[spec.linear]), granularity=granularity(spec.linear)
        )
        chosen.append((torch.nn.Linear, linear))
    return chosen


def quantized_in_place(model, target, config, mappings):
    """Quantizes `target`, a module of `model`, by torchao's `quantize_` with
    `config` (picked by identity), and hands back the float weight's pages
    where they are a file's (`mappings`, `resident.file_mappings()`)."""
    from torchao.quantization import quantize_

    float_weight = resident.storage_span(target.weight)
    quantize_(model, config, lambda module, _name: module is target)
    resident.page_out([float_weight], mappings)
