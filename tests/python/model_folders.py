"""Writes tiny model folders as `save_pretrained` writes them, for the tests of
weights streamed from a checkpoint: `model_folders.py KIND OUT`.

KIND: `llama` (float32, one file), `llama-sharded` (several shards and their
index), `llama-tied-bf16` (tied embeddings stored once, bfloat16: exported as
float32 they are converted), `bert-mlm` (a checkpoint without a pooler: a
`BertModel` from it falls back to loading); and one per other output
structure: `llama-tokenizer` (`llama` with a tokenizer beside it, a folder
to generate from), `llama-bpe` (a `llama` of the vocabulary of a byte-level
BPE tokenizer trained here on a few sentences: text a person reads), `bert` (a base model: hidden states and a pooled output), `gpt2`
(logits and a cache), `vit` (image classification logits), `dinov2` (a
vision backbone whose position embeddings are resampled to the image's
patch grid: its hidden states), `dinov2_with_registers` (the same with
register tokens, resampling with antialiasing); and the
encoder-decoders: `whisper` (speech, with a tokenizer and a feature
extractor), `t5`, `bart`; `phi3-longrope`, a Phi-3 with LongRoPE scaling as
Phi-3-mini-128k's config has it (`rope_scaling` of `type` longrope), whose
pretraining length (6) lies between the lengths a dynamic export is checked
at, so one check takes the short factors and the other the long;
`phimoe-longrope`, a PhiMoE with LongRoPE as Phi-3.5-MoE's config has it
(its cos/sin scale `long_mscale` past the pretraining length, 6, and
`short_mscale` within it); and `deepseek_v3`, a mixture-of-experts decoder
outside the sweep whose attention writes its key states in place (`copy_`
into slices of a new tensor) and whose router writes its group mask
(`scatter_`); `deepseek_v2` (its second layer's MLP of experts) and
`deepseek_v2-dense` (both layers dense) and `llama4_text`, decoders computing
RoPE in complex numbers (`torch.polar`, `view_as_complex`); `fnet`, whose
token mixing is a 2-D FFT (`torch.fft.fftn`); `gemma4-kv-shared`, a Gemma 4
whose last two of four layers attend over the keys and values the last
earlier layer of their kind cached (`num_kv_shared_layers`)."""

import sys

import torch
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    BertConfig,
    BertForMaskedLM,
    BertModel,
    DeepseekV2Config,
    DeepseekV2ForCausalLM,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    Dinov2Config,
    Dinov2Model,
    Dinov2WithRegistersConfig,
    Dinov2WithRegistersModel,
    FNetConfig,
    FNetModel,
    Gemma4ForCausalLM,
    Gemma4TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    Llama4ForCausalLM,
    Llama4TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    PhimoeConfig,
    PhimoeForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
    ViTConfig,
    ViTForImageClassification,
    WhisperConfig,
    WhisperForConditionalGeneration,
)


def llama(**extra):
    torch.manual_seed(0)
    config = LlamaConfig(
        **{
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 1000,
            **extra,
        }
    )
    return LlamaForCausalLM(config)


ENCODER_DECODERS = {
    "whisper": (
        WhisperForConditionalGeneration,
        WhisperConfig(
            vocab_size=128,
            d_model=32,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            num_mel_bins=16,
            max_source_positions=16,
            max_target_positions=32,
            pad_token_id=1,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=1,
        ),
    ),
    "t5": (
        T5ForConditionalGeneration,
        T5Config(
            vocab_size=128,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_decoder_layers=2,
            num_heads=4,
            decoder_start_token_id=0,
        ),
    ),
    "bart": (
        BartForConditionalGeneration,
        BartConfig(
            vocab_size=128,
            d_model=32,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_position_embeddings=64,
        ),
    ),
}


def tokenizer_files(config, out):
    """A tokenizer of `config.vocab_size` words, as a Hub model folder has it beside the model."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(config.vocab_size)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="w0", pad_token="w1", eos_token="w2"
    ).save_pretrained(out)


# What `llama-bpe`'s tokenizer is trained on.
BPE_TEXT = """The quick brown fox jumps over the lazy dog. A model generates text one token at a time.
Exporters turn a PyTorch model into a program a runtime loads: ONNX, torch.export, ExecuTorch.
Each token is chosen from the logits of the last position; greedy search takes the largest.
Sampling draws from them instead, with a temperature and the top k candidates."""


def bpe_tokenizer(out):
    """A byte-level BPE tokenizer trained on `BPE_TEXT` (`<unk>`, `<s>`,
    `</s>` first: ids 0, 1, 2, Llama's defaults), saved in `out`; its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(BPE_TEXT.splitlines(), trainer)
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    ).save_pretrained(out)
    return tokenizer.get_vocab_size()


def processor_files(config, out):
    """A tokenizer and a feature extractor of the config's mel bins, as a
    Hub model folder has them beside the model."""
    from transformers import WhisperFeatureExtractor

    tokenizer_files(config, out)
    WhisperFeatureExtractor(feature_size=config.num_mel_bins).save_pretrained(out)


def deepseek_v3():
    torch.manual_seed(0)
    config = DeepseekV3Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_hidden_layers=2,
        first_k_dense_replace=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_group=2,
        topk_group=1,
        kv_lora_rank=16,
        q_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=8,
        max_position_embeddings=64,
    )
    return DeepseekV3ForCausalLM(config).eval()


