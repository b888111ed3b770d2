"""Small modules that trace (torch.export) to graphs holding the patterns the
ported FX node fixes repair, and an eager-parity check of a fixed archive.

    python fx_patterns.py export-all OUTDIR            # OUTDIR/NAME.pt2 for every pattern
    python fx_patterns.py compare NAME FIXED.pt2       # fixed vs eager, atol/rtol 1e-4
"""

import os
import sys

import torch


class SliceImplicitStart(torch.nn.Module):
    """`aten.slice` with `start=None` (what `x[..., :end]` spells on some paths)."""

    def forward(self, x):
        return torch.ops.aten.slice.Tensor(x, 1, None, 4) * 2


class IntegralTensorFloatScalar(torch.nn.Module):
    """`1.0 - int_mask` and `int_mask * 2.0`: a float scalar meets an integral tensor."""

    def forward(self, mask):
        return (1.0 - mask) + mask * 2.0


class NoopSqueeze(torch.nn.Module):
    """`x.squeeze(1)` where dimension 1 is 3: a no-op torch.export still records."""

    def forward(self, x):
        return x.squeeze(1) * 2


class ScatterReduce(torch.nn.Module):
    """`scatter_reduce` in every reduction the fix lowers."""

    def forward(self, x, index, src):
        total = torch.scatter_reduce(x, 0, index, src, reduce="sum")
        for reduce in ("sum", "mean", "amax", "amin"):
            total = total + torch.scatter_reduce(
                x, 0, index, src, reduce=reduce, include_self=False
            )
        return total


class IndexPutLastDim(torch.nn.Module):
    """`y[:, idx] = -1.0`: a scalar written on the last dimension, in place."""

    def forward(self, x, idx):
        y = x.clone()
        y[:, idx] = -1.0
        return y * 2


class DeadComparison(torch.nn.Module):
    """Runtime asserts on an unbacked size: `u0 >= 0`, `u0 <= 3`, `u0 < 4`, all settled by u0's range."""

    def forward(self, x, idx):
        n = idx.max().item()
        torch._check(n >= 0)
        torch._check(n < x.shape[0])
        return x[n] * 2


class SortStable(torch.nn.Module):
    """`torch.sort(x, stable=True)`: `aten.sort.stable`, with keyword-only `dim` and `descending`."""

    def forward(self, x):
        values, indices = torch.sort(x, dim=-1, descending=True, stable=True)
        return values * 2 + indices


class Alias(torch.nn.Module):
    """`aten.alias`: a view that is the whole tensor (what `x.view_as(x)` and friends leave)."""

    def forward(self, x):
        return torch.ops.aten.alias.default(x) * 2


class UnsortedTopK(torch.nn.Module):
    """`topk(sorted=False)`: ONNX `TopK(sorted=0)`, which ONNX Runtime may order differently."""

    def forward(self, x):
        values, indices = torch.topk(x, 3, dim=-1, sorted=False)
        return values.sort(dim=-1).values, indices.sort(dim=-1).values


