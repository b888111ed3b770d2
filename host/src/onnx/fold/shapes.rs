//! Static shapes carried through folding: the program fixes the shape of
//! the values torch.export saw fixed (`static_shapes`), and translations add
//! values between them (an `Unsqueeze` before an `Expand`, a `Cast` of an
//! index). Each node kept whose output shape follows from its inputs' (and
//! from known axes, shapes and permutations) adds that shape, so a `Shape`
//! of it folds and an `Expand` to the shape its input has already goes.
//!
//! Only ops whose output shape is a function of their inputs' shapes and
//! known values are listed; a value of any other op stays unknown.

use std::collections::HashMap;

use super::known::{axis, broadcast_dims, count, Known};
use super::{Attribute, Node};

/// The shape of `node`'s single output, from `shape_of` its inputs and the
/// values `known` (None: an op not listed here, or an input's shape not known).
pub(super) fn output_shape(
    node: &Node,
    shape_of: impl Fn(&str) -> Option<Vec<i64>>,
    known: &HashMap<String, Known>,
) -> Option<Vec<i64>> {
    if !node.domain.is_empty() || node.function.is_some() || node.outputs.len() != 1 {
        return None;
    }
    let shape = |i: usize| node.inputs.get(i).filter(|n| !n.is_empty()).and_then(|n| shape_of(n));
    let ints = |i: usize| node.inputs.get(i).and_then(|n| known.get(n)).and_then(Known::int_values);
    match node.op_type.as_str() {
        "Identity" | "Cast" | "Neg" | "Abs" | "Sqrt" | "Reciprocal" | "Exp" | "Log" | "Cos"
        | "Sin" | "Tanh" | "Sigmoid" | "Relu" | "Erf" | "Floor" | "Ceil" | "Sign" | "Not"
        | "IsNaN" | "IsInf" | "Softplus" | "Softmax" | "LogSoftmax" | "LeakyRelu" | "Elu"
        | "HardSigmoid" | "Round" => shape(0),
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Mod" | "Max" | "Min" | "Equal" | "Less"
        | "LessOrEqual" | "Greater" | "GreaterOrEqual" | "And" | "Or" | "Xor" | "Where" => {
            (1..node.inputs.len()).try_fold(shape(0)?, |dims, i| broadcast_dims(&dims, &shape(i)?))
        }
        "Expand" => broadcast_dims(&shape(0)?, &ints(1)?),
        "Unsqueeze" => unsqueezed(&shape(0)?, &ints(1)?),
        "Squeeze" => match node.inputs.get(1).filter(|n| !n.is_empty()) {
            Some(_) => squeezed(&shape(0)?, Some(&ints(1)?)),
            None => squeezed(&shape(0)?, None),
        },
        "Transpose" => {
            let dims = shape(0)?;
            match node.attribute("perm") {
                Some(Attribute::Ints(perm)) if perm.len() == dims.len() => {
                    perm.iter().map(|&p| dims.get(usize::try_from(p).ok()?).copied()).collect()
                }
                None => Some(dims.iter().rev().copied().collect()),
                _ => None,
            }
        }
        "Reshape" => reshaped(&shape(0)?, &ints(1)?, node),
        _ => None,
    }
}

/// `Reshape`'s output: `0` keeps the input's size (unless `allowzero`), `-1`
/// takes what is left.
fn reshaped(input: &[i64], target: &[i64], node: &Node) -> Option<Vec<i64>> {
    let allow_zero = matches!(node.attribute("allowzero"), Some(Attribute::Int(1)));
    let mut dims: Vec<i64> = target
        .iter()
        .enumerate()
        .map(|(i, &d)| if d == 0 && !allow_zero { input.get(i).copied() } else { Some(d) })
        .collect::<Option<_>>()?;
    let total = count(input) as i64;
    match dims.iter().filter(|&&d| d == -1).count() {
        0 => (dims.iter().product::<i64>() == total).then_some(dims),
        1 => {
            let rest: i64 = dims.iter().filter(|&&d| d != -1).product();
            if rest == 0 || total % rest != 0 {
                return None;
            }
            dims.iter_mut().filter(|d| **d == -1).for_each(|d| *d = total / rest);
            Some(dims)
        }
        _ => None,
    }
}

