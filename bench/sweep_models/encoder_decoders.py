"""Encoder-decoders: text-to-text, and Whisper (audio in, text out)."""

from .registry import (
    FFN,
    HEADS,
    HIDDEN,
    KV_HEADS,
    LAYERS,
    POSITIONS,
    VOCAB,
    arch,
    mel_and_decoder,
    seq2seq,
)


def bart_like(**extra):
    return dict(
        vocab_size=VOCAB,
        d_model=HIDDEN,
        encoder_layers=LAYERS,
        decoder_layers=LAYERS,
        encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS,
        encoder_ffn_dim=FFN,
        decoder_ffn_dim=FFN,
        max_position_embeddings=POSITIONS,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        **extra,
    )


@arch(
    "t5",
    "encoder-decoder",
    "relative position buckets, RMSNorm",
    "T5ForConditionalGeneration",
    seq2seq,
)
def t5():
    import transformers

    return transformers.T5Config(
        vocab_size=VOCAB,
        d_model=HIDDEN,
        d_kv=8,
        d_ff=FFN,
        num_layers=LAYERS,
        num_heads=HEADS,
        relative_attention_num_buckets=8,
        decoder_start_token_id=0,
    )


@arch(
    "bart",
    "encoder-decoder",
    "learned positions, post-norm",
    "BartForConditionalGeneration",
    seq2seq,
)
def bart():
    import transformers

    return transformers.BartConfig(**bart_like())


@arch("marian", "encoder-decoder", "sinusoidal positions", "MarianMTModel", seq2seq)
def marian():
    import transformers

    return transformers.MarianConfig(
        **{**bart_like(), "pad_token_id": 1, "decoder_start_token_id": 1}
    )


@arch(
    "pegasus",
    "encoder-decoder",
    "sinusoidal positions, pre-norm",
    "PegasusForConditionalGeneration",
    seq2seq,
)
def pegasus():
    import transformers

    return transformers.PegasusConfig(
        **{**bart_like(), "pad_token_id": 0, "decoder_start_token_id": 0}
    )


@arch(
    "mbart",
    "encoder-decoder",
    "pre-norm, final layer norms",
    "MBartForConditionalGeneration",
    seq2seq,
)
def mbart():
    import transformers

    return transformers.MBartConfig(**bart_like())


@arch(
    "whisper",
    "audio",
    "audio encoder-decoder (log-mel, conv front end)",
    "WhisperForConditionalGeneration",
    mel_and_decoder,
)
def whisper():
    import transformers

    return transformers.WhisperConfig(
        vocab_size=VOCAB,
        num_mel_bins=16,
        d_model=HIDDEN,
        encoder_layers=LAYERS,
        decoder_layers=LAYERS,
        encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS,
        encoder_ffn_dim=FFN,
        decoder_ffn_dim=FFN,
        max_source_positions=16,
        max_target_positions=POSITIONS,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        suppress_tokens=[],
        begin_suppress_tokens=[],
    )


def t5_like(**extra):
    return dict(
        vocab_size=VOCAB,
        d_model=HIDDEN,
        d_kv=8,
        d_ff=FFN,
        num_layers=LAYERS,
        num_heads=HEADS,
        relative_attention_num_buckets=8,
        decoder_start_token_id=0,
        **extra,
    )


@arch(
    "switch_transformers",
    "encoder-decoder",
    "MoE (4 experts, top-1, expert capacity) in every other T5 layer",
    "SwitchTransformersForConditionalGeneration",
    seq2seq,
)
def switch_transformers():
    import transformers

    return transformers.SwitchTransformersConfig(
        **t5_like(
            num_experts=4,
            expert_capacity=32,
            num_sparse_encoder_layers=1,
            num_sparse_decoder_layers=1,
            num_decoder_layers=LAYERS,
            router_jitter_noise=0.0,
        )
    )


@arch(
    "longt5",
    "encoder-decoder",
    "transient-global attention (local radius 2, global blocks of 4)",
    "LongT5ForConditionalGeneration",
    seq2seq,
)
def longt5():
    import transformers

    return transformers.LongT5Config(
        **t5_like(
            encoder_attention_type="transient-global",
            local_radius=2,
            global_block_size=4,
        )
    )


@arch(
    "umt5",
    "encoder-decoder",
    "per-layer relative position bias, gated GELU",
    "UMT5ForConditionalGeneration",
    seq2seq,
)
def umt5():
    import transformers

    return transformers.UMT5Config(**t5_like())


@arch(
    "led",
    "encoder-decoder",
    "Longformer encoder (window 4, padded to the window) + BART decoder",
    "LEDForConditionalGeneration",
    seq2seq,
)
def led():
    import transformers

    extra = bart_like()
    extra.pop("max_position_embeddings")
    return transformers.LEDConfig(
        **extra,
        max_encoder_position_embeddings=POSITIONS,
        max_decoder_position_embeddings=POSITIONS,
        attention_window=4,
    )


