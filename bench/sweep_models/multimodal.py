"""Multimodal: dual encoders, detection and segmentation over text + image, vision-language models."""

from .decoders import llama_like
from .registry import (
    FFN,
    HEADS,
    HIDDEN,
    LAYERS,
    POSITIONS,
    SIZE_A,
    VOCAB,
    arch,
    fixed_pixels,
    image_then_text,
    text,
    text_and_image,
)
from .vision import vit_like


def clip_text(**extra):
    return (
        dict(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            intermediate_size=FFN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            max_position_embeddings=POSITIONS,
        )
        | extra
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


# ── Inputs ──


def image_tokens_then_text(model, batch, seq, generator, tokens=None, token_types=False):
    """A VLM prompt whose image yields `tokens` tokens (pooled or pixel-shuffled from the vision tower's
    patches): the image's tokens first, then `seq` text tokens; `token_types`: token_type_ids marking the
    image's tokens (1), as Gemma3's processor returns them."""
    import torch

    config = model.config
    image_token = config.image_token_id
    words = torch.randint(3, min(image_token, VOCAB - 8), (batch, seq), generator=generator)
    ids = torch.cat([torch.full((batch, tokens), image_token, dtype=torch.long), words], dim=1)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if token_types:
        inputs["token_type_ids"] = (ids == image_token).long()
    return inputs


def gemma3_prompt(model, batch, seq, generator):
    inputs = image_tokens_then_text(
        model, batch, seq, generator, tokens=model.config.mm_tokens_per_image, token_types=True
    )
    inputs.update(fixed_pixels(model, batch, seq, generator))
    return inputs


def idefics3_prompt(model, batch, seq, generator):
    """Idefics3: one image per prompt, pixel_values (batch, images, C, H, W), its patches pixel-shuffled by
    `scale_factor` into (patches / scale_factor^2) tokens."""
    config = model.config
    vision = config.vision_config
    tokens = (vision.image_size // vision.patch_size) ** 2 // config.scale_factor**2
    inputs = image_tokens_then_text(model, batch, seq, generator, tokens=tokens)
    inputs["pixel_values"] = fixed_pixels(model, batch, seq, generator)["pixel_values"][:, None]
    return inputs


# Qwen2-VL's vision config has no image size: a 32x32 image in 8x8 patches is a 4x4 grid.
QWEN2_VL_GRID = 4


def qwen2_vl_prompt(model, batch, seq, generator):
    """Qwen2-VL: each image's patches flattened (patches, C x temporal x patch x patch) with its grid
    (t, h, w) in image_grid_thw, merged 2x2 into tokens: the image's tokens first, then `seq` text tokens."""
    import torch

    config = model.config
    vision = config.vision_config
    grid = QWEN2_VL_GRID
    tokens = grid * grid // vision.spatial_merge_size**2
    inputs = image_tokens_then_text(model, batch, seq, generator, tokens=tokens)
    inputs["mm_token_type_ids"] = (inputs["input_ids"] == config.image_token_id).int()
    width = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    inputs["pixel_values"] = torch.randn(batch * grid * grid, width, generator=generator)
    inputs["image_grid_thw"] = torch.tensor([[1, grid, grid]] * batch, dtype=torch.long)
    return inputs


def text_and_patches(model, batch, seq, generator):
    """SigLIP2 (NaFlex): input_ids, and each image as a flat sequence of patches with its (rows, columns)
    in spatial_shapes and a pixel_attention_mask; 4x4 patches at size A, 6x6 at size B."""
    import torch

    inputs = text(model, batch, seq, generator)
    inputs.pop("attention_mask")  # SigLIP is trained on padded text without a mask
    vision = model.config.vision_config
    side = 4 if seq == SIZE_A[1] else 6
    width = vision.num_channels * vision.patch_size**2
    inputs["pixel_values"] = torch.randn(batch, side * side, width, generator=generator)
    inputs["pixel_attention_mask"] = torch.ones(batch, side * side, dtype=torch.long)
    inputs["spatial_shapes"] = torch.tensor([[side, side]] * batch, dtype=torch.long)
    return inputs


# ── Architectures ──


@arch(
    "blip",
    "multimodal",
    "ViT + BERT-like text decoder cross-attending to the image",
    "BlipForConditionalGeneration",
    text_and_image,
)
def blip():
    import transformers

    return transformers.BlipConfig(
        text_config=clip_text(
            encoder_hidden_size=HIDDEN, bos_token_id=1, pad_token_id=0, sep_token_id=2
        ),
        vision_config=vit_like(),
        projection_dim=HIDDEN,
        image_text_hidden_size=HIDDEN,
    )


@arch(
    "owlvit",
    "multimodal",
    "open-vocabulary detection: box and class heads over patch tokens, text queries",
    "OwlViTForObjectDetection",
    text_and_image,
)
def owlvit():
    import transformers

    return transformers.OwlViTConfig(
        text_config=clip_text(
            max_position_embeddings=16, bos_token_id=0, eos_token_id=2, pad_token_id=1
        ),
        vision_config=vit_like(),
        projection_dim=HIDDEN,
    )


@arch(
    "owlv2",
    "multimodal",
    "open-vocabulary detection with an objectness head",
    "Owlv2ForObjectDetection",
    text_and_image,
)
def owlv2():
    import transformers

    return transformers.Owlv2Config(
        text_config=clip_text(
            max_position_embeddings=16, bos_token_id=0, eos_token_id=2, pad_token_id=1
        ),
        vision_config=vit_like(),
        projection_dim=HIDDEN,
    )


@arch(
    "chinese_clip",
    "multimodal",
    "dual encoder: BERT text tower (token types, CLS pooling) + CLIP vision",
    "ChineseCLIPModel",
    text_and_image,
)
def chinese_clip():
    import transformers

    return transformers.ChineseCLIPConfig(
        text_config=clip_text(), vision_config=vit_like(), projection_dim=HIDDEN
    )


@arch(
    "altclip",
    "multimodal",
    "dual encoder: XLM-R text tower (positions from the padding mask) + CLIP vision",
    "AltCLIPModel",
    text_and_image,
)
def altclip():
    import transformers

    return transformers.AltCLIPConfig(
        text_config=clip_text(
            project_dim=HIDDEN, pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1
        ),
        vision_config=vit_like(),
        projection_dim=HIDDEN,
    )


@arch(
    "groupvit",
    "multimodal",
    "grouping blocks: learned group tokens, hard (argmax) patch-to-group assignment",
    "GroupViTModel",
    text_and_image,
)
def groupvit():
    import transformers

    vision = vit_like(depths=[1, 1], num_group_tokens=[4, 0], num_output_groups=[4, 4])
    return transformers.GroupViTConfig(
        text_config=clip_text(bos_token_id=0, eos_token_id=2, pad_token_id=1),
        vision_config=vision,
        projection_dim=HIDDEN,
        projection_intermediate_dim=HIDDEN,
    )


@arch(
    "siglip2",
    "multimodal",
    "NaFlex patches: position table resized to each image's grid, patch mask",
    "Siglip2Model",
    text_and_patches,
)
def siglip2():
    import transformers

    vision = vit_like(num_patches=16)
    del vision["image_size"]
    text_config = clip_text(bos_token_id=0, eos_token_id=2, pad_token_id=1)
    return transformers.Siglip2Config(text_config=text_config, vision_config=vision)


@arch(
    "clipseg",
    "multimodal",
    "text-conditioned segmentation: FiLM on CLIP activations, transposed-conv decoder",
    "CLIPSegForImageSegmentation",
    text_and_image,
)
def clipseg():
    import transformers

    return transformers.CLIPSegConfig(
        text_config=clip_text(bos_token_id=0, eos_token_id=2, pad_token_id=1),
        vision_config=vit_like(),
        projection_dim=HIDDEN,
        extract_layers=[0, 1],  # hidden_states[i + 1]: after layers 1 and 2
        reduce_dim=16,
        decoder_num_attention_heads=2,
        decoder_intermediate_size=FFN,
    )


@arch(
    "git",
    "multimodal",
    "image tokens prepended inside one decoder: bidirectional image prefix, causal text",
    "GitForCausalLM",
    text_and_image,
)
def git():
    import transformers

    return transformers.GitConfig(
        vision_config=vit_like(),
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        max_position_embeddings=POSITIONS,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )


@arch(
    "gemma3",
    "multimodal",
    "SigLIP tower avg-pooled to 4 tokens + Gemma3, bidirectional attention within the image",
    "Gemma3ForConditionalGeneration",
    gemma3_prompt,
)
def gemma3():
    import transformers

    vision = transformers.SiglipVisionConfig(**vit_like())
    text_config = transformers.Gemma3TextConfig(
        **llama_like(
            head_dim=8, sliding_window=6, layer_types=["sliding_attention", "full_attention"]
        )
    )
    return transformers.Gemma3Config(
        vision_config=vision,
        text_config=text_config,
        mm_tokens_per_image=4,
        image_token_index=VOCAB - 1,
        boi_token_index=VOCAB - 2,
        eoi_token_index=VOCAB - 3,
    )


@arch(
    "idefics3",
    "multimodal",
    "pixel shuffle (scale 2) of the SigLIP patches into Llama image tokens",
    "Idefics3ForConditionalGeneration",
    idefics3_prompt,
)
def idefics3():
    import transformers

    return transformers.Idefics3Config(
        vision_config=vit_like(),
        text_config=llama_like(pad_token_id=0, bos_token_id=1, eos_token_id=2),
        scale_factor=2,
        image_token_id=VOCAB - 1,
    )


@arch(
    "qwen2_vl",
    "multimodal",
    "flattened patches + grid_thw, 2x2 patch merge, multimodal (3-axis) RoPE",
    "Qwen2VLForConditionalGeneration",
    qwen2_vl_prompt,
)
def qwen2_vl():
    import transformers

    vision = dict(
        depth=LAYERS,
        embed_dim=HIDDEN,
        hidden_size=HIDDEN,
        num_heads=HEADS,
        mlp_ratio=2,
        patch_size=8,
        spatial_merge_size=2,
        temporal_patch_size=2,
        in_channels=3,
    )
    text_config = llama_like(
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        # (temporal, height, width) rotary sections of head_dim / 2 = 4 frequencies
        rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 2], "rope_theta": 10000.0},
    )
    return transformers.Qwen2VLConfig(
        vision_config=vision,
        text_config=text_config,
        image_token_id=VOCAB - 1,
        video_token_id=VOCAB - 2,
        vision_start_token_id=VOCAB - 3,
        vision_end_token_id=VOCAB - 4,
    )


