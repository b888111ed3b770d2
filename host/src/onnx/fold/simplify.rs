//! Peephole simplifications, applied node by node while folding, with the
//! known values at hand: translations emit each ATen op on its own, so the
//! seams between them hold nodes that compute their input (`x + 0` of an index
//! computation, a squeeze undone by the unsqueeze after it, transposes that
//! cancel) and pairs that one node computes (`Transpose` of a `Transpose`,
//! `Unsqueeze` of an `Unsqueeze`, `Reshape` of a `Reshape`).
//!
//! Each rule holds for every input shape and value: nothing here relies on a
//! shape the export might not see again. A merged node reads its producer's
//! input; the producer stays for its other readers, and dead code elimination
//! removes it when there are none.

use std::collections::HashMap;

use super::known::Known;
use super::{Attribute, Node};

/// What a node turned out to be.
#[derive(Debug)]
pub enum Simplified {
    /// It computes this value of the graph unchanged: its readers read it.
    Same(String),
    /// It and its producer are one node: this one (reading the producer's
    /// input), with a new constant input where it needs one (`name`, value).
    Merged(Box<Node>, Option<(String, Known)>),
}

/// A node under simplification, with what is known around it.
pub struct Site<'s, 'n> {
    node: &'s Node,
    /// The known value of each input (None: not known).
    inputs: Vec<Option<&'s Known>>,
    known: &'s HashMap<String, Known>,
    producer: &'s dyn Fn(&str) -> Option<&'n Node>,
    /// A value's shape, where the program fixes it (`shapes.rs`).
    shape_of: &'s dyn Fn(&str) -> Option<Vec<i64>>,
}

impl<'n> Site<'_, 'n> {
    /// Input `i`'s known integer values.
    fn ints(&self, i: usize) -> Option<Vec<i64>> {
        self.inputs.get(i).copied().flatten().and_then(Known::int_values)
    }

    /// The plain main-graph node computing input `i`.
    fn from(&self, i: usize) -> Option<&'n Node> {
        self.node
            .inputs
            .get(i)
            .filter(|n| !n.is_empty())
            .and_then(|n| (self.producer)(n))
            .filter(|p| p.domain.is_empty() && p.function.is_none())
    }
}

/// A peephole rule: what the node at the site is, if the rule's pattern
/// holds there.
pub type Rule = fn(&Site) -> Option<Simplified>;

/// The rules, tried in this order; the first that holds decides.
pub const RULES: &[(&str, Rule)] = &[
    ("whole_slice", whole_slice),
    ("neutral_operand", neutral_operand),
    ("identity_transpose", identity_transpose),
    ("transposes_compose", transposes_compose),
    ("squeeze_undone", squeeze_undone),
    ("unsqueezes_merge", unsqueezes_merge),
    ("reshapes_merge", reshapes_merge),
    ("single_concat", single_concat),
    ("expand_to_no_axes", expand_to_no_axes),
    ("expand_to_its_own_shape", expand_to_its_own_shape),
    ("shape_of_expanded_scalar", shape_of_expanded_scalar),
    ("shape_past_scalar_arithmetic", shape_past_scalar_arithmetic),
];

/// The simplification of `node` and the rule that found it, if any. `known`
/// holds the values known so far; `producer` finds the node computing a value
/// (main graph, already simplified); `shape_of` a value's shape where the
/// program fixes it.
pub fn simplify<'n>(
    node: &Node,
    known: &HashMap<String, Known>,
    producer: impl Fn(&str) -> Option<&'n Node>,
    shape_of: &dyn Fn(&str) -> Option<Vec<i64>>,
) -> Option<(&'static str, Simplified)> {
    if !node.domain.is_empty() || node.function.is_some() || node.outputs.len() != 1 {
        return None;
    }
    let site = Site {
        node,
        inputs: node.inputs.iter().map(|i| known.get(i)).collect(),
        known,
        producer: &producer,
        shape_of,
    };
    RULES.iter().find_map(|(name, rule)| rule(&site).map(|s| (*name, s)))
}

