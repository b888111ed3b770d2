//! `nn.RMSNorm` without elementwise affine, unfused: x * rsqrt(mean(x²) + eps)
//! over the normalized dims, computed in float32. The fused op has no
//! lowering without a weight. With a weight the original stays.

use hfx_sdk::prelude::*;

/// `torch.finfo(dtype).eps`: what RMSNorm uses when its `eps` is None.
fn machine_epsilon(dtype: &str) -> f64 {
    match dtype {
        "float16" => 0.0009765625,
        "bfloat16" => 0.0078125,
        "float64" => f64::EPSILON,
        _ => f32::EPSILON as f64,
    }
}

#[hfx_sdk::patch(targets = ["torch.nn.RMSNorm.forward"])]
fn patch_rms_norm_no_affine(call: PatchedCall) -> Result<Program> {
    let (Some(module), Some(x)) =
        (call.param(0, "self"), call.param(1, "x").or_else(|| call.param(1, "input")))
    else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    let affine = call.attribute(module, "elementwise_affine");
    let Some(tensor) = call.tensor(x) else { return Ok(ProgramBuilder::passthrough(&call)) };
    if affine != Some(&Scalar::Boolean(false)) {
        return Ok(ProgramBuilder::passthrough(&call));
    }
    let eps = match call.attribute(module, "eps") {
        Some(Scalar::Float(e)) => *e,
        Some(Scalar::Int(e)) => *e as f64,
        _ => machine_epsilon(&tensor.meta.dtype),
    };
    let mut p = ProgramBuilder::new(&call);
    // The normalized dims are the last len(normalized_shape): (-n, ..., -1).
    let shape = p.getattr(module, "normalized_shape");
    let count = p.call("builtins.len", &[shape]);
    let first = p.call("operator.neg", &[count]);
    let zero = p.int(0);
    let dims = p.call("builtins.range", &[first, zero]);
    let dims = p.call("builtins.tuple", &[dims]);
    let float32 = p.dtype("float32");
    let wide = p.call("torch.Tensor.to", &[x, float32]);
    let two = p.int(2);
    let squares = p.call("torch.pow", &[wide, two]);
    let yes = p.boolean(true);
    let mean = p.call_kw("torch.mean", &[squares, dims], &[("keepdim", yes)]);
    let eps = p.float(eps);
    let variance = p.call("torch.add", &[mean, eps]);
    let scale = p.call("torch.rsqrt", &[variance]);
    let normed = p.call("torch.mul", &[x, scale]);
    let dtype = p.dtype(&tensor.meta.dtype);
    let out = p.call("torch.Tensor.to", &[normed, dtype]);
    Ok(p.finish(out))
}
