//! `Dinov2Embeddings.interpolate_pos_encoding` (and its copy in
//! `Dinov2WithRegistersEmbeddings`) always takes its general path (the
//! position grid resampled bicubically to the image's patch grid):
//! transformers skips it for an image of the configured size unless
//! `torch.jit.is_tracing()`, which torch.export does not set, so a dynamic
//! export keeps the stored embeddings and a guard pinning the patch count to
//! the traced image's. Flipping `is_tracing` itself would change other
//! models' traces (Qwen-VL's cache creation, Swin's window sizes). At the
//! configured size the resampling is the identity (half-pixel bicubic at
//! scale 1 reads each source pixel with weight 1, with or without
//! antialiasing, whose filter only widens when downscaling), so eager
//! outputs agree.

use hfx_sdk::prelude::*;

const DINOV2: &str =
    "transformers.models.dinov2.modeling_dinov2.Dinov2Embeddings.interpolate_pos_encoding";
const WITH_REGISTERS: &str = "transformers.models.dinov2_with_registers.modeling_dinov2_with_registers.Dinov2WithRegistersEmbeddings.interpolate_pos_encoding";

#[hfx_sdk::patch(targets = [
    "transformers.models.dinov2.modeling_dinov2.Dinov2Embeddings.interpolate_pos_encoding",
    "transformers.models.dinov2_with_registers.modeling_dinov2_with_registers.Dinov2WithRegistersEmbeddings.interpolate_pos_encoding",
])]
fn patch_dinov2_interpolated_positions(call: PatchedCall) -> Result<Program> {
    // The op `interpolate(mode="bicubic", align_corners=False)` calls on a
    // size: DINOv2 resamples plainly, DINOv2 with registers with
    // `antialias=True`.
    let resample = match call.target.as_str() {
        DINOV2 => "aten.upsample_bicubic2d.vec",
        WITH_REGISTERS => "aten._upsample_bicubic2d_aa.vec",
        other => return Err(error(format!("unexpected target {other}"), None)),
    };
    let target = &call.target;
    let missing = |name: &str| error(format!("{target}: no `{name}` argument"), None);
    let module = call.param(0, "self").ok_or_else(|| missing("self"))?;
    let embeddings = call.param(1, "embeddings").ok_or_else(|| missing("embeddings"))?;
    let height = call.param(2, "height").ok_or_else(|| missing("height"))?;
    let width = call.param(3, "width").ok_or_else(|| missing("width"))?;

    let mut p = ProgramBuilder::new(&call);
    let (zero, one, two, three, minus_one) = (p.int(0), p.int(1), p.int(2), p.int(3), p.int(-1));
    let positions = p.getattr(module, "position_embeddings");
    let patch_embeddings = p.getattr(module, "patch_embeddings");
    let patch_size = p.getattr(patch_embeddings, "patch_size");
    let (patch_h, patch_w) = (p.item(patch_size, 0), p.item(patch_size, 1));
    let new_h = p.call("operator.floordiv", &[height, patch_h]);
    let new_w = p.call("operator.floordiv", &[width, patch_w]);

    // The class token's position, then the stored grid of patch positions.
    let class_position = p.narrow(positions, one, zero, one);
    let stored = p.size(positions, 1);
    let grid_len = p.call("operator.sub", &[stored, one]);
    let grid = p.narrow(positions, one, one, grid_len);
    let dim = p.size(embeddings, -1);
    let side = p.call("math.isqrt", &[grid_len]);
    let grid = p.call("torch.Tensor.reshape", &[grid, one, side, side, dim]);
    let grid = p.call("torch.Tensor.permute", &[grid, zero, three, one, two]);

    // Resampled in float32 as transformers does (bicubic in half precision
    // shifts it).
    let dtype = p.getattr(grid, "dtype");
    let float32 = p.dtype("float32");
    let grid = p.call("torch.Tensor.to", &[grid, float32]);
    let size = p.pack(&[new_h, new_w]);
    let (no, no_scales) = (p.boolean(false), p.none());
    let grid = p.call(resample, &[grid, size, no, no_scales]);
    let grid = p.call("torch.Tensor.to", &[grid, dtype]);
    let grid = p.call("torch.Tensor.permute", &[grid, zero, two, three, one]);
    let grid = p.call("torch.Tensor.view", &[grid, one, minus_one, dim]);
    let both = p.pack(&[class_position, grid]);
    let out = p.call("torch.cat", &[both, one]);
    Ok(p.finish(out))
}
