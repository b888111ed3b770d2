"""Decoder LMs: causal language models, dense, MoE and state-space."""

from .registry import (
    FFN,
    HEADS,
    HIDDEN,
    KV_HEADS,
    LAYERS,
    POSITIONS,
    VOCAB,
    arch,
    text,
    text_ids_only,
)


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


# ── Dense decoders at transformers' breadth: one row per modeling family ──

SPECIAL_TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
SLIDING_THEN_FULL = ["sliding_attention", "full_attention"]


@arch(
    "granite",
    "decoder",
    "muP multipliers (embedding, residual, attention, logits scaling)",
    "GraniteForCausalLM",
    text,
)
def granite():
    import transformers

    return transformers.GraniteConfig(
        **llama_like(
            embedding_multiplier=12.0,
            residual_multiplier=0.22,
            attention_multiplier=0.0078125,
            logits_scaling=8.0,
            **SPECIAL_TOKENS,
        )
    )


@arch(
    "nemotron",
    "decoder",
    "squared ReLU MLP (no gate), LayerNorm1P, partial rotary (0.5)",
    "NemotronForCausalLM",
    text,
)
def nemotron():
    import transformers

    return transformers.NemotronConfig(**llama_like(head_dim=8, **SPECIAL_TOKENS))


@arch(
    "persimmon",
    "decoder",
    "QK LayerNorm, fused QKV, squared ReLU, partial rotary (0.5)",
    "PersimmonForCausalLM",
    text,
)
def persimmon():
    import transformers

    return transformers.PersimmonConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        max_position_embeddings=POSITIONS,
        **SPECIAL_TOKENS,
    )


@arch(
    "glm",
    "decoder",
    "interleaved partial rotary (0.5), fused gate-up",
    "GlmForCausalLM",
    text,
)
def glm():
    import transformers

    return transformers.GlmConfig(**llama_like(head_dim=8, **SPECIAL_TOKENS))


@arch("glm4", "decoder", "sandwich norms (post-attention, post-MLP)", "Glm4ForCausalLM", text)
def glm4():
    import transformers

    return transformers.Glm4Config(**llama_like(head_dim=8, **SPECIAL_TOKENS))


@arch(
    "cohere2",
    "decoder",
    "sliding window (6) layers with RoPE, global layers without positions (NoPE)",
    "Cohere2ForCausalLM",
    text,
)
def cohere2():
    import transformers

    return transformers.Cohere2Config(
        **llama_like(sliding_window=6, layer_types=SLIDING_THEN_FULL, **SPECIAL_TOKENS)
    )


@arch(
    "exaone4",
    "decoder",
    "hybrid sliding (6) / global NoPE layers, QK norm, post-norm",
    "Exaone4ForCausalLM",
    text,
)
def exaone4():
    import transformers

    return transformers.Exaone4Config(
        **llama_like(sliding_window=6, layer_types=SLIDING_THEN_FULL, **SPECIAL_TOKENS)
    )


@arch(
    "olmo3",
    "decoder",
    "sliding window (6) / full layers, post-norm, QK norm",
    "Olmo3ForCausalLM",
    text,
)
def olmo3():
    import transformers

    return transformers.Olmo3Config(
        **llama_like(sliding_window=6, layer_types=SLIDING_THEN_FULL, **SPECIAL_TOKENS)
    )


@arch(
    "smollm3",
    "decoder",
    "RoPE skipped on chosen layers (no_rope_layers)",
    "SmolLM3ForCausalLM",
    text,
)
def smollm3():
    import transformers

    return transformers.SmolLM3Config(**llama_like(no_rope_layers=[1, 0], **SPECIAL_TOKENS))


@arch("arcee", "decoder", "squared ReLU MLP (no gate), RMSNorm", "ArceeForCausalLM", text)
def arcee():
    import transformers

    return transformers.ArceeConfig(**llama_like(**SPECIAL_TOKENS))


@arch(
    "apertus",
    "decoder",
    "xIELU activation (no gate), QK norm, Llama 3 RoPE scaling",
    "ApertusForCausalLM",
    text,
)
def apertus():
    import transformers

    # Llama 3 scaling around a 16-token pretraining length: with head_dim 8 one frequency is
    # interpolated (wavelength between 4 and 16) and the longer ones divided by the factor.
    rope = {
        "rope_type": "llama3",
        "rope_theta": 10000.0,
        "factor": 8.0,
        "original_max_position_embeddings": 16,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    }
    return transformers.ApertusConfig(**llama_like(rope_parameters=rope, **SPECIAL_TOKENS))


@arch("seed_oss", "decoder", "QKV bias, explicit head_dim", "SeedOssForCausalLM", text)
def seed_oss():
    import transformers

    return transformers.SeedOssConfig(**llama_like(head_dim=8, **SPECIAL_TOKENS))


@arch(
    "hunyuan_v1_dense",
    "decoder",
    "QK norm applied after RoPE",
    "HunYuanDenseV1ForCausalLM",
    text,
)
def hunyuan_v1_dense():
    import transformers

    return transformers.HunYuanDenseV1Config(**llama_like(head_dim=8, **SPECIAL_TOKENS))


