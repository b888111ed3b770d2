//! Force `TopK(sorted=1)`: ONNX Runtime rejects or mis-orders unsorted TopK
//! outputs in some kernels. Applied to the main graph and every function.

use hfx_sdk::prelude::*;

struct FixTopkSorted;

impl Guest for FixTopkSorted {
    fn describe() -> Vec<String> {
        targets(&["TopK"])
    }

    fn apply(model: &Model, node: OnnxNodeId) -> Result<bool, Error> {
        if matches!(model.attribute(node, "sorted")?, Some(Attribute::Int(1))) {
            return Ok(false);
        }
        model.set_attribute(node, &NamedAttribute { name: "sorted".into(), value: Attribute::Int(1) })?;
        Ok(true)
    }
}

hfx_sdk::register_onnx_ir_fix!(FixTopkSorted);
