//! The ops PT2E quantization (torchao's `convert_pt2e`) leaves in a program,
//! `quantized_decomposed.*`, as ONNX's QDQ pair:
//!
//! - `quantize_per_tensor`: `clamp(round(x / scale) + zero_point, quant_min,
//!   quant_max)` as `QuantizeLinear`, which saturates to the dtype's range,
//!   and a `Clip` when `quant_min`/`quant_max` are narrower (symmetric int8's
//!   -127);
//! - `dequantize_per_tensor`: `(x - zero_point) * scale` as `DequantizeLinear`;
//! - `dequantize_per_channel`: the same along `axis`, its scales and zero
//!   points tensors (the zero points in the input's integer dtype, as
//!   `DequantizeLinear` requires). Where the scales are not float32, the
//!   result is cast to the node's output dtype.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "quantized_decomposed.quantize_per_tensor.default" => quantize_per_tensor,
    "quantized_decomposed.dequantize_per_tensor.default" => dequantize_per_tensor,
    "quantized_decomposed.dequantize_per_channel.default" => dequantize_per_channel,
}

fn quantize_per_tensor(e: &Emit) -> Result<String> {
    let dtype = e.output_meta()?.dtype;
    let input = e.input_meta("input")?.dtype;
    let x = e.cast(&e.tensor("input")?, &input, "float32")?;
    let scale = e.scalar(e.float("scale", 1.0)?, "float32")?;
    let zero_point = e.scalar(e.int("zero_point", 0)? as f64, &dtype)?;
    let quantized = e.op("QuantizeLinear", &[&x, &scale, &zero_point])?;
    let (low, high) = (e.int("quant_min", 0)?, e.int("quant_max", 0)?);
    let Some((min, max)) = int_limits(&dtype) else {
        return Err(e.fail(format!("quantize to {dtype}: not an integer dtype")));
    };
    if (low, high) == (min, max) {
        return Ok(quantized);
    }
    let (low, high) = (e.scalar(low as f64, &dtype)?, e.scalar(high as f64, &dtype)?);
    e.op("Clip", &[&quantized, &low, &high])
}

fn dequantize_per_tensor(e: &Emit) -> Result<String> {
    let input = e.input_meta("input")?.dtype;
    let scale = e.scalar(e.float("scale", 1.0)?, "float32")?;
    let zero_point = e.scalar(e.int("zero_point", 0)? as f64, &input)?;
    let x = e.tensor("input")?;
    let values = e.op("DequantizeLinear", &[&x, &scale, &zero_point])?;
    e.cast(&values, "float32", &e.output_meta()?.dtype)
}

fn dequantize_per_channel(e: &Emit) -> Result<String> {
    let input = e.input_meta("input")?.dtype;
    let scales_dtype = e.input_meta("scales")?.dtype;
    let scales = e.cast(&e.tensor("scales")?, &scales_dtype, "float32")?;
    let zero_points = match e.arg("zero_points")? {
        Some(Argument::Tensor(_)) => e.operand("zero_points", &input)?,
        _ => e.scalar(0.0, &input)?,
    };
    // `DequantizeLinear`'s per-axis zero point is a tensor like its scales.
    let zero_points = if matches!(e.arg("zero_points")?, Some(Argument::Tensor(_))) {
        zero_points
    } else {
        e.op("Expand", &[&zero_points, &e.op("Shape", &[&scales])?])?
    };
    let axis = attr("axis", Attribute::Int(e.int("axis", 0)?));
    let x = e.tensor("input")?;
    let values = e.op_with("DequantizeLinear", &[&x, &scales, &zero_points], &[axis])?;
    e.cast(&values, "float32", &e.output_meta()?.dtype)
}
