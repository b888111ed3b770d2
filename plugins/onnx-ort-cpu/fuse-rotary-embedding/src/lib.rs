//! Rotary position embedding as ONNX Runtime's `com.microsoft::RotaryEmbedding`.
//! The pattern, as traced from `q * cos + rotate_half(q) * sin` (full
//! rotation, halves layout) on `x` of shape `[batch, heads, length, head_dim]`:
//!
//! ```text
//! f: [1, length, head_dim/2]  →  Concat(f, f) → Cos → (Unsqueeze axis 1) → cos
//!                                            → Sin → (Unsqueeze axis 1) → sin
//! Add(Mul(x, cos), Mul(Concat(Neg(Slice(x, half:)), Slice(x, :half)), sin))
//! ```
//!
//! becomes `RotaryEmbedding(x, [0], Cos(f₀), Sin(f₀))` with `f₀` = `f`
//! without its batch axis: row `s` of the caches is what the graph computed
//! for token `s`, and position ids of shape `[1]` (value 0) make ONNX Runtime
//! read row `s` for token `s`, whatever positions `f` was computed from.
//! When `f` is per row, `Mul(Cast(Unsqueeze(position_ids, 2)), inv_freq)`
//! (a generation component's), the rotation takes `position_ids` and caches
//! of rows `0..=max(position_ids)` computed in the graph from `inv_freq`.
//! `x` may also be `[batch, length, heads, head_dim]` (rotated before its
//! heads move second, as Gemma 4 does), `cos` and `sin` unsqueezed at axis
//! 2: ONNX Runtime takes that layout only with the heads merged
//! (`[batch, length, heads·head_dim]`, `num_heads` set), so the rotation is
//! done on `Reshape(x, [0, 0, -1])` and split back. Frequencies that are
//! zero past the rotated part (Gemma 4's "proportional" partial rotation,
//! `inv_freq` `[f₀ … f_k, 0 … 0]`) are a full rotation to ONNX Runtime too:
//! their rows of the caches are cos 1 and sin 0, which keep those dims.
//! Targets `Neg`, rotate-half's; the caches are shared by every rotation of
//! the same frequencies. A float16 model's `cos` and `sin`, computed in
//! float32 and cast, give caches cast the same way.

use hfx_sdk::prelude::*;

const INT64: i32 = 7;
/// float16 and bfloat16: the types a model computes its rotation caches in
/// float32 for, then casts them to.
const FLOAT16S: [i64; 2] = [10, 16];

/// Where a rotation's positions come from.
enum Positions {
    /// `f` is `[1, length, head_dim/2]`: token `s` is row `s` of caches made of `f`.
    Rows(String),
    /// `f` is computed from `ids` (`[batch, length]`) and `inv_freq`.
    Ids { ids: String, inv_freq: String },
}

