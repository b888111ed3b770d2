//! ── onnx-optimize, continued: what a convolution absorbs ──
//!
//! Inference-time rewrites of a `Conv` and its constant neighbours, after
//! folding has made them constants (what the reference's optimizer does for
//! CNNs, so their graphs are as small as its):
//! - `Conv` → `BatchNormalization` (inference: one output): the normalization
//!   is an affine map per output channel, so it goes into the convolution's
//!   weight and bias: `w' = w * s`, `b' = (b - mean) * s + beta` with
//!   `s = gamma / sqrt(var + eps)`, computed in f64 and stored in the
//!   weight's type (float32/float64; other types are left alone);
//! - a zero `Pad` (mode `constant`, non-negative, spatial axes only) → `Conv`
//!   with explicit pads: the padding goes into the convolution's `pads`
//!   (torch's "same" and TF-style padding reach the graph as a separate pad).
//!
//! A rewritten value keeps its name for every other reader: the conv takes
//! the normalization's output name, the pad's input is read directly. Only
//! a node whose output nothing else reads (and no graph output names) goes.

use std::collections::{HashMap, HashSet};

use super::super::weights::Initializer;
use super::super::{Attribute, Node};
use super::known::{Data, Known, DOUBLE, FLOAT};

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FuseReport {
    /// `BatchNormalization` nodes folded into the convolution before them.
    pub batch_norms: usize,
    /// Zero `Pad` nodes folded into the convolution after them.
    pub pads: usize,
}

/// Values an initializer holds, by name (read on demand: a conv weight is
/// read once, when its conv absorbs a normalization).
struct Constants<'i, 'a> {
    initializers: &'i [Initializer<'a>],
    index: HashMap<String, usize>,
}

impl<'i, 'a> Constants<'i, 'a> {
    fn new(initializers: &'i [Initializer<'a>]) -> Self {
        let index = initializers
            .iter()
            .enumerate()
            .filter_map(|(i, init)| Some((init.header.name.clone()?, i)))
            .collect();
        Constants { initializers, index }
    }

    fn get(&self, name: &str) -> Option<Known> {
        let init = &self.initializers[*self.index.get(name)?];
        Known::from_bytes(init.header.data_type?, &init.header.dims, &init.bytes.to_vec())
    }
}

fn plain(node: &Node, op: &str) -> bool {
    node.op_type == op && node.domain.is_empty() && node.function.is_none()
}

fn float_attr(node: &Node, name: &str, default: f32) -> Option<f32> {
    match node.attribute(name) {
        None => Some(default),
        Some(Attribute::Float(f)) => Some(*f),
        Some(_) => None,
    }
}

fn ints_attr(node: &Node, name: &str) -> Option<Vec<i64>> {
    match node.attribute(name) {
        Some(Attribute::Ints(v)) => Some(v.clone()),
        _ => None,
    }
}

/// Runs both rewrites over `nodes` (main graph, topological order); new
/// weights are appended to `initializers` (the old ones go when nothing
/// reads them, at plan time).
pub fn fuse(
    nodes: &mut Vec<Node>,
    initializers: &mut Vec<Initializer>,
    keep: &HashSet<&str>,
) -> FuseReport {
    let pads = fuse_pads(nodes, initializers, keep);
    let batch_norms = fuse_batch_norms(nodes, initializers, keep);
    FuseReport { pads, batch_norms }
}

fn readers(nodes: &[Node]) -> HashMap<String, usize> {
    let mut readers: HashMap<String, usize> = HashMap::new();
    for input in nodes.iter().flat_map(|n| n.inputs.iter()).filter(|i| !i.is_empty()) {
        *readers.entry(input.clone()).or_default() += 1;
    }
    readers
}

