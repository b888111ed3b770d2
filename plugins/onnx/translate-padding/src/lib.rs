//! ATen padding → ONNX `Pad`: constant (negative pads crop), reflection (`reflect`) and replication (`edge`).

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.constant_pad_nd.default" => |e| pad(e, "pad", "constant"),
    "aten.reflection_pad1d.default" => |e| pad(e, "padding", "reflect"),
    "aten.reflection_pad2d.default" => |e| pad(e, "padding", "reflect"),
    "aten.reflection_pad3d.default" => |e| pad(e, "padding", "reflect"),
    "aten.replication_pad1d.default" => |e| pad(e, "padding", "edge"),
    "aten.replication_pad2d.default" => |e| pad(e, "padding", "edge"),
    "aten.replication_pad3d.default" => |e| pad(e, "padding", "edge"),
}

/// The dtype `Pad` runs in: ONNX Runtime's CPU `Pad` has no int16 or bfloat16
/// kernel, and both widen exactly.
fn compute_dtype(dtype: &str) -> &str {
    match dtype {
        "int16" | "uint16" => "int32",
        "bfloat16" => "float32",
        other => other,
    }
}

/// torch's pad list is last-axis-first pairs `[begin, end]`: a positive
/// amount pads, a negative one crops. The positive parts go to one `Pad`,
/// the negative ones to a `Slice` after it: cropping after padding is
/// torch's order (a reflection reads the uncropped input). Both name every
/// axis (no `axes` input): ONNX Runtime's transpose optimizer, moving a
/// transpose through a `Pad`, permutes its `pads` as if they covered every
/// axis (tests/python/patterns_image.py, `pad_between_transposes`).
fn pad(e: &Emit, name: &str, mode: &str) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let compute = compute_dtype(&out);
    let input = e.tensor("self")?;
    let x = e.cast(&input, &out, compute)?;
    let amounts = match e.arg(name)?.map(sym_ints) {
        Some(Argument::SymInts(v)) => v,
        other => return Err(e.fail(format!("`{name}`: expected a list of sizes, got {other:?}"))),
    };
    if amounts.len() % 2 != 0 {
        return Err(e.fail(format!("`{name}` has an odd length {}", amounts.len())));
    }
    let pairs = amounts.len() / 2;
    if pairs == 0 {
        return e.op("Identity", &[&input]);
    }
    let rank = e.rank("self")? as usize;
    if pairs > rank {
        return Err(e.fail(format!("`{name}` pads {pairs} axes of a {rank}-D tensor")));
    }
    // ONNX order: every axis's begin, then every end; torch's pairs are the
    // last `pairs` axes, last first, and the leading axes are not padded.
    let amount = |axis: usize, end: usize| {
        let pair = rank - 1 - axis;
        if pair < pairs {
            amounts[2 * pair + end].clone()
        } else {
            SymInt::Constant(0)
        }
    };
    let ordered: Vec<SymInt> =
        (0..rank).map(|a| amount(a, 0)).chain((0..rank).map(|a| amount(a, 1))).collect();
    let value = match e.arg("value")? {
        _ if mode != "constant" => String::new(),
        None | Some(Argument::None) => e.scalar(0.0, compute)?,
        Some(_) => e.operand("value", compute)?,
    };
    let constants: Option<Vec<i64>> =
        ordered.iter().map(|s| if let SymInt::Constant(c) = s { Some(*c) } else { None }).collect();
    let padded = match constants {
        Some(pads) => {
            let mut y = x;
            if pads.iter().any(|&p| p > 0) {
                let grow = e.const_ints(&pads.iter().map(|&p| p.max(0)).collect::<Vec<_>>())?;
                y = e.op_with(
                    "Pad",
                    &[&y, &grow, &value],
                    &[attr("mode", Attribute::Str(mode.into()))],
                )?;
            }
            if pads.iter().any(|&p| p < 0) {
                let starts: Vec<i64> = pads[..rank].iter().map(|&p| -p.min(0)).collect();
                let ends: Vec<i64> =
                    pads[rank..].iter().map(|&p| if p < 0 { p } else { i64::MAX }).collect();
                y = e.op("Slice", &[&y, &e.const_ints(&starts)?, &e.const_ints(&ends)?])?;
            }
            y
        }
        None => {
            // Some amount is symbolic: its sign is only known at run time.
            let parts = ordered.iter().map(|s| e.size_1d(s)).collect::<Result<Vec<_>>>()?;
            let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
            let pads = e.op_with("Concat", &refs, &[attr("axis", Attribute::Int(0))])?;
            let zero = e.const_ints(&[0])?;
            let grow = e.op("Max", &[&pads, &zero])?;
            let y = e.op_with(
                "Pad",
                &[&x, &grow, &value],
                &[attr("mode", Attribute::Str(mode.into()))],
            )?;
            let crop = e.op("Min", &[&pads, &zero])?;
            let (begins, ends) = halves(e, &crop, rank as i64)?;
            let starts = e.op("Neg", &[&begins])?;
            // an end of 0 crops nothing: slice to the end of the axis
            let cropped = e.op("Less", &[&ends, &zero])?;
            let ends = e.op("Where", &[&cropped, &ends, &e.const_ints(&[i64::MAX])?])?;
            e.op("Slice", &[&y, &starts, &ends])?
        }
    };
    let y = e.cast(&padded, compute, &out)?;
    // nothing padded or cropped: the output still needs a node of its own
    if y == input {
        e.op("Identity", &[&y])
    } else {
        Ok(y)
    }
}

/// A list argument as sizes, constant or symbolic.
fn sym_ints(argument: Argument) -> Argument {
    match argument {
        Argument::Ints(v) => Argument::SymInts(v.into_iter().map(SymInt::Constant).collect()),
        Argument::SymInts(v) => Argument::SymInts(v),
        other => other,
    }
}

/// The two halves of a 1-D int64 value of `2 * n` elements.
fn halves(e: &Emit, value: &str, n: i64) -> Result<(String, String)> {
    let split = e.const_ints(&[n, n])?;
    let mut parts = e.op_n("Split", &[value, &split], 2, &[attr("axis", Attribute::Int(0))])?;
    let second = parts.pop().unwrap_or_default();
    let first = parts.pop().unwrap_or_default();
    Ok((first, second))
}
