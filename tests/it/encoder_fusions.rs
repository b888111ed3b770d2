//! The ONNX Runtime CPU set's GELU and FusedMatMul fusions
//! (`fuse-gelu`, `fuse-matmul-transpose-scale`): their rewrites on small
//! graphs, and `--ort-fusions cpu --verify` on the sweep's encoders.

use std::collections::HashMap;
use std::path::Path;

use crate::common::*;
use crate::fusions::{node, op_counts, scalar};
use hfx::onnx::{Attribute, Node};
use hfx::plugins::ir_model::{Constant, Dim, IrModel, IrParts, ValueType};
use hfx::plugins::kind;
use hfx::stages::{onnx_ir_fix, OnPluginError};

pub(crate) fn with(mut node: Node, name: &str, value: Attribute) -> Node {
    node.attributes.push((name.into(), value));
    node
}

fn float(dims: &[i64]) -> ValueType {
    ValueType { elem_type: 1, shape: Some(dims.iter().map(|&d| Dim::Fixed(d)).collect()) }
}

pub(crate) type Shapes<'a> = &'a [(&'a str, &'a [i64])];

/// `nodes` over float inputs and initializers of the given shapes, the
/// scalars as constants, the `typed` intermediates' shapes known; `outputs` the graph's.
pub(crate) fn model(
    nodes: Vec<Node>,
    (inputs, initializers, typed): (Shapes, Shapes, Shapes),
    scalars: &[(&str, f64)],
    outputs: &[&str],
) -> IrModel {
    let constants: HashMap<String, Constant> =
        scalars.iter().map(|(n, v)| (n.to_string(), scalar(*v))).collect();
    let types =
        inputs.iter().chain(initializers).chain(typed).map(|(n, d)| (n.to_string(), float(d)));
    IrModel::new(IrParts {
        nodes,
        inputs: inputs.iter().map(|(n, _)| n.to_string()).collect(),
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
        initializers: initializers
            .iter()
            .map(|(n, _)| n.to_string())
            .chain(constants.keys().cloned())
            .collect(),
        types: types.collect(),
        constants,
    })
}

/// `model` after the ONNX Runtime sets' plugin `name` (`onnx-ort-cpu/fuse-gelu`;
/// its stage alone).
pub(crate) fn fused(name: &str, mut model: IrModel) -> Vec<Node> {
    let runtime = runtime();
    let found = hfx::plugins::discover_all(&[plugin_dir(&format!("plugins/{name}"))]).unwrap();
    let versions = [("onnxruntime".to_string(), "1.28.0".to_string())].into();
    let set = hfx::plugins::load_set(&runtime, found, versions).unwrap();
    let report = onnx_ir_fix::run(
        &runtime,
        &[of::<kind::OnnxIrFix>(&set.plugins[0])],
        &mut model,
        "onnx-ir-fixes",
        OnPluginError::Fail,
    )
    .unwrap();
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    model.finish().nodes
}

pub(crate) fn ops(nodes: &[Node]) -> Vec<&str> {
    nodes.iter().map(|n| n.op_type.as_str()).collect()
}

/// Attention scores as `translate-attention` writes them, the key's
/// transpose swapping its last two axes and the scale after the product:
/// one FusedMatMul reading the key untransposed, the scale its alpha; the
/// Softmax and what follows stay.
#[test]
fn attention_scores_become_one_fused_matmul() {
    let nodes = vec![
        with(node("Transpose", &["k"], "kt"), "perm", Attribute::Ints(vec![0, 1, 3, 2])),
        node("MatMul", &["q", "kt"], "scores"),
        node("Mul", &["scores", "scale"], "scaled"),
        node("Add", &["scaled", "mask"], "masked"),
        with(node("Softmax", &["masked"], "weights"), "axis", Attribute::Int(-1)),
        node("MatMul", &["weights", "v"], "out"),
    ];
    let shape: &[i64] = &[2, 4, 8, 8];
    let inputs = [("q", shape), ("k", shape), ("v", shape), ("mask", &[2, 1, 8, 8][..])];
    let nodes = fused(
        "onnx-ort-cpu/fuse-matmul-transpose-scale",
        model(nodes, (&inputs, &[], &[]), &[("scale", 0.25)], &["out"]),
    );
    assert_eq!(ops(&nodes), ["FusedMatMul", "Add", "Softmax", "MatMul"]);
    let matmul = &nodes[0];
    assert_eq!((matmul.domain.as_str(), matmul.inputs.join(",")), ("com.microsoft", "q,k".into()));
    assert_eq!(matmul.attribute("alpha"), Some(&Attribute::Float(0.25)));
    assert_eq!(matmul.attribute("transB"), Some(&Attribute::Int(1)));
    assert_eq!(matmul.attribute("transA"), Some(&Attribute::Int(0)));
}

