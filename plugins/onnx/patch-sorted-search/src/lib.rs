//! `searchsorted` and `bucketize` as a broadcast comparison + sum: the
//! insertion index into a sorted sequence is the count of entries below (or
//! at, with `right`). O(N·M) instead of O(M log N), but ONNX has neither op,
//! and ExecuTorch's portable runtime has a kernel for neither (its XNNPACK
//! program, which leaves them to that runtime, does not load).

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.searchsorted", "torch.bucketize"])]
fn patch_sorted_search(call: PatchedCall) -> Result<Program> {
    let bucketize = call.target.ends_with("bucketize");
    let (sorted, values) = if bucketize {
        (call.param(1, "boundaries"), call.param(0, "input"))
    } else {
        (
            call.param(0, "sorted_sequence"),
            call.param(1, "input").or_else(|| call.param(1, "values")),
        )
    };
    let (Some(sorted), Some(values)) = (sorted, values) else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    if call.tensor(sorted).is_none()
        || call.tensor(values).is_none()
        || !call.is_none(call.kwarg("out"))
        || !call.is_none(call.kwarg("sorter"))
    {
        return Ok(ProgramBuilder::passthrough(&call));
    }
    let right = match call.kwarg("side").and_then(|s| call.string(s)) {
        Some(side) => side == "right",
        None => call.kwarg("right").and_then(|s| call.boolean(s)).unwrap_or(false),
    };
    let int32 = call.kwarg("out_int32").and_then(|s| call.boolean(s)).unwrap_or(false);
    let compare = if right { "torch.le" } else { "torch.lt" };

    let mut p = ProgramBuilder::new(&call);
    let last = p.int(-1);
    let result = if bucketize {
        // boundaries < input[..., None], counted over the boundaries.
        let column = p.call("torch.unsqueeze", &[values, last]);
        let below = p.call(compare, &[sorted, column]);
        p.call("torch.sum", &[below, last])
    } else {
        // sorted[..., :, None] < values[..., None, :], counted over the sequence.
        let second_last = p.int(-2);
        let column = p.call("torch.unsqueeze", &[sorted, last]);
        let row = p.call("torch.unsqueeze", &[values, second_last]);
        let below = p.call(compare, &[column, row]);
        p.call("torch.sum", &[below, second_last])
    };
    let out = if int32 {
        let dtype = p.dtype("int32");
        p.call("torch.Tensor.to", &[result, dtype])
    } else {
        result
    };
    Ok(p.finish(out))
}
