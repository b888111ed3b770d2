//! GELU as ONNX Runtime's fused kernels, on float tensors:
//!
//! - the erf GELU (`Gelu`, `approximate` "none": torch's `nn.GELU` and
//!   `F.gelu` as translated) of a biased input `Add(x, bias)` becomes
//!   `com.microsoft::BiasGelu(x, bias)`;
//! - the tanh approximation `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`
//!   becomes `com.microsoft::FastGelu(x)`, or `FastGelu(x, bias)` over a
//!   biased input: as `Gelu` with `approximate` "tanh" (`gelu_pytorch_tanh`,
//!   Gemma's GeGLU) or spelled out in `Pow`, `Mul`, `Add` and `Tanh`
//!   (`gelu_new`: GPT-2, Phi, GPT-J; `x·0.7978845608·(1 + 0.044715·x·x)`:
//!   `gelu_fast`, BLOOM). The formula is recognized by its value, not its
//!   spelling: every `Add`, `Sub`, `Mul`, `Div` by a constant, `Neg` and
//!   small integer `Pow` between `x`, the `Tanh` and the result is expanded
//!   into a polynomial in `x` and the `Tanh`'s output, so any association
//!   or order of the factors matches.
//!
//! The exact form spelled out, `0.5·x·(1 + erf(x/√2))` (as translated
//! below opset 20), is matched the same way: `BiasGelu` over a biased input,
//! else `com.microsoft::Gelu`.
//!
//! A bias is a 1-D float tensor the size of `x`'s last axis (ONNX Runtime's
//! kernels broadcast it over the others), added to a computed `x` as wide,
//! whose sum only the GELU reads. An erf `Gelu` without one
//! stays the ONNX op: ONNX Runtime's `com.microsoft::Gelu` measured within
//! noise of its `Gelu` (opset 20) kernel, so the rename buys nothing.
//! Targets `Gelu`, and `Tanh` and `Erf` for the spelled-out forms.

use std::collections::BTreeMap;

use hfx_sdk::prelude::*;

const FLOAT: i32 = 1;
/// `√(2/π)` and the cubic term's factor of the tanh approximation.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const CUBIC: f64 = 0.044_715;
/// How far the coefficients of a spelled-out formula may be from the exact
/// ones, relatively (BLOOM writes `0.79788456`).
const TOLERANCE: f64 = 1e-6;
/// The most operations between the formula's input and its `Tanh` or result.
const DEPTH: u32 = 8;
/// The most values tried as the formula's input.
const CANDIDATES: usize = 16;

#[hfx_sdk::onnx_ir_fix(targets = ["Gelu", "Tanh", "Erf"])]
fn fuse_gelu(model: &Model, node: OnnxNodeId) -> Result<bool> {
    if !model.is_default_domain(node)? {
        return Ok(false);
    }
    let found = match model.op_type(node)?.as_str() {
        "Gelu" => gelu_op(model, node)?,
        "Tanh" => formula(model, node, true)?,
        _ => formula(model, node, false)?,
    };
    let Some(gelu) = found else { return Ok(false) };
    // The input's type, or the result's (a GELU keeps it) when a translation left the input untyped.
    let elem_type = |v: &str| model.value_type(v).map(|t| t.elem_type);
    if elem_type(&gelu.x).or_else(|| elem_type(&gelu.output)) != Some(FLOAT) {
        return Ok(false);
    }
    let bias = split_bias(model, &gelu.x, &gelu.nodes)?;
    let op = match (gelu.tanh, &bias) {
        (true, _) => "FastGelu",
        (false, Some(_)) => "BiasGelu",
        // The ONNX op is one node already.
        (false, None) if gelu.nodes.len() == 1 => return Ok(false),
        (false, None) => "Gelu",
    };
    let inputs = match bias {
        Some((input, bias)) => vec![input, bias],
        None => vec![gelu.x.clone()],
    };
    model.import_opset("com.microsoft", 1)?;
    let (_, outputs) =
        model.add_node(op, "com.microsoft", &inputs, &[format!("{}_fused", gelu.output)], &[])?;
    model.replace_uses(&gelu.output, &outputs[0])?;
    model.remove_rerouted(gelu.end)?;
    Ok(true)
}

