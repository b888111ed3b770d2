"""Encoder-decoders: text-to-text, and Whisper (audio in, text out)."""

from .registry import (
    FFN,
    HEADS,
    HIDDEN,
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
