//! Each plugin kind loads and is called; node fixes see only their declared
//! targets; the first ONNX plugins do what the reference exporter's fixes do.

use crate::common::*;
use hfx::graph::{Argument, RangeConstraint, Sym};
use hfx::onnx::{Attribute, Node, TranslationBuilder};
use hfx::plugins::ir_model::IrModel;
use hfx::plugins::patching::{CallValue, PatchedCall, Scalar, Step};
use hfx::plugins::{Backend, PluginKind, Session};
use hfx::stages::{self, fx_node_fix, fx_program_fix, onnx_ir_fix, OnPluginError};

#[test]
fn node_fix_is_called_only_for_declared_targets() {
    let runtime = runtime();
    let plugin = load(&runtime, "tests/plugins/kind-node-fix");
    assert_eq!(plugin.targets, ["aten.relu.default", "aten.add.Tensor"]);
    let (mut graph, _) = relu_add_mul();
    let report = fx_node_fix::run(
        &runtime,
        &[of::<kind::FxNodeFix>(&plugin)],
        &mut graph,
        "fx-node-fixes",
        OnPluginError::Fail,
    )
    .unwrap();
    let counts = &report.plugins["test-kind-node-fix"];
    // relu (consumed) and add (declined); mul was never offered.
    assert_eq!((counts.calls, counts.changed, counts.failed), (2, 1, 0));
    assert_eq!(targets(&graph), ["aten.clamp_min.default", "aten.add.Tensor", "aten.mul.Tensor"]);
    let clamp = graph.nodes().next().unwrap();
    assert_eq!(graph.node(clamp).unwrap().input("min"), Some(&Argument::Int(0)));
    // The add now reads the clamp's output, which kept relu's metadata.
    let add = graph.nodes().nth(1).unwrap();
    let y = first_output(&graph, clamp);
    assert_eq!(graph.node(add).unwrap().input("self"), Some(&Argument::Tensor(y)));
    assert_eq!(
        graph.value(y).unwrap().meta,
        hfx::graph::ValueMeta::Tensor(f32_meta(&batch_by_8()))
    );
}

#[test]
fn program_fix_sees_the_whole_program() {
    let runtime = runtime();
    let plugin = load(&runtime, "tests/plugins/kind-program-fix");
    assert_eq!(plugin.kind(), PluginKind::FxProgramFix);
    let (mut graph, _) = relu_add_mul();
    graph.set_range_constraint("s0", RangeConstraint { min: 2, max: None }).unwrap();
    graph.set_range_constraint("s1", RangeConstraint { min: 1, max: Some(64) }).unwrap();
    let report = fx_program_fix::run(
        &runtime,
        &[of::<kind::FxProgramFix>(&plugin)],
        &mut graph,
        "fx-program-fixes",
        OnPluginError::Fail,
    )
    .unwrap();
    assert_eq!(report.plugins["test-kind-program-fix"].changed, 1);
    assert_eq!(graph.range_constraints()["s0"], RangeConstraint { min: 2, max: Some(4096) });
    assert_eq!(graph.range_constraints()["s1"], RangeConstraint { min: 1, max: Some(64) });
}

#[test]
fn patch_answers_with_a_program() {
    let runtime = runtime();
    let plugin = load(&runtime, "tests/plugins/kind-patch");
    assert_eq!(plugin.targets, ["torch.where"]);
    let tensor = CallValue::Tensor(hfx_wit_meta::LiveTensor {
        meta: hfx_meta(),
        contiguous: true,
        sizes: vec![2, 8],
    });
    let call = PatchedCall {
        target: "torch.where".into(),
        values: vec![tensor.clone(), tensor.clone(), tensor],
        args: vec![0, 1, 2],
        kwargs: vec![],
    };
    let mut session = Session::new(&runtime, of::<kind::Patch>(&plugin), "trace");
    let program = session.patch(&call, |p| hfx::trace::check_program(&call, p)).unwrap();
    assert_eq!(program.output, 3);
    assert!(
        matches!(&program.steps[..], [Step::Call(op)] if op.op == "aten.where.self" && op.args == [0, 1, 2])
    );
    // A scalar operand: the patch defers to the original.
    let call = PatchedCall {
        values: vec![CallValue::Scalar(Scalar::Float(0.5)), CallValue::Scalar(Scalar::None)],
        args: vec![0, 1],
        ..call
    };
    let program = session.patch(&call, |p| hfx::trace::check_program(&call, p)).unwrap();
    assert!(matches!(&program.steps[..], [Step::Original(_)]));
}

