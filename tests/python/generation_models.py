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
