"""Modules holding what the reference's OpenVINO workarounds
(`transformers/exporters/exporter_openvino.py`: its ConversionExtensions, FX
fixes and patches) are for, for `hfx run --backend openvino --model-fn
python:openvino_patterns:NAME --verify`. Each function returns
`(module, inputs)`. hfx's OpenVINO IR is its ONNX model through OpenVINO's
ONNX frontend, so each pattern shows that the ONNX stages' answer (a plugin)
holds in OpenVINO's runtime, or that the problem was OpenVINO's PyTorch
frontend's, which hfx does not run.

Run as a script, it checks what `--verify` cannot: `fused XML LAYER...`
compiles the IR on OpenVINO's CPU plugin and fails unless its runtime model
holds a layer of each type named (`RoPE`: the plugin fused a rotary
embedding); `resized MODEL PATTERN SHAPE` runs a dynamic export (an IR on
OpenVINO's CPU plugin, an ONNX model on ONNX Runtime) of a one-input pattern
at another input shape and compares it with eager; `dft_axis_input`,
`gather_index_extent`, `oversize_average_pool` and `expand_to_no_axes` show
why plugins/onnx/translate-fft moves an opset-20 `DFT`'s dimension to 1, why
plugins/onnx/translate-shape pads a narrower `GatherElements` index, why
plugins/onnx/translate-pooling cuts a kernel to the padded input, and why
hfx's optimizer removes an `Expand` to no dims.
"""

import math
import sys

import fx_patterns
import torch
import torch.nn.functional as F

# The patch patterns the reference also patches for OpenVINO, under the names
# `--model-fn python:openvino_patterns:NAME` finds them by.
from patch_patterns import (  # noqa: F401
    bincount,
    byte_group_hashes,
    cumulative_extremum,
    grouped_mm,
    histograms,
    sorted_search,
    vmap_mask,
)


def _pair(module, **inputs):
    return module.eval(), inputs