fn hfx_meta() -> hfx_wit_meta::TensorMeta {
    hfx_wit_meta::TensorMeta {
        dtype: "float32".into(),
        shape: vec![hfx_wit_meta::Dim::Symbolic("s0".into()), hfx_wit_meta::Dim::Fixed(8)],
        strides: vec![],
        device: hfx_wit_meta::Device { kind: "cpu".into(), index: None },
    }
}
use hfx::plugins::patching as hfx_wit_meta;

#[test]
fn translation_emits_onnx_nodes() {
    let runtime = runtime();
    let plugin = load(&runtime, "tests/plugins/kind-translation");
    let (mut graph, [relu, _, _]) = relu_add_mul();
    let x = graph.subgraph(0).unwrap().inputs[0];
    let mut builder = TranslationBuilder::new(20);
    builder.value_names.insert(x, "x".into());
    let before = graph.fingerprint();
    Session::new(&runtime, of::<kind::OnnxTranslation>(&plugin), "onnx-translations")
        .translate(&mut graph, relu, &mut builder)
        .unwrap();
    assert_eq!(graph.fingerprint(), before, "a translation must not change the graph");
    assert_eq!(builder.nodes.len(), 1);
    assert_eq!(builder.nodes[0].op_type, "Relu");
    assert_eq!(builder.nodes[0].inputs, ["x"]);
    let y = first_output(&graph, relu);
    assert_eq!(builder.value_names[&y], builder.nodes[0].outputs[0]);
}

fn topk(sorted: Option<i64>, function: Option<&str>) -> Node {
    Node {
        op_type: "TopK".into(),
        domain: String::new(),
        inputs: vec!["x".into(), "k".into()],
        outputs: vec!["values".into(), "indices".into()],
        attributes: sorted
            .map(|s| vec![("sorted".to_string(), Attribute::Int(s))])
            .unwrap_or_default(),
        function: function.map(String::from),
    }
}

#[test]
fn onnx_fix_topk_sorted_repairs_graph_and_functions() {
    let runtime = runtime();
    let plugin = load(&runtime, "plugins/onnx/fix-topk-sorted");
    let relu = Node { op_type: "Relu".into(), attributes: vec![], ..topk(None, None) };
    let mut nodes =
        vec![topk(Some(0), None), relu.clone(), topk(None, Some("f")), topk(Some(1), Some("g"))];
    // A call that changes the model is kept only if each value has one producer.
    for (i, node) in nodes.iter_mut().enumerate() {
        node.outputs.iter_mut().for_each(|o| *o = format!("{o}{i}"));
    }
    let relu = nodes[1].clone();
    let mut model = IrModel::of_nodes(nodes);
    let report = onnx_ir_fix::run(
        &runtime,
        &[of::<kind::OnnxIrFix>(&plugin)],
        &mut model,
        "onnx-ir-fixes",
        OnPluginError::Fail,
    )
    .unwrap();
    let counts = &report.plugins["onnx-fix-topk-sorted"];
    assert_eq!(
        (counts.calls, counts.changed),
        (3, 2),
        "Relu is never offered; a sorted TopK is left alone"
    );
    for node in [0, 2, 3] {
        assert_eq!(model.node(node).unwrap().attribute("sorted"), Some(&Attribute::Int(1)));
    }
    assert_eq!(model.node(1), Some(&relu));
}