class SymbolicSizes(torch.nn.Module):
    """Arithmetic on the sizes of dynamic axes (`--dynamic`): `_operator.mul`, `add`, `floordiv`."""

    def forward(self, x):
        rows = x.shape[0] * x.shape[1]
        return x.reshape(rows)[: rows // 2 + 1] * 2


class WritesInPlace(torch.nn.Module):
    """Every class of in-place write torch.export keeps in its training IR,
    each read after it (a write lost changes the outputs): `copy_` into
    slices of a new tensor (DeepSeek's key states), slice assignment,
    `index_put_`, `masked_fill_`, `add_` through a view, `fill_diagonal_`,
    a buffer's `copy_` (a buffer mutation), and a returned input's `copy_`
    (Mamba's cache state: an input mutation)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("last", torch.zeros(3, 6))

    def forward(self, x, mask, index, state):
        keys = x.new_empty(x.shape)
        keys[:, :2].copy_(x[:, :2] * 2)
        keys[:, 2:] = torch.tanh(x[:, 2:])
        y = x.clone()
        y[index] = 5.0
        y.masked_fill_(mask, -1.0)
        row = y[1]
        row.add_(keys[0])
        diagonal = torch.zeros_like(x)
        diagonal.fill_diagonal_(3.0)
        self.last.copy_(keys + y)
        state.copy_(torch.cat([state[:, 1:], x[:, :1]], dim=-1))
        return self.last + diagonal, state


class SymbolicFloatScale(torch.nn.Module):
    """A tensor times a symbolic float (`x * (x.shape[1] / 4)` on a dynamic
    axis): `aten.mul.Tensor` whose second operand is a `SymFloat`."""

    def forward(self, x):
        return x * (x.shape[1] / 4)


class SymbolicRemainder(torch.nn.Module):
    """`x % n` by a size of a dynamic axis: `aten.remainder.Scalar` whose
    second operand is a `SymInt`."""

    def forward(self, x):
        return torch.remainder(x, x.shape[1])


class ReferencePatchedCalls(torch.nn.Module):
    """The calls the reference patches for torch.onnx's exporter, each in the
    form the patch repairs: `torch.where` on mixed dtypes and Python scalars,
    `torch.full` of an int without a dtype (int64 in eager), `torch.masked.mean`
    and `torch.masked.var` (a sum divided by an integer count)."""

    def forward(self, condition, x, counts, mask):
        wide = torch.where(condition, x, x.double() * 2)
        where = torch.where(condition, x, counts) + torch.where(condition, x, 2)
        where = where + torch.where(condition, 1.5, x)
        full = torch.full((x.shape[0], 3), 7)
        masked = torch.masked.mean(x, mask=mask, dim=1) + torch.masked.var(x, mask=mask, dim=1)
        return wide, where, full, masked


class DepthwiseConvolution(torch.nn.Module):
    """Qwen3.5's causal depthwise `conv1d`; under `--dtype bfloat16` its input,
    weight and bias are bf16, which ONNX's `Conv` takes only from opset 22."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 4, 3, groups=4, padding=2)

    def forward(self, x):
        return self.conv(x)[..., : x.shape[-1]]


class ConstantGrid(torch.nn.Module):
    """A mask read at constant grids (`attention_mask[batch_idx, kv_idx]`):
    ONNX `GatherND` with constant indices."""

    def forward(self, mask):
        rows = torch.arange(2)[:, None]
        # [-3, -1, 1]: negative indices too.
        columns = torch.arange(3) * 2 - 3
        return mask[rows, columns]


class RotaryHalves(torch.nn.Module):
    """Rotary embedding in the halves layout on `[batch, heads, length, head_dim]`, its cos and sin
    computed from the positions as transformers' decoders do: ONNX Runtime's `RotaryEmbedding` when fused."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, 8, 2).float() / 8))

    def forward(self, x):
        positions = torch.arange(x.shape[2]).float()[None, :, None]
        freqs = positions * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)
        x1, x2 = x[..., :4], x[..., 4:]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class RotaryHalvesHeadsThird(torch.nn.Module):
    """Rotary embedding as Gemma 4 traces it: on `[batch, length, heads, head_dim]` (a projection
    split into heads, before the heads move second), after a per-head RMS norm, cos and sin unsqueezed at the heads' axis 2, the
    frequencies proportional (a quarter of them rotating, the rest zero: those dims kept as they are).
    ONNX Runtime's `RotaryEmbedding` on the heads merged when fused."""

    def __init__(self):
        super().__init__()
        rotating = 1.0 / 10000 ** (torch.arange(0, 2, 2).float() / 8)
        self.register_buffer("inv_freq", torch.cat([rotating, torch.zeros(3)]))
        self.norm_weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, 8))
        self.proj = torch.nn.Linear(16, 24, bias=False)

    def forward(self, hidden, position_ids):
        freqs = position_ids[:, :, None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().unsqueeze(2), emb.sin().unsqueeze(2)
        x = self.proj(hidden).view(hidden.shape[0], hidden.shape[1], -1, 8)
        x = x * torch.pow(x.pow(2).mean(-1, keepdim=True) + 1e-6, -0.5) * self.norm_weight
        x1, x2 = x[..., :4], x[..., 4:]
        return (x * cos + torch.cat((-x2, x1), dim=-1) * sin).transpose(1, 2)


class GroupQueryAttention(torch.nn.Module):
    """A decoder's attention over its KV cache as transformers' decoders trace it (4 query heads, 2
    key-value heads of 8): q, k, v split into heads, the new keys and values appended to the past
    (the presents, returned), the kv heads repeated, SDPA under a causal and padding mask. With
    `rotate`, q and k are rotated (rotate-half, positions from 0). ONNX Runtime's
    `GroupQueryAttention` when fused."""

    def __init__(self, rotate=False):
        super().__init__()
        self.q_proj = torch.nn.Linear(32, 32, bias=False)
        self.k_proj = torch.nn.Linear(32, 16, bias=False)
        self.v_proj = torch.nn.Linear(32, 16, bias=False)
        self.rotate = rotate

    def heads(self, projection, x):
        return projection(x).view(x.shape[0], x.shape[1], -1, 8).transpose(1, 2)

    def rotated(self, x):
        positions = torch.arange(x.shape[2]).float()[None, :, None]
        freqs = positions * (1.0 / 10000 ** (torch.arange(0, 8, 2).float() / 8))
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)
        if x.dtype != cos.dtype:  # a 16-bit model (`--dtype float16`) rotates in its own dtype
            cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        return x * cos + torch.cat((-x[..., 4:], x[..., :4]), dim=-1) * sin

    def attend(self, hidden, past_key, past_value, attention_mask):
        batch, length, _ = hidden.shape
        q, k, v = (self.heads(p, hidden) for p in (self.q_proj, self.k_proj, self.v_proj))
        if self.rotate:
            q, k = self.rotated(q), self.rotated(k)
        key = k if past_key is None else torch.cat([past_key, k], dim=-2)
        value = v if past_value is None else torch.cat([past_value, v], dim=-2)
        total = key.shape[2]
        positions = torch.arange(total)
        causal = positions[None, :] <= (torch.arange(length) + (total - length))[:, None]
        mask = torch.logical_and(causal[None, None], attention_mask[:, None, None, :].bool())

        def repeated(states):
            b, heads, n, d = states.shape
            return states[:, :, None].expand(b, heads, 2, n, d).reshape(b, heads * 2, n, d)

        out = torch.nn.functional.scaled_dot_product_attention(
            q, repeated(key), repeated(value), attn_mask=mask, scale=8**-0.5
        )
        return out.transpose(1, 2).reshape(batch, length, -1), key, value