/// `Slice` from 0 to at least 2^31 - 1 (torch writes i64::MAX for "to the end")
/// with step 1 on every axis it names: it keeps every element, whatever the
/// data's shape (torch's `x[:, None]`, `logits[:, -0:]`).
fn whole_slice(site: &Site) -> Option<Simplified> {
    let node = site.node;
    if node.op_type != "Slice" || node.inputs.len() < 3 {
        return None;
    }
    let (starts, ends) = (site.ints(1)?, site.ints(2)?);
    let steps_are_one = match site.inputs.get(4) {
        None => true,
        Some(_) if node.inputs[4].is_empty() => true,
        Some(_) => site.ints(4).is_some_and(|steps| steps.iter().all(|&s| s == 1)),
    };
    // Named axes must be known (a repeated axis is the model's error, not ours to hide).
    let axes_known = node.inputs.get(3).is_none_or(|a| a.is_empty() || site.ints(3).is_some());
    let whole = steps_are_one
        && axes_known
        && starts.iter().all(|&s| s == 0)
        && ends.iter().all(|&e| e >= i32::MAX as i64);
    whole.then(|| Simplified::Same(node.inputs[0].clone()))
}

/// `x + 0`, `0 + x`, `x - 0`, `x * 1`, `1 * x`, `x / 1`, `x and true`,
/// `x or false` (either side) with a rank-0 neutral operand: a rank-0 operand
/// broadcasts without growing the other one (`x * [1]` may turn a scalar `x`
/// into a vector, so it stays).
fn neutral_operand(site: &Site) -> Option<Simplified> {
    let node = site.node;
    let op = node.op_type.as_str();
    if !matches!(op, "Add" | "Sub" | "Mul" | "Div" | "And" | "Or") || node.inputs.len() != 2 {
        return None;
    }
    let neutral = if matches!(op, "Add" | "Sub" | "Or") { 0.0 } else { 1.0 };
    let is_neutral =
        |i: usize| site.inputs[i].is_some_and(|k| k.dims.is_empty() && k.floats() == [neutral]);
    let commutes = matches!(op, "Add" | "Mul" | "And" | "Or");
    if is_neutral(1) {
        Some(Simplified::Same(node.inputs[0].clone()))
    } else if commutes && is_neutral(0) {
        Some(Simplified::Same(node.inputs[1].clone()))
    } else {
        None
    }
}

/// `Transpose` by the identity permutation.
fn identity_transpose(site: &Site) -> Option<Simplified> {
    let node = site.node;
    let perm = ints_attribute(node, "perm").filter(|_| node.op_type == "Transpose")?;
    let identity = perm.iter().enumerate().all(|(i, &p)| p == i as i64);
    identity.then(|| Simplified::Same(node.inputs[0].clone()))
}

/// `Transpose` of a `Transpose`: one transpose by the composed permutation,
/// or none where they cancel.
fn transposes_compose(site: &Site) -> Option<Simplified> {
    let node = site.node;
    let perm = ints_attribute(node, "perm").filter(|_| node.op_type == "Transpose")?;
    let inner = site.from(0).filter(|p| p.op_type == "Transpose")?;
    let inner_perm = ints_attribute(inner, "perm")?;
    if inner_perm.len() != perm.len() || perm.iter().any(|&p| p < 0 || p as usize >= perm.len()) {
        return None;
    }
    // out[k] = inner[perm[k]] = x[inner_perm[perm[k]]].
    let composed: Vec<i64> = perm.iter().map(|&p| inner_perm[p as usize]).collect();
    if composed.iter().enumerate().all(|(i, &p)| p == i as i64) {
        return Some(Simplified::Same(inner.inputs[0].clone()));
    }
    let mut merged = node.clone();
    merged.inputs[0] = inner.inputs[0].clone();
    merged.attributes = vec![("perm".into(), Attribute::Ints(composed))];
    Some(Simplified::Merged(Box::new(merged), None))
}

/// An `Unsqueeze` or `Squeeze` of a known-axes node of either kind: the
/// outer's axes, the inner node and the inner's axes.
fn squeeze_pair<'n>(site: &Site<'_, 'n>) -> Option<(Vec<i64>, &'n Node, Vec<i64>)> {
    let node = site.node;
    if !matches!(node.op_type.as_str(), "Unsqueeze" | "Squeeze") || node.inputs.len() != 2 {
        return None;
    }
    let axes = site.ints(1)?;
    let inner = site.from(0).filter(|p| p.inputs.len() == 2)?;
    let inner_axes = site.known.get(&inner.inputs[1]).and_then(Known::int_values)?;
    Some((axes, inner, inner_axes))
}

