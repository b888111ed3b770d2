"""Inputs precomputed outside the trace: what a vision or audio encoder
derives from its images' or clips' sizes with Python loops over their
values (`.tolist()`, `repeat_interleave` by a tensor, a split per image) and
accepts ready-made as keyword arguments (`cu_seqlens`, rotary `position_ids`,
a window order, padded audio chunks). torch.export cannot trace a loop over
a tensor's values; computed here from the call's own size inputs, they
become inputs of the traced program (of every export: `trace` computes them
for the call it traces), and whoever calls the program computes them the
same way for each call (`generation.Components` does, for every call
`generate` makes of an exported part).

A precomputation is keyed by what the call carries: it applies when every
input it names (its markers: `grid_thw`, `image_sizes`, ...) is in the
call's kwargs, and each optional result only where the module has what
consumes it (a window size, a learned position grid). The model's own
helpers compute them (transformers' `vision_utils`, a modeling module's
audio helpers), so the values are the ones its forward would compute. The
reference does the same in `precompute_export_inputs` (transformers 5.24,
`exporters/utils.py`). Its other precomputation, the prompt's positions of a
model with multimodal rotary positions (`get_rope_index`) when a call has
none, has no call to serve here: `generate` computes them before each call
(`_prepare_position_ids_for_generation`) and passes them, so every captured
call and every call a component serves carries them."""

import sys

# `(markers, function(module, kwargs))`, in the order they apply.
PRECOMPUTATIONS = []


def precomputes(*markers):
    """Registers `function(module, kwargs)`, which adds to `kwargs` what it
    precomputes from them, for calls whose kwargs hold every one of `markers`."""

    def register(function):
        PRECOMPUTATIONS.append((markers, function))
        return function

    return register


def precomputed(module, kwargs):
    """`kwargs` (the same dict, changed in place) with what `module`'s forward
    would compute from them with loops over values added: each
    precomputation whose markers the kwargs hold."""
    import torch

    with torch.no_grad():
        for markers, function in PRECOMPUTATIONS:
            if all(kwargs.get(marker) is not None for marker in markers):
                function(module, kwargs)
    return kwargs


def attribute(module, name):
    """The first value of `name` that is not None on `module` or a submodule."""
    for part in module.modules():
        value = getattr(part, name, None)
        if value is not None:
            return value
    return None


def modeling_module(module):
    """The Python module `module`'s class is defined in (its `modeling_*.py`)."""
    return sys.modules[type(module).__module__]


@precomputes("grid_thw")
def packed_grid_inputs(module, kwargs):
    """A packed vision encoder (Qwen2-VL's family): each image's `(t, h, w)`
    patch grid gives its attention segments (`cu_seqlens`, `max_seqlen`) and
    its patches' rotary positions; a windowed encoder (a `window_size`) its
    window order and segments; one that resamples a learned position grid
    (`num_grid_per_side`) its interpolation taps and weights; and helpers its
    modeling module defines (per-frame index, temporal merge, pixel shuffle)
    their gather indices."""
    from transformers.vision_utils import (
        get_max_seqlen,
        get_vision_attention_seqlens,
        get_vision_interpolation_indices_and_weights,
        get_vision_position_ids,
        get_vision_window_index,
    )

    grid = kwargs["grid_thw"]
    # Video-LLaMA 3 gives a merge size per image as an input; an encoder without
    # one merges in its projector (merge size 1).
    merge = attribute(module, "spatial_merge_size")
    if merge is None:
        merge = kwargs.get("merge_sizes", 1)
    modeling = modeling_module(module)
    # An encoder with per-frame helpers attends over a whole clip at once.
    per_clip = hasattr(modeling, "get_vision_frame_index")
    kwargs["cu_seqlens"], kwargs["max_seqlen"] = get_vision_attention_seqlens(
        grid, module.config, merge_temporal=getattr(module, "merge_temporal", per_clip)
    )
    kwargs["position_ids"] = get_vision_position_ids(
        grid, merge, include_temporal=getattr(module, "include_temporal", False)
    )
    window, patch = attribute(module, "window_size"), attribute(module, "patch_size")
    if window is not None and patch is not None:
        kwargs["window_index"], kwargs["cu_window_seqlens"] = get_vision_window_index(
            grid, merge, window, patch
        )
        kwargs["max_window_seqlen"] = get_max_seqlen(kwargs["cu_window_seqlens"], module.config)
    side = attribute(module, "num_grid_per_side")
    if side is not None:
        kwargs["interp_indices"], kwargs["interp_weights"] = (
            get_vision_interpolation_indices_and_weights(
                grid,
                side,
                mode=attribute(module, "interpolation_mode") or "bilinear",
                align_corners=attribute(module, "interpolation_align_corners") is True,
                spatial_merge_size=merge,
                padding=attribute(module, "interpolation_padding") or "border",
            )
        )
    if per_clip:
        kwargs["frame_index"] = modeling.get_vision_frame_index(grid)
    if hasattr(modeling, "get_vision_temporal_merge_index"):
        kernel = attribute(module, "merge_kernel_size")
        height, width = (kernel, kernel) if isinstance(kernel, int) else kernel
        kwargs["temporal_merge_index"] = modeling.get_vision_temporal_merge_index(
            grid, height, width
        )
    if hasattr(modeling, "get_vision_pixel_shuffle_index"):
        kwargs["pixel_shuffle_index"] = modeling.get_vision_pixel_shuffle_index(
            grid, attribute(module, "merge_size")
        )


