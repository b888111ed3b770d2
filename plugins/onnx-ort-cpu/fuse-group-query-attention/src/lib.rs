//! A decoder's attention over its KV cache as ONNX Runtime's
//! `com.microsoft::GroupQueryAttention`. The pattern, as a decoder's SDPA
//! traces (`translate-attention`, `patch-sdpa-masked-rows`), on
//! `[batch, heads, length, head_dim]`:
//!
//! ```text
//! key = Concat(past_key, k, axis -2)   (a decode step; key a graph output, past_key a graph input)
//!     | k                              (a prefill; k a graph output)
//! repeated = Reshape(Expand|Tile(Unsqueeze(key, [2])))   (kv heads repeated; key itself when as many as q's)
//! Softmax(Add(Mul(MatMul(q, Transpose(repeated key, [0,1,3,2])), scale), bias)) → MatMul(·, repeated value)
//!   → Where(unattended, 0, ·) → [Reshape] → Transpose [0,2,1,3] → Reshape [batch, length, heads·head_dim]
//! ```
//!
//! (the scale a `Mul` or `Div` by a constant, perhaps cast, or none when
//! the query's merged form is scaled by a constant (folded into GQA's scale); the key's
//! transpose perhaps `[0,2,3,1]` of its split form, two transposes merged)
//!
//! becomes `GroupQueryAttention(q, k, v, past_key, past_value, seqlens_k,
//! total_sequence_length, attention_bias = bias)` on `[batch, length,
//! heads·head_dim]`, its presents the graph's present outputs (their names
//! kept). The bias is the graph's own mask (causal, padding, windows), so
//! every row's `seqlens_k` is the whole length minus one, computed in the
//! graph from the cache's and the query's shapes: exact whatever the padding.
//! ONNX Runtime's causal mask on top is the one the bias holds, which is why
//! only a cache's attention is taken (a present that is a graph output): a
//! decoder's. Rows attending to no key stay zeros, as the graph made them.
//! q, k and v are taken before their split into heads where the graph has
//! them so (a `com.microsoft::RotaryEmbedding` of the split is redone on the
//! merged form, a partial rotation's slices and concat as one rotation of
//! `rotary_embedding_dim`); else the split is undone; packed when they are
//! the three parts of one `Split`. After a past (a decode step) GQA also
//! rotates q and k itself (`do_rotary`, on the rotation's caches and
//! position ids) where ONNX Runtime's kernel can: in a first prompt it
//! rotates every row from one start position, which a left-padded batch's
//! rows do not share. Targets `Softmax`; every intermediate must be read
//! only by the pattern, but for a key and value several attentions read
//! (layers attending over an earlier layer's cache, Gemma 4's
//! `num_kv_shared_layers`): the first, the cache's own layer, is fused and
//! its present is the cache the others go on reading.

use hfx_sdk::prelude::*;

/// Whether GQA takes over a decode step's rotations (`do_rotary`). Built
/// with the `unrotated` feature (the WebGPU set's build of this fusion) it
/// never does: WebGPU's kernel rotates at the positions after the past,
/// ignoring `position_ids`, so the rotations stay `RotaryEmbedding`s.
const ROTATES: bool = !cfg!(feature = "unrotated");

/// Whether a prefill (an attention with no past, which starts the cache) is
/// taken. Built with the `decode-only` feature (the CUDA set's build of this
/// fusion) it is not: with an attention bias CUDA's GroupQueryAttention runs
/// an unfused kernel, slower for a prompt than MultiHeadAttention's
/// (microsoft/onnxruntime#33869), which the CUDA set's
/// fuse-multi-head-attention makes of a prefill instead.
const PREFILLS: bool = !cfg!(feature = "decode-only");

const FLOAT: i32 = 1;
const INT32: i32 = 6;
const INT64: i32 = 7;
const FLOAT16: i32 = 10;

#[hfx_sdk::onnx_ir_fix(targets = ["Softmax"])]
fn fuse_group_query_attention(model: &Model, softmax: OnnxNodeId) -> Result<bool> {
    let Some(m) = match_attention(model, softmax)? else { return Ok(false) };
    model.import_opset("com.microsoft", 1)?;
    let (query, _) = merged(model, &m.query, m.heads, m.head_dim)?;
    let (query, scale) = unscaled(model, &query, m.scale)?;
    let (key, key_before) = merged(model, &m.key.new, m.kv_heads, m.head_dim)?;
    let (value, value_before) = merged(model, &m.value.new, m.kv_heads, m.head_dim)?;
    let packed = packed(model, [&query, &key, &value], &m)?;
    let rotation = match (&m.key.past, &packed) {
        (Some(_), None) if ROTATES => rotation(model, &query, &key, &m)?,
        _ => None,
    };
    // GQA rotating them itself, the parts before the rotations may be one split's.
    let packed = match (packed, &rotation) {
        (None, Some(r)) => crate::packed(model, [&r.query, &r.key, &value], &m)?,
        (packed, _) => packed,
    };
    // Of the query before a rotation (the rotation's caches will read them)
    // or a split (which goes).
    let shaped = packed.as_ref().or(rotation.as_ref().map(|r| &r.query)).unwrap_or(&query);
    let lengths = lengths(model, &m, shaped)?;
    // A prefill's present is the new states: GQA's takes the graph output
    // only when its inputs were found before them (else it would read itself).
    let present = |cache: &Cache, found_before: bool| -> Result<bool> {
        Ok(cache.past.is_some() || (found_before && single_output(model, &cache.new)?))
    };
    let (key_present, value_present) =
        (present(&m.key, key_before)?, present(&m.value, value_before)?);
    let mut attributes = vec![
        int_attribute("num_heads", m.heads),
        int_attribute("kv_num_heads", m.kv_heads),
        NamedAttribute { name: "scale".into(), value: Attribute::Float(scale as f32) },
    ];
    let (query, key, rotary_inputs) = match &rotation {
        Some(r) => {
            attributes.push(int_attribute("do_rotary", 1));
            attributes.push(int_attribute("rotary_interleaved", r.interleaved));
            let (cos, sin) = (r.cos.clone(), r.sin.clone());
            extend_rows(model, r.rows, &lengths.total_int64)?;
            (r.query.clone(), r.key.clone(), [cos, sin, r.position_ids.clone()])
        }
        None => (query, key, Default::default()),
    };
    let (query, key, value) = match packed {
        Some(packed) => (packed, String::new(), String::new()),
        None => (query, key, value),
    };
    let past = |cache: &Cache| cache.past.clone().unwrap_or_default();
    let [cos, sin, position_ids] = rotary_inputs;
    let (_, outputs) = model.add_node(
        "GroupQueryAttention",
        "com.microsoft",
        &[
            query,
            key,
            value,
            past(&m.key),
            past(&m.value),
            lengths.seqlens_k,
            lengths.total,
            cos,
            sin,
            position_ids,
            m.bias.clone(),
        ],
        // Both presents, taken or not: ONNX Runtime's kernels write the cache into them.
        &[
            format!("{}_gqa", m.output),
            format!("{}_gqa", m.key.present),
            format!("{}_gqa", m.value.present),
        ],
        &attributes,
    )?;
    let mut attended = outputs[0].clone();
    if let Some((unattended, zero)) = &m.unattended {
        let rows = unattended_rows(model, unattended)?;
        attended = model
            .add_node(
                "Where",
                "",
                &[rows, zero.clone(), attended],
                &[format!("{}_rows", m.output)],
                &[],
            )?
            .1
            .remove(0);
    }
    if !m.output_merged {
        attended = split_heads(model, &attended, m.heads, m.head_dim)?;
    } else if let Some(shape) = &m.output_shape {
        let name = format!("{}_reshaped", m.output);
        let reshaped = model.add_node("Reshape", "", &[attended, shape.clone()], &[name], &[])?;
        attended = reshaped.1[0].clone();
    }
    let mut routed_around = vec![];
    take_over(model, &m.output, &attended, &mut routed_around)?;
    for (cache, taken, fused_present) in
        [(&m.key, key_present, &outputs[1]), (&m.value, value_present, &outputs[2])]
    {
        if taken {
            take_over(model, &cache.present, fused_present, &mut routed_around)?;
        }
    }
    routed_around.extend(m.nodes.iter().copied());
    // The rotations GQA does are unread once the pattern is gone.
    routed_around.extend(rotation.iter().flat_map(|r| r.nodes));
    // From the pattern's end back: each node goes once nothing reads it.
    for node in routed_around.into_iter().rev() {
        model.remove_unread(node)?;
    }
    Ok(true)
}

