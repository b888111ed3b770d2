//! The ONNX Runtime CUDA fusion set (`--ort-fusions cuda`): the CPU set's
//! fusions, included from `plugins/onnx-ort-cpu`, and mixture-of-experts
//! blocks as `com.microsoft::MoE`, on a tiny Mixtral.

use crate::common::*;
use crate::fusions::op_counts;
use hfx::onnx::proto::ModelProto;
use prost::Message;

/// `--ort-fusions cuda` on a tiny Mixtral folder: each layer's experts
/// (traced as batched matmuls) one `MoE` node, routed from the router's
/// logits, the CPU set's fusions as with `--ort-fusions cpu`, and no
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
    assert_eq!(counts.get("GroupQueryAttention"), Some(&2), "{counts:?}");
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
