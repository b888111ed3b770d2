//! ── onnx-optimize, continued: constant folding ──
//!
//! A node whose inputs are all known (Constant nodes, small initializers, or
//! values folded before it) is computed here and becomes an initializer: the
//! rotary tables, position ranges and mask constants of a static export are
//! settled at export time rather than at every run. Before a node is
//! evaluated, it may turn out to compute its input or to be one node with its
//! producer (the peephole rules of `simplify.rs`). The Constant nodes left
//! become initializers (what ONNX optimizers do: a value, not a computation).
//!
//! The passes that run after folding live here too: a weight read only
//! through `Transpose` (how `linear` reaches `MatMul`) is stored transposed,
//! the transposition happening while the weight streams from the `.pt2`'s
//! memory map into the file, so no copy of it is held
//! ([`store_weights_transposed`]); a grouped weight read one slab at a time
//! (MoE experts) is stored as its slabs ([`store_weight_slabs`]), and one
//! read only by a `Split` as its parts ([`store_weight_parts`]);
//! convolutions absorb the batch norms after them and the zero pads before
//! them (`fuse/`).
//!
//! The evaluator knows the ops static shape and position code is made of,
//! in float32/float64 and the integer types (bf16/f16 values are left alone);
//! results past [`MAX_ELEMENTS`] are not materialized. Graph outputs keep
//! their nodes. Arithmetic runs in f64 and is rounded to the value's type.

use std::collections::{HashMap, HashSet};

mod eval;
mod fuse;
mod grid;
mod known;
mod shapes;
mod simplify;
#[cfg(test)]
pub(crate) mod testing;

use super::weights::{Bytes, Initializer};
use super::{Attribute, Node};
use eval::evaluate;
pub use fuse::{fuse_batch_norms, fuse_pads, FuseReport};
pub use grid::slice_index_grids;
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
    /// `GatherND`s over index grids made slices (`grid.rs`).
    pub index_grids: usize,
    /// Nodes taking a grouped weight apart (transpose, split, squeezes),
    /// gone: its slabs stored as initializers of their own.
    pub slab_nodes: usize,
    /// Constant nodes turned into initializers.
    pub lifted: usize,
    /// Nodes that compute their input, removed (`simplify.rs`'s rules): slices from
    /// 0 to the end (torch's `x[:, None]`, `logits[:, -0:]`), `x + 0`, a
    /// squeeze undone, transposes that cancel.
    pub identities: usize,
    /// Pairs computed by one node (`simplify.rs`): transposes, unsqueezes and
    /// reshapes of their own kind.
    pub merged_pairs: usize,
    /// What convolutions absorbed (`fuse/`).
    pub fused: FuseReport,
}

