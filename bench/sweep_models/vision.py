"""Vision backbones: ViT-like, convolutional, hierarchical."""

from .registry import (
    FFN,
    HEADS,
    HIDDEN,
    LAYERS,
    VOCAB,
    arch,
    fixed_pixels,
    pixels,
)


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
