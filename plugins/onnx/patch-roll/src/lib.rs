//! `roll` as narrow + cat. Its own lowering emits a `Shape(start, end)` that
//! can be empty, and the `Slice` after it then has mismatched `axes`/`ends`,
//! which ONNX Runtime rejects. The explicit form is bit-exact.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.roll", "torch.Tensor.roll"])]
fn patch_roll(call: PatchedCall) -> Result<Program> {
    let input = call.param(0, "input").or_else(|| call.param(0, "self"));
    let shifts = call.param(1, "shifts");
    let dims = call.param(2, "dims");
    let (Some(input), Some(shifts), Some(dims)) = (input, shifts, dims) else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    let pairs: Vec<(i64, i64)> =
        match (call.int(shifts), call.int(dims), call.ints(shifts), call.ints(dims)) {
            (Some(s), Some(d), _, _) => vec![(s, d)],
            (_, _, Some(s), Some(d)) if s.len() == d.len() => s.into_iter().zip(d).collect(),
            // A flattened roll (no dims) or symbolic shifts: the original.
            _ => return Ok(ProgramBuilder::passthrough(&call)),
        };
    let Some(tensor) = call.tensor(input) else { return Ok(ProgramBuilder::passthrough(&call)) };
    let mut p = ProgramBuilder::new(&call);
    let mut out = input;
    for (shift, dim) in pairs {
        let d = p.int(dim);
        let (length, shift) = match tensor.fixed_dim(dim) {
            Some(0) => continue,
            Some(n) => match shift.rem_euclid(n) {
                0 => continue,
                s => (p.int(n), p.int(s)),
            },
            None => {
                let length = p.call("torch.Tensor.size", &[out, d]);
                let s = p.int(shift);
                let s = p.call("operator.mod", &[s, length]);
                (length, s)
            }
        };
        let kept = p.call("operator.sub", &[length, shift]);
        let zero = p.int(0);
        let front = p.narrow(out, d, kept, shift);
        let back = p.narrow(out, d, zero, kept);
        let parts = p.pack(&[front, back]);
        out = p.call("torch.cat", &[parts, d]);
    }
    if out == input {
        return Ok(ProgramBuilder::passthrough(&call));
    }
    Ok(p.finish(out))
}
