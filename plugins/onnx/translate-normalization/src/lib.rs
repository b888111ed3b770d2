//! Normalization → ONNX: layer norm as `LayerNormalization` (opset 17+),
//! batch norm as `BatchNormalization` (with the batch's statistics when
//! training), group norm from reductions over (N, group, -1), each with the
//! statistics torch returns beside the output.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.layer_norm.default" => |e| Ok::<_, Error>(layer_norm(e)?.remove(0)),
    "aten.native_layer_norm.default" => layer_norm,
    "aten._native_batch_norm_legit_no_training.default" => |e| batch_norm(e, false),
    "aten._native_batch_norm_legit.default" => |e| batch_norm(e, e.boolean("training", false)?),
    "aten._native_batch_norm_legit.no_stats" => batch_norm_no_stats,
    "aten.native_group_norm.default" => group_norm,
    // Not core, but what graphs hold when nothing decomposes them.
    "aten.batch_norm.default" => batch_norm_composite,
    "aten._native_batch_norm_legit_functional.default" => batch_norm_functional,
}

/// The dtype a normalization computes in: float16 and bfloat16 in float32,
/// as torch's kernels accumulate them (and ORT's CPU kernels lack bfloat16).
fn work_dtype(dtype: &str) -> &str {
    match dtype {
        "float16" | "bfloat16" => "float32",
        _ => dtype,
    }
}

/// Metadata of each of the node's outputs.
fn output_metas(e: &Emit) -> Result<Vec<TensorMeta>> {
    e.graph.output_values(e.node)?.into_iter().map(|v| e.meta_of(v)).collect()
}

/// `name` cast to `dtype` whatever ONNX type it has (an op's secondary output
/// whose type the runtime picks).
fn cast_to(e: &Emit, name: &str, dtype: &str) -> Result<String> {
    let to = onnx_dtype(dtype).ok_or_else(|| e.fail(format!("no ONNX type for {dtype}")))?;
    e.op_with("Cast", &[name], &[attr("to", Attribute::Int(to))])
}

/// Tensor argument `name` in `dtype`, or `value` broadcast to `shape` when it is absent.
fn tensor_or(e: &Emit, name: &str, dtype: &str, value: f64, shape: &str) -> Result<String> {
    match e.arg(name)? {
        Some(Argument::Tensor(_)) => e.operand(name, dtype),
        _ => e.op("Expand", &[&e.scalar(value, dtype)?, shape]),
    }
}

/// An empty 1-D tensor of `dtype` (torch's CPU kernels return those for
/// statistics they do not compute).
fn empty(e: &Emit, dtype: &str) -> Result<String> {
    // Made in float32 and cast: ORT's CPU Expand has no bfloat16 kernel.
    let zeros = e.op("Expand", &[&e.scalar(0.0, "float32")?, &e.const_ints(&[0])?])?;
    e.cast(&zeros, "float32", dtype)
}

/// `(native_)layer_norm(input, normalized_shape, weight, bias, eps)` →
/// (output, mean, rstd): `LayerNormalization` over the last
/// `len(normalized_shape)` axes, whose Mean and InvStdDev keep those axes as
/// 1, the shape torch gives them. The statistics are computed in float32 for
/// half inputs (`stash_type` 1) and cast to the dtype torch declares.
fn layer_norm(e: &Emit) -> Result<Vec<String>> {
    let metas = output_metas(e)?;
    let out = metas[0].dtype.clone();
    let work = if out == "bfloat16" { "float32" } else { out.as_str() };
    let x = e.operand("input", work)?;
    let rank = e.rank("input")?;
    let normalized = match e.arg("normalized_shape")? {
        Some(Argument::Ints(v)) => v.len(),
        Some(Argument::SymInts(v)) => v.len(),
        Some(Argument::Int(_)) => 1,
        other => return Err(e.fail(format!("normalized_shape {other:?}"))),
    } as i64;
    let axis = rank - normalized;
    let eps = e.float("eps", 1e-5)?;
    let trailing = e.op_with("Shape", &[&x], &[attr("start", Attribute::Int(axis))])?;
    let weight = tensor_or(e, "weight", work, 1.0, &trailing)?;
    let mut inputs = vec![x, weight];
    if let Some(Argument::Tensor(_)) = e.arg("bias")? {
        inputs.push(e.operand("bias", work)?);
    }
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let attributes =
        [attr("axis", Attribute::Int(axis)), attr("epsilon", Attribute::Float(eps as f32))];
    let [y, mean, rstd] = &e.op_n("LayerNormalization", &refs, 3, &attributes)?[..] else {
        return Err(e.fail("LayerNormalization did not give its 3 outputs"));
    };
    let mut names = vec![e.cast(y, work, &out)?];
    for (stat, meta) in [mean, rstd].into_iter().zip(metas.iter().skip(1)) {
        names.push(cast_to(e, stat, &meta.dtype)?);
    }
    Ok(names)
}

