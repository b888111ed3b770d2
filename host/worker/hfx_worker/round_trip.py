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
    round-tripped until the block exits; each parameter once, however many
    names (a tied embedding and head) it has."""
    import torch

    parameters = dict(model.named_parameters(remove_duplicate=False))
    missing = sorted(set(spec.weights) - set(parameters))
    if missing:
        raise ValueError(
            f"--verify: the int4 weight `{missing[0]}` is not a parameter of the traced model"
        )
    chosen = {}
    for name, axis in spec.weights.items():
        chosen.setdefault(id(parameters[name]), (parameters[name], axis))
    saved = []
    try:
        with torch.no_grad():
            for parameter, axis in chosen.values():
                saved.append((parameter, parameter.data))
                parameter.data = round_trip(parameter.data, axis, spec.block, spec.symmetric)
        yield
    finally:
        for parameter, data in saved:
            parameter.data = data


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