/// `Unsqueeze` of a `Squeeze` of the same axes, or the reverse: the squeezed
/// axes had size 1, or Squeeze would have failed; both normalize negative
/// axes by the same rank.
fn squeeze_undone(site: &Site) -> Option<Simplified> {
    let (axes, inner, inner_axes) = squeeze_pair(site)?;
    let inverse = if site.node.op_type == "Unsqueeze" { "Squeeze" } else { "Unsqueeze" };
    (inner.op_type == inverse && inner_axes == axes)
        .then(|| Simplified::Same(inner.inputs[0].clone()))
}

/// `Unsqueeze` of an `Unsqueeze`, both with non-negative axes: one unsqueeze.
/// The outer's axes are new dims of the result; the inner's j-th new dim
/// lands at the j-th position the outer's axes leave.
fn unsqueezes_merge(site: &Site) -> Option<Simplified> {
    let node = site.node;
    let (axes, inner, inner_axes) = squeeze_pair(site)?;
    if node.op_type != "Unsqueeze" || inner.op_type != "Unsqueeze" {
        return None;
    }
    if axes.iter().chain(&inner_axes).any(|&a| a < 0) {
        return None;
    }
    let free: Vec<i64> = (0..)
        .filter(|p| !axes.contains(p))
        .take(inner_axes.iter().max().map_or(0, |&m| m as usize + 1))
        .collect();
    let mut combined: Vec<i64> =
        axes.iter().copied().chain(inner_axes.iter().map(|&j| free[j as usize])).collect();
    combined.sort_unstable();
    let name = format!("{}_axes", node.outputs[0]);
    let mut merged = node.clone();
    merged.inputs = vec![inner.inputs[0].clone(), name.clone()];
    Some(Simplified::Merged(
        Box::new(merged),
        Some((name, Known::ints(vec![combined.len() as i64], combined))),
    ))
}

/// `Reshape` of a `Reshape`: the outer shape decides alone when it names no
/// 0 (which would copy a dim of its input, the inner result); -1 is solved
/// from the element count, which both reshapes keep.
fn reshapes_merge(site: &Site) -> Option<Simplified> {
    let node = site.node;
    if node.op_type != "Reshape" || node.inputs.len() != 2 {
        return None;
    }
    let shape = site.ints(1)?;
    let allow_zero = matches!(node.attribute("allowzero"), Some(Attribute::Int(1)));
    if !allow_zero && shape.contains(&0) {
        return None;
    }
    let inner = site.from(0).filter(|p| p.op_type == "Reshape")?;
    let mut merged = node.clone();
    merged.inputs[0] = inner.inputs[0].clone();
    Some(Simplified::Merged(Box::new(merged), None))
}

/// `Concat` of one input: that input (a translation stacking a list of
/// indices or sizes that holds one).
fn single_concat(site: &Site) -> Option<Simplified> {
    let node = site.node;
    (node.op_type == "Concat" && node.inputs.len() == 1 && !node.inputs[0].is_empty())
        .then(|| Simplified::Same(node.inputs[0].clone()))
}

/// `Expand` to a shape of no dims (`[]`): its input, which broadcasting with
/// a rank-0 shape leaves as it is (a copy into a 0-d view, `index[0, 0] = v`,
/// expanded to the view's shape). OpenVINO's ONNX frontend reads that
/// `Expand` as one to `[1]`, a rank the graph after it does not expect
/// (openvinotoolkit/openvino#37598).
fn expand_to_no_axes(site: &Site) -> Option<Simplified> {
    let node = site.node;
    let no_axes = site.inputs.get(1).copied().flatten().is_some_and(|k| k.dims == [0]);
    (node.op_type == "Expand" && node.inputs.len() == 2 && no_axes)
        .then(|| Simplified::Same(node.inputs[0].clone()))
}

/// `Expand` of a value whose shape the program fixes to a known shape it
/// already has (broadcasting changes nothing): that value. Translations
/// expand operands to the shape of their result (`index_put`'s values,
/// `where`'s branches), which a static export often already is.
fn expand_to_its_own_shape(site: &Site) -> Option<Simplified> {
    let node = site.node;
    if node.op_type != "Expand" || node.inputs.len() != 2 {
        return None;
    }
    let dims = (site.shape_of)(&node.inputs[0])?;
    let grown = super::known::broadcast_dims(&dims, &site.ints(1)?)?;
    (grown == dims).then(|| Simplified::Same(node.inputs[0].clone()))
}

