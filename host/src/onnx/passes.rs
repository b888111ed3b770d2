//! The optimizer: named passes over an ONNX model's nodes and initializers,
//! run in the order of [`PASSES`] by the pipeline between `emit::lower` and
//! `emit::plan`. Each pass is one registration line; what it does is
//! documented (and tested) where it is written: `optimize.rs` (the generic
//! passes), `fold/` (constant folding with its peephole rules, gathers over
//! index grids sliced, weights stored transposed or as their slabs or parts,
//! what a convolution absorbs), `quantize.rs` (weights
//! quantized, on request), `compress.rs` (weights stored 16-bit, on
//! request). No pass changes a graph output's name.

use std::collections::{HashMap, HashSet};

use hfx_dtype::DType;

use super::compress;
use super::optimize::{self, OptimizeReport};
use super::quantize::{self, Quantize};
use super::weights::Initializer;
use super::{fold, Node};

/// An ONNX main graph under optimization.
pub struct Graph<'s, 'a> {
    /// In topological order.
    pub nodes: Vec<Node>,
    pub initializers: Vec<Initializer<'a>>,
    /// The graph outputs' names: their producers stay.
    pub keep: HashSet<&'s str>,
    /// The values of a shape fixed on every axis, by name.
    pub static_shapes: &'s HashMap<String, Vec<i64>>,
    /// `--quantize`'s scheme, if given.
    pub quantize: Option<&'s Quantize>,
    /// The 16-bit dtype matmuls' and gathers' weights are stored in, if any.
    pub weights_dtype: Option<DType>,
    /// Whether a weight read through a `Transpose` is stored transposed.
    pub transpose_weights: bool,
}

/// A pass: rewrites the graph, counting what it did in the report.
pub type Pass = fn(&mut Graph, &mut OptimizeReport);

/// Every pass, in the order they run.
pub const PASSES: &[(&str, Pass)] = &[
    ("remove_identities", |g, r| {
        r.identities_removed += optimize::remove_identities(&mut g.nodes, &g.keep)
    }),
    ("eliminate_common_subexpressions", |g, r| {
        r.merged += optimize::eliminate_common_subexpressions(&mut g.nodes, &g.keep)
    }),
    ("eliminate_dead_code", |g, r| {
        r.dead_removed += optimize::eliminate_dead_code(&mut g.nodes, &g.keep)
    }),
    // Before folding and `store_weights_transposed`: it reads each weight as
    // the checkpoint stores it, under its checkpoint name, where folding
    // would compute a small weight's transpose in memory under the
    // transpose's name.
    ("quantize_weights", |g, r| {
        if let Some(scheme) = g.quantize {
            quantize::run(&mut g.nodes, &mut g.initializers, &g.keep, scheme, &mut r.quantized)
        }
    }),
    ("fold_constants", |g, r| {
        fold::fold(&mut g.nodes, &mut g.initializers, &g.keep, g.static_shapes, &mut r.folding)
    }),
    ("slice_index_grids", |g, r| {
        r.folding.index_grids += fold::slice_index_grids(&mut g.nodes, &mut g.initializers)
    }),
    ("store_weights_transposed", |g, r| {
        if g.transpose_weights {
            r.folding.transposed +=
                fold::store_weights_transposed(&mut g.nodes, &mut g.initializers, &g.keep)
        }
    }),
    ("store_weight_slabs", |g, r| {
        r.folding.slab_nodes += fold::store_weight_slabs(&mut g.nodes, &mut g.initializers, &g.keep)
    }),
    // After the slabs: a grouped weight's `Split` into slabs is theirs.
    ("store_weight_parts", |g, r| {
        r.folding.slab_nodes += fold::store_weight_parts(&mut g.nodes, &mut g.initializers, &g.keep)
    }),
    ("fuse_pads", |g, r| {
        r.folding.fused.pads += fold::fuse_pads(&mut g.nodes, &g.initializers, &g.keep)
    }),
    ("fuse_batch_norms", |g, r| {
        r.folding.fused.batch_norms +=
            fold::fuse_batch_norms(&mut g.nodes, &mut g.initializers, &g.keep)
    }),
    // Last: a weight's layout is settled (transposed, slabs), and the
    // passes before read float32 weights.
    ("store_weights_16bit", |g, r| {
        if let Some(dtype) = g.weights_dtype {
            compress::store_weights(
                &mut g.nodes,
                &mut g.initializers,
                &g.keep,
                dtype,
                &mut r.compressed,
            )
        }
    }),
    // What folding and fusing left unread.
    ("eliminate_dead_code", |g, r| {
        r.dead_removed += optimize::eliminate_dead_code(&mut g.nodes, &g.keep)
    }),
];