def image_patches_then_text(model, batch, seq, generator):
    """Fuyu: the image cut into flat patches (batch, patches, patch x patch x C), one image token each in
    input_ids before `seq` text tokens."""
    import torch

    config = model.config
    patches = (config.image_size // config.patch_size) ** 2
    inputs = image_tokens_then_text(model, batch, seq, generator, tokens=patches)
    width = config.num_channels * config.patch_size**2
    inputs["pixel_values"] = torch.randn(batch, patches, width, generator=generator)
    return inputs


def text_and_masked_image(model, batch, seq, generator):
    """ViLT: input_ids + mask + token types, pixel_values and a pixel_mask (all pixels valid)."""
    import torch

    inputs = text(model, batch, seq, generator)
    inputs["token_type_ids"] = torch.zeros_like(inputs["input_ids"])
    inputs.update(fixed_pixels(model, batch, seq, generator))
    side = inputs["pixel_values"].shape[-1]
    inputs["pixel_mask"] = torch.ones(batch, side, side, dtype=torch.long)
    return inputs


@arch(
    "fuyu",
    "multimodal",
    "no vision tower: flat patches linearly embedded into a Persimmon decoder",
    "FuyuForCausalLM",
    image_patches_then_text,
)
def fuyu():
    import transformers

    text_config = transformers.PersimmonConfig(
        **llama_like(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    )
    return transformers.FuyuConfig(
        text_config=text_config,
        image_size=32,
        patch_size=8,
        num_channels=3,
        image_token_id=VOCAB - 1,
    )


@arch(
    "vilt",
    "multimodal",
    "single-stream transformer over text + image patches, modality type embeddings",
    "ViltModel",
    text_and_masked_image,
)
def vilt():
    import transformers

    return transformers.ViltConfig(
        **clip_text(max_position_embeddings=POSITIONS, type_vocab_size=2, max_image_length=-1),
        image_size=32,
        patch_size=8,
    )


# LLaVA-NeXT's any-resolution tiling: a 32x64 image is best served by the 32x64 grid point, two 32x32
# tiles beside the resized base image (3 crops); its tokens are the base image's 4x4 patches plus the
# tiles' 4x8 patches with a newline token after each of their 4 rows.
LLAVA_NEXT_IMAGE = (32, 64)
LLAVA_NEXT_CROPS = 3
LLAVA_NEXT_TOKENS = 4 * 4 + 4 * 8 + 4


def anyres_prompt(model, batch, seq, generator):
    """LLaVA-NeXT: pixel_values (batch, crops, C, 32, 32) with image_sizes (batch, 2), its tokens first."""
    import torch

    inputs = image_tokens_then_text(model, batch, seq, generator, tokens=LLAVA_NEXT_TOKENS)
    inputs["pixel_values"] = torch.randn(batch, LLAVA_NEXT_CROPS, 3, 32, 32, generator=generator)
    inputs["image_sizes"] = torch.tensor([LLAVA_NEXT_IMAGE] * batch, dtype=torch.long)
    return inputs


@arch(
    "llava_next",
    "multimodal",
    "any-resolution tiling (base image + tiles), newline tokens, image_sizes",
    "LlavaNextForConditionalGeneration",
    anyres_prompt,
)
def llava_next():
    import transformers

    vision = transformers.CLIPVisionConfig(**vit_like())
    text_config = transformers.LlamaConfig(
        **llama_like(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    )
    return transformers.LlavaNextConfig(
        vision_config=vision,
        text_config=text_config,
        image_token_index=VOCAB - 1,
        image_grid_pinpoints=[[32, 64], [64, 32], [64, 64]],
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )


def query_tokens_then_text(model, batch, seq, generator):
    """BLIP-2: the Q-Former's `num_query_tokens` image tokens first, then `seq` text tokens."""
    inputs = image_tokens_then_text(
        model, batch, seq, generator, tokens=model.config.num_query_tokens
    )
    inputs.update(fixed_pixels(model, batch, seq, generator))
    return inputs


def grounded_prompt(model, batch, seq, generator):
    """Kosmos-2: <image> + `latent_query_num` placeholder tokens + </image> + text, with
    image_embeds_position_mask marking where the resampled image embeddings go."""
    import torch

    config = model.config
    queries = config.latent_query_num
    words = torch.randint(4, VOCAB, (batch, seq + queries + 2), generator=generator)
    mask = torch.zeros_like(words)
    mask[:, 1 : 1 + queries] = 1
    inputs = {
        "input_ids": words,
        "attention_mask": torch.ones_like(words),
        "image_embeds_position_mask": mask,
    }
    inputs.update(fixed_pixels(model, batch, seq, generator))
    return inputs


@arch(
    "blip_2",
    "multimodal",
    "Q-Former: learned queries cross-attending to the image, fed to an OPT decoder",
    "Blip2ForConditionalGeneration",
    query_tokens_then_text,
)
def blip_2():
    import transformers

    qformer = transformers.Blip2QFormerConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        max_position_embeddings=POSITIONS,
        encoder_hidden_size=HIDDEN,
        cross_attention_frequency=1,
    )
    text_config = transformers.OPTConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        word_embed_proj_dim=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        ffn_dim=FFN,
        max_position_embeddings=POSITIONS,
        pad_token_id=1,
        bos_token_id=2,
        eos_token_id=2,
    )
    return transformers.Blip2Config(
        vision_config=vit_like(),
        qformer_config=qformer.to_dict(),
        text_config=text_config.to_dict(),
        num_query_tokens=4,
        image_token_index=VOCAB - 1,
    )


@arch(
    "kosmos2",
    "multimodal",
    "perceiver-style resampler to latent queries placed by image_embeds_position_mask",
    "Kosmos2ForConditionalGeneration",
    grounded_prompt,
)
def kosmos2():
    import transformers

    text_config = dict(
        vocab_size=VOCAB,
        embed_dim=HIDDEN,
        layers=LAYERS,
        ffn_dim=FFN,
        attention_heads=HEADS,
        max_position_embeddings=POSITIONS,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    return transformers.Kosmos2Config(
        text_config=text_config, vision_config=vit_like(), latent_query_num=4
    )


def instruction_and_query_tokens(model, batch, seq, generator):
    """InstructBLIP: the BLIP-2 prompt, and the instruction again as the Q-Former's own text input."""
    inputs = query_tokens_then_text(model, batch, seq, generator)
    instruction = text(model, batch, seq, generator)
    inputs["qformer_input_ids"] = instruction["input_ids"]
    inputs["qformer_attention_mask"] = instruction["attention_mask"]
    return inputs


@arch(
    "instructblip",
    "multimodal",
    "instruction-aware Q-Former: queries attend to the instruction's tokens as well as the image",
    "InstructBlipForConditionalGeneration",
    instruction_and_query_tokens,
)
def instructblip():
    import transformers

    blip_2_config = blip_2()
    return transformers.InstructBlipConfig(
        vision_config=blip_2_config.vision_config.to_dict(),
        qformer_config=blip_2_config.qformer_config.to_dict(),
        text_config=blip_2_config.text_config.to_dict(),
        num_query_tokens=4,
        image_token_index=VOCAB - 1,
    )
