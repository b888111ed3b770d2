// Test plugin: a third party's translation of `aten.softplus.default`, which
// no shipped translation declares: loaded, it keeps the op whole (no
// decomposition) and emits ONNX's Softplus.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.softplus.default" => softplus,
}

fn softplus(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    e.op("Softplus", &[&x])
}