/// A `GatherND` at constant indices over `data` of a known shape becomes a
/// `Gather` over its indexed axes flattened (negative indices counted from
/// the end); the ones it cannot read that way are left alone: indices not
/// constant, `batch_dims` 1, a symbolic axis, an index out of range.
#[test]
fn onnx_fix_constant_gather_nd_reads_constant_grids_as_a_gather_and_leaves_the_rest() {
    use hfx::plugins::ir_model::{Constant, ConstantData, Dim, IrParts, ValueType};
    let runtime = runtime();
    let plugin = load(&runtime, "plugins/onnx/fix-constant-gather-nd");
    let gather_nd = |data: &str, indices: &str, output: &str, batch_dims: Option<i64>| Node {
        op_type: "GatherND".into(),
        domain: String::new(),
        inputs: vec![data.into(), indices.into()],
        outputs: vec![output.into()],
        attributes: batch_dims
            .map(|b| vec![("batch_dims".into(), Attribute::Int(b))])
            .unwrap_or_default(),
        function: None,
    };
    let grid = |values: Vec<i64>| Constant {
        elem_type: 7,
        dims: vec![2, 2, 2],
        data: ConstantData::Ints(values),
    };
    // Index pairs over `data`'s first two axes `[2, 4]`: (0, 1), (1, -1), (1, 0), (0, 3).
    let pairs = vec![0, 1, 1, -1, 1, 0, 0, 3];
    let mut out_of_range = pairs.clone();
    out_of_range[3] = 4;
    let typed = |dims: Vec<Dim>| ValueType { elem_type: 1, shape: Some(dims) };
    let fixed = || typed(vec![Dim::Fixed(2), Dim::Fixed(4), Dim::Fixed(5)]);
    let mut model = IrModel::new(IrParts {
        nodes: vec![
            gather_nd("data", "grid", "gathered", None),
            gather_nd("data", "runtime_grid", "from_input", None),
            gather_nd("data", "grid", "batched", Some(1)),
            gather_nd("dynamic", "grid", "symbolic", None),
            gather_nd("data", "out_of_range", "outside", None),
        ],
        inputs: vec!["data".into(), "dynamic".into(), "runtime_grid".into()],
        outputs: ["gathered", "from_input", "batched", "symbolic", "outside"]
            .map(String::from)
            .to_vec(),
        initializers: ["grid", "out_of_range"].map(String::from).into(),
        types: [
            ("data".to_string(), fixed()),
            (
                "dynamic".to_string(),
                typed(vec![Dim::Symbolic("batch".into()), Dim::Fixed(4), Dim::Fixed(5)]),
            ),
        ]
        .into(),
        constants: [
            ("grid".to_string(), grid(pairs)),
            ("out_of_range".to_string(), grid(out_of_range)),
        ]
        .into(),
    });
    let report = onnx_ir_fix::run(
        &runtime,
        &[of::<kind::OnnxIrFix>(&plugin)],
        &mut model,
        "onnx-ir-fixes",
        OnPluginError::Fail,
    )
    .unwrap();
    let counts = &report.plugins["onnx-fix-constant-gather-nd"];
    assert_eq!((counts.calls, counts.changed), (5, 1));
    let fixed = model.finish();
    let mut ops: Vec<&str> = fixed.nodes.iter().map(|n| n.op_type.as_str()).collect();
    ops.sort();
    assert_eq!(ops, ["Gather", "GatherND", "GatherND", "GatherND", "GatherND", "Reshape"]);
    let of_type = |op: &str| fixed.nodes.iter().find(|n| n.op_type == op).unwrap();
    let (reshape, gather) = (of_type("Reshape"), of_type("Gather"));
    assert_eq!(gather.outputs, ["gathered"], "the graph output keeps its name");
    assert_eq!(gather.inputs[0], reshape.outputs[0]);
    assert_eq!(gather.attribute("axis"), Some(&Attribute::Int(0)));
    let added: std::collections::HashMap<&str, &Constant> =
        fixed.added_initializers.iter().map(|(name, c)| (name.as_str(), c)).collect();
    let shape = added[reshape.inputs[1].as_str()];
    assert_eq!(shape.data, ConstantData::Ints(vec![8, 5]), "axes [2, 4] as one of 8, then 5");
    let positions = added[gather.inputs[1].as_str()];
    assert_eq!(positions.dims, [2, 2], "one position per index pair, in the grid's shape");
    assert_eq!(positions.data, ConstantData::Ints(vec![1, 7, 4, 3]));
}

