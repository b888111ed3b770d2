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

# With transformers' default initializer_range (0.02), a tiny convolutional model's activations shrink layer after layer
# (to 1e-20 or exactly 0 at the output); a 1e-3 check cannot tell those from zero, so the
# rows below that need it raise initializer_range until the output is of order 0.1 to 10.
SHALLOW_INIT = 0.1
DEEP_INIT = 0.5


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


@arch(
    "convnextv2",
    "vision",
    "CNN (depthwise 7x7), global response normalization",
    "ConvNextV2Model",
    pixels,
)
def convnextv2():
    import transformers

    return transformers.ConvNextV2Config(
        hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, patch_size=2
    )


@arch(
    "efficientnet",
    "vision",
    "CNN (MBConv, squeeze-excitation, swish, TF 'same' depthwise padding)",
    "EfficientNetModel",
    pixels,
)
def efficientnet():
    import transformers

    # The top conv's width is round_filters(1280) = 128 at width 0.1, and hidden_dim must match it.
    return transformers.EfficientNetConfig(
        image_size=32,
        width_coefficient=0.1,
        depth_coefficient=1.0,
        kernel_sizes=[3, 5],
        in_channels=[32, 16],
        out_channels=[16, 24],
        depthwise_padding=[2],
        strides=[1, 2],
        num_block_repeats=[1, 1],
        expand_ratios=[1, 6],
        hidden_dim=128,
        initializer_range=DEEP_INIT,
    )


@arch(
    "regnet",
    "vision",
    "CNN (grouped convs, squeeze-excitation)",
    "RegNetModel",
    pixels,
)
def regnet():
    import transformers

    return transformers.RegNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=4, layer_type="y"
    )


@arch(
    "levit",
    "vision",
    "learned attention bias per offset, attention subsampling, hard-swish",
    "LevitModel",
    fixed_pixels,
    vary_length=False,
)
def levit():
    import transformers

    return transformers.LevitConfig(
        image_size=32,
        patch_size=16,
        hidden_sizes=[16, 32, 48],
        num_attention_heads=[1, 2, 3],
        depths=[1, 1, 1],
        key_dim=[8, 8, 8],
        mlp_ratio=[2, 2, 2],
        attention_ratio=[2, 2, 2],
        initializer_range=0.2,
    )


@arch(
    "mobilevit",
    "vision",
    "convs + transformer over unfolded patches (unfold/fold, resize to the patch grid)",
    "MobileViTModel",
    pixels,
)
def mobilevit():
    import transformers

    return transformers.MobileViTConfig(
        image_size=32,
        hidden_sizes=[16, 24, 32],
        neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
        num_attention_heads=2,
        patch_size=2,
        initializer_range=DEEP_INIT,
    )


@arch(
    "mobilevitv2",
    "vision",
    "separable self-attention (linear in tokens), unfold via conv patches",
    "MobileViTV2Model",
    pixels,
)
def mobilevitv2():
    import transformers

    return transformers.MobileViTV2Config(
        image_size=32,
        width_multiplier=0.25,
        n_attn_blocks=[1, 1, 1],
        output_stride=8,
        initializer_range=DEEP_INIT,
    )


@arch("poolformer", "vision", "average pooling as token mixer", "PoolFormerModel", pixels)
def poolformer():
    import transformers

    return transformers.PoolFormerConfig(
        hidden_sizes=[8, 16],
        depths=[1, 1],
        num_encoder_blocks=2,
        patch_sizes=[7, 3],
        strides=[4, 2],
        padding=[2, 1],
        mlp_ratio=2.0,
    )


@arch(
    "pvt",
    "vision",
    "spatial-reduction attention, position embeddings per stage",
    "PvtModel",
    pixels,
    vary_length=False,  # its position-embedding interpolation reshapes the table to the new grid (fails)
)
def pvt():
    import transformers

    return transformers.PvtConfig(
        image_size=32,
        num_encoder_blocks=2,
        depths=[1, 1],
        sequence_reduction_ratios=[2, 1],
        hidden_sizes=[16, 32],
        patch_sizes=[4, 2],
        strides=[4, 2],
        num_attention_heads=[1, 2],
        mlp_ratios=[2, 2],
    )


