"""The architectures of the sweep (`bench/sweep.py`): tiny random configs built
with transformers' `*Config` classes (no hub, no internet), the model class,
and realistic inputs at a given (batch, sequence) size.

Each architecture is also a module-level function returning `(model, inputs)`
at size A, with `torch.manual_seed(0)` before the model is built, for hfx's
`--model-fn python:sweep_models:<name>` and for the reference exporter: both
build identical weights.

    ARCHS["bloom"].build()                   # (model, inputs at size A)
    ARCHS["bloom"].inputs(model, 3, 13)      # inputs at another size
"""

import dataclasses

# Size A (every export is traced with it) and size B (the second check of a
# dynamic export: another batch and another sequence, frame or image size).
SIZE_A = (2, 8)
SIZE_B = (3, 13)
SEED = 0

# Tiny text sizes shared by the decoder LMs and encoders.
VOCAB = 128
HIDDEN = 32
HEADS = 4
KV_HEADS = 2
FFN = 64
LAYERS = 2
POSITIONS = 64


@dataclasses.dataclass
class Arch:
    name: str
    category: str  # decoder, encoder, encoder-decoder, vision, audio, multimodal
    feature: str  # what the architecture brings to the sweep (ALiBi, MoE, ...)
    model_class: str  # a transformers class
    config: callable  # () -> a transformers config
    make_inputs: callable  # (model, batch, seq, generator) -> dict of tensors
    # Whether size B may change more than the batch (False: image/frame size fixed by the model).
    vary_length: bool = True
    # Why the check's eager reference runs transformers' eager attention instead of its default (SDPA), when
    # the default's eager path computes something else than the model does when traced; None: the default.
    eager_attention: str | None = None

    def model(self):
        import torch
        import transformers

        torch.manual_seed(SEED)
        return getattr(transformers, self.model_class)(self.config()).eval()

    def inputs(self, model, batch, seq):
        import torch

        generator = torch.Generator().manual_seed(SEED + 1000 * batch + seq)
        return self.make_inputs(model, batch, seq, generator)

    def build(self):
        model = self.model()
        return model, self.inputs(model, *SIZE_A)

    def size_b(self):
        return SIZE_B if self.vary_length else (SIZE_B[0], SIZE_A[1])


ARCHS = {}


def arch(name, category, feature, model_class, inputs, vary_length=True, eager_attention=None):
    """Registers `config` (the decorated function) as architecture `name`."""

    def register(config):
        ARCHS[name] = Arch(
            name, category, feature, model_class, config, inputs, vary_length, eager_attention
        )
        return config

    return register


# ── Inputs ──


def text(model, batch, seq, generator, low=3):
    """input_ids (ids below `low` are left to special tokens) + an all-ones attention_mask."""
    import torch

    vocab = model.config.get_text_config().vocab_size
    ids = torch.randint(low, vocab, (batch, seq), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones(batch, seq, dtype=torch.long)}


def text_ids_only(model, batch, seq, generator):
    """input_ids only (state-space models take no attention mask)."""
    return {"input_ids": text(model, batch, seq, generator)["input_ids"]}


def seq2seq(model, batch, seq, generator):
    """Encoder input_ids + mask, and decoder_input_ids (a shorter target: seq - 2)."""
    import torch

    inputs = text(model, batch, seq, generator)
    start = model.config.decoder_start_token_id
    target = torch.randint(3, model.config.vocab_size, (batch, seq - 2), generator=generator)
    target[:, 0] = start if start is not None else 0
    inputs["decoder_input_ids"] = target
    return inputs


def pixels(model, batch, seq, generator, size=None, channels=None):
    """pixel_values; `seq` picks the image side where the architecture allows several (32 or 48)."""
    import torch

    config = model.config
    config = getattr(config, "vision_config", config)
    side = size or (32 if seq == SIZE_A[1] else 48)
    channels = channels or getattr(config, "num_channels", 3)
    return {"pixel_values": torch.randn(batch, channels, side, side, generator=generator)}


def fixed_pixels(model, batch, seq, generator):
    config = getattr(model.config, "vision_config", model.config)
    return pixels(model, batch, seq, generator, size=config.image_size)


