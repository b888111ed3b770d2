//! The ONNX Runtime CUDA fusion set (`--ort-fusions cuda`): the CPU set's
//! fusions, included from `plugins/onnx-ort-cpu`, attentions as
//! MultiHeadAttention (what reads no past cache) and GroupQueryAttention (a
//! decode step), and mixture-of-experts blocks as `com.microsoft::MoE`, on a
//! tiny Mixtral.

use crate::common::*;
use crate::encoder_fusions::{fused, model, ops, with, Shapes};
use crate::fusions::{node, op_counts};
use hfx::onnx::proto::ModelProto;
use hfx::onnx::{Attribute, Node};
use prost::Message;

/// The attentions [`attention`] builds: an encoder's, and what changes it.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Variant {
    Encoder,
    /// No mask (ViT's, Whisper's encoder's).
    Unmasked,
    /// The key transposed `[0,2,3,1]` from its split form (two transposes merged).
    KeyTransposedFromSplit,
    /// The key not split from a merged value (a rotation's output): key and
    /// value taken as `[batch, heads, length, head_dim]`.
    KeyOnlyInHeads,
    /// A decode step: the key and value appended to a past (graph inputs).
    AfterPast,
    /// A cross-attention over cached keys and values (graph inputs).
    CachedKeys,
    /// The mask broadcast along the query axis (`[batch, 1, 1, length]`).
    MaskBroadcastOverQueries,
    /// The value's heads 16 wide, the query's 8.
    WiderValueHeads,
    /// The attention weights also a graph output.
    WeightsReadElsewhere,
    /// The scores also a graph output.
    ScoresReadElsewhere,
    /// A boolean mask applied by `Where`, no additive bias.
    WhereMask,
}

