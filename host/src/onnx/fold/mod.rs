//! ── onnx-optimize, continued: constant folding ──
//!
//! A node whose inputs are all known (Constant nodes, small initializers, or
//! values folded before it) is computed here and becomes an initializer: the
//! rotary tables, position ranges and mask constants of a static export are
//! settled at export time rather than at every run. Then:
//! - a weight read only through `Transpose` (how `linear` reaches `MatMul`)
//!   is stored transposed; the transposition happens while the weight streams
//!   from the `.pt2`'s memory map into the file, so no copy of it is held,
//! - the Constant nodes left become initializers (what ONNX optimizers do: a
//!   value, not a computation),
//! - convolutions absorb the batch norms after them and the zero pads before
//!   them (`fuse.rs`).
//!
//! Before a node is evaluated, it may turn out to compute its input or to be
//! one node with its producer (`simplify.rs`).
//!
//! The evaluator knows the ops static shape and position code is made of,
//! in float32/float64 and the integer types (bf16/f16 values are left alone);
//! results past [`MAX_ELEMENTS`] are not materialized. Graph outputs keep
//! their nodes. Arithmetic runs in f64 and is rounded to the value's type.

use std::collections::{HashMap, HashSet};

mod eval;
mod fuse;
mod known;
mod simplify;

use super::weights::{Bytes, Initializer};
use super::{Attribute, Node};
use eval::evaluate;
use known::{count, Known};
use simplify::{simplify, Simplified};

/// Largest folded result, in elements: past it, a computed table costs more
/// file than the nodes it replaces.
pub const MAX_ELEMENTS: usize = 1 << 20;
/// Initializers up to this many elements are read as known values (buffers
/// such as rotary `inv_freq`); weights are not.
const SMALL_INITIALIZER: usize = 1 << 12;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FoldReport {
    /// Nodes computed at export time.
    pub folded: usize,
    /// Weights stored transposed instead of transposed at run time.
    pub transposed: usize,
    /// Constant nodes turned into initializers.
    pub lifted: usize,
    /// Nodes that compute their input, removed (`simplify.rs`): slices from
    /// 0 to the end (torch's `x[:, None]`, `logits[:, -0:]`), `x + 0`, a
    /// squeeze undone, transposes that cancel.
    pub identities: usize,
    /// Pairs computed by one node (`simplify.rs`): transposes, unsqueezes and
    /// reshapes of their own kind.
    pub merged_pairs: usize,
    /// What convolutions absorbed (`fuse.rs`).
    pub fused: fuse::FuseReport,
}

