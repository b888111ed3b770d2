//! Test plugin: a wrong `silu` translation (just the sigmoid), which runs and
//! passes the checker; `--verify` must catch it and keep the old output.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.silu.default" => wrong_silu,
}

fn wrong_silu(e: &Emit) -> Result<()> {
    let x = e.tensor("self")?;
    let out = e.op("Sigmoid", &[&x])?;
    e.bind_output(&out)
}
