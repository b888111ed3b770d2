//! ONNX IR rewrites under contract 0.2.0: a 0.1.0 and a 0.2.0 component in
//! one stage, hostile rewrites rolled back and stopped by their budgets, and
//! the ONNX Runtime CPU fusion set (`--ort-fusions cpu`) on a tiny Llama.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::common::*;
use hfx::onnx::proto::ModelProto;
use hfx::onnx::{Attribute, Node};
use hfx::plugins::ir_model::{Constant, ConstantData, Dim, IrModel, IrParts, ValueType};
use hfx::plugins::kind;
use hfx::plugins::sandbox::Limits;
use hfx::stages::{onnx_ir_fix, OnPluginError};
use prost::Message;

pub(crate) fn node(op: &str, inputs: &[&str], output: &str) -> Node {
    Node {
        op_type: op.into(),
        domain: String::new(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.into()],
        attributes: vec![],
        function: None,
    }
}

pub(crate) fn scalar(value: f64) -> Constant {
    Constant { elem_type: 1, dims: vec![], data: ConstantData::Floats(vec![value]) }
}

/// `y = w * (x * Reciprocal(Sqrt(ReduceMean(Pow(x, 2), [-1]) + eps)))`, x
/// `[2, 4, 8]`, and a `TopK(sorted=0)` reading y.
fn rms_norm_and_topk() -> IrModel {
    let mut topk = node("TopK", &["y", "k"], "values");
    topk.outputs.push("indices".into());
    topk.attributes.push(("sorted".into(), Attribute::Int(0)));
    let nodes = vec![
        node("Pow", &["x", "two"], "p"),
        node("ReduceMean", &["p", "axes"], "m"),
        node("Add", &["m", "eps"], "a"),
        node("Sqrt", &["a"], "s"),
        node("Reciprocal", &["s"], "r"),
        node("Mul", &["x", "r"], "n"),
        node("Mul", &["w", "n"], "y"),
        topk,
    ];
    let float = |dims: &[i64]| ValueType {
        elem_type: 1,
        shape: Some(dims.iter().map(|&d| Dim::Fixed(d)).collect()),
    };
    let constants: HashMap<String, Constant> = [
        ("two".to_string(), scalar(2.0)),
        ("eps".to_string(), scalar(1e-6)),
        (
            "axes".to_string(),
            Constant { elem_type: 7, dims: vec![1], data: ConstantData::Ints(vec![-1]) },
        ),
        (
            "k".to_string(),
            Constant { elem_type: 7, dims: vec![1], data: ConstantData::Ints(vec![2]) },
        ),
    ]
    .into();
    IrModel::new(IrParts {
        nodes,
        inputs: vec!["x".into()],
        outputs: vec!["values".into(), "indices".into()],
        initializers: constants.keys().cloned().chain(["w".to_string()]).collect(),
        types: [("x".to_string(), float(&[2, 4, 8])), ("w".to_string(), float(&[8]))].into(),
        constants,
    })
}

/// A plugin of the ONNX Runtime set, loaded for the ONNX Runtime it targets.
fn load_for_ort(runtime: &hfx::plugins::Runtime, relative: &str) -> hfx::plugins::Plugin {
    let found = hfx::plugins::discover_all(&[plugin_dir(relative)]).unwrap();
    let versions = [("onnxruntime".to_string(), "1.28.0".to_string())].into();
    let mut set = hfx::plugins::load_set(runtime, found, versions).unwrap();
    assert_eq!(set.plugins.len(), 1);
    set.plugins.remove(0)
}

fn ops(model: &IrModel) -> Vec<String> {
    model.order().into_iter().map(|h| model.node(h).unwrap().op_type.clone()).collect()
}

/// A component built for 0.1.0 (`tests/plugin-fixtures`, fix-topk-sorted as
/// the 0.1.0 SDK built it) and a 0.2.0 fusion rewrite one model in one stage.
#[test]
fn a_contract_0_1_fix_and_a_0_2_fusion_rewrite_one_model() {
    let runtime = runtime();
    let old = load(&runtime, "tests/plugin-fixtures/contract-v0_1-ir-fix");
    let fusion = load_for_ort(&runtime, "plugins/onnx-ort-cpu/fuse-simplified-layer-norm");
    assert_eq!(
        (old.manifest.plugin.api.as_str(), fusion.manifest.plugin.api.as_str()),
        ("0.1", "0.2")
    );
    let mut model = rms_norm_and_topk();
    let report = onnx_ir_fix::run(
        &runtime,
        &[of::<kind::OnnxIrFix>(&old), of::<kind::OnnxIrFix>(&fusion)],
        &mut model,
        "onnx-ir-fixes",
        OnPluginError::Fail,
    )
    .unwrap();
    assert_eq!(report.plugins["onnx-fix-topk-sorted"].changed, 1);
    assert_eq!(report.plugins["onnx-ort-cpu-fuse-simplified-layer-norm"].changed, 1);
    assert_eq!(ops(&model), ["SimplifiedLayerNormalization", "TopK"]);
    let fused = model.finish();
    let norm = &fused.nodes[0];
    assert_eq!(norm.inputs, ["x", "w"]);
    assert_eq!(norm.attribute("epsilon"), Some(&Attribute::Float(1e-6)));
    assert_eq!(fused.nodes[1].inputs[0], norm.outputs[0], "TopK reads the fused output");
    assert_eq!(fused.nodes[1].attribute("sorted"), Some(&Attribute::Int(1)));
}