#[hfx_sdk::onnx_ir_fix(targets = ["Neg"])]
fn fuse_rotary_embedding(model: &Model, neg: OnnxNodeId) -> Result<bool> {
    let Some(m) = match_rotation(model, neg)? else { return Ok(false) };
    model.import_opset("com.microsoft", 1)?;
    let (positions, cos_cache, sin_cache) = match &m.positions {
        Positions::Rows(f) => {
            let (cos, sin) = caches(model, f)?;
            let zero = int64(vec![1], 0);
            (model.add_initializer("rotary_position_start", &zero)?, cos, sin)
        }
        Positions::Ids { ids, inv_freq } => {
            let (cos, sin) = caches_to_max(model, ids, inv_freq)?;
            (ids.clone(), cos, sin)
        }
    };
    let (cos_cache, sin_cache) = match m.cast_to {
        Some(to) => (cast_cache(model, &cos_cache, to)?, cast_cache(model, &sin_cache, to)?),
        None => (cos_cache, sin_cache),
    };
    let interleaved = NamedAttribute { name: "interleaved".into(), value: Attribute::Int(0) };
    let rotated = match m.heads_third {
        None => {
            let (_, mut outputs) = model.add_node(
                "RotaryEmbedding",
                "com.microsoft",
                &[m.x.clone(), positions, cos_cache, sin_cache],
                &[format!("{}_rotated", m.output)],
                &[interleaved],
            )?;
            outputs.remove(0)
        }
        // ONNX Runtime takes `[batch, heads, length, head_dim]` or
        // `[batch, length, heads·head_dim]`: the heads are merged and split again.
        Some((heads, head_dim)) => {
            let merge = model.add_initializer("rotary_merge_heads", &ints(vec![0, 0, -1]))?;
            let split = ints(vec![0, 0, heads, head_dim]);
            let split =
                model.add_initializer(&format!("rotary_split_{heads}_{head_dim}"), &split)?;
            let (_, merged) = model.add_node(
                "Reshape",
                "",
                &[m.x.clone(), merge],
                &[format!("{}_merged", m.x)],
                &[],
            )?;
            let num_heads =
                NamedAttribute { name: "num_heads".into(), value: Attribute::Int(heads) };
            let (_, rotated) = model.add_node(
                "RotaryEmbedding",
                "com.microsoft",
                &[merged[0].clone(), positions, cos_cache, sin_cache],
                &[format!("{}_rotated_merged", m.output)],
                &[interleaved, num_heads],
            )?;
            let (_, mut outputs) = model.add_node(
                "Reshape",
                "",
                &[rotated[0].clone(), split],
                &[format!("{}_rotated", m.output)],
                &[],
            )?;
            outputs.remove(0)
        }
    };
    model.replace_uses(&m.output, &rotated)?;
    for node in &m.nodes {
        model.remove_node(*node)?;
    }
    Ok(true)
}

struct Rotation {
    x: String,
    positions: Positions,
    /// The type the graph cast `cos` and `sin` to (x's, a float16 model's),
    /// when it computed them in float32 and cast them.
    cast_to: Option<i64>,
    output: String,
    /// `(heads, head_dim)` when `x` is `[batch, length, heads, head_dim]`
    /// (rotated before its heads are moved second, as Gemma 4 does).
    heads_third: Option<(i64, i64)>,
    /// The pattern's nodes only it reads (removed once fused).
    nodes: Vec<OnnxNodeId>,
}

fn match_rotation(model: &Model, neg: OnnxNodeId) -> Result<Option<Rotation>> {
    // Neg(Slice(x, half:)) → Concat([neg, Slice(x, :half)], -1)
    let Some(upper) = model.only_input_producer(neg, "Slice")? else { return Ok(None) };
    let x = model.inputs(upper)?[0].clone();
    let Some(half) = head_half(model, &x) else { return Ok(None) };
    if slice_range(model, upper)? != Some((half, i64::MAX)) {
        return Ok(None);
    }
    let Some(concat) = model.only_reader(neg, "Concat")? else { return Ok(None) };
    let concat_inputs = model.inputs(concat)?;
    let [first, lower_out] = concat_inputs.as_slice() else { return Ok(None) };
    if *first != model.first_output(neg)? || !last_axis(model, concat)? {
        return Ok(None);
    }
    let Some(lower) = model.producer(lower_out) else { return Ok(None) };
    if model.op_type(lower)? != "Slice"
        || model.inputs(lower)?[0] != x
        || slice_range(model, lower)? != Some((0, half))
        || model.consumers(lower_out) != [concat]
    {
        return Ok(None);
    }
    // Mul(rotated, sin) + Mul(x, cos)
    let Some(mul_sin) = model.only_reader(concat, "Mul")? else { return Ok(None) };
    let Some(sin) = model.other_input(mul_sin, &model.first_output(concat)?)? else {
        return Ok(None);
    };
    let Some(add) = model.only_reader(mul_sin, "Add")? else { return Ok(None) };
    let Some(mul_cos_out) = model.other_input(add, &model.first_output(mul_sin)?)? else {
        return Ok(None);
    };
    let Some(mul_cos) = model.producer(&mul_cos_out) else { return Ok(None) };
    if model.op_type(mul_cos)? != "Mul" || model.consumers(&mul_cos_out) != [add] {
        return Ok(None);
    }
    let Some(cos) = model.other_input(mul_cos, &x)? else { return Ok(None) };
    // cos = Cos(Concat(f, f)) and sin = Sin of the same, each perhaps
    // unsqueezed at the heads' axis: 1, or 2 for `x` `[batch, length, heads, head_dim]`.
    let (Some((cos_of, cast_to, heads_axis)), Some(sin_of)) =
        (trig_of(model, &cos, "Cos")?, trig_of(model, &sin, "Sin")?)
    else {
        return Ok(None);
    };
    if (cos_of.clone(), cast_to, heads_axis) != sin_of {
        return Ok(None);
    }
    let heads_third = match heads_axis {
        1 => None,
        _ => match model.value_type(&x).and_then(|t| t.shape).as_deref() {
            Some([_, _, OnnxDim::Fixed(heads), OnnxDim::Fixed(d)]) => Some((*heads, *d)),
            _ => return Ok(None),
        },
    };
    let Some(doubled) = model.producer(&cos_of) else { return Ok(None) };
    let doubled_inputs = model.inputs(doubled)?;
    let [f, f2] = doubled_inputs.as_slice() else { return Ok(None) };
    if model.op_type(doubled)? != "Concat" || f != f2 || !last_axis(model, doubled)? {
        return Ok(None);
    }
    let shape = model.value_type(f).and_then(|t| t.shape);
    let positions = match shape.as_deref() {
        Some([OnnxDim::Fixed(1), _, OnnxDim::Fixed(h)]) if *h == half => Positions::Rows(f.clone()),
        Some([_, _, OnnxDim::Fixed(h)]) if *h == half => match per_row(model, f, half)? {
            Some(p) => p,
            None => return Ok(None),
        },
        _ => return Ok(None),
    };
    let output = model.first_output(add)?;
    Ok(Some(Rotation {
        x,
        positions,
        cast_to,
        output,
        heads_third,
        nodes: vec![upper, neg, lower, concat, mul_sin, mul_cos, add],
    }))
}

