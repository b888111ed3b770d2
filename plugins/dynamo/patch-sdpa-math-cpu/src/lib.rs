//! SDPA on CPU runs under `sdpa_kernel(SDPBackend.MATH)` while tracing: CPU
//! SDPA's flash/efficient paths guard on `Eq(batch, 1)`
//! (pytorch/pytorch#180202), which raises `GuardOnDataDependentSymNode` when
//! the batch comes from a data-dependent op (`pixel_values[mask]` in most
//! VLMs). The MATH path has no batch-1 dispatch. CUDA keeps its kernels.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.nn.functional.scaled_dot_product_attention"])]
fn patch_sdpa_math_cpu(call: PatchedCall) -> Result<Program> {
    let query = call.param(0, "query").and_then(|s| call.tensor(s));
    if !query.is_some_and(|q| q.meta.device.kind == "cpu") {
        return Ok(ProgramBuilder::passthrough(&call));
    }
    let mut p = ProgramBuilder::new(&call);
    let math = p.lookup("torch.nn.attention.SDPBackend.MATH");
    let context = p.call("torch.nn.attention.sdpa_kernel", &[math]);
    p.enter(context);
    let kwargs = call.kwarg_slots();
    let out = p.original(&call.args, &kwargs);
    Ok(p.finish(out))
}
