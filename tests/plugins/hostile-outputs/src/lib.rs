//! Hostile translation: asks `add-node` for more output names than the host
//! can hold, three ways, by target:
//! - `relu`: a 1 MiB op type × 2400 outputs (each name repeats the op type:
//!   2.5 GB of names for 1 MiB handed in);
//! - `silu`, `mul`: `outputs = u32::MAX` (4 billion names);
//! - `add`: a 4 KiB op type (the longest identifier allowed) × 60 000 outputs
//!   (500 MB of names).
//! Each must be refused before the host allocates, naming `builder.add-node`
//! and the limit, with the host's memory far below what was asked.

use hfx_sdk::prelude::*;

#[hfx_sdk::onnx_translation(targets = ["aten.relu.default", "aten.silu.default", "aten.add.Tensor", "aten.mul.Tensor"])]
fn hostile_outputs(graph: &Graph, node: NodeId, builder: &Builder) -> Result<()> {
    let (op_type, outputs) = match graph.target(node)?.as_str() {
        "aten.relu.default" => ("R".repeat(1 << 20), 2400),
        "aten.add.Tensor" => ("A".repeat(4 << 10), 60_000),
        _ => ("Split".to_string(), u32::MAX),
    };
    let names = builder.add_node(&op_type, "", &[], outputs, &[])?;
    let [output] = graph.output_values(node)?[..] else {
        return Err(error("one output", Some(node)));
    };
    builder.bind(output, &names[0])
}