@arch(
    "ernie4_5",
    "decoder",
    "interleaved RoPE (rotate every two), tied embeddings",
    "Ernie4_5ForCausalLM",
    text,
)
def ernie4_5():
    import transformers

    return transformers.Ernie4_5Config(**llama_like(head_dim=8, **SPECIAL_TOKENS))


@arch(
    "biogpt",
    "decoder",
    "learned positions (offset 2), scaled embeddings, GELU",
    "BioGptForCausalLM",
    text,
)
def biogpt():
    import transformers

    return transformers.BioGptConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        max_position_embeddings=POSITIONS,
        **SPECIAL_TOKENS,
    )


@arch("xglm", "decoder", "sinusoidal positions, scaled embeddings", "XGLMForCausalLM", text)
def xglm():
    import transformers

    return transformers.XGLMConfig(
        vocab_size=VOCAB,
        d_model=HIDDEN,
        ffn_dim=FFN,
        num_layers=LAYERS,
        attention_heads=HEADS,
        max_position_embeddings=POSITIONS,
        decoder_start_token_id=2,
        **SPECIAL_TOKENS,
    )


@arch(
    "codegen",
    "decoder",
    "fused QKV split in 4 model-parallel blocks, interleaved partial rotary (rotary_dim 4)",
    "CodeGenForCausalLM",
    text,
)
def codegen():
    import transformers

    return transformers.CodeGenConfig(
        vocab_size=VOCAB,
        n_embd=HIDDEN,
        n_layer=LAYERS,
        n_head=HEADS,
        rotary_dim=4,
        n_positions=POSITIONS,
        n_ctx=POSITIONS,
        bos_token_id=1,
        eos_token_id=2,
    )


@arch(
    "bitnet",
    "decoder",
    "sub-norms before the attention and MLP output projections, squared ReLU",
    "BitNetForCausalLM",
    text,
)
def bitnet():
    import transformers

    return transformers.BitNetConfig(**llama_like(**SPECIAL_TOKENS))


def text_with_doge_mask_rates(model, batch, seq, generator):
    """text(), after giving Doge's dynamic-mask rates `A` nonzero values as a trained model has: their zero
    initialization makes every key's bias exp(0) = 1, so the top-k keep window would choose among ties, which
    PyTorch and ONNX Runtime break differently. Fixed values: every call (sizes A and B) leaves the same model."""
    import torch

    with torch.no_grad():
        for layer in model.model.layers:
            rates = layer.self_attn.A
            rates.copy_(torch.linspace(0.5, 1.5, rates.numel()))
    return text(model, batch, seq, generator)


@arch(
    "doge",
    "decoder",
    "dynamic mask attention (value-dependent bias, top-k keep window 6)",
    "DogeForCausalLM",
    text_with_doge_mask_rates,
)
def doge():
    import transformers

    return transformers.DogeConfig(**llama_like(keep_window_size=6, **SPECIAL_TOKENS))


@arch(
    "diffllama",
    "decoder",
    "differential attention (two softmax maps subtracted, lambda re-parametrized)",
    "DiffLlamaForCausalLM",
    text,
)
def diffllama():
    import transformers

    return transformers.DiffLlamaConfig(**llama_like(head_dim=8, **SPECIAL_TOKENS))


@arch(
    "minicpm3",
    "decoder",
    "multi-head latent attention (low-rank Q/KV, decoupled RoPE), depth-scaled residuals",
    "MiniCPM3ForCausalLM",
    text,
)
def minicpm3():
    import transformers

    # MLA's keys and values have one head per query head.
    config = llama_like(
        q_lora_rank=16,
        kv_lora_rank=16,
        qk_nope_head_dim=8,
        qk_rope_head_dim=4,
        v_head_dim=8,
        head_dim=4,
        dim_model_base=16,
        **SPECIAL_TOKENS,
    )
    config["num_key_value_heads"] = HEADS
    return transformers.MiniCPM3Config(**config)


@arch("ctrl", "decoder", "sinusoidal positions added to scaled embeddings", "CTRLLMHeadModel", text)
def ctrl():
    import transformers

    return transformers.CTRLConfig(
        vocab_size=VOCAB,
        n_embd=HIDDEN,
        dff=FFN,
        n_layer=LAYERS,
        n_head=HEADS,
        n_positions=POSITIONS,
        **SPECIAL_TOKENS,
    )


@arch(
    "openai-gpt",
    "decoder",
    "post-LayerNorm, learned positions",
    "OpenAIGPTLMHeadModel",
    text,
)
def openai_gpt():
    import transformers

    return transformers.OpenAIGPTConfig(
        vocab_size=VOCAB,
        n_embd=HIDDEN,
        n_layer=LAYERS,
        n_head=HEADS,
        n_positions=POSITIONS,
        **SPECIAL_TOKENS,
    )


@arch(
    "nanochat",
    "decoder",
    "squared ReLU, parameter-free RMSNorm and QK norm, final logit soft-capping",
    "NanoChatForCausalLM",
    text,
)
def nanochat():
    import transformers

    return transformers.NanoChatConfig(**llama_like(**SPECIAL_TOKENS))


