//! A reshape or view of a non-contiguous tensor gets a contiguous clone first.
//! Both ONNX and ExecuTorch refuse the `aten.view` it would otherwise become,
//! and both drop a plain `.contiguous()` (the ONNX optimizer folds it,
//! functionalization removes it); a clone survives. `contiguous_format` is
//! explicit: a bare clone keeps a transposed dim order.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.reshape", "torch.Tensor.reshape", "torch.Tensor.view"])]
fn patch_reshape_contiguous(call: PatchedCall) -> Result<Program> {
    let Some(&input) = call.args.first() else { return Ok(ProgramBuilder::passthrough(&call)) };
    if !call.tensor(input).is_some_and(|t| !t.contiguous) {
        return Ok(ProgramBuilder::passthrough(&call));
    }
    let mut p = ProgramBuilder::new(&call);
    let format = p.lookup("torch.contiguous_format");
    let copy = p.call_kw("torch.Tensor.clone", &[input], &[("memory_format", format)]);
    let mut args = call.args.clone();
    args[0] = copy;
    let out = p.original(&args, &call.kwarg_slots());
    Ok(p.finish(out))
}
