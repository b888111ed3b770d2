//! `Conv` → `BatchNormalization` (inference: one output): the normalization
//! is an affine map per output channel, so it goes into the convolution's
//! weight and bias: `w' = w * s`, `b' = (b - mean) * s + beta` with
//! `s = gamma / sqrt(var + eps)`, computed in f64 and stored in the weight's
//! type (float32/float64; other types are left alone).

use std::collections::{HashMap, HashSet};

use super::super::known::{Data, Known, DOUBLE, FLOAT};
use super::{float_attr, plain, readers, Constants};
use crate::onnx::weights::Initializer;
use crate::onnx::{Attribute, Node};

/// Folds each normalization into the convolution before it, when nothing
/// else reads the convolution; how many went.
pub fn fuse_batch_norms(
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

#[cfg(test)]
mod tests {
    use super::super::super::testing::*;
    use super::*;

    /// Two output channels, two input channels, 1x1 kernels.
    fn weights() -> Vec<Initializer<'static>> {
        vec![
            floats("w", &[2, 2, 1, 1], &[2.0, 3.0, -1.0, 0.5]),
            floats("b", &[2], &[1.0, -1.0]),
            floats("gamma", &[2], &[1.0, 2.0]),
            floats("beta", &[2], &[0.5, 0.0]),
            floats("mean", &[2], &[1.0, 0.0]),
            floats("var", &[2], &[3.0, 0.0]),
            floats("short", &[1], &[1.0]),
        ]
    }

    fn batch_norm(input: &str, output: &str) -> Node {
        let epsilon = vec![("epsilon", Attribute::Float(1.0))];
        node("BatchNormalization", &[input, "gamma", "beta", "mean", "var"], output, epsilon)
    }

    fn fused<'a>(
        nodes: &[Node],
        initializers: &[Initializer<'a>],
        outputs: &[&str],
    ) -> (Vec<Node>, Vec<Initializer<'a>>, usize) {
        let mut count = 0;
        let (after, initializers) = rewritten(
            nodes,
            initializers,
            outputs,
            &[("x", counting(&[1, 2, 2, 2]))],
            |n, i, k| count = fuse_batch_norms(n, i, k),
        );
        (after, initializers, count)
    }

    #[test]
    fn a_batch_norm_after_a_conv_goes_into_its_weight_and_bias() {
        let nodes = vec![
            node("Conv", &["x", "w", "b"], "c", vec![]),
            batch_norm("c", "y"),
            node("Conv", &["x", "w"], "unbiased", vec![]),
            batch_norm("unbiased", "z"),
        ];
        let (after, initializers, count) = fused(&nodes, &weights(), &["y", "z"]);
        assert_eq!(count, 2);
        assert_eq!(ops(&after), ["Conv", "Conv"]);
        assert_eq!(after[0].inputs, ["x", "y.weight", "y.bias"]);
        assert_eq!(after[0].outputs, ["y"], "the conv computes the normalization's value");
        // s = gamma / sqrt(var + 1) = [0.5, 2]
        let f = |name: &str| value(&initializers, name).floats();
        assert_eq!(f("y.weight"), [1.0, 1.5, -2.0, 1.0]);
        assert_eq!(f("y.bias"), [(1.0 - 1.0) * 0.5 + 0.5, -2.0]);
        assert_eq!(f("z.bias"), [(0.0 - 1.0) * 0.5 + 0.5, 0.0], "a conv without bias gains one");
    }

    /// A conv read elsewhere or naming a graph output, a normalization in
    /// training mode, and parameters not one per channel stay as they are.
    #[test]
    fn a_batch_norm_stays_after_a_shared_conv_in_training_or_without_channel_parameters() {
        let nodes = vec![
            node("Conv", &["x", "w", "b"], "shared", vec![]),
            batch_norm("shared", "a"),
            node("Neg", &["shared"], "n", vec![]),
            node("Conv", &["x", "w", "b"], "out", vec![]),
            batch_norm("out", "b_out"),
            node("Conv", &["x", "w", "b"], "training", vec![]),
            node(
                "BatchNormalization",
                &["training", "gamma", "beta", "mean", "var"],
                "c",
                vec![("training_mode", Attribute::Int(1))],
            ),
            node("Conv", &["x", "w", "b"], "odd", vec![]),
            node("BatchNormalization", &["odd", "short", "beta", "mean", "var"], "d", vec![]),
        ];
        let mut after = nodes.clone();
        let mut initializers = weights();
        let keep = HashSet::from(["a", "n", "out", "b_out", "c", "d"]);
        assert_eq!(fuse_batch_norms(&mut after, &mut initializers, &keep), 0);
        assert_eq!(after, nodes);
        assert_eq!(initializers.len(), weights().len(), "no weight written");
    }
}