/// Every read of `old` reads `new`. A graph output `old` keeps its name,
/// which `new` takes: `old`'s producer, which would produce it twice, goes,
/// and the producers of its inputs join `routed_around`.
fn take_over(
    model: &Model,
    old: &str,
    new: &str,
    routed_around: &mut Vec<OnnxNodeId>,
) -> Result<()> {
    let replaced = model.producer(old).filter(|_| model.is_graph_output(old));
    let inputs = match replaced {
        Some(node) => model.inputs(node)?,
        None => vec![],
    };
    model.replace_uses(old, new)?;
    if let Some(node) = replaced {
        model.remove_node(node)?;
        routed_around.extend(inputs.iter().filter_map(|i| model.producer(i)));
    }
    Ok(())
}

/// A key or value: its present (what the attention reads, the graph output)
/// and the new states it holds, after `past` when there is one.
struct Cache {
    present: String,
    new: String,
    past: Option<String>,
}

struct Attention {
    /// `[batch, heads, length, head_dim]`.
    query: String,
    key: Cache,
    value: Cache,
    bias: String,
    scale: f64,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
    /// `Where(unattended, zero, ·)`'s condition (`[batch, 1, length, 1]`) and zero.
    unattended: Option<(String, String)>,
    /// The attention's result: `[batch, length, heads·head_dim]` when
    /// `output_merged`, else `[batch, heads, length, head_dim]`.
    output: String,
    output_merged: bool,
    /// The shape the graph reshapes the merged result to when it is not
    /// `[batch, length, heads·head_dim]` (a `[batch·length, ·]` for a `Gemm`).
    output_shape: Option<String>,
    /// The pattern's nodes, removed once nothing reads them.
    nodes: Vec<OnnxNodeId>,
}

fn match_attention(model: &Model, softmax: OnnxNodeId) -> Result<Option<Attention>> {
    if !model.is_default_domain(softmax)?
        || !matches!(model.attribute(softmax, "axis")?, None | Some(Attribute::Int(-1 | 3)))
    {
        return Ok(None);
    }
    // Softmax(Add(scores, bias)), scores = Mul(MatMul(q, Transpose(key)), scale)
    let Some(add) = model.only_input_producer(softmax, "Add")? else { return Ok(None) };
    if !model.is_default_domain(add)? {
        return Ok(None);
    }
    let add_inputs = model.inputs(add)?;
    let [a, b] = add_inputs.as_slice() else { return Ok(None) };
    let mut found = None;
    for (scores, bias) in [(a, b), (b, a)] {
        if let Some(scaled) = scaled_scores(model, scores)? {
            found = Some((scaled, bias.clone(), scores.clone()));
            break;
        }
    }
    // Unscaled scores (the query scaled before, as OPT's).
    for (scores, bias) in [(a, b), (b, a)] {
        if found.is_some() {
            break;
        }
        if let Some(matmul) = model.producer(scores) {
            if model.op_type(matmul)? == "MatMul" && model.is_default_domain(matmul)? {
                found = Some(((matmul, 1.0, None), bias.clone(), scores.clone()));
            }
        }
    }
    let Some(((matmul, scale, scale_node), bias, scores)) = found else { return Ok(None) };
    if model.consumers(&scores) != [add] {
        return Ok(None);
    }
    let matmul_inputs = model.inputs(matmul)?;
    let [query, transposed] = matmul_inputs.as_slice() else { return Ok(None) };
    let Some(transpose) = model.producer(transposed) else { return Ok(None) };
    // A key several attentions read (Gemma 4's KV-shared layers attend over
    // an earlier layer's cache, its repeat and transpose computed once): the
    // first reader, the layer that wrote the cache, is fused; the later ones
    // keep reading the cache, then GQA's present, through the nodes they share.
    if model.op_type(transpose)? != "Transpose"
        || !model.is_default_domain(transpose)?
        || model.consumers(transposed).first() != Some(&matmul)
    {
        return Ok(None);
    }
    let Some(repeated_key) = transposed_key(model, transpose)? else { return Ok(None) };
    // MatMul(Softmax(·), repeated value) → Where(unattended, 0, ·)?
    let Some(weighted) = model.only_reader(softmax, "MatMul")? else { return Ok(None) };
    let weighted_inputs = model.inputs(weighted)?;
    let [weights, repeated_value] = weighted_inputs.as_slice() else { return Ok(None) };
    if *weights != model.first_output(softmax)? {
        return Ok(None);
    }
    let mut nodes = vec![softmax, add, matmul, transpose, weighted];
    nodes.extend(scale_node);
    let mut output = model.first_output(weighted)?;
    let mut unattended = None;
    if let Some(zeroed) = model.only_reader(weighted, "Where")? {
        let inputs = model.inputs(zeroed)?;
        if let [condition, zero, attended] = inputs.as_slice() {
            let zero = if *attended == output { scalar_zero(model, zero)? } else { None };
            if let Some(zero) = zero {
                unattended = Some((condition.clone(), zero));
                output = model.first_output(zeroed)?;
                nodes.push(zeroed);
            }
        }
    }
    // Shapes: q [batch, heads, length, head_dim]; the kv heads divide the heads.
    let Some(q_shape) = model.shape(query) else { return Ok(None) };
    let [q_batch, OnnxDim::Fixed(heads), q_length, OnnxDim::Fixed(head_dim)] = q_shape.as_slice()
    else {
        return Ok(None);
    };
    let (heads, head_dim) = (*heads, *head_dim);
    let elem_type = model.value_type(query).map(|t| t.elem_type);
    if !matches!(elem_type, Some(FLOAT | FLOAT16)) {
        return Ok(None);
    }
    let Some((key_present, key_groups)) = unrepeated(model, &repeated_key, &mut nodes)? else {
        return Ok(None);
    };
    let Some((value_present, value_groups)) = unrepeated(model, repeated_value, &mut nodes)? else {
        return Ok(None);
    };
    if key_groups != value_groups || heads % key_groups != 0 {
        return Ok(None);
    }
    let kv_heads = heads / key_groups;
    let (Some(key), Some(value)) = (
        cache(model, &key_present, kv_heads, head_dim)?,
        cache(model, &value_present, kv_heads, head_dim)?,
    ) else {
        return Ok(None);
    };
    if key.past.is_some() != value.past.is_some() || (!PREFILLS && key.past.is_none()) {
        return Ok(None);
    }
    // Self-attention: the new keys as long as the query. After a past, ONNX
    // Runtime takes several new tokens for a batch of one only.
    let new_length = model.shape(&key.new).and_then(|s| s.get(2).cloned());
    if new_length.as_ref() != Some(q_length) {
        return Ok(None);
    }
    if key.past.is_some() && *q_length != OnnxDim::Fixed(1) && *q_batch != OnnxDim::Fixed(1) {
        return Ok(None);
    }
    // The bias is `[batch or 1, heads or 1, length, total]`, of q's type.
    let bias_type = model.value_type(&bias);
    let bias_heads =
        bias_type.as_ref().and_then(|t| t.shape.as_ref()).and_then(|s| match s.as_slice() {
            [_, OnnxDim::Fixed(h), _, _] => Some(*h),
            _ => None,
        });
    if !matches!(bias_heads, Some(h) if h == 1 || h == heads)
        || bias_type.map(|t| t.elem_type) != elem_type
    {
        return Ok(None);
    }
    if let Some((condition, _)) = &unattended {
        let rows = model.shape(condition);
        if !matches!(rows.as_deref(), Some([_, OnnxDim::Fixed(1), _, OnnxDim::Fixed(1)])) {
            return Ok(None);
        }
    }
    let (output, output_merged, output_shape) = match merged_tail(model, &output, heads * head_dim)?
    {
        Some((merged, tail, shape)) => {
            nodes.extend(tail);
            (merged, true, shape)
        }
        None => (output, false, None),
    };
    Ok(Some(Attention {
        query: query.clone(),
        key,
        value,
        bias,
        scale,
        heads,
        kv_heads,
        head_dim,
        unattended,
        output,
        output_merged,
        output_shape,
        nodes,
    }))
}