@arch(
    "pegasus_x",
    "encoder-decoder",
    "block-local attention (blocks of 4, staggered) + global tokens",
    "PegasusXForConditionalGeneration",
    seq2seq,
)
def pegasus_x():
    import transformers

    return transformers.PegasusXConfig(
        **{**bart_like(), "pad_token_id": 0, "decoder_start_token_id": 0},
        num_global_tokens=2,
        block_size=4,
    )


@arch(
    "prophetnet",
    "encoder-decoder",
    "n-gram (2) predicting streams, relative position buckets",
    "ProphetNetForConditionalGeneration",
    seq2seq,
)
def prophetnet():
    import transformers

    return transformers.ProphetNetConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        encoder_ffn_dim=FFN,
        decoder_ffn_dim=FFN,
        num_encoder_layers=LAYERS,
        num_decoder_layers=LAYERS,
        num_encoder_attention_heads=HEADS,
        num_decoder_attention_heads=HEADS,
        max_position_embeddings=POSITIONS,
        ngram=2,
        num_buckets=8,
        relative_max_distance=16,
        decoder_start_token_id=0,
    )


@arch(
    "nllb_moe",
    "encoder-decoder",
    "MoE (4 experts, top-2, expert capacity) every other layer",
    "NllbMoeForConditionalGeneration",
    seq2seq,
)
def nllb_moe():
    import transformers

    return transformers.NllbMoeConfig(
        **bart_like(),
        num_experts=4,
        expert_capacity=32,
        encoder_sparse_step=2,
        decoder_sparse_step=2,
    )


@arch(
    "m2m_100",
    "encoder-decoder",
    "sinusoidal positions from the padding mask, scaled embeddings",
    "M2M100ForConditionalGeneration",
    seq2seq,
)
def m2m_100():
    import transformers

    return transformers.M2M100Config(**bart_like())


@arch(
    "fsmt",
    "encoder-decoder",
    "separate source (128) / target (96) vocabularies",
    "FSMTForConditionalGeneration",
    seq2seq,
)
def fsmt():
    import transformers

    extra = bart_like()
    extra.pop("vocab_size")
    return transformers.FSMTConfig(
        **extra, src_vocab_size=VOCAB, tgt_vocab_size=96, langs=["en", "de"]
    )


@arch(
    "t5gemma",
    "encoder-decoder",
    "Gemma 2 encoder-decoder (RoPE, GQA, soft-capping, sliding window 6)",
    "T5GemmaForConditionalGeneration",
    seq2seq,
)
def t5gemma():
    import transformers

    module = dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=8,
        query_pre_attn_scalar=8,
        max_position_embeddings=POSITIONS,
        sliding_window=6,
    )
    return transformers.T5GemmaConfig(
        encoder=module, decoder=module, vocab_size=VOCAB, decoder_start_token_id=2
    )


@arch(
    "blenderbot",
    "encoder-decoder",
    "pre-norm, no embedding norm, learned positions",
    "BlenderbotForConditionalGeneration",
    seq2seq,
)
def blenderbot():
    import transformers

    return transformers.BlenderbotConfig(**bart_like())


@arch(
    "mvp",
    "encoder-decoder",
    "per-layer prompts (prefix key/values, length 4)",
    "MvpForConditionalGeneration",
    seq2seq,
)
def mvp():
    import transformers

    return transformers.MvpConfig(
        **bart_like(), use_prompt=True, prompt_length=4, prompt_mid_dim=16
    )


@arch(
    "bigbird_pegasus",
    "encoder-decoder",
    "BigBird encoder (full attention at these lengths), Pegasus decoder",
    "BigBirdPegasusForConditionalGeneration",
    seq2seq,
)
def bigbird_pegasus():
    import transformers

    return transformers.BigBirdPegasusConfig(
        **{**bart_like(), "pad_token_id": 0, "decoder_start_token_id": 2},
        attention_type="original_full",
    )


@arch(
    "blenderbot_small",
    "encoder-decoder",
    "post-norm, embedding norm",
    "BlenderbotSmallForConditionalGeneration",
    seq2seq,
)
def blenderbot_small():
    import transformers

    return transformers.BlenderbotSmallConfig(**bart_like())


@arch(
    "mt5",
    "encoder-decoder",
    "gated GELU, untied head",
    "MT5ForConditionalGeneration",
    seq2seq,
)
def mt5():
    import transformers

    return transformers.MT5Config(**t5_like())


@arch(
    "plbart",
    "encoder-decoder",
    "embedding norm, scaled embeddings",
    "PLBartForConditionalGeneration",
    seq2seq,
)
def plbart():
    import transformers

    return transformers.PLBartConfig(**bart_like())