/// A matched GELU: its input, whether it is the tanh approximation, its
/// result, the node computing it, and the nodes between (which may read `x`).
struct Gelu {
    x: String,
    tanh: bool,
    output: String,
    end: OnnxNodeId,
    nodes: Vec<OnnxNodeId>,
}

/// The ONNX `Gelu` op, either approximation.
fn gelu_op(model: &Model, gelu: OnnxNodeId) -> Result<Option<Gelu>> {
    let tanh = match model.attribute(gelu, "approximate")? {
        None => false,
        Some(Attribute::Str(a)) if a == "none" => false,
        Some(Attribute::Str(a)) if a == "tanh" => true,
        Some(_) => return Ok(None),
    };
    let inputs = model.inputs(gelu)?;
    let [x] = inputs.as_slice() else { return Ok(None) };
    let output = model.first_output(gelu)?;
    Ok(Some(Gelu { x: x.clone(), tanh, output, end: gelu, nodes: vec![gelu] }))
}

/// GELU spelled out around `node`, its `Tanh` (the approximation) or `Erf`
/// (the exact form, as translated below opset 20): its input a polynomial
/// in some `x` reached backwards from it (`√(2/π)·x + √(2/π)·0.044715·x³`,
/// or `x/√2`), and a node after it (each step the only reader of the last)
/// whose output is `0.5·x + 0.5·x·t`, `t` its result.
fn formula(model: &Model, node: OnnxNodeId, tanh: bool) -> Result<Option<Gelu>> {
    let inputs = model.inputs(node)?;
    let [inner] = inputs.as_slice() else { return Ok(None) };
    let t = model.first_output(node)?;
    let expected_inner: &[((u32, u32), f64)] = if tanh {
        &[((1, 0), SQRT_2_OVER_PI), ((3, 0), SQRT_2_OVER_PI * CUBIC)]
    } else {
        &[((1, 0), std::f64::consts::FRAC_1_SQRT_2)]
    };
    let expected_outer = [((1, 0), 0.5), ((1, 1), 0.5)];
    for x in candidates(model, inner)? {
        let mut walk = Walk::new(model, &x, None);
        if !walk.poly(inner, DEPTH)?.is_some_and(|p| same(&p, expected_inner)) {
            continue;
        }
        let mut nodes = walk.nodes;
        nodes.push(node);
        let mut last = t.clone();
        for _ in 0..DEPTH {
            if model.is_graph_output(&last) {
                break;
            }
            let readers = model.consumers(&last);
            let [reader] = readers.as_slice() else { break };
            let output = model.first_output(*reader)?;
            let mut walk = Walk::new(model, &x, Some(&t));
            let Some(p) = walk.poly(&output, DEPTH)? else { break };
            nodes.extend(walk.nodes);
            if same(&p, &expected_outer) {
                return Ok(Some(Gelu { x, tanh, output, end: *reader, nodes }));
            }
            last = output;
        }
    }
    Ok(None)
}

/// Values reached backwards from `value` through the arithmetic a formula
/// is made of, nearest first: the formula's input is one of them.
fn candidates(model: &Model, value: &str) -> Result<Vec<String>> {
    let mut found: Vec<String> = vec![];
    let mut pending = std::collections::VecDeque::from([value.to_string()]);
    while let Some(v) = pending.pop_front() {
        if found.len() >= CANDIDATES {
            break;
        }
        let Some(node) = model.producer(&v) else { continue };
        if !ARITHMETIC.contains(&model.op_type(node)?.as_str()) {
            continue;
        }
        for input in model.inputs(node)? {
            if !found.contains(&input) && model.constant(&input, 1).is_none() {
                found.push(input.clone());
                pending.push_back(input);
            }
        }
    }
    Ok(found)
}

const ARITHMETIC: [&str; 6] = ["Add", "Sub", "Mul", "Div", "Neg", "Pow"];