def mel_and_decoder(model, batch, seq, generator):
    """Whisper: log-mel frames (2 x max_source_positions, fixed by the model) + decoder_input_ids."""
    import torch

    config = model.config
    frames = 2 * config.max_source_positions
    features = torch.randn(batch, config.num_mel_bins, frames, generator=generator)
    target = torch.randint(3, config.vocab_size, (batch, seq - 2), generator=generator)
    target[:, 0] = config.decoder_start_token_id
    return {"input_features": features, "decoder_input_ids": target}


def waveform(model, batch, seq, generator):
    """Raw audio: 400 samples at size A, 640 at size B (seq x 40 + 80)."""
    import torch

    return {"input_values": torch.randn(batch, 40 * seq + 80, generator=generator)}


def text_and_image(model, batch, seq, generator):
    """CLIP / SigLIP: input_ids (+ mask for CLIP) and pixel_values at the model's image size."""
    inputs = text(model, batch, seq, generator)
    if model.config.model_type == "siglip":
        inputs.pop("attention_mask")  # SigLIP is trained on padded text without a mask
    inputs.update(fixed_pixels(model, batch, seq, generator))
    return inputs


def image_then_text(model, batch, seq, generator):
    """A VLM prompt: the image's tokens first (as many as the vision tower yields), then `seq` text tokens."""
    import torch

    config = model.config
    image_token = config.image_token_id
    vision = config.vision_config
    patches = (vision.image_size // vision.patch_size) ** 2
    words = torch.randint(3, image_token, (batch, seq), generator=generator)
    ids = torch.cat([torch.full((batch, patches), image_token, dtype=torch.long), words], dim=1)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    inputs.update(fixed_pixels(model, batch, seq, generator))
    return inputs


# ── Decoder LMs ──


def llama_like(**extra):
    return dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=POSITIONS,
        **extra,
    )


@arch("llama", "decoder", "RoPE, GQA, RMSNorm", "LlamaForCausalLM", text)
def llama():
    import transformers

    return transformers.LlamaConfig(**llama_like())


@arch("mistral", "decoder", "sliding window (6 < sequence)", "MistralForCausalLM", text)
def mistral():
    import transformers

    return transformers.MistralConfig(**llama_like(sliding_window=6))


@arch("qwen2", "decoder", "QKV bias", "Qwen2ForCausalLM", text)
def qwen2():
    import transformers

    return transformers.Qwen2Config(**llama_like())


@arch("qwen3", "decoder", "QK norm", "Qwen3ForCausalLM", text)
def qwen3():
    import transformers

    return transformers.Qwen3Config(**llama_like(head_dim=8))


@arch("qwen2_moe", "decoder", "MoE (4 experts, top-2) + shared expert", "Qwen2MoeForCausalLM", text)
def qwen2_moe():
    import transformers

    return transformers.Qwen2MoeConfig(
        **llama_like(
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            num_experts=4,
            num_experts_per_tok=2,
        )
    )


@arch("qwen3_moe", "decoder", "MoE (4 experts, top-2), QK norm", "Qwen3MoeForCausalLM", text)
def qwen3_moe():
    import transformers

    return transformers.Qwen3MoeConfig(
        **llama_like(head_dim=8, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2)
    )


@arch("mixtral", "decoder", "MoE (4 experts, top-2)", "MixtralForCausalLM", text)
def mixtral():
    import transformers

    return transformers.MixtralConfig(**llama_like(num_local_experts=4, num_experts_per_tok=2))


@arch(
    "phimoe",
    "decoder",
    "MoE (4 experts, top-2), LongRoPE scale picked by the length (pretraining 10: A short, B long)",
    "PhimoeForCausalLM",
    text,
)
def phimoe():
    import transformers

    rope = {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "original_max_position_embeddings": 10,
        "long_factor": [1.2, 2.0, 3.1, 4.5],
        "short_factor": [1.0, 1.1, 1.3, 1.6],
        "long_mscale": 1.3,
        "short_mscale": 1.1,
    }
    return transformers.PhimoeConfig(
        **llama_like(num_local_experts=4, num_experts_per_tok=2, rope_parameters=rope)
    )


