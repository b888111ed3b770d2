//! `clone()` of a non-contiguous tensor asks for `contiguous_format`.
//!
//! `Tensor.clone()` defaults to `preserve_format`: the copy keeps its source's
//! layout. ExecuTorch's lowering turns the clone into `_clone_dim_order` with
//! the source's dim order, and running it again (its edge passes re-trace the
//! program) maps that dim order back to a memory format, which fails for any
//! order but contiguous and channels-last: a buffer stored transposed, dim
//! order `[1, 0, 2, 3]`, stops the XNNPACK lowering with "Failed to map a
//! given dim_order: [1, 0, 2, 3] to a torch.memory_format". The reference's
//! `_fix_clone_memory_format` (transformers 5.24). Clones of contiguous tensors
//! are left alone, as there: the lowering folds those away.
//!
//! Contiguity is read from the source's strides (the `.pt2`'s tensor
//! metadata); a clone whose source is contiguous, or whose strides cannot be
//! compared with its shape's (symbolic), is left as it is. The clone's own
//! strides become contiguous where its shape is fixed (the host derives them);
//! a symbolic shape's strides are left as recorded, since a plugin cannot
//! declare new symbolic expressions (torch derives them again when ExecuTorch
//! re-traces the program). hfx's native portable emitter writes every tensor
//! contiguous whatever the memory format: only the XNNPACK delegate needs this.

use hfx_sdk::prelude::*;

/// Whether a tensor of `shape` laid out with `strides` is contiguous, as
/// `Tensor.is_contiguous` decides it (sizes of 1 take any stride, an empty
/// tensor is contiguous); None where a symbolic size or stride keeps it open.
fn is_contiguous(shape: &[Dim], strides: &[Dim]) -> Option<bool> {
    if strides.is_empty() || shape.contains(&Dim::Fixed(0)) {
        return Some(true); // the host's "contiguous", or no elements
    }
    // The contiguous stride of the dim being checked, while the sizes after it are fixed.
    let mut expected = Some(1i64);
    let mut open = false;
    for (size, stride) in shape.iter().zip(strides).rev() {
        if *size == Dim::Fixed(1) {
            continue;
        }
        match (expected, stride) {
            (Some(e), Dim::Fixed(s)) if *s != e => return Some(false),
            (Some(_), Dim::Fixed(_)) => {}
            _ => open = true,
        }
        expected = match size {
            Dim::Fixed(n) => expected.and_then(|e| e.checked_mul(*n)),
            Dim::Symbolic(_) => None,
        };
    }
    if open {
        None
    } else {
        Some(true)
    }
}

#[hfx_sdk::fx_node_fix(targets = ["aten.clone.default"])]
fn fix_clone_memory_format(graph: &Graph, node: NodeId) -> Result<bool> {
    if !matches!(graph.input(node, "memory_format")?, None | Some(Argument::None)) {
        return Ok(false); // a memory format asked for is kept
    }
    let source = graph.tensor_input(node, "self")?;
    let Some(meta) = graph.tensor_meta(source)? else { return Ok(false) };
    if is_contiguous(&meta.shape, &meta.strides) != Some(false) {
        return Ok(false);
    }
    graph.set_input(
        node,
        &keyword("memory_format", Argument::MemoryFormat("contiguous_format".into())),
    )?;
    let copy = graph.single_output(node)?;
    if let Some(mut copy_meta) = graph.tensor_meta(copy)? {
        if copy_meta.shape.iter().all(|d| matches!(d, Dim::Fixed(_))) {
            copy_meta.strides.clear(); // contiguous: the host derives the strides
            graph.set_value_meta(copy, &ValueMeta::Tensor(copy_meta))?;
        }
    }
    Ok(true)
}