class SizeArithmetic(torch.nn.Module):
    """Python arithmetic on a symbolic size, each result a tensor's extent or
    a scale: `+ - * / // % **`, `min`/`max` and `torch.sym_min`/`sym_max`;
    the floor division and modulo of negative operands round toward -inf, as
    Python's do."""

    def forward(self, x):
        n = x.shape[1]
        sizes = [
            n + 1,
            n - 1,
            n * 2,
            n // 3,
            -(-n // 3),
            (-n) % 4,
            n**2 // n,
            min(n, 5),
            max(n, 5),
            torch.sym_min(n, 5),
            torch.sym_max(n, 5),
        ]
        extents = [x[:, :1].expand(2, size) * (i + 1) for i, size in enumerate(sizes)]
        return extents + [x * (n / 4)]


def size_arithmetic():
    return _pair(SizeArithmetic(), x=torch.randn(2, 7))


class SizeRounding(torch.nn.Module):
    """`math.floor`/`math.ceil`/`math.trunc` of a symbolic size's quotient
    (`batch * ceil(seq / chunk)`), and of `torch.sym_float` of one scaled;
    the last a quotient rounded below zero and negated back."""

    def forward(self, x):
        n = x.shape[1]
        sizes = [
            math.floor(n / 3),
            math.ceil(n / 3),
            math.trunc(n / 2),
            math.ceil(torch.sym_float(n) * 0.5),
            -math.floor(-n / 4),
        ]
        return [x[:, :1].expand(2, size) * (i + 1) for i, size in enumerate(sizes)]


def size_rounding():
    return _pair(SizeRounding(), x=torch.randn(2, 7))


class MatmulOutDtype(torch.nn.Module):
    """`torch.mm(..., out_dtype=torch.float32)` of float16 activations and
    weight, Kolibri1's router on CUDA (float32 logits from a 16-bit product):
    the trace holds `aten.mm.dtype`."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(6, 8).to(torch.float16))

    def forward(self, hidden):
        flat = hidden.reshape(-1, 8)
        return (torch.mm(flat, self.weight.t(), out_dtype=torch.float32),)


# `aten.mm.dtype` has a kernel for CUDA only; torch.export traces it on CPU
# (its meta kernel), but the eager reference needs one. This is the product
# the CUDA kernel computes: the operands in `out_dtype`, accumulated there.
# Registered while this process holds it, once.
_MM_DTYPE_ON_CPU = []


def mm_out_dtype():
    if not _MM_DTYPE_ON_CPU:
        kernels = torch.library.Library("aten", "IMPL")
        kernels.impl(
            "mm.dtype", lambda a, b, out_dtype: torch.mm(a.to(out_dtype), b.to(out_dtype)), "CPU"
        )
        _MM_DTYPE_ON_CPU.append(kernels)
    torch.manual_seed(0)
    return _pair(MatmulOutDtype(), hidden=torch.randn(2, 3, 8).to(torch.float16))


class IndexAdd(torch.nn.Module):
    """`index_add` with `alpha` defaulted (which torch leaves out of the call) and given."""

    def forward(self, x, index, source):
        return x.index_add(0, index, source), x.index_add(1, index[:2], x[:, :2], alpha=0.5)


def index_add():
    return _pair(
        IndexAdd(),
        x=torch.randn(5, 4),
        index=torch.tensor([0, 2, 2, 4]),
        source=torch.randn(4, 4),
    )


class FlatHeadAttention(torch.nn.Module):
    """Eager attention with batch and heads in one dim, `bmm -> softmax -> bmm`
    (SpeechT5's relative-position attention), which OpenVINO's PyTorch
    frontend fused into a mis-shaped SDPA."""

    def forward(self, q, k, v):
        batch, heads, length, dim = q.shape
        flat = [t.reshape(batch * heads, length, dim) for t in (q, k, v)]
        scores = torch.bmm(flat[0], flat[1].transpose(1, 2)) * dim**-0.5
        out = torch.bmm(scores.softmax(-1), flat[2])
        return out.reshape(batch, heads, length, dim)


def flat_head_attention():
    return _pair(
        FlatHeadAttention(),
        q=torch.randn(2, 3, 5, 8),
        k=torch.randn(2, 3, 5, 8),
        v=torch.randn(2, 3, 5, 8),
    )


class Casts(torch.nn.Module):
    """`_to_copy` to bool, int64, float16 and back, and a bool mask cast then combined."""

    def forward(self, x, mask):
        flags = (x > 0).to(torch.int32).to(torch.bool)
        return (
            x.to(torch.int64),
            x.to(torch.float16).to(torch.float32),
            torch.bitwise_and(flags, mask.to(torch.bool)),
        )


def casts():
    return _pair(Casts(), x=torch.randn(3, 4) * 4, mask=torch.tensor([[1, 0, 1, 1]] * 3))


class LayerNorms(torch.nn.Module):
    """`layer_norm` with weight and bias, without either (`None`), and over two dims."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(x), F.layer_norm(x, (8,)), F.layer_norm(x, (4, 8), eps=1e-3)


def layer_norms():
    return _pair(LayerNorms(), x=torch.randn(2, 4, 8))


class Attention(torch.nn.Module):
    """`scaled_dot_product_attention` as the reference's OpenVINO patch and
    conversion meet it: grouped-query (K/V with fewer heads), a non-default
    `scale`, a boolean mask with a row masked at every key, a float additive
    mask, and `is_causal`."""

    def forward(self, q, k, v, mask):
        additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
        additive[..., -1, :] = 0.0
        return (
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True, is_causal=True),
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3, enable_gqa=True),
            F.scaled_dot_product_attention(q, k, v, attn_mask=additive, enable_gqa=True),
        )


def attention():
    mask = torch.ones(2, 1, 6, 6, dtype=torch.bool).tril()
    mask[1, :, -2:, :] = False
    return _pair(
        Attention(),
        q=torch.randn(2, 4, 6, 8),
        k=torch.randn(2, 2, 6, 8),
        v=torch.randn(2, 2, 6, 8),
        mask=mask,
    )


class BitwiseNot(torch.nn.Module):
    """`~` of a bool mask and of an int tensor, on a dynamic size."""

    def forward(self, x, ints):
        return ~(x > 0), ~ints


def bitwise_not():
    return _pair(BitwiseNot(), x=torch.randn(2, 6), ints=torch.arange(12).reshape(2, 6))


