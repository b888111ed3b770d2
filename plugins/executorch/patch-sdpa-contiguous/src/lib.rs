//! SDPA's output cloned to contiguous. The output of
//! `scaled_dot_product_attention` is laid out as its kernel likes (the math
//! path's is permuted); at trace time the reshape after it (`[B, H, S, D]` →
//! transpose → `[B, S, H*D]`) sees a contiguous tensor and stays a view, but
//! ExecuTorch's edge lowering re-derives layouts through its decompositions
//! and then refuses that view (GPT-2: "Cannot view a tensor with shape ...
//! and strides ..."). The reference's `_patch_scaled_dot_product_attention`
//! clones the output with `contiguous_format`; a plain `.contiguous()` would
//! be dropped by functionalization, a clone survives.
//!
//! Attention over a data-dependent batch (a VLM's vision tower attends over
//! the images `pixel_values[mask]` keeps: batch `u0`) is computed eagerly
//! instead, as the reference's fallback does: `matmul`, mask, softmax,
//! `matmul`. SDPA's decomposition lays its result out as `[S, B, H, D]`
//! before permuting it back, and ExecuTorch's memory planning, ordering that
//! buffer's strides (`32*u0` against `32`), raises
//! `GuardOnDataDependentSymNode` in `to_executorch`: the XNNPACK program
//! cannot be lowered (hfx's portable emitter copes, and runs the eager form
//! as well). The reference decides on the mask's batch; here the query's is
//! asked too, since the failure comes from the query's batch and happens
//! with no mask at all. The softmax is `_safe_softmax`, SDPA's own: a row
//! masked at every key comes out as zeros, as eager gives it, where a plain
//! softmax (the reference's) gives NaN. With dropout, or a head size that is
//! not fixed, the call keeps SDPA.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.nn.functional.scaled_dot_product_attention"])]
fn patch_sdpa_contiguous(call: PatchedCall) -> Result<Program> {
    if let Some(eager) = eager_attention_over_a_data_dependent_batch(&call) {
        return Ok(eager);
    }
    let mut p = ProgramBuilder::new(&call);
    let out = p.original(&call.args, &call.kwarg_slots());
    let format = p.lookup("torch.contiguous_format");
    let copy = p.call_kw("torch.Tensor.clone", &[out], &[("memory_format", format)]);
    Ok(p.finish(copy))
}

/// `softmax(query @ keyᵀ * scale + mask) @ value`, when the query's or the
/// mask's batch is data-dependent; `None` to keep SDPA.
fn eager_attention_over_a_data_dependent_batch(call: &PatchedCall) -> Option<Program> {
    let (query, key, value) =
        (call.param(0, "query")?, call.param(1, "key")?, call.param(2, "value")?);
    let mask = call.param(3, "attn_mask").filter(|&m| !call.is_none(Some(m)));
    let mask_tensor = match mask {
        Some(m) => Some(call.tensor(m)?),
        None => None,
    };
    let (query_tensor, key_tensor) = (call.tensor(query)?, call.tensor(key)?);
    let data_dependent = |t: &LiveTensor| t.meta.shape.first().is_some_and(is_data_dependent);
    if !data_dependent(query_tensor) && !mask_tensor.is_some_and(data_dependent) {
        return None;
    }
    let dropout = call.param(4, "dropout_p").map_or(Some(0.0), |s| call.float(s))?;
    let causal = call.param(5, "is_causal").map_or(Some(false), |s| call.boolean(s))?;
    if dropout != 0.0 || (causal && mask.is_some()) {
        return None;
    }
    let scale = match call.param(6, "scale").filter(|&s| !call.is_none(Some(s))) {
        Some(s) => call.float(s)?,
        None => (query_tensor.fixed_dim(-1)? as f64).sqrt().recip(),
    };

    let mut p = ProgramBuilder::new(call);
    let (mut key, mut value) = (key, value);
    // Grouped-query attention: each key/value head serves `query heads / key heads` query heads.
    if query_tensor.rank() >= 3 {
        if let (Some(query_heads), Some(key_heads)) =
            (query_tensor.fixed_dim(-3), key_tensor.fixed_dim(-3))
        {
            if query_heads != key_heads && key_heads > 0 && query_heads % key_heads == 0 {
                let (repeats, heads_axis) = (p.int(query_heads / key_heads), p.int(-3));
                key = p.call("torch.repeat_interleave", &[key, repeats, heads_axis]);
                value = p.call("torch.repeat_interleave", &[value, repeats, heads_axis]);
            }
        }
    }
    let (rows_axis, columns_axis) = (p.int(-2), p.int(-1));
    let key_transposed = p.call("torch.transpose", &[key, rows_axis, columns_axis]);
    let scores = p.call("torch.matmul", &[query, key_transposed]);
    let scale = p.float(scale);
    let mut scores = p.call("torch.mul", &[scores, scale]);
    // `-math.inf`: a constant step carries finite floats only.
    let infinity = p.lookup("math.inf");
    let minus_infinity = p.call("operator.neg", &[infinity]);
    if causal {
        let query_length = p.size(query, -2);
        let key_length = p.size(key, -2);
        let boolean = p.dtype("bool");
        let ones = p.call_kw("torch.ones", &[query_length, key_length], &[("dtype", boolean)]);
        let attended = p.call("torch.tril", &[ones]);
        let blocked = p.call("torch.logical_not", &[attended]);
        scores = p.call("torch.masked_fill", &[scores, blocked, minus_infinity]);
    }
    if let (Some(mask), Some(mask_tensor)) = (mask, mask_tensor) {
        scores = if mask_tensor.meta.dtype == "bool" {
            let blocked = p.call("torch.logical_not", &[mask]);
            p.call("torch.masked_fill", &[scores, blocked, minus_infinity])
        } else {
            p.call("torch.add", &[scores, mask])
        };
    }
    let weights = p.call("aten._safe_softmax.default", &[scores, columns_axis]);
    let out = p.call("torch.matmul", &[weights, value]);
    Some(p.finish(out))
}

/// A size torch cannot know before running: its expression names an
/// unbacked symbol (`u0`, torch's name for a size read from data).
fn is_data_dependent(dim: &Dim) -> bool {
    let Dim::Symbolic(expr) = dim else { return false };
    expr.split(|c: char| !c.is_ascii_alphanumeric() && c != '_').any(|symbol| {
        symbol
            .strip_prefix('u')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}