/// Gemma 4's value norm: `x * Pow(ReduceMean(Pow(x, 2), [-1]) + eps, -0.5)`,
/// no scale. It fuses as `SimplifiedLayerNormalization` with a scale of ones
/// of x's last axis; a scaled one written with `Pow(·, -0.5)` keeps its scale.
#[test]
fn an_rms_norm_through_pow_minus_half_and_one_without_a_scale_fuse() {
    let runtime = runtime();
    let fusion = load_for_ort(&runtime, "plugins/onnx-ort-cpu/fuse-simplified-layer-norm");
    let float = |dims: &[i64]| ValueType {
        elem_type: 1,
        shape: Some(dims.iter().map(|&d| Dim::Fixed(d)).collect()),
    };
    for scaled in [false, true] {
        let mut nodes = vec![
            node("Pow", &["x", "two"], "p"),
            node("ReduceMean", &["p", "axes"], "m"),
            node("Add", &["m", "eps"], "a"),
            node("Pow", &["a", "minus_half"], "r"),
            node("Mul", &["x", "r"], "n"),
        ];
        if scaled {
            nodes.push(node("Mul", &["n", "w"], "y"));
        } else {
            nodes.push(node("Relu", &["n"], "y"));
        }
        let constants: HashMap<String, Constant> = [
            ("two".to_string(), scalar(2.0)),
            ("eps".to_string(), scalar(1e-6)),
            ("minus_half".to_string(), scalar(-0.5)),
            (
                "axes".to_string(),
                Constant { elem_type: 7, dims: vec![1], data: ConstantData::Ints(vec![-1]) },
            ),
        ]
        .into();
        let mut model = IrModel::new(IrParts {
            nodes,
            inputs: vec!["x".into()],
            outputs: vec!["y".into()],
            initializers: constants.keys().cloned().chain(["w".to_string()]).collect(),
            types: [("x".to_string(), float(&[2, 4, 8])), ("w".to_string(), float(&[8]))].into(),
            constants,
        });
        let plugins = [of::<kind::OnnxIrFix>(&fusion)];
        onnx_ir_fix::run(&runtime, &plugins, &mut model, "onnx-ir-fixes", OnPluginError::Fail)
            .unwrap();
        let last = if scaled { None } else { Some("Relu".to_string()) };
        let expected: Vec<String> =
            ["SimplifiedLayerNormalization".to_string()].into_iter().chain(last).collect();
        assert_eq!(ops(&model), expected, "scaled: {scaled}");
        let fused = model.finish();
        let norm = &fused.nodes[0];
        assert_eq!(norm.inputs[0], "x");
        assert_eq!(norm.attribute("epsilon"), Some(&Attribute::Float(1e-6)));
        if scaled {
            assert_eq!(norm.inputs[1], "w");
        } else {
            let (_, ones) =
                fused.added_initializers.iter().find(|(name, _)| *name == norm.inputs[1]).unwrap();
            assert_eq!((ones.elem_type, ones.dims.as_slice()), (1, &[8][..]));
            assert_eq!(ones.data, ConstantData::Floats(vec![1.0; 8]));
        }
    }
}

/// Each hostile rewrite of `tests/plugins/hostile-fusion` fails and leaves
/// the model as it was: an error after rewiring, an initializer past the
/// constant cap, nodes past the node budget, a malformed graph, initializers
/// past the write budget.
#[test]
fn hostile_ir_rewrites_are_rolled_back_and_stopped_by_their_budgets() {
    let runtime = runtime_with(Limits { max_new_nodes: 1000, ..Limits::default() });
    let plugin = load(&runtime, "tests/plugins/hostile-fusion");
    let nodes = vec![
        node("Relu", &["x"], "a"),
        node("Neg", &["a"], "b"),
        node("Abs", &["b"], "c"),
        node("Sigmoid", &["c"], "d"),
        node("Tanh", &["d"], "e"),
    ];
    let mut model = IrModel::of_nodes(nodes);
    let before = model.clone();
    let report = onnx_ir_fix::run(
        &runtime,
        &[of::<kind::OnnxIrFix>(&plugin)],
        &mut model,
        "onnx-ir-fixes",
        OnPluginError::Skip,
    )
    .unwrap();
    assert!(model == before, "the model changed:\n{model:?}\n{before:?}");
    let errors: Vec<String> = report.skipped.iter().map(|e| e.to_string()).collect();
    assert_eq!(errors.len(), 5, "{errors:#?}");
    let expect = [
        "refused after rewriting",
        "`model.add-initializer` was asked for 1048576 initializer elements (at most 4096)",
        "`model.add-node` added more than 1000 nodes in one call",
        "left a malformed graph: a Tanh node reads `d`, which nothing produces",
        "`model.add-initializer` would allocate 32882 bytes on the host for the initializer, over the write budget",
    ];
    for (error, expected) in errors.iter().zip(expect) {
        assert!(error.contains(expected), "{error}\nexpected: {expected}");
        assert_eq!(error.lines().count(), 1, "{error}");
    }
}