class SymbolicPad(torch.nn.Module):
    """Padding by a symbolic amount (mamba2's chunked scan pads its sequence by
    `(chunk - seq % chunk) % chunk`), and cropping by one (a negative amount)."""

    def forward(self, x):
        seq = x.shape[1]
        padded = F.pad(x, (0, 0, 0, (4 - seq % 4) % 4))
        cropped = F.pad(x, (0, 0, 0, 3 - seq))
        return padded * 2, cropped


def symbolic_pad():
    return _pair(SymbolicPad(), x=torch.randn(2, 6, 3))


class GatherNarrowIndex(torch.nn.Module):
    """`gather` with an index smaller than the data on a dim other than the axis."""

    def forward(self, x, index):
        return torch.gather(x, 1, index)


def gather_narrow_index():
    return _pair(
        GatherNarrowIndex(), x=torch.randn(4, 6), index=torch.tensor([[0, 5, 2], [1, 1, 3]])
    )


class NarrowIntItem(torch.nn.Module):
    """A size read with `.item()` off an int32 tensor, then a reshape's extent;
    the `torch._check`s on it are runtime asserts in the graph."""

    def forward(self, x, grid):
        rows = grid[0].item()
        torch._check(rows >= 1)
        torch._check(x.shape[0] % rows == 0)
        return x.reshape(rows, -1) * 2


def narrow_int_item():
    return _pair(NarrowIntItem(), x=torch.randn(12), grid=torch.tensor([3, 4], dtype=torch.int32))


class EmptyCat(torch.nn.Module):
    """A legacy empty `f32[0]` concatenated with a 4-D tensor on dim -2 (a cache's first update)."""

    def forward(self, x):
        empty = torch.tensor([])
        return torch.cat([empty, x], dim=-2) * 2


def empty_cat():
    return _pair(EmptyCat(), x=torch.randn(1, 2, 3, 4))


class EmptyExpand(torch.nn.Module):
    """A `[1, 0, C]` parameter (no register tokens) expanded to the batch and concatenated."""

    def __init__(self):
        super().__init__()
        self.register_tokens = torch.nn.Parameter(torch.zeros(1, 0, 4))

    def forward(self, x):
        tokens = self.register_tokens.expand(x.shape[0], -1, -1)
        return torch.cat([x, tokens], dim=1) * 2


def empty_expand():
    return _pair(EmptyExpand(), x=torch.randn(2, 3, 4))


class ElementWrite(torch.nn.Module):
    """Single elements written in place into a tensor sized by the input,
    each to a value computed from a symbolic size (BEiT's relative position
    index: `index[0, 0] = n - 1`): each write copies a 0-d value into a 0-d
    view."""

    def forward(self, x):
        n = x.shape[1]
        index = torch.zeros(n + 1, n + 1, dtype=torch.long)
        index[1:, 1:] = torch.arange(n * n).reshape(n, n)
        index[0, 1:] = n + 1
        index[0, 0] = n - 1
        return x[:, :1] * index.to(x.dtype).sum(1), index


def element_write():
    return _pair(ElementWrite(), x=torch.randn(2, 6))


class ViewInferredDim(torch.nn.Module):
    """`x.view(batch, -1, 4, 2)` where the batch is symbolic and -1 is inferred."""

    def forward(self, x):
        return x.view(x.shape[0], -1, 4, 2) * 2


def view_inferred_dim():
    return _pair(ViewInferredDim(), x=torch.randn(2, 3, 8))


class IndexPutNone(torch.nn.Module):
    """`y[:, :, idx] = value`: `index_put` with `None` indices and a scalar value."""

    def forward(self, x, idx):
        y = x.clone()
        y[:, :, idx] = -7.0
        return y


def index_put_none():
    return _pair(IndexPutNone(), x=torch.randn(2, 3, 5), idx=torch.tensor([0, 3]))


class IndexPutBoolMask(torch.nn.Module):
    """`x[mask] = row`: a boolean mask over the leading dims, a value broadcast over the rest."""

    def forward(self, x, ids, row):
        y = x.clone()
        y[ids == 2] = row
        return y


def index_put_bool_mask():
    return _pair(
        IndexPutBoolMask(),
        x=torch.randn(2, 4, 3),
        ids=torch.tensor([[1, 2, 3, 2], [2, 0, 0, 1]]),
        row=torch.randn(3),
    )


