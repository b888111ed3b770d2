//! Small in-memory ONNX graphs for the optimizer's tests, and a reference
//! evaluation of a whole graph: the evaluator's ops, plus the few ops the
//! fuse rules rewrite (`Conv`, `BatchNormalization`, `Pad`), computed
//! naively here, so a rewrite is checked to compute what the graph computed.

use std::collections::{HashMap, HashSet};

use super::eval::evaluate;
use super::known::{Data, Known, FLOAT, INT64};
use crate::onnx::proto as p;
use crate::onnx::weights::{Bytes, Initializer};
use crate::onnx::{Attribute, Node};

/// A main-graph node with one output.
pub fn node(op: &str, inputs: &[&str], output: &str, attributes: Vec<(&str, Attribute)>) -> Node {
    Node {
        op_type: op.into(),
        domain: String::new(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.into()],
        attributes: attributes.into_iter().map(|(n, a)| (n.to_string(), a)).collect(),
        function: None,
    }
}

/// A `Constant` node holding `values` (int64, rank 1).
pub fn ints_node(output: &str, values: &[i64]) -> Node {
    node("Constant", &[], output, vec![("value_ints", Attribute::Ints(values.to_vec()))])
}

/// A `Constant` node holding the rank-0 float `value`.
pub fn float_node(output: &str, value: f32) -> Node {
    node("Constant", &[], output, vec![("value_float", Attribute::Float(value))])
}

/// A float32 tensor.
pub fn tensor(dims: &[i64], values: &[f64]) -> Known {
    Known::new(FLOAT, dims.to_vec(), Data::Float(values.to_vec()))
}

/// A float32 tensor of `dims` holding 1, 2, 3, … (distinct, so a wrong
/// permutation or offset shows).
pub fn counting(dims: &[i64]) -> Known {
    let n: i64 = dims.iter().product();
    tensor(dims, &(1..=n).map(|v| v as f64).collect::<Vec<_>>())
}

pub fn floats(name: &str, dims: &[i64], values: &[f32]) -> Initializer<'static> {
    let header = p::TensorProto {
        dims: dims.to_vec(),
        data_type: Some(FLOAT),
        name: Some(name.into()),
        ..Default::default()
    };
    Initializer {
        header,
        bytes: Bytes::Owned(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
    }
}

pub fn ints(name: &str, values: &[i64]) -> Initializer<'static> {
    let header = p::TensorProto {
        dims: vec![values.len() as i64],
        data_type: Some(INT64),
        name: Some(name.into()),
        ..Default::default()
    };
    Initializer {
        header,
        bytes: Bytes::Owned(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
    }
}

/// The value of the initializer `name`.
pub fn value(initializers: &[Initializer], name: &str) -> Known {
    let init = initializers
        .iter()
        .find(|i| i.header.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no initializer `{name}`"));
    Known::from_bytes(init.header.data_type.unwrap(), &init.header.dims, &init.bytes.to_vec())
        .unwrap()
}

/// The node computing `output`.
pub fn producer<'n>(nodes: &'n [Node], output: &str) -> &'n Node {
    nodes
        .iter()
        .find(|n| n.outputs.iter().any(|o| o == output))
        .unwrap_or_else(|| panic!("nothing computes `{output}`: {nodes:?}"))
}

pub fn ops(nodes: &[Node]) -> Vec<&str> {
    nodes.iter().map(|n| n.op_type.as_str()).collect()
}

/// Every value of the graph, computed from its `inputs`; panics where a node
/// cannot be evaluated.
pub fn run_graph(
    nodes: &[Node],
    initializers: &[Initializer],
    inputs: &[(&str, Known)],
) -> HashMap<String, Known> {
    let mut values: HashMap<String, Known> =
        inputs.iter().map(|(name, k)| (name.to_string(), k.clone())).collect();
    for init in initializers {
        let name = init.header.name.clone().unwrap();
        values.entry(name.clone()).or_insert_with(|| value(initializers, &name));
    }
    for n in nodes {
        let known: Vec<Option<&Known>> = n.inputs.iter().map(|i| values.get(i)).collect();
        let computed = evaluate(n, &known)
            .or_else(|| reference(n, &known).map(|k| vec![k]))
            .unwrap_or_else(|| panic!("cannot evaluate {n:?}"));
        for (name, k) in n.outputs.iter().zip(computed) {
            values.insert(name.clone(), k);
        }
    }
    values
}

/// Asserts that two graphs compute the same `outputs` from `inputs`: equal
/// dims, equal values up to float32 rounding.
pub fn assert_same_outputs(
    before: (&[Node], &[Initializer]),
    after: (&[Node], &[Initializer]),
    inputs: &[(&str, Known)],
    outputs: &[&str],
) {
    let (a, b) = (run_graph(before.0, before.1, inputs), run_graph(after.0, after.1, inputs));
    for &o in outputs {
        let (x, y) = (&a[o], &b[o]);
        assert_eq!((x.dtype, &x.dims), (y.dtype, &y.dims), "`{o}`");
        for (u, v) in x.floats().iter().zip(y.floats()) {
            let tolerance = 1e-5 * u.abs().max(v.abs()).max(1.0);
            assert!((u - v).abs() <= tolerance, "`{o}`: {:?} != {:?}", x.data, y.data);
        }
    }
}

