//! `GatherND` over index grids: `x[arange(n0)[:, None], arange(n1)[None, :]]`
//! (transformers' padding mask, `attention_mask[batch_idx, kv_idx]`) reads
//! the leading `[n0, n1]` block of `x`, every element once, in order. A
//! translation writes each index as a `Range` from 0 by 1 unsqueezed to its
//! axis and broadcast against the others by adding them times zero, the
//! indices stacked on a last axis: a dozen nodes where a `Slice` to the
//! ranges' lengths and an `Unsqueeze` to the grid's rank compute the same
//! (for indices in bounds, which a `GatherND` requires).

use std::collections::{BTreeMap, HashMap};

use super::super::proto as p;
use super::known::Known;
use super::known::INT64;
use super::{small_int_initializers, Bytes, Initializer, Node};

/// A value of a broadcast index grid: every axis of its shape is 1 but those
/// in `extent`, each as long as a `Range` (by its output name).
#[derive(Clone, PartialEq)]
struct Grid {
    rank: usize,
    extent: BTreeMap<usize, String>,
    /// The axis whose position each element holds (its `Range` counting
    /// along it); None where every element is 0.
    along: Option<usize>,
}

/// Indices stacked for a `GatherND`: grid `k` indexes the data's axis `k`.
struct Stacked {
    rank: usize,
    extent: BTreeMap<usize, String>,
    along: Vec<usize>,
}

/// Rewrites each `GatherND` over an index grid as a `Slice` and an
/// `Unsqueeze` (inserted in its place, under its output name); the nodes that
/// computed the grid are left to dead-code elimination. How many were
/// rewritten.
pub fn slice_index_grids(nodes: &mut Vec<Node>, initializers: &mut Vec<Initializer>) -> usize {
    let small = small_int_initializers(initializers);
    let known_ints = |name: &str| small.get(name).and_then(Known::int_values);
    let producers: HashMap<&str, &Node> =
        nodes.iter().flat_map(|n| n.outputs.iter().map(move |o| (o.as_str(), n))).collect();
    let mut grids: HashMap<String, Grid> = HashMap::new();
    let mut stacks: HashMap<String, Stacked> = HashMap::new();
    // Each `Range`'s length as a 1-D value, or the 0-d limit to unsqueeze.
    let mut limits: HashMap<String, (String, bool)> = HashMap::new();
    let mut rewrites: Vec<(usize, Vec<Node>)> = Vec::new();
    let mut added = Vec::new();
    for (position, node) in nodes.iter().enumerate() {
        if !node.domain.is_empty() || node.outputs.len() != 1 || node.function.is_some() {
            continue;
        }
        let output = &node.outputs[0];
        let grid = |i: usize| node.inputs.get(i).and_then(|n| grids.get(n));
        let computed = match node.op_type.as_str() {
            "Range" if node.inputs.len() == 3 => {
                let from_zero = known_ints(&node.inputs[0]) == Some(vec![0]);
                let by_one = known_ints(&node.inputs[2]) == Some(vec![1]);
                // A negative limit counts nothing, where a slice's end would count from the back.
                let counted = nonnegative(&node.inputs[1], &producers, &known_ints, 8);
                if from_zero && by_one && counted {
                    // A 0-d limit that squeezed a 1-D value of one element: that value.
                    let limit = &node.inputs[1];
                    let squeezed = producers.get(limit.as_str()).filter(|s| {
                        s.op_type == "Squeeze"
                            && s.domain.is_empty()
                            && s.inputs.len() == 2
                            && known_ints(&s.inputs[1]) == Some(vec![0])
                    });
                    limits.insert(
                        output.clone(),
                        match squeezed {
                            Some(s) => (s.inputs[0].clone(), false),
                            None => (limit.clone(), true),
                        },
                    );
                    Some(Grid {
                        rank: 1,
                        extent: BTreeMap::from([(0, output.clone())]),
                        along: Some(0),
                    })
                } else {
                    None
                }
            }
            "Unsqueeze" if node.inputs.len() == 2 => grid(0)
                .and_then(|g| unsqueezed(g, &known_ints(&node.inputs[1])?).filter(|u| u.rank <= 8)),
            "Mul" if node.inputs.len() == 2 => {
                let zero = |i: usize| {
                    small
                        .get(&node.inputs[i])
                        .is_some_and(|k| k.dims.is_empty() && k.int_values() == Some(vec![0]))
                };
                let times_zero = |g: &Grid| Grid { along: None, ..g.clone() };
                match (grid(0), grid(1)) {
                    (Some(g), None) if zero(1) => Some(times_zero(g)),
                    (None, Some(g)) if zero(0) => Some(times_zero(g)),
                    _ => None,
                }
            }
            "Add" if node.inputs.len() == 2 => match (grid(0), grid(1)) {
                (Some(a), Some(b)) => added_grids(a, b),
                _ => None,
            },
            "Concat" if !node.inputs.is_empty() => {
                let parts: Option<Vec<&Grid>> =
                    node.inputs.iter().map(|n| grids.get(n.as_str())).collect();
                if let Some(stacked) = parts.and_then(|parts| stacked(node, &parts)) {
                    stacks.insert(output.clone(), stacked);
                }
                None
            }
            "GatherND" if node.inputs.len() == 2 => {
                let batch_dims = match node.attribute("batch_dims") {
                    None => 0,
                    Some(super::Attribute::Int(b)) => *b,
                    Some(_) => -1,
                };
                let stack = stacks.get(&node.inputs[1]).filter(|_| batch_dims == 0);
                if let Some((new_nodes, new_initializers)) =
                    stack.and_then(|stack| sliced(node, stack, &limits))
                {
                    rewrites.push((position, new_nodes));
                    added.extend(new_initializers);
                }
                None
            }
            _ => None,
        };
        if let Some(g) = computed {
            grids.insert(output.clone(), g);
        }
    }
    let rewritten = rewrites.len();
    for (position, new_nodes) in rewrites.into_iter().rev() {
        nodes.splice(position..=position, new_nodes);
    }
    initializers.extend(added);
    rewritten
}

