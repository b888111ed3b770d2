"""Audio: encoders over raw waveforms, filterbanks and spectrograms; speech encoder-decoders."""

from .registry import (
    FFN,
    HEADS,
    HIDDEN,
    LAYERS,
    POSITIONS,
    VOCAB,
    arch,
    decoder_ids,
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


# ── Inputs ──


def waveform_and_decoder(model, batch, seq, generator):
    """Moonshine: raw audio long enough for its strided conv front end (320 samples a step: 2560 at size A,
    4160 at size B) + decoder_input_ids."""
    import torch

    audio = torch.randn(batch, 320 * seq, generator=generator)
    return {"input_values": audio, "decoder_input_ids": decoder_ids(model, batch, seq, generator)}


def filterbank_and_decoder(model, batch, seq, generator):
    """Speech2Text: log-mel filterbank frames (4 per step: the conv subsampler halves them twice) + mask +
    decoder_input_ids."""
    import torch

    config = model.config
    frames = 4 * seq
    width = config.input_feat_per_channel * config.input_channels
    features = torch.randn(batch, frames, width, generator=generator)
    return {
        "input_features": features,
        "attention_mask": torch.ones(batch, frames, dtype=torch.long),
        "decoder_input_ids": decoder_ids(model, batch, seq, generator),
    }


def filterbank(model, batch, seq, generator):
    """Wav2Vec2-BERT: stacked filterbank frames (batch, 2 * seq, feature_projection_input_dim) + mask."""
    import torch

    frames = 2 * seq
    features = torch.randn(
        batch, frames, model.config.feature_projection_input_dim, generator=generator
    )
    return {
        "input_features": features,
        "attention_mask": torch.ones(batch, frames, dtype=torch.long),
    }


def spectrogram(model, batch, seq, generator):
    """AST: a log-mel spectrogram (batch, max_length, num_mel_bins), its size fixed by the position table."""
    import torch

    config = model.config
    return {
        "input_values": torch.randn(
            batch, config.max_length, config.num_mel_bins, generator=generator
        )
    }


# ── Architectures ──


@arch(
    "sew", "audio", "squeezed (pooled) transformer sequence, upsampled back", "SEWModel", waveform
)
def sew():
    import transformers

    return transformers.SEWConfig(**wav2vec2_like(squeeze_factor=2))


@arch(
    "sew_d",
    "audio",
    "squeezed sequence, DeBERTa disentangled relative attention",
    "SEWDModel",
    waveform,
)
def sew_d():
    import transformers

    return transformers.SEWDConfig(
        **wav2vec2_like(squeeze_factor=2, position_buckets=16, max_position_embeddings=64)
    )


@arch(
    "unispeech",
    "audio",
    "wav2vec2 encoder, pre-norm (stable layer norm)",
    "UniSpeechModel",
    waveform,
)
def unispeech():
    import transformers

    return transformers.UniSpeechConfig(
        **wav2vec2_like(feat_extract_norm="layer", do_stable_layer_norm=True)
    )


@arch(
    "unispeech_sat",
    "audio",
    "speaker-aware wav2vec2 encoder, group-norm front end",
    "UniSpeechSatModel",
    waveform,
)
def unispeech_sat():
    import transformers

    return transformers.UniSpeechSatConfig(**wav2vec2_like())


@arch(
    "wav2vec2_conformer",
    "audio",
    "conformer blocks (depthwise conv module), rotary positions",
    "Wav2Vec2ConformerModel",
    waveform,
)
def wav2vec2_conformer():
    import transformers

    return transformers.Wav2Vec2ConformerConfig(
        **wav2vec2_like(position_embeddings_type="rotary", conv_depthwise_kernel_size=7)
    )


@arch(
    "data2vec_audio",
    "audio",
    "stacked conv position layers, layer-norm front end",
    "Data2VecAudioModel",
    waveform,
)
def data2vec_audio():
    import transformers

    # Data2VecAudio's `num_conv_pos_embeddings` counts the conv position layers; the kernel is its own field.
    config = wav2vec2_like(conv_pos_kernel_size=5)
    config["num_conv_pos_embeddings"] = 3
    return transformers.Data2VecAudioConfig(**config)


@arch(
    "wav2vec2_bert",
    "audio",
    "conformer over filterbank features, relative_key position table",
    "Wav2Vec2BertModel",
    filterbank,
)
def wav2vec2_bert():
    import transformers

    return transformers.Wav2Vec2BertConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        feature_projection_input_dim=16,
        position_embeddings_type="relative_key",
        left_max_position_embeddings=16,
        right_max_position_embeddings=4,
        conv_depthwise_kernel_size=7,
        apply_spec_augment=False,
        output_hidden_size=HIDDEN,
    )


