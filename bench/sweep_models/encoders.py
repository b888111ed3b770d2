"""Text encoders (BERT-like)."""

from .registry import (
    FFN,
    HEADS,
    HIDDEN,
    LAYERS,
    POSITIONS,
    VOCAB,
    arch,
    text,
)


def bert_like(**extra):
    return dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        max_position_embeddings=POSITIONS,
        **extra,
    )


@arch("bert", "encoder", "absolute positions, token types", "BertModel", text)
def bert():
    import transformers

    return transformers.BertConfig(**bert_like())


@arch("roberta", "encoder", "positions from the padding mask", "RobertaModel", text)
def roberta():
    import transformers

    return transformers.RobertaConfig(**bert_like(pad_token_id=1))


@arch("distilbert", "encoder", "no token types", "DistilBertModel", text)
def distilbert():
    import transformers

    return transformers.DistilBertConfig(
        vocab_size=VOCAB,
        dim=HIDDEN,
        n_layers=LAYERS,
        n_heads=HEADS,
        hidden_dim=FFN,
        max_position_embeddings=POSITIONS,
    )


@arch("albert", "encoder", "shared layers, factorized embeddings", "AlbertModel", text)
def albert():
    import transformers

    return transformers.AlbertConfig(**bert_like(embedding_size=16))


@arch("electra", "encoder", "embedding projection", "ElectraModel", text)
def electra():
    import transformers

    return transformers.ElectraConfig(**bert_like(embedding_size=16))


@arch("deberta_v2", "encoder", "disentangled relative attention", "DebertaV2Model", text)
def deberta_v2():
    import transformers

    return transformers.DebertaV2Config(
        **bert_like(
            relative_attention=True,
            position_buckets=16,
            pos_att_type=["p2c", "c2p"],
            max_relative_positions=32,
        )
    )


@arch("mpnet", "encoder", "relative position bias", "MPNetModel", text)
def mpnet():
    import transformers

    return transformers.MPNetConfig(**bert_like(pad_token_id=1))


# ── Inputs ──


def text_with_bbox(model, batch, seq, generator):
    """LayoutLM / LiLT: text + one box per token (x0 <= x1, y0 <= y1 on the 0..1000 page grid)."""
    import torch

    inputs = text(model, batch, seq, generator)
    corners = torch.randint(0, 1001, (batch, seq, 2, 2), generator=generator)
    low, high = corners.min(dim=2).values, corners.max(dim=2).values
    inputs["bbox"] = torch.stack([low[..., 0], low[..., 1], high[..., 0], high[..., 1]], dim=-1)
    return inputs


def text_with_xpaths(model, batch, seq, generator):
    """MarkupLM: text + each token's XPath (tag ids and subscripts, padded to max_depth)."""
    import torch

    config = model.config
    inputs = text(model, batch, seq, generator)
    shape = (batch, seq, config.max_depth)
    inputs["xpath_tags_seq"] = torch.randint(
        0, config.max_xpath_tag_unit_embeddings, shape, generator=generator
    )
    inputs["xpath_subs_seq"] = torch.randint(
        0, config.max_xpath_subs_unit_embeddings, shape, generator=generator
    )
    return inputs


def text_with_shape_and_pronunciation(model, batch, seq, generator):
    """RoCBert: input_ids + each token's glyph-shape and pronunciation ids."""
    import torch

    config = model.config
    inputs = text(model, batch, seq, generator)
    inputs["input_shape_ids"] = torch.randint(
        3, config.shape_vocab_size, (batch, seq), generator=generator
    )
    inputs["input_pronunciation_ids"] = torch.randint(
        3, config.pronunciation_vocab_size, (batch, seq), generator=generator
    )
    return inputs


def codepoints(model, batch, seq, generator):
    """CANINE: Unicode code points (no vocabulary) + mask."""
    import torch

    ids = torch.randint(32, 0x3000, (batch, seq), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones(batch, seq, dtype=torch.long)}


# ── Architectures ──


@arch(
    "modernbert",
    "encoder",
    "RoPE, alternating local (window 4) / global attention, GeGLU",
    "ModernBertModel",
    text,
)
def modernbert():
    import transformers

    return transformers.ModernBertConfig(
        **bert_like(
            hidden_activation="gelu",
            global_attn_every_n_layers=2,
            local_attention=4,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            cls_token_id=1,
            sep_token_id=2,
        )
    )