/// A polynomial in the formula's input `x` and the `Tanh`'s or `Erf`'s output `t`:
/// (exponent of `x`, exponent of `t`) → coefficient.
type Poly = BTreeMap<(u32, u32), f64>;

/// The highest exponent a formula's polynomial may reach.
const DEGREE: u32 = 4;

/// Whether `p` has exactly `terms` (within the tolerance), nothing else.
fn same(p: &Poly, terms: &[((u32, u32), f64)]) -> bool {
    let close = |a: f64, b: f64| (a - b).abs() <= TOLERANCE * b.abs().max(1.0);
    terms.iter().all(|(k, c)| p.get(k).is_some_and(|v| close(*v, *c)))
        && p.iter().all(|(k, v)| terms.iter().any(|(t, _)| t == k) || v.abs() <= TOLERANCE)
}

fn sum(p: &Poly, q: &Poly, sign: f64) -> Poly {
    let mut r = p.clone();
    for (k, v) in q {
        *r.entry(*k).or_default() += sign * v;
    }
    r
}

fn product(p: &Poly, q: &Poly) -> Option<Poly> {
    let mut r = Poly::new();
    for ((px, pt), a) in p {
        for ((qx, qt), b) in q {
            let key = (px + qx, pt + qt);
            if key.0 > DEGREE || key.1 > DEGREE {
                return None;
            }
            *r.entry(key).or_default() += a * b;
        }
    }
    Some(r)
}

fn scaled(p: &Poly, by: f64) -> Poly {
    p.iter().map(|(k, v)| (*k, v * by)).collect()
}

/// Expands values into polynomials in `x` (and `t`), recording the nodes it
/// went through.
struct Walk<'m> {
    model: &'m Model,
    x: String,
    t: Option<String>,
    /// The rank of `x`: a constant of more axes would broadcast the result.
    rank: Option<usize>,
    nodes: Vec<OnnxNodeId>,
}

impl<'m> Walk<'m> {
    fn new(model: &'m Model, x: &str, t: Option<&str>) -> Self {
        let rank = model.shape(x).map(|s| s.len());
        Walk { model, x: x.to_string(), t: t.map(String::from), rank, nodes: vec![] }
    }

    /// A one-element constant that does not broadcast `x` to more axes (an
    /// integer one can only be a `Pow`'s exponent: ONNX arithmetic takes one type).
    fn scalar(&self, value: &str) -> Option<f64> {
        let c = self.model.constant(value, 1)?;
        if !c.dims.is_empty() && self.rank.is_none_or(|rank| c.dims.len() > rank) {
            return None;
        }
        match c.data {
            ConstantData::Floats(v) => v.first().copied(),
            ConstantData::Ints(v) => v.first().map(|&i| i as f64),
        }
    }

    fn poly(&mut self, value: &str, depth: u32) -> Result<Option<Poly>> {
        if value == self.x {
            return Ok(Some(Poly::from([((1, 0), 1.0)])));
        }
        if self.t.as_deref() == Some(value) {
            return Ok(Some(Poly::from([((0, 1), 1.0)])));
        }
        if let Some(c) = self.scalar(value) {
            return Ok(Some(Poly::from([((0, 0), c)])));
        }
        let Some(node) = self.model.producer(value) else { return Ok(None) };
        if depth == 0 || !self.model.is_default_domain(node)? {
            return Ok(None);
        }
        let inputs = self.model.inputs(node)?;
        let op = self.model.op_type(node)?;
        let result = match (op.as_str(), inputs.as_slice()) {
            ("Add" | "Sub" | "Mul", [a, b]) => {
                let (Some(p), Some(q)) = (self.poly(a, depth - 1)?, self.poly(b, depth - 1)?)
                else {
                    return Ok(None);
                };
                match op.as_str() {
                    "Add" => Some(sum(&p, &q, 1.0)),
                    "Sub" => Some(sum(&p, &q, -1.0)),
                    _ => product(&p, &q),
                }
            }
            ("Div", [a, b]) => match (self.scalar(b), self.poly(a, depth - 1)?) {
                (Some(c), Some(p)) if c != 0.0 => Some(scaled(&p, 1.0 / c)),
                _ => None,
            },
            ("Neg", [a]) => self.poly(a, depth - 1)?.map(|p| scaled(&p, -1.0)),
            ("Pow", [a, e]) => match (self.scalar(e), self.poly(a, depth - 1)?) {
                (Some(e), Some(p)) if e.fract() == 0.0 && (1.0..=3.0).contains(&e) => {
                    let mut r = p.clone();
                    for _ in 1..e as u32 {
                        let Some(next) = product(&r, &p) else { return Ok(None) };
                        r = next;
                    }
                    Some(r)
                }
                _ => None,
            },
            _ => None,
        };
        if result.is_some() {
            self.nodes.push(node);
        }
        Ok(result)
    }
}

