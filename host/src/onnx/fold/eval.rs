//! The evaluator: what one ONNX node computes from known inputs. Only the
//! ops static shape and position code is made of; anything else is `None`.

use super::known::*;
use super::shapes::{squeezed, unsqueezed};
use super::MAX_ELEMENTS;
use crate::onnx::{Attribute, Node};

fn binary(a: &Known, b: &Known, op: &str) -> Option<Known> {
    let dims = broadcast_dims(&a.dims, &b.dims)?;
    if count(&dims) > MAX_ELEMENTS {
        return None;
    }
    let (ia, ib) = (broadcast_indices(&a.dims, &dims), broadcast_indices(&b.dims, &dims));
    let comparison = matches!(op, "Equal" | "Less" | "LessOrEqual" | "Greater" | "GreaterOrEqual");
    let out_type = if comparison { BOOL } else { a.dtype };
    let data = match (&a.data, &b.data) {
        (Data::Float(x), Data::Float(y)) => {
            let pairs = ia.iter().zip(&ib).map(|(&i, &j)| (x[i], y[j]));
            if comparison {
                Data::Int(pairs.map(|(x, y)| compare(op, x.partial_cmp(&y)) as i64).collect())
            } else {
                let f: fn(f64, f64) -> f64 = match op {
                    "Add" => |x, y| x + y,
                    "Sub" => |x, y| x - y,
                    "Mul" => |x, y| x * y,
                    "Div" => |x, y| x / y,
                    "Pow" => f64::powf,
                    "Max" => f64::max,
                    "Min" => f64::min,
                    _ => return None,
                };
                Data::Float(pairs.map(|(x, y)| f(x, y)).collect())
            }
        }
        (Data::Int(x), Data::Int(y)) => {
            let pairs = ia.iter().zip(&ib).map(|(&i, &j)| (x[i], y[j]));
            if comparison {
                Data::Int(pairs.map(|(x, y)| compare(op, Some(x.cmp(&y))) as i64).collect())
            } else {
                let values: Option<Vec<i64>> = pairs
                    .map(|(x, y)| match op {
                        "Add" => Some(x.wrapping_add(y)),
                        "Sub" => Some(x.wrapping_sub(y)),
                        "Mul" => Some(x.wrapping_mul(y)),
                        // ONNX integer Div truncates
                        "Div" => x.checked_div(y),
                        "Max" => Some(x.max(y)),
                        "Min" => Some(x.min(y)),
                        "And" => Some(((x != 0) && (y != 0)) as i64),
                        "Or" => Some(((x != 0) || (y != 0)) as i64),
                        _ => None,
                    })
                    .collect();
                Data::Int(values?)
            }
        }
        _ => return None,
    };
    Some(Known::new(out_type, dims, data))
}

fn compare(op: &str, ordering: Option<std::cmp::Ordering>) -> bool {
    use std::cmp::Ordering::*;
    match (op, ordering) {
        (_, None) => false, // NaN compares false
        ("Equal", Some(o)) => o == Equal,
        ("Less", Some(o)) => o == Less,
        ("LessOrEqual", Some(o)) => o != Greater,
        ("Greater", Some(o)) => o == Greater,
        (_, Some(o)) => o != Less,
    }
}

fn unary(x: &Known, op: &str) -> Option<Known> {
    let data = match &x.data {
        Data::Float(v) => {
            let f: fn(f64) -> f64 = match op {
                "Neg" => |x| -x,
                "Cos" => f64::cos,
                "Sin" => f64::sin,
                "Sqrt" => f64::sqrt,
                "Reciprocal" => |x| 1.0 / x,
                "Exp" => f64::exp,
                "Log" => f64::ln,
                "Abs" => f64::abs,
                "Floor" => f64::floor,
                "Ceil" => f64::ceil,
                "Tanh" => f64::tanh,
                "Sigmoid" => |x| 1.0 / (1.0 + (-x).exp()),
                _ => return None,
            };
            Data::Float(v.iter().map(|&x| f(x)).collect())
        }
        Data::Int(v) => {
            let f: fn(i64) -> i64 = match op {
                "Neg" => i64::wrapping_neg,
                "Abs" => i64::wrapping_abs,
                "Not" => |x| (x == 0) as i64,
                "Sign" => i64::signum,
                _ => return None,
            };
            Data::Int(v.iter().map(|&x| f(x)).collect())
        }
    };
    Some(Known::new(x.dtype, x.dims.clone(), data))
}