class ToInGradSubgraph(torch.nn.Module):
    """`aten.to` (dtype, and dtype with device) inside `no_grad` and
    `set_grad_enabled(False)` regions (Chameleon's rotary)."""

    def forward(self, x):
        with torch.no_grad():
            y = x.to(torch.float64) * 2
        with torch.set_grad_enabled(False):
            z = x.to(dtype=torch.float16, device="cpu")
        return y.to(torch.float32) + z.float()


def to_in_grad_subgraph():
    return _pair(ToInGradSubgraph(), x=torch.randn(2, 4))


class Negations(torch.nn.Module):
    """`-x`, `torch.neg`, `Tensor.neg` in llama's `rotate_half`."""

    def forward(self, x):
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return rotated + torch.neg(x) + x.neg()


def negations():
    return _pair(Negations(), x=torch.randn(2, 3, 8))


class Antialias(torch.nn.Module):
    """Downsampling with `antialias=True` (siglip2's position embeddings), bilinear and bicubic."""

    def forward(self, x):
        return (
            F.interpolate(x, size=(3, 5), mode="bilinear", antialias=True),
            F.interpolate(x, size=(4, 3), mode="bicubic", antialias=True),
        )


def antialias():
    return _pair(Antialias(), x=torch.randn(1, 2, 9, 11))


class OversizeAvgPool(torch.nn.Module):
    """An average pool whose kernel is larger than the input (EfficientNet's pooler), `ceil_mode`;
    and with padding, the kernel larger than the padded width only, counting the padding and not."""

    def __init__(self):
        super().__init__()
        self.pool = torch.nn.AvgPool2d(7, ceil_mode=True)

    def forward(self, x):
        return (
            self.pool(x),
            F.avg_pool2d(x, 3, stride=2, ceil_mode=True),
            F.avg_pool2d(x, 7, padding=1, ceil_mode=True),
            F.avg_pool2d(x, 7, padding=1, ceil_mode=True, count_include_pad=False),
        )


def oversize_avg_pool():
    return _pair(OversizeAvgPool(), x=torch.randn(1, 2, 5, 4))


class Unfold(torch.nn.Module):
    """`Tensor.unfold` of a 3-D input (PatchTST's patches), overlapping and not."""

    def forward(self, x):
        return x.unfold(-1, 4, 2), x.unfold(1, 2, 2)


def unfold():
    return _pair(Unfold(), x=torch.randn(2, 4, 10))


class EmbeddingBag(torch.nn.Module):
    """`embedding_bag` of 2-D input (one bag a row) in each mode, and weighted sums."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(10, 4))

    def forward(self, ids, weights):
        return (
            F.embedding_bag(ids, self.weight, mode="mean"),
            F.embedding_bag(ids, self.weight, mode="max"),
            F.embedding_bag(ids, self.weight, mode="sum", per_sample_weights=weights),
        )


def embedding_bag():
    return _pair(EmbeddingBag(), ids=torch.tensor([[1, 2, 4], [4, 3, 9]]), weights=torch.rand(2, 3))


class CumulativeSums(torch.nn.Module):
    """`cumsum` of a bool mask (OPT's positions), of int32, and of float."""

    def forward(self, mask, x):
        return (mask > 0).cumsum(-1), mask.to(torch.int32).cumsum(1), torch.cumsum(x, 0)


def cumulative_sums():
    return _pair(
        CumulativeSums(),
        mask=torch.tensor([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1]]),
        x=torch.randn(2, 5),
    )


class ScatterReduceInPlace(torch.nn.Module):
    """`Tensor.scatter_reduce_`, sum with and without the input (BLT's hash embedding pooling)."""

    def forward(self, x, index, src):
        summed = x.clone().scatter_reduce_(0, index, src, reduce="sum")
        fresh = x.clone().scatter_reduce_(0, index, src, reduce="sum", include_self=False)
        return summed, fresh


def scatter_reduce_in_place():
    return _pair(
        ScatterReduceInPlace(),
        x=torch.randn(4),
        index=torch.tensor([0, 1, 1, 3, 3, 3]),
        src=torch.randn(6),
    )


def scatter_reduce():
    return _pair(
        fx_patterns.ScatterReduce(),
        x=torch.randn(4, 3),
        index=torch.tensor([[0, 1, 2], [0, 0, 1], [3, 1, 2]]),
        src=torch.randn(3, 3),
    )