/// The key `[batch, heads, length, head_dim]` a `Transpose` gives as
/// `[batch, heads, head_dim, length]`: its input for perm `[0,1,3,2]`; for
/// `[0,2,3,1]` (the optimizer's merge of two transposes) from the split
/// `[batch, length, heads, head_dim]`, that split's `[0,2,1,3]` transpose
/// (a present) beside it.
fn transposed_key(model: &Model, transpose: OnnxNodeId) -> Result<Option<String>> {
    let input = model.inputs(transpose)?[0].clone();
    match perm(model, transpose)?.as_deref() {
        Some([0, 1, 3, 2]) => Ok(Some(input)),
        Some([0, 2, 3, 1]) => {
            for reader in model.consumers(&input) {
                if model.op_type(reader)? == "Transpose"
                    && model.is_default_domain(reader)?
                    && perm(model, reader)?.as_deref() == Some(&[0, 2, 1, 3])
                {
                    return Ok(Some(model.first_output(reader)?));
                }
            }
            Ok(None)
        }
        _ => Ok(None),
    }
}

/// The merged query before a scaling by a constant (`Mul(q, c)`, either
/// side), and the attention's scale times `c`; else the query and the scale.
fn unscaled(model: &Model, query: &str, scale: f64) -> Result<(String, f64)> {
    if let Some(mul) = model.producer(query) {
        if model.op_type(mul)? == "Mul" && model.is_default_domain(mul)? {
            let inputs = model.inputs(mul)?;
            if let [a, b] = inputs.as_slice() {
                for (q, factor) in [(a, b), (b, a)] {
                    if let (Some(c), Some(shape)) = (scalar(model, factor)?, model.shape(query)) {
                        if model.shape(q).as_ref() == Some(&shape) {
                            return Ok((q.clone(), scale * c));
                        }
                    }
                }
            }
        }
    }
    Ok((query.to_string(), scale))
}

/// `(MatMul, scale, scaling node)` for `scores` = `Mul(MatMul(..), c)` (either
/// side) or `Div(MatMul(..), c)`, `c` a scalar constant, each read once.
fn scaled_scores(
    model: &Model,
    scores: &str,
) -> Result<Option<(OnnxNodeId, f64, Option<OnnxNodeId>)>> {
    let Some(scaling) = model.producer(scores) else { return Ok(None) };
    let op = model.op_type(scaling)?;
    if !model.is_default_domain(scaling)? || !matches!(op.as_str(), "Mul" | "Div") {
        return Ok(None);
    }
    let inputs = model.inputs(scaling)?;
    let [a, b] = inputs.as_slice() else { return Ok(None) };
    let sides = if op == "Mul" { vec![(a, b), (b, a)] } else { vec![(a, b)] };
    for (product, factor) in sides {
        let Some(c) = scalar(model, factor)? else { continue };
        let Some(matmul) = model.producer(product) else { continue };
        if model.op_type(matmul)? != "MatMul"
            || !model.is_default_domain(matmul)?
            || model.consumers(product) != [scaling]
        {
            continue;
        }
        let scale = if op == "Mul" { c } else { 1.0 / c };
        return Ok(Some((matmul, scale, Some(scaling))));
    }
    Ok(None)
}

/// The states `repeated` repeats the heads of, and how many times each:
/// `Reshape(Expand|Tile(Unsqueeze(states, [2]), ·), ·)` of `[batch, kv_heads,
/// length, head_dim]` to `[batch, kv_heads·groups, length, head_dim]`, or
/// `repeated` itself once. The repeat's nodes go to `nodes`.
fn unrepeated(
    model: &Model,
    repeated: &str,
    nodes: &mut Vec<OnnxNodeId>,
) -> Result<Option<(String, i64)>> {
    let Some(reshape) = model.producer(repeated) else { return Ok(Some((repeated.into(), 1))) };
    if model.op_type(reshape)? != "Reshape" || !model.is_default_domain(reshape)? {
        return Ok(Some((repeated.into(), 1)));
    }
    let Some(tiled) = model.inputs(reshape)?.into_iter().next() else { return Ok(None) };
    let Some(tile) = model.producer(&tiled) else { return Ok(None) };
    let tile_inputs = model.inputs(tile)?;
    let [unsqueezed, times] = tile_inputs.as_slice() else { return Ok(None) };
    let Some(unsqueeze) = model.producer(unsqueezed) else { return Ok(None) };
    let unsqueeze_inputs = model.inputs(unsqueeze)?;
    if model.op_type(unsqueeze)? != "Unsqueeze"
        || unsqueeze_inputs.get(1).and_then(|a| model.ints(a)) != Some(vec![2])
    {
        return Ok(None);
    }
    let states = unsqueeze_inputs[0].clone();
    let groups = match model.op_type(tile)?.as_str() {
        "Tile" => match model.ints(times).as_deref() {
            Some([1, 1, r, 1, 1]) => *r,
            _ => return Ok(None),
        },
        "Expand" => match expanded_groups(model, times)? {
            Some(r) => r,
            None => return Ok(None),
        },
        _ => return Ok(None),
    };
    let (Some(from), Some(to)) = (model.shape(&states), model.shape(repeated)) else {
        return Ok(None);
    };
    match (from.as_slice(), to.as_slice()) {
        (
            [_, OnnxDim::Fixed(kv), l1, OnnxDim::Fixed(d1)],
            [_, OnnxDim::Fixed(h), l2, OnnxDim::Fixed(d2)],
        ) if kv * groups == *h && d1 == d2 && same_length(l1, l2) => {}
        _ => return Ok(None),
    }
    if model.consumers(unsqueezed) != [tile] || model.consumers(&tiled) != [reshape] {
        return Ok(None);
    }
    nodes.extend([unsqueeze, tile, reshape]);
    Ok(Some((states, groups)))
}