fn int_attr(node: &Node, name: &str) -> Option<i64> {
    match node.attribute(name) {
        Some(Attribute::Int(i)) => Some(*i),
        _ => None,
    }
}

fn ints_attr(node: &Node, name: &str) -> Option<Vec<i64>> {
    match node.attribute(name) {
        Some(Attribute::Ints(v)) => Some(v.clone()),
        _ => None,
    }
}

/// The value of a Constant node, for the attribute forms translations emit.
fn constant_value(node: &Node) -> Option<Known> {
    let (name, value) = node.attributes.first()?;
    match (name.as_str(), value) {
        ("value_int", Attribute::Int(i)) => Some(Known::ints(vec![], vec![*i])),
        ("value_ints", Attribute::Ints(v)) => Some(Known::ints(vec![v.len() as i64], v.clone())),
        ("value_float", Attribute::Float(f)) => {
            Some(Known::new(FLOAT, vec![], Data::Float(vec![*f as f64])))
        }
        ("value_floats", Attribute::Floats(v)) => Some(Known::new(
            FLOAT,
            vec![v.len() as i64],
            Data::Float(v.iter().map(|&f| f as f64).collect()),
        )),
        _ => None,
    }
}

fn permute(x: &Known, perm: &[usize]) -> Option<Known> {
    if perm.len() != x.dims.len() {
        return None;
    }
    let dims: Vec<i64> = perm.iter().map(|&p| x.dims[p]).collect();
    let own = strides(&x.dims);
    let total = count(&dims);
    let mut index = vec![0i64; dims.len()];
    let mut picks = Vec::with_capacity(total);
    for _ in 0..total {
        picks.push(perm.iter().enumerate().map(|(k, &p)| index[k] as usize * own[p]).sum());
        for k in (0..dims.len()).rev() {
            index[k] += 1;
            if index[k] < dims[k] {
                break;
            }
            index[k] = 0;
        }
    }
    Some(Known { dtype: x.dtype, dims, data: x.data.pick(picks.into_iter()) })
}

/// The value `node` computes from `inputs` (None: not an op folded here, or
/// not with these inputs).
pub(super) fn evaluate(node: &Node, inputs: &[Option<&Known>]) -> Option<Vec<Known>> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let op = node.op_type.as_str();
    let one = |k: Known| Some(vec![k]);
    match op {
        "Constant" => one(constant_value(node)?),
        "Identity" => one(input(0)?.clone()),
        "Cast" => one(input(0)?.cast(int_attr(node, "to")? as i32)?),
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Max" | "Min" | "Equal" | "Less"
        | "LessOrEqual" | "Greater" | "GreaterOrEqual" | "And" | "Or"
            if inputs.len() == 2 =>
        {
            one(binary(input(0)?, input(1)?, op)?)
        }
        "Neg" | "Cos" | "Sin" | "Sqrt" | "Reciprocal" | "Exp" | "Log" | "Abs" | "Floor"
        | "Ceil" | "Tanh" | "Sigmoid" | "Not" | "Sign" => one(unary(input(0)?, op)?),
        "Unsqueeze" | "Squeeze" => one(unsqueeze_or_squeeze(node, inputs)?),
        "Reshape" => one(reshape(node, inputs)?),
        "Concat" => one(concat(node, inputs)?),
        "Transpose" => one(transpose(node, inputs)?),
        "Expand" => one(expand(node, inputs)?),
        "Where" => one(select(node, inputs)?),
        "Range" => one(range(node, inputs)?),
        "Shape" => one(shape(node, inputs)?),
        "Gather" => one(gather(node, inputs)?),
        "Slice" => one(slice(node, inputs)?),
        "MatMul" => one(matmul(node, inputs)?),
        "ScatterElements" => one(scatter_elements(node, inputs)?),
        "ReduceSum" | "ReduceMean" => one(reduce(node, inputs)?),
        "BatchNormalization" if node.outputs.len() == 1 => one(batch_norm(node, inputs)?),
        "Trilu" => one(trilu(node, inputs)?),
        "Clip" => one(clip(node, inputs)?),
        "Tile" => one(tile(node, inputs)?),
        _ => None,
    }
}

