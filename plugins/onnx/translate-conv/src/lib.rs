//! Convolutions → ONNX `Conv`: `conv1d`/`conv2d`/`conv3d` and the generic
//! `convolution` (not transposed), with int or string (`same`, `valid`) padding.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.conv1d.default" => conv,
    "aten.conv2d.default" => conv,
    "aten.conv3d.default" => conv,
    "aten.conv1d.padding" => conv,
    "aten.conv2d.padding" => conv,
    "aten.convolution.default" => convolution,
}

/// A per-spatial-dim list argument (`[1]` broadcasts).
fn per_dim(e: &Emit, name: &str, spatial: usize, default: i64) -> Result<Vec<i64>> {
    let values = match e.arg(name)? {
        None | Some(Argument::None) => vec![default],
        _ => e.ints(name)?,
    };
    Ok(if values.len() == 1 { vec![values[0]; spatial] } else { values })
}

/// The generic form: only not transposed.
fn convolution(e: &Emit) -> Result<String> {
    if e.boolean("transposed", false)? {
        return Err(e.fail("transposed convolution is not translated yet"));
    }
    conv(e)
}

fn conv(e: &Emit) -> Result<String> {
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
    e.op_with("Conv", &refs, &attributes)
}