/// Batch norm → (output, save_mean, save_invstd). Without training:
/// `BatchNormalization` with the running statistics; torch's CPU kernel then
/// returns empty statistics (its metadata says so), CUDA's the running mean
/// and 1/sqrt(var + eps). Training: the batch's mean and biased variance over
/// every axis but 1, which are also the statistics returned. The running
/// statistics' in-place update (`_native_batch_norm_legit` in training) has
/// no ONNX value to go to: only the outputs are translated (torch.export's
/// functional graphs carry `_native_batch_norm_legit_functional` instead).
fn batch_norm(e: &Emit, training: bool) -> Result<Vec<String>> {
    let metas = output_metas(e)?;
    let norm = normalize_batch(e, !training)?;
    let mut names = vec![e.cast(&norm.output, norm.work, &metas[0].dtype)?];
    names.extend(norm.statistics(e, &metas[1..3])?);
    Ok(names)
}

/// `_native_batch_norm_legit.no_stats`: only training is defined (without
/// running statistics eager torch has nothing to normalize with).
fn batch_norm_no_stats(e: &Emit) -> Result<Vec<String>> {
    if !e.boolean("training", false)? {
        return Err(e.fail("_native_batch_norm_legit.no_stats with training=False has no statistics to normalize with"));
    }
    batch_norm(e, true)
}

/// `batch_norm` (what `nn.BatchNorm*` records; the worker's decomposition
/// leaves it whole when nothing else needs decomposing): the output only.
fn batch_norm_composite(e: &Emit) -> Result<String> {
    let training = e.boolean("training", false)?;
    if !training && !matches!(e.arg("running_mean")?, Some(Argument::Tensor(_))) {
        return Err(e.fail("batch_norm without training needs running statistics"));
    }
    let norm = normalize_batch(e, !training)?;
    e.cast(&norm.output, norm.work, &e.output_meta()?.dtype)
}

/// `_native_batch_norm_legit_functional` (batch norm in training as
/// torch.export records it): also the updated running statistics,
/// (1 - momentum)·running + momentum·batch, the variance unbiased (n / (n - 1)),
/// as torch's decomposition; without training the running ones unchanged.
fn batch_norm_functional(e: &Emit) -> Result<Vec<String>> {
    let metas = output_metas(e)?;
    let training = e.boolean("training", false)?;
    let norm = normalize_batch(e, !training)?;
    let work = norm.work;
    let mut names = vec![e.cast(&norm.output, work, &metas[0].dtype)?];
    names.extend(norm.statistics(e, &metas[1..3])?);
    let running_mean = e.operand("running_mean", work)?;
    let running_var = e.operand("running_var", work)?;
    let (new_mean, new_var) = if training {
        let momentum = e.float("momentum", 0.1)?;
        let blend = |running: &str, batch: &str| -> Result<String> {
            let kept = e.op("Mul", &[running, &e.scalar(1.0 - momentum, work)?])?;
            e.op("Add", &[&kept, &e.op("Mul", &[batch, &e.scalar(momentum, work)?])?])
        };
        let x = e.tensor("input")?;
        let count = e.op("Div", &[&e.op("Size", &[&x])?, &e.op("Squeeze", &[&norm.channels])?])?;
        let count = e.cast(&count, "int64", work)?;
        let ratio = e.op("Div", &[&count, &e.op("Sub", &[&count, &e.scalar(1.0, work)?])?])?;
        (
            blend(&running_mean, &norm.mean)?,
            blend(&running_var, &e.op("Mul", &[&norm.var, &ratio])?)?,
        )
    } else {
        (running_mean, running_var)
    };
    names.push(e.cast(&new_mean, work, &metas[3].dtype)?);
    names.push(e.cast(&new_var, work, &metas[4].dtype)?);
    Ok(names)
}