/// `Unsqueeze` / `Squeeze` on `axes` (Squeeze without axes: every size-1 axis).
fn unsqueeze_or_squeeze(node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let op = node.op_type.as_str();
    let x = input(0)?;
    let axes = match input(1) {
        Some(a) => Some(a.int_values()?),
        None => None,
    };
    let dims = match (op, axes) {
        ("Unsqueeze", Some(axes)) => unsqueezed(&x.dims, &axes)?,
        ("Squeeze", axes) => squeezed(&x.dims, axes.as_deref())?,
        _ => return None,
    };
    Some(Known { dims, ..x.clone() })
}

/// `Reshape` with `0` (keep the size) and `-1` (the rest), not `allowzero`.
fn reshape(node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let x = input(0)?;
    let shape = input(1)?.int_values()?;
    if int_attr(node, "allowzero") == Some(1) {
        return None;
    }
    let mut dims: Vec<i64> = shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if d == 0 { x.dims.get(i).copied().unwrap_or(0) } else { d })
        .collect();
    let known: i64 = dims.iter().filter(|&&d| d != -1).product();
    if let Some(slot) = dims.iter_mut().find(|d| **d == -1) {
        *slot = if known == 0 { 0 } else { count(&x.dims) as i64 / known };
    }
    (count(&dims) == count(&x.dims)).then_some(())?;
    Some(Known { dims, ..x.clone() })
}

/// `Concat` of tensors of one type along `axis`.
fn concat(node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let parts: Vec<&Known> = (0..inputs.len()).map(input).collect::<Option<_>>()?;
    let first = parts.first()?;
    if parts.iter().any(|p| p.dtype != first.dtype || p.dims.len() != first.dims.len()) {
        return None;
    }
    let a = axis(int_attr(node, "axis")?, first.dims.len())?;
    let outer: usize = first.dims[..a].iter().map(|&d| d as usize).product();
    let mut dims = first.dims.clone();
    dims[a] = parts.iter().map(|p| p.dims[a]).sum();
    let mut picks: Vec<(usize, usize)> = Vec::new();
    for o in 0..outer {
        for (k, part) in parts.iter().enumerate() {
            let block = part.dims[a..].iter().map(|&d| d as usize).product::<usize>();
            picks.extend((0..block).map(|i| (k, o * block + i)));
        }
    }
    let data = match &first.data {
        Data::Float(_) => Data::Float(
            picks
                .iter()
                .map(|&(k, i)| if let Data::Float(v) = &parts[k].data { v[i] } else { 0.0 })
                .collect(),
        ),
        Data::Int(_) => Data::Int(
            picks
                .iter()
                .map(|&(k, i)| if let Data::Int(v) = &parts[k].data { v[i] } else { 0 })
                .collect(),
        ),
    };
    Some(Known { dtype: first.dtype, dims, data })
}

/// `Transpose` by `perm` (reversed axes without it).
fn transpose(node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let x = input(0)?;
    let perm: Vec<usize> = match ints_attr(node, "perm") {
        Some(p) => p.iter().map(|&a| axis(a, x.dims.len())).collect::<Option<_>>()?,
        None => (0..x.dims.len()).rev().collect(),
    };
    permute(x, &perm)
}

/// `Expand` to a shape, numpy broadcasting.
fn expand(_node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let x = input(0)?;
    let shape = input(1)?.int_values()?;
    let dims = broadcast_dims(&x.dims, &shape)?;
    if count(&dims) > MAX_ELEMENTS {
        return None;
    }
    let picks = broadcast_indices(&x.dims, &dims);
    Some(Known { dtype: x.dtype, data: x.data.pick(picks.into_iter()), dims })
}

/// `Where(condition, x, y)`, broadcast.
fn select(_node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let (c, x, y) = (input(0)?, input(1)?, input(2)?);
    let dims = broadcast_dims(&broadcast_dims(&c.dims, &x.dims)?, &y.dims)?;
    if count(&dims) > MAX_ELEMENTS || x.dtype != y.dtype {
        return None;
    }
    let condition = c.int_values()?;
    let (ic, ix, iy) = (
        broadcast_indices(&c.dims, &dims),
        broadcast_indices(&x.dims, &dims),
        broadcast_indices(&y.dims, &dims),
    );
    let data = match (&x.data, &y.data) {
        (Data::Float(a), Data::Float(b)) => Data::Float(
            (0..ic.len())
                .map(|k| if condition[ic[k]] != 0 { a[ix[k]] } else { b[iy[k]] })
                .collect(),
        ),
        (Data::Int(a), Data::Int(b)) => Data::Int(
            (0..ic.len())
                .map(|k| if condition[ic[k]] != 0 { a[ix[k]] } else { b[iy[k]] })
                .collect(),
        ),
        _ => return None,
    };
    Some(Known { dtype: x.dtype, dims, data })
}

