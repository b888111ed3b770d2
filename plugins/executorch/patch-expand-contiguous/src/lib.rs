//! An `expand` that broadcasts is cloned to contiguous, as the reference's
//! `_patch_expand`. `expand` is a view with stride 0 along the dims it
//! broadcasts, and ExecuTorch refuses a stride of 0 where it plans memory
//! ("0 in strides is not supported for ExecuTorch", `TensorSpec` in
//! `exir/tensor.py`); the clone gives the tensor downstream standard strides.
//!
//! The reference decides on the result's strides (`0 in result.stride()`);
//! a patched call shows shapes, not strides, so this decides on the sizes,
//! which is the same thing: `expand` broadcasts exactly where the input's
//! dim is 1 or absent (a new leading dim) and the size asked for is not 1
//! (`-1` keeps the input's). An expand that broadcasts nothing is a plain
//! view and stays one. A symbolic size asked for a dim of 1 counts as
//! broadcasting (a clone of a tensor that was not broadcast after all is
//! only a copy).
//!
//! executorch 1.4.1 no longer meets that stride in the programs hfx emits
//! (its constant propagation makes folded expands contiguous, pytorch/executorch#14725,
//! and every view is a copy in the portable program): kept as the
//! reference has it, the clone costs one copy per broadcasting expand.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.Tensor.expand"])]
fn patch_expand_contiguous(call: PatchedCall) -> Result<Program> {
    let Some(&input) = call.args.first() else { return Ok(ProgramBuilder::passthrough(&call)) };
    let Some(tensor) = call.tensor(input) else { return Ok(ProgramBuilder::passthrough(&call)) };
    let Some(sizes) = requested_sizes(&call) else { return Ok(ProgramBuilder::passthrough(&call)) };
    // Fewer sizes than dims is an error the original states.
    if sizes.len() < tensor.rank() || !broadcasts(&tensor.meta.shape, &sizes, &call) {
        return Ok(ProgramBuilder::passthrough(&call));
    }
    let mut p = ProgramBuilder::new(&call);
    // The ATen op, not the original: under torch.export the original
    // `Tensor.expand` reaches this patch again from torch's function modes
    // (four levels deep), and each level would clone the clone.
    let sizes = p.pack(&sizes);
    let expanded = p.call("aten.expand.default", &[input, sizes]);
    let format = p.lookup("torch.contiguous_format");
    let copy = p.call_kw("torch.Tensor.clone", &[expanded], &[("memory_format", format)]);
    Ok(p.finish(copy))
}

/// The sizes asked for (slots of ints or symbolic ints), however they were
/// passed: `expand(3, 4)`, `expand((3, 4))` or `expand(size=(3, 4))`.
fn requested_sizes(call: &PatchedCall) -> Option<Vec<Slot>> {
    let listed = |slot: Slot| match call.value(slot) {
        Some(CallValue::Sequence(items)) => Some(items.clone()),
        _ => None,
    };
    match (&call.args[1..], call.kwarg("size")) {
        ([], Some(size)) => listed(size),
        ([one], None) => listed(*one).or(Some(vec![*one])),
        (many, None) => Some(many.to_vec()),
        _ => None,
    }
}

/// Whether expanding a tensor of `shape` to `sizes` broadcasts along some dim
/// (sizes align from the right; the extra leading ones are new dims).
fn broadcasts(shape: &[Dim], sizes: &[Slot], call: &PatchedCall) -> bool {
    let added = sizes.len().saturating_sub(shape.len());
    sizes.iter().enumerate().any(|(index, &size)| {
        let stays_one = matches!(call.int(size), Some(1));
        let keeps_input = matches!(call.int(size), Some(-1));
        match index.checked_sub(added).map(|dim| &shape[dim]) {
            None => !stays_one,
            Some(Dim::Fixed(1)) => !stays_one && !keeps_input,
            Some(_) => false,
        }
    })
}
