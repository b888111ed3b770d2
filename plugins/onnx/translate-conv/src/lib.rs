//! Convolutions → ONNX `Conv`: `conv1d`/`conv2d`/`conv3d` and the generic
//! `convolution` (not transposed), with int or string (`same`, `valid`) padding.

use hfx_sdk::prelude::*;

struct Conv;

const TARGETS: &[&str] = &["aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default", "aten.conv1d.padding", "aten.conv2d.padding", "aten.convolution.default"];

/// A per-spatial-dim list argument (`[1]` broadcasts).
fn per_dim(e: &Emit, name: &str, spatial: usize, default: i64) -> Result<Vec<i64>, Error> {
    let values = match e.arg(name)? {
        None | Some(Argument::None) => vec![default],
        _ => e.ints(name)?,
    };
    Ok(if values.len() == 1 { vec![values[0]; spatial] } else { values })
}

fn translate_node(e: &Emit, target: &str) -> Result<(), Error> {
    if target == "aten.convolution.default" && e.boolean("transposed", false)? {
        return Err(e.fail("transposed convolution is not translated yet"));
    }
    let x = e.tensor("input")?;
    let weight = e.tensor("weight")?;
    let spatial = e.rank("weight")? as usize - 2;
    let strides = per_dim(e, "stride", spatial, 1)?;
    let dilations = per_dim(e, "dilation", spatial, 1)?;
    let group = e.int("groups", 1)?;
    let mut attributes = vec![
        attr("strides", Attribute::Ints(strides)),
        attr("dilations", Attribute::Ints(dilations)),
        attr("group", Attribute::Int(group)),
    ];
    match e.arg("padding")? {
        Some(Argument::Str(mode)) if mode == "same" => attributes.push(attr("auto_pad", Attribute::Str("SAME_UPPER".into()))),
        Some(Argument::Str(mode)) if mode == "valid" => attributes.push(attr("auto_pad", Attribute::Str("VALID".into()))),
        _ => {
            let pads = per_dim(e, "padding", spatial, 0)?;
            attributes.push(attr("pads", Attribute::Ints(pads.iter().chain(pads.iter()).copied().collect())));
        }
    }
    let mut inputs = vec![x, weight];
    if let Some(Argument::Tensor(_)) = e.arg("bias")? {
        inputs.push(e.tensor("bias")?);
    }
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let out = e.op("Conv", &refs, &attributes)?;
    e.bind_output(&out)
}

impl Guest for Conv {
    fn describe() -> Vec<String> {
        targets(TARGETS)
    }

    fn translate(graph: &Graph, node: NodeId, builder: &Builder) -> Result<(), Error> {
        let target = graph.target(node)?;
        translate_node(&Emit::new(graph, node, builder), &target)
    }
}

hfx_sdk::register_onnx_translation!(Conv);