/// A batch normalization in `work` dtype: the output, the mean and variance
/// it used ([C]) and the channel count (1-D).
struct BatchNorm {
    output: String,
    mean: String,
    var: String,
    channels: String,
    eps: f64,
    work: &'static str,
}

impl BatchNorm {
    /// save_mean / save_invstd as `metas` declare them: empty (torch's CPU
    /// kernel without training), else the mean and 1/sqrt(var + eps).
    fn statistics(&self, e: &Emit, metas: &[TensorMeta]) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for (meta, mean) in metas.iter().zip([true, false]) {
            names.push(if meta.shape == [Dim::Fixed(0)] {
                empty(e, &meta.dtype)?
            } else if mean {
                e.cast(&self.mean, self.work, &meta.dtype)?
            } else {
                let std =
                    e.op("Sqrt", &[&e.op("Add", &[&self.var, &e.scalar(self.eps, self.work)?])?])?;
                e.cast(&e.op("Reciprocal", &[&std])?, self.work, &meta.dtype)?
            });
        }
        Ok(names)
    }
}

/// Batch norm with the running statistics (`running`) or the batch's.
fn normalize_batch(e: &Emit, running: bool) -> Result<BatchNorm> {
    let out = e.output_meta()?.dtype;
    let work = match out.as_str() {
        "float64" => "float64",
        _ => "float32",
    };
    let x = e.operand("input", work)?;
    let rank = e.rank("input")?;
    let eps = e.float("eps", 1e-5)?;
    let channels = e.op_with(
        "Shape",
        &[&x],
        &[attr("start", Attribute::Int(1)), attr("end", Attribute::Int(2))],
    )?;
    let weight = tensor_or(e, "weight", work, 1.0, &channels)?;
    let bias = tensor_or(e, "bias", work, 0.0, &channels)?;
    let (mean, var) = if running {
        (e.operand("running_mean", work)?, e.operand("running_var", work)?)
    } else {
        let axes: Vec<i64> = (0..rank).filter(|&a| a != 1).collect();
        let axes = e.const_ints(&axes)?;
        let mean = e.op_with("ReduceMean", &[&x, &axes], &[attr("keepdims", Attribute::Int(1))])?;
        let deviation = e.op("Sub", &[&x, &mean])?;
        let var = e.op_with(
            "ReduceMean",
            &[&e.op("Mul", &[&deviation, &deviation])?, &axes],
            &[attr("keepdims", Attribute::Int(0))],
        )?;
        (e.op("Reshape", &[&mean, &e.const_ints(&[-1])?])?, var)
    };
    let output = e.op_with(
        "BatchNormalization",
        &[&x, &weight, &bias, &mean, &var],
        &[attr("epsilon", Attribute::Float(eps as f32))],
    )?;
    Ok(BatchNorm { output, mean, var, channels, eps, work })
}