/// `Range(start, limit, delta)`.
fn range(_node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let (start, limit, delta) = (input(0)?, input(1)?, input(2)?);
    let (s, l, d) = (
        start.floats().first().copied()?,
        limit.floats().first().copied()?,
        delta.floats().first().copied()?,
    );
    if d == 0.0 {
        return None;
    }
    let n = ((l - s) / d).ceil().max(0.0) as usize;
    if n > MAX_ELEMENTS {
        return None;
    }
    let values: Vec<f64> = (0..n).map(|i| s + i as f64 * d).collect();
    let data = if is_float(start.dtype) {
        Data::Float(values)
    } else {
        Data::Int(values.iter().map(|&v| v as i64).collect())
    };
    Some(Known::new(start.dtype, vec![n as i64], data))
}

/// `Shape` of a known tensor, `start`..`end`.
fn shape(node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    shape_of(node, &input(0)?.dims)
}

/// `Shape` of a tensor of static `dims` (known or not), `start`..`end`.
pub(super) fn shape_of(node: &Node, dims: &[i64]) -> Option<Known> {
    let x = Known { dtype: INT64, dims: dims.to_vec(), data: Data::Int(Vec::new()) };
    let rank = x.dims.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + rank } else { v }).clamp(0, rank) as usize;
    let (start, end) =
        (clamp(int_attr(node, "start").unwrap_or(0)), clamp(int_attr(node, "end").unwrap_or(rank)));
    let dims = x.dims.get(start..end.max(start))?.to_vec();
    Some(Known::ints(vec![dims.len() as i64], dims))
}

/// `Gather` along `axis` (negative indices count from the end).
fn gather(node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let (x, indices) = (input(0)?, input(1)?);
    let a = axis(int_attr(node, "axis").unwrap_or(0), x.dims.len())?;
    let positions = indices.int_values()?;
    let size = x.dims[a];
    let outer: usize = x.dims[..a].iter().map(|&d| d as usize).product();
    let inner: usize = x.dims[a + 1..].iter().map(|&d| d as usize).product();
    let mut picks = Vec::new();
    for o in 0..outer {
        for &p in &positions {
            let p = if p < 0 { p + size } else { p };
            if !(0..size).contains(&p) {
                return None;
            }
            picks.extend((0..inner).map(|i| (o * size as usize + p as usize) * inner + i));
        }
    }
    let dims: Vec<i64> =
        x.dims[..a].iter().chain(&indices.dims).chain(&x.dims[a + 1..]).copied().collect();
    Some(Known { dtype: x.dtype, data: x.data.pick(picks.into_iter()), dims })
}

/// `Slice` with optional axes and steps (negative steps count down).
fn slice(_node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let x = input(0)?;
    let (starts, ends) = (input(1)?.int_values()?, input(2)?.int_values()?);
    let rank = x.dims.len();
    let axes: Vec<usize> = match input(3) {
        Some(a) => a.int_values()?.iter().map(|&a| axis(a, rank)).collect::<Option<_>>()?,
        None => (0..starts.len()).collect(),
    };
    let steps = match input(4) {
        Some(s) => s.int_values()?,
        None => vec![1; starts.len()],
    };
    let mut ranges: Vec<Vec<i64>> = x.dims.iter().map(|&d| (0..d).collect()).collect();
    for (k, &a) in axes.iter().enumerate() {
        let (size, step) = (x.dims[a], *steps.get(k)?);
        if step == 0 {
            return None;
        }
        let clamp = |v: i64, low: i64, high: i64| {
            (if v < 0 { v.saturating_add(size) } else { v }).clamp(low, high)
        };
        ranges[a] = if step > 0 {
            let (s, e) = (clamp(*starts.get(k)?, 0, size), clamp(*ends.get(k)?, 0, size));
            (s..e).step_by(step as usize).collect()
        } else {
            let (s, e) = (clamp(*starts.get(k)?, -1, size - 1), clamp(*ends.get(k)?, -1, size - 1));
            let mut v = Vec::new();
            let mut i = s;
            while i > e {
                v.push(i);
                i += step;
            }
            v
        };
    }
    let dims: Vec<i64> = ranges.iter().map(|r| r.len() as i64).collect();
    let own = strides(&x.dims);
    let total = count(&dims);
    let mut index = vec![0usize; rank];
    let mut picks = Vec::with_capacity(total);
    for _ in 0..total {
        picks.push((0..rank).map(|k| ranges[k][index[k]] as usize * own[k]).sum());
        for k in (0..rank).rev() {
            index[k] += 1;
            if index[k] < ranges[k].len() {
                break;
            }
            index[k] = 0;
        }
    }
    Some(Known { dtype: x.dtype, data: x.data.pick(picks.into_iter()), dims })
}

