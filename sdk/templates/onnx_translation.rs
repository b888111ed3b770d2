// An ATen → ONNX translation: `aten.relu.default` → `Relu`.

use hfx_sdk::prelude::*;

struct Translation;

impl Guest for Translation {
    fn describe() -> Vec<String> {
        targets(&["aten.relu.default"])
    }

    fn translate(graph: &Graph, node: NodeId, builder: &Builder) -> Result<(), Error> {
        let input = builder.value_name(graph.tensor_input(node, "self")?)?;
        let outputs = builder.add_node("Relu", "", &[input], 1, &[])?;
        let [output] = graph.output_values(node)?[..] else {
            return Err(error("relu has one output", Some(node)));
        };
        builder.bind(output, &outputs[0])
    }
}

hfx_sdk::register_onnx_translation!(Translation);
