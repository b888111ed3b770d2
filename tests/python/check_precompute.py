"""Checks the encoder inputs hfx's worker precomputes
(`host/worker/hfx_worker/precompute.py`) on a tiny random encoder of each
kind that needs them:

    python check_precompute.py

- each precomputation adds the inputs it names, and the encoder's output
  with them equals its output without them (they are the values its
  forward computes, and its forward takes them in place of its own);
- torch.export: Pixtral's encoder, given each image's size as a tensor,
  stops on a data-dependent guard, and exports with the sizes precomputed
  (Qwen2-VL's packed encoder, traced from its grid: the test
  `a_qwen2_vl_vision_encoder_traced_from_its_grid_alone_takes_its_precomputed_segments`).
"""

import copy
import os
import sys

import torch
import transformers

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
from hfx_worker.precompute import precomputed  # noqa: E402


def qwen2_vl():
    """Qwen2-VL's packed encoder, two images of different grids."""
    from transformers.models.qwen2_vl import modeling_qwen2_vl

    config = transformers.models.qwen2_vl.Qwen2VLVisionConfig(
        depth=2, embed_dim=32, hidden_size=32, num_heads=4, mlp_ratio=2, patch_size=2
    )
    model = modeling_qwen2_vl.Qwen2VisionTransformerPretrainedModel._from_config(config)
    grid = torch.tensor([[1, 4, 4], [1, 4, 6]])
    patches = torch.randn(int(grid.prod(-1).sum()), 3 * 2 * 2 * 2)
    return model, {"hidden_states": patches, "grid_thw": grid}, {"cu_seqlens", "position_ids"}


def qwen2_5_vl():
    """Qwen2.5-VL's windowed encoder: its window order and segments too."""
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl

    config = transformers.models.qwen2_5_vl.Qwen2_5_VLVisionConfig(
        depth=2,
        hidden_size=32,
        intermediate_size=64,
        num_heads=4,
        out_hidden_size=32,
        patch_size=2,
        window_size=8,
        fullatt_block_indexes=[1],
    )
    model = modeling_qwen2_5_vl.Qwen2_5_VisionTransformerPretrainedModel._from_config(config)
    grid = torch.tensor([[1, 4, 4], [1, 4, 6]])
    patches = torch.randn(int(grid.prod(-1).sum()), 3 * 2 * 2 * 2)
    added = {"cu_seqlens", "position_ids", "window_index", "cu_window_seqlens"}
    return model, {"hidden_states": patches, "grid_thw": grid}, added


def pixtral():
    """Pixtral's encoder, two images of different sizes."""
    config = transformers.PixtralVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        head_dim=8,
        image_size=16,
        patch_size=4,
    )
    model = transformers.PixtralVisionModel(config)
    sizes = torch.tensor([[16, 8], [8, 16]])
    return model, {"pixel_values": torch.randn(2, 3, 16, 16), "image_sizes": sizes}, {"image_sizes"}


def minicpm_v4_6():
    """MiniCPM-V 4.6's NaViT-style encoder (each image's patch grid as
    `target_sizes`, a window-attention merger): two images' patches in one row."""
    from transformers.models.minicpmv4_6 import modeling_minicpmv4_6
    from transformers.models.minicpmv4_6.configuration_minicpmv4_6 import MiniCPMV4_6VisionConfig

    config = MiniCPMV4_6VisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=16,
        patch_size=4,
        insert_layer_id=0,
        window_kernel_size=(2, 2),
    )
    model = modeling_minicpmv4_6.MiniCPMV4_6VisionModel._from_config(config)
    sizes = torch.tensor([[4, 4], [2, 4]], dtype=torch.int32)
    patches = int((sizes[:, 0] * sizes[:, 1]).sum())
    added = {"position_ids", "window_index", "cu_window_seqlens", "merged_shape"}
    return model, {"pixel_values": torch.randn(1, 3, 4, patches * 4), "target_sizes": sizes}, added


def qwen2_5_omni_audio():
    """Qwen2.5-Omni's audio encoder, two clips of different lengths."""
    from transformers.models.qwen2_5_omni import modeling_qwen2_5_omni

    config = transformers.models.qwen2_5_omni.Qwen2_5OmniAudioEncoderConfig(
        d_model=32,
        encoder_layers=2,
        encoder_attention_heads=4,
        encoder_ffn_dim=64,
        num_mel_bins=16,
        max_source_positions=64,
        n_window=4,
        output_dim=32,
    )
    model = modeling_qwen2_5_omni.Qwen2_5OmniAudioEncoder._from_config(config)
    lengths = torch.tensor([24, 16])
    features = torch.randn(16, int(lengths.sum()))
    added = {"padded_feature", "chunk_lengths", "cu_seqlens", "valid_indices", "pool_indices"}
    return model, {"input_features": features, "feature_lens": lengths}, added


def qwen3_asr_audio():
    """Qwen3-ASR's audio encoder, two clips of two windows, the second padded
    (its window of 100 frames is fixed: its lengths after convolution count 13 per window)."""
    from transformers.models.qwen3_asr import modeling_qwen3_asr

    config = transformers.models.qwen3_asr.Qwen3ASREncoderConfig(
        d_model=32,
        encoder_layers=2,
        encoder_attention_heads=4,
        encoder_ffn_dim=64,
        num_mel_bins=16,
        n_window=50,
        n_window_infer=200,
        output_dim=32,
        downsample_hidden_size=8,
    )
    model = modeling_qwen3_asr.Qwen3ASREncoder._from_config(config)
    mask = torch.ones(2, 200, dtype=torch.long)
    mask[1, 150:] = 0
    return (
        model,
        {"input_features": torch.randn(2, 16, 200), "input_features_mask": mask},
        {"cu_seqlens"},
    )


CASES = (qwen2_vl, qwen2_5_vl, pixtral, minicpm_v4_6, qwen2_5_omni_audio, qwen3_asr_audio)


def first_output(output):
    return output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]


def main():
    for case in CASES:
        torch.manual_seed(0)
        model, kwargs, added = case()
        model = model.eval()
        prepared = precomputed(model, copy.deepcopy(kwargs))
        # Added, or (sizes as ints) given in another form.
        changed = {
            name
            for name, value in prepared.items()
            if value is not None and type(value) is not type(kwargs.get(name))
        }
        missing = added - changed
        if missing:
            raise SystemExit(f"{case.__name__}: nothing precomputed for {sorted(missing)}")
        with torch.no_grad():
            want = first_output(model(**copy.deepcopy(kwargs)))
            got = first_output(model(**prepared))
        if got.shape != want.shape or not torch.equal(got, want):
            raise SystemExit(f"{case.__name__}: the output with precomputed inputs differs")
        print(f"ok: {case.__name__} ({', '.join(sorted(changed))})")
    exports()


def exports():
    torch.manual_seed(0)
    model, kwargs, _ = pixtral()
    model = model.eval()
    try:
        torch.export.export(model, (), copy.deepcopy(kwargs), strict=False)
        raise SystemExit("pixtral: exported with its image sizes a tensor (the control passes)")
    except torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode:
        pass
    torch.export.export(model, (), precomputed(model, kwargs), strict=False)
    print("ok: pixtral exports with its image sizes precomputed, not without")


if __name__ == "__main__":
    main()