/// `[2, 8, 32]` states' attention over 4 heads of 8 as SDPA translates
/// it, q, k and v split from their projections, its heads merged after;
/// changed as `variant` says.
fn attention(variant: Variant) -> hfx::plugins::ir_model::IrModel {
    use Variant::*;
    let perm = |p: &[i64]| Attribute::Ints(p.to_vec());
    let split = |x: &str, out: &str| {
        [
            node("MatMul", &["x", &format!("w{x}")], &format!("{x}3")),
            node("Reshape", &[&format!("{x}3"), "heads"], &format!("{x}4")),
            with(node("Transpose", &[&format!("{x}4")], out), "perm", perm(&[0, 2, 1, 3])),
        ]
    };
    let mut nodes: Vec<Node> = [split("q", "q"), split("v", "v_new")].concat();
    let (mut key, mut value) = ("k_new", "v_new");
    match variant {
        KeyTransposedFromSplit => nodes.extend([
            node("MatMul", &["x", "wk"], "k3"),
            node("Reshape", &["k3", "heads"], "k4"),
            with(node("Transpose", &["k4"], "kt"), "perm", perm(&[0, 2, 3, 1])),
        ]),
        KeyOnlyInHeads => nodes.extend([
            node("MatMul", &["x", "wk"], "k3"),
            node("Reshape", &["k3", "heads"], "k4"),
            with(node("Transpose", &["k4"], "k_split"), "perm", perm(&[0, 2, 1, 3])),
            node("Mul", &["k_split", "two"], "k_new"),
        ]),
        CachedKeys => (key, value) = ("past_k", "past_v"),
        _ => nodes.extend(split("k", "k_new")),
    }
    if variant == AfterPast {
        nodes.push(with(node("Concat", &["past_k", "k_new"], "k"), "axis", Attribute::Int(2)));
        nodes.push(with(node("Concat", &["past_v", "v_new"], "v"), "axis", Attribute::Int(2)));
        (key, value) = ("k", "v");
    }
    if variant != KeyTransposedFromSplit {
        nodes.push(with(node("Transpose", &[key], "kt"), "perm", perm(&[0, 1, 3, 2])));
    }
    nodes.push(node("MatMul", &["q", "kt"], "scores"));
    nodes.push(node("Mul", &["scores", "scale"], "scaled"));
    let logits = match variant {
        Unmasked => "scaled",
        WhereMask => {
            nodes.push(node("Where", &["keep", "scaled", "blocked"], "masked"));
            "masked"
        }
        _ => {
            nodes.push(node("Add", &["scaled", "mask"], "masked"));
            "masked"
        }
    };
    nodes.push(with(node("Softmax", &[logits], "weights"), "axis", Attribute::Int(-1)));
    let value = if variant == WiderValueHeads { "v_wide" } else { value };
    nodes.push(node("MatMul", &["weights", value], "attended"));
    nodes.push(with(node("Transpose", &["attended"], "merged4"), "perm", perm(&[0, 2, 1, 3])));
    nodes.push(node("Reshape", &["merged4", "hidden"], "out"));
    let mask: &[i64] = match variant {
        MaskBroadcastOverQueries => &[2, 1, 1, 8],
        AfterPast => &[2, 1, 8, 11],
        _ => &[2, 1, 8, 8],
    };
    let past: &[i64] = if variant == CachedKeys { &[2, 4, 8, 8] } else { &[2, 4, 3, 8] };
    let inputs: Shapes = &[
        ("x", &[2, 8, 32]),
        ("mask", mask),
        ("keep", &[2, 1, 8, 8]),
        ("past_k", past),
        ("past_v", past),
        ("v_wide", &[2, 4, 8, 16]),
    ];
    let weights: Shapes = &[
        ("wq", &[32, 32]),
        ("wk", &[32, 32]),
        ("wv", &[32, 32]),
        ("heads", &[4]),
        ("hidden", &[3]),
    ];
    let (attended, merged, out): (&[i64], &[i64], &[i64]) = match variant {
        WiderValueHeads => (&[2, 4, 8, 16], &[2, 8, 4, 16], &[2, 8, 64]),
        _ => (&[2, 4, 8, 8], &[2, 8, 4, 8], &[2, 8, 32]),
    };
    let typed: Shapes = &[
        ("q3", &[2, 8, 32]),
        ("k3", &[2, 8, 32]),
        ("v3", &[2, 8, 32]),
        ("q4", &[2, 8, 4, 8]),
        ("k4", &[2, 8, 4, 8]),
        ("v4", &[2, 8, 4, 8]),
        ("q", &[2, 4, 8, 8]),
        ("k_new", &[2, 4, 8, 8]),
        ("v_new", &[2, 4, 8, 8]),
        ("k", &[2, 4, 11, 8]),
        ("v", &[2, 4, 11, 8]),
        ("attended", attended),
        ("merged4", merged),
        ("out", out),
    ];
    let mut outputs = vec!["out"];
    match variant {
        WeightsReadElsewhere => outputs.push("weights"),
        ScoresReadElsewhere => outputs.push("scores"),
        _ => {}
    }
    let scalars = [("scale", 0.25), ("two", 2.0), ("blocked", f64::NEG_INFINITY)];
    model(nodes, (inputs, weights, typed), &scalars, &outputs)
}

/// fuse-multi-head-attention on an encoder's attention and its variants:
/// one MultiHeadAttention on q, k and v as the projections made them
/// (`[batch, length, heads·head_dim]`; the key merged by a `Reshape` when
/// only its split form is; both key and value as `[batch, heads, length,
/// head_dim]` when the key is only so), the mask its attention bias, the
/// scale its own; what it refuses left as it is: a past read (a decode
/// step's cache, a cross-attention's cached keys), a mask broadcast along
/// the queries (ONNX Runtime broadcasts none of its last two axes), heads
/// of another size, weights or scores read elsewhere, a mask applied by
/// `Where`.
#[test]
fn multi_head_attention_takes_what_reads_no_past_and_refuses_the_rest() {
    use Variant::*;
    let fuse = |variant| fused("onnx-ort-cuda/fuse-multi-head-attention", attention(variant));
    let nodes = fuse(Encoder);
    assert_eq!(ops(&nodes), ["MatMul", "MatMul", "MatMul", "MultiHeadAttention"]);
    let mha = &nodes[3];
    assert_eq!(mha.domain, "com.microsoft");
    assert_eq!(mha.inputs, ["q3", "k3", "v3", "", "", "mask"]);
    assert_eq!(mha.outputs, ["out"]);
    assert_eq!(mha.attribute("num_heads"), Some(&Attribute::Int(4)));
    assert_eq!(mha.attribute("scale"), Some(&Attribute::Float(0.25)));
    let nodes = fuse(Unmasked);
    assert_eq!(nodes.last().unwrap().inputs, ["q3", "k3", "v3"]);
    let nodes = fuse(KeyTransposedFromSplit);
    assert_eq!(nodes.last().unwrap().inputs, ["q3", "k3", "v3", "", "", "mask"]);
    let nodes = fuse(KeyOnlyInHeads);
    let mha = nodes.iter().find(|n| n.op_type == "MultiHeadAttention").unwrap();
    assert_eq!(mha.inputs, ["q3", "k_new", "v_new", "", "", "mask"]);
    for refused in [
        AfterPast,
        CachedKeys,
        MaskBroadcastOverQueries,
        WiderValueHeads,
        WeightsReadElsewhere,
        ScoresReadElsewhere,
        WhereMask,
    ] {
        let nodes = fuse(refused);
        assert!(ops(&nodes).contains(&"Softmax"), "{refused:?}: {:?}", ops(&nodes));
        assert!(!ops(&nodes).contains(&"MultiHeadAttention"), "{refused:?}");
    }
}

