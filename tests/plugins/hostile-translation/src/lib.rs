//! Hostile translation: emits 32 `Constant` nodes, each with a 1 MiB string
//! attribute. The write budget must stop the call, naming it, and the
//! builder must be rolled back to what it held before.

use hfx_sdk::prelude::*;

#[hfx_sdk::onnx_translation(targets = ["aten.relu.default"])]
fn hostile_translation(graph: &Graph, node: NodeId, builder: &Builder) -> Result<()> {
    let value = "a".repeat(1 << 20);
    let mut last = Vec::new();
    for _ in 0..32 {
        let attributes =
            [NamedAttribute { name: "value_string".into(), value: Attribute::Str(value.clone()) }];
        last = builder.add_node("Constant", "", &[], 1, &attributes)?;
    }
    let [output] = graph.output_values(node)?[..] else {
        return Err(error("relu has one output", Some(node)));
    };
    builder.bind(output, &last[0])
}
