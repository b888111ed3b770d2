//! Test plugin: a wrong `silu` translation (just the sigmoid), which runs and
//! passes the checker; `--verify` must catch it and keep the old output.

use hfx_sdk::prelude::*;

struct WrongSilu;

impl Guest for WrongSilu {
    fn describe() -> Vec<String> {
        targets(&["aten.silu.default"])
    }

    fn translate(graph: &Graph, node: NodeId, builder: &Builder) -> Result<(), Error> {
        let e = Emit::new(graph, node, builder);
        let x = e.tensor("self")?;
        let out = e.op("Sigmoid", &[&x], &[])?;
        e.bind_output(&out)
    }
}

hfx_sdk::register_onnx_translation!(WrongSilu);
