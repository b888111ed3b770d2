// An ATen → ONNX translation plugin: one line per op in the table (its
// targets and its dispatch), each a function of the node being translated.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.relu.default" => relu,
}

/// Returns the ONNX name of the node's output; the table binds it.
fn relu(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    e.op("Relu", &[&x])
}