/// Whether `value` holds no negative number: sizes (`Shape`), what keeps or
/// gathers their elements, sums and products of such values, non-negative
/// constants; up to `depth` producers back.
fn nonnegative(
    value: &str,
    producers: &HashMap<&str, &Node>,
    known_ints: &dyn Fn(&str) -> Option<Vec<i64>>,
    depth: usize,
) -> bool {
    if let Some(values) = known_ints(value) {
        return values.iter().all(|&v| v >= 0);
    }
    let Some(node) = producers.get(value).filter(|n| n.domain.is_empty() && depth > 0) else {
        return false;
    };
    let operand = |i: usize| {
        node.inputs.get(i).is_some_and(|v| nonnegative(v, producers, known_ints, depth - 1))
    };
    match node.op_type.as_str() {
        "Shape" | "Size" => true,
        "Squeeze" | "Unsqueeze" | "Reshape" | "Gather" | "Slice" => operand(0),
        "Add" | "Mul" | "Concat" => (0..node.inputs.len()).all(operand),
        _ => false,
    }
}

/// `g` unsqueezed at `axes` (of the result; negative from its end).
fn unsqueezed(g: &Grid, axes: &[i64]) -> Option<Grid> {
    let rank = g.rank + axes.len();
    let mut new: Vec<usize> = axes
        .iter()
        .map(|&a| if a < 0 { a + rank as i64 } else { a })
        .map(|a| usize::try_from(a).ok().filter(|&a| a < rank))
        .collect::<Option<_>>()?;
    new.sort_unstable();
    new.dedup();
    if new.len() != axes.len() {
        return None;
    }
    // The old axes, in order, land on the positions the new ones leave.
    let kept: Vec<usize> = (0..rank).filter(|a| !new.contains(a)).collect();
    Some(Grid {
        rank,
        extent: g.extent.iter().map(|(&a, n)| (kept[a], n.clone())).collect(),
        along: g.along.map(|a| kept[a]),
    })
}

/// `a + b` of two grids of one rank whose extents agree where both have
/// one, at most one of them counting.
fn added_grids(a: &Grid, b: &Grid) -> Option<Grid> {
    if a.rank != b.rank || (a.along.is_some() && b.along.is_some()) {
        return None;
    }
    let mut extent = a.extent.clone();
    for (&axis, name) in &b.extent {
        if extent.insert(axis, name.clone()).is_some_and(|old| &old != name) {
            return None;
        }
    }
    Some(Grid { rank: a.rank, extent, along: a.along.or(b.along) })
}

