//! The ported ONNX FX node fixes, each on a real torch.export trace of a small
//! module that holds its pattern: the pattern is gone from the fixed program
//! (or its replacement is there), and the fixed program still matches eager
//! within atol/rtol 1e-4. The negative control of each: the same `hfx run`
//! without the plugin writes a program the effect assertion rejects.

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

/// Runs hfx on pattern `name` with the `plugins` folders (none: nothing runs on
/// the program, which is written as read); returns the written program.
fn run(plugins: &[PathBuf], name: &str, out: &Path) -> schema::ExportedProgram {
    let input = patterns().join(format!("{name}.pt2"));
    let written = out.join(format!("{name}.pt2"));
    let mut command = Command::new(env!("CARGO_BIN_EXE_hfx"));
    command.args(["run", "--backend", "onnx"]);
    for plugin in plugins {
        command.arg("--plugins").arg(plugin);
    }
    let result = command
        .arg(&input)
        .arg("-o")
        .arg(&written)
        .env("HFX_CACHE_DIR", root().join("target/hfx-test-cache"))
        .output()
        .unwrap();
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    Pt2::open(&written).unwrap().programs.remove("model").unwrap()
}

/// What a fix's test proves about a program: the fix's effect, or what is missing.
type Effect = fn(&schema::ExportedProgram) -> Result<(), String>;

/// Runs `plugin` (a folder under plugins/onnx) on pattern `name`: `effect` holds
/// on the fixed program, which matches eager. The negative control: the same
/// run without the plugin writes a program `effect` rejects, with an error
/// containing `reason`. Returns the fixed program.
fn fix(plugin: &str, name: &str, effect: Effect, reason: &str) -> schema::ExportedProgram {
    let out = tempfile::tempdir().unwrap();
    let fixed = run(&[plugin_dir(plugin)], name, out.path());
    if let Err(e) = effect(&fixed) {
        panic!("{name}: with {plugin}: {e}");
    }
    harness(&["compare", name, out.path().join(format!("{name}.pt2")).to_str().unwrap()]);
    let control = tempfile::tempdir().unwrap();
    match effect(&run(&[], name, control.path())) {
        Ok(()) => {
            panic!("{name}: without {plugin} the effect is there too: the test proves nothing")
        }
        Err(e) => assert!(
            e.contains(reason),
            "{name}: without {plugin} the effect fails, but not for `{reason}`: {e}"
        ),
    }
    fixed
}

/// `Err(what)` unless `ok`.
fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

fn nodes<'a>(
    p: &'a schema::ExportedProgram,
    target: &'a str,
) -> impl Iterator<Item = &'a schema::Node> + 'a {
    p.graph_module.graph.nodes.iter().filter(move |n| n.target == target)
}

fn input<'a>(node: &'a schema::Node, name: &str) -> &'a schema::Argument {
    &node.inputs.iter().find(|a| a.name == name).unwrap().arg
}

fn count(p: &schema::ExportedProgram, target: &str) -> usize {
    nodes(p, target).count()
}

/// `count(p, target) == n`, or an error naming the op and both counts.
fn exactly(p: &schema::ExportedProgram, target: &str, n: usize) -> Result<(), String> {
    let found = count(p, target);
    ensure(found == n, || format!("{found} x {target}, expected {n}"))
}

#[test]
fn slice_implicit_start_is_spelled_out() {
    let original = Pt2::open(&patterns().join("slice_implicit_start.pt2")).unwrap();
    let slice = nodes(&original.programs["model"], "torch.ops.aten.slice.Tensor").next().unwrap();
    assert_eq!(
        input(slice, "start"),
        &schema::Argument::AsNone(true),
        "the trace holds the pattern"
    );
    fix(
        "plugins/onnx/fix-slice-implicit-start",
        "slice_implicit_start",
        |p| {
            exactly(p, "torch.ops.aten.slice.Tensor", 1)?;
            let start = input(nodes(p, "torch.ops.aten.slice.Tensor").next().unwrap(), "start");
            ensure(start == &schema::Argument::AsInt(0), || format!("slice start is {start:?}"))
        },
        "slice start is AsNone",
    );
}

#[test]
fn integral_tensor_is_promoted_before_a_float_scalar() {
    fix(
        "plugins/onnx/fix-integral-tensor-float-scalar",
        "integral_tensor_float_scalar",
        |p| {
            exactly(p, "torch.ops.aten._to_copy.default", 2)
                .map_err(|e| format!("{e} (one cast before rsub, one before mul)"))?;
            for op in ["torch.ops.aten.rsub.Scalar", "torch.ops.aten.mul.Tensor"] {
                let node = nodes(p, op).next().ok_or_else(|| format!("no {op}"))?;
                let schema::Argument::AsTensor(t) = input(node, "self") else {
                    return Err(format!("{op} self is not a tensor"));
                };
                let dtype = p.graph_module.graph.tensor_values[&t.name].dtype;
                ensure(dtype == 7, || format!("{op} reads dtype {dtype}, not float32"))?;
            }
            Ok(())
        },
        "_to_copy",
    );
}

#[test]
fn noop_squeeze_is_dropped() {
    let original = Pt2::open(&patterns().join("noop_squeeze.pt2")).unwrap();
    assert_eq!(
        count(&original.programs["model"], "torch.ops.aten.squeeze.dim"),
        1,
        "the trace holds the pattern"
    );
    fix(
        "plugins/onnx/fix-noop-squeeze",
        "noop_squeeze",
        |p| exactly(p, "torch.ops.aten.squeeze.dim", 0),
        "squeeze.dim",
    );
}