class ComplexRotary(torch.nn.Module):
    """RoPE in complex numbers, as DeepSeek-V2 and Llama 4 compute it
    (`torch.polar`, `view_as_complex`, a complex product, `view_as_real`),
    with a complex quotient, a real term and a conjugate beside it."""

    def forward(self, x, angle):
        freqs = torch.polar(torch.ones_like(angle), angle)
        pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        rotated = pairs * freqs.unsqueeze(1)
        mixed = torch.conj_physical(rotated / (freqs.unsqueeze(1) + 2.0)) + x[..., ::2]
        out = torch.view_as_real(torch.cat([rotated, mixed], dim=-1)).flatten(3)
        return out.transpose(1, 2)


class RealFourier(torch.nn.Module):
    """FNet's mixing: the real part of a 2-D FFT over sequence and hidden."""

    def forward(self, x):
        return torch.fft.fftn(x, dim=(1, 2)).real + torch.fft.ifft(x, norm="ortho").imag


class HalfSpectrum(torch.nn.Module):
    """Half spectra back to real values (`aten._fft_c2r`): `irfft` of an odd
    length over a dimension other than the last, and `irfftn` over two."""

    def forward(self, x):
        odd = torch.fft.irfft(torch.fft.rfft(x, dim=1), n=x.shape[1], dim=1, norm="forward")
        plane = torch.fft.irfftn(torch.fft.rfftn(x, dim=(0, 2)), dim=(0, 2), norm="ortho")
        return odd, plane


class GroupQueryAttentionDecode(GroupQueryAttention):
    """One new token after a left-padded past."""

    def forward(self, hidden, past_key, past_value, attention_mask):
        return self.attend(hidden, past_key, past_value, attention_mask)


class GroupQueryAttentionPrefill(GroupQueryAttention):
    """A left-padded prompt, q and k rotated; its padding's rows attend to no key."""

    def __init__(self):
        super().__init__(rotate=True)

    def forward(self, hidden, attention_mask):
        return self.attend(hidden, None, None, attention_mask)


def _left_padded(batch_lengths, total):
    """A `[len(batch_lengths), total]` int64 mask, each row's tokens at its end."""
    return torch.tensor([[0] * (total - n) + [1] * n for n in batch_lengths])