/// GPT-2's `gelu_new` spelled out (`0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`)
/// over a linear layer's biased product, and the erf `Gelu` of another:
/// `FastGelu(product, bias)` and `BiasGelu(product, bias)`, the
/// bias adds and every node of the formula gone; a `Gelu` of no bias stays.
#[test]
fn spelled_out_and_erf_gelus_of_biased_products_fuse_with_their_bias() {
    let nodes = vec![
        node("MatMul", &["x", "w"], "product"),
        node("Add", &["product", "bias"], "h"),
        node("Mul", &["h", "half"], "halved"),
        node("Pow", &["h", "three"], "cube"),
        node("Mul", &["cube", "cubic"], "cubic_term"),
        node("Add", &["h", "cubic_term"], "inner"),
        node("Mul", &["inner", "sqrt_2_over_pi"], "scaled"),
        node("Tanh", &["scaled"], "t"),
        node("Add", &["t", "one"], "shifted"),
        node("Mul", &["halved", "shifted"], "gelu_new"),
        node("MatMul", &["gelu_new", "w2"], "product2"),
        node("Add", &["bias2", "product2"], "h2"),
        node("Gelu", &["h2"], "biased"),
        node("Gelu", &["biased"], "out"),
    ];
    let scalars = [
        ("half", 0.5),
        ("three", 3.0),
        ("cubic", 0.044715),
        ("sqrt_2_over_pi", (2.0 / std::f64::consts::PI).sqrt()),
        ("one", 1.0),
    ];
    let weights: [(&str, &[i64]); 4] =
        [("w", &[8, 16]), ("bias", &[16]), ("w2", &[16, 16]), ("bias2", &[16])];
    // The translations type what the traced program named: the sums, not the products.
    let sums: [(&str, &[i64]); 2] = [("h", &[2, 3, 16]), ("h2", &[2, 3, 16])];
    let model = model(nodes, (&[("x", &[2, 3, 8])], &weights, &sums), &scalars, &["out"]);
    let nodes = fused("onnx-ort-cpu/fuse-gelu", model);
    assert_eq!(ops(&nodes), ["MatMul", "FastGelu", "MatMul", "BiasGelu", "Gelu"]);
    assert_eq!(nodes[1].inputs, ["product", "bias"]);
    assert_eq!(nodes[3].inputs, ["product2", "bias2"]);
    assert!(nodes[1..4].iter().step_by(2).all(|n| n.domain == "com.microsoft"));
    // The ONNX op without a bias stays itself: ONNX Runtime's own kernel is no faster.
    assert_eq!(
        (nodes[4].domain.as_str(), nodes[4].inputs.join(",")),
        ("", nodes[3].outputs[0].clone())
    );
}

/// `--ort-fusions cpu --verify` on the sweep's encoders (BERT, RoBERTa,
/// DistilBERT, 2 layers): per layer a BiasGelu, the attention scores'
/// scale folded into a FusedMatMul and both layer norms of residual sums
/// fused; parity within 1e-3, and fewer nodes than the unfused export.
#[test]
#[ignore = "full tier: the GELU and FusedMatMul fusions on three encoders (their self-tests and the rewrites above cover the patterns)"]
fn ort_fusions_cpu_fuse_the_gelu_and_attention_scores_of_encoders() {
    const ROBERTA: &str = "vocab_size=128,hidden_size=32,intermediate_size=64,num_hidden_layers=2,num_attention_heads=4,max_position_embeddings=64,pad_token_id=1";
    const DISTILBERT: &str =
        "vocab_size=128,dim=32,hidden_dim=64,n_layers=2,n_heads=4,max_position_embeddings=64";
    let dir = tempfile::tempdir().unwrap();
    for (model, config) in [("bert", tiny::BERT), ("roberta", ROBERTA), ("distilbert", DISTILBERT)]
    {
        let plain = export(dir.path(), model, config, &[]);
        let fused = export(dir.path(), model, config, &["--ort-fusions", "cpu", "--verify"]);
        let (fused_nodes, counts, _) = op_counts(&fused);
        let fusions = ["BiasGelu", "FusedMatMul", "SkipLayerNormalization"]
            .map(|op| counts.get(op).copied().unwrap_or(0));
        assert!(fusions[..2] == [2, 2] && fusions[2] >= 4, "{model}: {counts:?}");
        assert!(!counts.contains_key("Gelu"), "{model}: {counts:?}");
        // No fusion ONNX Runtime's CPU kernels would run slower (the
        // reference's `_unfuse_attentions`) or lack (`_unfuse_group_norms`).
        for unfused in ["MultiHeadAttention", "Attention", "GroupNorm"] {
            assert!(!counts.contains_key(unfused), "{model}: {counts:?}");
        }
        let plain_nodes = op_counts(&plain).0;
        assert!(fused_nodes < plain_nodes, "{model}: {fused_nodes} fused, {plain_nodes} not");
    }
}

/// `model` (a tiny `config`) exported to ONNX with `extra` into `dir`.
fn export(dir: &Path, model: &str, config: &str, extra: &[&str]) -> std::path::PathBuf {
    let out = dir.join(format!("{model}{}.onnx", extra.len()));
    let mut args: Vec<String> =
        ["run", "--backend", "onnx", "--model", model, "--set", config].map(String::from).to_vec();
    args.extend(extra.iter().map(|a| a.to_string()));
    args.extend(["-o".to_string(), out.display().to_string()]);
    for folder in ["plugins/dynamo", "plugins/onnx"] {
        args.extend(["--plugins".to_string(), root().join(folder).display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = hfx_with_python(dir, &args);
    assert!(result.status.success(), "{model}: {}", String::from_utf8_lossy(&result.stderr));
    out
}
