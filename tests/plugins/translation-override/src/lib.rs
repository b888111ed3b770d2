//! Test plugin: a third party's `silu` translation, x / (1 + exp(-x)), which
//! replaces the default one (x * sigmoid(x)) by its higher `order`.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.silu.default" => silu_through_exp,
}

fn silu_through_exp(e: &Emit) -> Result<()> {
    let x = e.tensor("self")?;
    let dtype = e.input_meta("self")?.dtype;
    let negated = e.op("Neg", &[&x])?;
    let exp = e.op("Exp", &[&negated])?;
    let one = e.scalar(1.0, &dtype)?;
    let denominator = e.op("Add", &[&one, &exp])?;
    let out = e.op("Div", &[&x, &denominator])?;
    e.bind_output(&out)
}