/// `MatMul` of float tensors of rank >= 2, batch dims broadcast.
fn matmul(_node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let (a, b) = (input(0)?, input(1)?);
    if a.dims.len() < 2 || b.dims.len() < 2 || !is_float(a.dtype) || a.dtype != b.dtype {
        return None;
    }
    let (m, k) = (a.dims[a.dims.len() - 2], a.dims[a.dims.len() - 1]);
    let (k2, n) = (b.dims[b.dims.len() - 2], b.dims[b.dims.len() - 1]);
    if k != k2 {
        return None;
    }
    let batch = broadcast_dims(&a.dims[..a.dims.len() - 2], &b.dims[..b.dims.len() - 2])?;
    let (ia, ib) = (
        broadcast_indices(&a.dims[..a.dims.len() - 2], &batch),
        broadcast_indices(&b.dims[..b.dims.len() - 2], &batch),
    );
    let (x, y) = (a.floats(), b.floats());
    let (m, k, n) = (m as usize, k as usize, n as usize);
    if ia.len() * m * n > MAX_ELEMENTS {
        return None;
    }
    let mut out = Vec::with_capacity(ia.len() * m * n);
    for (&ba, &bb) in ia.iter().zip(&ib) {
        for i in 0..m {
            for j in 0..n {
                out.push(
                    (0..k).map(|t| x[ba * m * k + i * k + t] * y[bb * k * n + t * n + j]).sum(),
                );
            }
        }
    }
    let dims: Vec<i64> = batch.into_iter().chain([m as i64, n as i64]).collect();
    Some(Known::new(a.dtype, dims, Data::Float(out)))
}

/// `ScatterElements` without reduction (torch's `index_put` / `scatter` on
/// index tables built at init: relative position indices): `data` with
/// `updates[i]` written at `indices[i]` along `axis`. Later writes win, as
/// ONNX leaves duplicates unspecified and torch's CPU writes in order.
fn scatter_elements(node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let (data, indices, updates) = (input(0)?, input(1)?, input(2)?);
    let overwrites = match node.attribute("reduction") {
        None => true,
        Some(Attribute::Str(r)) => r == "none",
        Some(_) => false,
    };
    if !overwrites {
        return None;
    }
    let rank = data.dims.len();
    let a = axis(int_attr(node, "axis").unwrap_or(0), rank)?;
    if indices.dims != updates.dims || indices.dims.len() != rank || data.dtype != updates.dtype {
        return None;
    }
    if indices.dims.iter().zip(&data.dims).enumerate().any(|(k, (&i, &d))| k != a && i > d) {
        return None;
    }
    let positions = indices.int_values()?;
    let (own, theirs) = (strides(&data.dims), strides(&indices.dims));
    let mut targets = Vec::with_capacity(positions.len());
    for (flat, &p) in positions.iter().enumerate() {
        let p = if p < 0 { p + data.dims[a] } else { p };
        if !(0..data.dims[a]).contains(&p) {
            return None;
        }
        let at: usize = (0..rank).map(|k| if k == a { p as usize } else { flat / theirs[k] % indices.dims[k] as usize } * own[k]).sum();
        targets.push(at);
    }
    let mut data_out = data.data.clone();
    match (&mut data_out, &updates.data) {
        (Data::Float(out), Data::Float(u)) => targets.iter().zip(u).for_each(|(&t, &v)| out[t] = v),
        (Data::Int(out), Data::Int(u)) => targets.iter().zip(u).for_each(|(&t, &v)| out[t] = v),
        _ => return None,
    }
    Some(Known { dtype: data.dtype, dims: data.dims.clone(), data: data_out })
}