/// A float32 norm of a float16 residual sum (`Cast(Add(a, b))`, a
/// float16 model's norm computed in float32) fuses alone: the sum is not
/// joined through the cast, so no skip norm mixes dtypes (which ONNX Runtime
/// rejects, and the reference's `_unfuse_mixed_dtype_skip_norms` undoes).
#[test]
fn a_norm_computed_in_another_dtype_than_its_residual_fuses_without_it() {
    let runtime = runtime();
    let fusion = load_for_ort(&runtime, "plugins/onnx-ort-cpu/fuse-simplified-layer-norm");
    let mut cast = node("Cast", &["sum"], "x");
    cast.attributes.push(("to".into(), Attribute::Int(1)));
    let nodes = vec![
        node("Add", &["a", "b"], "sum"),
        cast,
        node("Pow", &["x", "two"], "p"),
        node("ReduceMean", &["p", "axes"], "m"),
        node("Add", &["m", "eps"], "e"),
        node("Sqrt", &["e"], "s"),
        node("Reciprocal", &["s"], "r"),
        node("Mul", &["x", "r"], "n"),
        node("Mul", &["w", "n"], "y"),
    ];
    let typed = |elem_type: i32, dims: &[i64]| ValueType {
        elem_type,
        shape: Some(dims.iter().map(|&d| Dim::Fixed(d)).collect()),
    };
    let constants: HashMap<String, Constant> = [
        ("two".to_string(), scalar(2.0)),
        ("eps".to_string(), scalar(1e-6)),
        (
            "axes".to_string(),
            Constant { elem_type: 7, dims: vec![1], data: ConstantData::Ints(vec![-1]) },
        ),
    ]
    .into();
    let mut model = IrModel::new(IrParts {
        nodes,
        inputs: vec!["a".into(), "b".into()],
        outputs: vec!["y".into()],
        initializers: constants.keys().cloned().chain(["w".to_string()]).collect(),
        types: [
            ("a".to_string(), typed(10, &[2, 4, 8])),
            ("b".to_string(), typed(10, &[2, 4, 8])),
            ("sum".to_string(), typed(10, &[2, 4, 8])),
            ("x".to_string(), typed(1, &[2, 4, 8])),
            ("w".to_string(), typed(1, &[8])),
        ]
        .into(),
        constants,
    });
    onnx_ir_fix::run(
        &runtime,
        &[of::<kind::OnnxIrFix>(&fusion)],
        &mut model,
        "onnx-ir-fixes",
        OnPluginError::Fail,
    )
    .unwrap();
    assert_eq!(ops(&model), ["Add", "Cast", "SimplifiedLayerNormalization"]);
}

/// Two norms of one value with one weight, written apart (their exponents
/// distinct constants, so the optimizer's merge before the fixes sees two
/// computations), fuse into equal nodes: the stage on a lowered model keeps
/// one of them, and one of each reader they made equal.
#[test]
fn equal_nodes_the_fixes_make_are_computed_once() {
    use hfx::onnx::emit::Lowered;
    use hfx::onnx::weights::{Bytes, Initializer};

    let runtime = runtime();
    let fusion = load_for_ort(&runtime, "plugins/onnx-ort-cpu/fuse-simplified-layer-norm");
    let norm = |k: &str, two: &str| {
        let name = |s: &str| format!("{s}{k}");
        vec![
            node("Pow", &["x", two], &name("p")),
            node("ReduceMean", &[&name("p"), "axes"], &name("m")),
            node("Add", &[&name("m"), "eps"], &name("a")),
            node("Sqrt", &[&name("a")], &name("s")),
            node("Reciprocal", &[&name("s")], &name("r")),
            node("Mul", &["x", &name("r")], &name("n")),
            node("Mul", &["w", &name("n")], &name("y")),
            node("Neg", &[&name("y")], &name("negated")),
        ]
    };
    let mut nodes = norm("1", "two");
    nodes.extend(norm("2", "two_again"));
    nodes.push(node("Add", &["negated1", "negated2"], "out"));
    let initializer = |name: &str, elem_type: i32, dims: Vec<i64>, bytes: Vec<u8>| Initializer {
        header: hfx::onnx::proto::TensorProto {
            dims,
            data_type: Some(elem_type),
            name: Some(name.into()),
            ..Default::default()
        },
        bytes: Bytes::Owned(bytes),
    };
    let float = |v: f32| v.to_le_bytes().to_vec();
    let mut lowered = Lowered {
        inputs: vec![hfx::onnx::proto::ValueInfoProto {
            name: Some("x".into()),
            ..Default::default()
        }],
        initializers: vec![
            initializer("two", 1, vec![], float(2.0)),
            initializer("two_again", 1, vec![], float(2.0)),
            initializer("eps", 1, vec![], float(1e-6)),
            initializer("axes", 7, vec![1], (-1i64).to_le_bytes().to_vec()),
            initializer("w", 1, vec![8], (0..8).flat_map(|i| float(i as f32)).collect()),
        ],
        nodes,
        output_names: vec!["out".into()],
        outputs: Vec::new(),
        opset: 17,
        domains: Default::default(),
        static_shapes: HashMap::new(),
    };
    let float_type = |dims: &[i64]| ValueType {
        elem_type: 1,
        shape: Some(dims.iter().map(|&d| Dim::Fixed(d)).collect()),
    };
    let types = [("x".to_string(), float_type(&[2, 4, 8])), ("w".to_string(), float_type(&[8]))];
    let report = onnx_ir_fix::run_on_lowered(
        &runtime,
        &[of::<kind::OnnxIrFix>(&fusion)],
        &mut lowered,
        types.into(),
        "onnx-ir-fixes",
        OnPluginError::Fail,
    )
    .unwrap();
    assert_eq!(report.plugins["onnx-ort-cpu-fuse-simplified-layer-norm"].changed, 2);
    let ops: Vec<&str> = lowered.nodes.iter().map(|n| n.op_type.as_str()).collect();
    assert_eq!(ops, ["SimplifiedLayerNormalization", "Neg", "Add"]);
    let negated = &lowered.nodes[1].outputs[0];
    assert_eq!(lowered.nodes[2].inputs, [negated.clone(), negated.clone()]);
}

