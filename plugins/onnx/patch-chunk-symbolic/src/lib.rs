//! `chunk` of a dynamic axis as narrows. It otherwise lowers to
//! `SplitToSequence` whose split length is a symbolic floordiv of the axis,
//! which onnx_ir's inliner rejects. Like the reference, this assumes the axis
//! divides evenly into `chunks` (head-axis splits); a static axis goes to the
//! original, whose fixed split sizes lower fine.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.chunk", "torch.Tensor.chunk"])]
fn patch_chunk_symbolic(call: PatchedCall) -> Result<Program> {
    let input = call.param(0, "input").or_else(|| call.param(0, "self"));
    let chunks = call.param(1, "chunks").and_then(|s| call.int(s));
    let dim = call.param(2, "dim").and_then(|s| call.int(s)).unwrap_or(0);
    let (Some(input), Some(chunks)) = (input, chunks) else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    if !call.tensor(input).is_some_and(|t| t.symbolic_dim(dim)) || chunks < 1 {
        return Ok(ProgramBuilder::passthrough(&call));
    }
    let mut p = ProgramBuilder::new(&call);
    let dim = p.int(dim);
    let total = p.call("torch.Tensor.size", &[input, dim]);
    let pieces = p.int(chunks);
    let minus_one = p.int(chunks - 1);
    let padded = p.call("operator.add", &[total, minus_one]);
    let chunk = p.call("operator.floordiv", &[padded, pieces]);
    let mut start = p.int(0);
    let mut parts = Vec::new();
    for i in 0..chunks {
        let length = if i == chunks - 1 { p.call("operator.sub", &[total, start]) } else { chunk };
        parts.push(p.narrow(input, dim, start, length));
        start = p.call("operator.add", &[start, chunk]);
    }
    let out = p.pack(&parts);
    Ok(p.finish(out))
}