@arch(
    "pvt_v2",
    "vision",
    "linear spatial-reduction attention (adaptive average pooling to 7x7)",
    "PvtV2Model",
    pixels,
)
def pvt_v2():
    import transformers

    return transformers.PvtV2Config(
        image_size=32,
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[16, 32],
        patch_sizes=[7, 3],
        strides=[4, 2],
        num_attention_heads=[1, 2],
        mlp_ratios=[2, 2],
        linear_attention=True,
    )


@arch(
    "swinv2",
    "vision",
    "scaled cosine attention, log-spaced continuous position bias (MLP)",
    "Swinv2Model",
    pixels,
)
def swinv2():
    import transformers

    return transformers.Swinv2Config(
        image_size=32, patch_size=2, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4
    )


@arch(
    "cvt",
    "vision",
    "convolutional token embedding, depthwise-conv q/k/v projections",
    "CvtModel",
    pixels,
)
def cvt():
    import transformers

    return transformers.CvtConfig(
        patch_sizes=[7, 3, 3],
        patch_stride=[4, 2, 2],
        patch_padding=[2, 1, 1],
        embed_dim=[8, 16, 32],
        num_heads=[1, 2, 2],
        depth=[1, 2, 3],  # CvtStage indexes its drop-path rates by the stage index: depth > stage
        mlp_ratio=[2.0, 2.0, 2.0],
        attention_drop_rate=[0.0, 0.0, 0.0],
        drop_rate=[0.0, 0.0, 0.0],
        drop_path_rate=[0.0, 0.0, 0.0],
        qkv_bias=[True, True, True],
        cls_token=[False, False, True],
        qkv_projection_method=["dw_bn", "dw_bn", "dw_bn"],
        kernel_qkv=[3, 3, 3],
        padding_kv=[1, 1, 1],
        stride_kv=[2, 2, 2],
        padding_q=[1, 1, 1],
        stride_q=[1, 1, 1],
    )


@arch(
    "focalnet",
    "vision",
    "focal modulation (gated depthwise-conv context levels) instead of attention",
    "FocalNetModel",
    pixels,
)
def focalnet():
    import transformers

    return transformers.FocalNetConfig(
        image_size=32,
        patch_size=2,
        embed_dim=16,
        hidden_sizes=[16, 32],
        depths=[1, 1],
        focal_levels=[2, 2],
        focal_windows=[3, 3],
        use_layerscale=True,
        use_post_layernorm_in_modulation=True,
        normalize_modulator=True,
    )


@arch(
    "bit",
    "vision",
    "weight-standardized convs, group norm, dynamic 'same' padding",
    "BitModel",
    pixels,
)
def bit():
    import transformers

    return transformers.BitConfig(
        embedding_size=8,
        hidden_sizes=[32, 64],
        depths=[1, 1],
        num_groups=4,
        layer_type="bottleneck",
        global_padding="SAME",
        embedding_dynamic_padding=True,
    )


@arch(
    "yolos",
    "vision",
    "detection tokens, interpolated mid-layer position embeddings, box head",
    "YolosForObjectDetection",
    pixels,
)
def yolos():
    import transformers

    config = vit_like(num_detection_tokens=4, use_mid_position_embeddings=True)
    config["image_size"] = [32, 32]
    return transformers.YolosConfig(**config)


@arch(
    "dpt",
    "vision",
    "ViT reassembled into a feature pyramid, fusion with upsampling, depth head",
    "DPTForDepthEstimation",
    pixels,
)
def dpt():
    import transformers

    config = vit_like(
        backbone_out_indices=[0, 1, 2, 3],
        neck_hidden_sizes=[8, 16, 32, 32],
        fusion_hidden_size=16,
        head_hidden_size=8,
        initializer_range=SHALLOW_INIT,
    )
    config["num_hidden_layers"] = 4  # one per pyramid level
    return transformers.DPTConfig(**config)