/// Runs every pass; `outputs` are the graph outputs' names, kept;
/// `static_shapes` the values of a shape fixed on every axis, by name;
/// `quantize` the weights' quantization, if any; `weights_dtype` the
/// 16-bit dtype matmuls' and gathers' weights are stored in, if any;
/// `transpose_weights` whether a weight read through a `Transpose` (a
/// `torch.nn.Linear`'s) is stored transposed.
pub fn run(
    nodes: &mut Vec<Node>,
    initializers: &mut Vec<Initializer>,
    outputs: &[String],
    static_shapes: &HashMap<String, Vec<i64>>,
    quantize: Option<&Quantize>,
    weights_dtype: Option<DType>,
    transpose_weights: bool,
) -> OptimizeReport {
    let mut graph = Graph {
        nodes: std::mem::take(nodes),
        initializers: std::mem::take(initializers),
        keep: outputs.iter().map(String::as_str).collect(),
        static_shapes,
        quantize,
        weights_dtype,
        transpose_weights,
    };
    let mut report = OptimizeReport::default();
    for (_, pass) in PASSES {
        pass(&mut graph, &mut report);
    }
    *nodes = graph.nodes;
    *initializers = graph.initializers;
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::fold::testing::*;
    use crate::onnx::fold::FoldReport;
    use crate::onnx::Attribute;

    /// Every kind of pass on one small convolution, in order: the identity
    /// and the copied constant go first, so folding sees `x * 1` and the
    /// fuse rules see a pad and a normalization around one conv.
    #[test]
    fn the_passes_run_in_order_and_the_graph_computes_what_it_did() {
        let pads = [0, 0, 1, 1, 0, 0, 1, 1];
        let nodes = vec![
            node("Identity", &["x"], "xi", vec![]),
            float_node("one", 1.0),
            node("Mul", &["xi", "one"], "m", vec![]),
            ints_node("pads1", &pads),
            ints_node("pads2", &pads),
            node("Pad", &["m", "pads2"], "p", vec![]),
            node("Neg", &["pads1"], "unused", vec![]),
            node("Conv", &["p", "w", "b"], "c", vec![]),
            node("BatchNormalization", &["c", "gamma", "beta", "mean", "var"], "y", vec![]),
        ];
        let initializers = vec![
            floats("w", &[2, 1, 3, 3], &(0..18).map(|v| v as f32 - 9.0).collect::<Vec<_>>()),
            floats("b", &[2], &[0.5, -0.5]),
            floats("gamma", &[2], &[1.5, 0.5]),
            floats("beta", &[2], &[0.0, 1.0]),
            floats("mean", &[2], &[0.25, -1.0]),
            floats("var", &[2], &[1.0, 4.0]),
        ];
        let mut report = OptimizeReport::default();
        let (after, _) = rewritten(
            &nodes,
            &initializers,
            &["y"],
            &[("x", counting(&[1, 1, 4, 4]))],
            |n, i, _| report = run(n, i, &["y".into()], &HashMap::new(), None, None, true),
        );
        let mut folding = FoldReport { identities: 1, lifted: 1, ..Default::default() };
        folding.fused.pads = 1;
        folding.fused.batch_norms = 1;
        let expected = OptimizeReport {
            identities_removed: 1,
            merged: 1,
            dead_removed: 1,
            folding,
            ..Default::default()
        };
        assert_eq!(report, expected);
        assert_eq!(ops(&after), ["Conv"]);
        assert_eq!(after[0].inputs, ["x", "y.weight", "y.bias"]);
        assert_eq!(after[0].attribute("pads"), Some(&Attribute::Ints(vec![1, 1, 1, 1])));
    }
}