/// `Positions::Ids` for `f` = `Mul(Cast(Unsqueeze(ids, [2])), inv_freq)`
/// (either side), `ids` `[batch, length]` int64, `inv_freq` float `[half]`.
fn per_row(model: &Model, f: &str, half: i64) -> Result<Option<Positions>> {
    let Some(mul) = model.producer(f) else { return Ok(None) };
    if model.op_type(mul)? != "Mul" || !model.is_default_domain(mul)? {
        return Ok(None);
    }
    let inputs = model.inputs(mul)?;
    let [a, b] = inputs.as_slice() else { return Ok(None) };
    // Any float `[half]` tensor: the caches are computed from it in the graph.
    let is_inv = |v: &str| {
        model.value_type(v).is_some_and(|t| {
            t.elem_type == 1 && t.shape.as_deref() == Some(&[OnnxDim::Fixed(half)][..])
        })
    };
    let (cast_out, inv_freq) = match (is_inv(a), is_inv(b)) {
        (false, true) => (a, b),
        (true, false) => (b, a),
        _ => return Ok(None),
    };
    let Some(cast) = model.producer(cast_out) else { return Ok(None) };
    if model.op_type(cast)? != "Cast" || model.attribute(cast, "to")? != Some(Attribute::Int(1)) {
        return Ok(None);
    }
    let Some(unsqueezed) = model.inputs(cast)?.into_iter().next() else { return Ok(None) };
    let Some(unsqueeze) = model.producer(&unsqueezed) else { return Ok(None) };
    let unsqueeze_inputs = model.inputs(unsqueeze)?;
    if model.op_type(unsqueeze)? != "Unsqueeze"
        || unsqueeze_inputs.get(1).and_then(|a| model.ints(a)) != Some(vec![2])
    {
        return Ok(None);
    }
    let ids = unsqueeze_inputs[0].clone();
    let ids_type = model.value_type(&ids);
    let rank = ids_type.as_ref().and_then(|t| t.shape.as_ref()).map(|s| s.len());
    if ids_type.map(|t| t.elem_type) != Some(INT64) || rank != Some(2) {
        return Ok(None);
    }
    Ok(Some(Positions::Ids { ids, inv_freq: inv_freq.clone() }))
}

