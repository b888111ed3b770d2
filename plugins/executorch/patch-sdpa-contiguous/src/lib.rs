//! SDPA's output cloned to contiguous. The output of
//! `scaled_dot_product_attention` is laid out as its kernel likes (the math
//! path's is permuted); at trace time the reshape after it (`[B, H, S, D]` →
//! transpose → `[B, S, H*D]`) sees a contiguous tensor and stays a view, but
//! ExecuTorch's edge lowering re-derives layouts through its decompositions
//! and then refuses that view (GPT-2: "Cannot view a tensor with shape ...
//! and strides ..."). The reference's `_patch_scaled_dot_product_attention`
//! clones the output with `contiguous_format`; a plain `.contiguous()` would
//! be dropped by functionalization, a clone survives.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.nn.functional.scaled_dot_product_attention"])]
fn patch_sdpa_contiguous(call: PatchedCall) -> Result<Program> {
    let mut p = ProgramBuilder::new(&call);
    let out = p.original(&call.args, &call.kwarg_slots());
    let format = p.lookup("torch.contiguous_format");
    let copy = p.call_kw("torch.Tensor.clone", &[out], &[("memory_format", format)]);
    Ok(p.finish(copy))
}
