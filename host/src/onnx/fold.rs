//! ── ONNX stage 6, continued: constant folding ──
//!
//! A node whose inputs are all known (Constant nodes, small initializers, or
//! values folded before it) is computed here and becomes an initializer: the
//! rotary tables, position ranges and mask constants of a static export are
//! settled at export time rather than at every run. Then:
//! - a weight read only through `Transpose` (how `linear` reaches `MatMul`)
//!   is stored transposed; the transposition happens while the weight streams
//!   from the `.pt2`'s memory map into the file, so no copy of it is held,
//! - the Constant nodes left become initializers (what ONNX optimizers do: a
//!   value, not a computation).
//!
//! The evaluator knows the ops static shape and position code is made of,
//! in float32/float64 and the integer types (bf16/f16 values are left alone);
//! results past [`MAX_ELEMENTS`] are not materialized. Graph outputs keep
//! their nodes. Arithmetic runs in f64 and is rounded to the value's type.

use std::collections::{HashMap, HashSet};

use super::emit::{Bytes, Initializer};
use super::proto as p;
use super::{Attribute, Node};

/// Largest folded result, in elements: past it, a computed table costs more
/// file than the nodes it replaces.
pub const MAX_ELEMENTS: usize = 1 << 20;
/// Initializers up to this many elements are read as known values (buffers
/// such as rotary `inv_freq`); weights are not.
const SMALL_INITIALIZER: usize = 1 << 12;

// ONNX `TensorProto.DataType` codes.
const FLOAT: i32 = 1;
const UINT8: i32 = 2;
const INT8: i32 = 3;
const UINT16: i32 = 4;
const INT16: i32 = 5;
const INT32: i32 = 6;
const INT64: i32 = 7;
const BOOL: i32 = 9;
const DOUBLE: i32 = 11;
const UINT32: i32 = 12;
const UINT64: i32 = 13;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FoldReport {
    /// Nodes computed at export time.
    pub folded: usize,
    /// Weights stored transposed instead of transposed at run time.
    pub transposed: usize,
    /// Constant nodes turned into initializers.
    pub lifted: usize,
}

/// A known tensor: floats in f64, every integer type and bool in i64.
#[derive(Debug, Clone, PartialEq)]
pub struct Known {
    dtype: i32,
    dims: Vec<i64>,
    data: Data,
}

#[derive(Debug, Clone, PartialEq)]
enum Data {
    Float(Vec<f64>),
    Int(Vec<i64>),
}

impl Data {
    fn len(&self) -> usize {
        match self {
            Data::Float(v) => v.len(),
            Data::Int(v) => v.len(),
        }
    }

    /// The elements at `indices`, in order.
    fn pick(&self, indices: impl Iterator<Item = usize>) -> Data {
        match self {
            Data::Float(v) => Data::Float(indices.map(|i| v[i]).collect()),
            Data::Int(v) => Data::Int(indices.map(|i| v[i]).collect()),
        }
    }
}

fn is_float(dtype: i32) -> bool {
    matches!(dtype, FLOAT | DOUBLE)
}

fn known_type(dtype: i32) -> bool {
    matches!(dtype, FLOAT | DOUBLE | UINT8 | INT8 | UINT16 | INT16 | INT32 | INT64 | BOOL | UINT32 | UINT64)
}

fn count(dims: &[i64]) -> usize {
    dims.iter().map(|&d| d.max(0) as usize).product()
}

impl Known {
    fn new(dtype: i32, dims: Vec<i64>, data: Data) -> Known {
        Known { dtype, dims, data }.rounded()
    }

    fn ints(dims: Vec<i64>, values: Vec<i64>) -> Known {
        Known { dtype: INT64, dims, data: Data::Int(values) }
    }