/// Folds `nodes` (main graph, topological order), simplifying each node
/// first, and lifts the Constant nodes left; counts go to `report`.
/// `initializers` are read as known values where small, and gain the folded
/// values; `keep` are graph outputs, whose producers stay. `static_shapes`
/// are the values whose shape the program fixes (every axis), by ONNX name:
/// their `Shape` is known although they are not.
pub fn fold<'a>(
    nodes: &mut Vec<Node>,
    initializers: &mut Vec<Initializer<'a>>,
    keep: &HashSet<&str>,
    static_shapes: &HashMap<String, Vec<i64>>,
    report: &mut FoldReport,
) {
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
    // Each value's shape where the program fixes it (`shapes.rs`).
    let mut shapes: HashMap<String, Vec<i64>> = static_shapes.clone();
    for init in initializers.iter() {
        if let Some(name) = &init.header.name {
            shapes.insert(name.clone(), init.header.dims.clone());
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
        let producer = |name: &str| producers.get(name).map(|&i| &kept[i]);
        match simplify(&node, &known, producer, &|name| shape_of(&shapes, &known, name)) {
            Some((_, Simplified::Same(value))) if !is_output => {
                renames.insert(node.outputs[0].clone(), value);
                report.identities += 1;
                continue;
            }
            Some((_, Simplified::Merged(merged, constant))) => {
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
            shape_of(&shapes, &known, &node.inputs[0])
                .and_then(|dims| eval::shape_of(&node, &dims))
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
                if !shapes.contains_key(&node.outputs[0]) {
                    let shape = |name: &str| shape_of(&shapes, &known, name);
                    if let Some(dims) = shapes::output_shape(&node, shape, &known) {
                        shapes.insert(node.outputs[0].clone(), dims);
                    }
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
    *nodes = kept;
}

/// The shape of the value `name`: fixed by the program, or known.
fn shape_of(
    shapes: &HashMap<String, Vec<i64>>,
    known: &HashMap<String, Known>,
    name: &str,
) -> Option<Vec<i64>> {
    shapes.get(name).cloned().or_else(|| known.get(name).map(|k| k.dims.clone()))
}

/// `Transpose(w, perm=[1, 0])` of a 2-D initializer nothing else reads: the
/// initializer is stored transposed (under the node's output name) and the
/// node goes. How many went.
pub fn store_weights_transposed(
    nodes: &mut Vec<Node>,
    initializers: &mut [Initializer],
    keep: &HashSet<&str>,
) -> usize {
    let readers = reader_counts(nodes);
    let index = initializer_positions(initializers);
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

/// How many node inputs read each value.
fn reader_counts(nodes: &[Node]) -> HashMap<&str, usize> {
    let mut readers = HashMap::new();
    for input in nodes.iter().flat_map(|n| n.inputs.iter()) {
        *readers.entry(input.as_str()).or_default() += 1;
    }
    readers
}

/// Each named initializer's position.
pub(crate) fn initializer_positions(initializers: &[Initializer]) -> HashMap<String, usize> {
    initializers
        .iter()
        .enumerate()
        .filter_map(|(i, init)| Some((init.header.name.clone()?, i)))
        .collect()
}

/// A `Concat` of weights (each input an initializer read only there, the
/// output no graph output) becomes one initializer whose bytes are the
/// parts' as they stream ([`Bytes::concatenated`]): an IR fix packing
/// sibling weights (a query's, key's and value's projections into one
/// `MatMul`) writes that `Concat`, and the packed weight is written from
/// the checkpoint like any other, converted, transposed or quantized on
/// the way, never held whole. A concatenation whose parts do not stream so
/// stays a node. Returns how many were folded.
pub fn concatenate_weights(
    nodes: &mut Vec<Node>,
    initializers: &mut Vec<Initializer>,
    keep: &HashSet<&str>,
) -> usize {
    let readers = reader_counts(nodes);
    let index = initializer_positions(initializers);
    let mut folded = HashSet::new();
    let mut emptied = HashSet::new();
    for (position, node) in nodes.iter().enumerate() {
        if node.op_type != "Concat" || !node.domain.is_empty() || node.outputs.len() != 1 {
            continue;
        }
        let Some(Attribute::Int(axis)) = node.attribute("axis") else { continue };
        let parts: Option<Vec<usize>> = node
            .inputs
            .iter()
            .map(|input| {
                index.get(input).copied().filter(|_| readers.get(input.as_str()) == Some(&1))
            })
            .collect();
        let Some(parts) = parts else { continue };
        if keep.contains(node.outputs[0].as_str()) || parts.len() < 2 {
            continue;
        }
        let Some((dims, axis)) =
            concatenated_dims(parts.iter().map(|&i| &initializers[i].header), *axis)
        else {
            continue;
        };
        let outer = dims[..axis].iter().product::<i64>() as usize;
        let bytes = parts
            .iter()
            .map(|&i| std::mem::replace(&mut initializers[i].bytes, Bytes::Owned(Vec::new())))
            .collect();
        match Bytes::concatenated(bytes, outer) {
            Ok(bytes) => {
                // In the first part's place: the model's weights keep their order.
                let first = &mut initializers[parts[0]];
                first.header.dims = dims;
                first.header.name = Some(node.outputs[0].clone());
                first.bytes = bytes;
                emptied.extend(parts[1..].iter().copied());
                folded.insert(position);
            }
            Err(bytes) => {
                for (&i, bytes) in parts.iter().zip(bytes) {
                    initializers[i].bytes = bytes;
                }
            }
        }
    }
    let mut position = 0;
    nodes.retain(|_| {
        position += 1;
        !folded.contains(&(position - 1))
    });
    let mut position = 0;
    initializers.retain(|_| {
        position += 1;
        !emptied.contains(&(position - 1))
    });
    folded.len()
}

/// The dims of the concatenation of tensors with `headers` along `axis`
/// (negative from the end), and the axis from the front: None unless they
/// share a dtype and a rank and their dims differ only on that axis.
fn concatenated_dims<'h>(
    mut headers: impl Iterator<Item = &'h crate::onnx::proto::TensorProto>,
    axis: i64,
) -> Option<(Vec<i64>, usize)> {
    let first = headers.next()?;
    let rank = first.dims.len() as i64;
    let axis = usize::try_from(if axis < 0 { axis + rank } else { axis }).ok()?;
    if axis >= first.dims.len() || first.dims.iter().any(|&d| d < 0) {
        return None;
    }
    let mut dims = first.dims.clone();
    for header in headers {
        let same_elsewhere = header.dims.len() == dims.len()
            && header.dims.iter().zip(&dims).enumerate().all(|(i, (a, b))| i == axis || a == b);
        if !same_elsewhere || header.data_type != first.data_type || header.dims[axis] < 0 {
            return None;
        }
        dims[axis] += header.dims[axis];
    }
    Some((dims, axis))
}

/// The small integer initializers' values, by name: what the passes after
/// folding read as known (axes, split sizes, range bounds).
fn small_int_initializers(initializers: &[Initializer]) -> HashMap<String, Known> {
    initializers
        .iter()
        .filter(|init| count(&init.header.dims) <= SMALL_INITIALIZER)
        .filter_map(|init| {
            let dtype = init.header.data_type.filter(|&t| !known::is_float(t))?;
            let value = Known::from_bytes(dtype, &init.header.dims, &init.bytes.to_vec())?;
            Some((init.header.name.clone()?, value))
        })
        .collect()
}

/// A 3-D weight `[G, R, C]` read only by a `Split` on axis 0 into its `G`
/// slabs, each read only by a `Squeeze` of axis 0 (how a grouped product
/// takes one weight per group), possibly through a `Transpose(perm=[0, 2,
/// 1])` first: each slab is stored as an initializer of its own (under the
/// squeeze's output name), a slice of the map, transposed as it is written
/// where the weight was, and the nodes go. How many nodes went.
pub fn store_weight_slabs(
    nodes: &mut Vec<Node>,
    initializers: &mut Vec<Initializer>,
    keep: &HashSet<&str>,
) -> usize {
    let mut readers: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, node) in nodes.iter().enumerate() {
        for input in node.inputs.iter().filter(|i| !i.is_empty()) {
            readers.entry(input.as_str()).or_default().push(i);
        }
    }
    let small = small_int_initializers(initializers);
    let small_ints = |name: &str| small.get(name).and_then(Known::int_values);
    // The single plain reader of `value`, none of whose outputs is a graph output.
    let only_reader = |value: &str, op: &str| -> Option<usize> {
        let [i] = readers.get(value)?[..] else { return None };
        let node = &nodes[i];
        let plain = node.op_type == op && node.domain.is_empty() && node.function.is_none();
        (plain && node.outputs.iter().all(|o| !keep.contains(o.as_str()))).then_some(i)
    };
    let mut removed = HashSet::new();
    let mut slabs: Vec<(usize, Vec<Initializer>)> = Vec::new();
    for (index, init) in initializers.iter().enumerate() {
        let Some(name) = init.header.name.as_deref().filter(|n| !keep.contains(n)) else {
            continue;
        };
        let [groups, rows, cols] = init.header.dims[..] else { continue };
        let (source, cast) = match init.bytes {
            Bytes::Mapped(source) => (source, None),
            Bytes::Converted { source, cast } => (source, Some(cast)),
            _ => continue,
        };
        let transpose = only_reader(name, "Transpose").filter(
            |&t| matches!(nodes[t].attribute("perm"), Some(Attribute::Ints(p)) if p == &[0, 2, 1]),
        );
        let split_input = transpose.map_or(name, |t| nodes[t].outputs[0].as_str());
        let Some(split) = only_reader(split_input, "Split") else { continue };
        let split_node = &nodes[split];
        let on_axis_0 = split_node.attribute("axis").is_none_or(|a| matches!(a, Attribute::Int(0)));
        let equal_pieces = split_node.inputs.len() == 1 || split_node.inputs[1].is_empty();
        if !on_axis_0 || !equal_pieces || split_node.outputs.len() as i64 != groups {
            continue;
        }
        let squeezes: Option<Vec<usize>> = split_node
            .outputs
            .iter()
            .map(|piece| {
                only_reader(piece, "Squeeze").filter(|&q| {
                    nodes[q].inputs.len() == 2 && small_ints(&nodes[q].inputs[1]) == Some(vec![0])
                })
            })
            .collect();
        let Some(squeezes) = squeezes else { continue };
        let (groups, rows, cols) = (groups as usize, rows as usize, cols as usize);
        let count = groups * rows * cols;
        let element = source.len() / count.max(1);
        if ![1, 2, 4, 8].contains(&element) || element * count != source.len() {
            continue;
        }
        let slab = rows * cols * element;
        let pieces = squeezes
            .iter()
            .enumerate()
            .map(|(g, &q)| {
                let bytes = &source[g * slab..(g + 1) * slab];
                let (bytes, dims) = match (transpose, cast) {
                    (Some(_), cast) => (
                        Bytes::Transposed { source: bytes, rows, cols, element, cast },
                        vec![cols as i64, rows as i64],
                    ),
                    (None, Some(cast)) => {
                        (Bytes::Converted { source: bytes, cast }, vec![rows as i64, cols as i64])
                    }
                    (None, None) => (Bytes::Mapped(bytes), vec![rows as i64, cols as i64]),
                };
                let mut header = init.header.clone();
                header.name = Some(nodes[q].outputs[0].clone());
                header.dims = dims;
                Initializer { header, bytes }
            })
            .collect();
        removed.extend(transpose.into_iter().chain([split]).chain(squeezes));
        slabs.push((index, pieces));
    }
    // Each weight's slabs in its place, so the weights keep their order.
    for (index, pieces) in slabs.into_iter().rev() {
        initializers.splice(index..=index, pieces);
    }
    let mut position = 0;
    nodes.retain(|_| {
        position += 1;
        !removed.contains(&(position - 1))
    });
    removed.len()
}

/// A weight read only by a `Split` (the gate and up halves of a mixture of
/// experts' stacked projections, split along their rows): each part is
/// stored as an initializer of its own (under the split's output name), its
/// runs of the map one after the other, and the split goes. The parts are
/// then weights like any other: stored 16-bit for OpenVINO
/// (`compress.rs`), and a constant each where OpenVINO would keep a `Split`
/// of a weight's decompression as a computation. How many nodes went.
pub fn store_weight_parts<'a>(
    nodes: &mut Vec<Node>,
    initializers: &mut Vec<Initializer<'a>>,
    keep: &HashSet<&str>,
) -> usize {
    let readers = reader_counts(nodes);
    let index = initializer_positions(initializers);
    let small = small_int_initializers(initializers);
    let mut removed = HashSet::new();
    let mut parts: Vec<(usize, Vec<Initializer>)> = Vec::new();
    for (position, node) in nodes.iter().enumerate() {
        let plain = node.op_type == "Split" && node.domain.is_empty() && node.function.is_none();
        let Some(weight) = node.inputs.first() else { continue };
        let Some(&i) = index.get(weight) else { continue };
        if !plain
            || readers.get(weight.as_str()) != Some(&1)
            || keep.contains(weight.as_str())
            || node.outputs.iter().any(|o| o.is_empty() || keep.contains(o.as_str()))
        {
            continue;
        }
        let init = &initializers[i];
        let dims: Vec<usize> = init.header.dims.iter().map(|&d| d as usize).collect();
        let rank = dims.len() as i64;
        let axis = match node.attribute("axis") {
            None => 0,
            Some(Attribute::Int(a)) if (-rank..rank).contains(a) => a.rem_euclid(rank) as usize,
            Some(_) => continue,
        };
        let sizes: Vec<usize> = match node.inputs.get(1).filter(|s| !s.is_empty()) {
            Some(sizes) => match small.get(sizes).and_then(Known::int_values) {
                Some(sizes) if sizes.iter().all(|&s| s > 0) => {
                    sizes.into_iter().map(|s| s as usize).collect()
                }
                _ => continue,
            },
            None if dims[axis].is_multiple_of(node.outputs.len()) => {
                vec![dims[axis] / node.outputs.len(); node.outputs.len()]
            }
            None => continue,
        };
        if sizes.len() != node.outputs.len() || sizes.iter().sum::<usize>() != dims[axis] {
            continue;
        }
        let (source, cast) = match init.bytes {
            Bytes::Mapped(source) => (source, None),
            Bytes::Converted { source, cast } => (source, Some(cast)),
            _ => continue,
        };
        let count: usize = dims.iter().product();
        let element = source.len() / count.max(1);
        if count == 0 || ![1, 2, 4, 8].contains(&element) || element * count != source.len() {
            continue;
        }
        // Bytes per index of the split axis, and how many runs of it each part has.
        let row: usize = dims[axis + 1..].iter().product::<usize>() * element;
        let outer: usize = dims[..axis].iter().product();
        let run = |bytes: &'a [u8]| -> Bytes<'a> {
            match cast {
                Some(cast) => Bytes::Converted { source: bytes, cast },
                None => Bytes::Mapped(bytes),
            }
        };
        let mut start = 0;
        let mut stored = Vec::new();
        for (output, &size) in node.outputs.iter().zip(&sizes) {
            let runs: Vec<Bytes> = (0..outer)
                .map(|o| {
                    let begin = (o * dims[axis] + start) * row;
                    run(&source[begin..begin + size * row])
                })
                .collect();
            start += size;
            let bytes = match runs.len() {
                1 => runs.into_iter().next().expect("one run"),
                _ => match Bytes::concatenated(runs, 1) {
                    Ok(bytes) => bytes,
                    Err(_) => break,
                },
            };
            let mut header = init.header.clone();
            header.name = Some(output.clone());
            header.dims[axis] = size as i64;
            stored.push(Initializer { header, bytes });
        }
        if stored.len() == node.outputs.len() {
            removed.insert(position);
            parts.push((i, stored));
        }
    }
    // Each weight's parts in its place, so the weights keep their order.
    parts.sort_by_key(|&(i, _)| i);
    for (i, stored) in parts.into_iter().rev() {
        initializers.splice(i..=i, stored);
    }
    let mut position = 0;
    nodes.retain(|_| {
        position += 1;
        !removed.contains(&(position - 1))
    });
    removed.len()
}

#[cfg(test)]
mod tests {
    use super::known::{Data, FLOAT, INT64};
    use super::testing::*;
    use super::*;
    use crate::onnx::proto as p;

    /// Folds a copy of the graph, checked to compute the same `outputs` from
    /// `x`; the folded graph and what folding counted.
    fn folded<'a>(
        nodes: &[Node],
        initializers: &[Initializer<'a>],
        outputs: &[&str],
        x: Known,
        static_shapes: &HashMap<String, Vec<i64>>,
    ) -> (Vec<Node>, Vec<Initializer<'a>>, FoldReport) {
        let mut report = FoldReport::default();
        let (after, initializers) =
            rewritten(nodes, initializers, outputs, &[("x", x)], |n, i, keep| {
                fold(n, i, keep, static_shapes, &mut report)
            });
        (after, initializers, report)
    }

    #[test]
    fn a_rotary_table_is_computed_at_export_time() {
        // cos(range(0, 3) * 0.5) as float, read by a Mul with the input x.
        let nodes = vec![
            node("Constant", &[], "zero", vec![("value_int", Attribute::Int(0))]),
            node("Constant", &[], "three", vec![("value_int", Attribute::Int(3))]),
            node("Constant", &[], "one", vec![("value_int", Attribute::Int(1))]),
            node("Range", &["zero", "three", "one"], "positions", vec![]),
            node("Cast", &["positions"], "as_float", vec![("to", Attribute::Int(1))]),
            float_node("half", 0.5),
            node("Mul", &["as_float", "half"], "angles", vec![]),
            node("Cos", &["angles"], "table", vec![]),
            node("Mul", &["x", "table"], "y", vec![]),
        ];
        let (nodes, initializers, report) =
            folded(&nodes, &[], &["y"], counting(&[2, 3]), &HashMap::new());
        assert_eq!((report.folded, report.lifted), (4, 0));
        assert_eq!(ops(&nodes), ["Mul"], "only the Mul with the input is left");
        assert_eq!(initializers.len(), 1);
        let expected: Vec<f64> = [0.0f64, 0.5, 1.0].iter().map(|a| a.cos() as f32 as f64).collect();
        assert_eq!(value(&initializers, "table").data, Data::Float(expected));
    }

    #[test]
    fn shapes_slices_and_gathers_fold_and_graph_outputs_keep_their_nodes() {
        let nodes = vec![
            ints_node("v", &[1, 2, 3, 6]),
            ints_node("s", &[1]),
            ints_node("e", &[i64::MAX]),
            node("Slice", &["v", "s", "e"], "tail", vec![]),
            ints_node("i", &[-1, 0]),
            node("Gather", &["tail", "i"], "picked", vec![("axis", Attribute::Int(0))]),
            node("Reshape", &["x", "picked"], "out", vec![]),
            node("Neg", &["v"], "negated", vec![]),
        ];
        let (nodes, initializers, report) =
            folded(&nodes, &[], &["out", "negated"], counting(&[2, 6]), &HashMap::new());
        assert_eq!(ops(&nodes), ["Reshape", "Neg"], "the graph output `negated` keeps its node");
        assert_eq!(value(&initializers, "picked").int_values(), Some(vec![6, 2]));
        assert_eq!(report.lifted, 1, "a Constant still read is lifted");
        assert_eq!(value(&initializers, "v").int_values(), Some(vec![1, 2, 3, 6]));
    }

    /// An op the evaluator does not know, a bf16 value, and a result past
    /// [`MAX_ELEMENTS`] stay nodes.
    #[test]
    fn what_cannot_be_computed_or_is_too_large_stays() {
        let nodes = vec![
            ints_node("shape", &[2, 3]),
            node("ConstantOfShape", &["shape"], "filled", vec![]),
            float_node("one", 1.0),
            node("Cast", &["one"], "half", vec![("to", Attribute::Int(16))]),
            ints_node("huge", &[1 << 11, 1 << 10]),
            node("Expand", &["one", "huge"], "expanded", vec![]),
            node("Neg", &["filled"], "a", vec![]),
            node("Neg", &["half"], "b", vec![]),
            node("Neg", &["expanded"], "c", vec![]),
        ];
        let mut after = nodes.clone();
        let mut initializers = Vec::new();
        let mut report = FoldReport::default();
        let keep = HashSet::from(["a", "b", "c"]);
        fold(&mut after, &mut initializers, &keep, &HashMap::new(), &mut report);
        assert_eq!(report.folded, 0);
        assert_eq!(ops(&after), ["ConstantOfShape", "Cast", "Expand", "Neg", "Neg", "Neg"]);
        assert_eq!(report.lifted, 3, "the constants they read are lifted");
    }

    #[test]
    fn a_weight_read_only_through_a_transpose_is_stored_transposed() {
        // Larger than the initializers read as known values, as weights are.
        let (rows, cols) = (64usize, 80usize);
        let weight: Vec<u8> =
            (0..(rows * cols) as u32).flat_map(|v| (v as f32).to_le_bytes()).collect();
        let header = |name: &str| p::TensorProto {
            dims: vec![rows as i64, cols as i64],
            data_type: Some(FLOAT),
            name: Some(name.into()),
            ..Default::default()
        };
        let mut initializers = vec![
            Initializer { header: header("w"), bytes: Bytes::Mapped(&weight) },
            Initializer { header: header("shared"), bytes: Bytes::Mapped(&weight) },
            Initializer { header: header("computed"), bytes: Bytes::Owned(weight.clone()) },
        ];
        let swap = || vec![("perm", Attribute::Ints(vec![1, 0]))];
        let mut nodes = vec![
            node("Transpose", &["w"], "wt", swap()),
            node("MatMul", &["x", "wt"], "y", vec![]),
            // read elsewhere too: the transpose stays
            node("Transpose", &["shared"], "shared_t", swap()),
            node("MatMul", &["x", "shared_t"], "z", vec![]),
            node("Neg", &["shared"], "n", vec![]),
            // not a slice of the map: left alone
            node("Transpose", &["computed"], "computed_t", swap()),
            node("MatMul", &["x", "computed_t"], "u", vec![]),
        ];
        let transposed = store_weights_transposed(
            &mut nodes,
            &mut initializers,
            &HashSet::from(["y", "z", "n", "u"]),
        );
        assert_eq!(transposed, 1);
        assert_eq!(ops(&nodes), ["MatMul", "Transpose", "MatMul", "Neg", "Transpose", "MatMul"]);
        assert_eq!(initializers[0].header.dims, [cols as i64, rows as i64]);
        assert_eq!(initializers[0].header.name.as_deref(), Some("wt"));
        let Data::Float(transposed) = value(&initializers, "wt").data else { panic!() };
        for (j, i) in [(0, 0), (0, 1), (79, 63), (65, 3)] {
            assert_eq!(
                transposed[j * rows + i],
                (i * cols + j) as f64,
                "wt[{j}][{i}] = w[{i}][{j}]"
            );
        }
    }

    /// Experts' weights `[G, R, C]` (a grouped product's operand): split
    /// into slabs and squeezed, through a transpose or not, each slab
    /// becomes an initializer; a weight one of whose slabs is read otherwise
    /// stays whole.
    #[test]
    fn a_grouped_weight_read_one_slab_at_a_time_is_stored_as_its_slabs() {
        let (groups, rows, cols) = (3usize, 2usize, 4usize);
        let weight: Vec<u8> =
            (0..(groups * rows * cols) as u32).flat_map(|v| (v as f32).to_le_bytes()).collect();
        let header = |name: &str| p::TensorProto {
            dims: vec![groups as i64, rows as i64, cols as i64],
            data_type: Some(FLOAT),
            name: Some(name.into()),
            ..Default::default()
        };
        let mut initializers = vec![
            ints("axis0", &[0]),
            Initializer { header: header("up"), bytes: Bytes::Mapped(&weight) },
            Initializer { header: header("down"), bytes: Bytes::Mapped(&weight) },
            Initializer { header: header("shared"), bytes: Bytes::Mapped(&weight) },
        ];
        let split = |input: &str, prefix: &str| {
            let mut n = node("Split", &[input], "", vec![("num_outputs", Attribute::Int(3))]);
            n.outputs = (0..3).map(|g| format!("{prefix}{g}")).collect();
            n
        };
        let mut nodes = vec![
            node("Transpose", &["up"], "up_t", vec![("perm", Attribute::Ints(vec![0, 2, 1]))]),
            split("up_t", "up_piece"),
            split("down", "down_piece"),
            split("shared", "shared_piece"),
            node("Neg", &["shared_piece1"], "n", vec![]),
        ];
        let mut outputs = vec!["n".to_string()];
        for g in 0..3 {
            for prefix in ["up", "down", "shared"] {
                let piece = format!("{prefix}_piece{g}");
                let slab = format!("{prefix}_slab{g}");
                nodes.push(node("Squeeze", &[&piece, "axis0"], &slab, vec![]));
                nodes.push(node("MatMul", &["x", &slab], &format!("{prefix}_y{g}"), vec![]));
                outputs.push(format!("{prefix}_y{g}"));
            }
        }
        let keep: HashSet<&str> = outputs.iter().map(String::as_str).collect();
        let removed = store_weight_slabs(&mut nodes, &mut initializers, &keep);
        assert_eq!(removed, 2 + 1 + 3 + 3, "up's transpose, the splits and the squeezes");
        let names: Vec<&str> =
            initializers.iter().map(|i| i.header.name.as_deref().unwrap()).collect();
        assert_eq!(
            names,
            [
                "axis0",
                "up_slab0",
                "up_slab1",
                "up_slab2",
                "down_slab0",
                "down_slab1",
                "down_slab2",
                "shared"
            ]
        );
        assert_eq!(ops(&nodes).iter().filter(|op| **op == "Squeeze").count(), 3, "shared's");
        let slab = |g: usize| (g * rows * cols..(g + 1) * rows * cols).map(|v| v as f64);
        for g in 0..groups {
            let stored: Vec<f64> = slab(g).collect();
            assert_eq!(
                value(&initializers, &format!("down_slab{g}")).data,
                Data::Float(stored.clone())
            );
            assert_eq!(value(&initializers, &format!("down_slab{g}")).dims, [2, 4]);
            let up = value(&initializers, &format!("up_slab{g}"));
            assert_eq!(up.dims, [4, 2]);
            let transposed: Vec<f64> = (0..cols)
                .flat_map(|c| (0..rows).map(move |r| (r, c)))
                .map(|(r, c)| stored[r * cols + c])
                .collect();
            assert_eq!(up.data, Data::Float(transposed));
        }
    }

    /// Experts' stacked gate and up weights `[E, 2I, H]` split along their
    /// rows: each half becomes an initializer of `E` runs of the map, bytes
    /// as the split computes them; a split on axis 0 into equal parts too; a
    /// weight read by more than its split stays whole, its split a node.
    #[test]
    fn a_weight_read_only_by_a_split_is_stored_as_its_parts() {
        let (experts, rows, cols) = (3usize, 4usize, 2usize);
        let weight: Vec<u8> =
            (0..(experts * rows * cols) as u32).flat_map(|v| (v as f32).to_le_bytes()).collect();
        let header = |name: &str| p::TensorProto {
            dims: vec![experts as i64, rows as i64, cols as i64],
            data_type: Some(FLOAT),
            name: Some(name.into()),
            ..Default::default()
        };
        let mut initializers = vec![
            ints("halves", &[1, 3]),
            Initializer { header: header("gate_up"), bytes: Bytes::Mapped(&weight) },
            Initializer { header: header("stacked"), bytes: Bytes::Mapped(&weight) },
            Initializer { header: header("shared"), bytes: Bytes::Mapped(&weight) },
        ];
        let split = |inputs: &[&str], parts: &[&str], axis: i64| {
            let mut n = node("Split", inputs, "", vec![("axis", Attribute::Int(axis))]);
            n.outputs = parts.iter().map(|p| p.to_string()).collect();
            n
        };
        let mut nodes = vec![
            split(&["gate_up", "halves"], &["gate", "up"], -2),
            split(&["stacked"], &["e0", "e1", "e2"], 0),
            split(&["shared", "halves"], &["left", "right"], 1),
            node("Neg", &["shared"], "n", vec![]),
        ];
        let outputs = ["gate", "up", "e0", "e1", "e2", "left", "right", "n"];
        for part in outputs {
            nodes.push(node("MatMul", &["x", part], &format!("{part}_y"), vec![]));
        }
        let keep: HashSet<String> = outputs.iter().map(|o| format!("{o}_y")).collect();
        let keep: HashSet<&str> = keep.iter().map(String::as_str).collect();
        let removed = store_weight_parts(&mut nodes, &mut initializers, &keep);
        assert_eq!(removed, 2, "gate_up's and stacked's splits");
        let names: Vec<&str> =
            initializers.iter().map(|i| i.header.name.as_deref().unwrap()).collect();
        assert_eq!(names, ["halves", "gate", "up", "e0", "e1", "e2", "shared"]);
        assert_eq!(ops(&nodes)[..2], ["Split", "Neg"], "shared's split stays");
        let at = |e: usize, r: usize, c: usize| ((e * rows + r) * cols + c) as f64;
        let part = |first: usize, count: usize| -> Vec<f64> {
            (0..experts)
                .flat_map(|e| {
                    (first..first + count).flat_map(move |r| (0..cols).map(move |c| at(e, r, c)))
                })
                .collect()
        };
        let gate = value(&initializers, "gate");
        assert_eq!((gate.dims, gate.data), (vec![3, 1, 2], Data::Float(part(0, 1))));
        let up = value(&initializers, "up");
        assert_eq!((up.dims, up.data), (vec![3, 3, 2], Data::Float(part(1, 3))));
        let e1 = value(&initializers, "e1");
        let slab: Vec<f64> = (0..rows).flat_map(|r| (0..cols).map(move |c| at(1, r, c))).collect();
        assert_eq!((e1.dims, e1.data), (vec![1, 4, 2], Data::Float(slab)));
    }

    /// The index tables of relative position biases (BEiT, DeBERTa) and
    /// chunk masks: scatters, sums, triangles, clips, tiles and the shape of
    /// a value whose shape the program fixes, all settled at export time.
    #[test]
    fn index_tables_and_masks_fold() {
        let nodes = vec![
            ints_node("data", &[0, 0, 0, 0]),
            ints_node("where", &[3, 1]),
            ints_node("what", &[7, 5]),
            node("ScatterElements", &["data", "where", "what"], "scattered", vec![]), // [0, 5, 0, 7]
            ints_node("shape", &[2, 2]),
            node("Reshape", &["scattered", "shape"], "square", vec![]), // [[0, 5], [0, 7]]
            ints_node("one", &[1]),
            node("ReduceSum", &["square", "one"], "rows", vec![("keepdims", Attribute::Int(0))]), // [5, 7]
            node("Trilu", &["square"], "upper", vec![]), // [[0, 5], [0, 7]]
            node("Trilu", &["square"], "lower", vec![("upper", Attribute::Int(0))]), // [[0, 0], [0, 7]]
            node("Constant", &[], "six", vec![("value_int", Attribute::Int(6))]),
            node("Clip", &["rows", "", "six"], "clipped", vec![]), // [5, 6]
            ints_node("twice", &[2]),
            node("Tile", &["clipped", "twice"], "tiled", vec![]), // [5, 6, 5, 6]
            node("Shape", &["x"], "x_shape", vec![]),             // x is [3, 4] in the program
            node("Add", &["upper", "lower"], "a", vec![]),
            node("Cast", &["a"], "a_float", vec![("to", Attribute::Int(1))]),
            node("Mul", &["a_float", "x"], "y", vec![]),
            node("Concat", &["tiled", "x_shape"], "z", vec![("axis", Attribute::Int(0))]),
        ];
        let shapes = HashMap::from([("x".to_string(), vec![2, 2])]);
        let (nodes, initializers, _) = folded(&nodes, &[], &["y", "z"], counting(&[2, 2]), &shapes);
        assert_eq!(ops(&nodes), ["Mul", "Concat"]);
        assert_eq!(value(&initializers, "a_float").data, Data::Float(vec![0.0, 5.0, 0.0, 14.0]));
        let z = producer(&nodes, "z");
        assert_eq!(
            z.inputs.iter().map(|i| value(&initializers, i).int_values()).collect::<Vec<_>>(),
            [Some(vec![5, 6, 5, 6]), Some(vec![2, 2])]
        );
        assert_eq!(value(&initializers, "x_shape").dtype, INT64);
    }

    /// A weight standardized before its convolution (BiT's: a training-mode
    /// batch norm over the weight's rows, translated as `ReduceMean`s and
    /// an inference `BatchNormalization` with them) becomes one initializer:
    /// each row less its mean, over its standard deviation.
    #[test]
    fn a_standardized_weight_is_computed_at_export_time() {
        let nodes = vec![
            ints_node("last", &[2]),
            node("ReduceMean", &["w", "last"], "mean", vec![("keepdims", Attribute::Int(1))]),
            node("Sub", &["w", "mean"], "centered", vec![]),
            node("Mul", &["centered", "centered"], "squares", vec![]),
            node("ReduceMean", &["squares", "last"], "var", vec![("keepdims", Attribute::Int(0))]),
            ints_node("rows", &[2]),
            node("Reshape", &["mean", "rows"], "row_mean", vec![]),
            node("Reshape", &["var", "rows"], "row_var", vec![]),
            node(
                "BatchNormalization",
                &["w", "one", "zero", "row_mean", "row_var"],
                "standardized",
                vec![("epsilon", Attribute::Float(0.0))],
            ),
            node("Mul", &["x", "standardized"], "y", vec![]),
        ];
        let initializers = [
            floats("w", &[1, 2, 3], &[1.0, 2.0, 3.0, 2.0, 4.0, 9.0]),
            floats("one", &[2], &[1.0, 1.0]),
            floats("zero", &[2], &[0.0, 0.0]),
        ];
        let (nodes, initializers, report) =
            folded(&nodes, &initializers, &["y"], counting(&[1, 2, 3]), &HashMap::new());
        assert_eq!(ops(&nodes), ["Mul"]);
        assert_eq!(report.folded, 7);
        let (d0, d1) = ((2.0f64 / 3.0).sqrt(), (26.0f64 / 3.0).sqrt());
        let expected = [-1.0 / d0, 0.0, 1.0 / d0, -3.0 / d1, -1.0 / d1, 4.0 / d1];
        let standardized = value(&initializers, producer(&nodes, "y").inputs[1].as_str());
        for (got, want) in standardized.floats().iter().zip(expected) {
            assert!((got - want).abs() < 1e-6, "{:?} != {expected:?}", standardized.data);
        }
    }

    /// A packing plugin's `Concat`s of weights, folded: each packed weight's
    /// bytes are what numpy's `concatenate` of the parts gives, whether the
    /// parts are stored transposed (past one block of output rows), read as
    /// stored along an inner axis (rows interleaved) or converted to
    /// float16, and quantized parts joined along N are the packed weight
    /// quantized as one; a part read elsewhere too keeps its `Concat`.
    #[test]
    fn concats_of_weights_stream_as_one_weight_equal_to_the_concatenation() {
        use crate::weights::cast::Cast;
        use crate::weights::quantize::{Int4Part, Int4Weight};
        use hfx_dtype::DType;
        let le = |values: &[f32]| values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
        let weight = |name: &str, dims: &[i64], bytes: Bytes<'static>| Initializer {
            header: p::TensorProto {
                dims: dims.to_vec(),
                data_type: Some(FLOAT),
                name: Some(name.into()),
                ..Default::default()
            },
            bytes,
        };
        let concat = |inputs: &[&str], output: &str, axis: i64| {
            node("Concat", inputs, output, vec![("axis", Attribute::Int(axis))])
        };
        // q, k and v projections stored [N, K] as `nn.Linear` stores them, K = 70.
        let k = 70usize;
        let widths = [6usize, 3, 3];
        let stored: Vec<Vec<f32>> = widths
            .iter()
            .enumerate()
            .map(|(p, &n)| (0..n * k).map(|v| (p * 1000 + v) as f32 * 0.25 - 7.0).collect())
            .collect();
        let stored: &'static [&'static [u8]] =
            Vec::leak(stored.iter().map(|s| &*Vec::leak(le(s))).collect());
        let transposed = |p: usize, cast| Bytes::Transposed {
            source: stored[p],
            rows: widths[p],
            cols: k,
            element: 4,
            cast,
        };
        // numpy: np.concatenate([w.T for w in stored], axis=1), [K, 12].
        let value = move |p: usize, n: usize, i: usize| {
            f32::from_le_bytes(stored[p][(n * k + i) * 4..][..4].try_into().unwrap())
        };
        let expected: Vec<f32> = (0..k)
            .flat_map(|i| (0..3).flat_map(move |p| (0..widths[p]).map(move |n| (p, n, i))))
            .map(|(p, n, i)| value(p, n, i))
            .collect();
        let half = Cast::new(DType::Float32, DType::Float16);
        let mut initializers = vec![
            weight("q", &[70, 6], transposed(0, None)),
            weight("k", &[70, 3], transposed(1, None)),
            weight("v", &[70, 3], transposed(2, None)),
            weight("q16", &[70, 6], transposed(0, half)),
            weight("k16", &[70, 3], transposed(1, half)),
            weight("v16", &[70, 3], transposed(2, half)),
            // GPT-2's Conv1D weights are stored [K, N]: runs of each row interleave.
            weight("a", &[2, 3], Bytes::Mapped(Vec::leak(le(&[1., 2., 3., 4., 5., 6.])))),
            weight("b", &[2, 1], Bytes::Owned(le(&[7., 8.]))),
            weight("c", &[2, 1], Bytes::Owned(le(&[7., 8.]))),
            weight("shared", &[2, 1], Bytes::Owned(le(&[9., 10.]))),
        ];
        // Two MatMulNBits siblings' packed values and scales, joined along N.
        let int4 = |n: usize, source: &'static [u8], part| Bytes::Int4 {
            source,
            weight: Int4Weight {
                k,
                n,
                stored_n_by_k: true,
                stored: DType::Float32,
                scale: DType::Float32,
                block: 32,
                symmetric: false,
            },
            part,
        };
        for part in [Int4Part::Packed, Int4Part::Scales, Int4Part::ZeroPoints] {
            let name = format!("{part:?}");
            initializers.push(weight(&format!("{name}0"), &[6, 3], int4(6, stored[0], part)));
            initializers.push(weight(&format!("{name}1"), &[3, 3], int4(3, stored[1], part)));
        }
        let nodes = vec![
            concat(&["q", "k", "v"], "qkv", 1),
            concat(&["q16", "k16", "v16"], "qkv16", -1),
            concat(&["a", "b"], "ab", 1),
            concat(&["c", "shared"], "unfolded", 1),
            node("Neg", &["shared"], "negated", vec![]),
            concat(&["Packed0", "Packed1"], "packed", 0),
            concat(&["Scales0", "Scales1"], "scales", 0),
            concat(&["ZeroPoints0", "ZeroPoints1"], "zero_points", 0),
        ];
        let outputs =
            ["qkv", "qkv16", "ab", "unfolded", "negated", "packed", "scales", "zero_points"];
        // Each concatenation read by a node: a graph output's would stay.
        let mut after = nodes;
        for (i, output) in outputs.iter().enumerate() {
            after.push(node("Identity", &[output], &format!("out{i}"), vec![]));
        }
        let keep: HashSet<&str> = HashSet::new();
        assert_eq!(concatenate_weights(&mut after, &mut initializers, &keep), 6);
        let left: Vec<&str> = ops(&after).into_iter().filter(|&op| op != "Identity").collect();
        assert_eq!(left, ["Concat", "Neg"], "`shared` is read twice: its Concat stays");
        let bytes = |name: &str| {
            let init = initializers.iter().find(|i| i.header.name.as_deref() == Some(name));
            let init = init.unwrap_or_else(|| panic!("no initializer {name}"));
            (init.header.dims.clone(), init.bytes.to_vec())
        };
        assert_eq!(bytes("qkv"), (vec![70, 12], le(&expected)));
        let expected16: Vec<u8> =
            expected.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect();
        assert_eq!(bytes("qkv16"), (vec![70, 12], expected16));
        assert_eq!(bytes("ab"), (vec![2, 4], le(&[1., 2., 3., 7., 4., 5., 6., 8.])));
        // The siblings' weights quantized as one [9, 70] weight: what the packed MatMulNBits reads.
        let joined: &'static [u8] = Vec::leak([stored[0], stored[1]].concat());
        for (part, name) in [
            (Int4Part::Packed, "packed"),
            (Int4Part::Scales, "scales"),
            (Int4Part::ZeroPoints, "zero_points"),
        ] {
            assert_eq!(bytes(name).1, int4(9, joined, part).to_vec(), "{part:?}");
            assert_eq!(bytes(name).0[0], 9);
        }
        assert!(initializers.iter().all(|i| i.header.name.as_deref() != Some("k")));
    }
}