/// A scalar constant's value, also through a `Cast` of one (a float16
/// model's scale is cast from a float32 constant).
fn scalar(model: &Model, value: &str) -> Result<Option<f64>> {
    if let Some(c) = model.scalar(value) {
        return Ok(Some(c));
    }
    Ok(match model.producer(value) {
        Some(cast) if model.op_type(cast)? == "Cast" && model.is_default_domain(cast)? => {
            model.inputs(cast)?.first().and_then(|v| model.scalar(v))
        }
        _ => None,
    })
}

/// A scalar zero `value` is or expands, for the zeroing of unattended rows
/// after the fusion: `value` itself when it is a (cast) scalar zero, the
/// scalar an `Expand` broadcasts when it is one (a float16 model's zero, cast
/// and expanded to the heads layout the fused output no longer has).
fn scalar_zero(model: &Model, value: &str) -> Result<Option<String>> {
    if scalar(model, value)? == Some(0.0) {
        return Ok(Some(value.to_string()));
    }
    Ok(match model.producer(value) {
        Some(expand)
            if model.op_type(expand)? == "Expand" && model.is_default_domain(expand)? =>
        {
            let inner = model.inputs(expand)?.into_iter().next();
            match inner {
                Some(inner) if rank_0(model, &inner)? && scalar(model, &inner)? == Some(0.0) => {
                    Some(inner)
                }
                _ => None,
            }
        }
        _ => None,
    })
}

/// Whether `value` is 0-d: by its recorded shape, or as the cast of a 0-d constant.
fn rank_0(model: &Model, value: &str) -> Result<bool> {
    if let Some(shape) = model.shape(value) {
        return Ok(shape.is_empty());
    }
    let dims_of = |v: &str| model.constant(v, 1).map(|c| c.dims.is_empty());
    Ok(match model.producer(value) {
        Some(cast) if model.op_type(cast)? == "Cast" => {
            model.inputs(cast)?.first().and_then(|v| dims_of(v)) == Some(true)
        }
        _ => dims_of(value) == Some(true),
    })
}

/// Whether two lengths can be one: equal, or not both sizes (one symbolic
/// length can be spelled by two expressions).
fn same_length(a: &OnnxDim, b: &OnnxDim) -> bool {
    a == b || !matches!((a, b), (OnnxDim::Fixed(_), OnnxDim::Fixed(_)))
}

/// The repeat count at axis 2 of an Expand's 5-element target shape: a
/// constant, or a `Concat` of one-element parts whose third is a constant.
fn expanded_groups(model: &Model, shape: &str) -> Result<Option<i64>> {
    if let Some(dims) = model.ints(shape) {
        return Ok(match dims.as_slice() {
            [_, _, r, _, _] => Some(*r),
            _ => None,
        });
    }
    let Some(concat) = model.producer(shape) else { return Ok(None) };
    if model.op_type(concat)? != "Concat" || !model.is_default_domain(concat)? {
        return Ok(None);
    }
    let parts = model.inputs(concat)?;
    // A part known to hold other than one element makes another shape.
    let one_element = |v: &str| match (model.ints(v), model.shape(v)) {
        (Some(ints), _) => ints.len() == 1,
        (None, Some(shape)) => !matches!(shape.as_slice(), [OnnxDim::Fixed(n)] if *n != 1),
        (None, None) => true,
    };
    if parts.len() != 5 || !parts.iter().all(|p| one_element(p)) {
        return Ok(None);
    }
    Ok(match model.ints(&parts[2]).as_deref() {
        Some([r]) => Some(*r),
        _ => None,
    })
}

/// What a cache's present is made of: `Concat(past, new, axis -2)` with
/// `past` a graph input (a decode step), or the new states themselves (a
/// prefill), the present a graph output either way, of `[batch, kv_heads,
/// length, head_dim]`.
fn cache(model: &Model, present: &str, kv_heads: i64, head_dim: i64) -> Result<Option<Cache>> {
    if !model.is_graph_output(present) {
        return Ok(None);
    }
    // Another layer's cache that layer's GroupQueryAttention writes: read as it is.
    if let Some(writer) = model.producer(present) {
        if model.op_type(writer)? == "GroupQueryAttention" {
            return Ok(None);
        }
    }
    let heads_of = |v: &str| match model.shape(v).as_deref() {
        Some([_, OnnxDim::Fixed(h), _, OnnxDim::Fixed(d)]) => *h == kv_heads && *d == head_dim,
        _ => false,
    };
    if !heads_of(present) {
        return Ok(None);
    }
    if let Some(concat) = model.producer(present) {
        if model.op_type(concat)? == "Concat" && model.is_default_domain(concat)? {
            let inputs = model.inputs(concat)?;
            let on_length =
                matches!(model.attribute(concat, "axis")?, Some(Attribute::Int(-2 | 2)));
            if let [past, new] = inputs.as_slice() {
                if on_length && model.is_graph_input(past) && heads_of(past) && heads_of(new) {
                    let past = Some(past.clone());
                    return Ok(Some(Cache { present: present.into(), new: new.clone(), past }));
                }
            }
        }
    }
    // Any other present (a partial rotation's concat of halves too) is new states.
    Ok(Some(Cache { present: present.into(), new: present.into(), past: None }))
}

/// The attention's merge of heads after it: `[Reshape to the same shape] →
/// Transpose [0,2,1,3] → Reshape to [batch, length, hidden]`, each read once;
/// the merged value and the nodes. The last `Reshape` may give another shape
/// of last dim `hidden` (a constant one, copying no dim past the second):
/// that of the merged value too, returned to be redone.
fn merged_tail(
    model: &Model,
    output: &str,
    hidden: i64,
) -> Result<Option<(String, Vec<OnnxNodeId>, Option<String>)>> {
    let Some(mut node) = model.producer(output) else { return Ok(None) };
    let mut nodes = vec![];
    let shape = model.shape(output);
    if let Some(reshape) = model.only_reader(node, "Reshape")? {
        let out = model.first_output(reshape)?;
        if shape.is_none() || model.shape(&out) != shape {
            return Ok(None);
        }
        nodes.push(reshape);
        node = reshape;
    }
    let Some(transpose) = model.only_reader(node, "Transpose")? else { return Ok(None) };
    if perm(model, transpose)? != Some(vec![0, 2, 1, 3]) {
        return Ok(None);
    }
    let Some(reshape) = model.only_reader(transpose, "Reshape")? else { return Ok(None) };
    let merged = model.first_output(reshape)?;
    let transposed = model.shape(&model.first_output(transpose)?);
    let reshaped_to = match (transposed.as_deref(), model.shape(&merged).as_deref()) {
        (Some([b1, l1, _, _]), Some([b2, l2, OnnxDim::Fixed(h)]))
            if b1 == b2 && l1 == l2 && *h == hidden =>
        {
            None
        }
        (Some([_, _, _, _]), Some([.., OnnxDim::Fixed(h)])) if *h == hidden => {
            let shape = model.inputs(reshape)?.get(1).cloned().unwrap_or_default();
            let copies_late_dim = match model.ints(&shape) {
                Some(dims) => dims.iter().skip(2).any(|d| *d == 0),
                None => true,
            };
            if copies_late_dim {
                return Ok(None);
            }
            Some(shape)
        }
        _ => return Ok(None),
    };
    nodes.extend([transpose, reshape]);
    Ok(Some((merged, nodes, reshaped_to)))
}

