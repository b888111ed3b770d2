//! Erase assertion and shape-constraint nodes: ONNX has no equivalent, and the
//! program's range constraints keep what they check. The sym-int comparisons
//! that only fed them become dead and go with the stage's DCE.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = [
    "aten._assert_async.default", "aten._assert_async.msg", "aten._assert_scalar.default",
    "aten._assert_tensor_metadata.default", "aten.sym_constrain_range_for_size.default",
])]
fn fix_assertion(graph: &Graph, node: NodeId) -> Result<bool> {
    graph.erase(node)?;
    Ok(true)
}