/// `Shape` (whole) of `Expand(c, shape)` with a known rank-0 `c`: `shape`,
/// since a rank-0 value broadcasts to exactly the shape asked for (torch's
/// `empty_like`/`zeros_like` of a value whose shape is read again).
fn shape_of_expanded_scalar(site: &Site) -> Option<Simplified> {
    let node = site.node;
    let whole = node.attribute("start").is_none_or(|a| matches!(a, Attribute::Int(0)))
        && node.attribute("end").is_none();
    if node.op_type != "Shape" || node.inputs.len() != 1 || !whole {
        return None;
    }
    let expand = site.from(0).filter(|p| p.op_type == "Expand" && p.inputs.len() == 2)?;
    let scalar = site.known.get(&expand.inputs[0]).is_some_and(|k| k.dims.is_empty());
    scalar.then(|| Simplified::Same(expand.inputs[1].clone()))
}

/// `Shape` of `x + c`, `c * x` (any of the four arithmetic ops, either
/// side) with a known rank-0 `c`: the shape of `x`, which a rank-0 operand
/// never changes (index arithmetic whose shape is read again).
fn shape_past_scalar_arithmetic(site: &Site) -> Option<Simplified> {
    let node = site.node;
    if node.op_type != "Shape" || node.inputs.len() != 1 {
        return None;
    }
    let arithmetic = site
        .from(0)
        .filter(|p| matches!(p.op_type.as_str(), "Add" | "Sub" | "Mul" | "Div"))
        .filter(|p| p.inputs.len() == 2)?;
    let scalar =
        |i: usize| site.known.get(&arithmetic.inputs[i]).is_some_and(|k| k.dims.is_empty());
    let x = match (scalar(0), scalar(1)) {
        (false, true) => &arithmetic.inputs[0],
        (true, false) => &arithmetic.inputs[1],
        _ => return None,
    };
    let mut merged = node.clone();
    merged.inputs[0] = x.clone();
    Some(Simplified::Merged(Box::new(merged), None))
}