@arch("roformer", "encoder", "rotary positions (sinusoidal, per layer)", "RoFormerModel", text)
def roformer():
    import transformers

    return transformers.RoFormerConfig(**bert_like(embedding_size=HIDDEN))


@arch(
    "funnel",
    "encoder",
    "sequence pooling between blocks, relative attention, upsampling decoder",
    "FunnelModel",
    text,
)
def funnel():
    import transformers

    return transformers.FunnelConfig(
        vocab_size=VOCAB,
        block_sizes=[1, 1],
        num_decoder_layers=1,
        d_model=HIDDEN,
        n_head=HEADS,
        d_head=8,
        d_inner=FFN,
        max_position_embeddings=POSITIONS,
    )


@arch("convbert", "encoder", "span-based dynamic convolution heads", "ConvBertModel", text)
def convbert():
    import transformers

    return transformers.ConvBertConfig(**bert_like(embedding_size=HIDDEN, conv_kernel_size=3))


@arch("mobilebert", "encoder", "bottlenecks, stacked FFNs, NoNorm", "MobileBertModel", text)
def mobilebert():
    import transformers

    return transformers.MobileBertConfig(
        **bert_like(
            embedding_size=16,
            intra_bottleneck_size=16,
            true_hidden_size=16,
            num_feedforward_networks=2,
        )
    )


@arch("squeezebert", "encoder", "grouped 1x1 convolutions", "SqueezeBertModel", text)
def squeezebert():
    import transformers

    return transformers.SqueezeBertConfig(
        **bert_like(
            embedding_size=HIDDEN,
            q_groups=2,
            k_groups=2,
            v_groups=2,
            post_attention_groups=2,
            intermediate_groups=2,
            output_groups=2,
        )
    )


@arch("deberta", "encoder", "disentangled attention (v1: no buckets)", "DebertaModel", text)
def deberta():
    import transformers

    return transformers.DebertaConfig(
        **bert_like(relative_attention=True, pos_att_type=["p2c", "c2p"], max_relative_positions=32)
    )


@arch("esm", "encoder", "rotary positions, token dropout rescaling (protein LM)", "EsmModel", text)
def esm():
    import transformers

    return transformers.EsmConfig(
        **bert_like(
            position_embedding_type="rotary", token_dropout=True, mask_token_id=2, pad_token_id=1
        )
    )


@arch(
    "canine",
    "encoder",
    "hashed code-point embeddings, local attention, strided downsampling / upsampling",
    "CanineModel",
    codepoints,
)
def canine():
    import transformers

    return transformers.CanineConfig(
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        max_position_embeddings=POSITIONS,
        num_hash_functions=4,
        num_hash_buckets=64,
        downsampling_rate=2,
        local_transformer_stride=4,
    )


@arch(
    "nystromformer",
    "encoder",
    "Nystrom attention (4 landmarks, depthwise conv skip; sequence fixed at 8)",
    "NystromformerModel",
    text,
    vary_length=False,
)
def nystromformer():
    import transformers

    return transformers.NystromformerConfig(
        **bert_like(num_landmarks=4, segment_means_seq_len=8, conv_kernel_size=3)
    )


@arch(
    "layoutlm",
    "encoder",
    "2-D box position embeddings (bbox input)",
    "LayoutLMModel",
    text_with_bbox,
)
def layoutlm():
    import transformers

    return transformers.LayoutLMConfig(**bert_like(max_2d_position_embeddings=1024))


@arch("fnet", "encoder", "Fourier token mixing (FFT, no attention)", "FNetModel", text)
def fnet():
    import transformers

    return transformers.FNetConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        intermediate_size=FFN,
        max_position_embeddings=POSITIONS,
        use_tpu_fourier_optimizations=False,
    )


@arch(
    "longformer",
    "encoder",
    "sliding-window attention (window 4) + global tokens, padded to the window",
    "LongformerModel",
    text,
)
def longformer():
    import transformers

    return transformers.LongformerConfig(**bert_like(attention_window=4, pad_token_id=1))


@arch(
    "xlnet",
    "encoder",
    "two-stream relative attention, sinusoidal relative positions",
    "XLNetModel",
    text,
)
def xlnet():
    import transformers

    return transformers.XLNetConfig(
        vocab_size=VOCAB, d_model=HIDDEN, n_layer=LAYERS, n_head=HEADS, d_inner=FFN
    )


