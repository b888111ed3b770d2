"""Vision encoders that pack images of different sizes into one sequence, for
`--model-fn python:packed_vision:FUNCTION`: each function returns the tiny
random encoder (the class of a VLM's `visual` module) and its inputs.

The encoder takes the patches and what transformers computes from the images'
grid with Python loops (`cu_seqlens`, the rotary positions, Qwen2.5-VL's
window order and `cu_window_seqlens`), precomputed here from the grid as the
reference's `_prepare_grid_thw_vision_inputs` does, so the export's inputs
are tensors and its attention sees the packed sequence."""

# Two images of different sizes (t, h, w in patches), so their segments differ.
GRID = [[1, 4, 4], [1, 4, 6]]
# Another packing: three images, none of the traced sizes.
OTHER_GRID = [[1, 2, 2], [1, 6, 4], [1, 2, 8]]


def packed(visual, grid, windows=False):
    """`visual` wrapped to take the precomputed inputs, and those inputs for `grid`."""
    import torch
    from transformers.vision_utils import (
        get_vision_cu_seqlens,
        get_vision_position_ids,
        get_vision_window_index,
    )

    class Packed(torch.nn.Module):
        def __init__(self, visual):
            super().__init__()
            self.visual = visual

        def forward(self, pixel_values, cu_seqlens, position_ids, **windows):
            out = self.visual(
                pixel_values,
                grid_thw=None,
                cu_seqlens=cu_seqlens,
                position_ids=position_ids,
                **windows,
            )
            return out.last_hidden_state, out.pooler_output

    config = visual.config
    grid = torch.tensor(grid)
    patches = int(grid.prod(-1).sum())
    channels = config.in_channels * config.temporal_patch_size * config.patch_size**2
    inputs = {
        "pixel_values": torch.randn(patches, channels, generator=torch.Generator().manual_seed(0)),
        "cu_seqlens": get_vision_cu_seqlens(grid),
        "position_ids": get_vision_position_ids(grid, config.spatial_merge_size),
    }
    if windows:
        inputs["window_index"], inputs["cu_window_seqlens"] = get_vision_window_index(
            grid, config.spatial_merge_size, config.window_size, config.patch_size
        )
    return Packed(visual).eval(), inputs


def qwen2_vl_vision(grid=GRID):
    """Qwen2-VL's vision encoder (fused `qkv`, rotary `(cos, sin)`), two images."""
    return packed(qwen2_vl_visual(), grid)


def qwen2_vl_vision_from_grid():
    """Qwen2-VL's vision encoder as its model calls it, on the patches and
    each image's grid (`grid_thw`) alone: it computes its segments and
    rotary positions from the grid's values itself."""
    import torch

    visual = qwen2_vl_visual().eval()
    _, inputs = packed(visual, GRID)
    return visual, {"hidden_states": inputs["pixel_values"], "grid_thw": torch.tensor(GRID)}


def qwen2_vl_visual():
    """A tiny random Qwen2-VL vision encoder."""
    import torch
    from transformers.models.qwen2_vl import modeling_qwen2_vl
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig

    torch.manual_seed(0)
    config = Qwen2VLVisionConfig(
        depth=2,
        embed_dim=32,
        hidden_size=32,
        num_heads=4,
        mlp_ratio=2,
        patch_size=2,
        temporal_patch_size=2,
        spatial_merge_size=2,
    )
    return modeling_qwen2_vl.Qwen2VisionTransformerPretrainedModel._from_config(config)


def qwen2_5_vl_vision(grid=GRID):
    """Qwen2.5-VL's vision encoder, two images: its windowed layers attend
    within windows of 4x4 patches cut at each image's edge, so the windows of
    the 4x6 image are of two sizes (16 and 8 patches), and its last layer
    attends within each whole image."""
    import torch
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl
    from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig

    torch.manual_seed(0)
    config = Qwen2_5_VLVisionConfig(
        depth=2,
        hidden_size=32,
        intermediate_size=64,
        num_heads=4,
        out_hidden_size=32,
        patch_size=2,
        temporal_patch_size=2,
        spatial_merge_size=2,
        window_size=8,
        fullatt_block_indexes=[1],
    )
    model = modeling_qwen2_5_vl.Qwen2_5_VisionTransformerPretrainedModel._from_config(config)
    return packed(model, grid, windows=True)