fn fuse_batch_norms(
    nodes: &mut Vec<Node>,
    initializers: &mut Vec<Initializer>,
    keep: &HashSet<&str>,
) -> usize {
    let readers = readers(nodes);
    let producer: HashMap<String, usize> = nodes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.outputs.iter().map(move |o| (o.clone(), i)))
        .collect();
    let mut gone = HashSet::new();
    let mut new_weights = Vec::new();
    for b in 0..nodes.len() {
        let bn = &nodes[b];
        if !plain(bn, "BatchNormalization") || bn.outputs.len() != 1 || bn.inputs.len() != 5 {
            continue;
        }
        let Some(&c) = producer.get(&bn.inputs[0]) else { continue };
        let conv = &nodes[c];
        let conv_out = &conv.outputs[0];
        if !plain(conv, "Conv")
            || conv.outputs.len() != 1
            || readers.get(conv_out) != Some(&1)
            || keep.contains(conv_out.as_str())
            || gone.contains(&c)
        {
            continue;
        }
        let constants = Constants::new(initializers);
        let Some(fused) = fold_batch_norm(conv, bn, &constants) else { continue };
        let base = &bn.outputs[0];
        let (weight_name, bias_name) = (format!("{base}.weight"), format!("{base}.bias"));
        new_weights.push(fused.weight.initializer(&weight_name));
        new_weights.push(fused.bias.initializer(&bias_name));
        let output = bn.outputs[0].clone();
        let conv = &mut nodes[c];
        conv.inputs.truncate(1);
        conv.inputs.extend([weight_name, bias_name]);
        conv.outputs[0] = output;
        gone.insert(b);
    }
    initializers.extend(new_weights);
    let mut position = 0;
    nodes.retain(|_| {
        position += 1;
        !gone.contains(&(position - 1))
    });
    gone.len()
}

struct FusedConv {
    weight: Known,
    bias: Known,
}

/// The weight and bias of `conv` with `bn` folded in, when every operand is
/// a float constant of one type with one value per output channel.
fn fold_batch_norm(conv: &Node, bn: &Node, constants: &Constants) -> Option<FusedConv> {
    let epsilon = float_attr(bn, "epsilon", 1e-5)? as f64;
    if matches!(bn.attribute("training_mode"), Some(Attribute::Int(t)) if *t != 0) {
        return None;
    }
    let weight = constants.get(conv.inputs.get(1)?)?;
    let dtype = weight.dtype;
    if !matches!(dtype, FLOAT | DOUBLE) || weight.dims.is_empty() {
        return None;
    }
    let channels = weight.dims[0] as usize;
    let per_channel = |name: &str| -> Option<Vec<f64>> {
        let k = constants.get(name)?;
        (k.dtype == dtype && k.dims == [channels as i64]).then(|| k.floats())
    };
    let (gamma, beta, mean, var) = (
        per_channel(&bn.inputs[1])?,
        per_channel(&bn.inputs[2])?,
        per_channel(&bn.inputs[3])?,
        per_channel(&bn.inputs[4])?,
    );
    let bias = match conv.inputs.get(2).filter(|b| !b.is_empty()) {
        Some(name) => per_channel(name)?,
        None => vec![0.0; channels],
    };
    let scale: Vec<f64> = gamma.iter().zip(&var).map(|(g, v)| g / (v + epsilon).sqrt()).collect();
    let w = weight.floats();
    let inner = w.len() / channels.max(1);
    let fused_weight: Vec<f64> =
        w.iter().enumerate().map(|(i, x)| x * scale[i / inner.max(1)]).collect();
    let fused_bias: Vec<f64> =
        (0..channels).map(|o| (bias[o] - mean[o]) * scale[o] + beta[o]).collect();
    Some(FusedConv {
        weight: Known::new(dtype, weight.dims.clone(), Data::Float(fused_weight)),
        bias: Known::new(dtype, vec![channels as i64], Data::Float(fused_bias)),
    })
}