/// `x` as `Add(input, bias)`, a bias a 1-D float tensor of `x`'s last axis'
/// size (a weight, as a linear layer's is) and `input` computed and as wide,
/// when only `pattern` reads `x`: `(input, bias)`.
fn split_bias(model: &Model, x: &str, pattern: &[OnnxNodeId]) -> Result<Option<(String, String)>> {
    let Some(add) = model.producer(x) else { return Ok(None) };
    if model.op_type(add)? != "Add" || !model.is_default_domain(add)? {
        return Ok(None);
    }
    if model.is_graph_output(x) || model.consumers(x).iter().any(|r| !pattern.contains(r)) {
        return Ok(None);
    }
    let inputs = model.inputs(add)?;
    let [a, b] = inputs.as_slice() else { return Ok(None) };
    let Some(OnnxDim::Fixed(last)) = model.shape(x).and_then(|s| s.last().cloned()) else {
        return Ok(None);
    };
    let is_bias = |v: &str| {
        model
            .value_type(v)
            .is_some_and(|t| t.elem_type == FLOAT && t.shape == Some(vec![OnnxDim::Fixed(last)]))
    };
    // The sum's other term must span the last axis itself, so the bias is
    // all that broadcasts (ONNX typing makes it float as the sum is).
    let is_input = |v: &str| {
        (model.producer(v).is_some() || model.is_graph_input(v))
            && last_dim(model, v) == Some(OnnxDim::Fixed(last))
    };
    Ok(if is_bias(b) && is_input(a) {
        Some((a.clone(), b.clone()))
    } else if is_bias(a) && is_input(b) {
        Some((b.clone(), a.clone()))
    } else {
        None
    })
}

/// The size of `value`'s last axis: from its type, or for a `MatMul`'s
/// product (a translation's intermediate, untyped) from its right operand's
/// (a weight, perhaps transposed by the translation).
fn last_dim(model: &Model, value: &str) -> Option<OnnxDim> {
    if let Some(shape) = model.shape(value) {
        return shape.last().cloned();
    }
    let producer = model.producer(value)?;
    if model.op_type(producer).ok()? != "MatMul" || !model.is_default_domain(producer).ok()? {
        return None;
    }
    let right = model.inputs(producer).ok()?.get(1)?.clone();
    let shape = match model.shape(&right) {
        Some(shape) => shape,
        None => transposed_shape(model, &right)?,
    };
    // A 1-D right operand contracts away its only axis.
    (shape.len() >= 2).then(|| shape.last().cloned()).flatten()
}

/// The shape of a `Transpose`'s result from its typed input's.
fn transposed_shape(model: &Model, value: &str) -> Option<Vec<OnnxDim>> {
    let transpose = model.producer(value)?;
    if model.op_type(transpose).ok()? != "Transpose" {
        return None;
    }
    let source = model.shape(model.inputs(transpose).ok()?.first()?)?;
    match model.attribute(transpose, "perm").ok()? {
        Some(Attribute::Ints(perm)) if perm.len() == source.len() => {
            perm.iter().map(|&p| source.get(usize::try_from(p).ok()?).cloned()).collect()
        }
        None => Some(source.into_iter().rev().collect()),
        Some(_) => None,
    }
}