/// `--ort-fusions cuda` on a tiny Mixtral folder: each layer's experts
/// (traced as batched matmuls) one `MoE` node, routed from the router's
/// logits, the CPU set's norm and rotation fusions as with `--ort-fusions
/// cpu`, each attention (a prefill's) a MultiHeadAttention, and no
/// FusedMatMul with a batch transpose (which ONNX Runtime's CUDA kernel
/// cannot run on inputs of different ranks). The fused model computes what
/// the plain export does: checked in ONNX Runtime's CPU provider, its MoE
/// nodes in the CPU kernel's form (`tests/python/check_moe_fusion.py`).
/// `--verify` refuses the CUDA model in one line: the CPU kernel has no
/// separate up weights.
#[test]
#[ignore = "full tier: the MoE fusion on Mixtral, three exports (~40 s; the set's discovery and the MoE refusal of --verify are fast host tests)"]
fn ort_fusions_cuda_fuses_mixtral_experts_into_moe() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("mixtral");
    run_python("check_moe_fusion.py", &["folder", model.to_str().unwrap()]);
    let export = |out: &str, extra: &[&str]| {
        let out = dir.path().join(out);
        let mut args = vec!["run", "--backend", "onnx", "--model-dir", model.to_str().unwrap()];
        args.extend(extra);
        let plugins = root().join("plugins");
        args.extend(["--plugins", plugins.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        (hfx_with_python(dir.path(), &args), out)
    };
    let (result, plain) = export("plain.onnx", &[]);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    let (result, fused) = export("fused.onnx", &["--ort-fusions", "cuda"]);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    let (_, counts, domains) = op_counts(&fused);
    assert_eq!(counts.get("MoE"), Some(&2), "{counts:?}");
    assert_eq!((counts.get("TopK"), counts.get("Sigmoid")), (None, None), "{counts:?}");
    // The trace returns the cache: its attentions are a prefill's.
    assert_eq!(counts.get("MultiHeadAttention"), Some(&2), "{counts:?}");
    assert_eq!(counts.get("SkipSimplifiedLayerNormalization"), Some(&4), "{counts:?}");
    assert_eq!(counts.get("RotaryEmbedding"), Some(&4), "{counts:?}");
    assert!(domains.contains("com.microsoft"), "{domains:?}");
    let graph =
        ModelProto::decode(std::fs::read(&fused).unwrap().as_slice()).unwrap().graph.unwrap();
    for node in graph.node.iter().filter(|n| n.op_type.as_deref() == Some("FusedMatMul")) {
        let batched = node.attribute.iter().filter_map(|a| a.name.as_deref());
        assert!(!batched.clone().any(|a| a.starts_with("transBatch")), "{node:?}");
    }
    let checked = try_python(
        "check_moe_fusion.py",
        &["compare", plain.to_str().unwrap(), fused.to_str().unwrap()],
    )
    .unwrap();
    assert!(checked.starts_with("2 MoE; max abs difference"), "{checked}");

    let (result, refused) = export("verified.onnx", &["--ort-fusions", "cuda", "--verify"]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(!result.status.success(), "{stderr}");
    assert!(
        stderr.contains("--verify runs the model in ONNX Runtime's CPU provider, which cannot run its com.microsoft::MoE"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!refused.exists());
    assert_no_scratch_left(dir.path());
}
