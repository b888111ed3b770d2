//! `detach` as its input, for the XNNPACK program only, as the reference's
//! `_patch_detach` (registered for `executorch.xnnpack` and CUDA). An
//! exported program carries no autograd, so a `detach` computes nothing, yet
//! torch.export records it (`aten.detach.default`) and ExecuTorch's edge
//! lowering turns it into a copy the XNNPACK partitioner does not take: a
//! portable kernel that splits the delegate around it. The portable program is
//! left alone (the reference's registration): there the copy is one kernel
//! among kernels.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.detach", "torch.Tensor.detach"])]
fn patch_detach(call: PatchedCall) -> Result<Program> {
    match call.param(0, "input").or_else(|| call.param(0, "self")) {
        Some(input) if call.tensor(input).is_some() => Ok(ProgramBuilder::new(&call).finish(input)),
        _ => Ok(ProgramBuilder::passthrough(&call)),
    }
}
