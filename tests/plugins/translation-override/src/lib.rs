//! Test plugin: a third party's `silu` translation, x / (1 + exp(-x)), which
//! replaces the default one (x * sigmoid(x)) by its higher `order`.

use hfx_sdk::prelude::*;

struct SiluThroughExp;

impl Guest for SiluThroughExp {
    fn describe() -> Vec<String> {
        targets(&["aten.silu.default"])
    }

    fn translate(graph: &Graph, node: NodeId, builder: &Builder) -> Result<(), Error> {
        let e = Emit::new(graph, node, builder);
        let x = e.tensor("self")?;
        let dtype = e.input_meta("self")?.dtype;
        let negated = e.op("Neg", &[&x], &[])?;
        let exp = e.op("Exp", &[&negated], &[])?;
        let one = e.scalar(1.0, &dtype)?;
        let denominator = e.op("Add", &[&one, &exp], &[])?;
        let out = e.op("Div", &[&x, &denominator], &[])?;
        e.bind_output(&out)
    }
}

hfx_sdk::register_onnx_translation!(SiluThroughExp);