fn fuse_pads(nodes: &mut Vec<Node>, initializers: &[Initializer], keep: &HashSet<&str>) -> usize {
    let readers = readers(nodes);
    let constants = Constants::new(initializers);
    let producer: HashMap<String, usize> = nodes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.outputs.iter().map(move |o| (o.clone(), i)))
        .collect();
    let mut gone = HashSet::new();
    for c in 0..nodes.len() {
        let conv = &nodes[c];
        if !plain(conv, "Conv") || conv.inputs.is_empty() {
            continue;
        }
        let Some(&p) = producer.get(&conv.inputs[0]) else { continue };
        let pad = &nodes[p];
        let padded = &pad.outputs[0];
        if !plain(pad, "Pad")
            || readers.get(padded) != Some(&1)
            || keep.contains(padded.as_str())
            || gone.contains(&p)
        {
            continue;
        }
        let Some(weight) =
            conv.inputs.get(1).and_then(|w| initializers.get(*constants.index.get(w)?))
        else {
            continue;
        };
        let rank = weight.header.dims.len();
        let Some(spatial) = zero_spatial_pads(pad, rank, &constants) else { continue };
        let auto_pad_unset = match conv.attribute("auto_pad") {
            None => true,
            Some(Attribute::Str(a)) => a == "NOTSET",
            Some(_) => false,
        };
        let existing = ints_attr(conv, "pads").unwrap_or_else(|| vec![0; spatial.len()]);
        if !auto_pad_unset || existing.len() != spatial.len() {
            continue;
        }
        let pads: Vec<i64> = existing.iter().zip(&spatial).map(|(a, b)| a + b).collect();
        let source = pad.inputs[0].clone();
        let conv = &mut nodes[c];
        conv.inputs[0] = source;
        conv.attributes.retain(|(name, _)| name != "pads");
        conv.attributes.push(("pads".into(), Attribute::Ints(pads)));
        gone.insert(p);
    }
    let mut position = 0;
    nodes.retain(|_| {
        position += 1;
        !gone.contains(&(position - 1))
    });
    gone.len()
}