@arch(
    "audio_spectrogram_transformer",
    "audio",
    "overlapping patches over a spectrogram, CLS + distillation tokens",
    "ASTModel",
    spectrogram,
    vary_length=False,
)
def audio_spectrogram_transformer():
    import transformers

    return transformers.ASTConfig(
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        patch_size=8,
        frequency_stride=4,
        time_stride=4,
        max_length=24,
        num_mel_bins=16,
    )


@arch(
    "speech_to_text",
    "audio",
    "filterbank encoder-decoder, conv subsampler (GLU), sinusoidal positions",
    "Speech2TextForConditionalGeneration",
    filterbank_and_decoder,
)
def speech_to_text():
    import transformers

    return transformers.Speech2TextConfig(
        vocab_size=VOCAB,
        d_model=HIDDEN,
        encoder_layers=LAYERS,
        decoder_layers=LAYERS,
        encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS,
        encoder_ffn_dim=FFN,
        decoder_ffn_dim=FFN,
        max_source_positions=64,
        max_target_positions=64,
        num_conv_layers=2,
        conv_kernel_sizes=(5, 5),
        conv_channels=32,
        input_feat_per_channel=16,
        input_channels=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
    )


@arch(
    "moonshine",
    "audio",
    "raw-audio encoder-decoder, strided conv front end, partial rotary",
    "MoonshineForConditionalGeneration",
    waveform_and_decoder,
)
def moonshine():
    import transformers

    return transformers.MoonshineConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        encoder_num_hidden_layers=LAYERS,
        decoder_num_hidden_layers=LAYERS,
        encoder_num_attention_heads=HEADS,
        decoder_num_attention_heads=HEADS,
        max_position_embeddings=POSITIONS,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )


def mono_waveform(model, batch, seq, generator):
    """EnCodec: mono audio (batch, 1, samples), 40 x seq + 80 samples as `waveform`."""
    return {"input_values": waveform(model, batch, seq, generator)["input_values"][:, None]}


@arch(
    "encodec",
    "audio",
    "neural codec: conv encoder + LSTM, residual vector quantizer (2 codebooks, argmin codes), decoder",
    "EncodecModel",
    mono_waveform,
)
def encodec():
    import transformers

    return transformers.EncodecConfig(
        target_bandwidths=[2.0],  # 2 codebooks at 250 frames/s, 4 bits each
        sampling_rate=2000,
        audio_channels=1,
        hidden_size=HIDDEN,
        num_filters=4,
        num_residual_layers=1,
        upsampling_ratios=[4, 2],
        codebook_size=16,
        num_lstm_layers=1,
    )


def waveform_and_text_decoder(model, batch, seq, generator):
    """SpeechT5 speech-to-text: raw audio (as `waveform`) + decoder_input_ids."""
    inputs = waveform(model, batch, seq, generator)
    inputs["decoder_input_ids"] = decoder_ids(model, batch, seq, generator)
    return inputs


@arch(
    "speecht5",
    "audio",
    "speech encoder pre-net (conv) + text decoder, encoder relative position embeddings",
    "SpeechT5ForSpeechToText",
    waveform_and_text_decoder,
)
def speecht5():
    import transformers

    config = wav2vec2_like(
        encoder_layers=LAYERS,
        decoder_layers=LAYERS,
        encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS,
        encoder_ffn_dim=FFN,
        decoder_ffn_dim=FFN,
        max_speech_positions=256,
        max_text_positions=POSITIONS,
        encoder_max_relative_position=16,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
    )
    for field in ("num_hidden_layers", "num_attention_heads", "intermediate_size"):
        del config[field]
    return transformers.SpeechT5Config(**config)
