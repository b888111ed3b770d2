//! A zero `Pad` (mode `constant`, non-negative, spatial axes only) → `Conv`
//! with explicit pads: the padding goes into the convolution's `pads`
//! (torch's "same" and TF-style padding reach the graph as a separate pad).

use std::collections::{HashMap, HashSet};

use super::{ints_attr, plain, readers, Constants};
use crate::onnx::weights::Initializer;
use crate::onnx::{Attribute, Node};

/// Folds each zero spatial pad into the convolution after it, when nothing
/// else reads the pad; how many went.
pub fn fuse_pads(
    nodes: &mut Vec<Node>,
    initializers: &[Initializer],
    keep: &HashSet<&str>,
) -> usize {
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
    use super::super::super::testing::*;
    use super::*;

    fn weights() -> Vec<Initializer<'static>> {
        vec![
            floats("w", &[1, 1, 3, 3], &[1.0, 2.0, 0.0, -1.0, 1.0, 3.0, 0.5, 0.0, 1.0]),
            floats("w2", &[1, 2, 3, 3], &[1.0; 18]),
            ints("spatial", &[0, 0, 1, 2, 0, 0, 3, 4]),
            ints("channels", &[0, 1, 0, 0, 0, 0, 0, 0]),
            ints("negative", &[0, 0, -1, 0, 0, 0, 0, 0]),
            floats("zero", &[], &[0.0]),
            floats("one", &[], &[1.0]),
        ]
    }

    #[test]
    fn a_zero_spatial_pad_goes_into_the_conv() {
        let nodes = vec![
            node("Pad", &["x", "spatial"], "p", vec![]),
            node("Conv", &["p", "w"], "y", vec![("pads", Attribute::Ints(vec![1, 1, 1, 1]))]),
            node("Pad", &["x", "spatial", "zero"], "q", vec![]),
            node("Conv", &["q", "w"], "z", vec![]),
        ];
        let mut count = 0;
        let (after, _) = rewritten(
            &nodes,
            &weights(),
            &["y", "z"],
            &[("x", counting(&[1, 1, 4, 4]))],
            |n, i, keep| count = fuse_pads(n, i, keep),
        );
        assert_eq!(count, 2);
        assert_eq!(ops(&after), ["Conv", "Conv"]);
        assert_eq!(after[0].inputs, ["x", "w"]);
        assert_eq!(after[0].attribute("pads"), Some(&Attribute::Ints(vec![2, 3, 4, 5])));
        assert_eq!(after[1].attribute("pads"), Some(&Attribute::Ints(vec![1, 2, 3, 4])));
    }

    /// A pad of the channels, by a non-zero value, by a negative amount
    /// (a crop), by reflection, read twice, or before a conv that pads
    /// itself by `auto_pad` stays.
    #[test]
    fn other_pads_stay() {
        let nodes = vec![
            node("Pad", &["x", "channels"], "c", vec![]),
            node("Conv", &["c", "w2"], "a", vec![]),
            node("Pad", &["x", "spatial", "one"], "v", vec![]),
            node("Conv", &["v", "w"], "b", vec![]),
            node("Pad", &["x", "negative"], "n", vec![]),
            node("Conv", &["n", "w"], "d", vec![]),
            node("Pad", &["x", "spatial"], "r", vec![("mode", Attribute::Str("reflect".into()))]),
            node("Conv", &["r", "w"], "e", vec![]),
            node("Pad", &["x", "spatial"], "shared", vec![]),
            node("Conv", &["shared", "w"], "f", vec![]),
            node("Conv", &["shared", "w"], "g", vec![]),
            node("Pad", &["x", "spatial"], "auto", vec![]),
            node(
                "Conv",
                &["auto", "w"],
                "h",
                vec![("auto_pad", Attribute::Str("SAME_UPPER".into()))],
            ),
        ];
        let mut after = nodes.clone();
        let keep = HashSet::from(["a", "b", "d", "e", "f", "g", "h"]);
        assert_eq!(fuse_pads(&mut after, &weights(), &keep), 0);
        assert_eq!(after, nodes);
    }
}
