//! Force `TopK(sorted=1)`: ONNX Runtime rejects or mis-orders unsorted TopK
//! outputs in some kernels. Applied to the main graph and every function.

use hfx_sdk::prelude::*;

#[hfx_sdk::onnx_ir_fix(targets = ["TopK"])]
fn fix_topk_sorted(model: &Model, node: OnnxNodeId) -> Result<bool> {
    if matches!(model.attribute(node, "sorted")?, Some(Attribute::Int(1))) {
        return Ok(false);
    }
    model
        .set_attribute(node, &NamedAttribute { name: "sorted".into(), value: Attribute::Int(1) })?;
    Ok(true)
}
