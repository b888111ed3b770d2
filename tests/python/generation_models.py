"""Tiny random multimodal generative models and their generate inputs, for
`hfx run --model-fn python:generation_models:NAME --generation` (the tests
put this folder on PYTHONPATH)."""

import torch
import transformers
from tiny_models import TINY_DECODER


def llava():
    """A LLaVA (CLIP vision tower, projector, Llama) and a prompt holding one image's tokens."""
    torch.manual_seed(0)
    vision = transformers.CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=16,
        patch_size=8,
        projection_dim=32,
    )
    text = transformers.LlamaConfig(
        **TINY_DECODER,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    config = transformers.LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=127,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    model = transformers.LlavaForConditionalGeneration(config).eval()
    patches = (16 // 8) ** 2
    generator = torch.Generator().manual_seed(0)
    text_ids = torch.randint(3, 120, (2, 6), generator=generator)
    image = torch.full((2, patches), 127)
    ids = torch.cat([text_ids[:, :2], image, text_ids[:, 2:]], dim=1)
    return model, {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "pixel_values": torch.randn(2, 3, 16, 16, generator=generator),
    }


def qwen2_audio():
    """A Qwen2-Audio (Whisper-style audio encoder, projector, Qwen2) and a
    prompt holding one clip's audio tokens."""
    torch.manual_seed(0)
    audio = transformers.Qwen2AudioEncoderConfig(
        d_model=32,
        encoder_layers=2,
        encoder_attention_heads=4,
        encoder_ffn_dim=64,
        num_mel_bins=16,
        max_source_positions=16,
    )
    text = transformers.Qwen2Config(
        **TINY_DECODER,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    config = transformers.Qwen2AudioConfig(
        audio_config=audio, text_config=text, audio_token_index=127
    )
    model = transformers.Qwen2AudioForConditionalGeneration(config).eval()
    frames = 2 * 16  # the encoder's fixed input length (2 x max_source_positions)
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(2, 16, frames, generator=generator)
    mask = torch.ones(2, frames, dtype=torch.long)
    # The encoder halves the frames twice (conv stride, then pooling): 8 audio tokens per clip.
    tokens = frames // 4
    text_ids = torch.randint(3, 120, (2, 6), generator=generator)
    ids = torch.cat([text_ids[:, :2], torch.full((2, tokens), 127), text_ids[:, 2:]], dim=1)
    return model, {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "input_features": features,
        "feature_attention_mask": mask,
    }


def qwen2_vl():
    """A Qwen2-VL (packed vision encoder over each image's patch grid,
    multimodal rotary positions, Qwen2) and a prompt holding one image's
    tokens per row: a 4x4 patch grid, merged 2x2 into 4 tokens."""
    torch.manual_seed(0)
    vision = dict(
        depth=2,
        embed_dim=32,
        hidden_size=32,
        num_heads=4,
        mlp_ratio=2,
        patch_size=2,
        temporal_patch_size=2,
        spatial_merge_size=2,
    )
    text = dict(
        **TINY_DECODER,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        # The rotary halves of temporal, height and width positions (head_dim 8: 4 pairs).
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]},
    )
    config = transformers.Qwen2VLConfig(
        vision_config=vision,
        text_config=text,
        image_token_id=127,
        video_token_id=126,
        vision_start_token_id=125,
        vision_end_token_id=124,
    )
    model = transformers.Qwen2VLForConditionalGeneration(config).eval()
    grid = torch.tensor([[1, 4, 4], [1, 4, 4]])
    generator = torch.Generator().manual_seed(0)
    # Each patch: 3 channels x 2 frames x 2 x 2 pixels.
    patches = torch.randn(int(grid.prod(-1).sum()), 3 * 2 * 2 * 2, generator=generator)
    tokens = 16 // 2**2
    text_ids = torch.randint(3, 120, (2, 8), generator=generator)
    image = [torch.full((2, 1), 125), torch.full((2, tokens), 127), torch.full((2, 1), 124)]
    ids = torch.cat([text_ids[:, :4], *image, text_ids[:, 4:]], dim=1)
    return model, {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        # Which tokens are the image's (1): `generate` numbers their positions
        # by the image's rows and columns (`get_rope_index`), the text's after them.
        "mm_token_type_ids": (ids == 127).int(),
        "pixel_values": patches,
        "image_grid_thw": grid,
    }


def qwen3_vl():
    """A Qwen3-VL (packed vision encoder with interpolated position
    embeddings and DeepStack features from both its layers, added to the
    text model's first layers at the image's positions; interleaved
    multimodal rotary positions, Qwen3) and a prompt holding one image's
    tokens per row: a 4x4 patch grid, merged 2x2 into 4 tokens."""
    torch.manual_seed(0)
    vision = dict(
        depth=2,
        hidden_size=32,
        intermediate_size=64,
        num_heads=4,
        patch_size=2,
        temporal_patch_size=2,
        spatial_merge_size=2,
        out_hidden_size=32,
        num_position_embeddings=16,
        deepstack_visual_indexes=[0, 1],
    )
    text = dict(
        **TINY_DECODER,
        head_dim=8,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": True,
        },
    )
    config = transformers.Qwen3VLConfig(
        vision_config=vision,
        text_config=text,
        image_token_id=127,
        video_token_id=126,
        vision_start_token_id=125,
        vision_end_token_id=124,
    )
    model = transformers.Qwen3VLForConditionalGeneration(config).eval()
    grid = torch.tensor([[1, 4, 4], [1, 4, 4]])
    generator = torch.Generator().manual_seed(0)
    patches = torch.randn(int(grid.prod(-1).sum()), 3 * 2 * 2 * 2, generator=generator)
    tokens = 16 // 2**2
    text_ids = torch.randint(3, 120, (2, 8), generator=generator)
    image = [torch.full((2, 1), 125), torch.full((2, tokens), 127), torch.full((2, 1), 124)]
    ids = torch.cat([text_ids[:, :4], *image, text_ids[:, 4:]], dim=1)
    return model, {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "mm_token_type_ids": (ids == 127).int(),
        "pixel_values": patches,
        "image_grid_thw": grid,
    }