/// Runs the pass `rewrite` on a copy of the graph and asserts the copy
/// computes what the graph did; the rewritten graph.
pub fn rewritten<'a>(
    nodes: &[Node],
    initializers: &[Initializer<'a>],
    outputs: &[&str],
    inputs: &[(&str, Known)],
    rewrite: impl FnOnce(&mut Vec<Node>, &mut Vec<Initializer<'a>>, &HashSet<&str>),
) -> (Vec<Node>, Vec<Initializer<'a>>) {
    let (mut after, mut after_initializers) = (nodes.to_vec(), copy(initializers));
    rewrite(&mut after, &mut after_initializers, &outputs.iter().copied().collect());
    assert_same_outputs((nodes, initializers), (&after, &after_initializers), inputs, outputs);
    (after, after_initializers)
}

fn copy<'a>(initializers: &[Initializer<'a>]) -> Vec<Initializer<'a>> {
    initializers
        .iter()
        .map(|i| Initializer { header: i.header.clone(), bytes: Bytes::Owned(i.bytes.to_vec()) })
        .collect()
}

fn ints_attr(node: &Node, name: &str) -> Option<Vec<i64>> {
    match node.attribute(name) {
        Some(Attribute::Ints(v)) => Some(v.clone()),
        _ => None,
    }
}

/// `Conv` (2-D, NCHW, one group, unit strides and dilations, explicit
/// `pads`), `BatchNormalization` (inference) and constant `Pad`, naively.
fn reference(node: &Node, inputs: &[Option<&Known>]) -> Option<Known> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let x = input(0)?;
    let xs = x.floats();
    let d: Vec<usize> = x.dims.iter().map(|&d| d as usize).collect();
    match node.op_type.as_str() {
        "GatherND" => {
            // batch_dims 0: each index row picks a block of the data's trailing axes.
            let indices = input(1)?.int_values()?;
            let (outer, k) = input(1)?.dims.split_at(input(1)?.dims.len() - 1);
            let k = k[0] as usize;
            let block: usize = d[k..].iter().product();
            let mut out = Vec::new();
            for row in indices.chunks(k) {
                let at = row.iter().zip(&d).fold(0, |at, (&i, &n)| at * n + i as usize);
                out.extend_from_slice(&xs[at * block..(at + 1) * block]);
            }
            let dims = outer.iter().copied().chain(x.dims[k..].iter().copied()).collect();
            Some(Known::new(x.dtype, dims, Data::Float(out)))
        }
        "Conv" => {
            let (w, bias) = (input(1)?, input(2).map(Known::floats));
            let k: Vec<usize> = w.dims.iter().map(|&d| d as usize).collect();
            let p: Vec<usize> =
                ints_attr(node, "pads").unwrap_or(vec![0; 4]).iter().map(|&v| v as usize).collect();
            let (n, c, h, wd, o, kh, kw) = (d[0], d[1], d[2], d[3], k[0], k[2], k[3]);
            let (oh, ow) = (h + p[0] + p[2] + 1 - kh, wd + p[1] + p[3] + 1 - kw);
            let ws = w.floats();
            let mut out = Vec::with_capacity(n * o * oh * ow);
            for (b, f, y, z) in positions(n, o, oh, ow) {
                let mut sum = bias.as_ref().map_or(0.0, |bias| bias[f]);
                for (ci, ky, kx) in (0..c)
                    .flat_map(|ci| (0..kh).flat_map(move |ky| (0..kw).map(move |kx| (ci, ky, kx))))
                {
                    let (iy, ix) = ((y + ky).wrapping_sub(p[0]), (z + kx).wrapping_sub(p[1]));
                    if iy < h && ix < wd {
                        sum += xs[((b * c + ci) * h + iy) * wd + ix]
                            * ws[((f * c + ci) * kh + ky) * kw + kx];
                    }
                }
                out.push(sum);
            }
            let dims = vec![n as i64, o as i64, oh as i64, ow as i64];
            Some(Known::new(x.dtype, dims, Data::Float(out)))
        }
        "BatchNormalization" => {
            let [gamma, beta, mean, var] = [1, 2, 3, 4].map(|i| input(i).map(Known::floats));
            let (gamma, beta, mean, var) = (gamma?, beta?, mean?, var?);
            let epsilon = match node.attribute("epsilon") {
                Some(Attribute::Float(e)) => *e as f64,
                _ => 1e-5,
            };
            let inner: usize = d[2..].iter().product();
            let out = xs
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let c = i / inner % d[1];
                    (v - mean[c]) / (var[c] + epsilon).sqrt() * gamma[c] + beta[c]
                })
                .collect();
            Some(Known::new(x.dtype, x.dims.clone(), Data::Float(out)))
        }
        "Pad" if node.inputs.len() <= 3 && node.attribute("mode").is_none() => {
            let pads = input(1)?.int_values()?;
            let fill = input(2).map_or(0.0, |v| v.floats()[0]);
            let rank = d.len();
            let dims: Vec<i64> = (0..rank).map(|a| x.dims[a] + pads[a] + pads[rank + a]).collect();
            let total: i64 = dims.iter().product();
            let out = (0..total as usize)
                .map(|mut flat| {
                    let mut source = 0usize;
                    let mut inside = true;
                    for a in (0..rank).rev() {
                        let at = (flat % dims[a] as usize) as i64 - pads[a];
                        flat /= dims[a] as usize;
                        inside &= (0..x.dims[a]).contains(&at);
                        let stride: usize = d[a + 1..].iter().product();
                        source += at.max(0) as usize * stride;
                    }
                    if inside {
                        xs[source]
                    } else {
                        fill
                    }
                })
                .collect();
            Some(Known::new(x.dtype, dims, Data::Float(out)))
        }
        _ => None,
    }
}

/// Every (a, b, c, d) below (n, o, h, w), row-major.
fn positions(
    n: usize,
    o: usize,
    h: usize,
    w: usize,
) -> impl Iterator<Item = (usize, usize, usize, usize)> {
    (0..n).flat_map(move |a| {
        (0..o).flat_map(move |b| (0..h).flat_map(move |c| (0..w).map(move |d| (a, b, c, d))))
    })
}