/// `Unsqueeze`'s output: a size-1 axis at each of `axes` (of the output's rank).
pub(super) fn unsqueezed(dims: &[i64], axes: &[i64]) -> Option<Vec<i64>> {
    let rank = dims.len() + axes.len();
    let mut sorted: Vec<usize> = axes.iter().map(|&a| axis(a, rank)).collect::<Option<_>>()?;
    sorted.sort();
    let mut dims = dims.to_vec();
    sorted.iter().for_each(|&a| dims.insert(a, 1));
    Some(dims)
}

/// `Squeeze`'s output: `axes` (each of size 1) removed, or without axes
/// every size-1 axis.
pub(super) fn squeezed(dims: &[i64], axes: Option<&[i64]>) -> Option<Vec<i64>> {
    let mut sorted: Vec<usize> = match axes {
        Some(axes) => axes.iter().map(|&a| axis(a, dims.len())).collect::<Option<_>>()?,
        None => (0..dims.len()).filter(|&a| dims[a] == 1).collect(),
    };
    sorted.sort();
    let mut dims = dims.to_vec();
    for &a in sorted.iter().rev() {
        if dims[a] != 1 {
            return None;
        }
        dims.remove(a);
    }
    Some(dims)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn shape_after(
        node: &Node,
        inputs: &[(&str, &[i64])],
        known: &[(&str, &[i64])],
    ) -> Option<Vec<i64>> {
        let shapes: HashMap<&str, Vec<i64>> =
            inputs.iter().map(|(n, d)| (*n, d.to_vec())).collect();
        let known = known
            .iter()
            .map(|(n, v)| (n.to_string(), Known::ints(vec![v.len() as i64], v.to_vec())))
            .collect();
        output_shape(node, |n| shapes.get(n).cloned(), &known)
    }

    #[test]
    fn shapes_follow_from_the_inputs_and_known_operands() {
        let x: &[(&str, &[i64])] = &[("x", &[2, 1, 3]), ("y", &[4, 1])];
        assert_eq!(
            shape_after(&node("Add", &["x", "y"], "z", vec![]), x, &[]),
            Some(vec![2, 4, 3])
        );
        assert_eq!(shape_after(&node("Add", &["x", "w"], "z", vec![]), x, &[]), None);
        let unsqueeze = node("Unsqueeze", &["x", "axes"], "u", vec![]);
        assert_eq!(shape_after(&unsqueeze, x, &[("axes", &[0, -1])]), Some(vec![1, 2, 1, 3, 1]));
        let squeeze = node("Squeeze", &["x", "axes"], "s", vec![]);
        assert_eq!(shape_after(&squeeze, x, &[("axes", &[1])]), Some(vec![2, 3]));
        assert_eq!(shape_after(&squeeze, x, &[("axes", &[0])]), None);
        let expand = node("Expand", &["x", "to"], "e", vec![]);
        assert_eq!(shape_after(&expand, x, &[("to", &[5, 2, 4, 1])]), Some(vec![5, 2, 4, 3]));
        let reshape = node("Reshape", &["x", "to"], "r", vec![]);
        assert_eq!(shape_after(&reshape, x, &[("to", &[0, -1])]), Some(vec![2, 3]));
        assert_eq!(shape_after(&reshape, x, &[("to", &[4, -1])]), None);
        let perm = vec![("perm", Attribute::Ints(vec![2, 0, 1]))];
        assert_eq!(shape_after(&node("Transpose", &["x"], "t", perm), x, &[]), Some(vec![3, 2, 1]));
        assert_eq!(shape_after(&node("MatMul", &["x", "y"], "m", vec![]), x, &[]), None);
    }
}
