"""Audio encoders over raw waveforms."""

from .registry import (
    FFN,
    HEADS,
    HIDDEN,
    LAYERS,
    VOCAB,
    arch,
    waveform,
)


def wav2vec2_like(**extra):
    return dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        conv_dim=(16, 16, 16),
        conv_stride=(5, 2, 2),
        conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        apply_spec_augment=False,
        **extra,
    )


@arch("wav2vec2", "audio", "conv feature encoder, conv positions", "Wav2Vec2Model", waveform)
def wav2vec2():
    import transformers

    return transformers.Wav2Vec2Config(**wav2vec2_like())


@arch("hubert", "audio", "conv feature encoder, group norm", "HubertModel", waveform)
def hubert():
    import transformers

    return transformers.HubertConfig(**wav2vec2_like())


@arch("wavlm", "audio", "gated relative position bias", "WavLMModel", waveform)
def wavlm():
    import transformers

    return transformers.WavLMConfig(**wav2vec2_like(num_buckets=16, max_bucket_distance=32))