fn ints_attribute<'a>(node: &'a Node, name: &str) -> Option<&'a Vec<i64>> {
    match node.attribute(name) {
        Some(Attribute::Ints(v)) => Some(v),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::eval::evaluate;
    use super::super::testing::*;
    use super::super::{fold, FoldReport};
    use super::*;
    use crate::onnx::weights::Initializer;

    /// The rule that fires at the node computing `output`, with the values of
    /// the graph's Constant nodes known and the nodes before it as producers.
    fn fired(nodes: &[Node], output: &str) -> Option<&'static str> {
        fired_with_shapes(nodes, output, &[])
    }

    /// `fired`, with the shapes the program fixes.
    fn fired_with_shapes(
        nodes: &[Node],
        output: &str,
        shapes: &[(&str, &[i64])],
    ) -> Option<&'static str> {
        let shapes: HashMap<&str, Vec<i64>> =
            shapes.iter().map(|(n, d)| (*n, d.to_vec())).collect();
        let known: HashMap<String, Known> = nodes
            .iter()
            .filter(|n| n.op_type == "Constant")
            .map(|n| (n.outputs[0].clone(), evaluate(n, &[]).unwrap().remove(0)))
            .collect();
        let at = nodes.iter().position(|n| n.outputs[0] == output).unwrap();
        let before = &nodes[..at];
        let shape_of = |name: &str| shapes.get(name).cloned();
        simplify(&nodes[at], &known, |name| before.iter().find(|n| n.outputs[0] == name), &shape_of)
            .map(|(rule, _)| rule)
    }

    /// The graph folded (the pass the rules run in), checked to compute the
    /// same `outputs` from `x`; its nodes and what folding counted.
    fn folded(nodes: &[Node], outputs: &[&str], x: Known) -> (Vec<Node>, FoldReport) {
        let mut report = FoldReport::default();
        let (after, _) = rewritten(nodes, &[], outputs, &[("x", x)], |n, i, keep| {
            fold(n, i, keep, &HashMap::new(), &mut report)
        });
        (after, report)
    }

    fn folded_with_initializers(
        nodes: &[Node],
        outputs: &[&str],
        x: Known,
    ) -> (Vec<Node>, Vec<Initializer<'static>>) {
        rewritten(nodes, &[], outputs, &[("x", x)], |n, i, keep| {
            fold(n, i, keep, &HashMap::new(), &mut FoldReport::default())
        })
    }

    fn slice_constants() -> Vec<Node> {
        vec![
            ints_node("zero", &[0, 0]),
            ints_node("end", &[i64::MAX, i64::MAX]),
            ints_node("axes", &[0, -1]),
            ints_node("two", &[2, 2]),
        ]
    }

    #[test]
    fn whole_slice() {
        let mut nodes = slice_constants();
        nodes.extend([
            node("Slice", &["x", "zero", "end", "axes"], "whole", vec![]),
            node("Slice", &["whole", "zero", "end"], "whole_again", vec![]),
            node("Neg", &["whole_again"], "y", vec![]),
        ]);
        assert_eq!(fired(&nodes, "whole"), Some("whole_slice"));
        assert_eq!(fired(&nodes, "whole_again"), Some("whole_slice"));
        let (after, report) = folded(&nodes, &["y"], counting(&[2, 3]));
        assert_eq!(ops(&after), ["Neg"]);
        assert_eq!(after[0].inputs, ["x"]);
        assert_eq!(report.identities, 2);
    }

    #[test]
    fn whole_slice_not_strided_short_over_unknown_axes_or_a_graph_output() {
        let mut nodes = slice_constants();
        nodes.extend([
            node("Slice", &["x", "zero", "end", "axes", "two"], "strided", vec![]),
            node("Slice", &["x", "zero", "two"], "head", vec![]),
            node("Shape", &["x"], "shape", vec![]),
            node("Sub", &["shape", "shape"], "unknown_axes", vec![]),
            node("Slice", &["x", "zero", "end", "unknown_axes"], "over_unknown", vec![]),
            node("Slice", &["x", "zero", "end"], "out", vec![]),
        ]);
        for output in ["strided", "head", "over_unknown"] {
            assert_eq!(fired(&nodes, output), None, "{output}");
        }
        let (after, report) =
            folded(&nodes, &["strided", "head", "over_unknown", "out"], counting(&[2, 3]));
        assert_eq!(report.identities, 0, "a graph output keeps its slice");
        assert_eq!(after.iter().filter(|n| n.op_type == "Slice").count(), 4);
    }

    #[test]
    fn neutral_operand() {
        let nodes = vec![
            float_node("zero", 0.0),
            float_node("one", 1.0),
            node("Add", &["x", "zero"], "a", vec![]),
            node("Add", &["zero", "a"], "b", vec![]),
            node("Sub", &["b", "zero"], "c", vec![]),
            node("Mul", &["one", "c"], "d", vec![]),
            node("Div", &["d", "one"], "e", vec![]),
            node("Neg", &["e"], "y", vec![]),
        ];
        for output in ["a", "b", "c", "d", "e"] {
            assert_eq!(fired(&nodes, output), Some("neutral_operand"), "{output}");
        }
        let (after, report) = folded(&nodes, &["y"], counting(&[2, 3]));
        assert_eq!(ops(&after), ["Neg"]);
        assert_eq!(after[0].inputs, ["x"]);
        assert_eq!(report.identities, 5);
    }

    /// `true and x`, `x or false` (rank-0 constants): a causal mask and-ed
    /// with an all-true scalar; `x and false` is not `x`.
    #[test]
    fn neutral_operand_of_and_and_or() {
        let nodes = vec![
            node("Constant", &[], "yes", vec![("value_int", Attribute::Int(1))]),
            node("Constant", &[], "no", vec![("value_int", Attribute::Int(0))]),
            node("And", &["yes", "x"], "a", vec![]),
            node("Or", &["a", "no"], "b", vec![]),
            node("And", &["b", "no"], "c", vec![]),
        ];
        assert_eq!(fired(&nodes, "a"), Some("neutral_operand"));
        assert_eq!(fired(&nodes, "b"), Some("neutral_operand"));
        assert_eq!(fired(&nodes, "c"), None);
    }

    /// `x * [1]` may broadcast a scalar `x`; `0 - x` is not `x`; `x + 1` is not.
    #[test]
    fn neutral_operand_not_of_rank_1_not_on_the_left_of_a_sub_nor_another_value() {
        let nodes = vec![
            float_node("zero", 0.0),
            float_node("one", 1.0),
            node("Constant", &[], "one_vec", vec![("value_floats", Attribute::Floats(vec![1.0]))]),
            node("Mul", &["x", "one_vec"], "a", vec![]),
            node("Sub", &["zero", "a"], "b", vec![]),
            node("Add", &["b", "one"], "c", vec![]),
        ];
        for output in ["a", "b", "c"] {
            assert_eq!(fired(&nodes, output), None, "{output}");
        }
        let (after, _) = folded(&nodes, &["c"], tensor(&[], &[2.0]));
        assert_eq!(ops(&after), ["Mul", "Sub", "Add"]);
    }

    #[test]
    fn identity_transpose() {
        let nodes = vec![
            node("Transpose", &["x"], "t", vec![("perm", Attribute::Ints(vec![0, 1]))]),
            node("Neg", &["t"], "y", vec![]),
            // without perm a transpose reverses the axes
            node("Transpose", &["x"], "reversed", vec![]),
            node("Transpose", &["x"], "swapped", vec![("perm", Attribute::Ints(vec![1, 0]))]),
        ];
        assert_eq!(fired(&nodes, "t"), Some("identity_transpose"));
        assert_eq!(fired(&nodes, "reversed"), None);
        assert_eq!(fired(&nodes, "swapped"), None);
        let (after, _) = folded(&nodes, &["y", "reversed", "swapped"], counting(&[2, 3]));
        assert_eq!(ops(&after), ["Neg", "Transpose", "Transpose"]);
        assert_eq!(after[0].inputs, ["x"]);
    }

    #[test]
    fn transposes_compose() {
        let perm = |p: &[i64]| vec![("perm", Attribute::Ints(p.to_vec()))];
        let nodes = vec![
            node("Transpose", &["x"], "t1", perm(&[1, 0, 2])),
            node("Transpose", &["t1"], "t2", perm(&[0, 2, 1])),
            node("Transpose", &["t1"], "cancelled", perm(&[1, 0, 2])),
            node("Neg", &["cancelled"], "n", vec![]),
            node("Transpose", &["n"], "of_neg", perm(&[1, 0, 2])),
        ];
        assert_eq!(fired(&nodes, "t2"), Some("transposes_compose"));
        assert_eq!(fired(&nodes, "cancelled"), Some("transposes_compose"));
        assert_eq!(fired(&nodes, "of_neg"), None, "the inner node is no transpose");
        let (mut after, report) = folded(&nodes, &["t2", "of_neg"], counting(&[2, 3, 4]));
        assert_eq!((report.identities, report.merged_pairs), (1, 1));
        crate::onnx::optimize::eliminate_dead_code(&mut after, &["t2", "of_neg"].into());
        let t2 = producer(&after, "t2");
        assert_eq!(t2.inputs, ["x"]);
        assert_eq!(t2.attribute("perm"), Some(&Attribute::Ints(vec![1, 2, 0])));
        assert_eq!(producer(&after, "n").inputs, ["x"], "the transposes cancel");
        assert_eq!(ops(&after), ["Transpose", "Neg", "Transpose"], "t1 is read no more");
    }

    #[test]
    fn squeeze_undone() {
        let nodes = vec![
            ints_node("axis0", &[0]),
            ints_node("axis1", &[1]),
            node("Squeeze", &["x", "axis0"], "squeezed", vec![]),
            node("Unsqueeze", &["squeezed", "axis0"], "restored", vec![]),
            node("Unsqueeze", &["restored", "axis1"], "grown", vec![]),
            node("Squeeze", &["grown", "axis1"], "back", vec![]),
            node("Unsqueeze", &["squeezed", "axis1"], "elsewhere", vec![]),
        ];
        assert_eq!(fired(&nodes, "restored"), Some("squeeze_undone"));
        assert_eq!(fired(&nodes, "back"), Some("squeeze_undone"));
        assert_eq!(fired(&nodes, "elsewhere"), None, "another axis: a new shape");
        let (after, report) = folded(&nodes, &["back", "elsewhere"], counting(&[1, 3]));
        assert_eq!(report.identities, 1);
        assert_eq!(producer(&after, "grown").inputs[0], "x");
        assert_eq!(producer(&after, "back").op_type, "Squeeze", "a graph output keeps its node");
    }

    #[test]
    fn unsqueezes_merge() {
        let nodes = vec![
            ints_node("inner_axes", &[1]),
            ints_node("outer_axes", &[0, 3]),
            ints_node("minus1", &[-1]),
            node("Unsqueeze", &["x", "inner_axes"], "u1", vec![]),
            node("Unsqueeze", &["u1", "outer_axes"], "u2", vec![]),
            node("Unsqueeze", &["x", "minus1"], "n1", vec![]),
            node("Unsqueeze", &["n1", "minus1"], "n2", vec![]),
        ];
        assert_eq!(fired(&nodes, "u2"), Some("unsqueezes_merge"));
        assert_eq!(fired(&nodes, "n2"), None, "negative axes");
        let (after, initializers) =
            folded_with_initializers(&nodes, &["u2", "n2"], counting(&[2, 3]));
        let u2 = producer(&after, "u2");
        assert_eq!(u2.inputs[0], "x");
        // [2, 3] -> [2, 1, 3] -> [1, 2, 1, 1, 3]: one unsqueeze at [0, 2, 3]
        assert_eq!(value(&initializers, &u2.inputs[1]).int_values(), Some(vec![0, 2, 3]));
        assert_eq!(producer(&after, "n2").inputs[0], "n1");
    }

    #[test]
    fn single_concat_and_shape_of_expanded_scalar() {
        let nodes = vec![
            float_node("zero", 0.0),
            node("Shape", &["x"], "x_shape", vec![]),
            node("Expand", &["zero", "x_shape"], "zeros", vec![]),
            node("Shape", &["zeros"], "zeros_shape", vec![]),
            node("Concat", &["zeros_shape"], "stacked", vec![("axis", Attribute::Int(0))]),
            node("Expand", &["x", "x_shape"], "same", vec![]),
            node("Shape", &["same"], "same_shape", vec![]),
            node("Shape", &["zeros"], "tail", vec![("start", Attribute::Int(1))]),
            node(
                "Concat",
                &["stacked", "same_shape", "tail"],
                "y",
                vec![("axis", Attribute::Int(0))],
            ),
        ];
        assert_eq!(fired(&nodes, "zeros_shape"), Some("shape_of_expanded_scalar"));
        assert_eq!(fired(&nodes, "stacked"), Some("single_concat"));
        assert_eq!(fired(&nodes, "same_shape"), None, "x is not known to be rank 0");
        assert_eq!(fired(&nodes, "tail"), None, "a part of the shape");
        assert_eq!(fired(&nodes, "y"), None);
        let (after, report) = folded(&nodes, &["y"], counting(&[2, 3]));
        assert_eq!(report.identities, 2);
        assert_eq!(producer(&after, "y").inputs, ["x_shape", "same_shape", "tail"]);
    }

    /// `Expand` to a shape the value already has (broadcasting from a
    /// shorter target too) goes; one that grows an axis, or of a value whose
    /// shape the program does not fix, stays. Folding carries the fixed
    /// shapes through the translation's own nodes: the `Shape` of an
    /// `Unsqueeze` of `x` is known, so `Expand(zero, that)` is a constant.
    #[test]
    fn expand_to_its_own_shape() {
        let nodes = vec![
            ints_node("same_dims", &[2, 3]),
            ints_node("shorter", &[3]),
            ints_node("grown_dims", &[4, 2, 3]),
            node("Expand", &["x", "same_dims"], "same", vec![]),
            node("Expand", &["x", "shorter"], "broadcast", vec![]),
            node("Expand", &["x", "grown_dims"], "grown", vec![]),
            ints_node("zero_axis", &[0]),
            node("Unsqueeze", &["x", "zero_axis"], "u", vec![]),
            node("Shape", &["u"], "u_shape", vec![]),
            float_node("zero", 0.0),
            node("Expand", &["zero", "u_shape"], "zeros", vec![]),
            node("Add", &["same", "broadcast"], "a", vec![]),
            node("Add", &["a", "grown"], "b", vec![]),
            node("Add", &["b", "zeros"], "y", vec![]),
        ];
        let x: &[(&str, &[i64])] = &[("x", &[2, 3])];
        assert_eq!(fired_with_shapes(&nodes, "same", x), Some("expand_to_its_own_shape"));
        assert_eq!(fired_with_shapes(&nodes, "broadcast", x), Some("expand_to_its_own_shape"));
        assert_eq!(fired_with_shapes(&nodes, "grown", x), None, "an axis grows");
        let of_w =
            [ints_node("same_dims", &[2, 3]), node("Expand", &["w", "same_dims"], "w2", vec![])];
        assert_eq!(fired_with_shapes(&of_w, "w2", x), None, "w's shape is not fixed");
        assert_eq!(fired(&nodes, "same"), None, "x's shape is not fixed");
        let mut report = FoldReport::default();
        let shapes = HashMap::from([("x".to_string(), vec![2, 3])]);
        let (after, initializers) =
            rewritten(&nodes, &[], &["y"], &[("x", counting(&[2, 3]))], |n, i, keep| {
                fold(n, i, keep, &shapes, &mut report)
            });
        assert_eq!(report.identities, 2);
        // The unsqueeze no longer read is dead-code removal's.
        assert_eq!(ops(&after), ["Expand", "Unsqueeze", "Add", "Add", "Add"]);
        let zeros = &producer(&after, "y").inputs[1];
        assert_eq!(value(&initializers, zeros).dims, [1, 2, 3]);
    }

    /// `Expand` to `[]` keeps a rank-0 value rank 0; to `[1]` it grows one.
    #[test]
    fn expand_to_no_axes() {
        let nodes = vec![
            ints_node("no_axes", &[]),
            ints_node("one", &[1]),
            node("Expand", &["x", "no_axes"], "same", vec![]),
            node("Neg", &["same"], "y", vec![]),
            node("Expand", &["x", "one"], "grown", vec![]),
        ];
        assert_eq!(fired(&nodes, "same"), Some("expand_to_no_axes"));
        assert_eq!(fired(&nodes, "grown"), None, "a rank-0 value expanded to [1] is rank 1");
        let (after, report) = folded(&nodes, &["y", "grown"], tensor(&[], &[3.0]));
        assert_eq!(report.identities, 1);
        assert_eq!(ops(&after), ["Neg", "Expand"]);
        assert_eq!(producer(&after, "y").inputs, ["x"]);
    }

    #[test]
    fn shape_past_scalar_arithmetic() {
        let nodes = vec![
            float_node("zero", 0.0),
            node("Mul", &["x", "zero"], "zeros", vec![]),
            node("Shape", &["zeros"], "zeros_shape", vec![("start", Attribute::Int(1))]),
            node("Sub", &["zero", "x"], "negated", vec![]),
            node("Shape", &["negated"], "negated_shape", vec![]),
            node("Mul", &["x", "x"], "squared", vec![]),
            node("Shape", &["squared"], "squared_shape", vec![]),
            node(
                "Concat",
                &["zeros_shape", "negated_shape", "squared_shape"],
                "y",
                vec![("axis", Attribute::Int(0))],
            ),
        ];
        assert_eq!(fired(&nodes, "zeros_shape"), Some("shape_past_scalar_arithmetic"));
        assert_eq!(fired(&nodes, "negated_shape"), Some("shape_past_scalar_arithmetic"));
        assert_eq!(fired(&nodes, "squared_shape"), None, "x * x: no known operand");
        let (after, report) = folded(&nodes, &["y"], counting(&[2, 3]));
        assert_eq!(report.merged_pairs, 2);
        let zeros_shape = producer(&after, "zeros_shape");
        assert_eq!(zeros_shape.inputs, ["x"]);
        assert_eq!(zeros_shape.attributes, [("start".to_string(), Attribute::Int(1))]);
        assert_eq!(producer(&after, "negated_shape").inputs, ["x"]);
    }

    #[test]
    fn reshapes_merge() {
        let nodes = vec![
            ints_node("flat", &[-1]),
            ints_node("rows", &[3, 2]),
            ints_node("copy_dim", &[0, -1]),
            node("Reshape", &["x", "flat"], "r1", vec![]),
            node("Reshape", &["r1", "rows"], "r2", vec![]),
            node("Reshape", &["r1", "copy_dim"], "r3", vec![]),
        ];
        assert_eq!(fired(&nodes, "r2"), Some("reshapes_merge"));
        assert_eq!(fired(&nodes, "r3"), None, "a 0 copies a dim of the inner result");
        let (after, report) = folded(&nodes, &["r2", "r3"], counting(&[2, 3]));
        assert_eq!(report.merged_pairs, 1);
        assert_eq!(producer(&after, "r2").inputs[0], "x");
        assert_eq!(producer(&after, "r3").inputs[0], "r1");
    }
}