/// `x` (`[batch, heads, length, head_dim]`) as `[batch, length,
/// heads·head_dim]`, and whether it was found before `x` (so it reads
/// neither `x` nor what `x` depends on after the split): the graph's own
/// merged form, rotated as `x` was when `x` is a `RotaryEmbedding` of the
/// split (or of the transpose of a `[batch, length, heads, head_dim]` value,
/// a per-head norm's, merged by a `Reshape`); else the split undone.
fn merged(model: &Model, x: &str, heads: i64, head_dim: i64) -> Result<(String, bool)> {
    if let Some(rotated) = without_empty_part(model, x)? {
        return merged(model, &rotated, heads, head_dim);
    }
    if let Some(merged) = before_split(model, x, heads, head_dim)? {
        return Ok((merged, true));
    }
    if let Some(rotary) = model.producer(x) {
        let inputs = model.inputs(rotary)?;
        if model.op_type(rotary)? == "RotaryEmbedding" && model.domain(rotary)? == "com.microsoft" {
            if let [split, rest @ ..] = inputs.as_slice() {
                let merged = match before_split(model, split, heads, head_dim)? {
                    Some(merged) => Some(merged),
                    None => match heads_second_merged(model, split, heads, head_dim)? {
                        Some(merged) => Some(merged),
                        None => normed_merged(model, split, heads, head_dim)?,
                    },
                };
                if let Some(merged) = merged {
                    let rotated = rotary_of_merged(model, rotary, merged, rest, heads, None, x)?;
                    return Ok((rotated, true));
                }
            }
        }
    }
    if let Some(merged) = partially_rotated_merged(model, x, heads, head_dim)? {
        return Ok((merged, true));
    }
    if let Some(merged) = heads_second_merged(model, x, heads, head_dim)? {
        return Ok((merged, true));
    }
    Ok((split_undone(model, x, heads, head_dim)?, false))
}

/// `x` (`[batch, heads, length, head_dim]`) transposed and reshaped to
/// `[batch, length, heads·head_dim]`; one head's only reshaped (its layout
/// is the merged one).
fn split_undone(model: &Model, x: &str, heads: i64, head_dim: i64) -> Result<String> {
    if heads == 1 {
        let shape = ints_initializer(
            model,
            &format!("group_query_attention_one_head_{head_dim}"),
            &[0, -1, head_dim],
        )?;
        let merged = model.add_node(
            "Reshape",
            "",
            &[x.to_string(), shape],
            &[format!("{x}_merged")],
            &[],
        )?;
        return Ok(merged.1[0].clone());
    }
    let transposed = model
        .add_node(
            "Transpose",
            "",
            &[x.to_string()],
            &[format!("{x}_heads_second")],
            &[perm_attribute(&[0, 2, 1, 3])],
        )?
        .1
        .remove(0);
    let shape = ints_initializer(model, "group_query_attention_merge", &[0, 0, -1])?;
    Ok(model
        .add_node("Reshape", "", &[transposed, shape], &[format!("{x}_merged")], &[])?
        .1
        .remove(0))
}

/// The value q, k and v (merged) are split from, which GQA takes packed:
/// outputs 0, 1, 2 of a `Split` on the last axis of `[batch, length,
/// (heads + 2·kv_heads)·head_dim]`.
fn packed(
    model: &Model,
    [query, key, value]: [&String; 3],
    m: &Attention,
) -> Result<Option<String>> {
    let Some(split) = model.producer(query) else { return Ok(None) };
    if model.op_type(split)? != "Split"
        || !model.is_default_domain(split)?
        || model.outputs(split)? != [query.clone(), key.clone(), value.clone()]
        || !matches!(model.attribute(split, "axis")?, Some(Attribute::Int(-1 | 2)))
    {
        return Ok(None);
    }
    let width = |v: &str| match model.shape(v).as_deref() {
        Some([_, _, OnnxDim::Fixed(n)]) => Some(*n),
        _ => None,
    };
    let inputs = model.inputs(split)?;
    let input = inputs[0].clone();
    let (q, kv) = (m.heads * m.head_dim, m.kv_heads * m.head_dim);
    // A packed projection's output has no known type: its split's sizes say
    // its width (its rank is its parts', checked below).
    let sizes = inputs.get(1).and_then(|s| model.ints(s));
    let packed_width =
        width(&input).or_else(|| sizes.filter(|s| s.len() == 3).map(|s| s.iter().sum()));
    let widths = [packed_width, width(query), width(key), width(value)];
    Ok((widths == [Some(q + 2 * kv), Some(q), Some(kv), Some(kv)]).then_some(input))
}

/// The `com.microsoft::RotaryEmbedding`s that rotate GQA's query and key,
/// which GQA does itself (`do_rotary`) on the same caches and position ids.
struct Rotation {
    /// The query and key before their rotation.
    query: String,
    key: String,
    position_ids: String,
    cos: String,
    sin: String,
    interleaved: i64,
    /// The `Range` of the caches' rows: ONNX Runtime wants at least the
    /// total length's rows.
    rows: OnnxNodeId,
    /// The two rotations, removed once nothing reads them.
    nodes: [OnnxNodeId; 2],
}

/// The rotations of the merged `query` and `key` when GQA can do them
/// itself: both a full rotation (`num_heads` given, no partial
/// `rotary_embedding_dim`, no scale) of `[batch, length]` position ids and
/// the same caches, whose rows are a `Range(0, rows, 1)`, and a head size
/// that is a multiple of 16 (ONNX Runtime's rotating kernel's). Only after a
/// past: in a first prompt ONNX Runtime rotates every row from the first
/// row's first position, which a left-padded batch's rows do not share.
fn rotation(model: &Model, query: &str, key: &str, m: &Attention) -> Result<Option<Rotation>> {
    if m.head_dim % 16 != 0 {
        return Ok(None);
    }
    let (Some(q), Some(k)) = (model.producer(query), model.producer(key)) else {
        return Ok(None);
    };
    let mut found = vec![];
    for (node, heads) in [(q, m.heads), (k, m.kv_heads)] {
        if model.op_type(node)? != "RotaryEmbedding" || model.domain(node)? != "com.microsoft" {
            return Ok(None);
        }
        let int = |name: &str| -> Result<Option<i64>> {
            Ok(match model.attribute(node, name)? {
                Some(Attribute::Int(v)) => Some(v),
                _ => None,
            })
        };
        let full = matches!(int("rotary_embedding_dim")?, None | Some(0));
        let unscaled = match model.attribute(node, "scale")? {
            Some(Attribute::Float(f)) => f == 1.0,
            other => other.is_none(),
        };
        if int("num_heads")? != Some(heads)
            || !full
            || !unscaled
            || !matches!(int("is_packed_batching")?, None | Some(0))
        {
            return Ok(None);
        }
        let inputs = model.inputs(node)?;
        let [x, position_ids, cos, sin] = inputs.as_slice() else { return Ok(None) };
        found.push((
            x.clone(),
            [position_ids.clone(), cos.clone(), sin.clone()],
            int("interleaved")?,
        ));
    }
    let (query_x, shared, interleaved) = found.remove(0);
    let (key_x, key_shared, key_interleaved) = found.remove(0);
    if shared != key_shared || interleaved != key_interleaved {
        return Ok(None);
    }
    let [position_ids, cos, sin] = shared;
    let ids_type = model.value_type(&position_ids);
    let per_row = matches!(ids_type.as_ref().and_then(|t| t.shape.as_deref()), Some([_, _]));
    if !per_row || ids_type.map(|t| t.elem_type) != Some(INT64) {
        return Ok(None);
    }
    let (Some(rows), Some(sin_rows)) = (rows_range(model, &cos)?, rows_range(model, &sin)?) else {
        return Ok(None);
    };
    if rows != sin_rows {
        return Ok(None);
    }
    Ok(Some(Rotation {
        query: query_x,
        key: key_x,
        position_ids,
        cos,
        sin,
        interleaved: interleaved.unwrap_or(0),
        rows,
        nodes: [q, k],
    }))
}

