"""Decoder LMs beyond dense attention: mixture-of-experts, state-space and hybrid models.

Every mixture has 4 experts routed top-2 (plus its shared expert where the architecture has one); every
hybrid has 2 layers, one of each kind (the recurrent or state-space layer first)."""

from .decoders import llama_like
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

EXPERTS = dict(num_experts=4, num_experts_per_tok=2)
SPECIAL_TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)


def sized(**extra):
    """The decoders' tiny Llama sizes (`llama_like`), `extra` added or overriding them."""
    return llama_like() | extra


# ── Mixtures of experts ──


@arch(
    "granitemoe",
    "decoder",
    "MoE (4 experts, top-2), embedding / residual / attention / logit multipliers",
    "GraniteMoeForCausalLM",
    text,
)
def granitemoe():
    import transformers

    return transformers.GraniteMoeConfig(
        **sized(
            num_local_experts=4,
            num_experts_per_tok=2,
            embedding_multiplier=12.0,
            residual_multiplier=0.22,
            attention_multiplier=0.0078125,
            logits_scaling=8.0,
            **SPECIAL_TOKENS,
        )
    )


@arch(
    "granitemoeshared",
    "decoder",
    "MoE (4 experts, top-2) + shared expert, Granite multipliers",
    "GraniteMoeSharedForCausalLM",
    text,
)
def granitemoeshared():
    import transformers

    return transformers.GraniteMoeSharedConfig(
        **sized(
            num_local_experts=4,
            num_experts_per_tok=2,
            shared_intermediate_size=32,
            embedding_multiplier=12.0,
            residual_multiplier=0.22,
            attention_multiplier=0.0078125,
            logits_scaling=8.0,
            **SPECIAL_TOKENS,
        )
    )


@arch(
    "olmoe", "decoder", "MoE (4 experts, top-2), QK norm over all heads", "OlmoeForCausalLM", text
)
def olmoe():
    import transformers

    return transformers.OlmoeConfig(**sized(**EXPERTS, **SPECIAL_TOKENS))


@arch(
    "flex_olmo",
    "decoder",
    "MoE (4 experts, top-2), post-norm, QK norm",
    "FlexOlmoForCausalLM",
    text,
)
def flex_olmo():
    import transformers

    return transformers.FlexOlmoConfig(**sized(**EXPERTS, **SPECIAL_TOKENS))


@arch(
    "jetmoe",
    "decoder",
    "mixture of attention heads + MoE MLP (4 experts, top-2)",
    "JetMoeForCausalLM",
    text,
)
def jetmoe():
    import transformers

    return transformers.JetMoeConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_key_value_heads=KV_HEADS,
        kv_channels=8,
        intermediate_size=FFN,
        max_position_embeddings=POSITIONS,
        num_local_experts=4,
        num_experts_per_tok=2,
        **SPECIAL_TOKENS,
    )


@arch(
    "dbrx",
    "decoder",
    "fused-weight MoE (4 experts, top-2), clipped QKV",
    "DbrxForCausalLM",
    text,
)
def dbrx():
    import transformers

    return transformers.DbrxConfig(
        d_model=HIDDEN,
        n_heads=HEADS,
        n_layers=LAYERS,
        max_seq_len=POSITIONS,
        vocab_size=VOCAB,
        # why rope_theta here: DbrxAttention reads it from the attention config, which does not default it
        attn_config={"kv_n_heads": KV_HEADS, "clip_qkv": 0.5, "rope_theta": 10000.0},
        ffn_config={"ffn_hidden_size": FFN, "moe_num_experts": 4, "moe_top_k": 2},
        **SPECIAL_TOKENS,
    )


def latent_attention(**extra):
    """Multi-head latent attention sizes (DeepSeek V2/V3, LongCat): compressed KV (rank 16) and query (rank 24),
    each head's key a no-position part (8) and a rotary part (4)."""
    return dict(
        kv_lora_rank=16,
        q_lora_rank=24,
        qk_nope_head_dim=8,
        qk_rope_head_dim=4,
        v_head_dim=8,
        **extra,
    )


def deepseek_moe(**extra):
    """DeepSeek-style routing: 4 routed experts in 2 groups (top-1 group, top-2 experts), 1 shared expert, the
    first layer dense."""
    return dict(
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        n_group=2,
        topk_group=1,
        moe_intermediate_size=32,
        first_k_dense_replace=1,
        **extra,
    )


