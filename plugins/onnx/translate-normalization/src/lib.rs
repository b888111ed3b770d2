//! Normalization → ONNX: `layer_norm` as `LayerNormalization` (opset 17+).

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.layer_norm.default" => layer_norm,
}

fn layer_norm(e: &Emit) -> Result<String> {
    let x = e.tensor("input")?;
    let rank = e.rank("input")?;
    let normalized = e.ints("normalized_shape")?;
    let axis = rank - normalized.len() as i64;
    let eps = e.float("eps", 1e-5)?;
    let dtype = e.output_meta()?.dtype;
    let weight = match e.arg("weight")? {
        Some(Argument::Tensor(_)) => e.tensor("weight")?,
        _ => {
            let one = e.scalar(1.0, &dtype)?;
            let shape = e.const_ints(&normalized)?;
            e.op("Expand", &[&one, &shape])?
        }
    };
    let mut inputs = vec![x, weight];
    if let Some(Argument::Tensor(_)) = e.arg("bias")? {
        inputs.push(e.tensor("bias")?);
    }
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    e.op_with("LayerNormalization", &refs, &[attr("axis", Attribute::Int(axis)), attr("epsilon", Attribute::Float(eps as f32))])
}