/// Grids each with a last axis of 1, counting along other axes, with one
/// extent, concatenated on that last axis.
fn stacked(node: &Node, parts: &[&Grid]) -> Option<Stacked> {
    let first = parts.first()?;
    let rank = first.rank.checked_sub(1)?;
    let axis = match node.attribute("axis") {
        Some(super::Attribute::Int(a)) => *a,
        _ => return None,
    };
    if axis != -1 && axis != rank as i64 {
        return None;
    }
    let along: Vec<usize> = parts.iter().map(|g| g.along).collect::<Option<_>>()?;
    let alike = parts.iter().all(|g| g.rank == first.rank && g.extent == first.extent);
    if !alike || first.extent.contains_key(&rank) || along.iter().any(|&a| a >= rank) {
        return None;
    }
    Some(Stacked { rank, extent: first.extent.clone(), along })
}

/// The nodes computing `gather`'s output from its data: a `Slice` of the
/// leading axes to the ranges' lengths, an `Unsqueeze` to the grid's rank;
/// and the initializers they read. None where grid `k` does not count
/// along an axis of its own, in order, or the grid has other axes.
fn sliced(
    gather: &Node,
    stack: &Stacked,
    limits: &HashMap<String, (String, bool)>,
) -> Option<(Vec<Node>, Vec<Initializer<'static>>)> {
    let increasing = stack.along.windows(2).all(|w| w[0] < w[1]);
    let own_axes = stack.extent.len() == stack.along.len()
        && stack.along.iter().all(|a| stack.extent.contains_key(a));
    let lengths: Option<Vec<&(String, bool)>> =
        stack.along.iter().map(|a| limits.get(&stack.extent[a])).collect();
    let (true, true, Some(lengths)) = (increasing, own_axes, lengths) else { return None };
    let out = &gather.outputs[0];
    let name = |what: &str| format!("{out}_grid_{what}");
    let node = |op: &str, inputs: Vec<String>, output: String| Node {
        op_type: op.into(),
        domain: String::new(),
        inputs,
        outputs: vec![output],
        attributes: Vec::new(),
        function: None,
    };
    let mut nodes = Vec::new();
    let mut initializers = vec![ints(&name("zero"), &[0])];
    let ends: Vec<String> = lengths
        .iter()
        .enumerate()
        .map(|(k, (limit, is_0d))| {
            if !is_0d {
                return limit.clone();
            }
            let length = name(&format!("length{k}"));
            nodes.push(node("Unsqueeze", vec![limit.clone(), name("zero")], length.clone()));
            length
        })
        .collect();
    let ends = if ends.len() == 1 {
        ends[0].clone()
    } else {
        let mut concat = node("Concat", ends, name("ends"));
        concat.attributes.push(("axis".into(), super::Attribute::Int(0)));
        nodes.push(concat);
        name("ends")
    };
    let count = stack.along.len();
    initializers.push(ints(&name("starts"), &vec![0; count]));
    initializers.push(ints(&name("axes"), &(0..count as i64).collect::<Vec<_>>()));
    let inputs = vec![gather.inputs[0].clone(), name("starts"), ends, name("axes")];
    let new_axes: Vec<i64> =
        (0..stack.rank).filter(|a| !stack.along.contains(a)).map(|a| a as i64).collect();
    if new_axes.is_empty() {
        nodes.push(node("Slice", inputs, out.clone()));
    } else {
        nodes.push(node("Slice", inputs, name("block")));
        initializers.push(ints(&name("new_axes"), &new_axes));
        nodes.push(node("Unsqueeze", vec![name("block"), name("new_axes")], out.clone()));
    }
    Some((nodes, initializers))
}

fn ints(name: &str, values: &[i64]) -> Initializer<'static> {
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

#[cfg(test)]
mod tests {
    use super::super::testing::{self, *};
    use super::*;
    use crate::onnx::Attribute;
    use std::collections::HashSet;