@arch(
    "deepseek_v2",
    "decoder",
    "multi-head latent attention, group-limited greedy routing (4 experts, top-2)",
    "DeepseekV2ForCausalLM",
    text,
)
def deepseek_v2():
    import transformers

    return transformers.DeepseekV2Config(
        **sized(
            num_key_value_heads=HEADS,
            topk_method="group_limited_greedy",
            **latent_attention(),
            **deepseek_moe(),
            **SPECIAL_TOKENS,
        )
    )


@arch(
    "deepseek_v3",
    "decoder",
    "multi-head latent attention, sigmoid router with bias correction (4 experts, top-2)",
    "DeepseekV3ForCausalLM",
    text,
)
def deepseek_v3():
    import transformers

    return transformers.DeepseekV3Config(
        **sized(
            num_key_value_heads=HEADS,
            **latent_attention(),
            **deepseek_moe(),
            **SPECIAL_TOKENS,
        )
    )


@arch(
    "dots1",
    "decoder",
    "QK norm, sigmoid group routing (4 experts, top-2) + shared expert",
    "Dots1ForCausalLM",
    text,
)
def dots1():
    import transformers

    return transformers.Dots1Config(**sized(head_dim=8, **deepseek_moe(), **SPECIAL_TOKENS))


@arch(
    "glm4_moe",
    "decoder",
    "partial rotary (0.5), sigmoid group routing (4 experts, top-2), QK norm",
    "Glm4MoeForCausalLM",
    text,
)
def glm4_moe():
    import transformers

    return transformers.Glm4MoeConfig(
        **sized(head_dim=8, use_qk_norm=True, **deepseek_moe(), **SPECIAL_TOKENS)
    )


@arch(
    "gpt_oss",
    "decoder",
    "attention sinks, clamped SwiGLU experts with biases (4, top-2), alternating sliding window (6)",
    "GptOssForCausalLM",
    text,
)
def gpt_oss():
    import transformers

    return transformers.GptOssConfig(
        **sized(
            head_dim=8,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=6,
            layer_types=["sliding_attention", "full_attention"],
            **SPECIAL_TOKENS,
        )
    )


@arch(
    "ernie4_5_moe",
    "decoder",
    "MoE (4 experts, top-2) with a routing bias + shared expert, first layer dense",
    "Ernie4_5_MoeForCausalLM",
    text,
)
def ernie4_5_moe():
    import transformers

    return transformers.Ernie4_5_MoeConfig(
        **sized(
            moe_intermediate_size=32,
            moe_num_experts=4,
            moe_k=2,
            moe_num_shared_experts=1,
            moe_layer_start_index=1,
            **SPECIAL_TOKENS,
        )
    )


@arch(
    "hunyuan_v1_moe",
    "decoder",
    "MoE (4 experts, top-2) + shared MLP, QK norm after RoPE",
    "HunYuanMoEV1ForCausalLM",
    text,
)
def hunyuan_v1_moe():
    import transformers

    return transformers.HunYuanMoEV1Config(
        **sized(head_dim=8, num_experts=4, moe_topk=2, **SPECIAL_TOKENS)
    )


@arch(
    "longcat_flash",
    "decoder",
    "zero-computation experts (4 + 2 identity, top-2), two attentions per layer, MLA",
    "LongcatFlashForCausalLM",
    text,
)
def longcat_flash():
    import transformers

    return transformers.LongcatFlashConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_layers=1,  # a LongCat layer holds two attention + MLP sub-layers
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=POSITIONS,
        ffn_hidden_size=FFN,
        expert_ffn_hidden_size=32,
        n_routed_experts=4,
        zero_expert_num=2,
        moe_topk=2,
        head_dim=4,  # the rotary part of each head (qk_rope_head_dim)
        **latent_attention(),
        **SPECIAL_TOKENS,
    )


# ── Linear attention hybrids ──


@arch(
    "minimax",
    "decoder",
    "lightning (linear) attention + softmax attention layers, MoE (4 experts, top-2)",
    "MiniMaxForCausalLM",
    text,
)
def minimax():
    import transformers

    return transformers.MiniMaxConfig(
        **sized(
            head_dim=8,
            num_local_experts=4,
            num_experts_per_tok=2,
            block_size=4,
            layer_types=["linear_attention", "full_attention"],
            **SPECIAL_TOKENS,
        )
    )


