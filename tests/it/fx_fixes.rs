//! The ported ONNX FX node fixes, each on a real torch.export trace of a small
//! module that holds its pattern: the pattern is gone from the fixed program,
//! and the fixed program still matches eager within atol/rtol 1e-4.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;
use hfx::graph::pt2::{schema, Pt2};

fn harness(args: &[&str]) {
    run_python("fx_patterns.py", args)
}

fn patterns() -> PathBuf {
    static ONCE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let dir = root().join("target/fx-patterns");
        harness(&["export-all", dir.to_str().unwrap()]);
        dir
    })
    .clone()
}

/// Runs `plugin` (a folder under plugins/onnx) on pattern `name`; returns the fixed program.
fn fix(plugin: &str, name: &str, out: &Path) -> schema::ExportedProgram {
    let input = patterns().join(format!("{name}.pt2"));
    let fixed = out.join(format!("{name}.pt2"));
    let result = Command::new(env!("CARGO_BIN_EXE_hfx"))
        .args(["run", "--backend", "onnx", "--plugins"])
        .arg(plugin_dir(plugin))
        .arg(&input)
        .arg("-o")
        .arg(&fixed)
        .env("HFX_CACHE_DIR", root().join("target/hfx-test-cache"))
        .output()
        .unwrap();
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    harness(&["compare", name, fixed.to_str().unwrap()]);
    Pt2::open(&fixed).unwrap().programs.remove("model").unwrap()
}

fn nodes<'a>(p: &'a schema::ExportedProgram, target: &'a str) -> impl Iterator<Item = &'a schema::Node> + 'a {
    p.graph_module.graph.nodes.iter().filter(move |n| n.target == target)
}

fn input<'a>(node: &'a schema::Node, name: &str) -> &'a schema::Argument {
    &node.inputs.iter().find(|a| a.name == name).unwrap().arg
}

#[test]
fn slice_implicit_start_is_spelled_out() {
    let out = tempfile::tempdir().unwrap();
    let original = Pt2::open(&patterns().join("slice_implicit_start.pt2")).unwrap();
    let slice = nodes(&original.programs["model"], "torch.ops.aten.slice.Tensor").next().unwrap();
    assert_eq!(input(slice, "start"), &schema::Argument::AsNone(true), "the trace holds the pattern");
    let fixed = fix("plugins/onnx/fix-slice-implicit-start", "slice_implicit_start", out.path());
    let slices: Vec<_> = nodes(&fixed, "torch.ops.aten.slice.Tensor").collect();
    assert_eq!(slices.len(), 1);
    assert_eq!(input(slices[0], "start"), &schema::Argument::AsInt(0));
}

#[test]
fn integral_tensor_is_promoted_before_a_float_scalar() {
    let out = tempfile::tempdir().unwrap();
    let fixed = fix("plugins/onnx/fix-integral-tensor-float-scalar", "integral_tensor_float_scalar", out.path());
    let graph = &fixed.graph_module.graph;
    let casts: Vec<_> = nodes(&fixed, "torch.ops.aten._to_copy.default").collect();
    assert_eq!(casts.len(), 2, "one cast before rsub, one before mul");
    for op in ["torch.ops.aten.rsub.Scalar", "torch.ops.aten.mul.Tensor"] {
        let node = nodes(&fixed, op).next().unwrap();
        let schema::Argument::AsTensor(t) = input(node, "self") else { panic!("{op} self is not a tensor") };
        assert_eq!(graph.tensor_values[&t.name].dtype, 7, "{op} now reads a float32 tensor");
    }
}

fn count(p: &schema::ExportedProgram, target: &str) -> usize {
    nodes(p, target).count()
}

#[test]
fn noop_squeeze_is_dropped() {
    let out = tempfile::tempdir().unwrap();
    let original = Pt2::open(&patterns().join("noop_squeeze.pt2")).unwrap();
    assert_eq!(count(&original.programs["model"], "torch.ops.aten.squeeze.dim"), 1, "the trace holds the pattern");
    let fixed = fix("plugins/onnx/fix-noop-squeeze", "noop_squeeze", out.path());
    assert_eq!(count(&fixed, "torch.ops.aten.squeeze.dim"), 0);
}

