//! `split` with a symbolic split size, expanded into narrows. A SymInt split
//! size otherwise lowers to `SplitToSequence` with a symbolic scalar `split`
//! input, which onnxscript's constant folder crashes on. The piece count is
//! guarded (`int(...)` in the program), exactly as enumerating the list
//! `aten.split.Tensor` returns would guard it.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.split", "torch.Tensor.split"])]
fn patch_split_symbolic(call: PatchedCall) -> Result<Program> {
    let input = call.param(0, "tensor").or_else(|| call.param(0, "self"));
    let size = call.param(1, "split_size_or_sections").or_else(|| call.param(1, "split_size"));
    let (Some(input), Some(size)) = (input, size) else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    let (Some(tensor), Some(CallValue::SymInt(split))) = (call.tensor(input), call.value(size))
    else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    let dim = call.param(2, "dim").and_then(|s| call.int(s)).unwrap_or(0);
    let axis = normalize_dim(dim, tensor.rank())
        .ok_or_else(|| error(format!("split: dim {dim} out of range"), None))?;
    let (Some(total_hint), Some(split_hint)) = (tensor.sizes.get(axis).copied(), split.hint) else {
        return Err(error(
            "split: a symbolic size without a hint (data-dependent) cannot be expanded",
            None,
        ));
    };
    if split_hint <= 0 {
        return Err(error(format!("split: split size {split_hint} is not positive"), None));
    }
    let count = (total_hint + split_hint - 1) / split_hint;

    let mut p = ProgramBuilder::new(&call);
    let dim = p.int(dim);
    let total = p.call("torch.Tensor.size", &[input, dim]);
    // int((total + size - 1) // size): guards the piece count the program unrolls.
    let one = p.int(1);
    let padded = p.call("operator.add", &[total, size]);
    let padded = p.call("operator.sub", &[padded, one]);
    let pieces = p.call("operator.floordiv", &[padded, size]);
    p.call("builtins.int", &[pieces]);
    let mut parts = Vec::new();
    for i in 0..count {
        let index = p.int(i);
        let start = p.call("operator.mul", &[index, size]);
        let rest = p.call("operator.sub", &[total, start]);
        let length = p.call("torch.sym_min", &[size, rest]);
        parts.push(p.narrow(input, dim, start, length));
    }
    let out = p.pack(&parts);
    Ok(p.finish(out))
}
