// Test plugin: a third party's translation of `aten.logaddexp.default`,
// which no shipped translation declares (ONNX has no such operator, and
// torch's default table decomposes it): loaded, it keeps the op whole (no
// decomposition) and emits `a + Softplus(b - a)`, which the decomposition
// (max + log1p(exp(-|a - b|))) never does.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.logaddexp.default" => logaddexp,
}

fn logaddexp(e: &Emit) -> Result<String> {
    let a = e.tensor("self")?;
    let b = e.tensor("other")?;
    let difference = e.op("Sub", &[&b, &a])?;
    e.op("Add", &[&a, &e.op("Softplus", &[&difference])?])
}