#[test]
fn onnx_fix_alias_forwards_the_input() {
    let runtime = runtime();
    let plugin = load(&runtime, "plugins/onnx/fix-alias");
    let (mut graph, _) = alias_graph();
    let x = graph.subgraph(0).unwrap().inputs[0];
    fx_node_fix::run(
        &runtime,
        &[of::<kind::FxNodeFix>(&plugin)],
        &mut graph,
        "fx-node-fixes",
        OnPluginError::Fail,
    )
    .unwrap();
    assert_eq!(targets(&graph), ["aten.mul.Tensor"]);
    let mul = graph.nodes().next().unwrap();
    assert_eq!(graph.node(mul).unwrap().input("self"), Some(&Argument::Tensor(x)));
}

#[test]
fn onnx_fix_sort_stable_becomes_sort_default() {
    let runtime = runtime();
    let plugin = load(&runtime, "plugins/onnx/fix-sort-stable");
    let (mut graph, old) = sort_stable_graph();
    let old_outputs: Vec<_> = graph.node(old).unwrap().output_values().collect();
    let old_metas: Vec<_> =
        old_outputs.iter().map(|v| graph.value(*v).unwrap().meta.clone()).collect();
    fx_node_fix::run(
        &runtime,
        &[of::<kind::FxNodeFix>(&plugin)],
        &mut graph,
        "fx-node-fixes",
        OnPluginError::Fail,
    )
    .unwrap();
    assert_eq!(targets(&graph), ["aten.sort.default"]);
    let sort = graph.nodes().next().unwrap();
    let node = graph.node(sort).unwrap();
    let inputs: Vec<(&str, &Argument, bool)> =
        node.inputs.iter().map(|a| (a.name.as_str(), &a.value, a.keyword)).collect();
    let x = graph.subgraph(0).unwrap().inputs[0];
    assert_eq!(
        inputs,
        [
            ("self", &Argument::Tensor(x), false),
            ("dim", &Argument::Int(1), false),
            ("descending", &Argument::Bool(true), false)
        ]
    );
    // Both outputs moved over with their metadata (values f32, indices i64).
    let new_outputs: Vec<_> = node.output_values().collect();
    let new_metas: Vec<_> =
        new_outputs.iter().map(|v| graph.value(*v).unwrap().meta.clone()).collect();
    assert_eq!(new_metas, old_metas);
    let graph_outputs: Vec<_> =
        graph.subgraph(0).unwrap().outputs.iter().flat_map(Argument::values).collect();
    assert_eq!(graph_outputs, new_outputs);
}

#[test]
fn onnx_fix_assertion_erases_asserts_and_their_feeders() {
    let runtime = runtime();
    let plugin = load(&runtime, "plugins/onnx/fix-assertion");
    let mut graph = assertion_graph();
    let report = fx_node_fix::run(
        &runtime,
        &[of::<kind::FxNodeFix>(&plugin)],
        &mut graph,
        "fx-node-fixes",
        OnPluginError::Fail,
    )
    .unwrap();
    assert_eq!(report.plugins["onnx-fix-assertion"].changed, 3);
    // `ge` and `sym_size` only fed the asserts: DCE removed them.
    assert_eq!(report.dead_code_removed, 2);
    assert_eq!(targets(&graph), ["aten.add.Tensor"]);
}