    /// Values as the type holds them: f32 rounding, integer wrap, bool 0/1.
    fn rounded(mut self) -> Known {
        match (&mut self.data, self.dtype) {
            (Data::Float(v), FLOAT) => v.iter_mut().for_each(|x| *x = *x as f32 as f64),
            (Data::Int(v), BOOL) => v.iter_mut().for_each(|x| *x = (*x != 0) as i64),
            (Data::Int(v), INT32) => v.iter_mut().for_each(|x| *x = *x as i32 as i64),
            (Data::Int(v), INT16) => v.iter_mut().for_each(|x| *x = *x as i16 as i64),
            (Data::Int(v), INT8) => v.iter_mut().for_each(|x| *x = *x as i8 as i64),
            (Data::Int(v), UINT8) => v.iter_mut().for_each(|x| *x = *x as u8 as i64),
            (Data::Int(v), UINT16) => v.iter_mut().for_each(|x| *x = *x as u16 as i64),
            (Data::Int(v), UINT32) => v.iter_mut().for_each(|x| *x = *x as u32 as i64),
            _ => {}
        }
        self
    }

    fn floats(&self) -> Vec<f64> {
        match &self.data {
            Data::Float(v) => v.clone(),
            Data::Int(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }

    fn int_values(&self) -> Option<Vec<i64>> {
        match &self.data {
            Data::Int(v) => Some(v.clone()),
            Data::Float(_) => None,
        }
    }

    /// From raw little-endian bytes of an initializer.
    pub fn from_bytes(dtype: i32, dims: &[i64], bytes: &[u8]) -> Option<Known> {
        if !known_type(dtype) {
            return None;
        }
        let n = count(dims);
        let size = element_size(dtype);
        if bytes.len() != n * size {
            return None;
        }
        let chunks = bytes.chunks_exact(size);
        let data = match dtype {
            FLOAT => Data::Float(chunks.map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect()),
            DOUBLE => Data::Float(chunks.map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()),
            INT64 | UINT64 => Data::Int(chunks.map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()),
            INT32 => Data::Int(chunks.map(|c| i32::from_le_bytes(c.try_into().unwrap()) as i64).collect()),
            UINT32 => Data::Int(chunks.map(|c| u32::from_le_bytes(c.try_into().unwrap()) as i64).collect()),
            INT16 => Data::Int(chunks.map(|c| i16::from_le_bytes(c.try_into().unwrap()) as i64).collect()),
            UINT16 => Data::Int(chunks.map(|c| u16::from_le_bytes(c.try_into().unwrap()) as i64).collect()),
            INT8 => Data::Int(chunks.map(|c| c[0] as i8 as i64).collect()),
            _ => Data::Int(chunks.map(|c| c[0] as i64).collect()), // uint8, bool
        };
        Some(Known { dtype, dims: dims.to_vec(), data })
    }

    /// Raw little-endian bytes, as an initializer stores them.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.data.len() * element_size(self.dtype));
        match (&self.data, self.dtype) {
            (Data::Float(v), FLOAT) => v.iter().for_each(|x| out.extend((*x as f32).to_le_bytes())),
            (Data::Float(v), _) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            (Data::Int(v), INT64 | UINT64) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            (Data::Int(v), INT32 | UINT32) => v.iter().for_each(|x| out.extend((*x as i32).to_le_bytes())),
            (Data::Int(v), INT16 | UINT16) => v.iter().for_each(|x| out.extend((*x as i16).to_le_bytes())),
            (Data::Int(v), _) => v.iter().for_each(|x| out.push(*x as u8)),
        }
        out
    }

    fn initializer<'a>(&self, name: &str) -> Initializer<'a> {
        let header = p::TensorProto { dims: self.dims.clone(), data_type: Some(self.dtype), name: Some(name.into()), ..Default::default() };
        Initializer { header, bytes: Bytes::Owned(self.to_bytes()) }
    }

    fn cast(&self, to: i32) -> Option<Known> {
        if !known_type(to) {
            return None;
        }
        let data = match (&self.data, is_float(to)) {
            (Data::Float(v), true) => Data::Float(v.clone()),
            (Data::Int(v), true) => Data::Float(v.iter().map(|&x| x as f64).collect()),
            (Data::Int(v), false) => Data::Int(v.clone()),
            // to bool: nonzero; to an integer: truncation toward zero, as C casts
            (Data::Float(v), false) if to == BOOL => Data::Int(v.iter().map(|&x| (x != 0.0) as i64).collect()),
            (Data::Float(v), false) => Data::Int(v.iter().map(|&x| x.trunc() as i64).collect()),
        };
        Some(Known::new(to, self.dims.clone(), data))
    }
}

fn element_size(dtype: i32) -> usize {
    match dtype {
        DOUBLE | INT64 | UINT64 => 8,
        FLOAT | INT32 | UINT32 => 4,
        INT16 | UINT16 => 2,
        _ => 1,
    }
}

/// Row-major strides of `dims`.
fn strides(dims: &[i64]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1].max(0) as usize;
    }
    s
}

