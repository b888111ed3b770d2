//! `randperm(n)` as `argsort(rand(n))`: `aten.randperm` has no ONNX
//! decomposition. A generator argument is not honoured (the exported graph
//! draws from the runtime's generator either way).

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.randperm"])]
fn patch_randperm(call: PatchedCall) -> Result<Program> {
    let Some(n) = call.param(0, "n") else { return Ok(ProgramBuilder::passthrough(&call)) };
    let mut p = ProgramBuilder::new(&call);
    let size = p.pack(&[n]);
    let noise = match call.kwarg("device") {
        Some(device) => p.call_kw("torch.rand", &[size], &[("device", device)]),
        None => p.call("torch.rand", &[size]),
    };
    let order = p.call("torch.argsort", &[noise]);
    let dtype = match call.kwarg("dtype").filter(|&s| !call.is_none(Some(s))) {
        Some(dtype) => dtype,
        None => p.dtype("int64"),
    };
    let out = p.call("torch.Tensor.to", &[order, dtype]);
    Ok(p.finish(out))
}