/// A constant zero `Pad` of a `rank`-D tensor that pads only the spatial
/// axes (2..) by non-negative amounts: those amounts in ONNX `pads` order
/// (every begin, then every end) over the spatial axes.
fn zero_spatial_pads(pad: &Node, rank: usize, constants: &Constants) -> Option<Vec<i64>> {
    let mode_constant = match pad.attribute("mode") {
        None => true,
        Some(Attribute::Str(m)) => m == "constant",
        Some(_) => false,
    };
    if !mode_constant || pad.outputs.len() != 1 || rank < 3 {
        return None;
    }
    let amounts = constants.get(pad.inputs.get(1)?)?.int_values()?;
    if let Some(value) = pad.inputs.get(2).filter(|v| !v.is_empty()) {
        let value = constants.get(value)?;
        if value.data.len() != 1 || value.floats().first() != Some(&0.0) {
            return None;
        }
    }
    let axes: Vec<usize> = match pad.inputs.get(3).filter(|a| !a.is_empty()) {
        Some(a) => constants
            .get(a)?
            .int_values()?
            .iter()
            .map(|&a| if a < 0 { (a + rank as i64) as usize } else { a as usize })
            .collect(),
        None => (0..rank).collect(),
    };
    if amounts.len() != 2 * axes.len() || amounts.iter().any(|&a| a < 0) {
        return None;
    }
    let mut begins = vec![0i64; rank];
    let mut ends = vec![0i64; rank];
    for (k, &a) in axes.iter().enumerate() {
        if a >= rank {
            return None;
        }
        begins[a] = amounts[k];
        ends[a] = amounts[axes.len() + k];
    }
    if begins[..2].iter().chain(&ends[..2]).any(|&a| a != 0) {
        return None;
    }
    Some(begins[2..].iter().chain(&ends[2..]).copied().collect())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{floats_of, node};
    use super::*;
    use crate::onnx::proto as p;
    use crate::onnx::weights::Bytes;

    fn floats(name: &str, dims: &[i64], values: &[f32]) -> Initializer<'static> {
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

    fn ints(name: &str, values: &[i64]) -> Initializer<'static> {
        let header = p::TensorProto {
            dims: vec![values.len() as i64],
            data_type: Some(super::super::known::INT64),
            name: Some(name.into()),
            ..Default::default()
        };
        Initializer {
            header,
            bytes: Bytes::Owned(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
        }
    }

    fn values(initializers: &[Initializer], name: &str) -> Vec<f32> {
        floats_of(initializers.iter().find(|i| i.header.name.as_deref() == Some(name)).unwrap())
    }

    #[test]
    fn a_batch_norm_after_a_conv_goes_into_its_weight_and_bias() {
        // Two output channels, one input channel, 1x1 kernels: w = [2, 3], b = [1, -1].
        let mut initializers = vec![
            floats("w", &[2, 1, 1, 1], &[2.0, 3.0]),
            floats("b", &[2], &[1.0, -1.0]),
            floats("gamma", &[2], &[1.0, 2.0]),
            floats("beta", &[2], &[0.5, 0.0]),
            floats("mean", &[2], &[1.0, 0.0]),
            floats("var", &[2], &[3.0, 0.0]),
        ];
        let mut nodes = vec![
            node("Conv", &["x", "w", "b"], "c", vec![]),
            node(
                "BatchNormalization",
                &["c", "gamma", "beta", "mean", "var"],
                "y",
                vec![("epsilon", Attribute::Float(1.0))],
            ),
            // a conv read twice keeps its normalization
            node("Conv", &["x", "w"], "shared", vec![]),
            node("BatchNormalization", &["shared", "gamma", "beta", "mean", "var"], "z", vec![]),
            node("Neg", &["shared"], "n", vec![]),
        ];
        let report = fuse(&mut nodes, &mut initializers, &HashSet::from(["y", "z", "n"]));
        assert_eq!(report, FuseReport { batch_norms: 1, pads: 0 });
        assert_eq!(nodes.iter().filter(|n| n.op_type == "BatchNormalization").count(), 1);
        assert_eq!(nodes[0].outputs, ["y"]);
        assert_eq!(nodes[0].inputs, ["x", "y.weight", "y.bias"]);
        // s = gamma / sqrt(var + 1) = [0.5, 2]
        assert_eq!(values(&initializers, "y.weight"), [1.0, 6.0]);
        assert_eq!(values(&initializers, "y.bias"), [(1.0 - 1.0) * 0.5 + 0.5, -2.0]);
    }

    #[test]
    fn a_zero_spatial_pad_goes_into_the_conv_and_other_pads_stay() {
        let mut initializers = vec![
            floats("w", &[1, 1, 3, 3], &[1.0; 9]),
            ints("spatial", &[0, 0, 1, 2, 0, 0, 3, 4]),
            ints("channels", &[0, 1, 0, 0, 0, 0, 0, 0]),
            floats("one", &[], &[1.0]),
        ];
        let mut nodes = vec![
            node("Pad", &["x", "spatial"], "p", vec![]),
            node("Conv", &["p", "w"], "y", vec![("pads", Attribute::Ints(vec![1, 1, 1, 1]))]),
            node("Pad", &["x", "channels"], "q", vec![]),
            node("Conv", &["q", "w"], "z", vec![]),
            node("Pad", &["x", "spatial", "one"], "r", vec![]),
            node("Conv", &["r", "w"], "u", vec![]),
            node("Pad", &["x", "spatial"], "s", vec![("mode", Attribute::Str("reflect".into()))]),
            node("Conv", &["s", "w"], "v", vec![]),
        ];
        let report = fuse(&mut nodes, &mut initializers, &HashSet::from(["y", "z", "u", "v"]));
        assert_eq!(report.pads, 1);
        assert_eq!(nodes[0].inputs, ["x", "w"]);
        assert_eq!(nodes[0].attribute("pads"), Some(&Attribute::Ints(vec![2, 3, 4, 5])));
        assert_eq!(
            nodes.iter().filter(|n| n.op_type == "Pad").count(),
            3,
            "a channel pad, a non-zero value and reflection stay"
        );
    }
}