fn broadcast_dims(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let rank = a.len().max(b.len());
    let at = |d: &[i64], i: usize| if i + d.len() >= rank { d[i + d.len() - rank] } else { 1 };
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// For each element of a tensor of `out` dims, the index of the element of a
/// tensor of `dims` broadcast to it.
fn broadcast_indices(dims: &[i64], out: &[i64]) -> Vec<usize> {
    let rank = out.len();
    let padded: Vec<i64> = std::iter::repeat_n(1, rank - dims.len()).chain(dims.iter().copied()).collect();
    let own = strides(&padded);
    let total = count(out);
    let mut result = Vec::with_capacity(total);
    let mut index = vec![0i64; rank];
    for _ in 0..total {
        result.push((0..rank).map(|k| if padded[k] == 1 { 0 } else { index[k] as usize * own[k] }).sum());
        for k in (0..rank).rev() {
            index[k] += 1;
            if index[k] < out[k] {
                break;
            }
            index[k] = 0;
        }
    }
    result
}

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

fn axis(a: i64, rank: usize) -> Option<usize> {
    let a = if a < 0 { a + rank as i64 } else { a };
    (0..rank as i64).contains(&a).then_some(a as usize)
}

/// The value of a Constant node, for the attribute forms translations emit.
fn constant_value(node: &Node) -> Option<Known> {
    let (name, value) = node.attributes.first()?;
    match (name.as_str(), value) {
        ("value_int", Attribute::Int(i)) => Some(Known::ints(vec![], vec![*i])),
        ("value_ints", Attribute::Ints(v)) => Some(Known::ints(vec![v.len() as i64], v.clone())),
        ("value_float", Attribute::Float(f)) => Some(Known::new(FLOAT, vec![], Data::Float(vec![*f as f64]))),
        ("value_floats", Attribute::Floats(v)) => Some(Known::new(FLOAT, vec![v.len() as i64], Data::Float(v.iter().map(|&f| f as f64).collect()))),
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
fn evaluate(node: &Node, inputs: &[Option<&Known>]) -> Option<Vec<Known>> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let op = node.op_type.as_str();
    let one = |k: Known| Some(vec![k]);
    match op {
        "Constant" => one(constant_value(node)?),
        "Identity" => one(input(0)?.clone()),
        "Cast" => one(input(0)?.cast(int_attr(node, "to")? as i32)?),
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Max" | "Min" | "Equal" | "Less" | "LessOrEqual" | "Greater" | "GreaterOrEqual" | "And" | "Or"
            if inputs.len() == 2 =>
        {
            one(binary(input(0)?, input(1)?, op)?)
        }
        "Neg" | "Cos" | "Sin" | "Sqrt" | "Reciprocal" | "Exp" | "Log" | "Abs" | "Floor" | "Ceil" | "Tanh" | "Sigmoid" | "Not" | "Sign" => {
            one(unary(input(0)?, op)?)
        }
        "Unsqueeze" | "Squeeze" => {
            let x = input(0)?;
            let axes = match input(1) {
                Some(a) => a.int_values()?,
                None if op == "Squeeze" => x.dims.iter().enumerate().filter(|(_, &d)| d == 1).map(|(i, _)| i as i64).collect(),
                None => return None,
            };
            let mut dims = x.dims.clone();
            if op == "Unsqueeze" {
                let rank = dims.len() + axes.len();
                let mut sorted: Vec<usize> = axes.iter().map(|&a| axis(a, rank)).collect::<Option<_>>()?;
                sorted.sort();
                sorted.iter().for_each(|&a| dims.insert(a, 1));
            } else {
                let mut sorted: Vec<usize> = axes.iter().map(|&a| axis(a, dims.len())).collect::<Option<_>>()?;
                sorted.sort();
                for &a in sorted.iter().rev() {
                    if dims[a] != 1 {
                        return None;
                    }
                    dims.remove(a);
                }
            }
            one(Known { dims, ..x.clone() })
        }
        "Reshape" => {
            let x = input(0)?;
            let shape = input(1)?.int_values()?;
            if int_attr(node, "allowzero") == Some(1) {
                return None;
            }
            let mut dims: Vec<i64> = shape.iter().enumerate().map(|(i, &d)| if d == 0 { x.dims.get(i).copied().unwrap_or(0) } else { d }).collect();
            let known: i64 = dims.iter().filter(|&&d| d != -1).product();
            if let Some(slot) = dims.iter_mut().find(|d| **d == -1) {
                *slot = if known == 0 { 0 } else { count(&x.dims) as i64 / known };
            }
            (count(&dims) == count(&x.dims)).then_some(())?;
            one(Known { dims, ..x.clone() })
        }
        "Concat" => {
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
                Data::Float(_) => Data::Float(picks.iter().map(|&(k, i)| if let Data::Float(v) = &parts[k].data { v[i] } else { 0.0 }).collect()),
                Data::Int(_) => Data::Int(picks.iter().map(|&(k, i)| if let Data::Int(v) = &parts[k].data { v[i] } else { 0 }).collect()),
            };
            one(Known { dtype: first.dtype, dims, data })
        }
        "Transpose" => {
            let x = input(0)?;
            let perm: Vec<usize> = match ints_attr(node, "perm") {
                Some(p) => p.iter().map(|&a| axis(a, x.dims.len())).collect::<Option<_>>()?,
                None => (0..x.dims.len()).rev().collect(),
            };
            one(permute(x, &perm)?)
        }
        "Expand" => {
            let x = input(0)?;
            let shape = input(1)?.int_values()?;
            let dims = broadcast_dims(&x.dims, &shape)?;
            if count(&dims) > MAX_ELEMENTS {
                return None;
            }
            let picks = broadcast_indices(&x.dims, &dims);
            one(Known { dtype: x.dtype, data: x.data.pick(picks.into_iter()), dims })
        }
        "Where" => {
            let (c, x, y) = (input(0)?, input(1)?, input(2)?);
            let dims = broadcast_dims(&broadcast_dims(&c.dims, &x.dims)?, &y.dims)?;
            if count(&dims) > MAX_ELEMENTS || x.dtype != y.dtype {
                return None;
            }
            let condition = c.int_values()?;
            let (ic, ix, iy) = (broadcast_indices(&c.dims, &dims), broadcast_indices(&x.dims, &dims), broadcast_indices(&y.dims, &dims));
            let data = match (&x.data, &y.data) {
                (Data::Float(a), Data::Float(b)) => Data::Float((0..ic.len()).map(|k| if condition[ic[k]] != 0 { a[ix[k]] } else { b[iy[k]] }).collect()),
                (Data::Int(a), Data::Int(b)) => Data::Int((0..ic.len()).map(|k| if condition[ic[k]] != 0 { a[ix[k]] } else { b[iy[k]] }).collect()),
                _ => return None,
            };
            one(Known { dtype: x.dtype, dims, data })
        }
        "Range" => {
            let (start, limit, delta) = (input(0)?, input(1)?, input(2)?);
            let (s, l, d) = (start.floats().first().copied()?, limit.floats().first().copied()?, delta.floats().first().copied()?);
            if d == 0.0 {
                return None;
            }
            let n = ((l - s) / d).ceil().max(0.0) as usize;
            if n > MAX_ELEMENTS {
                return None;
            }
            let values: Vec<f64> = (0..n).map(|i| s + i as f64 * d).collect();
            let data = if is_float(start.dtype) { Data::Float(values) } else { Data::Int(values.iter().map(|&v| v as i64).collect()) };
            one(Known::new(start.dtype, vec![n as i64], data))
        }
        "Shape" => {
            let x = input(0)?;
            let rank = x.dims.len() as i64;
            let clamp = |v: i64| (if v < 0 { v + rank } else { v }).clamp(0, rank) as usize;
            let (start, end) = (clamp(int_attr(node, "start").unwrap_or(0)), clamp(int_attr(node, "end").unwrap_or(rank)));
            let dims = x.dims.get(start..end.max(start))?.to_vec();
            one(Known::ints(vec![dims.len() as i64], dims))
        }
        "Gather" => {
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
            let dims: Vec<i64> = x.dims[..a].iter().chain(&indices.dims).chain(&x.dims[a + 1..]).copied().collect();
            one(Known { dtype: x.dtype, data: x.data.pick(picks.into_iter()), dims })
        }
        "Slice" => {
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
                let clamp = |v: i64, low: i64, high: i64| (if v < 0 { v.saturating_add(size) } else { v }).clamp(low, high);
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
            one(Known { dtype: x.dtype, data: x.data.pick(picks.into_iter()), dims })
        }
        "MatMul" => {
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
            let (ia, ib) = (broadcast_indices(&a.dims[..a.dims.len() - 2], &batch), broadcast_indices(&b.dims[..b.dims.len() - 2], &batch));
            let (x, y) = (a.floats(), b.floats());
            let (m, k, n) = (m as usize, k as usize, n as usize);
            if ia.len() * m * n > MAX_ELEMENTS {
                return None;
            }
            let mut out = Vec::with_capacity(ia.len() * m * n);
            for (&ba, &bb) in ia.iter().zip(&ib) {
                for i in 0..m {
                    for j in 0..n {
                        out.push((0..k).map(|t| x[ba * m * k + i * k + t] * y[bb * k * n + t * n + j]).sum());
                    }
                }
            }
            let dims: Vec<i64> = batch.into_iter().chain([m as i64, n as i64]).collect();
            one(Known::new(a.dtype, dims, Data::Float(out)))
        }
        _ => None,
    }
}

/// Folds `nodes` (main graph, topological order). `initializers` are read as
/// known values where small, and gain the folded values; `keep` are graph
/// outputs, whose producers stay.
pub fn fold<'a>(nodes: &mut Vec<Node>, initializers: &mut Vec<Initializer<'a>>, keep: &HashSet<&str>) -> FoldReport {
    let mut report = FoldReport::default();
    let mut known: HashMap<String, Known> = HashMap::new();
    for init in initializers.iter() {
        let (Some(name), Some(dtype)) = (&init.header.name, init.header.data_type) else { continue };
        if count(&init.header.dims) <= SMALL_INITIALIZER {
            if let Some(k) = Known::from_bytes(dtype, &init.header.dims, &init.bytes.to_vec()) {
                known.insert(name.clone(), k);
            }
        }
    }
    let mut kept = Vec::with_capacity(nodes.len());
    let mut new_initializers = Vec::new();
    for node in std::mem::take(nodes) {
        let inputs: Vec<Option<&Known>> = node.inputs.iter().map(|i| known.get(i)).collect();
        let foldable = node.domain.is_empty()
            && node.function.is_none()
            && node.outputs.iter().all(|o| !keep.contains(o.as_str()))
            && inputs.iter().zip(&node.inputs).all(|(k, name)| k.is_some() || name.is_empty());
        let values = if foldable { evaluate(&node, &inputs) } else { None };
        match values {
            Some(values) if values.len() == node.outputs.len() && values.iter().all(|v| v.data.len() <= MAX_ELEMENTS) => {
                if node.op_type != "Constant" {
                    report.folded += 1;
                }
                for (name, value) in node.outputs.iter().zip(values) {
                    known.insert(name.clone(), value);
                }
                // A Constant stays a node until the end (lifted below if still read).
                if node.op_type == "Constant" {
                    kept.push(node);
                } else {
                    new_initializers.push(node.outputs.clone());
                }
            }
            _ => kept.push(node),
        }
    }
    // Every folded value still read becomes an initializer; Constant nodes still read are lifted.
    let read: HashSet<String> = kept.iter().flat_map(|n| n.inputs.iter().cloned()).collect();
    let existing: HashSet<String> = initializers.iter().filter_map(|i| i.header.name.clone()).collect();
    for outputs in new_initializers {
        for name in outputs.iter().filter(|o| read.contains(*o) && !existing.contains(*o)) {
            initializers.push(known[name].initializer(name));
        }
    }
    kept.retain(|n| {
        let liftable = n.op_type == "Constant" && n.outputs.len() == 1 && !keep.contains(n.outputs[0].as_str()) && known.contains_key(&n.outputs[0]);
        if liftable && read.contains(&n.outputs[0]) {
            initializers.push(known[&n.outputs[0]].initializer(&n.outputs[0]));
            report.lifted += 1;
        }
        !liftable
    });
    report.transposed = transpose_weights(&mut kept, initializers, keep);
    *nodes = kept;
    report
}