PATTERNS = {
    "symbolic_sizes": (SymbolicSizes, lambda: (torch.randn(4, 6),)),
    "alias": (Alias, lambda: (torch.randn(3, 4),)),
    "unsorted_topk": (UnsortedTopK, lambda: (torch.randn(2, 9),)),
    "sort_stable": (SortStable, lambda: (torch.randn(3, 7),)),
    "dead_comparison": (DeadComparison, lambda: (torch.randn(4, 3), torch.tensor([1, 2]))),
    "index_put_last_dim": (IndexPutLastDim, lambda: (torch.randn(3, 6), torch.tensor([1, 4]))),
    "noop_squeeze": (NoopSqueeze, lambda: (torch.randn(2, 3),)),
    "scatter_reduce": (
        ScatterReduce,
        lambda: (torch.randn(5), torch.tensor([0, 1, 0, 3]), torch.randn(4)),
    ),
    "slice_implicit_start": (SliceImplicitStart, lambda: (torch.randn(3, 6),)),
    "integral_tensor_float_scalar": (
        IntegralTensorFloatScalar,
        lambda: (torch.randint(0, 2, (2, 5)),),
    ),
    "rotary_halves": (RotaryHalves, lambda: (torch.randn(2, 3, 5, 8),)),
    "rotary_halves_heads_third": (
        RotaryHalvesHeadsThird,
        lambda: (torch.randn(2, 5, 16), torch.arange(3, 8).repeat(2, 1)),
    ),
    "group_query_attention_decode": (
        GroupQueryAttentionDecode,
        lambda: (
            torch.randn(2, 1, 32),
            torch.randn(2, 2, 5, 8),
            torch.randn(2, 2, 5, 8),
            _left_padded([6, 3], 6),
        ),
    ),
    "group_query_attention_prefill": (
        GroupQueryAttentionPrefill,
        lambda: (torch.randn(2, 6, 32), _left_padded([6, 4], 6)),
    ),
    "writes_in_place": (
        WritesInPlace,
        lambda: (
            torch.randn(3, 6),
            torch.rand(3, 6) > 0.5,
            torch.tensor([0, 2]),
            torch.randn(3, 4),
        ),
    ),
    "symbolic_float_scale": (SymbolicFloatScale, lambda: (torch.randn(2, 8),)),
    "symbolic_remainder": (SymbolicRemainder, lambda: (torch.randn(2, 8) * 10,)),
    "reference_patched_calls": (
        ReferencePatchedCalls,
        lambda: (
            torch.randn(3, 6) > 0,
            torch.randn(3, 6),
            torch.randint(-4, 4, (3, 6)),
            torch.tensor([[1, 1, 0, 1, 0, 0], [1, 0, 1, 1, 1, 1], [0, 1, 1, 0, 0, 1]]).bool(),
        ),
    ),
    "depthwise_convolution": (DepthwiseConvolution, lambda: (torch.randn(2, 4, 8),)),
    "constant_grid": (ConstantGrid, lambda: (torch.randn(2, 4, 5),)),
    "complex_rotary": (ComplexRotary, lambda: (torch.randn(2, 4, 6, 8), torch.randn(1, 6, 4))),
    "real_fourier": (RealFourier, lambda: (torch.randn(2, 6, 8),)),
    "half_spectrum": (HalfSpectrum, lambda: (torch.randn(2, 7, 6),)),
}


def _model_fn(name):
    """`--model-fn python:fx_patterns:NAME`: the pattern's module and its inputs, by name."""

    def build():
        import inspect

        module, inputs = PATTERNS[name]
        torch.manual_seed(0)
        names = list(inspect.signature(module.forward).parameters)[1:]
        return module().eval(), dict(zip(names, inputs()))

    return build


for _name in PATTERNS:
    globals()[_name] = _model_fn(_name)


def export_all(outdir):
    os.makedirs(outdir, exist_ok=True)
    for name, (module, inputs) in PATTERNS.items():
        path = os.path.join(outdir, f"{name}.pt2")
        if os.path.exists(path):
            continue
        torch.manual_seed(0)
        ep = torch.export.export(module().eval(), inputs(), strict=False)
        # As hfx's worker traces for ONNX: writes in place functionalized.
        if any(
            isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable
            for n in ep.graph.nodes
        ):
            ep = ep.run_decompositions({})
        tmp = os.path.join(outdir, f".tmp-{os.getpid()}", f"{name}.pt2")
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
        torch.export.save(ep, tmp)
        os.replace(tmp, path)


def compare(name, fixed):
    module, inputs = PATTERNS[name]
    torch.manual_seed(1)
    x = inputs()
    eager = module().eval()(*x)
    got = torch.export.load(fixed).module()(*x)
    if eager.shape != got.shape or eager.dtype != got.dtype:
        raise SystemExit(
            f"{name}: {got.dtype}{tuple(got.shape)} vs eager {eager.dtype}{tuple(eager.shape)}"
        )
    if not torch.allclose(got, eager, atol=1e-4, rtol=1e-4):
        raise SystemExit(f"{name}: max |diff| {(got - eager).abs().max().item()}")
    print(f"{name}: matches eager")


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"export-all": export_all, "compare": compare}[command](*args)


def pt2e_quantized_linear():
    """`--model-fn python:fx_patterns:pt2e_quantized_linear`: a linear layer
    quantized by PT2E (torchao's `convert_pt2e`, XNNPACK's symmetric int8
    config): its weight dequantized per channel, its input quantized and
    dequantized per tensor (`quantized_decomposed.*`)."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e import allow_exported_model_train_eval
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    torch.manual_seed(0)
    x = torch.randn(2, 8)
    program = torch.export.export(torch.nn.Linear(8, 4).eval(), (x,))
    config = get_symmetric_quantization_config(is_per_channel=True)
    prepared = prepare_pt2e(program.module(), XNNPACKQuantizer().set_global(config))
    prepared(x)
    quantized = convert_pt2e(prepared)
    # The worker calls `.eval()` on the model it traces, which a converted
    # program refuses unless allowed (and then returns None, not the module).
    allow_exported_model_train_eval(quantized)
    return _Holding(quantized), {"x": x}


class _Holding(torch.nn.Module):
    """A module that only calls `inner`."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)