/// The `Range(0, rows, 1)` (int64) a cache's rows come from, through the
/// elementwise nodes and unsqueezes that compute the cache from it (each
/// with one computed input: `Cos(Mul(Unsqueeze(Cast(Range)), inv_freq))`),
/// so that more rows of the range are more rows of the cache.
fn rows_range(model: &Model, cache: &str) -> Result<Option<OnnxNodeId>> {
    let mut value = cache.to_string();
    for _ in 0..8 {
        let Some(node) = model.producer(&value) else { return Ok(None) };
        let inputs = model.inputs(node)?;
        if model.op_type(node)? == "Range" && model.is_default_domain(node)? {
            let [start, _, delta] = inputs.as_slice() else { return Ok(None) };
            let int64 = |v: &str| model.constant(v, 1).map(|c| c.elem_type) == Some(INT64);
            let counts = model.scalar(start) == Some(0.0) && model.scalar(delta) == Some(1.0);
            return Ok((counts && int64(start) && int64(delta)).then_some(node));
        }
        let row_wise = ["Cos", "Sin", "Mul", "Unsqueeze", "Cast"];
        if !row_wise.contains(&model.op_type(node)?.as_str()) || !model.is_default_domain(node)? {
            return Ok(None);
        }
        let mut computed = vec![];
        for input in &inputs {
            if model.producer(input).is_some() && !cast_constant(model, input)? {
                computed.push(input);
            }
        }
        let [input] = computed.as_slice() else { return Ok(None) };
        value = (*input).clone();
    }
    Ok(None)
}

/// Whether `value` is a `Cast` of a constant (a float16 model's `inv_freq`,
/// computed in float32): as constant as the constant, for [`rows_range`].
fn cast_constant(model: &Model, value: &str) -> Result<bool> {
    let Some(node) = model.producer(value) else { return Ok(false) };
    if model.op_type(node)? != "Cast" || !model.is_default_domain(node)? {
        return Ok(false);
    }
    let inputs = model.inputs(node)?;
    Ok(matches!(inputs.as_slice(), [input] if model.constant(input, MAX_FREQUENCIES).is_some()))
}

/// Most elements of a rotation's frequencies [`cast_constant`] reads (one per
/// pair of a head's channels).
const MAX_FREQUENCIES: u32 = 4096;

/// The caches' `range` counts at least `total` (an int64 scalar) rows: the
/// rows past the largest position are never read, but ONNX Runtime checks
/// that the caches cover the total length. Done once per range.
fn extend_rows(model: &Model, range: OnnxNodeId, total: &str) -> Result<()> {
    let inputs = model.inputs(range)?;
    let [start, limit, delta] = inputs.as_slice() else { return Ok(()) };
    if let Some(max) = model.producer(limit) {
        if model.op_type(max)? == "Max" && model.inputs(max)?.iter().any(|i| i == total) {
            return Ok(());
        }
    }
    let output = model.first_output(range)?;
    let node = |op: &str, inputs: &[String], hint: String| {
        model.add_node(op, "", inputs, &[hint], &[]).map(|(_, mut o)| o.remove(0))
    };
    let rows = node("Max", &[limit.clone(), total.to_string()], format!("{limit}_at_least_total"))?;
    let extended = node("Range", &[start.clone(), rows, delta.clone()], format!("{output}_gqa"))?;
    model.replace_uses(&output, &extended)?;
    model.remove_node(range)
}

/// `[a, b]` for `x` = `Concat(a, b)` along the last axis of a
/// `[batch, heads, length, head_dim]` value.
fn last_axis_concat_pair(model: &Model, x: &str) -> Result<Option<[String; 2]>> {
    let Some(concat) = model.producer(x) else { return Ok(None) };
    if model.op_type(concat)? != "Concat"
        || !model.is_default_domain(concat)?
        || !matches!(model.attribute(concat, "axis")?, Some(Attribute::Int(-1 | 3)))
    {
        return Ok(None);
    }
    Ok(<[String; 2]>::try_from(model.inputs(concat)?).ok())
}

/// `a` for `x` = `Concat(a, empty, axis -1)`, `empty` of no element on that
/// axis: a rotation of every dim, traced as a partial one (its unrotated
/// part empty).
fn without_empty_part(model: &Model, x: &str) -> Result<Option<String>> {
    let Some([a, empty]) = last_axis_concat_pair(model, x)? else { return Ok(None) };
    let shapes = (model.shape(&a), model.shape(&empty));
    Ok(match (shapes.0.as_deref(), shapes.1.as_deref()) {
        (Some([_, _, _, _]), Some([_, _, _, OnnxDim::Fixed(0)])) => Some(a),
        _ => None,
    })
}

/// For a partial rotation `x` = `Concat(RotaryEmbedding(Slice(t, [0, r))),
/// Slice(t, [r, head_dim)), axis -1)` of `t` `[batch, heads, length,
/// head_dim]`: one `RotaryEmbedding` of `t`'s merged form (the graph's, or
/// the split undone) rotating `r` of each head's dims.
fn partially_rotated_merged(
    model: &Model,
    x: &str,
    heads: i64,
    head_dim: i64,
) -> Result<Option<String>> {
    let Some([rotated, passed]) = last_axis_concat_pair(model, x)? else { return Ok(None) };
    let Some(rotary) = model.producer(&rotated) else { return Ok(None) };
    if model.op_type(rotary)? != "RotaryEmbedding"
        || model.domain(rotary)? != "com.microsoft"
        || !matches!(
            model.attribute(rotary, "rotary_embedding_dim")?,
            None | Some(Attribute::Int(0))
        )
    {
        return Ok(None);
    }
    let rotary_inputs = model.inputs(rotary)?;
    let [sliced, rest @ ..] = rotary_inputs.as_slice() else { return Ok(None) };
    let (Some((t, 0, r)), Some((t_passed, r_passed, end))) =
        (last_axis_slice(model, sliced)?, last_axis_slice(model, &passed)?)
    else {
        return Ok(None);
    };
    if t != t_passed || r != r_passed || end < head_dim || r <= 0 || r >= head_dim || r % 2 != 0 {
        return Ok(None);
    }
    // `t` is before `x`: so is its merged form, undone split or not.
    let merged = match before_split(model, &t, heads, head_dim)? {
        Some(merged) => merged,
        None => match heads_second_merged(model, &t, heads, head_dim)? {
            Some(merged) => merged,
            None => split_undone(model, &t, heads, head_dim)?,
        },
    };
    rotary_of_merged(model, rotary, merged, rest, heads, Some(r), x).map(Some)
}