fn int64(dims: Vec<i64>, value: i64) -> Constant {
    Constant { elem_type: INT64, dims, data: ConstantData::Ints(vec![value]) }
}

fn ints(values: Vec<i64>) -> Constant {
    Constant { elem_type: INT64, dims: vec![values.len() as i64], data: ConstantData::Ints(values) }
}

/// Caches of rows `0..=max(ids)`, `Cos`/`Sin` of `Range · inv_freq`,
/// computed in the graph once per `ids` and `inv_freq` (found by name when
/// an earlier rotation added them).
fn caches_to_max(model: &Model, ids: &str, inv_freq: &str) -> Result<(String, String)> {
    let (cos_name, sin_name) =
        (format!("{ids}_{inv_freq}_rotary_cos"), format!("{ids}_{inv_freq}_rotary_sin"));
    let existing = |name: &str, op: &str| -> Result<bool> {
        Ok(match model.producer(name) {
            Some(node) => model.op_type(node)? == op,
            None => false,
        })
    };
    if existing(&cos_name, "Cos")? && existing(&sin_name, "Sin")? {
        return Ok((cos_name, sin_name));
    }
    let one = model.add_initializer("rotary_one", &int64(vec![], 1))?;
    let zero = model.add_initializer("rotary_zero", &int64(vec![], 0))?;
    let axis = model.add_initializer("rotary_row_axis", &int64(vec![1], 1))?;
    let keep = NamedAttribute { name: "keepdims".into(), value: Attribute::Int(0) };
    let node = |op: &str, inputs: &[String], hint: &str, attributes: &[NamedAttribute]| {
        model
            .add_node(op, "", inputs, &[format!("{ids}_rotary_{hint}")], attributes)
            .map(|(_, mut out)| out.remove(0))
    };
    let max = node("ReduceMax", &[ids.to_string()], "max", &[keep])?;
    let rows = node("Add", &[max, one.clone()], "rows", &[])?;
    let range = node("Range", &[zero, rows, one], "range", &[])?;
    let to_float = NamedAttribute { name: "to".into(), value: Attribute::Int(1) };
    let float = node("Cast", &[range], "float", &[to_float])?;
    let column = node("Unsqueeze", &[float, axis], "column", &[])?;
    let freqs = node("Mul", &[column, inv_freq.to_string()], "freqs", &[])?;
    let add = |op: &str, name: &str| {
        model
            .add_node(op, "", &[freqs.clone()], &[name.to_string()], &[])
            .map(|(_, mut o)| o.remove(0))
    };
    Ok((add("Cos", &cos_name)?, add("Sin", &sin_name)?))
}

/// `Cos(Squeeze(f, [0]))` and `Sin` of it, found among `f`'s readers or added.
fn caches(model: &Model, f: &str) -> Result<(String, String)> {
    let squeezed = match find_reader(model, f, "Squeeze", |m, n| {
        Ok(m.inputs(n)?.get(1).and_then(|a| m.ints(a)) == Some(vec![0]))
    })? {
        Some(s) => s,
        None => {
            let axes =
                Constant { elem_type: INT64, dims: vec![1], data: ConstantData::Ints(vec![0]) };
            let axes = model.add_initializer("rotary_batch_axis", &axes)?;
            let hint = format!("{f}_squeezed");
            model.add_node("Squeeze", "", &[f.to_string(), axes], &[hint], &[])?.1.remove(0)
        }
    };
    let trig = |op: &str| -> Result<String> {
        Ok(match find_reader(model, &squeezed, op, |_, _| Ok(true))? {
            Some(existing) => existing,
            None => {
                let hint = format!("{f}_{}_cache", op.to_ascii_lowercase());
                model.add_node(op, "", &[squeezed.clone()], &[hint], &[])?.1.remove(0)
            }
        })
    };
    Ok((trig("Cos")?, trig("Sin")?))
}

/// The output of a reader of `value` that is an `op` and passes `check`.
fn find_reader(
    model: &Model,
    value: &str,
    op: &str,
    check: impl Fn(&Model, OnnxNodeId) -> Result<bool>,
) -> Result<Option<String>> {
    for reader in model.consumers(value) {
        if model.op_type(reader)? == op && model.is_default_domain(reader)? && check(model, reader)?
        {
            return Ok(Some(model.first_output(reader)?));
        }
    }
    Ok(None)
}

