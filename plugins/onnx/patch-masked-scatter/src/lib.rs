//! `masked_scatter` as cumsum + gather + where: the i-th set position of the
//! mask takes the i-th source element. Its own lowering is a `ScatterND` that
//! ONNX Runtime fails on.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.Tensor.masked_scatter"])]
fn patch_masked_scatter(call: PatchedCall) -> Result<Program> {
    let (Some(target), Some(mask), Some(source)) =
        (call.param(0, "self"), call.param(1, "mask"), call.param(2, "source"))
    else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    let mut p = ProgramBuilder::new(&call);
    let flat = p.int(-1);
    let zero = p.int(0);
    let one = p.int(1);
    let int64 = p.dtype("int64");
    let mask = p.call("torch.Tensor.expand_as", &[mask, target]);
    let flat_mask = p.call("torch.Tensor.reshape", &[mask, flat]);
    let counts = p.call("torch.Tensor.to", &[flat_mask, int64]);
    let counts = p.call("torch.cumsum", &[counts, zero]);
    let positions = p.call("torch.sub", &[counts, one]);
    let positions = p.call_kw("torch.clamp", &[positions], &[("min", zero)]);
    let flat_source = p.call("torch.Tensor.reshape", &[source, flat]);
    let gathered = p.call("torch.index_select", &[flat_source, zero, positions]);
    let flat_target = p.call("torch.Tensor.reshape", &[target, flat]);
    let merged = p.call("torch.where", &[flat_mask, gathered, flat_target]);
    let shape = p.getattr(target, "shape");
    let out = p.call("torch.Tensor.reshape", &[merged, shape]);
    Ok(p.finish(out))
}