/// `rotary`'s `RotaryEmbedding` applied to `merged` (`[batch, length,
/// heads * head_dim]`) instead, its other inputs `rest`, rotating
/// `rotary_dim` of each head's dims if given (else as `rotary` does); named
/// after `x`, the value it stands for.
fn rotary_of_merged(
    model: &Model,
    rotary: OnnxNodeId,
    merged: String,
    rest: &[String],
    heads: i64,
    rotary_dim: Option<i64>,
    x: &str,
) -> Result<String> {
    // The head count: a merged input's heads are not in its shape.
    let mut attributes = vec![int_attribute("num_heads", heads)];
    if let Some(r) = rotary_dim {
        attributes.push(int_attribute("rotary_embedding_dim", r));
    }
    for name in ["interleaved", "is_packed_batching", "rotary_embedding_dim", "scale"] {
        if rotary_dim.is_some() && name == "rotary_embedding_dim" {
            continue;
        }
        if let Some(value) = model.attribute(rotary, name)? {
            attributes.push(NamedAttribute { name: name.into(), value });
        }
    }
    let inputs: Vec<String> = std::iter::once(merged).chain(rest.iter().cloned()).collect();
    let (_, mut outputs) = model.add_node(
        "RotaryEmbedding",
        "com.microsoft",
        &inputs,
        &[format!("{x}_merged")],
        &attributes,
    )?;
    Ok(outputs.remove(0))
}

/// `(data, start, end)` for `value` = `Slice(data, [start], [end], [-1 or
/// 3], [1])` of a 4-D `data`.
fn last_axis_slice(model: &Model, value: &str) -> Result<Option<(String, i64, i64)>> {
    let Some(slice) = model.producer(value) else { return Ok(None) };
    if model.op_type(slice)? != "Slice" || !model.is_default_domain(slice)? {
        return Ok(None);
    }
    let inputs = model.inputs(slice)?;
    let ints = |i: usize| inputs.get(i).filter(|v| !v.is_empty()).and_then(|v| model.ints(v));
    let bound = |i: usize| match ints(i).as_deref() {
        Some([b]) => Some(*b),
        _ => None,
    };
    let (Some(start), Some(end)) = (bound(1), bound(2)) else { return Ok(None) };
    let rank = model.shape(&inputs[0]).map(|s| s.len());
    let on_last = matches!(ints(3).as_deref(), Some([-1]) | Some([3])) && rank == Some(4);
    let unit_step = matches!(ints(4).as_deref(), None | Some([1]));
    Ok((on_last && unit_step).then(|| (inputs[0].clone(), start, end)))
}

/// For `x` = `SimplifiedLayerNormalization(Transpose(z, [0,2,1,3]), w)` over
/// the last axis, `z` `[batch, length, heads, head_dim]` (a per-head norm
/// after the split, as Gemma 3's): the norm of `z` (the transpose does not
/// move the last axis), merged by a `Reshape`.
fn normed_merged(model: &Model, x: &str, heads: i64, head_dim: i64) -> Result<Option<String>> {
    let Some(norm) = model.producer(x) else { return Ok(None) };
    if model.op_type(norm)? != "SimplifiedLayerNormalization"
        || !model.is_default_domain(norm)?
        || !matches!(model.attribute(norm, "axis")?, None | Some(Attribute::Int(-1 | 3)))
    {
        return Ok(None);
    }
    let inputs = model.inputs(norm)?;
    let [transposed, weight] = inputs.as_slice() else { return Ok(None) };
    if !matches!(model.shape(weight).as_deref(), Some([OnnxDim::Fixed(d)]) if *d == head_dim) {
        return Ok(None);
    }
    let Some(z) = heads_swapped_from(model, transposed, heads, head_dim)? else { return Ok(None) };
    let mut attributes = vec![];
    for name in ["epsilon", "stash_type"] {
        if let Some(value) = model.attribute(norm, name)? {
            attributes.push(NamedAttribute { name: name.into(), value });
        }
    }
    attributes.push(int_attribute("axis", -1));
    let (_, normed) = model.add_node(
        "SimplifiedLayerNormalization",
        "",
        &[z, weight.clone()],
        &[format!("{x}_heads_second")],
        &attributes,
    )?;
    merge_heads(model, normed[0].clone(), x).map(Some)
}

/// `Reshape(z, [0, 0, -1])` for `x` = `Transpose(z, [0,2,1,3])`, `z`
/// `[batch, length, heads, head_dim]`.
fn heads_second_merged(
    model: &Model,
    x: &str,
    heads: i64,
    head_dim: i64,
) -> Result<Option<String>> {
    let Some(z) = heads_swapped_from(model, x, heads, head_dim)? else { return Ok(None) };
    merge_heads(model, z, x).map(Some)
}

/// `z` for `x` = `Transpose(z, [0,2,1,3])`, `z` `[batch, length, heads,
/// head_dim]`.
fn heads_swapped_from(model: &Model, x: &str, heads: i64, head_dim: i64) -> Result<Option<String>> {
    let Some(transpose) = model.producer(x) else { return Ok(None) };
    if model.op_type(transpose)? != "Transpose"
        || !model.is_default_domain(transpose)?
        || perm(model, transpose)? != Some(vec![0, 2, 1, 3])
    {
        return Ok(None);
    }
    let z = model.inputs(transpose)?[0].clone();
    Ok(matches!(
        model.shape(&z).as_deref(),
        Some([_, _, OnnxDim::Fixed(h), OnnxDim::Fixed(d)]) if *h == heads && *d == head_dim
    )
    .then_some(z))
}

/// `Reshape(z, [0, 0, -1])`: `z` `[batch, length, heads, head_dim]` as
/// `[batch, length, heads·head_dim]`, named after `x`, the value it stands for.
fn merge_heads(model: &Model, z: String, x: &str) -> Result<String> {
    let shape = ints_initializer(model, "group_query_attention_merge", &[0, 0, -1])?;
    let (_, mut merged) =
        model.add_node("Reshape", "", &[z, shape], &[format!("{x}_merged")], &[])?;
    Ok(merged.remove(0))
}