/// `native_group_norm(input, weight, bias, N, C, HxW, group, eps)` →
/// (output, mean [N, group], rstd [N, group]): the input as
/// [N, group, C/group·HxW] (explicit sizes where HxW is fixed, so an empty
/// batch reshapes too),
/// normalized over its last axis by `InstanceNormalization` (one node, unit
/// scale per group), reshaped back and scaled per channel. Not ONNX
/// `GroupNormalization`, whose scale is per group before opset 21. The
/// statistics torch also returns are computed beside it from reductions
/// (dead code, removed, when nothing reads them, as in inference).
fn group_norm(e: &Emit) -> Result<Vec<String>> {
    let metas = output_metas(e)?;
    let out = metas[0].dtype.clone();
    let work = work_dtype(&out);
    let x = e.operand("input", work)?;
    let rank = e.rank("input")?;
    let groups = e.int("group", 1)?;
    let eps = e.float("eps", 1e-5)?;
    let grouped = match e.arg("HxW")? {
        // A symbolic HxW is the model's arithmetic from the image's size to
        // this one's (each convolution's output size); `[batch, group, -1]`
        // reads it from the input instead, as the reference's graph does.
        // Its -1 is not defined for an empty batch, refused by ONNX Runtime
        // as by the reference's graph.
        Some(Argument::SymInt(SymInt::Value(_))) => {
            e.op("Reshape", &[&x, &e.const_ints(&[0, groups, -1])?])?
        }
        _ => {
            let n = e.int_1d("N", 0)?;
            let per_group = e.op("Div", &[&e.int_1d("C", 0)?, &e.const_ints(&[groups])?])?;
            let per_group = e.op("Mul", &[&per_group, &e.int_1d("HxW", 1)?])?;
            let grouped_shape = e.op_with(
                "Concat",
                &[&n, &e.const_ints(&[groups])?, &per_group],
                &[attr("axis", Attribute::Int(0))],
            )?;
            // allowzero: an empty batch's 0 is a size, not "copy this axis".
            e.op_with("Reshape", &[&x, &grouped_shape], &[attr("allowzero", Attribute::Int(1))])?
        }
    };
    let last = e.const_ints(&[2])?;
    let keep = [attr("keepdims", Attribute::Int(1))];
    let mean = e.op_with("ReduceMean", &[&grouped, &last], &keep)?;
    let deviation = e.op("Sub", &[&grouped, &mean])?;
    let var = e.op_with("ReduceMean", &[&e.op("Mul", &[&deviation, &deviation])?, &last], &keep)?;
    let rstd =
        e.op("Reciprocal", &[&e.op("Sqrt", &[&e.op("Add", &[&var, &e.scalar(eps, work)?])?])?])?;
    let per_group_constant = |value: f64| -> Result<String> {
        e.op("Expand", &[&e.scalar(value, work)?, &e.const_ints(&[groups])?])
    };
    let instance = [attr("epsilon", Attribute::Float(eps as f32))];
    let normalized = e.op_with(
        "InstanceNormalization",
        &[&grouped, &per_group_constant(1.0)?, &per_group_constant(0.0)?],
        &instance,
    )?;
    let normalized = e.op("Reshape", &[&normalized, &e.op("Shape", &[&x])?])?;
    // weight and bias [C] broadcast as [C, 1, ...] against [N, C, *].
    let per_channel = e.const_ints(
        &std::iter::once(-1)
            .chain(std::iter::repeat_n(1, (rank - 2).max(0) as usize))
            .collect::<Vec<_>>(),
    )?;
    let mut y = normalized;
    if let Some(Argument::Tensor(_)) = e.arg("weight")? {
        y = e.op("Mul", &[&y, &e.op("Reshape", &[&e.operand("weight", work)?, &per_channel])?])?;
    }
    if let Some(Argument::Tensor(_)) = e.arg("bias")? {
        y = e.op("Add", &[&y, &e.op("Reshape", &[&e.operand("bias", work)?, &per_channel])?])?;
    }
    let squeeze = |stat: &str, dtype: &str| -> Result<String> {
        e.cast(&e.op("Squeeze", &[stat, &last])?, work, dtype)
    };
    Ok(vec![
        e.cast(&y, work, &out)?,
        squeeze(&mean, &metas[1].dtype)?,
        squeeze(&rstd, &metas[2].dtype)?,
    ])
}
