"""Modules holding the patterns the patch plugins rewrite, for
`hfx run --model-fn python:patch_patterns:NAME`. Each function returns
`(module, inputs)`; `second_inputs(NAME)` gives inputs of another size for
dynamic exports."""

import torch
import torch.nn.functional as F
from tiny_models import TINY_DECODER


def _pair(module, **inputs):
    return module.eval(), inputs


class SplitSymbolic(torch.nn.Module):
    def forward(self, x):
        first, second = x.split(x.shape[1] // 2, dim=1)
        return first * 2 + second


def split_symbolic(length=8):
    return _pair(SplitSymbolic(), x=torch.randn(2, length, 4))


class ChunkSymbolic(torch.nn.Module):
    def forward(self, x):
        first, second = torch.chunk(x, 2, dim=1)
        return first * 2 + second


def chunk_symbolic(length=8):
    return _pair(ChunkSymbolic(), x=torch.randn(2, length, 4))


class Roll(torch.nn.Module):
    def forward(self, x):
        return torch.roll(x, shifts=3, dims=1) + x.roll((1, -2), (0, 1))


def roll(length=8):
    return _pair(Roll(), x=torch.randn(3, length))


class ReshapeTransposed(torch.nn.Module):
    def forward(self, x):
        return x.transpose(1, 2).reshape(x.shape[0], -1) + x.view(x.shape[0], -1)


def reshape_transposed(length=6):
    return _pair(ReshapeTransposed(), x=torch.randn(2, 4, 4))


class ComplexRotation(torch.nn.Module):
    def forward(self, x, y):
        z = torch.exp(torch.complex(x, y)).unsqueeze(1)
        return torch.view_as_real(z)


def complex_rotation(length=8):
    return _pair(ComplexRotation(), x=torch.randn(2, length), y=torch.randn(2, length))


class MaskedScatter(torch.nn.Module):
    def forward(self, x, mask, source):
        return x.masked_scatter(mask, source) * 2


def masked_scatter(length=8):
    generator = torch.Generator().manual_seed(1)
    mask = torch.rand(2, length, generator=generator) > 0.5
    return _pair(
        MaskedScatter(), x=torch.randn(2, length), mask=mask, source=torch.randn(2, length)
    )


class RmsNorms(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.plain = torch.nn.RMSNorm(8, elementwise_affine=False)
        self.wide = torch.nn.RMSNorm((3, 8), eps=1e-5, elementwise_affine=False)
        self.affine = torch.nn.RMSNorm(8)

    def forward(self, x):
        return self.plain(x) + self.wide(x) + self.affine(x)


def rms_norms(length=3):
    return _pair(RmsNorms(), x=torch.randn(2, 3, 8) * 3)


class Histograms(torch.nn.Module):
    def forward(self, x):
        return torch.histc(x, bins=6, min=-1.0, max=1.0), torch.histc(x, bins=4)


def histograms(length=8):
    return _pair(Histograms(), x=torch.randn(4, length))


class SortedSearch(torch.nn.Module):
    def forward(self, boundaries, x):
        left = torch.searchsorted(boundaries, x)
        right = torch.searchsorted(boundaries, x, right=True, out_int32=True)
        buckets = torch.bucketize(x, boundaries, right=True)
        return left, right, buckets


def sorted_search(length=8):
    # Integer-valued floats: ties exercise `right`.
    generator = torch.Generator().manual_seed(2)
    return _pair(
        SortedSearch(),
        boundaries=torch.arange(-3.0, 4.0),
        x=torch.randint(-5, 6, (2, length), generator=generator).float(),
    )


class CumulativeExtremum(torch.nn.Module):
    def forward(self, x):
        high = torch.cummax(x, dim=1)
        low = x.cummin(0)
        return high.values, high.indices, low.values, low.indices


def cumulative_extremum(length=8):
    return _pair(CumulativeExtremum(), x=torch.randn(3, length))


class Randperm(torch.nn.Module):
    def forward(self, x):
        order = torch.randperm(x.shape[1])
        # Sorted, a permutation is arange: deterministic, comparable to eager.
        return x + torch.sort(order).values.to(x.dtype), order.shape[0]


def randperm(length=8):
    return _pair(Randperm(), x=torch.randn(2, length))


class SdpaMasked(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.125)


def sdpa_masked(length=8):
    # Causal, and the second sample's last two frames are padding masked at every
    # key: rows torch answers with zeros and ONNX Runtime, unpatched, with NaN.
    mask = torch.ones(2, 1, length, length, dtype=torch.bool).tril()
    mask[1, :, -2:, :] = False
    return _pair(
        SdpaMasked(),
        q=torch.randn(2, 4, length, 8),
        k=torch.randn(2, 4, length, 8),
        v=torch.randn(2, 4, length, 8),
        mask=mask,
    )


class VmapMask(torch.nn.Module):
    def forward(self, x):
        from transformers import masking_utils

        b, q = x.shape[0], x.shape[1]
        expand = masking_utils._vmap_expansion_sdpa(masking_utils.causal_mask_function)
        mask = expand(torch.arange(b), torch.arange(1), torch.arange(q), torch.arange(q))
        return x[:, None, :, None].expand(b, 1, q, q).masked_fill(~mask, 0.0)


def vmap_mask(length=8):
    return _pair(VmapMask(), x=torch.randn(2, length))


class DataDependentBatch(torch.nn.Module):
    """Attention over a batch selected by a mask: the VLM pattern the SDPA-on-CPU patch is for."""

    def forward(self, x, keep):
        selected = x[keep]
        return F.scaled_dot_product_attention(selected, selected, selected)


def data_dependent_batch(length=8):
    return _pair(
        DataDependentBatch(),
        x=torch.randn(4, 2, length, 16),
        keep=torch.tensor([True, False, True, True]),
    )


class KernelsOrFallback(torch.nn.Module):
    """The choice modeling code makes: a hub kernel when `kernels` is installed, else PyTorch."""

    def forward(self, x):
        from transformers.utils import import_utils

        if import_utils.is_kernels_available():
            raise RuntimeError("a hub kernel would be loaded here, which torch.export cannot trace")
        return torch.tanh(x) * 2


def kernels_or_fallback(length=8):
    import transformers.modeling_utils
    import transformers.utils
    import transformers.utils.import_utils as import_utils

    # As if `kernels` were installed: the patch must make the trace take the fallback.
    # The stand-in stands wherever transformers bound the probe by name: hfx lets
    # a patch replace the object at the allowlist's canonical path
    # (`transformers.utils.import_utils.is_kernels_available`), by identity.
    def is_kernels_available(*args, **kwargs):
        return True

    is_kernels_available.__module__ = import_utils.__name__
    is_kernels_available.__qualname__ = "is_kernels_available"
    for module in (import_utils, transformers.utils, transformers.modeling_utils):
        module.is_kernels_available = is_kernels_available
    model = KernelsOrFallback()
    original_forward = model.forward

    def eager_forward(x):
        # Eager runs without the library (the reference the trace is compared to).
        if torch.compiler.is_exporting():
            return original_forward(x)
        return torch.tanh(x) * 2

    model.forward = eager_forward
    return _pair(model, x=torch.randn(2, length))


def nllb_moe_router():
    """NLLB-MoE's top-2 router: it casts its classifier's dtype in forward, which fails to trace
    (`Couldn't swap Linear.weight`). (The whole model's expert loop is data-dependent.)"""
    import transformers
    from transformers.models.nllb_moe.modeling_nllb_moe import NllbMoeTop2Router

    config = transformers.NllbMoeConfig(
        vocab_size=128, d_model=32, num_experts=4, expert_capacity=8, router_dtype="float32"
    )
    return _pair(NllbMoeTop2Router(config), hidden_states=torch.randn(2, 8, 32))


def sliding_window_mistral():
    """A tiny Mistral whose sliding window (4) is shorter than the input (8)."""
    import transformers

    config = transformers.MistralConfig(**TINY_DECODER, sliding_window=4)
    model = transformers.MistralForCausalLM(config).eval()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, TINY_DECODER["vocab_size"], (2, 8), generator=generator)
    return model, {"input_ids": ids, "attention_mask": torch.ones(2, 8, dtype=torch.long)}


# BLT's hash primes (`compute_hash_embeddings` cycles through eleven): the first
# and the largest.
BLT_PRIMES = (1000000007, 9576890767)


class ByteGroupHashes(torch.nn.Module):
    """BLT's byte-group hash called as `compute_hash_embeddings` calls it, over
    groups of `groups` bytes (a group of 8's `prime ** 7` wraps past int64),
    with each of `primes`, into tables of `tables` rows: 30000 (the function's
    default) takes the patch's 8-bit limbs, 500002 (BLT's own) its 4-bit ones."""

    def __init__(self, tables=(30000, 500002), groups=(1, 3, 8), primes=BLT_PRIMES):
        super().__init__()
        self.tables, self.groups, self.primes = tables, groups, primes

    def forward(self, input_ids):
        from transformers.models.blt import modeling_blt

        hashes = [
            modeling_blt.byte_group_hash_function(input_ids, group, prime, table)
            for table in self.tables
            for prime in self.primes
            for group in self.groups
        ]
        return torch.stack(hashes)


def _bytes(length):
    generator = torch.Generator().manual_seed(length)
    return torch.randint(0, 260, (2, length), generator=generator)


def byte_group_hashes(length=12):
    return _pair(ByteGroupHashes(), input_ids=_bytes(length))


def byte_group_hash_of_8(length=12):
    """plugins/onnx/patch-byte-group-hash's self-test: groups of 8 bytes, the
    largest prime, into both tables."""
    return _pair(ByteGroupHashes(groups=(8,), primes=BLT_PRIMES[1:]), input_ids=_bytes(length))


class BltHashes(torch.nn.Module):
    """A tiny BLT without its entropy patcher (`patch_in_forward=False`: one
    byte a patch), two hash functions over groups of 3 to 8 bytes into tables
    of 30011 rows (BLT's own 500002 rows would make the embeddings 190 MB
    here; `byte_group_hashes` hashes into such tables): its last hidden
    state, and the hashes its embeddings read, each group's."""

    def __init__(self):
        super().__init__()
        import transformers

        local = dict(
            hidden_size=8, num_attention_heads=2, num_hidden_layers=1, intermediate_size=16
        )
        config = transformers.BltConfig(
            patch_in_forward=False,
            encoder_hash_byte_group_vocab=30011,
            encoder_hash_byte_group_nb_functions=2,
            cross_attn_k=2,
            encoder_config=dict(local, hidden_size_global=16, cross_attn_k=2),
            decoder_config=dict(local, hidden_size_global=16, cross_attn_k=2),
            global_config=dict(
                hidden_size=16, num_attention_heads=2, num_hidden_layers=1, intermediate_size=32
            ),
            patcher_config=dict(local),
        )
        torch.manual_seed(0)
        self.model = transformers.BltModel(config).eval()
        self.hashes = ByteGroupHashes(
            (config.encoder_hash_byte_group_vocab,), config.encoder_hash_byte_group_size
        )

    def forward(self, input_ids):
        hidden = self.model(input_ids=input_ids, use_cache=False).last_hidden_state
        return hidden, self.hashes(input_ids)


def blt_hashes(length=12):
    return _pair(BltHashes(), input_ids=_bytes(length))


def second_inputs(name):
    """Inputs of another size for `name`, or None when the pattern has none."""
    sizes = {
        "split_symbolic": 12,
        "chunk_symbolic": 6,
        "roll": 5,
        "complex_rotation": 5,
        "masked_scatter": 5,
        "histograms": 5,
        "sorted_search": 5,
        "cumulative_extremum": 5,
        "randperm": 5,
        "sdpa_masked": 5,
        "vmap_mask": 5,
        "repeat_interleave": 5,
        "masked_fill_bool": 5,
        "ceil_division": 7,
        "unsorted_topk": 6,
        "grouped_mm": 7,
        "bincount": 13,
        "byte_group_hashes": 9,
        "byte_group_hash_of_8": 9,
        "blt_hashes": 9,
    }
    if name not in sizes:
        return None
    torch.manual_seed(1)
    return globals()[name](sizes[name])[1]


# ── Patterns for the reference's ONNX translations ──


class RepeatInterleave(torch.nn.Module):
    def forward(self, x):
        return x.repeat_interleave(2, dim=1), torch.repeat_interleave(x, 3)


def repeat_interleave(length=6):
    return _pair(RepeatInterleave(), x=torch.randn(2, length))


class MaskedFillBool(torch.nn.Module):
    def forward(self, flags, mask):
        return flags.masked_fill(mask, True), flags.masked_fill(mask, False)


def masked_fill_bool(length=8):
    generator = torch.Generator().manual_seed(3)
    return _pair(
        MaskedFillBool(),
        flags=torch.rand(2, length, generator=generator) > 0.5,
        mask=torch.rand(2, length, generator=generator) > 0.5,
    )


class CeilDivision(torch.nn.Module):
    """`-(-n // 3)`, Python's ceil-division idiom, on a symbolic size: floor division
    of a negative number must round toward -inf."""

    def forward(self, x):
        pieces = -(-x.shape[1] // 3)
        return x[:, :pieces] * 2


def ceil_division(length=8):
    return _pair(CeilDivision(), x=torch.randn(2, length))


class UnsortedTopk(torch.nn.Module):
    """`topk(sorted=False)`: ONNX Runtime mis-validates `TopK(sorted=0)`; the IR fix sets 1.
    Sorted afterwards, so the comparison does not depend on the unsorted order."""

    def forward(self, x):
        values, indices = torch.topk(x, 3, dim=-1, sorted=False)
        return values.sort(-1).values, indices.sort(-1).values


def unsorted_topk(length=8):
    return _pair(UnsortedTopk(), x=torch.randn(2, length))


class GroupedMm(torch.nn.Module):
    """Mixture-of-experts rows as transformers' grouped_mm experts run them: each
    token goes to its best of 4 experts, rows sorted by expert, `offs` the
    cumulative row count per expert (histc), `torch._grouped_mm` (whose meta
    kernel takes bf16 only), then rows back in token order through the
    inverse permutation (`inverse[order] = arange`, an in-place index_put).
    Integer-valued activations and weights keep every sum exact in bf16."""

    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(5)
        self.router = torch.nn.Parameter(torch.randn(8, 4, generator=generator))
        self.experts = torch.nn.Parameter(
            torch.randint(-3, 4, (4, 8, 8), generator=generator).float()
        )

    def forward(self, x):
        expert = (x @ self.router).argmax(-1)
        order = torch.sort(expert, stable=True).indices
        counts = torch.histc(expert.float(), bins=4, min=0, max=3)
        offs = torch.cumsum(counts, 0, dtype=torch.int32)
        grouped = torch._grouped_mm(x[order].bfloat16(), self.experts.bfloat16(), offs=offs)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.shape[0])
        return grouped[inverse].float()


def grouped_mm(length=12):
    generator = torch.Generator().manual_seed(length)
    return _pair(GroupedMm(), x=torch.randint(-3, 4, (length, 8), generator=generator).float())


class Bincount(torch.nn.Module):
    def forward(self, x):
        return torch.bincount(x, minlength=6)


def bincount(length=10):
    return _pair(Bincount(), x=torch.randint(0, 5, (length,)))