    /// `x[arange(b)[:, None, None], arange(s)[None, None, :]]` on a `[4, 4, 2]`
    /// `x`, as translate-shape writes it, the ranges as long as the input's
    /// first two axes: a `Slice` and an `Unsqueeze`, the same values. The
    /// indices stacked the other way round (`kv` indexing axis 0) stay a
    /// gather.
    #[test]
    fn a_gather_over_an_index_grid_is_a_slice() {
        let attr = |name: &'static str, v: i64| vec![(name, Attribute::Int(v))];
        let mut nodes = vec![
            node("Shape", &["x"], "lengths", vec![]),
            node("Gather", &["lengths", "zero"], "b", attr("axis", 0)),
            node("Gather", &["lengths", "one_1d"], "s_1d", attr("axis", 0)),
            node("Squeeze", &["s_1d", "axis0"], "s", vec![]),
            node("Range", &["zero", "b", "one"], "batch", vec![]),
            node("Range", &["zero", "s", "one"], "kv", vec![]),
            node("Unsqueeze", &["batch", "axes12"], "batch_idx", vec![]),
            node("Unsqueeze", &["kv", "axes01"], "kv_idx", vec![]),
            node("Mul", &["batch_idx", "zero"], "batch_zeros", vec![]),
            node("Mul", &["kv_idx", "zero"], "kv_zeros", vec![]),
            node("Add", &["batch_zeros", "kv_zeros"], "zeros", vec![]),
            node("Add", &["batch_idx", "zeros"], "batch_grid", vec![]),
            node("Add", &["kv_idx", "zeros"], "kv_grid", vec![]),
            node("Unsqueeze", &["batch_grid", "last"], "batch_col", vec![]),
            node("Unsqueeze", &["kv_grid", "last"], "kv_col", vec![]),
            node("Concat", &["batch_col", "kv_col"], "indices", attr("axis", -1)),
            node("GatherND", &["x", "indices"], "y", vec![]),
            node("Concat", &["kv_col", "batch_col"], "reversed", attr("axis", -1)),
            node("GatherND", &["x", "reversed"], "z", vec![]),
        ];
        let initializers = || {
            vec![
                testing::ints("axis0", &[0]),
                testing::ints("one_1d", &[1]),
                testing::ints("axes12", &[1, 2]),
                testing::ints("axes01", &[0, 1]),
                testing::ints("last", &[-1]),
                scalar("zero", 0),
                scalar("one", 1),
            ]
        };
        let x = counting(&[4, 4, 2]);
        let before = run_graph(&nodes, &initializers(), &[("x", x.clone())]);
        let mut after_initializers = initializers();
        let keep = HashSet::from(["y", "z"]);
        assert_eq!(slice_index_grids(&mut nodes, &mut after_initializers), 1);
        crate::onnx::optimize::eliminate_dead_code(&mut nodes, &keep);
        let count = |op: &str| ops(&nodes).iter().filter(|o| **o == op).count();
        assert_eq!((count("GatherND"), count("Slice")), (1, 1));
        assert_eq!(producer(&nodes, "y").op_type, "Unsqueeze");
        let after = run_graph(&nodes, &after_initializers, &[("x", x)]);
        assert_eq!(after["y"], before["y"]);
        assert_eq!(after["y"].dims, [4, 1, 4, 2]);
        assert_eq!(after["z"], before["z"]);
    }

    /// A range's limit must be known not to be negative: a size, sums and
    /// elements of sizes, a non-negative constant; not a difference.
    #[test]
    fn only_limits_known_not_negative_count_as_lengths() {
        let nodes = [
            node("Shape", &["x"], "sizes", vec![]),
            node("Gather", &["sizes", "i"], "size", vec![]),
            node("Add", &["size", "one"], "past", vec![]),
            node("Sub", &["size", "one"], "before", vec![]),
            node("Add", &["size", "minus_one"], "shorter", vec![]),
        ];
        let producers: HashMap<&str, &Node> =
            nodes.iter().map(|n| (n.outputs[0].as_str(), n)).collect();
        let constants = HashMap::from([("one", vec![1]), ("minus_one", vec![-1]), ("i", vec![-1])]);
        let known = |name: &str| constants.get(name).cloned();
        let verdict = |v: &str| nonnegative(v, &producers, &known, 8);
        assert!(verdict("size") && verdict("past") && verdict("one"));
        assert!(!verdict("before") && !verdict("shorter") && !verdict("x"));
    }

    fn scalar(name: &str, value: i64) -> Initializer<'static> {
        let mut init = testing::ints(name, &[value]);
        init.header.dims.clear();
        init
    }
}