class Complex(torch.nn.Module):
    """Complex numbers built with `torch.complex` and `torch.polar` (RoPE in
    polar form), conjugated, multiplied, read back with `view_as_real`."""

    def forward(self, x, y, angle):
        product = torch.complex(x, y).conj() * torch.complex(y, x)
        rotated = torch.polar(torch.ones_like(angle), angle) * product
        return torch.view_as_real(product), torch.view_as_real(rotated)


def complex():
    return _pair(Complex(), x=torch.randn(2, 4), y=torch.randn(2, 4), angle=torch.randn(2, 4))


class EmptyPermuted(torch.nn.Module):
    """`torch.empty_permuted`, then filled (what MoE expert paths allocate)."""

    def forward(self, x):
        buffer = torch.empty_permuted((x.shape[1], x.shape[0]), (1, 0))
        return buffer.copy_(x.T) * 2


def empty_permuted():
    return _pair(EmptyPermuted(), x=torch.randn(3, 4))


class Random(torch.nn.Module):
    """`randn`, `randn_like`, `randint`, `bernoulli` and `randperm`, each read
    so the output does not depend on the draw: the IR must hold them, and run."""

    def forward(self, x, certain):
        normal = torch.randn(x.shape).abs() >= 0
        like = torch.randn_like(x).abs() >= 0
        ints = torch.randint(2, 5, x.shape)
        within = torch.logical_and(ints >= 2, ints < 5)
        order = torch.sort(torch.randperm(x.shape[1])).values
        return normal, like, within, torch.bernoulli(certain), x + order.to(x.dtype)


def random():
    certain = (torch.arange(8) % 3 == 0).to(torch.float32).reshape(2, 4)
    return _pair(Random(), x=torch.randn(2, 4), certain=certain)


class Fourier(torch.nn.Module):
    """torch.fft's transforms as the reference patches each for OpenVINO:
    `rfft` and `irfft` (an odd `n` given, and the even one inferred, `norm`
    "ortho"), `rfftn`/`irfftn` over the first and last dimensions, `fftn`/
    `ifftn` (`norm` "forward"), `fft`/`ifft` over dimension 0, and `fft` of a
    1-D signal: each a dimension other than 1, which an opset-20 `DFT`
    names by an input OpenVINO's ONNX frontend does not read."""

    def forward(self, x):
        spectrum = torch.fft.rfft(x)
        reversed_ = torch.fft.irfft(spectrum.conj() * 0.5, n=x.shape[-1])
        even = torch.fft.irfft(spectrum, norm="ortho")
        plane = torch.fft.irfftn(
            torch.fft.rfftn(x, dim=(0, 2)) * 2, s=(x.shape[0], x.shape[2]), dim=(0, 2)
        )
        mixed = torch.fft.ifftn(torch.fft.fftn(x, dim=(1, 2), norm="forward") * 3, dim=(1, 2))
        line = torch.fft.ifft(torch.fft.fft(x, dim=0).conj(), dim=0)
        signal = torch.fft.fft(x[0, 0])
        return (
            torch.view_as_real(spectrum),
            reversed_,
            even,
            plane,
            torch.view_as_real(mixed),
            torch.view_as_real(line),
            torch.view_as_real(signal),
        )


def fourier():
    return _pair(Fourier(), x=torch.randn(3, 6, 7))


# ── Models whose functions the reference patches for OpenVINO ──


def _audio_config(**extra):
    return dict(
        vocab_size=32,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(16, 16, 16),
        conv_stride=(5, 2, 2),
        conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        apply_spec_augment=False,
        **extra,
    )


def _padded_waveform():
    """Two waveforms, the second's last 120 samples padding (the attention mask's zeros)."""
    mask = torch.ones(2, 400, dtype=torch.long)
    mask[1, -120:] = 0
    return {"input_values": torch.randn(2, 400), "attention_mask": mask}


def wavlm_padded():
    """WavLM with an attention mask: `_get_feature_vector_attention_mask` downsamples it."""
    import transformers

    torch.manual_seed(0)
    config = transformers.WavLMConfig(
        **_audio_config(num_buckets=16, max_bucket_distance=32, feat_extract_norm="layer")
    )
    return transformers.WavLMModel(config).eval(), _padded_waveform()


