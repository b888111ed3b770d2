"""Multimodal: dual encoders and vision-language models."""

from .decoders import llama_like
from .registry import (
    FFN,
    HEADS,
    HIDDEN,
    LAYERS,
    POSITIONS,
    VOCAB,
    arch,
    image_then_text,
    text_and_image,
)
from .vision import vit_like


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