def deepseek_v2(**extra):
    torch.manual_seed(0)
    config = DeepseekV2Config(
        **extra,
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_group=2,
        topk_group=1,
        kv_lora_rank=16,
        q_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=8,
        max_position_embeddings=64,
    )
    return DeepseekV2ForCausalLM(config).eval()


def gemma4_kv_shared():
    torch.manual_seed(0)
    config = Gemma4TextConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        head_dim=8,
        sliding_window=6,
        layer_types=["sliding_attention", "full_attention"] * 2,
        vocab_size_per_layer_input=128,
        hidden_size_per_layer_input=8,
        per_layer_config={},
        num_kv_shared_layers=2,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return Gemma4ForCausalLM(config).eval()


def llama4_text():
    torch.manual_seed(0)
    config = Llama4TextConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        intermediate_size_mlp=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        num_local_experts=2,
        max_position_embeddings=64,
    )
    return Llama4ForCausalLM(config).eval()


def fnet():
    torch.manual_seed(0)
    config = FNetConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        max_position_embeddings=64,
        use_tpu_fourier_optimizations=False,
    )
    return FNetModel(config).eval()


def phi3_longrope():
    torch.manual_seed(0)
    config = Phi3Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        original_max_position_embeddings=6,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        rope_scaling={
            "type": "longrope",
            "long_factor": [1.2, 2.0, 3.1, 4.5],
            "short_factor": [1.0, 1.1, 1.3, 1.6],
        },
    )
    return Phi3ForCausalLM(config).eval()


def phimoe_longrope():
    torch.manual_seed(0)
    config = PhimoeConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        num_local_experts=4,
        num_experts_per_tok=2,
        rope_parameters={
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "original_max_position_embeddings": 6,
            "long_factor": [1.2, 2.0, 3.1, 4.5],
            "short_factor": [1.0, 1.1, 1.3, 1.6],
            "long_mscale": 1.3,
            "short_mscale": 1.1,
        },
    )
    return PhimoeForCausalLM(config).eval()


def main(kind, out):
    if kind == "deepseek_v3":
        deepseek_v3().save_pretrained(out)
    elif kind == "deepseek_v2":
        deepseek_v2(first_k_dense_replace=1).save_pretrained(out)
    elif kind == "deepseek_v2-dense":
        # Every layer's MLP dense: OpenVINO's CPU plugin computes a tiny
        # DeepSeek's mixture-of-experts layer off (DeepSeek-V3's too, whose
        # RoPE is real), which is not what its complex RoPE is checked for.
        deepseek_v2(first_k_dense_replace=2).save_pretrained(out)
    elif kind == "gemma4-kv-shared":
        gemma4_kv_shared().save_pretrained(out)
    elif kind == "llama4_text":
        llama4_text().save_pretrained(out)
    elif kind == "fnet":
        fnet().save_pretrained(out)
    elif kind == "phi3-longrope":
        phi3_longrope().save_pretrained(out)
    elif kind == "phimoe-longrope":
        phimoe_longrope().save_pretrained(out)
    elif kind == "llama":
        llama().save_pretrained(out)
    elif kind == "llama-tokenizer":
        model = llama()
        model.save_pretrained(out)
        tokenizer_files(model.config, out)
    elif kind == "llama-bpe":
        vocab_size = bpe_tokenizer(out)
        llama(vocab_size=vocab_size).save_pretrained(out)
    elif kind == "llama-sharded":
        llama().save_pretrained(out, max_shard_size="300KB")
    elif kind == "llama-tied-bf16":
        # Wide enough that no weight is small enough for the ONNX optimizer
        # to fold it into a new initializer: each stays where the plan has it.
        llama(tie_word_embeddings=True, hidden_size=96).to(torch.bfloat16).save_pretrained(out)
    elif kind == "bert-mlm":
        torch.manual_seed(0)
        BertForMaskedLM(
            BertConfig(
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=2,
                vocab_size=500,
            )
        ).save_pretrained(out)
    elif kind == "bert":
        torch.manual_seed(0)
        BertModel(
            BertConfig(
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=2,
                vocab_size=500,
            )
        ).save_pretrained(out)
    elif kind == "gpt2":
        torch.manual_seed(0)
        GPT2LMHeadModel(
            GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=500, n_positions=64)
        ).save_pretrained(out)
    elif kind == "vit":
        torch.manual_seed(0)
        ViTForImageClassification(
            ViTConfig(
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=2,
                image_size=32,
                patch_size=8,
                num_labels=3,
            )
        ).save_pretrained(out)
    elif kind == "dinov2":
        torch.manual_seed(0)
        Dinov2Model(
            Dinov2Config(
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                image_size=32,
                patch_size=8,
            )
        ).save_pretrained(out)
    elif kind == "dinov2_with_registers":
        torch.manual_seed(0)
        Dinov2WithRegistersModel(
            Dinov2WithRegistersConfig(
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                image_size=32,
                patch_size=8,
                num_register_tokens=2,
            )
        ).save_pretrained(out)
    elif kind in ENCODER_DECODERS:
        torch.manual_seed(0)
        model, config = ENCODER_DECODERS[kind]
        model(config).save_pretrained(out)
        if kind == "whisper":
            processor_files(config, out)
    else:
        raise SystemExit(f"unknown kind {kind}")


if __name__ == "__main__":
    main(*sys.argv[1:])