@arch("gemma", "decoder", "GeGLU, scaled embeddings", "GemmaForCausalLM", text)
def gemma():
    import transformers

    return transformers.GemmaConfig(**llama_like(head_dim=8))


@arch(
    "gemma2",
    "decoder",
    "logit soft-capping, alternating sliding window (6)",
    "Gemma2ForCausalLM",
    text,
)
def gemma2():
    import transformers

    return transformers.Gemma2Config(**llama_like(head_dim=8, sliding_window=6))


@arch(
    "gemma3_text",
    "decoder",
    "sliding window (6), local/global RoPE, QK norm",
    "Gemma3ForCausalLM",
    text,
)
def gemma3_text():
    import transformers

    return transformers.Gemma3TextConfig(
        **llama_like(
            head_dim=8, sliding_window=6, layer_types=["sliding_attention", "full_attention"]
        )
    )


@arch("phi", "decoder", "partial rotary (0.5), parallel attention", "PhiForCausalLM", text)
def phi():
    import transformers

    return transformers.PhiConfig(**llama_like())


@arch("phi3", "decoder", "fused QKV / gate-up", "Phi3ForCausalLM", text)
def phi3():
    import transformers

    return transformers.Phi3Config(**llama_like(pad_token_id=0, bos_token_id=1, eos_token_id=2))


@arch("gpt2", "decoder", "learned positions, Conv1D", "GPT2LMHeadModel", text)
def gpt2():
    import transformers

    return transformers.GPT2Config(
        vocab_size=VOCAB,
        n_embd=HIDDEN,
        n_layer=LAYERS,
        n_head=HEADS,
        n_positions=POSITIONS,
        bos_token_id=1,
        eos_token_id=2,
    )


@arch(
    "gpt_neox", "decoder", "parallel attention, partial rotary (0.25)", "GPTNeoXForCausalLM", text
)
def gpt_neox():
    import transformers

    return transformers.GPTNeoXConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        max_position_embeddings=POSITIONS,
        bos_token_id=1,
        eos_token_id=2,
    )


@arch(
    "gptj", "decoder", "parallel attention, partial rotary (rotary_dim 4)", "GPTJForCausalLM", text
)
def gptj():
    import transformers

    return transformers.GPTJConfig(
        vocab_size=VOCAB,
        n_embd=HIDDEN,
        n_layer=LAYERS,
        n_head=HEADS,
        rotary_dim=4,
        n_positions=POSITIONS,
        bos_token_id=1,
        eos_token_id=2,
    )


@arch("gpt_neo", "decoder", "local attention layers (window 4)", "GPTNeoForCausalLM", text)
def gpt_neo():
    import transformers

    return transformers.GPTNeoConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_layers=LAYERS,
        num_heads=HEADS,
        attention_types=[[["global", "local"], 1]],
        window_size=4,
        max_position_embeddings=POSITIONS,
        bos_token_id=1,
        eos_token_id=2,
    )


@arch("gpt_bigcode", "decoder", "multi-query attention", "GPTBigCodeForCausalLM", text)
def gpt_bigcode():
    import transformers

    return transformers.GPTBigCodeConfig(
        vocab_size=VOCAB,
        n_embd=HIDDEN,
        n_layer=LAYERS,
        n_head=HEADS,
        n_positions=POSITIONS,
        multi_query=True,
        bos_token_id=1,
        eos_token_id=2,
    )


@arch("bloom", "decoder", "ALiBi", "BloomForCausalLM", text)
def bloom():
    import transformers

    return transformers.BloomConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        n_layer=LAYERS,
        n_head=HEADS,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )


@arch("falcon", "decoder", "parallel attention, multi-query, RoPE", "FalconForCausalLM", text)
def falcon():
    import transformers

    return transformers.FalconConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        max_position_embeddings=POSITIONS,
        bos_token_id=1,
        eos_token_id=2,
    )


@arch("falcon_alibi", "decoder", "ALiBi, new decoder architecture (GQA)", "FalconForCausalLM", text)
def falcon_alibi():
    import transformers

    return transformers.FalconConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_kv_heads=KV_HEADS,
        alibi=True,
        new_decoder_architecture=True,
        max_position_embeddings=POSITIONS,
        bos_token_id=1,
        eos_token_id=2,
    )