/// `y` for `x` = `Transpose(Reshape(y, ·), [0,2,1,3])`, `y` `[batch, length,
/// heads·head_dim]` and the reshape `[batch, length, heads, head_dim]`.
fn before_split(model: &Model, x: &str, heads: i64, head_dim: i64) -> Result<Option<String>> {
    let Some(transpose) = model.producer(x) else { return Ok(None) };
    if model.op_type(transpose)? != "Transpose"
        || !model.is_default_domain(transpose)?
        || perm(model, transpose)? != Some(vec![0, 2, 1, 3])
    {
        return Ok(None);
    }
    let split = model.inputs(transpose)?[0].clone();
    let Some(reshape) = model.producer(&split) else { return Ok(None) };
    if model.op_type(reshape)? != "Reshape" || !model.is_default_domain(reshape)? {
        return Ok(None);
    }
    let y = model.inputs(reshape)?[0].clone();
    Ok(match (model.shape(&y).as_deref(), model.shape(&split).as_deref()) {
        (
            Some([b1, l1, OnnxDim::Fixed(hidden)]),
            Some([b2, l2, OnnxDim::Fixed(h), OnnxDim::Fixed(d)]),
        ) if b1 == b2
            && l1 == l2
            && *h == heads
            && *d == head_dim
            && *hidden == heads * head_dim =>
        {
            Some(y)
        }
        _ => None,
    })
}

/// `[batch, length, heads·head_dim]` back to `[batch, heads, length, head_dim]`.
fn split_heads(model: &Model, merged: &str, heads: i64, head_dim: i64) -> Result<String> {
    let shape = ints_initializer(
        model,
        &format!("group_query_attention_split_{heads}_{head_dim}"),
        &[0, 0, heads, head_dim],
    )?;
    let split = model
        .add_node("Reshape", "", &[merged.to_string(), shape], &[format!("{merged}_split")], &[])?
        .1
        .remove(0);
    Ok(model
        .add_node(
            "Transpose",
            "",
            &[split],
            &[format!("{merged}_heads")],
            &[perm_attribute(&[0, 2, 1, 3])],
        )?
        .1
        .remove(0))
}

/// GQA's lengths, computed from the merged query's shape and the past's:
/// `length = past_length + new_length`.
struct Lengths {
    /// `[batch]` int32, the total length minus one in every row.
    seqlens_k: String,
    /// The total length, an int32 scalar.
    total: String,
    /// The same, an int64 scalar.
    total_int64: String,
}

/// The lengths of `m` (see [`Lengths`]). Attentions whose shapes carry the
/// same dims (a model's layers) share them.
fn lengths(model: &Model, m: &Attention, query: &str) -> Result<Lengths> {
    let dims = |v: &str, axes: &[usize]| -> Option<Vec<OnnxDim>> {
        let shape = model.shape(v)?;
        axes.iter().map(|&a| shape.get(a).cloned()).collect()
    };
    let key = match (&m.key.past, dims(&m.query, &[0, 2])) {
        (Some(past), Some(mut key)) => dims(past, &[2]).map(|d| {
            key.extend(d);
            key
        }),
        (None, key) => key,
        (Some(_), None) => None,
    };
    let prefix = match key.as_deref().and_then(dims_name) {
        Some(name) => format!("group_query_attention_{name}"),
        None => format!("{query}_group_query_attention"),
    };
    let found = Lengths {
        seqlens_k: format!("{prefix}_seqlens_k"),
        total: format!("{prefix}_total_length"),
        total_int64: format!("{prefix}_total_length_int64"),
    };
    let made_by = |name: &str, op: &str| -> Result<bool> {
        Ok(match model.producer(name) {
            Some(node) => model.op_type(node)? == op,
            None => false,
        })
    };
    if made_by(&found.seqlens_k, "Expand")?
        && made_by(&found.total, "Cast")?
        && made_by(&found.total_int64, "Squeeze")?
    {
        return Ok(found);
    }
    let node = |op: &str, inputs: &[String], name: &str, attributes: &[NamedAttribute]| {
        model
            .add_node(op, "", inputs, &[name.to_string()], attributes)
            .map(|(_, mut o)| o.remove(0))
    };
    let shape = |v: &str, start: i64, name: &str| {
        node(
            "Shape",
            &[v.to_string()],
            &format!("{prefix}_{name}"),
            &[int_attribute("end", start + 1), int_attribute("start", start)],
        )
    };
    let batch = shape(query, 0, "batch")?;
    let new_length = shape(query, 1, "new_length")?;
    let length = match &m.key.past {
        Some(past) => {
            let past_length = shape(past, 2, "past_length")?;
            node("Add", &[past_length, new_length], &format!("{prefix}_length"), &[])?
        }
        None => new_length,
    };
    let axis = ints_initializer(model, "group_query_attention_axis_0", &[0])?;
    let total_int64 = node("Squeeze", &[length, axis], &found.total_int64, &[])?;
    let to_int32 = int_attribute("to", INT32 as i64);
    let total = node("Cast", &[total_int64.clone()], &found.total, &[to_int32])?;
    let one = Constant { elem_type: INT32, dims: vec![], data: ConstantData::Ints(vec![1]) };
    let one = model.add_initializer("group_query_attention_one", &one)?;
    let last = node("Sub", &[total.clone(), one], &format!("{prefix}_last"), &[])?;
    let seqlens_k = node("Expand", &[last, batch], &found.seqlens_k, &[])?;
    Ok(Lengths { seqlens_k, total, total_int64 })
}

/// A name for a list of dims when each is a size or a plain symbol (so equal
/// names mean equal dims).
fn dims_name(dims: &[OnnxDim]) -> Option<String> {
    let parts: Option<Vec<String>> = dims
        .iter()
        .map(|d| match d {
            OnnxDim::Fixed(n) => Some(n.to_string()),
            OnnxDim::Symbolic(s)
                if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                Some(s.clone())
            }
            OnnxDim::Symbolic(_) => None,
        })
        .collect();
    parts.map(|p| p.join("_"))
}

/// The unattended rows' condition `[batch, 1, length, 1]` as `[batch, length,
/// 1]`, for GQA's output; made once per condition.
fn unattended_rows(model: &Model, condition: &str) -> Result<String> {
    let name = format!("{condition}_rows");
    if let Some(node) = model.producer(&name) {
        if model.op_type(node)? == "Squeeze" {
            return Ok(name);
        }
    }
    let axis = ints_initializer(model, "group_query_attention_axis_1", &[1])?;
    Ok(model.add_node("Squeeze", "", &[condition.to_string(), axis], &[name], &[])?.1.remove(0))
}

/// An int64 initializer, found by name when an earlier attention added it.
fn ints_initializer(model: &Model, name: &str, values: &[i64]) -> Result<String> {
    if model.ints(name).as_deref() == Some(values) && model.producer(name).is_none() {
        return Ok(name.to_string());
    }
    let constant = Constant {
        elem_type: INT64,
        dims: vec![values.len() as i64],
        data: ConstantData::Ints(values.to_vec()),
    };
    model.add_initializer(name, &constant)
}

/// Whether `value`'s producer has that one output (so it can go once GQA's
/// present takes the value's name).
fn single_output(model: &Model, value: &str) -> Result<bool> {
    Ok(match model.producer(value) {
        Some(node) => model.outputs(node)?.iter().filter(|o| !o.is_empty()).count() == 1,
        None => false,
    })
}

fn perm(model: &Model, transpose: OnnxNodeId) -> Result<Option<Vec<i64>>> {
    Ok(match model.attribute(transpose, "perm")? {
        Some(Attribute::Ints(p)) => Some(p),
        _ => None,
    })
}

fn perm_attribute(perm: &[i64]) -> NamedAttribute {
    NamedAttribute { name: "perm".into(), value: Attribute::Ints(perm.to_vec()) }
}

fn int_attribute(name: &str, value: i64) -> NamedAttribute {
    NamedAttribute { name: name.into(), value: Attribute::Int(value) }
}
