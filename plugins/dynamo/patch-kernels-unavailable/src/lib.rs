//! `is_kernels_available()` answers false while tracing: the optional
//! `kernels` library calls native code torch.export cannot trace, and every
//! model keeps a traceable PyTorch fallback. Each module that imported the
//! function by name is its own target.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = [
    "transformers.utils.import_utils.is_kernels_available", "transformers.utils.is_kernels_available",
    "transformers.modeling_utils.is_kernels_available",
    "transformers.models.sam3_video.modeling_sam3_video.is_kernels_available",
    "transformers.models.mra.modeling_mra.is_kernels_available",
    "transformers.models.rwkv.modeling_rwkv.is_kernels_available",
    "transformers.models.yoso.modeling_yoso.is_kernels_available",
])]
fn patch_kernels_unavailable(call: PatchedCall) -> Result<Program> {
    let mut p = ProgramBuilder::new(&call);
    let no = p.boolean(false);
    Ok(p.finish(no))
}
