//! ── onnx-optimize, continued: what a convolution absorbs ──
//!
//! Inference-time rewrites of a `Conv` and its constant neighbours, after
//! folding has made them constants (what the reference's optimizer does for
//! CNNs, so their graphs are as small as its), one rule a file:
//! `batch_norm.rs` (a normalization after a convolution goes into its weight
//! and bias), `pad.rs` (a zero pad before a convolution goes into its `pads`).
//! New weights are appended to the initializers (the old ones go when nothing
//! reads them, at plan time).
//!
//! A rewritten value keeps its name for every other reader: the conv takes
//! the normalization's output name, the pad's input is read directly. Only
//! a node whose output nothing else reads (and no graph output names) goes.

use std::collections::HashMap;

use super::super::weights::Initializer;
use super::super::{Attribute, Node};
use super::known::Known;

mod batch_norm;
mod pad;

pub use batch_norm::fuse_batch_norms;
pub use pad::fuse_pads;

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

fn readers(nodes: &[Node]) -> HashMap<String, usize> {
    let mut readers: HashMap<String, usize> = HashMap::new();
    for input in nodes.iter().flat_map(|n| n.inputs.iter()).filter(|i| !i.is_empty()) {
        *readers.entry(input.clone()).or_default() += 1;
    }
    readers
}