def data2vec_audio_padded():
    """Data2VecAudio with an attention mask, as `wavlm_padded`."""
    import transformers

    torch.manual_seed(0)
    config = transformers.Data2VecAudioConfig(**_audio_config(num_adapter_layers=1))
    return transformers.Data2VecAudioModel(config).eval(), _padded_waveform()


def phi3_longrope():
    """Phi-3 with LongRoPE scaling: the short or long factors chosen by the sequence length."""
    import transformers

    torch.manual_seed(0)
    config = transformers.Phi3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        original_max_position_embeddings=16,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        rope_parameters={
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "short_factor": [1.0, 1.5, 2.0, 2.5],
            "long_factor": [2.0, 3.0, 4.0, 5.0],
            "original_max_position_embeddings": 16,
        },
    )
    ids = torch.randint(3, 64, (2, 8))
    model = transformers.Phi3ForCausalLM(config).eval()
    return model, {"input_ids": ids, "attention_mask": torch.ones(2, 8, dtype=torch.long)}


def llama4_vision():
    """Llama 4's vision encoder (2-D rotary embeddings in complex numbers:
    `vision_apply_rotary_emb`; pixel shuffle to 4 tokens per image) and two
    16x16 images. The whole Llama 4 (`Llama4ForConditionalGeneration`) does
    not run in eager in transformers 5.24: its forward reads an
    `image_outputs` its language model's output does not have."""
    import transformers

    torch.manual_seed(0)
    config = transformers.Llama4VisionConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        # The pixel shuffle's MLP reads it: 4 patches' features, 4 x 32.
        intermediate_size=128,
        image_size=16,
        patch_size=4,
        pixel_shuffle_ratio=0.5,
        projector_input_dim=32,
        projector_output_dim=32,
        vision_output_dim=32,
    )
    model = transformers.Llama4VisionModel(config).eval()
    generator = torch.Generator().manual_seed(0)
    return model, {"pixel_values": torch.randn(2, 3, 16, 16, generator=generator)}


def qwen3_moe_grouped_mm():
    """Qwen3-MoE with grouped_mm experts in float32: the trace calls
    `transformers::grouped_mm_fallback`. The experts' forward is the grouped
    implementation itself, set on the instance: for OpenVINO,
    plugins/onnx/patch-tiled-experts replaces the class's dispatch."""
    import functools

    import transformers
    from transformers.integrations.moe import grouped_mm_experts_forward

    torch.manual_seed(0)
    config = transformers.Qwen3MoeConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        num_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
    )
    config._experts_implementation = "grouped_mm"
    model = transformers.Qwen3MoeForCausalLM(config).eval()
    experts = model.model.layers[0].mlp.experts
    experts.forward = functools.partial(grouped_mm_experts_forward, experts)
    ids = torch.randint(3, 64, (2, 8))
    return model, {"input_ids": ids, "attention_mask": torch.ones(2, 8, dtype=torch.long)}


def qwen3_moe_experts():
    """Qwen3-MoE whose expert weights are each past the 4096 elements the ONNX
    optimizer folds: a smaller one's transpose would be computed at export
    time, and OpenVINO's match of the tiled experts reads the weight
    untransposed behind the matmul's `transpose_b`."""
    import transformers

    torch.manual_seed(0)
    config = transformers.Qwen3MoeConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=64,
        moe_intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
    )
    model = transformers.Qwen3MoeForCausalLM(config).eval()
    ids = torch.randint(3, 64, (2, 8))
    return model, {"input_ids": ids, "attention_mask": torch.ones(2, 8, dtype=torch.long)}