#[test]
fn fixes_are_idempotent() {
    // Node fixes run again after decomposition: a second pass must change nothing.
    let runtime = runtime();
    let loaded = hfx::plugins::load_all(
        &runtime,
        &[plugin_dir("plugins/onnx/fix-alias").parent().unwrap().to_path_buf()],
    )
    .unwrap();
    let fixes = stages::select::<kind::FxNodeFix>(&loaded, Backend::Onnx);
    assert_eq!(fixes.len(), 9);
    for mut graph in [alias_graph().0, sort_stable_graph().0, assertion_graph()] {
        fx_node_fix::run(&runtime, &fixes, &mut graph, "fx-node-fixes", OnPluginError::Fail)
            .unwrap();
        let once = graph.fingerprint();
        let report =
            fx_node_fix::run(&runtime, &fixes, &mut graph, "fx-node-fixes", OnPluginError::Fail)
                .unwrap();
        assert_eq!(graph.fingerprint(), once);
        assert!(report.plugins.values().all(|c| c.changed == 0));
    }
}

#[test]
fn dead_comparison_with_constant_is_foldable_through_the_contract() {
    // replace-uses with a constant: the mechanism the dead-comparison fix needs.
    let mut graph = assertion_graph();
    let ge = graph.nodes().find(|n| graph.node(*n).unwrap().target == "_operator.ge").unwrap();
    let ok = first_output(&graph, ge);
    graph.replace_uses(ok, hfx::graph::Replacement::Bool(true)).unwrap();
    let assert = graph
        .nodes()
        .find(|n| graph.node(*n).unwrap().target == "aten._assert_scalar.default")
        .unwrap();
    assert_eq!(
        graph.node(assert).unwrap().input("self"),
        Some(&Argument::SymBool(Sym::Const(true)))
    );
    graph.erase(ge).unwrap();
}

#[test]
fn a_returned_error_names_plugin_stage_and_node_and_rolls_back() {
    let runtime = runtime();
    let plugin = load(&runtime, "tests/plugins/kind-translation");
    let (mut graph, [relu, _, _]) = relu_add_mul();
    // `x` has no ONNX name: the translation's `value-name` call fails, and the plugin returns that error.
    let mut builder = TranslationBuilder::new(20);
    builder.nodes.push(topk(Some(1), None));
    let error = Session::new(&runtime, of::<kind::OnnxTranslation>(&plugin), "onnx-translations")
        .translate(&mut graph, relu, &mut builder)
        .unwrap_err();
    assert_eq!(error.to_string(), "plugin `test-kind-translation` (onnx-translation) failed in stage `onnx-translations` at node `relu`: value 0 has no ONNX name yet (not translated)");
    assert_eq!(builder.nodes, [topk(Some(1), None)], "the builder is as before the call");
}

// ── What `hfx plugins new` writes, and the CLI around it ──

/// `hfx ARGS` of the checkout's binary in `dir`, with the tests' component cache.
fn hfx_in(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_hfx"))
        .args(args)
        .current_dir(dir)
        .env("HFX_CACHE_DIR", root().join("target/hfx-test-cache"))
        .output()
        .unwrap()
}

/// Each kind's scaffolded case passes against the kind's template compiled
/// as it is (the test plugins that `include!` `sdk/templates/*.rs`; the
/// IR-fix template is the shipped TopK fix, its case that fix's own): the
/// case beside the built component, in `hfx plugins verify` (structurally;
/// `install::` runs them numerically from crates the installed hfx builds).
#[test]
fn every_scaffold_kind_ships_a_case_its_template_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let compiled = [
        ("patch", "tests/plugins/kind-patch"),
        ("fx-program-fix", "tests/plugins/kind-program-fix"),
        ("onnx-translation", "tests/plugins/kind-translation"),
        ("onnx-ir-fix", "plugins/onnx/fix-topk-sorted"),
    ];
    // The IR fix's case is translated first: the shipped translations beside the cases.
    let shipped = root().join("plugins/onnx");
    let mut folders = vec![shipped.display().to_string()];
    for (kind, template) in compiled {
        let scaffold = tmp.path().join(format!("scaffold-{kind}"));
        let out = hfx_in(
            tmp.path(),
            &["plugins", "new", "my-plugin", "--kind", kind, "--dir", scaffold.to_str().unwrap()],
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let case = std::fs::read_to_string(scaffold.join("selftest/basic.json"))
            .unwrap_or_else(|e| panic!("the {kind} scaffold ships no self-test case: {e}"));
        let template = root().join(template);
        if template.starts_with(&shipped) {
            let own = std::fs::read_to_string(template.join("selftest/topk.json")).unwrap();
            assert_eq!(case, own, "the {kind} scaffold's case is not its template's own");
            continue;
        }
        let plugin = tmp.path().join(kind);
        std::fs::create_dir_all(plugin.join("selftest")).unwrap();
        for file in ["plugin.toml", "plugin.wasm"] {
            std::fs::copy(template.join(file), plugin.join(file)).unwrap();
        }
        std::fs::write(plugin.join("selftest/basic.json"), case).unwrap();
        folders.push(plugin.display().to_string());
    }
    let mut args = vec!["plugins", "verify"];
    for folder in &folders {
        args.extend(["--plugins", folder.as_str()]);
    }
    let out = hfx_in(tmp.path(), &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    for name in [
        "test-kind-patch",
        "test-kind-program-fix",
        "test-kind-translation",
        "onnx-fix-topk-sorted",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(name) && l.contains("self-tests: 1/1 passed")),
            "{name}: {stdout}"
        );
    }
}