@arch("mpt", "decoder", "ALiBi, no biases", "MptForCausalLM", text)
def mpt():
    import transformers

    return transformers.MptConfig(
        vocab_size=VOCAB,
        d_model=HIDDEN,
        n_heads=HEADS,
        n_layers=LAYERS,
        max_seq_len=POSITIONS,
        expansion_ratio=2,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )


@arch("opt", "decoder", "learned positions (offset 2), ReLU", "OPTForCausalLM", text)
def opt():
    import transformers

    return transformers.OPTConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        ffn_dim=FFN,
        word_embed_proj_dim=HIDDEN,
        max_position_embeddings=POSITIONS,
        pad_token_id=1,
        bos_token_id=2,
        eos_token_id=2,
    )


@arch("olmo", "decoder", "non-parametric LayerNorm", "OlmoForCausalLM", text)
def olmo():
    import transformers

    return transformers.OlmoConfig(**llama_like(pad_token_id=0, bos_token_id=1, eos_token_id=2))


@arch("olmo2", "decoder", "post-norm, QK norm", "Olmo2ForCausalLM", text)
def olmo2():
    import transformers

    return transformers.Olmo2Config(**llama_like(pad_token_id=0, bos_token_id=1, eos_token_id=2))


@arch("stablelm", "decoder", "partial rotary (0.25), LayerNorm", "StableLmForCausalLM", text)
def stablelm():
    import transformers

    return transformers.StableLmConfig(**llama_like(bos_token_id=1, eos_token_id=2))


@arch(
    "starcoder2", "decoder", "sliding window (6), LayerNorm, biases", "Starcoder2ForCausalLM", text
)
def starcoder2():
    import transformers

    return transformers.Starcoder2Config(
        **llama_like(sliding_window=6, bos_token_id=1, eos_token_id=2)
    )


@arch("cohere", "decoder", "parallel attention, logit scale", "CohereForCausalLM", text)
def cohere():
    import transformers

    return transformers.CohereConfig(**llama_like(pad_token_id=0, bos_token_id=1, eos_token_id=2))


@arch("mamba", "decoder", "state-space model (selective scan)", "MambaForCausalLM", text_ids_only)
def mamba():
    import transformers

    return transformers.MambaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        state_size=8,
        num_hidden_layers=LAYERS,
        expand=2,
        conv_kernel=4,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )


@arch("mamba2", "decoder", "state-space model (SSD, chunked)", "Mamba2ForCausalLM", text_ids_only)
def mamba2():
    import transformers

    return transformers.Mamba2Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        state_size=8,
        num_hidden_layers=LAYERS,
        expand=2,
        conv_kernel=4,
        num_heads=8,
        head_dim=8,
        n_groups=1,
        chunk_size=4,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )


# ── Encoders ──


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


# ── Encoder-decoders ──


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


# ── Audio encoders ──


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


# ── Vision ──


def vit_like(**extra):
    return dict(
        image_size=32,
        patch_size=8,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        **extra,
    )


@arch("vit", "vision", "patch embedding, CLS token", "ViTModel", fixed_pixels, vary_length=False)
def vit():
    import transformers

    return transformers.ViTConfig(**vit_like())


@arch("deit", "vision", "CLS + distillation tokens", "DeiTModel", fixed_pixels, vary_length=False)
def deit():
    import transformers

    return transformers.DeiTConfig(**vit_like())


@arch(
    "beit",
    "vision",
    "relative position bias, layer scale",
    "BeitModel",
    fixed_pixels,
    vary_length=False,
)
def beit():
    import transformers

    return transformers.BeitConfig(**vit_like(use_relative_position_bias=True, vocab_size=VOCAB))


@arch("dinov2", "vision", "interpolated positions, layer scale", "Dinov2Model", pixels)
def dinov2():
    import transformers

    return transformers.Dinov2Config(**vit_like())


@arch(
    "dinov2_with_registers",
    "vision",
    "register tokens, antialiased position interpolation",
    "Dinov2WithRegistersModel",
    pixels,
)
def dinov2_with_registers():
    import transformers

    return transformers.Dinov2WithRegistersConfig(**vit_like(num_register_tokens=2))