/// Folds `nodes` (main graph, topological order). `initializers` are read as
/// known values where small, and gain the folded values; `keep` are graph
/// outputs, whose producers stay. `static_shapes` are the values whose shape
/// the program fixes (every axis), by ONNX name: their `Shape` is known
/// although they are not.
pub fn fold<'a>(
    nodes: &mut Vec<Node>,
    initializers: &mut Vec<Initializer<'a>>,
    keep: &HashSet<&str>,
    static_shapes: &HashMap<String, Vec<i64>>,
) -> FoldReport {
    let mut report = FoldReport::default();
    let mut known: HashMap<String, Known> = HashMap::new();
    for init in initializers.iter() {
        let (Some(name), Some(dtype)) = (&init.header.name, init.header.data_type) else {
            continue;
        };
        if count(&init.header.dims) <= SMALL_INITIALIZER {
            if let Some(k) = Known::from_bytes(dtype, &init.header.dims, &init.bytes.to_vec()) {
                known.insert(name.clone(), k);
            }
        }
    }
    let mut kept = Vec::with_capacity(nodes.len());
    let mut new_initializers = Vec::new();
    // Outputs of nodes that compute their input: readers read that input.
    let mut renames: HashMap<String, String> = HashMap::new();
    // The kept node computing each value.
    let mut producers: HashMap<String, usize> = HashMap::new();
    for mut node in std::mem::take(nodes) {
        for input in node.inputs.iter_mut() {
            if let Some(original) = renames.get(input.as_str()) {
                *input = original.clone();
            }
        }
        // A graph output keeps its node (and name); merged, it still computes it.
        let is_output = node.outputs.iter().any(|o| keep.contains(o.as_str()));
        match simplify(&node, &known, |name| producers.get(name).map(|&i| &kept[i])) {
            Some(Simplified::Same(value)) if !is_output => {
                renames.insert(node.outputs[0].clone(), value);
                report.identities += 1;
                continue;
            }
            Some(Simplified::Merged(merged, constant)) => {
                if let Some((name, value)) = constant {
                    known.insert(name.clone(), value);
                    new_initializers.push(vec![name]);
                }
                node = *merged;
                report.merged_pairs += 1;
            }
            _ => {}
        }
        let inputs: Vec<Option<&Known>> = node.inputs.iter().map(|i| known.get(i)).collect();
        let foldable = node.domain.is_empty()
            && node.function.is_none()
            && node.outputs.iter().all(|o| !keep.contains(o.as_str()))
            && inputs.iter().zip(&node.inputs).all(|(k, name)| k.is_some() || name.is_empty());
        let shape_only = node.op_type == "Shape"
            && node.domain.is_empty()
            && node.inputs.len() == 1
            && !keep.contains(node.outputs[0].as_str());
        let values = if foldable {
            evaluate(&node, &inputs)
        } else if shape_only {
            static_shapes
                .get(&node.inputs[0])
                .and_then(|dims| eval::shape_of(&node, dims))
                .map(|k| vec![k])
        } else {
            None
        };
        match values {
            Some(values)
                if values.len() == node.outputs.len()
                    && values.iter().all(|v| v.data.len() <= MAX_ELEMENTS) =>
            {
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
            _ => {
                for output in &node.outputs {
                    producers.insert(output.clone(), kept.len());
                }
                kept.push(node);
            }
        }
    }
    // Every folded value still read becomes an initializer; Constant nodes still read are lifted.
    let read: HashSet<String> = kept.iter().flat_map(|n| n.inputs.iter().cloned()).collect();
    let existing: HashSet<String> =
        initializers.iter().filter_map(|i| i.header.name.clone()).collect();
    for outputs in new_initializers {
        for name in outputs.iter().filter(|o| read.contains(*o) && !existing.contains(*o)) {
            initializers.push(known[name].initializer(name));
        }
    }
    kept.retain(|n| {
        let liftable = n.op_type == "Constant"
            && n.outputs.len() == 1
            && !keep.contains(n.outputs[0].as_str())
            && known.contains_key(&n.outputs[0]);
        if liftable && read.contains(&n.outputs[0]) {
            initializers.push(known[&n.outputs[0]].initializer(&n.outputs[0]));
            report.lifted += 1;
        }
        !liftable
    });
    report.transposed = transpose_weights(&mut kept, initializers, keep);
    report.fused = fuse::fuse(&mut kept, initializers, keep);
    *nodes = kept;
    report
}

/// `Transpose(w, perm=[1, 0])` of a 2-D initializer nothing else reads: the
/// initializer is stored transposed (under the node's output name) and the
/// node goes.
fn transpose_weights(
    nodes: &mut Vec<Node>,
    initializers: &mut [Initializer],
    keep: &HashSet<&str>,
) -> usize {
    let mut readers: HashMap<&str, usize> = HashMap::new();
    for input in nodes.iter().flat_map(|n| n.inputs.iter()) {
        *readers.entry(input.as_str()).or_default() += 1;
    }
    let index: HashMap<String, usize> = initializers
        .iter()
        .enumerate()
        .filter_map(|(i, init)| Some((init.header.name.clone()?, i)))
        .collect();
    let mut done = HashSet::new();
    for (position, node) in nodes.iter().enumerate() {
        let is_swap = node.op_type == "Transpose"
            && node.domain.is_empty()
            && node.inputs.len() == 1
            && matches!(node.attribute("perm"), Some(Attribute::Ints(p)) if p == &[1, 0]);
        if !is_swap
            || keep.contains(node.outputs[0].as_str())
            || keep.contains(node.inputs[0].as_str())
        {
            continue;
        }
        let Some(&i) = index.get(&node.inputs[0]) else { continue };
        let init = &mut initializers[i];
        if readers.get(node.inputs[0].as_str()) != Some(&1) || init.header.dims.len() != 2 {
            continue;
        }
        let (rows, cols) = (init.header.dims[0] as usize, init.header.dims[1] as usize);
        let (source, cast) = match init.bytes {
            Bytes::Mapped(source) => (source, None),
            Bytes::Converted { source, cast } => (source, Some(cast)),
            _ => continue,
        };
        let element = source.len() / (rows * cols).max(1);
        if ![1, 2, 4, 8].contains(&element) || element * rows * cols != source.len() {
            continue;
        }
        init.bytes = Bytes::Transposed { source, rows, cols, element, cast };
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
    use super::known::{Data, FLOAT, INT64};
    use super::*;
    use crate::onnx::proto as p;

    /// A main-graph node with one output (the fold tests' and `fuse.rs`'s).
    pub(super) fn node(
        op: &str,
        inputs: &[&str],
        output: &str,
        attributes: Vec<(&str, Attribute)>,
    ) -> Node {
        Node {
            op_type: op.into(),
            domain: String::new(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec![output.into()],
            attributes: attributes.into_iter().map(|(n, a)| (n.to_string(), a)).collect(),
            function: None,
        }
    }

    pub(super) fn floats_of(init: &Initializer) -> Vec<f32> {
        init.bytes
            .to_vec()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
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
        let report = fold(&mut nodes, &mut initializers, &HashSet::from(["y"]), &HashMap::new());
        assert_eq!(report.folded, 4);
        assert_eq!(nodes.len(), 1, "only the Mul with the input is left: {nodes:?}");
        assert_eq!(initializers.len(), 1);
        assert_eq!(initializers[0].header.name.as_deref(), Some("table"));
        let expected: Vec<f32> = [0.0f64, 0.5, 1.0].iter().map(|a| a.cos() as f32).collect();
        assert_eq!(floats_of(&initializers[0]), expected);
    }

    #[test]
    fn a_slice_keeping_every_element_goes_and_its_readers_read_the_data() {
        let mut nodes = vec![
            node("Constant", &[], "zero", vec![("value_ints", Attribute::Ints(vec![0, 0]))]),
            node(
                "Constant",
                &[],
                "end",
                vec![("value_ints", Attribute::Ints(vec![i64::MAX, i64::MAX]))],
            ),
            node("Constant", &[], "axes", vec![("value_ints", Attribute::Ints(vec![0, -1]))]),
            node("Constant", &[], "two", vec![("value_ints", Attribute::Ints(vec![2, 2]))]),
            node("Slice", &["x", "zero", "end", "axes"], "whole", vec![]),
            node("Slice", &["whole", "zero", "end", "axes"], "whole_again", vec![]),
            node("Neg", &["whole_again"], "y", vec![]),
            // not whole: a step of 2, and an end short of the sentinel
            node("Slice", &["x", "zero", "end", "axes", "two"], "strided", vec![]),
            node("Slice", &["x", "zero", "two"], "head", vec![]),
            node("Add", &["strided", "head"], "z", vec![]),
            // a graph output keeps its slice
            node("Slice", &["x", "zero", "end"], "out", vec![]),
        ];
        let mut initializers = Vec::new();
        let report =
            fold(&mut nodes, &mut initializers, &HashSet::from(["y", "z", "out"]), &HashMap::new());
        assert_eq!(report.identities, 2);
        let neg = nodes.iter().find(|n| n.op_type == "Neg").unwrap();
        assert_eq!(neg.inputs, ["x"]);
        assert_eq!(nodes.iter().filter(|n| n.op_type == "Slice").count(), 3, "{nodes:?}");
    }

    /// What `simplify.rs` removes and merges, and what it must leave: a
    /// neutral operand that is not rank 0 (it may broadcast), negative
    /// unsqueeze axes, a reshape whose shape copies a dim (0).
    #[test]
    fn nodes_that_compute_their_input_go_and_pairs_of_a_kind_merge() {
        let mut nodes = vec![
            node("Constant", &[], "zero", vec![("value_int", Attribute::Int(0))]),
            node("Constant", &[], "one_vec", vec![("value_ints", Attribute::Ints(vec![1]))]),
            node("Constant", &[], "axis0", vec![("value_ints", Attribute::Ints(vec![0]))]),
            node("Constant", &[], "axis1", vec![("value_ints", Attribute::Ints(vec![1]))]),
            node("Constant", &[], "minus1", vec![("value_ints", Attribute::Ints(vec![-1]))]),
            node("Constant", &[], "flat", vec![("value_ints", Attribute::Ints(vec![-1]))]),
            node("Constant", &[], "copy_dim", vec![("value_ints", Attribute::Ints(vec![0, -1]))]),
            // x + 0 and 0 + x are x; x * [1] may broadcast a scalar x, so it stays
            node("Add", &["x", "zero"], "plus_zero", vec![]),
            node("Add", &["zero", "plus_zero"], "zero_plus", vec![]),
            node("Mul", &["zero_plus", "one_vec"], "times_one", vec![]),
            // a squeeze undone
            node("Squeeze", &["times_one", "axis0"], "squeezed", vec![]),
            node("Unsqueeze", &["squeezed", "axis0"], "restored", vec![]),
            // unsqueeze(unsqueeze(r, [0]), [1]) is unsqueeze(r, [0, 1]); negative axes stay two nodes
            node("Unsqueeze", &["restored", "axis0"], "u1", vec![]),
            node("Unsqueeze", &["u1", "axis1"], "u2", vec![]),
            node("Unsqueeze", &["restored", "minus1"], "n1", vec![]),
            node("Unsqueeze", &["n1", "minus1"], "n2", vec![]),
            // transposes compose, and cancel
            node("Transpose", &["u2"], "t1", vec![("perm", Attribute::Ints(vec![1, 0, 2]))]),
            node("Transpose", &["t1"], "t2", vec![("perm", Attribute::Ints(vec![0, 2, 1]))]),
            node("Transpose", &["t1"], "t3", vec![("perm", Attribute::Ints(vec![1, 0, 2]))]),
            // a reshape of a reshape reads the first one's input, unless its shape has a 0
            node("Reshape", &["t2", "flat"], "r1", vec![]),
            node("Reshape", &["r1", "flat"], "r2", vec![]),
            node("Reshape", &["r1", "copy_dim"], "r3", vec![]),
        ];
        let outputs = ["times_one", "u2", "n2", "t2", "t3", "r2", "r3"];
        let mut initializers = Vec::new();
        let report = fold(&mut nodes, &mut initializers, &HashSet::from(outputs), &HashMap::new());
        let find = |name: &str| {
            nodes
                .iter()
                .find(|n| n.outputs[0] == name)
                .unwrap_or_else(|| panic!("no {name}: {nodes:?}"))
        };
        assert_eq!(
            find("times_one").inputs,
            ["x", "one_vec"],
            "x + 0 and 0 + x go; a rank-1 one stays"
        );
        assert_eq!(find("u2").inputs[0], "times_one", "the squeeze undone, the unsqueezes merged");
        let axes = initializers
            .iter()
            .find(|i| i.header.name.as_deref() == Some(find("u2").inputs[1].as_str()))
            .unwrap();
        assert_eq!(
            Known::from_bytes(INT64, &axes.header.dims, &axes.bytes.to_vec()).unwrap().data,
            Data::Int(vec![0, 1])
        );
        assert_eq!(find("n2").inputs[0], "n1", "negative axes: not merged");
        assert_eq!(find("t2").inputs[0], "u2");
        assert_eq!(find("t2").attribute("perm"), Some(&Attribute::Ints(vec![1, 2, 0])));
        // t3 cancels t1 but is a graph output: it keeps its node, merged to an identity perm on u2
        assert_eq!(find("r2").inputs[0], "t2");
        assert_eq!(find("r3").inputs[0], "r1", "a shape with 0 copies the inner reshape's dim");
        assert!(report.identities >= 3 && report.merged_pairs >= 3, "{report:?}");
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
        fold(&mut nodes, &mut initializers, &HashSet::from(["out", "negated"]), &HashMap::new());
        let ops: Vec<&str> = nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops, ["Reshape", "Neg"], "the graph output `negated` keeps its node");
        let picked =
            initializers.iter().find(|i| i.header.name.as_deref() == Some("picked")).unwrap();
        assert_eq!(
            Known::from_bytes(INT64, &picked.header.dims, &picked.bytes.to_vec()).unwrap().data,
            Data::Int(vec![40, 20])
        );
        assert!(
            initializers.iter().any(|i| i.header.name.as_deref() == Some("v")),
            "a Constant still read is lifted"
        );
    }

    #[test]
    fn a_weight_read_only_through_a_transpose_is_stored_transposed() {
        // Larger than the initializers read as known values, as weights are.
        let (rows, cols) = (64usize, 80usize);
        let weight: Vec<u8> =
            (0..(rows * cols) as u32).flat_map(|v| (v as f32).to_le_bytes()).collect();
        let header = p::TensorProto {
            dims: vec![rows as i64, cols as i64],
            data_type: Some(FLOAT),
            name: Some("w".into()),
            ..Default::default()
        };
        let mut initializers = vec![Initializer { header, bytes: Bytes::Mapped(&weight) }];
        let mut nodes = vec![
            node("Transpose", &["w"], "wt", vec![("perm", Attribute::Ints(vec![1, 0]))]),
            node("MatMul", &["x", "wt"], "y", vec![]),
        ];
        let report = fold(&mut nodes, &mut initializers, &HashSet::from(["y"]), &HashMap::new());
        assert_eq!(report.transposed, 1);
        assert_eq!(nodes.len(), 1);
        assert_eq!(initializers[0].header.dims, [cols as i64, rows as i64]);
        assert_eq!(initializers[0].header.name.as_deref(), Some("wt"));
        let transposed = floats_of(&initializers[0]);
        for (j, i) in [(0, 0), (0, 1), (79, 63), (65, 3)] {
            assert_eq!(
                transposed[j * rows + i],
                (i * cols + j) as f32,
                "wt[{j}][{i}] = w[{i}][{j}]"
            );
        }
    }

    fn ints_of(init: &Initializer) -> Vec<i64> {
        init.bytes
            .to_vec()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// The index tables of relative position biases (BEiT, DeBERTa) and
    /// chunk masks: scatters, sums, triangles, clips, tiles and the shape of
    /// a value whose shape the program fixes, all settled at export time.
    #[test]
    fn index_tables_and_masks_fold() {
        let ints = |name: &str, v: Vec<i64>| {
            node("Constant", &[], name, vec![("value_ints", Attribute::Ints(v))])
        };
        let mut nodes = vec![
            ints("data", vec![0, 0, 0, 0]),
            ints("where", vec![3, 1]),
            ints("what", vec![7, 5]),
            node("ScatterElements", &["data", "where", "what"], "scattered", vec![]), // [0, 5, 0, 7]
            ints("shape", vec![2, 2]),
            node("Reshape", &["scattered", "shape"], "square", vec![]), // [[0, 5], [0, 7]]
            ints("one", vec![1]),
            node("ReduceSum", &["square", "one"], "rows", vec![("keepdims", Attribute::Int(0))]), // [5, 7]
            node("Trilu", &["square"], "upper", vec![]), // [[0, 5], [0, 7]]
            node("Trilu", &["square"], "lower", vec![("upper", Attribute::Int(0))]), // [[0, 0], [0, 7]]
            node("Constant", &[], "six", vec![("value_int", Attribute::Int(6))]),
            node("Clip", &["rows", "", "six"], "clipped", vec![]), // [5, 6]
            ints("twice", vec![2]),
            node("Tile", &["clipped", "twice"], "tiled", vec![]), // [5, 6, 5, 6]
            node("Shape", &["x"], "x_shape", vec![]),             // x is [3, 4] in the program
            node("Add", &["upper", "lower"], "a", vec![]),
            node("Add", &["tiled", "x_shape"], "b", vec![]), // broadcast [4] + [2]: not folded, kept
            node("Mul", &["a", "x"], "y", vec![]),
            node("Concat", &["tiled", "x_shape"], "z", vec![("axis", Attribute::Int(0))]),
        ];
        let mut initializers = Vec::new();
        let shapes = HashMap::from([("x".to_string(), vec![3, 4])]);
        fold(&mut nodes, &mut initializers, &HashSet::from(["y", "z"]), &shapes);
        let value = |name: &str| {
            initializers.iter().find(|i| i.header.name.as_deref() == Some(name)).map(ints_of)
        };
        assert_eq!(value("a"), Some(vec![0, 5, 0, 14]));
        assert!(nodes.iter().all(|n| n.op_type != "Shape" && n.op_type != "Tile"), "{nodes:?}");
        let z = nodes.iter().find(|n| n.outputs == ["z"]).unwrap();
        assert_eq!(
            z.inputs.iter().map(|i| value(i)).collect::<Vec<_>>(),
            [Some(vec![5, 6, 5, 6]), Some(vec![3, 4])]
        );
    }
}
