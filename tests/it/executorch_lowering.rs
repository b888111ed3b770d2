//! The reference's patches of ExecuTorch's own lowering (transformers 5.24,
//! `exporter_executorch.py`, stage 3: ExecuTorch's passes, verifier and
//! XNNPACK serializer), answered in the worker's XNNPACK lowering
//! (`host/worker/hfx_worker/lower.py`) or not needed, each on its pattern.
//!
//! Each pattern is a small module of
//! `tests/python/executorch_lowering_patterns.py`, the construction the
//! reference found in a model, made minimal. A test exports it with `hfx run
//! --backend executorch --delegate xnnpack --verify`: the `.pte` runs in the
//! ExecuTorch runtime and matches eager (atol/rtol 1e-3; the run writes
//! nothing otherwise). The negative control of an answer in the worker is
//! ExecuTorch's own lowering of the same pattern (the script's `unanswered`),
//! which fails where the reference says ExecuTorch fails. hfx's portable
//! program runs none of this ExecuTorch code: its emitter is hfx's own.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::*;
use hfx::graph::pt2::Pt2;

/// Bounds the sizes of a `--dynamic` export, which ExecuTorch plans memory for.
const RANGES: &str = "plugins/executorch/fix-range-constraints";

/// One `hfx run` to a `.pte`.
struct Export {
    pte: PathBuf,
    output: Output,
}

impl Export {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
}

