//! Drop a squeeze of dimensions that are not 1.
//!
//! `x.squeeze(d)` leaves `x` alone when its size at `d` is not 1, and
//! torch.export records it anyway; ONNX `Squeeze` of such an axis is an
//! error. A dimension is known not to be 1 when it is a constant other than 1,
//! or a size symbol whose range starts at 2 (torch specializes 0 and 1).

use hfx_sdk::prelude::*;

/// True when dimension `dim` of a tensor of `shape` is certainly not 1.
fn never_one(graph: &Graph, shape: &[Dim], dim: i64) -> bool {
    let rank = shape.len() as i64;
    let d = if dim < 0 { dim + rank } else { dim };
    match shape.get(d as usize) {
        Some(Dim::Fixed(n)) => *n != 1,
        Some(Dim::Symbolic(symbol)) => {
            graph.range_constraints().iter().any(|r| &r.symbol == symbol && r.min >= 2)
        }
        None => false,
    }
}

#[hfx_sdk::fx_node_fix(targets = ["aten.squeeze.dim", "aten.squeeze.dims"])]
fn fix_noop_squeeze(graph: &Graph, node: NodeId) -> Result<bool> {
    let input = graph.tensor_input(node, "self")?;
    let ValueMeta::Tensor(meta) = graph.value_meta(input)? else { return Ok(false) };
    let dims = match graph.input(node, "dim")? {
        Some(Argument::Int(d)) => vec![d],
        Some(Argument::Ints(ds)) => ds,
        _ => return Ok(false),
    };
    if dims.is_empty() || !dims.iter().all(|&d| never_one(graph, &meta.shape, d)) {
        return Ok(false);
    }
    graph.forward_input(node, "self")?;
    Ok(true)
}
