//! `cummax` / `cummin` as a max / min over a lower-triangular masked grid:
//! entry (i, j) of row i holds x[j] for j <= i and the reduction's identity
//! elsewhere. O(N²) memory along the scanned axis. Neither ONNX nor
//! ExecuTorch's portable runtime has a cumulative extremum (ExecuTorch: the
//! portable program cannot be emitted, the XNNPACK one does not load); the
//! reference's ExecuTorch patches (`_patch_cummax`, `_patch_cummin`) build the
//! same grid. Returns `(values, indices)` as the original's named tuple (the
//! reference's ExecuTorch patches return zeros as indices). On ties the index
//! is the first occurrence (`max`'s), where `cummax` reports the last.
//!
//! ExecuTorch plans every tensor at its sizes' upper bounds, so under a
//! dynamic scanned axis the grid is planned at the bound squared.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.cummax", "torch.Tensor.cummax", "torch.cummin", "torch.Tensor.cummin"])]
fn patch_cumulative_extremum(call: PatchedCall) -> Result<Program> {
    let max = call.target.ends_with("cummax");
    let (Some(input), Some(dim)) =
        (call.args.first().copied(), call.param(1, "dim").and_then(|s| call.int(s)))
    else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    let Some(tensor) = call.tensor(input) else { return Ok(ProgramBuilder::passthrough(&call)) };
    let dtype = tensor.meta.dtype.as_str();
    let identity = if dtype == "bool" {
        Scalar::Boolean(!max)
    } else if let Some((low, high)) = float_limits(dtype) {
        Scalar::Float(if max { low } else { high })
    } else if let Some((low, high)) = int_limits(dtype) {
        Scalar::Int(if max { low } else { high })
    } else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    let rank = tensor.rank().max(1);

    let mut p = ProgramBuilder::new(&call);
    let d = p.int(dim);
    let last = p.int(-1);
    let second_last = p.int(-2);
    let n = p.call("torch.Tensor.size", &[input, d]);
    let moved = p.call("torch.movedim", &[input, d, last]);
    let shape = p.getattr(moved, "shape");
    let mut sizes: Vec<Slot> = (0..rank as i64 - 1).map(|i| p.item(shape, i)).collect();
    sizes.extend([n, n]);
    let column = p.call("torch.unsqueeze", &[moved, second_last]);
    let mut expand_args = vec![column];
    expand_args.extend(sizes);
    let grid = p.call("torch.Tensor.expand", &expand_args);
    let boolean = p.dtype("bool");
    let ones = p.call_kw("torch.ones", &[n, n], &[("dtype", boolean)]);
    let include = p.call("torch.tril", &[ones]);
    let empty = p.pack(&[]);
    let identity = match identity {
        Scalar::Boolean(b) => p.boolean(b),
        Scalar::Float(f) => p.float(f),
        Scalar::Int(i) => p.int(i),
        _ => unreachable!(),
    };
    let own_dtype = p.dtype(dtype);
    let fill = p.call_kw("torch.full", &[empty, identity], &[("dtype", own_dtype)]);
    let masked = p.call("torch.where", &[include, grid, fill]);
    let reduced = p.call(if max { "torch.max" } else { "torch.min" }, &[masked, last]);
    let values = p.item(reduced, 0);
    let indices = p.item(reduced, 1);
    let values = p.call("torch.movedim", &[values, last, d]);
    let indices = p.call("torch.movedim", &[indices, last, d]);
    let pair = p.pack(&[values, indices]);
    let out = p
        .call(if max { "torch.return_types.cummax" } else { "torch.return_types.cummin" }, &[pair]);
    Ok(p.finish(out))
}
