"""The eager reference of an int4 ONNX model (`--quantize int4 --verify`):
the traced model with each weight the host quantized replaced, for the
check's duration, by its int4 round trip, quantized and dequantized as
ONNX Runtime's `MatMulNBits` and `GatherBlockQuantized` read the
artifact's blocks (`host/src/weights/quantize.rs`, which writes them as
`MlasQuantizeBlockwise` does). The check then compares the artifact with
the quantized model it computes, rather than with the float model a 4-bit
weight is far from by design."""

import contextlib


@contextlib.contextmanager
def int4_weights(model, spec):
    """`model` with the weights `spec` (a `messages.Int4RoundTrip`) names
    round-tripped until the block exits. A weight is round-tripped only while
    a module holding it runs (its forward's hooks swap it in and out), so at
    most one module's weights are held twice, not the model's: a model
    verified near the machine's memory stays within it. A tied embedding and
    head are one parameter, swapped by either module."""
    import torch

    parameters = dict(model.named_parameters(remove_duplicate=False))
    missing = sorted(set(spec.weights) - set(parameters))
    if missing:
        raise ValueError(
            f"--verify: the int4 weight `{missing[0]}` is not a parameter of the traced model"
        )
    axes = {id(parameters[name]): axis for name, axis in spec.weights.items()}
    held = {}  # each module holding a named weight: its (parameter, axis) pairs
    for module in model.modules():
        for parameter in module.parameters(recurse=False):
            if id(parameter) in axes:
                held.setdefault(module, []).append((parameter, axes[id(parameter)]))
    # The float data of each parameter swapped out, and how many runs hold it.
    swapped = {}

    def swap_in(module, _args):
        with torch.no_grad():
            for parameter, axis in held[module]:
                data, runs = swapped.get(id(parameter), (parameter.data, 0))
                if runs == 0:
                    parameter.data = round_trip(data, axis, spec.block, spec.symmetric)
                swapped[id(parameter)] = (data, runs + 1)

    def swap_out(module, _args, _output):
        for parameter, _axis in held[module]:
            data, runs = swapped.pop(id(parameter))
            if runs == 1:
                parameter.data = data
            else:
                swapped[id(parameter)] = (data, runs - 1)

    handles = []
    try:
        for module in held:
            handles.append(module.register_forward_pre_hook(swap_in))
            handles.append(module.register_forward_hook(swap_out))
        yield
    finally:
        for handle in handles:
            handle.remove()
        # A forward that raised left its modules' weights swapped in.
        by_id = {id(p): p for pairs in held.values() for p, _ in pairs}
        for key, (data, _runs) in swapped.items():
            by_id[key].data = data


def round_trip(weight, axis, block, symmetric):
    """`weight` (2-D) quantized to 4 bits in blocks of `block` along `axis`
    and dequantized: a block's scale is kept in the weight's dtype, as the
    artifact stores it; symmetric, the value of largest magnitude maps to -8
    around zero point 8; otherwise the block's range, widened to hold 0,
    spans 0..=15 around its own zero point. Values round half away from
    zero, as `MlasQuantizeBlockwise` rounds."""
    import torch

    rows = weight.float() if axis == 1 else weight.float().t()
    n, k = rows.shape
    blocks = torch.nn.functional.pad(rows, (0, (-k) % block)).view(n, -1, block)
    low, high = blocks.amin(-1, keepdim=True), blocks.amax(-1, keepdim=True)
    if symmetric:
        extreme = torch.where(high.abs() > low.abs(), high, low)
        scale, zero_point = -extreme / 8, torch.full_like(extreme, 8.0)
    else:
        low, high = low.clamp(max=0), high.clamp(min=0)
        scale = (high - low) / 15
        zero_point = half_away(torch.where(scale != 0, -low / scale, low)).clamp(0, 15)
    scale = scale.to(weight.dtype).float()
    reciprocal = torch.where(scale != 0, 1 / scale, torch.zeros_like(scale))
    levels = half_away((blocks * reciprocal + zero_point).clamp(0, 15))
    values = ((levels - zero_point) * scale).view(n, -1)[:, :k]
    return (values if axis == 1 else values.t()).to(weight.dtype).contiguous()


def half_away(x):
    """`x` rounded half away from zero (`std::round`; torch rounds half to even)."""
    import torch

    return torch.sign(x) * torch.floor(x.abs() + 0.5)