def compiled_layers(xml):
    """The layer types of `xml` as the CPU plugin compiles it (its runtime model)."""
    openvino = _openvino()

    core = openvino.Core()
    compiled = core.compile_model(core.read_model(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return {
        op.get_rt_info()["layerType"].astype(str)
        for op in compiled.get_runtime_model().get_ordered_ops()
    }


def fused(xml, *layers):
    """Fails unless the CPU plugin's compiled `xml` holds a layer of each type in `layers`."""
    found = compiled_layers(xml)
    missing = [layer for layer in layers if layer not in found]
    if missing:
        sys.exit(f"{xml}: no {missing} layer in the compiled model; it has {sorted(found)}")


def unfused(xml, *layers):
    """Fails if the CPU plugin's compiled `xml` holds a layer of a type in `layers`."""
    found = compiled_layers(xml)
    present = [layer for layer in layers if layer in found]
    if present:
        sys.exit(f"{xml}: {present} layer(s) in the compiled model: {sorted(found)}")


def _openvino():
    sys.modules.setdefault("openvino_telemetry", None)
    import openvino

    return openvino


def resized(path, pattern, shape):
    """Fails unless `path` (an `.xml` IR or an `.onnx` model exported from
    one-input `pattern` with dynamic axes) computes eager's outputs, 1e-3,
    on a random input of `shape` (`2,5,8`) in the sample input's dtype."""
    import numpy as np

    module, inputs = globals()[pattern]()
    (name,) = inputs
    torch.manual_seed(1)
    x = torch.randn(*map(int, shape.split(",")), dtype=inputs[name].dtype)
    with torch.no_grad():
        want = [w.numpy() for w in module(x)]
    if path.endswith(".onnx"):
        import onnxruntime

        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = session.run(None, {name: x.numpy()})
    else:
        openvino = _openvino()
        core = openvino.Core()
        hint = {"INFERENCE_PRECISION_HINT": "f32"}
        request = core.compile_model(core.read_model(path), "CPU", hint).create_infer_request()
        request.infer({name: x.numpy()})
        got = [request.get_output_tensor(i).data for i in range(len(want))]
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if g.shape != w.shape or not np.allclose(g, w, atol=1e-3, rtol=1e-3):
            error = (
                np.abs(g - w).max() if g.shape == w.shape else f"shape {g.shape}, eager {w.shape}"
            )
            sys.exit(f"{path}: output {i} at input {shape} differs from eager: {error}")


def dft_axis_input():
    """Fails unless OpenVINO's ONNX frontend still reads an opset-20 `DFT`
    over dimension 2 (its `axis` input) as one over dimension 1 (the opset-17
    attribute's default) while ONNX Runtime computes dimension 2: the reason
    translate-fft writes every opset-20 `DFT` over dimension 1."""
    import numpy as np
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper

    axis = helper.make_tensor("axis", TensorProto.INT64, [], [2])
    node = helper.make_node("DFT", ["x", "", "axis"], ["y"])
    shape = [2, 6, 8, 2]
    graph = helper.make_graph(
        [node],
        "dft",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [axis],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    fft = np.fft.fft(x[..., 0] + 1j * x[..., 1], axis=2)
    want = np.stack([fft.real, fft.imag], -1)
    ort = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    core = _openvino().Core()
    compiled = core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU")
    got = compiled({"x": x})[0]
    if not np.allclose(ort, want, atol=1e-4):
        sys.exit(
            "ONNX Runtime's opset-20 DFT does not transform the dimension its axis input names"
        )
    fft_1 = np.fft.fft(x[..., 0] + 1j * x[..., 1], axis=1)
    if np.allclose(got, want, atol=1e-4):
        sys.exit(
            "OpenVINO now reads an opset-20 DFT's axis input: translate-fft's transposes are not needed"
        )
    if not np.allclose(got, np.stack([fft_1.real, fft_1.imag], -1), atol=1e-4):
        sys.exit("OpenVINO's opset-20 DFT over dimension 2 computes neither dimension 2 nor 1")


def expand_to_no_axes():
    """Fails unless OpenVINO's ONNX frontend still reads an `Expand` of a
    rank-0 value to the shape `[]` as one to `[1]`
    (openvinotoolkit/openvino#37598), while ONNX Runtime keeps it rank 0, as
    broadcasting with no dims does: the reason hfx's optimizer removes such an
    `Expand` (`expand_to_no_axes`), which a copy into a 0-d view translates to."""
    import numpy as np
    import onnxruntime
    from onnx import TensorProto, helper

    io = ([("x", TensorProto.FLOAT, [])], ("y", TensorProto.FLOAT, []))
    model = _onnx_model([helper.make_node("Expand", ["x", "no_axes"], ["y"])], *io, {"no_axes": []})
    x = np.array(3.0, np.float32)
    got = onnxruntime.InferenceSession(model).run(None, {"x": x})[0]
    if got.shape != ():
        sys.exit(f"ONNX Runtime's Expand of a rank-0 value to [] has shape {got.shape}, not ()")
    core = _openvino().Core()
    shape = core.compile_model(core.read_model(model, b""), "CPU")({"x": x})[0].shape
    if shape == ():
        sys.exit(
            "OpenVINO now keeps an Expand to [] rank 0: expand_to_no_axes is a simplification only"
        )
    if shape != (1,):
        sys.exit(
            f"OpenVINO's Expand of a rank-0 value to [] has shape {shape}, neither () nor (1,)"
        )


def _onnx_model(nodes, inputs, output, constants):
    """An opset-20 ONNX model: `inputs` and `output` as (name, element type, shape)."""
    import onnx
    from onnx import helper

    graph = helper.make_graph(
        nodes,
        "pattern",
        [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(*output)],
        [helper.make_tensor(n, onnx.TensorProto.INT64, [len(v)], v) for n, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString()


def gather_index_extent():
    """Fails unless OpenVINO's CPU plugin still refuses a `GatherElements`
    whose index is narrower than its data off the axis, as it is and with
    the data sliced to the index's extent in front (its transformations fold
    that `Slice` away), while ONNX Runtime computes both: the reason
    translate-shape pads the index instead."""
    import numpy as np
    import onnxruntime
    from onnx import TensorProto, helper

    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    index = np.array([[0, 5, 2], [1, 1, 3]])
    want = np.take_along_axis(x[:2], index, 1)
    io = (
        [("x", TensorProto.FLOAT, [4, 6]), ("index", TensorProto.INT64, [2, 3])],
        ("y", TensorProto.FLOAT, [2, 3]),
    )
    gather = helper.make_node("GatherElements", ["data", "index"], ["y"], axis=1)
    forms = {
        "as it is": _onnx_model([helper.make_node("Identity", ["x"], ["data"]), gather], *io, {}),
        "data sliced": _onnx_model(
            [helper.make_node("Slice", ["x", "zero", "rows", "zero"], ["data"]), gather],
            *io,
            {"zero": [0], "rows": [2]},
        ),
    }
    core = _openvino().Core()
    for form, model in forms.items():
        got = onnxruntime.InferenceSession(model).run(None, {"x": x, "index": index})[0]
        if not np.allclose(got, want):
            sys.exit(
                f"ONNX Runtime's GatherElements, index narrower ({form}), differs from torch's gather"
            )
        try:
            core.compile_model(core.read_model(model, b""), "CPU")({"x": x, "index": index})
        except RuntimeError as refused:
            if "are not consistent" not in str(refused):
                raise
        else:
            sys.exit(f"OpenVINO now computes a GatherElements with a narrower index ({form})")


def oversize_average_pool():
    """Fails unless OpenVINO still refuses an `AveragePool` (`ceil_mode`)
    whose kernel is larger than its input, which ONNX Runtime computes as
    torch does (one window, the input's mean): the reason translate-pooling
    cuts such a kernel to the padded input."""
    import numpy as np
    import onnxruntime
    from onnx import TensorProto, helper

    x = np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32)
    pool = helper.make_node(
        "AveragePool", ["x"], ["y"], kernel_shape=[7, 7], strides=[7, 7], ceil_mode=1
    )
    io = ([("x", TensorProto.FLOAT, [1, 2, 5, 5])], ("y", TensorProto.FLOAT, [1, 2, 1, 1]))
    model = _onnx_model([pool], *io, {})
    got = onnxruntime.InferenceSession(model).run(None, {"x": x})[0]
    if not np.allclose(got, x.mean(axis=(2, 3), keepdims=True), atol=1e-6):
        sys.exit(
            "ONNX Runtime's AveragePool with a kernel larger than the input is not the input's mean"
        )
    core = _openvino().Core()
    try:
        core.compile_model(core.read_model(model, b""), "CPU")({"x": x})
    except RuntimeError as refused:
        if "larger than the data shape after padding" not in str(refused):
            raise
    else:
        sys.exit("OpenVINO now pools with a kernel larger than the input")


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    commands = {
        "fused": fused,
        "unfused": unfused,
        "resized": resized,
        "dft_axis_input": dft_axis_input,
        "expand_to_no_axes": expand_to_no_axes,
        "gather_index_extent": gather_index_extent,
        "oversize_average_pool": oversize_average_pool,
    }
    commands[command](*arguments)