/// A saved model's node count, op counts and opset domains.
pub(crate) fn op_counts(path: &Path) -> (usize, HashMap<String, usize>, HashSet<String>) {
    let model = read_model(path);
    let graph = model.graph.unwrap();
    let mut counts = HashMap::new();
    for n in &graph.node {
        *counts.entry(n.op_type.clone().unwrap_or_default()).or_default() += 1;
    }
    let domains = model.opset_import.iter().filter_map(|o| o.domain.clone()).collect();
    (graph.node.len(), counts, domains)
}

/// The ONNX model at `path`.
fn read_model(path: &Path) -> ModelProto {
    ModelProto::decode(std::fs::read(path).unwrap().as_slice()).unwrap()
}

/// `--ort-fusions cpu` on a tiny Llama (2 layers), traced dynamic: every
/// RMSNorm fused, the first one alone, the others with their residual sum (2
/// per layer + the final norm), every rotation of q and k fused on caches
/// shared by all, each attention (the trace returns the cache) as
/// GroupQueryAttention, verified in ONNX Runtime, in fewer nodes than
/// without. With `--generation`, each component's attentions over the cache are
/// GroupQueryAttention (one per layer) and the rotations read `position_ids`
/// per row (caches computed in the graph, one pair for all), the decode
/// step's done by its GroupQueryAttention, which reads q, k and v as one
/// packed projection (sibling MatMuls packed into one, their weights
/// concatenated); the greedy tokens of a left-padded batch stay eager
/// `generate`'s.
#[test]
fn ort_fusions_cpu_fuses_every_llama_norm_and_rotation_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let pt2 = dir.path().join("llama.pt2");
    let mut args: Vec<String> =
        ["run", "--backend", "onnx", "--model", "llama", "--set", crate::common::tiny::LLAMA, "-o"]
            .map(String::from)
            .to_vec();
    args.push(pt2.display().to_string());
    for folder in ["plugins/dynamo", "plugins/onnx"] {
        args.extend(["--plugins".to_string(), root().join(folder).display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let traced = hfx_with_python(dir.path(), &args);
    assert!(traced.status.success(), "{}", String::from_utf8_lossy(&traced.stderr));
    let plain = dir.path().join("plain.onnx");
    let fused = dir.path().join("fused.onnx");
    let run = |out: &Path, extra: &[&str]| {
        let result = crate::onnx::export_pt2(dir.path(), &pt2, out, extra);
        let stdout = String::from_utf8_lossy(&result.stdout).to_string();
        assert!(result.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&result.stderr));
        stdout
    };
    run(&plain, &[]);
    let stdout = run(&fused, &["--ort-fusions", "cpu", "--verify"]);
    // --verify fails the run past 1e-3; it ran.
    assert!(stdout.contains("verify inputs"), "{stdout}");
    let (plain_nodes, _, _) = op_counts(&plain);
    let (fused_nodes, counts, domains) = op_counts(&fused);
    assert_eq!(counts.get("SimplifiedLayerNormalization"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("SkipSimplifiedLayerNormalization"), Some(&4), "{counts:?}");
    assert_eq!(counts.get("RotaryEmbedding"), Some(&4), "{counts:?}");
    assert_eq!((counts.get("Cos"), counts.get("Sin")), (Some(&1), Some(&1)), "{counts:?}");
    assert!(!counts.contains_key("Neg"), "{counts:?}");
    assert!(!counts.contains_key("Pow") && !counts.contains_key("ReduceMean"), "{counts:?}");
    // The trace returns the cache: its attentions are a prefill's.
    assert_eq!(counts.get("GroupQueryAttention"), Some(&2), "{counts:?}");
    assert!(domains.contains("com.microsoft"), "{domains:?}");
    assert!(fused_nodes < plain_nodes, "{fused_nodes} nodes fused, {plain_nodes} without");
    generation_components_fused(dir.path());
    // A target with no set: one line.
    let result = crate::onnx::export_pt2(dir.path(), &pt2, &plain, &["--ort-fusions", "tpu"]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(!result.status.success(), "{stderr}");
    assert!(
        stderr.contains("--ort-fusions tpu: give `cpu`, `cuda`, `webgpu` or `dml`"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// The ONNX Runtime sets are opt-in: discovery of `plugins/` skips them,
/// naming one finds it; `--ort-fusions` resolves `cpu`, `cuda`, `webgpu`
/// and `dml` to them and refuses the rest in one line.
#[test]
fn the_ort_fusion_set_is_found_only_when_asked_for() {
    use hfx::plugins::discover;
    let names = |folder: &str| -> Vec<String> {
        hfx::plugins::discover_all(&[root().join(folder)])
            .unwrap()
            .into_iter()
            .map(|d| d.manifest.plugin.name)
            .collect()
    };
    assert!(!names("plugins").iter().any(|n| n.starts_with("onnx-ort-cpu-")));
    assert!(names("plugins/onnx-ort-cpu")
        .contains(&"onnx-ort-cpu-fuse-simplified-layer-norm".to_string()));
    let set = discover::ort_fusion_set("cpu", None).unwrap();
    assert_eq!(
        set.canonicalize().unwrap(),
        root().join("plugins/onnx-ort-cpu").canonicalize().unwrap()
    );
    assert_eq!(
        discover::ort_fusion_set("tpu", None).unwrap_err(),
        "--ort-fusions tpu: give `cpu`, `cuda`, `webgpu` or `dml`"
    );
    // The CUDA set runs the CPU set's plugins (included, not copied) and its
    // own: its build of the GQA fusion (a decode step's only) in place of
    // the CPU set's, MultiHeadAttention for the rest, MoE.
    let cuda = names("plugins/onnx-ort-cuda");
    assert!(cuda.contains(&"onnx-ort-cpu-fuse-rotary-embedding".to_string()), "{cuda:?}");
    for own in ["group-query-attention", "multi-head-attention", "mixture-of-experts"] {
        assert!(cuda.contains(&format!("onnx-ort-cuda-fuse-{own}")), "{cuda:?}");
    }
    assert!(!cuda.iter().any(|n| n.starts_with("onnx-ort-cpu-fuse-group-query")), "{cuda:?}");
    assert!(!names("plugins/onnx-ort-cpu").iter().any(|n| n.contains("multi-head")));
    assert!(!names("plugins").iter().any(|n| n.starts_with("onnx-ort-cuda-")));
    assert_eq!(
        discover::ort_fusion_set("cuda", None).unwrap().canonicalize().unwrap(),
        root().join("plugins/onnx-ort-cuda").canonicalize().unwrap()
    );
    // WebGPU's: the CPU set's but the scores' FusedMatMul, and its own build
    // of the attention fusion; DirectML's: the CPU set's but GQA, and CUDA's
    // MultiHeadAttention.
    let webgpu = names("plugins/onnx-ort-webgpu");
    assert!(webgpu.contains(&"onnx-ort-webgpu-fuse-group-query-attention".to_string()));
    assert!(webgpu.contains(&"onnx-ort-cpu-fuse-rotary-embedding".to_string()), "{webgpu:?}");
    assert!(!webgpu.iter().any(|n| n.starts_with("onnx-ort-cpu-fuse-group-query")), "{webgpu:?}");
    assert!(!webgpu.contains(&"onnx-ort-cpu-fuse-matmul-transpose-scale".to_string()));
    let dml = names("plugins/onnx-ort-dml");
    assert!(dml.contains(&"onnx-ort-cpu-fuse-matmul-transpose-scale".to_string()), "{dml:?}");
    assert!(!dml.iter().any(|n| n.contains("fuse-group-query-attention")), "{dml:?}");
    assert!(dml.contains(&"onnx-ort-cuda-fuse-multi-head-attention".to_string()), "{dml:?}");
    for (target, folder) in [("webgpu", "onnx-ort-webgpu"), ("dml", "onnx-ort-dml")] {
        assert_eq!(
            discover::ort_fusion_set(target, None).unwrap().canonicalize().unwrap(),
            root().join("plugins").join(folder).canonicalize().unwrap()
        );
    }
}

/// `--ort-fusions cpu --verify` on the other decoders of the sweep, traced
/// dynamic: every RMSNorm fused (Qwen3's per-head q/k norms and Gemma 2's
/// four norms a layer included) and every q and k rotation (Phi-3's sliced
/// from its packed projection), parity within 1e-3.
#[test]
#[ignore = "full tier: the fusion on three more decoders (ort_fusions_cpu_fuses_every_llama_norm_and_verifies covers the mechanism)"]
fn ort_fusions_cpu_fuses_the_norms_of_the_sweeps_decoders() {
    use crate::common::tiny::*;
    let dir = tempfile::tempdir().unwrap();
    // (architecture, config, norms: fused alone, fused with their residual sum)
    for (model, config, alone, skip) in
        [("qwen3", QWEN3, 9 - 4, 4), ("gemma2", GEMMA, 9 - 4, 4), ("phi3", PHI3, 1, 4)]
    {
        let counts = fused_export(dir.path(), "cpu", model, config);
        let fused = (
            counts.get("SimplifiedLayerNormalization").copied().unwrap_or(0),
            counts.get("SkipSimplifiedLayerNormalization").copied().unwrap_or(0),
        );
        assert_eq!(fused, (alone, skip), "{model}: {counts:?}");
        assert_eq!(counts.get("RotaryEmbedding"), Some(&4), "{model}: {counts:?}");
    }
}

/// `--ort-fusions cpu --verify` on GPT-2 and BERT: each layer norm of a
/// residual sum fused with it (the embeddings' sum, of a position table
/// broadcast over the batch, is left as it is), parity within 1e-3.
#[test]
#[ignore = "full tier: the skip layer norm fusion on GPT-2 and BERT (its self-test covers the rewrite)"]
fn ort_fusions_cpu_fuses_the_residual_layer_norms_of_gpt2_and_bert() {
    use crate::common::tiny::*;
    let dir = tempfile::tempdir().unwrap();
    for (model, config) in [("gpt2", GPT2), ("bert", BERT)] {
        let counts = fused_export(dir.path(), "cpu", model, config);
        let norms = (counts.get("SkipLayerNormalization"), counts.get("LayerNormalization"));
        assert_eq!(norms, (Some(&4), Some(&1)), "{model}: {counts:?}");
    }
}

/// `model` (a tiny `config`) exported with `--ort-fusions TARGET --verify`
/// (its stdout says it verified): its op counts.
fn fused_export(dir: &Path, target: &str, model: &str, config: &str) -> HashMap<String, usize> {
    let out = dir.join(format!("{model}-{target}.onnx"));
    let mut args: Vec<String> =
        ["run", "--backend", "onnx", "--model", model, "--set", config].map(String::from).to_vec();
    args.extend(["--ort-fusions", target, "--verify", "-o"].map(String::from));
    args.push(out.display().to_string());
    for folder in ["plugins/dynamo", "plugins/onnx"] {
        args.extend(["--plugins".to_string(), root().join(folder).display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = hfx_with_python(dir, &args);
    assert!(result.status.success(), "{model}: {}", String::from_utf8_lossy(&result.stderr));
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(stdout.contains("verify inputs"), "{model}: {stdout}");
    op_counts(&out).1
}

/// A tiny Llama whose heads are 16 wide: ONNX Runtime's GroupQueryAttention
/// rotates heads of a multiple of 16.
const LLAMA_HEADS_OF_16: &str = "vocab_size=128,hidden_size=64,intermediate_size=64,num_hidden_layers=2,num_attention_heads=4,num_key_value_heads=2,max_position_embeddings=64";

/// `--generation --ort-fusions cpu --verify` on a tiny Llama, in `dir`: the
/// decode step's GroupQueryAttention rotates q and k itself (a prefill's
/// cannot: ONNX Runtime rotates a first prompt's rows from one position, a
/// left-padded batch's rows start at different ones).
fn generation_components_fused(dir: &Path) {
    for (component, counts) in fused_generation_export(dir, "cpu", "llama", LLAMA_HEADS_OF_16, &[])
    {
        let rotations = if component == "decode" { None } else { Some(&4) };
        let rotary = (counts.get("RotaryEmbedding"), counts.get("Cos"), counts.get("Sin"));
        assert_eq!(rotary, (rotations, Some(&1), Some(&1)), "{component}: {counts:?}");
        assert_eq!(counts.get("SkipSimplifiedLayerNormalization"), Some(&4), "{counts:?}");
        assert_eq!(counts.get("GroupQueryAttention"), Some(&2), "{component}: {counts:?}");
        assert!(!counts.contains_key("Softmax"), "{component}: {counts:?}");
        // Per layer q/k/v packed into one MatMul, gate/up into one, o and
        // down: 4, and the head's.
        assert_eq!(counts.get("MatMul"), Some(&9), "{component}: {counts:?}");
        // Split back: gate/up, and a prefill's q/k/v (rotated apart); a
        // decode step's GQA reads q/k/v packed, no split left.
        let splits = if component == "decode" { 2 } else { 4 };
        assert_eq!(counts.get("Split"), Some(&splits), "{component}: {counts:?}");
    }
    // The decode step's GQA rotates q and k itself: it reads the packed projection.
    let decode = read_model(&dir.join("llama-generation/decode.onnx"));
    let attentions = decode
        .graph
        .unwrap()
        .node
        .into_iter()
        .filter(|n| n.op_type.as_deref() == Some("GroupQueryAttention"));
    for attention in attentions {
        assert_eq!(attention.input[1..3], ["", ""], "{:?}", attention.input);
    }
}

/// `--generation --ort-fusions webgpu` and `dml`, `--verify`, on the tiny
/// Llama whose heads GQA can rotate: greedy tokens eager's in ONNX Runtime's
/// CPU provider, norms and rotations fused as by the CPU set. WebGPU's
/// components attend by GroupQueryAttention that never rotates (every
/// rotation stays a RotaryEmbedding, the decode step's too, which the CPU
/// set's GQA takes over) and hold no FusedMatMul; DirectML's prefill attends
/// by MultiHeadAttention, its decode step by MatMul and Softmax, the scores a
/// FusedMatMul transposing only the last two axes (no `transBatch*`, which
/// the reference's DirectML step undoes).
#[test]
fn ort_fusions_webgpu_and_dml_fuse_what_their_providers_run() {
    let dir = tempfile::tempdir().unwrap();
    for (component, counts) in
        fused_generation_export(dir.path(), "webgpu", "llama", LLAMA_HEADS_OF_16, &[])
    {
        assert_eq!(counts.get("GroupQueryAttention"), Some(&2), "{component}: {counts:?}");
        assert_eq!(counts.get("RotaryEmbedding"), Some(&4), "{component}: {counts:?}");
        assert_eq!(counts.get("SkipSimplifiedLayerNormalization"), Some(&4), "{counts:?}");
        assert!(!counts.contains_key("FusedMatMul"), "{component}: {counts:?}");
    }
    let decode = read_model(&dir.path().join("llama-generation-webgpu/decode.onnx"));
    for node in decode.graph.unwrap().node {
        if node.op_type.as_deref() == Some("GroupQueryAttention") {
            let names: Vec<_> = node.attribute.iter().filter_map(|a| a.name.as_deref()).collect();
            assert!(!names.contains(&"do_rotary"), "{names:?}");
        }
    }
    for (component, counts) in
        fused_generation_export(dir.path(), "dml", "llama", LLAMA_HEADS_OF_16, &[])
    {
        assert!(!counts.contains_key("GroupQueryAttention"), "{component}: {counts:?}");
        let (attentions, softmaxes) = if component == "prefill" { (2, 0) } else { (0, 2) };
        let counted = |op| counts.get(op).copied().unwrap_or(0);
        assert_eq!(counted("MultiHeadAttention"), attentions, "{component}: {counts:?}");
        assert_eq!(counted("Softmax"), softmaxes, "{component}: {counts:?}");
        assert_eq!(counted("FusedMatMul"), softmaxes, "{component}: {counts:?}");
        assert_eq!(counts.get("RotaryEmbedding"), Some(&4), "{component}: {counts:?}");
        assert_eq!(counts.get("SkipSimplifiedLayerNormalization"), Some(&4), "{counts:?}");
        let model = read_model(&dir.path().join(format!("llama-generation-dml/{component}.onnx")));
        for node in model.graph.unwrap().node {
            let names: Vec<_> = node.attribute.iter().filter_map(|a| a.name.as_deref()).collect();
            assert!(!names.iter().any(|n| n.starts_with("transBatch")), "{node:?}");
        }
    }
    assert_no_scratch_left(dir.path());
}

/// `--ort-fusions cuda`: a tiny BERT's attentions, `--verify`, each one
/// MultiHeadAttention (no Softmax left), on q, k and v as the projections
/// made them and the mask as its attention bias, verified in ONNX Runtime's
/// CPU provider within 1e-3; and the tiny Llama whose heads GQA can rotate,
/// `--generation`: its prefill attends by MultiHeadAttention (GroupQueryAttention
/// with a bias runs an unfused kernel on CUDA, slower for a prompt), its
/// decode step by GroupQueryAttention, greedy tokens eager's.
#[test]
fn ort_fusions_cuda_attend_by_multi_head_attention_but_in_a_decode_step() {
    let dir = tempfile::tempdir().unwrap();
    let counts = fused_export(dir.path(), "cuda", "bert", crate::common::tiny::BERT);
    assert_eq!(counts.get("MultiHeadAttention"), Some(&2), "{counts:?}");
    assert!(!counts.contains_key("Softmax"), "{counts:?}");
    let bert = read_model(&dir.path().join("bert-cuda.onnx")).graph.unwrap();
    for node in bert.node.iter().filter(|n| n.op_type.as_deref() == Some("MultiHeadAttention")) {
        assert_eq!(node.input.len(), 6, "{node:?}");
        assert_eq!(node.input[3..5], ["", ""], "{node:?}");
    }
    for (component, counts) in
        fused_generation_export(dir.path(), "cuda", "llama", LLAMA_HEADS_OF_16, &[])
    {
        let (mha, gqa) = if component == "prefill" { (Some(&2), None) } else { (None, Some(&2)) };
        let attentions = (counts.get("MultiHeadAttention"), counts.get("GroupQueryAttention"));
        assert_eq!(attentions, (mha, gqa), "{component}: {counts:?}");
        assert!(!counts.contains_key("Softmax"), "{component}: {counts:?}");
        assert_eq!(counts.get("SkipSimplifiedLayerNormalization"), Some(&4), "{counts:?}");
    }
    assert_no_scratch_left(dir.path());
}

/// `--ort-fusions cuda` and `dml`, `--verify`, on a tiny BERT and a tiny
/// ViT: one MultiHeadAttention per layer, verified in ONNX Runtime's CPU
/// provider within 1e-3; `--ort-fusions cpu` leaves each attention MatMul
/// and Softmax (ONNX Runtime's CPU MultiHeadAttention runs slower than the
/// ops it fuses: the CPU set has no such fusion).
#[test]
#[ignore = "full tier: MultiHeadAttention on two encoders for two providers, and the CPU set without it (ort_fusions_cuda_attend_by_multi_head_attention_but_in_a_decode_step covers the fusion)"]
fn ort_fusions_cuda_and_dml_fuse_encoder_attentions_into_multi_head_attention() {
    use crate::common::tiny::*;
    let dir = tempfile::tempdir().unwrap();
    for (model, config) in [("bert", BERT), ("vit", VIT)] {
        for target in ["cuda", "dml"] {
            let counts = fused_export(dir.path(), target, model, config);
            let attention = (counts.get("MultiHeadAttention"), counts.get("Softmax"));
            assert_eq!(attention, (Some(&2), None), "{model} {target}: {counts:?}");
        }
        let counts = fused_export(dir.path(), "cpu", model, config);
        let attention = (counts.get("MultiHeadAttention"), counts.get("Softmax"));
        assert_eq!(attention, (None, Some(&2)), "{model} cpu: {counts:?}");
    }
}

/// `--generation --ort-fusions cpu --verify` on GPT-2 (its prefill's key
/// transposed once from its split form, one head per key-value head, q, k
/// and v split from one value: GQA takes it packed), Phi-3 (its prefill's
/// present the concat of a rotation whose unrotated part is empty), OPT (its
/// query scaled before the scores), Mistral with heads of 16 and a window of
/// 4 (its decode step's rotation done by GQA, the window in its attention
/// bias; the 8 tokens generated cross it), Phi (a partial rotation: ONNX
/// Runtime refuses `rotary_embedding_dim` without `num_heads`) and a float16
/// Llama (its norms and rotation caches computed in float32 and cast, its
/// unattended rows zeroed by a cast zero): each component's attentions are
/// GroupQueryAttention, on q, k and v as the graph had them before their
/// split into heads (no transpose left), greedy tokens eager's; the float16
/// Llama's norms and rotations fused in float16, no rotate-half left.
#[test]
#[ignore = "full tier: GroupQueryAttention on five more decoders' components (ort_fusions_cpu_fuses_every_llama_norm_and_rotation_and_verifies covers the fusion)"]
fn ort_fusions_cpu_fuse_the_attention_of_gpt2_phi3_opt_mistral_phi_and_float16_llama_components() {
    use crate::common::tiny::*;
    const OPT: &str = "vocab_size=128,hidden_size=32,ffn_dim=64,num_hidden_layers=2,num_attention_heads=4,max_position_embeddings=64,word_embed_proj_dim=32";
    const PHI: &str = "vocab_size=128,hidden_size=64,intermediate_size=64,num_hidden_layers=2,num_attention_heads=4,partial_rotary_factor=0.5,max_position_embeddings=64";
    let mistral = format!("{LLAMA_HEADS_OF_16},sliding_window=4");
    let dir = tempfile::tempdir().unwrap();
    let float16: &[&str] = &["--dtype", "float16"];
    for (model, config, extra) in [
        ("gpt2", GPT2, &[][..]),
        ("phi3", PHI3, &[]),
        ("opt", OPT, &[]),
        ("mistral", &mistral, &[]),
        ("phi", PHI, &[]),
        ("llama", LLAMA_HEADS_OF_16, float16),
    ] {
        for (component, counts) in fused_generation_export(dir.path(), "cpu", model, config, extra)
        {
            let attention = (counts.get("GroupQueryAttention"), counts.get("Softmax"));
            assert_eq!(attention, (Some(&2), None), "{model} {component}: {counts:?}");
            assert_eq!(counts.get("Transpose"), None, "{model} {component}: {counts:?}");
            // A float16 Llama's frequencies are a Cast of the constant: still rotated by GQA.
            if matches!(model, "mistral" | "llama") && component == "decode" {
                assert_eq!(counts.get("RotaryEmbedding"), None, "{model} {component}: {counts:?}");
            }
            if model == "llama" {
                let norms = counts.get("SkipSimplifiedLayerNormalization");
                assert_eq!(norms, Some(&4), "{model} {component}: {counts:?}");
                assert_eq!(counts.get("Neg"), None, "{model} {component}: {counts:?}");
            }
        }
    }
}

/// `model` (a tiny `config`) exported with `--generation --ort-fusions cpu
/// --verify` and `extra` in `dir`: each component's op counts, greedy tokens checked.
fn fused_generation_export(
    dir: &Path,
    target: &str,
    model: &str,
    config: &str,
    extra: &[&str],
) -> [(&'static str, HashMap<String, usize>); 2] {
    let suffix = if target == "cpu" { String::new() } else { format!("-{target}") };
    let out = dir.join(format!("{model}-generation{}{suffix}", extra.join("")));
    let mut args: Vec<String> =
        ["run", "--backend", "onnx", "--model", model, "--set", config].map(String::from).to_vec();
    args.extend(extra.iter().map(|a| a.to_string()));
    args.extend(["--generation", "--ort-fusions", target, "--verify", "-o"].map(String::from));
    args.push(out.display().to_string());
    for folder in ["plugins/dynamo", "plugins/onnx"] {
        args.extend(["--plugins".to_string(), root().join(folder).display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = hfx_with_python(dir, &args);
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(
        result.status.success(),
        "{model}: {}{stdout}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert!(stdout.contains("identical to eager `generate`"), "{model}: {stdout}");
    ["prefill", "decode"].map(|c| (c, op_counts(&out.join(format!("{c}.onnx"))).1))
}

/// Gemma 4 with KV-shared layers (`model_folders.py gemma4-kv-shared`: its
/// last two of four layers attend over the cache of the last earlier layer
/// of their kind) exported with `--generation --ort-fusions cpu --verify`:
/// every rotation (q and k of the cache's own layers, q of the sharing ones;
/// on `[batch, length, heads, head_dim]`, the global layers' frequencies
/// proportional) is a `RotaryEmbedding`; the two layers writing a cache
/// attend by GroupQueryAttention, whose presents the sharing layers read,
/// their attention left as it was (the reference's CPU graph fuses none of
/// the four); greedy tokens eager's.
#[test]
fn ort_fusions_cpu_fuse_gemma4s_rotations_and_the_attention_of_its_kv_owning_layers() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_folder("gemma4-kv-shared", dir.path());
    let out = dir.path().join("fused");
    let (model, out_arg) = (model.display().to_string(), out.display().to_string());
    let mut args = vec!["run", "--backend", "onnx", "--model-dir", &model, "--generation"];
    args.extend(["--ort-fusions", "cpu", "--verify", "-o", &out_arg]);
    let plugins = root().join("plugins").display().to_string();
    args.extend(["--plugins", &plugins]);
    let result = hfx_with_python(dir.path(), &args);
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(result.status.success(), "{}{stdout}", String::from_utf8_lossy(&result.stderr));
    assert!(stdout.contains("identical to eager `generate`"), "{stdout}");
    for component in ["prefill", "decode"] {
        let (_, counts, _) = op_counts(&out.join(format!("{component}.onnx")));
        let count = |op: &str| counts.get(op).copied().unwrap_or(0);
        assert_eq!((count("RotaryEmbedding"), count("Neg")), (6, 0), "{component}: {counts:?}");
        let attention = (count("GroupQueryAttention"), count("Softmax"));
        assert_eq!(attention, (2, 2), "{component}: {counts:?}");
    }
}