@arch(
    "qwen3_next",
    "decoder",
    "gated DeltaNet + gated attention layers, MoE (4 experts, top-2) + shared expert",
    "Qwen3NextForCausalLM",
    text,
)
def qwen3_next():
    import transformers

    return transformers.Qwen3NextConfig(
        **sized(
            head_dim=8,
            linear_conv_kernel_dim=4,
            linear_key_head_dim=8,
            linear_value_head_dim=8,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            layer_types=["linear_attention", "full_attention"],
            **EXPERTS,
            **SPECIAL_TOKENS,
        )
    )


@arch(
    "lfm2",
    "decoder",
    "gated short-convolution + attention layers",
    "Lfm2ForCausalLM",
    text,
)
def lfm2():
    import transformers

    return transformers.Lfm2Config(
        **sized(layer_types=["conv", "full_attention"], **SPECIAL_TOKENS)
    )


@arch(
    "lfm2_moe",
    "decoder",
    "short-convolution + attention layers, sigmoid-routed MoE (4 experts, top-2) with expert bias",
    "Lfm2MoeForCausalLM",
    text,
)
def lfm2_moe():
    import transformers

    return transformers.Lfm2MoeConfig(
        **sized(
            moe_intermediate_size=32,
            num_dense_layers=1,
            layer_types=["conv", "full_attention"],
            **EXPERTS,
            **SPECIAL_TOKENS,
        )
    )


# ── Recurrent and state-space ──


@arch(
    "falcon_mamba",
    "decoder",
    "selective scan with RMS-normed B, C and dt",
    "FalconMambaForCausalLM",
    text_ids_only,
)
def falcon_mamba():
    import transformers

    return transformers.FalconMambaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        state_size=8,
        num_hidden_layers=LAYERS,
        expand=2,
        conv_kernel=4,
        **SPECIAL_TOKENS,
    )


@arch(
    "rwkv",
    "decoder",
    "RWKV time mixing (WKV recurrence), token shift",
    "RwkvForCausalLM",
    text_ids_only,
)
def rwkv():
    import transformers

    return transformers.RwkvConfig(
        vocab_size=VOCAB,
        context_length=POSITIONS,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        intermediate_size=FFN,
        bos_token_id=1,
        eos_token_id=2,
    )


@arch(
    "recurrent_gemma",
    "decoder",
    "RG-LRU recurrence + local attention (window 6)",
    "RecurrentGemmaForCausalLM",
    text,
)
def recurrent_gemma():
    import transformers

    return transformers.RecurrentGemmaConfig(
        num_hidden_layers=LAYERS,
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        num_attention_heads=HEADS,
        num_key_value_heads=1,
        lru_width=HIDDEN,
        attention_window_size=6,
        conv1d_width=4,
        block_types=["recurrent", "attention"],
        **SPECIAL_TOKENS,
    )


@arch(
    "xlstm",
    "decoder",
    "mLSTM (matrix memory, exponential gating)",
    "xLSTMForCausalLM",
    text_ids_only,
)
def xlstm():
    import transformers

    return transformers.xLSTMConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_heads=HEADS,
        chunk_size=4,
        mode="inference",
        chunkwise_kernel="chunkwise--native_autograd",
        sequence_kernel="native_sequence__native",
        step_kernel="native",
        # why no cache: xLSTM's cache allocates its matrix memory for 2x the head size when the model is
        # not the default size, and the first forward fails on it
        use_cache=False,
        **SPECIAL_TOKENS,
    )


# ── Mamba + attention hybrids ──


def mamba2_sizes(prefix="mamba_", **extra):
    """A Mamba-2 mixer: 8 heads of 8 (expand 2), state 8, 1 group, conv 4, chunk 4 (shorter than both sizes)."""
    sizes = dict(n_heads=8, d_head=8, d_state=8, n_groups=1, d_conv=4, chunk_size=4)
    return {prefix + k: v for k, v in sizes.items()} | extra


