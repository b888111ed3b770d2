//! A `GatherND` at constant indices (`attention_mask[batch_idx, kv_idx]`
//! with constant grids) read as a `Gather`: the indexed axes of `data`
//! flattened into one (`Reshape`), each index tuple raveled into a position
//! along it. The same elements in the same shape; ONNX Runtime's CUDA
//! `GatherND` kernel cannot be replayed in a CUDA graph
//! (microsoft/onnxruntime#33875), its `Gather` can.
//!
//! Left alone: `batch_dims` other than 0, indices that are not a small
//! constant, `data` of a shape not fully known, and an index out of its
//! axis's range (the `GatherND` reports it at run time; a raveled position
//! would read another element).

use hfx_sdk::prelude::*;

const INT64: i32 = 7;
/// The most index elements read (the contract's cap on a constant).
const MAX_INDICES: u32 = 4096;

#[hfx_sdk::onnx_ir_fix(targets = ["GatherND"])]
fn fix_constant_gather_nd(model: &Model, node: OnnxNodeId) -> Result<bool> {
    if !model.is_default_domain(node)? {
        return Ok(false);
    }
    match model.attribute(node, "batch_dims")? {
        None | Some(Attribute::Int(0)) => {}
        Some(_) => return Ok(false),
    }
    let inputs = model.inputs(node)?;
    let [data, indices] = inputs.as_slice() else { return Ok(false) };
    let Some(shape) = fixed_shape(model, data) else { return Ok(false) };
    let Some(constant) = model.constant(indices, MAX_INDICES) else { return Ok(false) };
    let ConstantData::Ints(values) = constant.data else { return Ok(false) };
    let Some((&depth, tuples)) = constant.dims.split_last() else { return Ok(false) };
    if depth <= 0 || depth as usize > shape.len() {
        return Ok(false);
    }
    let (indexed, kept) = shape.split_at(depth as usize);
    let Some(positions) = raveled(&values, indexed) else { return Ok(false) };
    let Some(rows) = indexed.iter().try_fold(1i64, |n, &d| n.checked_mul(d)) else {
        return Ok(false);
    };

    let gathered = model.first_output(node)?;
    let rows_shape: Vec<i64> = std::iter::once(rows).chain(kept.iter().copied()).collect();
    let rows_shape = model.add_initializer(
        &format!("{gathered}_rows_shape"),
        &Constant {
            elem_type: INT64,
            dims: vec![rows_shape.len() as i64],
            data: ConstantData::Ints(rows_shape),
        },
    )?;
    let positions = model.add_initializer(
        &format!("{gathered}_positions"),
        &Constant { elem_type: INT64, dims: tuples.to_vec(), data: ConstantData::Ints(positions) },
    )?;
    let (_, rows) = model.add_node(
        "Reshape",
        "",
        &[data.clone(), rows_shape],
        &[format!("{gathered}_rows")],
        &[],
    )?;
    let (_, outputs) = model.add_node(
        "Gather",
        "",
        &[rows[0].clone(), positions],
        &[format!("{gathered}_gathered")],
        &[NamedAttribute { name: "axis".into(), value: Attribute::Int(0) }],
    )?;
    model.replace_uses(&gathered, &outputs[0])?;
    model.remove_rerouted(node)?;
    Ok(true)
}

/// `value`'s shape when every axis has a fixed size.
fn fixed_shape(model: &Model, value: &str) -> Option<Vec<i64>> {
    model
        .shape(value)?
        .into_iter()
        .map(|d| match d {
            OnnxDim::Fixed(n) => Some(n),
            OnnxDim::Symbolic(_) => None,
        })
        .collect()
}

/// Each tuple of `values` (`indexed.len()` indices, negative ones counted
/// from the end as `GatherND` reads them) as its row-major position over
/// the `indexed` axes; none when an index is out of its axis's range.
fn raveled(values: &[i64], indexed: &[i64]) -> Option<Vec<i64>> {
    values
        .chunks(indexed.len())
        .map(|tuple| {
            tuple.iter().zip(indexed).try_fold(0i64, |position, (&index, &size)| {
                let index = if index < 0 { index + size } else { index };
                (0..size).contains(&index).then(|| position * size + index)
            })
        })
        .collect()
}