/// The value `op` (`Cos`, `Sin`) was applied to, for `value` = `op(v)`,
/// perhaps cast (a float16 model computes them in float32), perhaps then
/// `Unsqueeze(·, [1])` or `Unsqueeze(·, [2])`; the type cast to; and the
/// axis the heads broadcast over (1 when not unsqueezed: `v` `[·, length, ·]`).
type Trig = (String, Option<i64>, i64);
fn trig_of(model: &Model, value: &str, op: &str) -> Result<Option<Trig>> {
    let Some(mut node) = model.producer(value) else { return Ok(None) };
    let mut heads_axis = 1;
    if model.op_type(node)? == "Unsqueeze" {
        let inputs = model.inputs(node)?;
        heads_axis = match inputs.get(1).and_then(|a| model.ints(a)).as_deref() {
            Some([axis @ (1 | 2)]) => *axis,
            _ => return Ok(None),
        };
        let Some(inner) = model.producer(&inputs[0]) else { return Ok(None) };
        node = inner;
    }
    let mut cast_to = None;
    if model.op_type(node)? == "Cast" && model.is_default_domain(node)? {
        let Some(Attribute::Int(to)) = model.attribute(node, "to")? else { return Ok(None) };
        if !FLOAT16S.contains(&to) {
            return Ok(None);
        }
        let Some(inner) = model.producer(&model.inputs(node)?[0]) else { return Ok(None) };
        (node, cast_to) = (inner, Some(to));
    }
    if model.op_type(node)? != op || !model.is_default_domain(node)? {
        return Ok(None);
    }
    Ok(model.inputs(node)?.into_iter().next().map(|v| (v, cast_to, heads_axis)))
}

/// `cache` cast to `to`, found among its readers or added (shared by every
/// rotation of the same caches).
fn cast_cache(model: &Model, cache: &str, to: i64) -> Result<String> {
    let same = |m: &Model, n: OnnxNodeId| Ok(m.attribute(n, "to")? == Some(Attribute::Int(to)));
    if let Some(existing) = find_reader(model, cache, "Cast", same)? {
        return Ok(existing);
    }
    let to = NamedAttribute { name: "to".into(), value: Attribute::Int(to) };
    let hint = format!("{cache}_cast");
    Ok(model.add_node("Cast", "", &[cache.to_string()], &[hint], &[to])?.1.remove(0))
}

/// Half of `x`'s head dim, for `x` of rank 4 with a static, even last axis.
fn head_half(model: &Model, x: &str) -> Option<i64> {
    let shape = model.value_type(x)?.shape?;
    match shape.as_slice() {
        [_, _, _, OnnxDim::Fixed(h)] if h % 2 == 0 => Some(h / 2),
        _ => None,
    }
}

/// `(start, end)` of a `Slice` over the last axis (of 4) with step 1; an
/// end past the axis is `i64::MAX`.
fn slice_range(model: &Model, slice: OnnxNodeId) -> Result<Option<(i64, i64)>> {
    if !model.is_default_domain(slice)? {
        return Ok(None);
    }
    let inputs = model.inputs(slice)?;
    let get = |i: usize| inputs.get(i).and_then(|v| model.ints(v));
    let (Some(start), Some(end)) = (get(1), get(2)) else { return Ok(None) };
    let axes = get(3).unwrap_or_default();
    let steps = get(4).unwrap_or_else(|| vec![1]);
    if !matches!(axes.as_slice(), [-1] | [3]) || steps != [1] {
        return Ok(None);
    }
    let (&[start], &[end]) = (start.as_slice(), end.as_slice()) else { return Ok(None) };
    Ok(Some((start, if end >= 1 << 31 { i64::MAX } else { end })))
}

fn last_axis(model: &Model, node: OnnxNodeId) -> Result<bool> {
    Ok(matches!(model.attribute(node, "axis")?, Some(Attribute::Int(-1 | 3))))
}
