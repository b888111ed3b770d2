//! Test plugin: a third party's `silu` conversion for the OpenVINO backend,
//! x * (0.5 + 0.5 * tanh(x / 2)) (the same function: sigmoid(x) is
//! (1 + tanh(x / 2)) / 2), which replaces the default translation by its
//! higher `order`. OpenVINO's transformations fuse the default's
//! x * sigmoid(x) into `Swish`; this form keeps its `Tanh`, so the IR shows
//! which conversion ran.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.silu.default" => silu_through_tanh,
}

fn silu_through_tanh(e: &Emit) -> Result<()> {
    let x = e.tensor("self")?;
    let dtype = e.input_meta("self")?.dtype;
    let half = e.scalar(0.5, &dtype)?;
    let halved = e.op("Mul", &[&x, &half])?;
    let tanh = e.op("Tanh", &[&halved])?;
    let scaled = e.op("Mul", &[&tanh, &half])?;
    let sigmoid = e.op("Add", &[&scaled, &half])?;
    let out = e.op("Mul", &[&x, &sigmoid])?;
    e.bind_output(&out)
}