/// `ReduceSum` over the `axes` input (none: every axis, unless
/// `noop_with_empty_axes`), `keepdims` as given (default 1).
/// `ReduceSum`, or `ReduceMean` of floats: the sum over `axes` (input 1),
/// divided by how many elements each sum took.
fn reduce(node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let x = input(0)?;
    let mean = node.op_type == "ReduceMean";
    if mean && !is_float(x.dtype) {
        return None;
    }
    let rank = x.dims.len();
    let axes: Vec<usize> = match (input(1), node.inputs.get(1).is_some_and(|n| !n.is_empty())) {
        (Some(a), true) => a.int_values()?.iter().map(|&a| axis(a, rank)).collect::<Option<_>>()?,
        (None, true) => return None,
        _ if int_attr(node, "noop_with_empty_axes") == Some(1) => return Some(x.clone()),
        _ => (0..rank).collect(),
    };
    let keep = int_attr(node, "keepdims").unwrap_or(1) != 0;
    let reduced: Vec<i64> =
        x.dims.iter().enumerate().map(|(k, &d)| if axes.contains(&k) { 1 } else { d }).collect();
    let (own, out_strides) = (strides(&x.dims), strides(&reduced));
    let total = count(&reduced);
    let index_of = |flat: usize| -> usize {
        (0..rank)
            .map(|k| {
                flat / own[k] % x.dims[k].max(1) as usize
                    * if axes.contains(&k) { 0 } else { out_strides[k] }
            })
            .sum()
    };
    let data = match &x.data {
        Data::Float(v) => {
            let mut out = vec![0.0; total];
            v.iter().enumerate().for_each(|(i, &e)| out[index_of(i)] += e);
            if mean {
                let taken = (v.len() / total.max(1)).max(1) as f64;
                out.iter_mut().for_each(|e| *e /= taken);
            }
            Data::Float(out)
        }
        Data::Int(v) => {
            let mut out = vec![0i64; total];
            v.iter()
                .enumerate()
                .for_each(|(i, &e)| out[index_of(i)] = out[index_of(i)].wrapping_add(e));
            Data::Int(out)
        }
    };
    let dims = if keep {
        reduced
    } else {
        x.dims.iter().enumerate().filter(|(k, _)| !axes.contains(k)).map(|(_, &d)| d).collect()
    };
    Some(Known::new(x.dtype, dims, data))
}

/// `BatchNormalization` in inference form: each channel (axis 1) of `x`
/// normalized by its given mean and variance, scaled and shifted. A weight
/// standardized this way (BiT's convolutions) is computed at export time.
fn batch_norm(node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    if int_attr(node, "training_mode").unwrap_or(0) != 0 || inputs.len() != 5 {
        return None;
    }
    let x = input(0)?;
    let [scale, bias, mean, var] = [1, 2, 3, 4].map(|i| input(i).map(Known::floats));
    let (scale, bias, mean, var) = (scale?, bias?, mean?, var?);
    let channels = *x.dims.get(1)? as usize;
    if !is_float(x.dtype) || [&scale, &bias, &mean, &var].iter().any(|v| v.len() != channels) {
        return None;
    }
    let epsilon = match node.attribute("epsilon") {
        Some(Attribute::Float(e)) => *e as f64,
        None => 1e-5,
        _ => return None,
    };
    let inner = count(&x.dims[2..]);
    let data = x
        .floats()
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let c = i / inner.max(1) % channels;
            (v - mean[c]) / (var[c] + epsilon).sqrt() * scale[c] + bias[c]
        })
        .collect();
    Some(Known::new(x.dtype, x.dims.clone(), Data::Float(data)))
}

