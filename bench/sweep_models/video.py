"""Video encoders over frame sequences."""

from .registry import FFN, HEADS, HIDDEN, LAYERS, SIZE_A, arch

# Frames at size A; size B (where the model allows it) has more frames and a larger side.
FRAMES = 4
FRAMES_B = 6


def video_like(**extra):
    return dict(
        image_size=32,
        num_frames=FRAMES,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        **extra,
    )


def frames(model, batch, seq, generator, name="pixel_values"):
    """A clip (batch, frames, channels, side, side): the configured frames and side at size A, 6 frames of
    48x48 at size B (only for the models whose size B varies)."""
    import torch

    config = model.config
    count = getattr(config, "num_frames", None) or config.frames_per_clip
    side = getattr(config, "image_size", None) or config.crop_size
    channels = getattr(config, "num_channels", None) or config.in_chans
    if seq != SIZE_A[1]:
        count, side = FRAMES_B, 48
    clip = torch.randn(batch, count, channels, side, side, generator=generator)
    return {name: clip}


def video_frames(model, batch, seq, generator):
    """V-JEPA 2 names its clip `pixel_values_videos`."""
    return frames(model, batch, seq, generator, name="pixel_values_videos")


@arch(
    "videomae",
    "video",
    "tubelet embedding (Conv3d), fixed sinusoidal positions",
    "VideoMAEModel",
    frames,
    vary_length=False,
)
def videomae():
    import transformers

    return transformers.VideoMAEConfig(**video_like(patch_size=8, tubelet_size=2))


@arch(
    "timesformer",
    "video",
    "divided space-time attention (time then space)",
    "TimesformerModel",
    frames,
    vary_length=False,  # its attention layers reshape by the configured frames and patch grid
)
def timesformer():
    import transformers

    return transformers.TimesformerConfig(**video_like(patch_size=8))


@arch(
    "vivit",
    "video",
    "factorised tubelet embedding (Conv3d), CLS token over space-time",
    "VivitModel",
    frames,
    vary_length=False,
)
def vivit():
    import transformers

    return transformers.VivitConfig(**video_like(tubelet_size=[2, 8, 8]))


@arch(
    "vjepa2",
    "video",
    "3D RoPE over (time, height, width), attentive pooler, predictor",
    "VJEPA2Model",
    video_frames,
)
def vjepa2():
    import transformers

    return transformers.VJEPA2Config(
        patch_size=8,
        crop_size=32,
        frames_per_clip=FRAMES,
        tubelet_size=2,
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        num_hidden_layers=LAYERS,
        mlp_ratio=2.0,
        num_pooler_layers=1,
        pred_hidden_size=HIDDEN,
        pred_num_attention_heads=HEADS,
        pred_num_hidden_layers=1,
        pred_num_mask_tokens=2,
        pred_mlp_ratio=2.0,
    )