@arch("nomic_bert", "encoder", "RoPE, SwiGLU, no biases", "NomicBertModel", text)
def nomic_bert():
    import transformers

    return transformers.NomicBertConfig(**bert_like())


@arch("rembert", "encoder", "decoupled input / output embeddings", "RemBertModel", text)
def rembert():
    import transformers

    return transformers.RemBertConfig(
        **bert_like(input_embedding_size=16, output_embedding_size=16)
    )


@arch("megatron_bert", "encoder", "pre-norm BERT", "MegatronBertModel", text)
def megatron_bert():
    import transformers

    return transformers.MegatronBertConfig(**bert_like())


@arch("xmod", "encoder", "per-language adapters (default language)", "XmodModel", text)
def xmod():
    import transformers

    return transformers.XmodConfig(
        **bert_like(pad_token_id=1, languages=["en_XX", "de_DE"], default_language="en_XX")
    )


@arch(
    "lilt",
    "encoder",
    "layout stream beside the text stream (bbox input)",
    "LiltModel",
    text_with_bbox,
)
def lilt():
    import transformers

    # The box embeddings split the hidden size six ways (x0, y0, x1, y1, width, height): 48, not 32.
    return transformers.LiltConfig(
        **{**bert_like(pad_token_id=1, channel_shrink_ratio=2), "hidden_size": 48}
    )


@arch(
    "markuplm",
    "encoder",
    "XPath embeddings (tag + subscript per depth)",
    "MarkupLMModel",
    text_with_xpaths,
)
def markuplm():
    import transformers

    return transformers.MarkupLMConfig(
        **bert_like(
            pad_token_id=1,
            max_depth=4,
            max_xpath_tag_unit_embeddings=32,
            max_xpath_subs_unit_embeddings=16,
            xpath_unit_hidden_size=8,
        )
    )


@arch(
    "roc_bert",
    "encoder",
    "glyph-shape and pronunciation embeddings",
    "RoCBertModel",
    text_with_shape_and_pronunciation,
)
def roc_bert():
    import transformers

    return transformers.RoCBertConfig(
        **bert_like(
            shape_vocab_size=64,
            shape_embed_dim=16,
            pronunciation_vocab_size=64,
            pronunciation_embed_dim=16,
        )
    )


@arch("big_bird", "encoder", "block-sparse attention (full at these lengths)", "BigBirdModel", text)
def big_bird():
    import transformers

    return transformers.BigBirdConfig(**bert_like(attention_type="original_full"))


@arch("xlm_roberta_xl", "encoder", "pre-norm RoBERTa", "XLMRobertaXLModel", text)
def xlm_roberta_xl():
    import transformers

    return transformers.XLMRobertaXLConfig(**bert_like(pad_token_id=1))


def text_with_table_types(model, batch, seq, generator):
    """TAPAS: text + seven token-type ids per token (segment, column, row, rank, ...), each below its vocabulary."""
    import torch

    inputs = text(model, batch, seq, generator)
    columns = [
        torch.randint(0, size, (batch, seq, 1), generator=generator)
        for size in model.config.type_vocab_sizes
    ]
    inputs["token_type_ids"] = torch.cat(columns, dim=-1)
    return inputs


@arch("xlm", "encoder", "sinusoidal positions, language embeddings", "XLMModel", text)
def xlm():
    import transformers

    return transformers.XLMConfig(
        vocab_size=VOCAB,
        emb_dim=HIDDEN,
        n_layers=LAYERS,
        n_heads=HEADS,
        max_position_embeddings=POSITIONS,
        sinusoidal_embeddings=True,
        n_langs=2,
        use_lang_emb=True,
    )


@arch("ernie", "encoder", "task-type embeddings", "ErnieModel", text)
def ernie():
    import transformers

    return transformers.ErnieConfig(**bert_like(use_task_id=True, task_type_vocab_size=3))


@arch(
    "tapas",
    "encoder",
    "seven table token-type embeddings (column, row, rank, ...), per-cell positions",
    "TapasModel",
    text_with_table_types,
)
def tapas():
    import transformers

    return transformers.TapasConfig(**bert_like(type_vocab_sizes=[3, 8, 8, 4, 8, 8, 4]))