@precomputes("target_sizes")
def packed_size_inputs(module, kwargs):
    """A NaViT-style packed encoder, which takes each image's `(h, w)` in
    patches (`target_sizes`): its patches' positions on a fixed grid
    (`num_patches_per_side`) and, windowed (`window_kernel_size`), its window
    order, segments, merged shape and longest segment."""
    import torch
    from transformers.vision_utils import (
        get_max_seqlen,
        get_vision_merged_shape,
        get_vision_nearest_position_ids,
        get_vision_window_index,
    )

    sizes = kwargs["target_sizes"]
    side = attribute(module, "num_patches_per_side")
    if side is not None:
        kwargs["position_ids"] = get_vision_nearest_position_ids(sizes, side)
    kernel = attribute(module, "window_kernel_size")
    if kernel is not None:
        grid = torch.nn.functional.pad(sizes, (1, 0), value=1)  # one frame per image
        kwargs["window_index"], kwargs["cu_window_seqlens"] = get_vision_window_index(
            grid, spatial_merge_size=1, window_size=kernel[0], patch_size=1
        )
        kwargs["merged_shape"] = get_vision_merged_shape(sizes, kernel)
        lengths = torch.cumsum(sizes[:, 0] * sizes[:, 1], dim=0, dtype=torch.int32)
        segments = torch.nn.functional.pad(lengths, (1, 0))
        kwargs["max_seqlen"] = get_max_seqlen(segments, module.config)


@precomputes("image_sizes")
def image_sizes_as_ints(module, kwargs):
    """Each image's `(h, w)` as Python ints: an encoder that crops each image
    to its size (Pixtral's `image_sizes[i] // patch_size`) slices by them, and
    sliced by a tensor's values the slice's size would be unbacked; as ints
    the trace fixes them, as the encoder's own default sizes (`None`) are."""
    import torch

    sizes = kwargs["image_sizes"]
    if torch.is_tensor(sizes):
        kwargs["image_sizes"] = [tuple(int(v) for v in row) for row in sizes.tolist()]


@precomputes("input_features", "feature_lens")
def chunked_audio_inputs(module, kwargs):
    """An omni audio encoder (Qwen2.5-Omni's, Qwen3-Omni's), which splits each
    clip's features into windows by their lengths (`feature_lens`): the
    padded windows, their lengths, attention segments, the valid positions
    and (Qwen2.5-Omni) the pooling indices, by its modeling module's helpers."""
    from transformers.vision_utils import get_max_seqlen

    lengths, features = kwargs["feature_lens"], kwargs["input_features"]
    modeling = modeling_module(module)
    padded, chunks = modeling.chunk_and_pad_features(features, lengths, module.n_window)
    kwargs["padded_feature"], kwargs["chunk_lengths"] = padded, chunks
    if hasattr(module, "n_window_infer"):
        kwargs["cu_seqlens"] = modeling.get_audio_cu_seqlens(
            chunks, lengths, module.n_window_infer, module.n_window
        )
        kwargs["valid_indices"] = modeling.get_valid_indices(chunks, module.n_window)
    else:
        kwargs["cu_seqlens"] = modeling.get_audio_cu_seqlens(chunks)
        kwargs["valid_indices"] = modeling.get_valid_indices(chunks)
        kwargs["pool_indices"] = modeling.get_pool_indices(lengths)
    kwargs["max_seqlen"] = get_max_seqlen(kwargs["cu_seqlens"], module.config)


@precomputes("input_features", "input_features_mask")
def masked_audio_inputs(module, kwargs):
    """An audio encoder that windows its features by a padding mask
    (Qwen3-ASR's: `n_window`, `n_window_infer`): its attention segments and
    longest segment, from the mask's per-window lengths."""
    import torch
    from transformers.vision_utils import get_max_seqlen

    window, infer_window = attribute(module, "n_window"), attribute(module, "n_window_infer")
    helper = getattr(modeling_module(module), "get_audio_cu_seqlens", None)
    if window is None or infer_window is None or helper is None:
        return
    mask = kwargs["input_features_mask"]
    batch, frames = mask.shape
    lengths = mask.sum(-1).to(torch.long)
    chunks = mask.view(batch, frames // (window * 2), -1).sum(dim=-1).reshape(-1).to(torch.long)
    kwargs["cu_seqlens"] = helper(chunks, lengths, infer_window, window)
    kwargs["max_seqlen"] = get_max_seqlen(kwargs["cu_seqlens"], module.config)
