//! Convolutions → ONNX `Conv` / `ConvTranspose`: `conv1d`/`conv2d`/`conv3d`
//! and the generic `convolution` (transposed too), with int or string
//! (`same`, `valid`) padding. Every convolution runs in float32, as ONNX
//! Runtime's CPU has only float32 kernels for both: float16 accumulates
//! there as torch's CPU kernel does (in float32), integers are exact while
//! sums stay below 2^24, float64 rounds to float32's precision.

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

/// The generic form, transposed or not.
fn convolution(e: &Emit) -> Result<String> {
    if e.boolean("transposed", false)? {
        conv_with(e, "ConvTranspose")
    } else {
        conv_with(e, "Conv")
    }
}

fn conv(e: &Emit) -> Result<String> {
    conv_with(e, "Conv")
}

fn conv_with(e: &Emit, op: &str) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let compute = "float32".to_string();
    let mut x = e.operand("input", &compute)?;
    let weight = e.operand("weight", &compute)?;
    let spatial = e.rank("weight")? as usize - 2;
    // An unbatched input (C, *spatial) gets a batch of one: ONNX's convolutions want one.
    let unbatched = e.rank("input")? as usize == spatial + 1;
    if unbatched {
        x = e.op("Unsqueeze", &[&x, &e.const_ints(&[0])?])?;
    }
    let strides = per_dim(e, "stride", spatial, 1)?;
    let dilations = per_dim(e, "dilation", spatial, 1)?;
    let group = e.int("groups", 1)?;
    let mut attributes = vec![
        attr("strides", Attribute::Ints(strides.clone())),
        attr("dilations", Attribute::Ints(dilations)),
        attr("group", Attribute::Int(group)),
    ];
    let padding = match e.arg("padding")? {
        Some(Argument::Str(mode)) if mode == "same" => {
            attributes.push(attr("auto_pad", Attribute::Str("SAME_UPPER".into())));
            None
        }
        Some(Argument::Str(mode)) if mode == "valid" => {
            attributes.push(attr("auto_pad", Attribute::Str("VALID".into())));
            None
        }
        _ => Some(per_dim(e, "padding", spatial, 0)?),
    };
    let output_padding = if op == "ConvTranspose" {
        per_dim(e, "output_padding", spatial, 0)?
    } else {
        vec![0; spatial]
    };
    // torch allows output_padding < max(stride, dilation), ONNX Runtime only
    // < stride: past that, the transposed convolution runs to its full end
    // and the end is cut or zero-padded to torch's size, bias added after.
    let beyond_stride = output_padding.iter().zip(&strides).any(|(o, s)| o >= s);
    let bias = match e.arg("bias")? {
        Some(Argument::Tensor(_)) => Some(e.operand("bias", &compute)?),
        _ => None,
    };
    let mut result = match padding {
        Some(pads) if beyond_stride => {
            let begin_only: Vec<i64> =
                pads.iter().copied().chain(std::iter::repeat_n(0, spatial)).collect();
            attributes.push(attr("pads", Attribute::Ints(begin_only)));
            let full = e.op_with(op, &[&x, &weight], &attributes)?;
            // the full end is `pad` past torch's; torch's reaches `output_padding` past it
            let mut ends = vec![0i64; 2 * (spatial + 2)];
            for (i, (o, p)) in output_padding.iter().zip(&pads).enumerate() {
                ends[spatial + 2 + 2 + i] = o - p;
            }
            let sized = e.op("Pad", &[&full, &e.const_ints(&ends)?])?;
            match &bias {
                Some(b) => {
                    let shape: Vec<i64> =
                        [1, -1].into_iter().chain(std::iter::repeat_n(1, spatial)).collect();
                    e.op("Add", &[&sized, &e.op("Reshape", &[b, &e.const_ints(&shape)?])?])?
                }
                None => sized,
            }
        }
        padding => {
            if let Some(pads) = padding {
                attributes.push(attr(
                    "pads",
                    Attribute::Ints(pads.iter().chain(pads.iter()).copied().collect()),
                ));
            }
            if op == "ConvTranspose" {
                // Same output size as torch: stride*(in-1) + output_padding + dilation*(k-1) + 1 - 2*pad.
                attributes.push(attr("output_padding", Attribute::Ints(output_padding)));
            }
            let mut inputs = vec![x, weight];
            inputs.extend(bias);
            let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
            e.op_with(op, &refs, &attributes)?
        }
    };
    if unbatched {
        result = e.op("Squeeze", &[&result, &e.const_ints(&[0])?])?;
    }
    if compute == out {
        Ok(result)
    } else {
        e.cast(&result, &compute, &out)
    }
}
