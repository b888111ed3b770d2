//! `scaled_dot_product_attention` → ONNX, as the math backend computes it:
//! softmax(q·kᵀ·scale + mask)·v, with a boolean mask as -inf where false, a
//! causal mask from `Trilu`, and grouped-query heads repeated when
//! `enable_gqa` is set.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.scaled_dot_product_attention.default" => attention,
}

fn attention(e: &Emit) -> Result<String> {
    let dtype = e.output_meta()?.dtype;
    let q = e.tensor("query")?;
    let mut k = e.tensor("key")?;
    let mut v = e.tensor("value")?;
    let q_meta = e.input_meta("query")?;
    let rank = q_meta.shape.len() as i64;
    if e.float("dropout_p", 0.0)? != 0.0 {
        return Err(e.fail("dropout in attention is not exported (eval only)"));
    }
    if e.boolean("enable_gqa", false)? {
        let (Some(Dim::Fixed(hq)), Some(Dim::Fixed(hk))) = (
            q_meta.shape.get(rank as usize - 3),
            e.input_meta("key")?.shape.get(rank as usize - 3).cloned(),
        ) else {
            return Err(e.fail("enable_gqa with symbolic head counts is not translated"));
        };
        // repeat_interleave of the kv heads: (B, Hk, S, E) -> (B, Hk, r, S, E) -> (B, Hq, S, E).
        let repeat = hq / hk;
        let axis = e.const_ints(&[rank - 2])?;
        let reps = |x: &str| -> Result<String> {
            let unsqueezed = e.op("Unsqueeze", &[x, &axis])?;
            let mut r = vec![1i64; rank as usize + 1];
            r[rank as usize - 2] = repeat;
            let times = e.const_ints(&r)?;
            let tiled = e.op("Tile", &[&unsqueezed, &times])?;
            let shape = e.op("Shape", &[x])?;
            let lead =
                e.op("Slice", &[&shape, &e.const_ints(&[0])?, &e.const_ints(&[rank - 3])?])?;
            let heads = e.const_ints(&[*hq])?;
            let tail =
                e.op("Slice", &[&shape, &e.const_ints(&[rank - 2])?, &e.const_ints(&[rank])?])?;
            let target =
                e.op_with("Concat", &[&lead, &heads, &tail], &[attr("axis", Attribute::Int(0))])?;
            e.op("Reshape", &[&tiled, &target])
        };
        k = reps(&k)?;
        v = reps(&v)?;
    }
    let scale = match e.arg("scale")? {
        Some(Argument::Float(s)) => s,
        _ => match q_meta.shape.last() {
            Some(Dim::Fixed(d)) => 1.0 / (*d as f64).sqrt(),
            _ => return Err(e.fail("default scale with a symbolic head size is not translated")),
        },
    };
    let mut perm: Vec<i64> = (0..rank).collect();
    perm.swap(rank as usize - 1, rank as usize - 2);
    let kt = e.op_with("Transpose", &[&k], &[attr("perm", Attribute::Ints(perm))])?;
    let scores = e.op("MatMul", &[&q, &kt])?;
    let factor = e.scalar(scale, &dtype)?;
    let mut scores = e.op("Mul", &[&scores, &factor])?;
    if e.boolean("is_causal", false)? {
        let shape = e.op_with("Shape", &[&scores], &[attr("start", Attribute::Int(-2))])?;
        let one = e.scalar(1.0, "bool")?;
        let ones = e.op("Expand", &[&one, &shape])?;
        let ones = e.op_with("Cast", &[&ones], &[attr("to", Attribute::Int(7))])?;
        let lower = e.op_with("Trilu", &[&ones], &[attr("upper", Attribute::Int(0))])?;
        let keep = e.op_with("Cast", &[&lower], &[attr("to", Attribute::Int(9))])?;
        let blocked = e.scalar(f64::NEG_INFINITY, &dtype)?;
        scores = e.op("Where", &[&keep, &scores, &blocked])?;
    }
    match e.arg("attn_mask")? {
        Some(Argument::Tensor(mask)) => {
            let mask_meta = e.meta_of(mask)?;
            let m = e.builder.value_name(mask)?;
            scores = if mask_meta.dtype == "bool" {
                let blocked = e.scalar(f64::NEG_INFINITY, &dtype)?;
                e.op("Where", &[&m, &scores, &blocked])?
            } else {
                let m = e.cast(&m, &mask_meta.dtype, &dtype)?;
                e.op("Add", &[&scores, &m])?
            };
        }
        None | Some(Argument::None) => {}
        Some(other) => return Err(e.fail(format!("attn_mask {other:?}"))),
    }
    let weights = e.op_with("Softmax", &[&scores], &[attr("axis", Attribute::Int(-1))])?;
    e.op("MatMul", &[&weights, &v])
}