/// `Trilu`: the lower (`upper = 0`) or upper triangle of the last two axes,
/// shifted by the diagonal offset `k` (input 1, default 0); the rest zero.
fn trilu(node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let x = input(0)?;
    let k = match (input(1), node.inputs.get(1).is_some_and(|n| !n.is_empty())) {
        (Some(k), true) => *k.int_values()?.first()?,
        (None, true) => return None,
        _ => 0,
    };
    let upper = int_attr(node, "upper").unwrap_or(1) != 0;
    let rank = x.dims.len();
    if rank < 2 {
        return None;
    }
    let (rows, cols) = (x.dims[rank - 2].max(0) as usize, x.dims[rank - 1].max(0) as usize);
    let kept = |flat: usize| {
        let (i, j) = ((flat / cols.max(1)) % rows.max(1), flat % cols.max(1));
        let offset = j as i64 - i as i64;
        if upper {
            offset >= k
        } else {
            offset <= k
        }
    };
    let data = match &x.data {
        Data::Float(v) => {
            Data::Float(v.iter().enumerate().map(|(f, &e)| if kept(f) { e } else { 0.0 }).collect())
        }
        Data::Int(v) => {
            Data::Int(v.iter().enumerate().map(|(f, &e)| if kept(f) { e } else { 0 }).collect())
        }
    };
    Some(Known { dtype: x.dtype, dims: x.dims.clone(), data })
}

/// `Clip(x, min?, max?)`: each bound an optional 0-D input.
fn clip(node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let x = input(0)?;
    let bound = |i: usize| -> Option<Option<Known>> {
        match node.inputs.get(i).filter(|n| !n.is_empty()) {
            None => Some(None),
            Some(_) => {
                let b = input(i)?;
                (b.data.len() == 1 && b.dtype == x.dtype).then(|| Some(b.clone()))
            }
        }
    };
    let (low, high) = (bound(1)?, bound(2)?);
    let data = match &x.data {
        Data::Float(v) => {
            let (lo, hi) = (
                low.map_or(f64::NEG_INFINITY, |b| b.floats()[0]),
                high.map_or(f64::INFINITY, |b| b.floats()[0]),
            );
            Data::Float(v.iter().map(|&e| if e.is_nan() { e } else { e.max(lo).min(hi) }).collect())
        }
        Data::Int(v) => {
            let value = |b: Option<Known>| b.and_then(|b| b.int_values()).map(|v| v[0]);
            let (lo, hi) = (value(low).unwrap_or(i64::MIN), value(high).unwrap_or(i64::MAX));
            Data::Int(v.iter().map(|&e| e.max(lo).min(hi)).collect())
        }
    };
    Some(Known { dtype: x.dtype, dims: x.dims.clone(), data })
}

/// `Tile(x, repeats)`: each axis repeated `repeats[axis]` times.
fn tile(_node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let (x, repeats) = (input(0)?, input(1)?.int_values()?);
    if repeats.len() != x.dims.len() || repeats.iter().any(|&r| r < 0) {
        return None;
    }
    let dims: Vec<i64> = x.dims.iter().zip(&repeats).map(|(d, r)| d * r).collect();
    let total = count(&dims);
    if total > MAX_ELEMENTS {
        return None;
    }
    let (own, out) = (strides(&x.dims), strides(&dims));
    let picks = (0..total).map(|flat| {
        (0..dims.len())
            .map(|k| (flat / out[k] % dims[k] as usize) % x.dims[k] as usize * own[k])
            .sum()
    });
    Some(Known { dtype: x.dtype, data: x.data.pick(picks), dims })
}

#[cfg(test)]
mod tests {
    use super::super::testing::{node, tensor};
    use super::*;

    fn ints(dims: &[i64], values: &[i64]) -> Known {
        Known::ints(dims.to_vec(), values.to_vec())
    }