@arch("convnext", "vision", "CNN (depthwise 7x7, LayerNorm)", "ConvNextModel", pixels)
def convnext():
    import transformers

    return transformers.ConvNextConfig(
        hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, patch_size=2
    )


@arch("resnet", "vision", "CNN (batch norm, max pool)", "ResNetModel", pixels)
def resnet():
    import transformers

    return transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic"
    )


@arch("mobilenet_v2", "vision", "CNN (depthwise, ReLU6)", "MobileNetV2Model", pixels)
def mobilenet_v2():
    import transformers

    return transformers.MobileNetV2Config(image_size=32, depth_multiplier=0.25, min_depth=4)


@arch("swin", "vision", "windowed attention, shifted windows, patch merging", "SwinModel", pixels)
def swin():
    import transformers

    return transformers.SwinConfig(
        image_size=32, patch_size=2, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4
    )


@arch(
    "segformer",
    "vision",
    "efficient attention (spatial reduction), Mix-FFN",
    "SegformerModel",
    pixels,
)
def segformer():
    import transformers

    return transformers.SegformerConfig(
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[16, 32],
        patch_sizes=[7, 3],
        strides=[4, 2],
        num_attention_heads=[1, 2],
        mlp_ratios=[2, 2],
        decoder_hidden_size=32,
    )


# ── Multimodal ──


def clip_text(**extra):
    return dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        max_position_embeddings=POSITIONS,
        **extra,
    )


@arch(
    "clip",
    "multimodal",
    "dual encoder (text + image), contrastive logits",
    "CLIPModel",
    text_and_image,
)
def clip():
    import transformers

    return transformers.CLIPConfig(
        text_config=clip_text(bos_token_id=0, eos_token_id=2, pad_token_id=1),
        vision_config=vit_like(),
        projection_dim=HIDDEN,
    )


@arch(
    "siglip",
    "multimodal",
    "dual encoder (text + image), sigmoid logits",
    "SiglipModel",
    text_and_image,
)
def siglip():
    import transformers

    return transformers.SiglipConfig(text_config=clip_text(), vision_config=vit_like())


@arch(
    "llava",
    "multimodal",
    "CLIP vision tower + projector + Llama, image tokens scattered",
    "LlavaForConditionalGeneration",
    image_then_text,
)
def llava():
    import transformers

    vision = transformers.CLIPVisionConfig(**vit_like())
    text_config = transformers.LlamaConfig(
        **llama_like(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    )
    return transformers.LlavaConfig(
        vision_config=vision,
        text_config=text_config,
        image_token_index=VOCAB - 1,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        image_seq_length=16,
    )


@arch(
    "paligemma",
    "multimodal",
    "SigLIP vision tower + Gemma, prefix attention",
    "PaliGemmaForConditionalGeneration",
    image_then_text,
    eager_attention=(
        "PaliGemma's text attention is built with `is_causal=False` (its image and prompt prefix may attend both "
        "ways), and transformers' SDPA path drops an all-ones mask in eager mode and then relies on `is_causal`, so "
        "eager SDPA attends bidirectionally over the whole text; traced, the causal mask is kept (masking_utils "
        "never drops it under torch.export). Eager attention keeps the mask: it and the traced program agree "
        "(torch.export's own module against it: 0.0, against eager SDPA: 4.2e-2)"
    ),
)
def paligemma():
    import transformers

    vision = transformers.SiglipVisionConfig(**vit_like(projection_dim=HIDDEN))
    text_config = transformers.GemmaConfig(
        **llama_like(head_dim=8, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    )
    return transformers.PaliGemmaConfig(
        vision_config=vision,
        text_config=text_config,
        image_token_index=VOCAB - 1,
        vocab_size=VOCAB,
        projection_dim=HIDDEN,
        hidden_size=HIDDEN,
    )


# ── `--model-fn python:sweep_models:<name>` ──


def model_fn(name):
    def build():
        return ARCHS[name].build()

    build.__name__ = build.__qualname__ = f"{name}_model"
    build.__doc__ = (
        f"(model, inputs at size A) for {name} (`--model-fn python:sweep_models:{name}_model`)."
    )
    return build


for _name in ARCHS:
    globals()[f"{_name}_model"] = model_fn(_name)