@arch(
    "jamba",
    "decoder",
    "Mamba + attention layers, MoE (4 experts, top-2)",
    "JambaForCausalLM",
    text,
)
def jamba():
    import transformers

    return transformers.JambaConfig(
        **sized(
            attn_layer_period=2,
            attn_layer_offset=1,
            expert_layer_period=2,
            expert_layer_offset=1,
            mamba_d_state=8,
            mamba_d_conv=4,
            mamba_expand=2,
            **EXPERTS,
            **SPECIAL_TOKENS,
        )
    )


@arch(
    "bamba",
    "decoder",
    "Mamba-2 + attention layers",
    "BambaForCausalLM",
    text,
)
def bamba():
    import transformers

    return transformers.BambaConfig(
        **sized(attn_layer_indices=[1], **mamba2_sizes(), **SPECIAL_TOKENS)
    )


@arch(
    "granitemoehybrid",
    "decoder",
    "Mamba-2 + attention layers, MoE (4 experts, top-2) + shared expert, Granite multipliers",
    "GraniteMoeHybridForCausalLM",
    text,
)
def granitemoehybrid():
    import transformers

    sizes = mamba2_sizes()
    sizes.pop("mamba_chunk_size")
    return transformers.GraniteMoeHybridConfig(
        **sized(
            num_local_experts=4,
            num_experts_per_tok=2,
            shared_intermediate_size=32,
            embedding_multiplier=12.0,
            residual_multiplier=0.22,
            attention_multiplier=0.0078125,
            logits_scaling=8.0,
            layer_types=["mamba", "attention"],
            mamba_chunk_size=4,
            **sizes,
            **SPECIAL_TOKENS,
        )
    )


@arch(
    "falcon_h1",
    "decoder",
    "parallel Mamba-2 and attention in every layer, muP multipliers",
    "FalconH1ForCausalLM",
    text,
)
def falcon_h1():
    import transformers

    return transformers.FalconH1Config(
        **sized(
            **mamba2_sizes(),
            mamba_d_ssm=64,
            embedding_multiplier=2.0,
            lm_head_multiplier=0.5,
            key_multiplier=0.7,
            attention_in_multiplier=1.2,
            attention_out_multiplier=0.8,
            ssm_in_multiplier=1.1,
            ssm_out_multiplier=0.9,
            **SPECIAL_TOKENS,
        )
    )


@arch(
    "nemotron_h",
    "decoder",
    "Mamba-2, attention and MLP layers in a pattern (squared-ReLU MLP)",
    "NemotronHForCausalLM",
    text,
)
def nemotron_h():
    import transformers

    return transformers.NemotronHConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        layers_block_type=["linear_attention", "full_attention", "mlp"],
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=8,
        max_position_embeddings=POSITIONS,
        intermediate_size=FFN,
        ssm_state_size=8,
        mamba_num_heads=8,
        mamba_head_dim=8,
        n_groups=1,
        conv_kernel=4,
        expand=2,
        chunk_size=4,
        **SPECIAL_TOKENS,
    )


@arch(
    "zamba",
    "decoder",
    "Mamba layers + one attention block shared by the layers, fed the embeddings too",
    "ZambaForCausalLM",
    text,
)
def zamba():
    import transformers

    return transformers.ZambaConfig(
        **sized(
            num_key_value_heads=HEADS,
            attention_head_dim=16,
            n_mamba_heads=2,
            mamba_d_state=8,
            mamba_d_conv=4,
            mamba_expand=2,
            # two hybrid layers (each a Mamba layer after the shared block): the block's weights are shared, and
            # Zamba ties them from the first hybrid layer to the others, so it needs more than one
            layers_block_type=["hybrid", "hybrid"],
            **SPECIAL_TOKENS,
        )
    )


@arch(
    "zamba2",
    "decoder",
    "Mamba-2 layers + shared attention blocks with LoRA adapters",
    "Zamba2ForCausalLM",
    text,
)
def zamba2():
    import transformers

    return transformers.Zamba2Config(
        vocab_size=VOCAB,
        max_position_embeddings=POSITIONS,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        layers_block_type=["mamba", "hybrid"],
        mamba_d_state=8,
        mamba_d_conv=4,
        mamba_expand=2,
        mamba_ngroups=1,
        n_mamba_heads=8,
        chunk_size=4,
        intermediate_size=FFN,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        num_mem_blocks=1,
        use_shared_attention_adapter=True,
        adapter_rank=4,
        use_mem_rope=True,
        **SPECIAL_TOKENS,
    )