def prompt_around(image, generator):
    """Two rows of 8 random text tokens with the `image` tokens (a list of
    ids, the same in each row) after the fourth: the padded first row's
    padding stays in the text."""
    text_ids = torch.randint(3, 100, (2, 8), generator=generator)
    image = torch.tensor(image).expand(2, -1)
    ids = torch.cat([text_ids[:, :4], image, text_ids[:, 4:]], dim=1)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def tiny_vision(**extra):
    """A vision tower's config keywords: 16x16 images in 4x4 patches of 4 pixels."""
    return dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=16,
        patch_size=4,
        **extra,
    )


def gemma3():
    """A Gemma 3 (SigLIP vision tower, pooled to 4 tokens per image, Gemma 3
    with a sliding window of 4) and a prompt holding one image's tokens
    between its begin and end tokens."""
    torch.manual_seed(0)
    text = dict(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        query_pre_attn_scalar=8,
        sliding_window=4,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    config = transformers.Gemma3Config(
        vision_config=tiny_vision(),
        text_config=text,
        mm_tokens_per_image=4,
        boi_token_index=125,
        eoi_token_index=126,
        image_token_index=127,
    )
    model = transformers.Gemma3ForConditionalGeneration(config).eval()
    generator = torch.Generator().manual_seed(0)
    inputs = prompt_around([125, 127, 127, 127, 127, 126], generator)
    inputs["pixel_values"] = torch.randn(2, 3, 16, 16, generator=generator)
    return model, inputs


def paligemma():
    """A PaliGemma (SigLIP vision tower, Gemma) and a prompt of one image's
    16 tokens, then text. Its config asks for bidirectional attention
    (`use_bidirectional_attention`, PaliGemma's default): attention modules
    built with `is_causal=False`, while without `token_type_ids` the model
    builds a causal mask."""
    torch.manual_seed(0)
    text = transformers.GemmaConfig(
        **TINY_DECODER, head_dim=8, pad_token_id=0, bos_token_id=1, eos_token_id=2
    )
    config = transformers.PaliGemmaConfig(
        vision_config=transformers.SiglipVisionConfig(**tiny_vision(projection_dim=32)),
        text_config=text,
        image_token_index=127,
        vocab_size=128,
        projection_dim=32,
        hidden_size=32,
    )
    model = transformers.PaliGemmaForConditionalGeneration(config).eval()
    generator = torch.Generator().manual_seed(0)
    text_ids = torch.randint(3, 100, (2, 8), generator=generator)
    ids = torch.cat([torch.full((2, 16), 127), text_ids], dim=1)
    return model, {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "pixel_values": torch.randn(2, 3, 16, 16, generator=generator),
    }


def idefics3(cls=transformers.Idefics3ForConditionalGeneration, config=transformers.Idefics3Config):
    """An Idefics 3 (SigLIP-style vision tower, pixel-shuffle connector
    merging 2x2 patches: 4 tokens per image, Llama) and a prompt holding one
    image's tokens; `pixel_values` is (batch, images, channels, height, width)."""
    torch.manual_seed(0)
    text = dict(**TINY_DECODER, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = cls(
        config(vision_config=tiny_vision(), text_config=text, image_token_id=127, scale_factor=2)
    ).eval()
    generator = torch.Generator().manual_seed(0)
    inputs = prompt_around([127] * 4, generator)
    inputs["pixel_values"] = torch.randn(2, 1, 3, 16, 16, generator=generator)
    return model, inputs


def smolvlm():
    """A SmolVLM: Idefics 3's architecture under its own classes."""
    return idefics3(transformers.SmolVLMForConditionalGeneration, transformers.SmolVLMConfig)


def mistral3():
    """A Mistral 3 (Pixtral vision tower with 2D rotary positions over each
    image's patches, patch merger 2x2: 4 tokens per image, Mistral) and a
    prompt holding one image's tokens; `image_sizes` gives each image's
    height and width."""
    torch.manual_seed(0)
    text = dict(**TINY_DECODER, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    config = transformers.Mistral3Config(
        vision_config=tiny_vision(head_dim=8),
        text_config=text,
        image_token_index=127,
        spatial_merge_size=2,
    )
    model = transformers.Mistral3ForConditionalGeneration(config).eval()
    generator = torch.Generator().manual_seed(0)
    inputs = prompt_around([127] * 4, generator)
    inputs["pixel_values"] = torch.randn(2, 3, 16, 16, generator=generator)
    inputs["image_sizes"] = torch.tensor([[16, 16], [16, 16]])
    return model, inputs


def llava_next():
    """A LLaVA-NeXT (CLIP vision tower over the whole image and its tiles,
    projector, Llama) and a prompt holding one 16x32 image's tokens: the
    base image's 4 patches, and its two 16x16 tiles' 8 patches unpadded to
    the image's aspect with a newline token per row (14 in all)."""
    torch.manual_seed(0)
    vision = transformers.CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=16,
        patch_size=8,
        projection_dim=32,
    )
    text = dict(**TINY_DECODER, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    config = transformers.LlavaNextConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=127,
        vision_feature_layer=-1,
        image_grid_pinpoints=[[16, 32], [32, 16], [32, 32]],
    )
    model = transformers.LlavaNextForConditionalGeneration(config).eval()
    generator = torch.Generator().manual_seed(0)
    inputs = prompt_around([127] * 14, generator)
    # The base image resized to 16x16, then its two 16x16 tiles.
    inputs["pixel_values"] = torch.randn(2, 3, 3, 16, 16, generator=generator)
    inputs["image_sizes"] = torch.tensor([[16, 32], [16, 32]])
    return model, inputs