#[test]
fn scatter_reduce_is_lowered_for_every_reduction() {
    let out = tempfile::tempdir().unwrap();
    let original = Pt2::open(&patterns().join("scatter_reduce.pt2")).unwrap();
    assert_eq!(count(&original.programs["model"], "torch.ops.aten.scatter_reduce.two"), 5, "the trace holds the pattern");
    let fixed = fix("plugins/onnx/fix-scatter-reduce", "scatter_reduce", out.path());
    assert_eq!(count(&fixed, "torch.ops.aten.scatter_reduce.two"), 0);
    // sum+self → 1 scatter_add; sum, mean → 2 each (values and counts).
    assert_eq!(count(&fixed, "torch.ops.aten.scatter_add.default"), 5);
    assert_eq!(count(&fixed, "torch.ops.aten.amax.default") + count(&fixed, "torch.ops.aten.amin.default"), 2);
}

#[test]
fn fill_diagonal_inplace_becomes_where() {
    let out = tempfile::tempdir().unwrap();
    let fixed = fix("plugins/onnx/fix-fill-diagonal-inplace", "fill_diagonal", out.path());
    assert_eq!(count(&fixed, "torch.ops.aten.fill_diagonal_.default"), 0);
    assert_eq!(count(&fixed, "torch.ops.aten.where.self"), 1);
    assert_eq!(count(&fixed, "torch.ops.aten.eye.m"), 1);
}

#[test]
fn index_put_on_the_last_dim_becomes_a_mask_and_where() {
    let out = tempfile::tempdir().unwrap();
    let original = Pt2::open(&patterns().join("index_put_last_dim.pt2")).unwrap();
    assert_eq!(count(&original.programs["model"], "torch.ops.aten.index_put_.default"), 1, "the trace holds the pattern");
    let fixed = fix("plugins/onnx/fix-index-put-last-dim", "index_put_last_dim", out.path());
    assert_eq!(count(&fixed, "torch.ops.aten.index_put_.default"), 0);
    assert_eq!(count(&fixed, "torch.ops.aten.where.self"), 1);
    assert_eq!(count(&fixed, "torch.ops.aten.any.dim"), 1);
}

#[test]
fn comparisons_the_ranges_decide_become_constants() {
    let out = tempfile::tempdir().unwrap();
    let original = Pt2::open(&patterns().join("dead_comparison.pt2")).unwrap();
    let comparisons = |p: &schema::ExportedProgram| p.graph_module.graph.nodes.iter().filter(|n| n.target.starts_with("_operator.")).count();
    assert_eq!(comparisons(&original.programs["model"]), 3, "the trace holds the pattern");
    let fixed = fix("plugins/onnx/fix-dead-comparison", "dead_comparison", out.path());
    assert_eq!(comparisons(&fixed), 0);
    // The asserts stay (that is fix-assertion's job) and now read `True`.
    for assert in nodes(&fixed, "torch.ops.aten._assert_scalar.default") {
        assert_eq!(input(assert, "self"), &schema::Argument::AsSymBool(schema::SymBoolArgument::AsBool(true)));
    }
}

#[test]
fn stable_sort_becomes_the_default_overload() {
    let out = tempfile::tempdir().unwrap();
    let original = Pt2::open(&patterns().join("sort_stable.pt2")).unwrap();
    assert_eq!(count(&original.programs["model"], "torch.ops.aten.sort.stable"), 1, "the trace holds the pattern");
    let fixed = fix("plugins/onnx/fix-sort-stable", "sort_stable", out.path());
    assert_eq!(count(&fixed, "torch.ops.aten.sort.stable"), 0);
    let sort = nodes(&fixed, "torch.ops.aten.sort.default").next().unwrap();
    assert_eq!(input(sort, "descending"), &schema::Argument::AsBool(true));
}