#[test]
fn scatter_reduce_is_lowered_for_every_reduction() {
    let original = Pt2::open(&patterns().join("scatter_reduce.pt2")).unwrap();
    assert_eq!(
        count(&original.programs["model"], "torch.ops.aten.scatter_reduce.two"),
        5,
        "the trace holds the pattern"
    );
    fix(
        "plugins/onnx/fix-scatter-reduce",
        "scatter_reduce",
        |p| {
            exactly(p, "torch.ops.aten.scatter_reduce.two", 0)?;
            // sum+self → 1 scatter_add; sum, mean → 2 each (values and counts).
            exactly(p, "torch.ops.aten.scatter_add.default", 5)?;
            let extrema =
                count(p, "torch.ops.aten.amax.default") + count(p, "torch.ops.aten.amin.default");
            ensure(extrema == 2, || format!("{extrema} amax/amin, expected 2"))
        },
        "scatter_reduce.two",
    );
}

#[test]
fn index_put_on_the_last_dim_becomes_a_mask_and_where() {
    let original = Pt2::open(&patterns().join("index_put_last_dim.pt2")).unwrap();
    assert_eq!(
        count(&original.programs["model"], "torch.ops.aten.index_put.default"),
        1,
        "the trace holds the pattern"
    );
    fix(
        "plugins/onnx/fix-index-put-last-dim",
        "index_put_last_dim",
        |p| {
            exactly(p, "torch.ops.aten.index_put.default", 0)?;
            exactly(p, "torch.ops.aten.where.self", 1)?;
            exactly(p, "torch.ops.aten.any.dim", 1)
        },
        "index_put",
    );
}

#[test]
fn comparisons_the_ranges_decide_become_constants() {
    let comparisons = |p: &schema::ExportedProgram| {
        p.graph_module.graph.nodes.iter().filter(|n| n.target.starts_with("_operator.")).count()
    };
    let original = Pt2::open(&patterns().join("dead_comparison.pt2")).unwrap();
    assert_eq!(comparisons(&original.programs["model"]), 3, "the trace holds the pattern");
    fix(
        "plugins/onnx/fix-dead-comparison",
        "dead_comparison",
        |p| {
            let left = p
                .graph_module
                .graph
                .nodes
                .iter()
                .filter(|n| n.target.starts_with("_operator."))
                .count();
            ensure(left == 0, || format!("{left} comparisons left"))?;
            // The asserts stay (that is fix-assertion's job) and now read `True`.
            for assert in nodes(p, "torch.ops.aten._assert_scalar.default") {
                let read = input(assert, "self");
                ensure(
                    read == &schema::Argument::AsSymBool(schema::SymBoolArgument::AsBool(true)),
                    || format!("an assert reads {read:?}"),
                )?;
            }
            Ok(())
        },
        "comparisons left",
    );
}

#[test]
fn stable_sort_becomes_the_default_overload() {
    let original = Pt2::open(&patterns().join("sort_stable.pt2")).unwrap();
    assert_eq!(
        count(&original.programs["model"], "torch.ops.aten.sort.stable"),
        1,
        "the trace holds the pattern"
    );
    fix(
        "plugins/onnx/fix-sort-stable",
        "sort_stable",
        |p| {
            exactly(p, "torch.ops.aten.sort.stable", 0)?;
            let sort = nodes(p, "torch.ops.aten.sort.default").next().ok_or("no sort.default")?;
            let descending = input(sort, "descending");
            ensure(descending == &schema::Argument::AsBool(true), || {
                format!("sort.default descending is {descending:?}")
            })
        },
        "sort.stable",
    );
}

/// Every class of in-place write (`fx_patterns.WritesInPlace`: `copy_` into
/// slices of a new tensor, slice assignment, `index_put_`, `masked_fill_`,
/// `add_` through a view, `fill_diagonal_`, a buffer's and a returned
/// input's `copy_`), traced by hfx for ONNX: the worker functionalizes the
/// program, so no FX fix is needed, and the ONNX model matches eager, whose
/// outputs each write changes (the updated input among them). The buffer's
/// and the input's new values are outputs of their own.
#[test]
fn every_in_place_write_is_functionalized_and_matches_eager() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("writes.onnx");
    let plugins = root().join("plugins/onnx");
    let args = [
        "run",
        "--backend",
        "onnx",
        "--model-fn",
        "python:fx_patterns:writes_in_place",
        "--static",
        "--verify",
        "--plugins",
        plugins.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    let result = hfx_with_python(dir.path(), &args);
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(result.status.success(), "{}{stdout}", String::from_utf8_lossy(&result.stderr));
    for op in ["copy_", "index_put_", "masked_fill_", "add_", "fill_diagonal_"] {
        assert!(stdout.contains(&format!("decomposed aten.{op}.")), "{op}: {stdout}");
    }
    use prost::Message;
    let model = std::fs::read(&out).unwrap();
    let graph = hfx::onnx::proto::ModelProto::decode(model.as_slice()).unwrap().graph.unwrap();
    let outputs: Vec<&str> = graph.output.iter().filter_map(|o| o.name.as_deref()).collect();
    assert_eq!(outputs[..2], ["updated.last", "updated.state"], "{outputs:?}");
}