/// `Transpose(w, perm=[1, 0])` of a 2-D initializer nothing else reads: the
/// initializer is stored transposed (under the node's output name) and the
/// node goes.
fn transpose_weights(nodes: &mut Vec<Node>, initializers: &mut [Initializer], keep: &HashSet<&str>) -> usize {
    let mut readers: HashMap<&str, usize> = HashMap::new();
    for input in nodes.iter().flat_map(|n| n.inputs.iter()) {
        *readers.entry(input.as_str()).or_default() += 1;
    }
    let index: HashMap<String, usize> = initializers.iter().enumerate().filter_map(|(i, init)| Some((init.header.name.clone()?, i))).collect();
    let mut done = HashSet::new();
    for (position, node) in nodes.iter().enumerate() {
        let is_swap = node.op_type == "Transpose"
            && node.domain.is_empty()
            && node.inputs.len() == 1
            && matches!(node.attribute("perm"), Some(Attribute::Ints(p)) if p == &[1, 0]);
        if !is_swap || keep.contains(node.outputs[0].as_str()) || keep.contains(node.inputs[0].as_str()) {
            continue;
        }
        let Some(&i) = index.get(&node.inputs[0]) else { continue };
        let init = &mut initializers[i];
        if readers.get(node.inputs[0].as_str()) != Some(&1) || init.header.dims.len() != 2 {
            continue;
        }
        let (rows, cols) = (init.header.dims[0] as usize, init.header.dims[1] as usize);
        let element = init.bytes.len() / (rows * cols).max(1);
        let Bytes::Mapped(source) = init.bytes else { continue };
        if ![1, 2, 4, 8].contains(&element) || element * rows * cols != source.len() {
            continue;
        }
        init.bytes = Bytes::Transposed { source, rows, cols, element };
        init.header.dims = vec![cols as i64, rows as i64];
        init.header.name = Some(node.outputs[0].clone());
        done.insert(position);
    }
    let mut position = 0;
    nodes.retain(|_| {
        position += 1;
        !done.contains(&(position - 1))
    });
    done.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(op: &str, inputs: &[&str], output: &str, attributes: Vec<(&str, Attribute)>) -> Node {
        Node {
            op_type: op.into(),
            domain: String::new(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec![output.into()],
            attributes: attributes.into_iter().map(|(n, a)| (n.to_string(), a)).collect(),
            function: None,
        }
    }

    fn floats_of(init: &Initializer) -> Vec<f32> {
        init.bytes.to_vec().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    }

    #[test]
    fn a_rotary_table_is_computed_at_export_time() {
        // cos(range(0, 3) * 0.5) as float, read by a Mul with the input x.
        let mut nodes = vec![
            node("Constant", &[], "zero", vec![("value_int", Attribute::Int(0))]),
            node("Constant", &[], "three", vec![("value_int", Attribute::Int(3))]),
            node("Constant", &[], "one", vec![("value_int", Attribute::Int(1))]),
            node("Range", &["zero", "three", "one"], "positions", vec![]),
            node("Cast", &["positions"], "as_float", vec![("to", Attribute::Int(1))]),
            node("Constant", &[], "half", vec![("value_float", Attribute::Float(0.5))]),
            node("Mul", &["as_float", "half"], "angles", vec![]),
            node("Cos", &["angles"], "table", vec![]),
            node("Mul", &["x", "table"], "y", vec![]),
        ];
        let mut initializers = Vec::new();
        let report = fold(&mut nodes, &mut initializers, &HashSet::from(["y"]));
        assert_eq!(report.folded, 4);
        assert_eq!(nodes.len(), 1, "only the Mul with the input is left: {nodes:?}");
        assert_eq!(initializers.len(), 1);
        assert_eq!(initializers[0].header.name.as_deref(), Some("table"));
        let expected: Vec<f32> = [0.0f64, 0.5, 1.0].iter().map(|a| a.cos() as f32).collect();
        assert_eq!(floats_of(&initializers[0]), expected);
    }

    #[test]
    fn shapes_slices_and_gathers_fold_and_graph_outputs_keep_their_nodes() {
        let mut nodes = vec![
            node("Constant", &[], "v", vec![("value_ints", Attribute::Ints(vec![10, 20, 30, 40]))]),
            node("Constant", &[], "s", vec![("value_ints", Attribute::Ints(vec![1]))]),
            node("Constant", &[], "e", vec![("value_ints", Attribute::Ints(vec![i64::MAX]))]),
            node("Slice", &["v", "s", "e"], "tail", vec![]),
            node("Constant", &[], "i", vec![("value_ints", Attribute::Ints(vec![-1, 0]))]),
            node("Gather", &["tail", "i"], "picked", vec![("axis", Attribute::Int(0))]),
            node("Reshape", &["x", "picked"], "out", vec![]),
            node("Neg", &["v"], "negated", vec![]),
        ];
        let mut initializers = Vec::new();
        fold(&mut nodes, &mut initializers, &HashSet::from(["out", "negated"]));
        let ops: Vec<&str> = nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops, ["Reshape", "Neg"], "the graph output `negated` keeps its node");
        let picked = initializers.iter().find(|i| i.header.name.as_deref() == Some("picked")).unwrap();
        assert_eq!(Known::from_bytes(INT64, &picked.header.dims, &picked.bytes.to_vec()).unwrap().data, Data::Int(vec![40, 20]));
        assert!(initializers.iter().any(|i| i.header.name.as_deref() == Some("v")), "a Constant still read is lifted");
    }

    #[test]
    fn a_weight_read_only_through_a_transpose_is_stored_transposed() {
        // Larger than the initializers read as known values, as weights are.
        let (rows, cols) = (64usize, 80usize);
        let weight: Vec<u8> = (0..(rows * cols) as u32).flat_map(|v| (v as f32).to_le_bytes()).collect();
        let header = p::TensorProto { dims: vec![rows as i64, cols as i64], data_type: Some(FLOAT), name: Some("w".into()), ..Default::default() };
        let mut initializers = vec![Initializer { header, bytes: Bytes::Mapped(&weight) }];
        let mut nodes = vec![
            node("Transpose", &["w"], "wt", vec![("perm", Attribute::Ints(vec![1, 0]))]),
            node("MatMul", &["x", "wt"], "y", vec![]),
        ];
        let report = fold(&mut nodes, &mut initializers, &HashSet::from(["y"]));
        assert_eq!(report.transposed, 1);
        assert_eq!(nodes.len(), 1);
        assert_eq!(initializers[0].header.dims, [cols as i64, rows as i64]);
        assert_eq!(initializers[0].header.name.as_deref(), Some("wt"));
        let transposed = floats_of(&initializers[0]);
        for (j, i) in [(0, 0), (0, 1), (79, 63), (65, 3)] {
            assert_eq!(transposed[j * rows + i], (i * cols + j) as f32, "wt[{j}][{i}] = w[{i}][{j}]");
        }
    }
}
