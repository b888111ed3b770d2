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
pub enum Simplified {
    /// It computes this value of the graph unchanged: its readers read it.
    Same(String),
    /// It and its producer are one node: this one (reading the producer's
    /// input), with a new constant input where it needs one (`name`, value).
    Merged(Box<Node>, Option<(String, Known)>),
}

/// The simplification of `node`, if any. `known` holds the values known so
/// far; `producer` finds the node computing a value (main graph, already
/// simplified).
pub fn simplify<'n>(
    node: &Node,
    known: &HashMap<String, Known>,
    producer: impl Fn(&str) -> Option<&'n Node>,
) -> Option<Simplified> {
    if !node.domain.is_empty() || node.function.is_some() || node.outputs.len() != 1 {
        return None;
    }
    let inputs: Vec<Option<&Known>> = node.inputs.iter().map(|i| known.get(i)).collect();
    let ints = |i: usize| inputs.get(i).copied().flatten().and_then(Known::int_values);
    let from = |i: usize| {
        node.inputs
            .get(i)
            .filter(|n| !n.is_empty())
            .and_then(|n| producer(n))
            .filter(|p| p.domain.is_empty() && p.function.is_none())
    };
    match node.op_type.as_str() {
        "Slice" if is_whole_slice(node, &inputs) => Some(Simplified::Same(node.inputs[0].clone())),
        "Add" | "Sub" | "Mul" | "Div" if node.inputs.len() == 2 => {
            let neutral = if matches!(node.op_type.as_str(), "Add" | "Sub") { 0.0 } else { 1.0 };
            let is_neutral =
                |i: usize| inputs[i].is_some_and(|k| k.dims.is_empty() && k.floats() == [neutral]);
            let commutes = matches!(node.op_type.as_str(), "Add" | "Mul");
            // A rank-0 operand broadcasts without growing the other one.
            if is_neutral(1) {
                Some(Simplified::Same(node.inputs[0].clone()))
            } else if commutes && is_neutral(0) {
                Some(Simplified::Same(node.inputs[1].clone()))
            } else {
                None
            }
        }
        "Transpose" => {
            let perm = ints_attribute(node, "perm")?;
            if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
                return Some(Simplified::Same(node.inputs[0].clone()));
            }
            let inner = from(0).filter(|p| p.op_type == "Transpose")?;
            let inner_perm = ints_attribute(inner, "perm")?;
            if inner_perm.len() != perm.len()
                || perm.iter().any(|&p| p < 0 || p as usize >= perm.len())
            {
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
        // Squeeze and Unsqueeze of the same axes undo each other (the
        // squeezed axes had size 1, or Squeeze would have failed; both
        // normalize negative axes by the same rank).
        "Unsqueeze" | "Squeeze" if node.inputs.len() == 2 => {
            let axes = ints(1)?;
            let inner = from(0)?;
            let inverse = if node.op_type == "Unsqueeze" { "Squeeze" } else { "Unsqueeze" };
            if inner.inputs.len() != 2 {
                return None;
            }
            let inner_axes = known.get(&inner.inputs[1]).and_then(Known::int_values)?;
            if inner.op_type == inverse && inner_axes == axes {
                return Some(Simplified::Same(inner.inputs[0].clone()));
            }
            if node.op_type != "Unsqueeze" || inner.op_type != "Unsqueeze" {
                return None;
            }
            // Two unsqueezes with non-negative axes are one: the outer's axes
            // are new dims of the result; the inner's j-th new dim lands at the
            // j-th position the outer's axes leave.
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
        // The outer shape decides alone when it names no 0 (which would copy
        // a dim of its input, the inner result): -1 is solved from the
        // element count, which both reshapes keep.
        "Reshape" if node.inputs.len() == 2 => {
            let shape = ints(1)?;
            let allow_zero = matches!(node.attribute("allowzero"), Some(Attribute::Int(1)));
            if !allow_zero && shape.contains(&0) {
                return None;
            }
            let inner = from(0).filter(|p| p.op_type == "Reshape")?;
            let mut merged = node.clone();
            merged.inputs[0] = inner.inputs[0].clone();
            Some(Simplified::Merged(Box::new(merged), None))
        }
        _ => None,
    }
}

fn ints_attribute<'a>(node: &'a Node, name: &str) -> Option<&'a Vec<i64>> {
    match node.attribute(name) {
        Some(Attribute::Ints(v)) => Some(v),
        _ => None,
    }
}

/// `Slice` from 0 to at least 2^31 - 1 (torch writes i64::MAX for "to the end")
/// with step 1 on every axis it names: it keeps every element, whatever the
/// data's shape.
fn is_whole_slice(node: &Node, inputs: &[Option<&Known>]) -> bool {
    if node.inputs.len() < 3 {
        return false;
    }
    let ints = |i: usize| inputs.get(i).copied().flatten().and_then(Known::int_values);
    let (Some(starts), Some(ends)) = (ints(1), ints(2)) else { return false };
    let steps_are_one = match inputs.get(4) {
        None => true,
        Some(_) if node.inputs[4].is_empty() => true,
        Some(_) => ints(4).is_some_and(|steps| steps.iter().all(|&s| s == 1)),
    };
    // Named axes must be known (a repeated axis is the model's error, not ours to hide).
    let axes_known = node.inputs.get(3).is_none_or(|a| a.is_empty() || ints(3).is_some());
    steps_are_one
        && axes_known
        && starts.iter().all(|&s| s == 0)
        && ends.iter().all(|&e| e >= i32::MAX as i64)
}