@arch(
    "glpn",
    "vision",
    "Mix Transformer encoder, selective feature fusion decoder, depth head",
    "GLPNForDepthEstimation",
    pixels,
    vary_length=False,  # the decoder's 2x upsamplings need a side divisible by 32
)
def glpn():
    import transformers

    return transformers.GLPNConfig(
        hidden_sizes=[8, 16, 16, 32],
        depths=[1, 1, 1, 1],
        num_attention_heads=[1, 1, 1, 2],
        mlp_ratios=[2, 2, 2, 2],
        decoder_hidden_size=16,
    )


@arch(
    "mobilenet_v1",
    "vision",
    "CNN (depthwise separable), TF 'same' padding from the input size",
    "MobileNetV1Model",
    pixels,
)
def mobilenet_v1():
    import transformers

    return transformers.MobileNetV1Config(
        image_size=32, depth_multiplier=0.25, min_depth=4, initializer_range=DEEP_INIT
    )


@arch(
    "hiera",
    "vision",
    "mask-unit attention, query pooling, unroll/reroll of tokens",
    "HieraModel",
    pixels,
    vary_length=False,  # mask units tile the configured token grid
)
def hiera():
    import transformers

    return transformers.HieraConfig(
        embed_dim=16,
        image_size=[32, 32],
        patch_size=[3, 3],
        patch_stride=[2, 2],
        patch_padding=[1, 1],
        depths=[1, 1],
        num_heads=[1, 2],
        num_query_pool=1,
        query_stride=[2, 2],
        masked_unit_size=[4, 4],
        masked_unit_attention=[True, False],
        mlp_ratio=2.0,
    )


@arch(
    "ijepa",
    "vision",
    "ViT without CLS token (patch tokens only)",
    "IJepaModel",
    fixed_pixels,
    vary_length=False,
)
def ijepa():
    import transformers

    return transformers.IJepaConfig(**vit_like())


@arch(
    "dinov3_vit",
    "vision",
    "2D RoPE on patch coordinates, register tokens, gated MLP",
    "DINOv3ViTModel",
    pixels,
)
def dinov3_vit():
    import transformers

    return transformers.DINOv3ViTConfig(
        **vit_like(), num_register_tokens=2, use_gated_mlp=True, layerscale_value=0.1
    )


@arch(
    "vitdet",
    "vision",
    "windowed + global attention with padding, decomposed relative positions",
    "VitDetModel",
    pixels,
)
def vitdet():
    import transformers

    return transformers.VitDetConfig(
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        mlp_ratio=2,
        image_size=32,
        pretrain_image_size=32,
        patch_size=4,
        window_block_indices=[0],
        residual_block_indices=[1],
        use_relative_position_embeddings=True,
        window_size=3,
    )


@arch(
    "textnet",
    "vision",
    "CNN with asymmetric (1x3, 3x1) kernels and batch norm",
    "TextNetModel",
    pixels,
)
def textnet():
    import transformers

    return transformers.TextNetConfig(
        stem_out_channels=8,
        hidden_sizes=[8, 8, 16, 16, 32],
        conv_layer_kernel_sizes=[[[3, 3]], [[3, 3], [1, 3]], [[3, 3], [3, 1]], [[3, 3]]],
        conv_layer_strides=[[1], [2, 1], [2, 1], [2]],
        initializer_range=SHALLOW_INIT,
    )


@arch(
    "swiftformer",
    "vision",
    "efficient additive attention (no q.k^T), conv encoders",
    "SwiftFormerModel",
    pixels,
)
def swiftformer():
    import transformers

    return transformers.SwiftFormerConfig(
        depths=[1, 1],
        embed_dims=[16, 32],
        downsamples=[True, True],
        mlp_ratio=2,
        # Its blocks' layer scale starts at 1e-5 (outputs ~7e-3); 1 lets the attention reach the output.
        layer_scale_init_value=1.0,
    )


@arch(
    "data2vec_vision",
    "vision",
    "shared relative position bias, mean pooling",
    "Data2VecVisionModel",
    fixed_pixels,
    vary_length=False,
)
def data2vec_vision():
    import transformers

    return transformers.Data2VecVisionConfig(
        **vit_like(use_shared_relative_position_bias=True, use_mean_pooling=True)
    )