/// `hfx run --backend executorch --delegate xnnpack --verify` of `model` (a
/// `--model-fn` or a trace) to `DIR/NAME.pte` with the plugin folders
/// `plugins` and no others, `--dynamic` or `--static`.
fn export(dir: &Path, name: &str, model: &str, dynamic: bool, plugins: &[&str]) -> Export {
    let pte = dir.join(format!("{name}.pte"));
    let mut args: Vec<String> =
        ["run", "--backend", "executorch", "--delegate", "xnnpack", "--verify"]
            .map(String::from)
            .to_vec();
    if model.starts_with("python:") {
        args.extend(["--model-fn".into(), model.into()]);
        args.push(if dynamic { "--dynamic" } else { "--static" }.into());
    } else {
        args.push(model.into());
    }
    args.extend(["-o".into(), pte.display().to_string()]);
    for plugin in plugins {
        args.extend(["--plugins".into(), plugin_dir(plugin).display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Export { output: hfx_with_python(dir, &args), pte }
}

fn pattern(name: &str) -> String {
    format!("python:executorch_lowering_patterns:{name}")
}

/// The run succeeded and its `.pte` matched eager in the ExecuTorch runtime;
/// its stdout.
fn verified(export: &Export, what: &str) -> String {
    let stdout = export.stdout();
    assert!(
        export.output.status.success(),
        "{what}: {}{stdout}",
        String::from_utf8_lossy(&export.output.stderr)
    );
    assert!(stdout.contains("verify inputs") && !stdout.contains("MISMATCH"), "{what}: {stdout}");
    assert_eq!(&std::fs::read(&export.pte).unwrap()[4..8], b"ET12", "{what}: not a .pte");
    stdout
}

/// `(delegated nodes, portable kernel calls)` from the lowering's summary
/// (`stage lower ... delegated 2 node(s), 0 portable kernel call(s)`).
fn lowered(stdout: &str) -> (u64, u64) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("stage lower"))
        .unwrap_or_else(|| panic!("no lowering line:\n{stdout}"));
    let count = |after: &str, before: &str| -> u64 {
        line.split(after)
            .nth(1)
            .and_then(|r| r.split(before).next())
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    (count("delegated ", " node(s)"), count("node(s), ", " portable kernel call(s)"))
}

/// The negative control: ExecuTorch's own lowering of the pattern, without
/// the worker's answer, fails with `expected`.
fn executorch_alone_fails(name: &str, dynamic: bool, expected: &str) {
    let mut args = vec!["unanswered", name];
    if dynamic {
        args.push("--dynamic");
    }
    args.push(expected);
    let said =
        try_python("executorch_lowering_patterns.py", &args).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{}", said.trim());
}

/// A value returned with its copy: XNNPACK's clone removal folded the copy
/// onto the value and refused the partition ("Output node ... is already in
/// the inputs"); the worker keeps clones that feed the partition's outputs,
/// so the whole program is delegated and matches eager.
#[test]
fn a_value_returned_with_its_copy_lowers_to_xnnpack() {
    let dir = tempfile::tempdir().unwrap();
    let run = export(dir.path(), "copy", &pattern("returned_with_its_copy"), false, &[]);
    let stdout = verified(&run, "a value and its copy");
    assert_eq!(lowered(&stdout), (2, 0), "linear and copy delegated, nothing portable: {stdout}");
    assert_no_scratch_left(dir.path());
}

/// The negative control of the kept copy.
#[test]
#[ignore = "full tier: the negative control (a_value_returned_with_its_copy_lowers_to_xnnpack checks the answer)"]
fn executorch_alone_refuses_a_value_returned_with_its_copy() {
    executorch_alone_fails("returned_with_its_copy", false, "is already in the inputs");
}

/// PReLU on 3-D activations stays on the portable kernels (XNNPACK's
/// channels-last pass takes 4-D inputs only), PReLU on a convolution's 4-D
/// output stays in XNNPACK.
#[test]
#[ignore = "full tier: another partitioner config of the worker's (a_value_returned_with_its_copy_lowers_to_xnnpack covers the lowering)"]
fn prelu_below_four_dimensions_stays_out_of_xnnpack() {
    let dir = tempfile::tempdir().unwrap();
    let run = export(dir.path(), "prelu", &pattern("prelu_of_every_rank"), false, &[]);
    let stdout = verified(&run, "prelu");
    let (delegated, portable) = lowered(&stdout);
    assert!(delegated >= 4 && portable > 0, "{stdout}");
    assert_no_scratch_left(dir.path());
    executorch_alone_fails("prelu_of_every_rank", false, "ChannelsLastTaggedReshapePass");
}

/// A pad with `-inf` is delegated whole: XNNPACK's serializer writes the
/// value as JSON `-Infinity`, which flatc refuses; the worker hands flatc
/// `-inf`, the same float.
#[test]
#[ignore = "full tier: another lowering answer of the worker's (a_value_returned_with_its_copy_lowers_to_xnnpack covers the lowering)"]
fn a_pad_with_negative_infinity_is_serialized_for_xnnpack() {
    let dir = tempfile::tempdir().unwrap();
    let run = export(dir.path(), "pad", &pattern("padded_with_negative_infinity"), false, &[]);
    let stdout = verified(&run, "-inf pad");
    assert_eq!(lowered(&stdout).1, 0, "linear, pad and softmax delegated: {stdout}");
    assert_no_scratch_left(dir.path());
    executorch_alone_fails("padded_with_negative_infinity", false, "flatc");
}

/// A slice to a data-dependent length, dynamic: the trace the lowering gets
/// keeps torch.export's runtime asserts (`aten._assert_scalar`), which
/// ExecuTorch's own passes remove, so nothing drops them first; the result's
/// strides (`8*u0`, `8`, `1`) cannot be compared by guarding, which stopped
/// ExecuTorch's `dim_order_from_stride`; the worker orders such dims as laid
/// out.
#[test]
#[ignore = "full tier: another lowering answer of the worker's (a_value_returned_with_its_copy_lowers_to_xnnpack covers the lowering)"]
fn a_data_dependent_length_with_its_runtime_asserts_lowers_to_xnnpack() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("length.pt2");
    let model = pattern("data_dependent_length");
    let out = hfx_with_python(
        dir.path(),
        &[
            "run",
            "--backend",
            "dynamo",
            "--model-fn",
            &model,
            "--dynamic",
            "-o",
            trace.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "trace: {}", String::from_utf8_lossy(&out.stderr));
    let program = &Pt2::open(&trace).unwrap().programs["model"];
    let asserts = program
        .graph_module
        .graph
        .nodes
        .iter()
        .filter(|n| n.target == "torch.ops.aten._assert_scalar.default")
        .count();
    assert!(asserts > 0, "the trace keeps its runtime asserts");

    let run = export(dir.path(), "length", trace.to_str().unwrap(), true, &[RANGES]);
    verified(&run, "data-dependent length");
    assert_no_scratch_left(dir.path());
    executorch_alone_fails("data_dependent_length", true, "GuardOnDataDependentSymNode");
}

/// `torch.sym_ite`, `sym_not`, `sym_int` and `sym_float` on dynamic sizes
/// pass ExecuTorch's edge verifier in the worker's lowering and become
/// ExecuTorch's sym ops in `to_executorch`; ExecuTorch alone refuses them
/// (`assert op.__name__ in ("alloc",)`).
#[test]
#[ignore = "full tier: another lowering answer of the worker's (a_value_returned_with_its_copy_lowers_to_xnnpack covers the lowering)"]
fn python_sym_functions_with_executorch_counterparts_pass_the_verifier() {
    let dir = tempfile::tempdir().unwrap();
    let run = export(dir.path(), "sym", &pattern("sym_functions"), true, &[RANGES]);
    verified(&run, "sym functions");
    assert_no_scratch_left(dir.path());
    executorch_alone_fails("sym_functions", true, "AssertionError");
}

/// A position embedding reshaped to the input's grid, dynamic: a view with
/// dynamic sizes of a static parameter, which ExecuTorch's view spec refuses
/// to share memory with ("_ViewSpec is incompatible with its base"). The
/// worker's lowering leaves such a view a copy (`view_copy`), and so does the
/// portable emitter, whose runtime re-points no view at constant data; both
/// programs match eager.
#[test]
#[ignore = "full tier: another lowering answer of the worker's (a_value_returned_with_its_copy_lowers_to_xnnpack covers the lowering)"]
fn a_dynamic_view_of_a_parameter_stays_a_copy_in_both_programs() {
    let dir = tempfile::tempdir().unwrap();
    let model = pattern("positions_on_the_input_grid");
    let run = export(dir.path(), "grid", &model, true, &[RANGES]);
    verified(&run, "positions on the grid (xnnpack)");
    let pte = dir.path().join("portable.pte");
    let out = hfx_with_python(
        dir.path(),
        &[
            "run",
            "--backend",
            "executorch",
            "--model-fn",
            &model,
            "--dynamic",
            "--verify",
            "-o",
            pte.to_str().unwrap(),
            "--plugins",
            plugin_dir(RANGES).to_str().unwrap(),
        ],
    );
    let portable = Export { output: out, pte };
    verified(&portable, "positions on the grid (portable)");
    assert_no_scratch_left(dir.path());
    executorch_alone_fails(
        "positions_on_the_input_grid",
        true,
        "_ViewSpec is incompatible with its base",
    );
}

/// A rotary embedding on complex values: plugins/onnx/fix-complex-pairs
/// makes them real pairs, and both programs match eager. Without it the
/// portable program cannot be emitted (`polar` has no kernel) and ExecuTorch's
/// edge verifier refuses the complex product in the XNNPACK lowering.
#[test]
#[ignore = "full tier: the plugin on a real trace through ExecuTorch (its self-test checks it in selftests::every_shipped_plugin_passes_its_self_tests)"]
fn a_complex_rotation_becomes_real_pairs_in_both_programs() {
    const PAIRS: &str = "plugins/onnx/fix-complex-pairs";
    let dir = tempfile::tempdir().unwrap();
    let model = pattern("complex_rotation");
    let portable = |name: &str, plugins: &[&str]| {
        let pte = dir.path().join(format!("{name}.pte"));
        let mut args: Vec<String> =
            ["run", "--backend", "executorch", "--model-fn", &model, "--static", "--verify", "-o"]
                .map(String::from)
                .to_vec();
        args.push(pte.display().to_string());
        for plugin in plugins {
            args.extend(["--plugins".into(), plugin_dir(plugin).display().to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Export { output: hfx_with_python(dir.path(), &args), pte }
    };
    verified(&export(dir.path(), "xnnpack", &model, false, &[PAIRS]), "pairs (xnnpack)");
    verified(&portable("portable", &[PAIRS]), "pairs (portable)");

    let without = export(dir.path(), "xnnpack-without", &model, false, &[]);
    let stderr = String::from_utf8_lossy(&without.output.stderr).into_owned();
    assert!(!without.output.status.success() && stderr.contains("complex64"), "{stderr}");
    assert!(stderr.contains("mismatched dtypes"), "{stderr}");
    let without = portable("portable-without", &[]);
    let stderr = String::from_utf8_lossy(&without.output.stderr).into_owned();
    assert!(
        !without.output.status.success()
            && stderr
                .contains("`aten.polar.default` has no kernel in ExecuTorch's portable runtime"),
        "{stderr}"
    );
    assert!(!without.pte.exists());
    assert_no_scratch_left(dir.path());
}

/// A concatenation of data-dependent selections lowers and matches eager:
/// ExecuTorch 1.4.1's `PruneEmptyTensorsPass` already keeps an input whose
/// emptiness it cannot decide (`guard_or_true`), what the reference's patch
/// of it does.
#[test]
#[ignore = "full tier: a registration hfx needs no answer for, on its pattern"]
fn a_cat_of_data_dependent_selections_lowers_to_xnnpack() {
    let dir = tempfile::tempdir().unwrap();
    let run = export(dir.path(), "cat", &pattern("cat_of_selections"), true, &[RANGES]);
    verified(&run, "cat of selections");
    assert_no_scratch_left(dir.path());
}

/// transformers' vmap mask expansion (`_vmap_expansion_sdpa`), called as the
/// masks of models with custom mask functions call it, exports in both
/// ExecuTorch programs and matches eager without the reference's patch:
/// torch.export records the expansion as plain ops between vmap's markers
/// (`_vmap_increment_nesting`, `_add_batch_dim`, ...), and the decomposition
/// both programs' lowerings run (`run_decompositions`) traces the markers
/// away.
#[test]
#[ignore = "full tier: a registration hfx needs no answer for, on its pattern"]
fn a_vmap_mask_expansion_exports_to_both_executorch_programs() {
    let dir = tempfile::tempdir().unwrap();
    let model = "python:patch_patterns:vmap_mask";
    let run = export(dir.path(), "xnnpack", model, false, &[]);
    verified(&run, "vmap mask (xnnpack)");
    let pte = dir.path().join("portable.pte");
    let out = hfx_with_python(
        dir.path(),
        &[
            "run",
            "--backend",
            "executorch",
            "--model-fn",
            model,
            "--static",
            "--verify",
            "-o",
            pte.to_str().unwrap(),
        ],
    );
    let portable = Export { output: out, pte };
    verified(&portable, "vmap mask (portable)");
    assert_no_scratch_left(dir.path());
}
