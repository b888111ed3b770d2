//! `histc` as statically shaped zeros + scatter_add. torchlib's `aten_histc`
//! rejects integer input, and `bincount` has a data-dependent output size.
//! Like `histc`, elements outside [min, max] are not counted; with
//! min = max = 0 the range is the data's.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.histc"])]
fn patch_histc(call: PatchedCall) -> Result<Program> {
    let Some(input) = call.param(0, "input") else { return Ok(ProgramBuilder::passthrough(&call)) };
    let Some(tensor) = call.tensor(input) else { return Ok(ProgramBuilder::passthrough(&call)) };
    if !call.is_none(call.kwarg("out")) {
        return Ok(ProgramBuilder::passthrough(&call));
    }
    let read = |index, name, default: f64| {
        call.param(index, name).and_then(|s| call.float(s)).unwrap_or(default)
    };
    let bins = call.param(1, "bins").and_then(|s| call.int(s)).unwrap_or(100);
    let (low, high) = (read(2, "min", 0.0), read(3, "max", 0.0));
    if bins < 1 {
        return Err(error(format!("histc: bins must be positive, got {bins}"), None));
    }
    let out_dtype =
        if tensor.is_floating() { tensor.meta.dtype.clone() } else { "float32".to_string() };

    let mut p = ProgramBuilder::new(&call);
    let float32 = p.dtype("float32");
    let int64 = p.dtype("int64");
    let out_dtype = p.dtype(&out_dtype);
    let minus_one = p.int(-1);
    let flat_shape = p.pack(&[minus_one]);
    let flat = p.call("torch.reshape", &[input, flat_shape]);
    let values = p.call("torch.Tensor.to", &[flat, float32]);
    let (low, high) = if low == 0.0 && high == 0.0 {
        let low = p.call("torch.amin", &[values]);
        let high = p.call("torch.amax", &[values]);
        (low, high)
    } else {
        let (l, h) = (p.float(low), p.float(high));
        (p.call("torch.tensor", &[l]), p.call("torch.tensor", &[h]))
    };
    let bin_count = p.int(bins);
    let width = p.call("torch.sub", &[high, low]);
    let width = p.call("torch.div", &[width, bin_count]);
    let offset = p.call("torch.sub", &[values, low]);
    let position = p.call("torch.div", &[offset, width]);
    let index = p.call("torch.Tensor.to", &[position, int64]);
    let zero = p.int(0);
    let last = p.int(bins - 1);
    let index = p.call_kw("torch.clamp", &[index], &[("min", zero), ("max", last)]);
    // Out-of-range elements weigh 0.
    let above_low = p.call("torch.ge", &[values, low]);
    let below_high = p.call("torch.le", &[values, high]);
    let inside = p.call("torch.logical_and", &[above_low, below_high]);
    let weights = p.call("torch.Tensor.to", &[inside, out_dtype]);
    let counts = p.call_kw("torch.zeros", &[bin_count], &[("dtype", out_dtype)]);
    let out = p.call("torch.scatter_add", &[counts, zero, index, weights]);
    Ok(p.finish(out))
}