@arch(
    "vaultgemma",
    "decoder",
    "attention logit soft-capping without sandwich norms, alternating sliding window (6)",
    "VaultGemmaForCausalLM",
    text,
)
def vaultgemma():
    import transformers

    return transformers.VaultGemmaConfig(
        **llama_like(head_dim=8, query_pre_attn_scalar=8, sliding_window=6, **SPECIAL_TOKENS)
    )


@arch(
    "modernbert-decoder",
    "decoder",
    "bias-free LayerNorm, GeGLU, local (local_attention 6: window 3) / global layers, a RoPE base each",
    "ModernBertDecoderForCausalLM",
    text,
)
def modernbert_decoder():
    import transformers

    return transformers.ModernBertDecoderConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        max_position_embeddings=POSITIONS,
        local_attention=6,
        layer_types=["full_attention", "sliding_attention"],
        cls_token_id=1,
        sep_token_id=2,
        **SPECIAL_TOKENS,
    )


@arch(
    "hyperclovax",
    "decoder",
    "Peri-LN (norms around each block's output), muP multipliers",
    "HyperCLOVAXForCausalLM",
    text,
)
def hyperclovax():
    import transformers

    return transformers.HyperCLOVAXConfig(
        **llama_like(
            head_dim=8,
            embedding_multiplier=4.0,
            residual_multiplier=0.5,
            attention_multiplier=0.125,
            logits_scaling=0.5,
            **SPECIAL_TOKENS,
        )
    )


@arch(
    "ministral3",
    "decoder",
    "YaRN RoPE (pretraining 16) with Llama 4 position-dependent query scaling",
    "Ministral3ForCausalLM",
    text,
)
def ministral3():
    import transformers

    rope = {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 16,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "llama_4_scaling_beta": 0.1,
    }
    return transformers.Ministral3Config(
        **llama_like(head_dim=8, rope_parameters=rope, **SPECIAL_TOKENS)
    )


@arch(
    "gpt_neox_japanese",
    "decoder",
    "attention output bias added after the residual split, LayerNorm",
    "GPTNeoXJapaneseForCausalLM",
    text,
)
def gpt_neox_japanese():
    import transformers

    return transformers.GPTNeoXJapaneseConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_multiple_size=2,
        max_position_embeddings=POSITIONS,
        **SPECIAL_TOKENS,
    )


@arch(
    "jais2",
    "decoder",
    "squared ReLU MLP with biases, LayerNorm, QKV bias",
    "Jais2ForCausalLM",
    text,
)
def jais2():
    import transformers

    return transformers.Jais2Config(**llama_like(head_dim=8, **SPECIAL_TOKENS))


@arch(
    "cwm",
    "decoder",
    "sliding window (6) / full layers, Llama 3 RoPE scaling",
    "CwmForCausalLM",
    text,
)
def cwm():
    import transformers

    rope = {
        "rope_type": "llama3",
        "rope_theta": 10000.0,
        "factor": 8.0,
        "original_max_position_embeddings": 16,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    }
    return transformers.CwmConfig(
        **llama_like(
            head_dim=8,
            sliding_window=6,
            layer_types=SLIDING_THEN_FULL,
            rope_parameters=rope,
            **SPECIAL_TOKENS,
        )
    )


@arch(
    "gemma3n_text",
    "decoder",
    "AltUp, LAuReL, per-layer embeddings, Gaussian top-k activation sparsity",
    "Gemma3nForCausalLM",
    text,
)
def gemma3n_text():
    import transformers

    return transformers.Gemma3nTextConfig(
        **llama_like(
            head_dim=8,
            sliding_window=6,
            layer_types=SLIDING_THEN_FULL,
            vocab_size_per_layer_input=VOCAB,
            hidden_size_per_layer_input=8,
            altup_num_inputs=2,
            laurel_rank=4,
            num_kv_shared_layers=0,
            activation_sparsity_pattern=[0.95, 0.0],
            **SPECIAL_TOKENS,
        )
    )


@arch(
    "gemma4_text",
    "decoder",
    "per-layer input embeddings, proportional partial RoPE (0.25) on global layers, sliding window (6)",
    "Gemma4ForCausalLM",
    text,
)
def gemma4_text():
    import transformers

    return transformers.Gemma4TextConfig(
        **llama_like(
            head_dim=8,
            sliding_window=6,
            layer_types=SLIDING_THEN_FULL,
            vocab_size_per_layer_input=VOCAB,
            hidden_size_per_layer_input=8,
            per_layer_config={},
            **SPECIAL_TOKENS,
        )
    )


@arch(
    "ministral",
    "decoder",
    "sliding window (6) / full layers chosen by layer_types",
    "MinistralForCausalLM",
    text,
)
def ministral():
    import transformers

    return transformers.MinistralConfig(
        **llama_like(head_dim=8, sliding_window=6, layer_types=SLIDING_THEN_FULL, **SPECIAL_TOKENS)
    )
