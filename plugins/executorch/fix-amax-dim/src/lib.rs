//! Negative dims of `amax` and `max.dim` made positive.
//!
//! XNNPACK's max visitor (`executorch/backends/xnnpack/operators/op_max_dim.py`)
//! compares the reduced dim with 2 and 3 as written, so `x.amax(dim=-1)` on a
//! 4-D tensor fails the lowering with "amax.default only supports dim == 2 or
//! dim == 3" although dim 3 is meant; `max.dim` becomes `amax` in the lowering
//! and fails the same way. The reference's `_fix_amax_dim` (transformers 5.24).
//! The portable kernels take negative dims, so only the XNNPACK delegate needs it.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.amax.default", "aten.max.dim"])]
fn fix_amax_dim(graph: &Graph, node: NodeId) -> Result<bool> {
    let input = graph.tensor_input(node, "self")?;
    let Some(meta) = graph.tensor_meta(input)? else { return Ok(false) };
    let rank = meta.shape.len() as i64;
    let positive = |dim: i64| if dim < 0 { dim + rank } else { dim };
    let dim = match graph.input(node, "dim")? {
        Some(Argument::Int(dim)) if dim < 0 => Argument::Int(positive(dim)),
        Some(Argument::Ints(dims)) if dims.iter().any(|&d| d < 0) => {
            Argument::Ints(dims.into_iter().map(positive).collect())
        }
        _ => return Ok(false),
    };
    graph.set_input(node, &positional("dim", dim))?;
    Ok(true)
}