    /// What `op` computes from `inputs` (all known), with `attributes`.
    fn eval(op: &str, inputs: &[&Known], attributes: Vec<(&str, Attribute)>) -> Option<Known> {
        let names: Vec<String> = (0..inputs.len()).map(|i| format!("in{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let known: Vec<Option<&Known>> = inputs.iter().map(|&k| Some(k)).collect();
        evaluate(&node(op, &names, "out", attributes), &known).map(|mut v| v.remove(0))
    }

    #[test]
    fn arithmetic_broadcasts_and_rounds_to_the_type() {
        let a = tensor(&[2, 1], &[1.0, 2.0]);
        let b = tensor(&[3], &[0.1, 0.2, 0.3]);
        let sum = eval("Add", &[&a, &b], vec![]).unwrap();
        assert_eq!(sum.dims, [2, 3]);
        assert_eq!(sum.floats()[0], 1.1f32 as f64, "float32 values are float32-rounded");
        let less = eval("Less", &[&a, &b], vec![]).unwrap();
        assert_eq!((less.dtype, less.data), (BOOL, Data::Int(vec![0; 6])));
        // ONNX integer division truncates; by zero it is not folded
        assert_eq!(
            eval("Div", &[&ints(&[1], &[-7]), &ints(&[], &[2])], vec![]).unwrap().data,
            Data::Int(vec![-3])
        );
        assert_eq!(eval("Div", &[&ints(&[1], &[1]), &ints(&[], &[0])], vec![]), None);
        assert_eq!(eval("Add", &[&sum, &tensor(&[4], &[0.0; 4])], vec![]), None, "no broadcast");
    }

    #[test]
    fn indexing_ops_count_negative_positions_from_the_end() {
        let x = ints(&[2, 3], &[1, 2, 3, 4, 5, 6]);
        let picked = eval("Gather", &[&x, &ints(&[1], &[-1])], vec![("axis", Attribute::Int(1))]);
        assert_eq!(picked.map(|k| (k.dims, k.data)), Some((vec![2, 1], Data::Int(vec![3, 6]))));
        let (start, end, axes, step) =
            (ints(&[1], &[-1]), ints(&[1], &[i64::MIN]), ints(&[1], &[1]), ints(&[1], &[-2]));
        let reversed = eval("Slice", &[&x, &start, &end, &axes, &step], vec![]).unwrap();
        assert_eq!((reversed.dims, reversed.data), (vec![2, 2], Data::Int(vec![3, 1, 6, 4])));
        let out_of_range =
            eval("Gather", &[&x, &ints(&[1], &[3])], vec![("axis", Attribute::Int(1))]);
        assert_eq!(out_of_range, None);
    }

    #[test]
    fn shape_ops_move_elements_as_onnx_says() {
        let x = ints(&[2, 3], &[1, 2, 3, 4, 5, 6]);
        let t = eval("Transpose", &[&x], vec![]).unwrap();
        assert_eq!((t.dims, t.data), (vec![3, 2], Data::Int(vec![1, 4, 2, 5, 3, 6])));
        let c = eval("Concat", &[&x, &x], vec![("axis", Attribute::Int(-1))]).unwrap();
        assert_eq!(c.dims, [2, 6]);
        assert_eq!(c.int_values().unwrap()[..6], [1, 2, 3, 1, 2, 3]);
        let r = eval("Reshape", &[&x, &ints(&[2], &[0, -1])], vec![]).unwrap();
        assert_eq!(r.dims, [2, 3], "0 copies a dim, -1 takes the rest");
        let e = eval("Expand", &[&ints(&[3, 1], &[7, 8, 9]), &ints(&[2], &[1, 2])], vec![]);
        assert_eq!(e.map(|k| k.data), Some(Data::Int(vec![7, 7, 8, 8, 9, 9])));
        let cond = ints(&[3], &[1, 0, 1]);
        let chosen = eval("Where", &[&cond, &ints(&[], &[1]), &ints(&[3], &[4, 5, 6])], vec![]);
        assert_eq!(chosen.map(|k| k.data), Some(Data::Int(vec![1, 5, 1])));
    }

    #[test]
    fn casts_ranges_and_matmuls() {
        let truncated = tensor(&[3], &[-1.7, 0.5, 2.9]).cast(INT64).unwrap();
        assert_eq!(truncated.data, Data::Int(vec![-1, 0, 2]), "toward zero, as C casts");
        let range = eval("Range", &[&ints(&[], &[5]), &ints(&[], &[0]), &ints(&[], &[-2])], vec![]);
        assert_eq!(range.map(|k| k.data), Some(Data::Int(vec![5, 3, 1])));
        let a = tensor(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let identity = tensor(&[2, 2], &[1.0, 0.0, 0.0, 1.0]);
        let product = eval("MatMul", &[&a, &identity], vec![]).unwrap();
        assert_eq!(product.floats(), a.floats());
        assert_eq!(eval("MatMul", &[&a, &tensor(&[3, 1], &[1.0; 3])], vec![]), None, "2 != 3");
    }
}