/// A name that is not a crate name says what is wrong with it and which
/// name would do, in one line, before anything is written.
#[test]
fn a_wrong_plugin_name_says_what_is_wrong_and_suggests_one() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, problem, suggestion) in [
        ("MyFix", "has uppercase letters", "`my-fix`"),
        ("my_fix", "has `_`", "`my-fix`"),
        ("HTTPFix2", "has uppercase letters", "`httpfix2`"),
        ("2fix", "does not start with a letter", "`fix`"),
    ] {
        let out = hfx_in(tmp.path(), &["plugins", "new", name, "--kind", "fx-node-fix"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && stderr.contains(&format!("plugin name `{name}` {problem}"))
                && stderr.contains(&format!("try {suggestion}"))
                && stderr.trim().lines().count() == 1,
            "{name}: {stderr}"
        );
    }
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "nothing is written");
}

/// Outside the repository's root, a new plugin is a folder of its name here.
#[test]
fn a_new_plugin_outside_the_repository_is_created_here() {
    let tmp = tempfile::tempdir().unwrap();
    let out = hfx_in(tmp.path(), &["plugins", "new", "my-fix", "--kind", "fx-node-fix"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(tmp.path().join("my-fix/Cargo.toml").is_file());
    assert!(tmp.path().join("my-fix/plugin.toml").is_file());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("hfx plugins build my-fix"), "{said}");
}

/// `hfx plugins list | head`: a reader that has gone ends hfx quietly and
/// successfully, with no panic message.
#[test]
fn a_closed_stdout_ends_hfx_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    // Closed before hfx writes: its first line meets a broken pipe.
    drop(reader);
    let plugins = root().join("tests/plugins/kind-node-fix");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hfx"))
        .args(["plugins", "list", "--plugins", plugins.to_str().unwrap()])
        .current_dir(tmp.path())
        .env("HFX_CACHE_DIR", root().join("target/hfx-test-cache"))
        .stdout(writer)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.is_empty(), "{:?}: {stderr}", out.status);
}

/// Without the guest toolchain, `hfx plugins build` says in one line which
/// part is missing and the command that installs it, before compiling anything.
#[test]
fn building_a_plugin_without_the_guest_toolchain_names_what_to_install() {
    let tmp = tempfile::tempdir().unwrap();
    let plugin = root().join("tests/plugins/kind-node-fix");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hfx"))
        .args(["plugins", "build", plugin.to_str().unwrap()])
        .current_dir(tmp.path())
        .env("HFX_GUEST_TOOLCHAIN", tmp.path().join("no-toolchain"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("Debian's rustc-web")
            && stderr.contains("apt-get install --no-install-recommends rustc-web cargo-web rust-web-src rust-web-llvm lld-22")
            && stderr.trim().lines().count() == 1,
        "{stderr}"
    );
}
