//! The reference's ExecuTorch torch patches as WASM `patch` plugins
//! (`plugins/executorch/patch-*`), each on a real trace holding its pattern.
//!
//! Each pattern is a small module of `tests/python/executorch_patch_patterns.py`.
//! A test exports it with `hfx run --backend executorch [--delegate xnnpack]
//! --model-fn ... --verify` and the plugin under test, so the plugin answers
//! the calls while torch.export traces: the summary says it answered, the
//! `.pte` shows its effect (an operator in its table or gone from it, kernels
//! left to the portable runtime or taken by XNNPACK), and the `.pte` runs in
//! the ExecuTorch runtime and matches eager (atol/rtol 1e-3; the run writes
//! nothing otherwise). The negative control is the same run without the
//! plugin, which fails where ExecuTorch fails, or lacks the effect. Every run
//! loads only the plugin folders it names.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::*;

/// The two ExecuTorch programs hfx writes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Program {
    /// hfx's own portable program (`--backend executorch`).
    Portable,
    /// ExecuTorch's lowering with the XNNPACK partitioner, in the worker.
    Xnnpack,
}

/// One `hfx run` of a pattern to a `.pte`.
struct Export {
    pte: PathBuf,
    output: Output,
}

impl Export {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
}

/// `hfx run --backend executorch` of `executorch_patch_patterns.PATTERN` as
/// `program` to `DIR/NAME.pte` with `--verify`, `extra` flags and the plugin
/// folders `plugins` (relative to the repository) and no others.
fn export(
    dir: &Path,
    name: &str,
    pattern: &str,
    program: Program,
    plugins: &[&str],
    extra: &[&str],
) -> Export {
    let pte = dir.join(format!("{name}.pte"));
    let model = format!("python:executorch_patch_patterns:{pattern}");
    let mut args: Vec<String> =
        ["run", "--backend", "executorch", "--model-fn", &model, "--verify", "-o"]
            .map(String::from)
            .to_vec();
    args.push(pte.display().to_string());
    if program == Program::Xnnpack {
        args.extend(["--delegate".into(), "xnnpack".into()]);
    }
    for plugin in plugins {
        args.extend(["--plugins".into(), plugin_dir(plugin).display().to_string()]);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    if !extra.contains(&"--dynamic") {
        args.push("--static".into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Export { output: hfx_with_python(dir, &args), pte }
}

/// How many calls the patch plugin `name` answered, from the run's summary
/// (`  patch executorch-patch-bernoulli     answered 3 call(s)`).
fn answered(stdout: &str, name: &str) -> u64 {
    stdout
        .lines()
        .find(|l| l.trim_start().starts_with("patch ") && l.split_whitespace().nth(1) == Some(name))
        .and_then(|l| l.split("answered ").nth(1)?.split(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// The kernel calls the runtime makes outside any delegate, from the
/// summary: the portable program's (`stage pte-emit ... 35 kernel call(s)`)
/// or the XNNPACK program's (`stage lower ... 0 portable kernel call(s)`).
fn portable_kernel_calls(stdout: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("stage pte-emit") || l.starts_with("stage lower"))
        .unwrap_or_else(|| panic!("no emission line:\n{stdout}"));
    let before = line.split(" kernel call(s)").next().unwrap().trim_end_matches(" portable");
    before.rsplit(' ').next().unwrap().parse().unwrap_or_else(|_| panic!("no kernel count: {line}"))
}

/// Whether the `.pte`'s operator table names `operator` (`aten::rand`): the
/// FlatBuffer holds each operator's name as a string; a delegate's payload
/// names none. Ask with the namespace: the provenance the `.pte` carries names
/// the plugins (`executorch-patch-bernoulli`).
fn names_operator(pte: &Path, operator: &str) -> bool {
    std::fs::read(pte).unwrap().windows(operator.len()).any(|w| w == operator.as_bytes())
}

/// The largest error `--verify` measured against eager (`max abs 3.58e-7`).
fn max_abs_error(stdout: &str) -> f64 {
    stdout
        .lines()
        .filter_map(|l| l.split("max abs").nth(1)?.split_whitespace().next()?.parse::<f64>().ok())
        .fold(0.0, f64::max)
}

/// The run succeeded with `plugin` answering calls, and its `.pte` matched
/// eager in the ExecuTorch runtime; prints the parity.
fn verified_with(export: &Export, plugin: &str, what: &str) {
    let stdout = export.stdout();
    assert!(export.output.status.success(), "{what}: {}{stdout}", export.stderr());
    assert!(answered(&stdout, plugin) > 0, "{what}: {plugin} answered no call:\n{stdout}");
    assert!(stdout.contains("verify inputs") && !stdout.contains("MISMATCH"), "{what}: {stdout}");
    assert_eq!(
        &std::fs::read(&export.pte).unwrap()[4..8],
        b"ET12",
        "{what}: not an ExecuTorch program"
    );
    eprintln!(
        "{what}: {plugin} answered {} call(s); max abs error {:.1e} against eager",
        answered(&stdout, plugin),
        max_abs_error(&stdout)
    );
}

/// The negative control fails for `reason` and writes nothing.
fn fails(export: &Export, reason: &str, what: &str) {
    let stderr = export.stderr();
    assert!(
        !export.output.status.success(),
        "{what}: exports without the plugin, so its test proves nothing"
    );
    assert!(
        stderr.contains(reason),
        "{what}: fails without the plugin, but not for `{reason}`:\n{stderr}"
    );
    assert!(!export.pte.exists(), "{what}: wrote {}", export.pte.display());
}

/// The negative control exports and matches eager (the plugin's effect is
/// what it lacks); its stdout.
fn verified_without(export: &Export, what: &str) -> String {
    let stdout = export.stdout();
    assert!(export.output.status.success(), "{what}: {}{stdout}", export.stderr());
    assert!(stdout.contains("verify inputs") && !stdout.contains("MISMATCH"), "{what}: {stdout}");
    stdout
}

const ADAPTIVE_POOL: &str = "plugins/executorch/patch-adaptive-avg-pool2d";
const CUMULATIVE: &str = "plugins/onnx/patch-cumulative-extremum";
const SORTED_SEARCH: &str = "plugins/onnx/patch-sorted-search";
const BERNOULLI: &str = "plugins/executorch/patch-bernoulli";
const EXPAND: &str = "plugins/executorch/patch-expand-contiguous";
const DETACH: &str = "plugins/executorch/patch-detach";
const SDPA: &str = "plugins/executorch/patch-sdpa-contiguous";

/// Adaptive pools to sizes that divide the input's and that do not: XNNPACK
/// runs the whole program (no portable kernel), where without the plugin each
/// pool is a portable `_adaptive_avg_pool2d` between delegates. A dynamic
/// height and width keep the original (its windows are not known while
/// tracing). The plugin serves the XNNPACK program only: the portable runtime
/// has the adaptive kernel.
#[test]
#[ignore = "full tier: the patch on a real trace through ExecuTorch (its self-test checks it in selftests::every_shipped_plugin_passes_its_self_tests)"]
fn adaptive_avg_pool2d_runs_in_xnnpack() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = "executorch-patch-adaptive-avg-pool2d";
    let with =
        export(dir.path(), "with", "adaptive_pools", Program::Xnnpack, &[ADAPTIVE_POOL], &[]);
    verified_with(&with, plugin, "xnnpack");
    assert_eq!(portable_kernel_calls(&with.stdout()), 0, "{}", with.stdout());
    assert!(!names_operator(&with.pte, "aten::_adaptive_avg_pool2d"));

    let without = export(dir.path(), "without", "adaptive_pools", Program::Xnnpack, &[], &[]);
    let stdout = verified_without(&without, "xnnpack without the plugin");
    assert_eq!(portable_kernel_calls(&stdout), 3, "one portable kernel per pool: {stdout}");
    assert!(names_operator(&without.pte, "aten::_adaptive_avg_pool2d"));

    let dynamic = export(
        dir.path(),
        "dynamic",
        "adaptive_pools",
        Program::Xnnpack,
        &[ADAPTIVE_POOL],
        &["--dynamic"],
    );
    verified_with(&dynamic, plugin, "xnnpack --dynamic");
    assert!(
        names_operator(&dynamic.pte, "aten::_adaptive_avg_pool2d"),
        "a symbolic size keeps the original"
    );
    assert_no_scratch_left(dir.path());
}

/// `cummax` and `cummin` (values and indices) as masked max/min grids, by the
/// ONNX backend's plugin, which serves ExecuTorch too. Without it the portable
/// program cannot be emitted and the XNNPACK one does not load (0x14: an
/// operator missing from the runtime).
#[test]
#[ignore = "full tier: the patch on a real trace through ExecuTorch (its self-test checks it in selftests::every_shipped_plugin_passes_its_self_tests)"]
fn cummax_and_cummin_become_masked_reductions_in_both_programs() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = "onnx-patch-cumulative-extremum";
    for (program, name) in [(Program::Portable, "portable"), (Program::Xnnpack, "xnnpack")] {
        let with = export(
            dir.path(),
            &format!("with-{name}"),
            "cumulative_extremum",
            program,
            &[CUMULATIVE],
            &[],
        );
        verified_with(&with, plugin, name);
        assert!(
            !names_operator(&with.pte, "aten::cummax")
                && !names_operator(&with.pte, "aten::cummin"),
            "{name}"
        );
    }
    let without =
        export(dir.path(), "without-portable", "cumulative_extremum", Program::Portable, &[], &[]);
    fails(
        &without,
        "`aten.cummax.default` has no kernel in ExecuTorch's portable runtime",
        "portable",
    );
    let without =
        export(dir.path(), "without-xnnpack", "cumulative_extremum", Program::Xnnpack, &[], &[]);
    fails(&without, "Failed to load method forward, error: 0x:14", "xnnpack");
    assert_no_scratch_left(dir.path());
}

/// `searchsorted` (left and right, int64 and int32) and `bucketize` as
/// counts of a broadcast comparison, by the ONNX backend's plugin, which
/// serves ExecuTorch too. Without it the portable program cannot be emitted
/// and the XNNPACK one, which leaves them to the portable runtime, does not
/// load (0x14: an operator missing from the runtime).
#[test]
#[ignore = "full tier: the patch on a real trace through ExecuTorch (its self-test checks it in selftests::every_shipped_plugin_passes_its_self_tests)"]
fn searchsorted_and_bucketize_become_comparisons_in_both_programs() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = "onnx-patch-sorted-search";
    for (program, name) in [(Program::Portable, "portable"), (Program::Xnnpack, "xnnpack")] {
        let with = export(
            dir.path(),
            &format!("with-{name}"),
            "sorted_search",
            program,
            &[SORTED_SEARCH],
            &[],
        );
        verified_with(&with, plugin, name);
        assert!(
            !names_operator(&with.pte, "aten::searchsorted")
                && !names_operator(&with.pte, "aten::bucketize"),
            "{name}"
        );
    }
    let without =
        export(dir.path(), "without-portable", "sorted_search", Program::Portable, &[], &[]);
    fails(
        &without,
        "`aten.searchsorted.Tensor` has no kernel in ExecuTorch's portable runtime",
        "portable",
    );
    let without =
        export(dir.path(), "without-xnnpack", "sorted_search", Program::Xnnpack, &[], &[]);
    fails(&without, "Failed to load method forward, error: 0x:14", "xnnpack");
    assert_no_scratch_left(dir.path());
}

/// `bernoulli(probabilities)`, `bernoulli(x, 1.0)` and `bernoulli(x, p=0.0)`
/// as `rand < p`: on the sample's probabilities (0s and 1s) the draws are
/// certain and the `.pte` matches eager; on probabilities of 0.5 the same
/// `.pte` draws random 0s and 1s (`rand` is a runtime kernel, the draw is not
/// frozen). Without the plugin the portable program cannot be emitted and the
/// XNNPACK one is refused by ExecuTorch's edge verifier.
#[test]
#[ignore = "full tier: the patch on a real trace through ExecuTorch (its self-test checks it in selftests::every_shipped_plugin_passes_its_self_tests)"]
fn bernoulli_becomes_a_comparison_with_rand_in_both_programs() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = "executorch-patch-bernoulli";
    for (program, name) in [(Program::Portable, "portable"), (Program::Xnnpack, "xnnpack")] {
        let with =
            export(dir.path(), &format!("with-{name}"), "bernoulli", program, &[BERNOULLI], &[]);
        verified_with(&with, plugin, name);
        assert!(
            names_operator(&with.pte, "aten::rand") && names_operator(&with.pte, "aten::lt"),
            "{name}"
        );
        assert!(!names_operator(&with.pte, "aten::bernoulli"), "{name}");
        let draws = try_python(
            "executorch_patch_patterns.py",
            &["bernoulli-draws", with.pte.to_str().unwrap()],
        );
        eprintln!("{name}: {}", draws.unwrap_or_else(|e| panic!("{name}: {e}")).trim());
    }
    let without = export(dir.path(), "without-portable", "bernoulli", Program::Portable, &[], &[]);
    fails(
        &without,
        "`aten.bernoulli.p` has no kernel in ExecuTorch's portable runtime",
        "portable",
    );
    let without = export(dir.path(), "without-xnnpack", "bernoulli", Program::Xnnpack, &[], &[]);
    fails(&without, "aten.bernoulli", "xnnpack");
    assert!(without.stderr().contains("SpecViolationError"), "{}", without.stderr());
    assert_no_scratch_left(dir.path());
}

/// The two expands that broadcast get a contiguous clone each (in the
/// portable program two more kernel calls, `_clone_dim_order`), the one that
/// does not stays a view; both programs match eager. Without the plugin the
/// program exports too (executorch 1.4.1 meets no stride of 0 here) but lacks
/// the clones.
#[test]
#[ignore = "full tier: the patch on a real trace through ExecuTorch (its self-test checks it in selftests::every_shipped_plugin_passes_its_self_tests)"]
fn an_expand_that_broadcasts_is_cloned_to_contiguous() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = "executorch-patch-expand-contiguous";
    let with = export(dir.path(), "with-portable", "expands", Program::Portable, &[EXPAND], &[]);
    verified_with(&with, plugin, "portable");
    assert!(names_operator(&with.pte, "dim_order_ops::_clone_dim_order"));
    let without = export(dir.path(), "without-portable", "expands", Program::Portable, &[], &[]);
    let stdout = verified_without(&without, "portable without the plugin");
    assert!(!names_operator(&without.pte, "dim_order_ops::_clone_dim_order"));
    assert_eq!(
        portable_kernel_calls(&with.stdout()),
        portable_kernel_calls(&stdout) + 2,
        "a clone per broadcasting expand"
    );

    let with = export(dir.path(), "with-xnnpack", "expands", Program::Xnnpack, &[EXPAND], &[]);
    verified_with(&with, plugin, "xnnpack");
    assert_no_scratch_left(dir.path());
}

/// The detaches between two linear layers are gone from the XNNPACK program,
/// which then runs no portable kernel.
#[test]
fn detach_leaves_the_xnnpack_program() {
    let dir = tempfile::tempdir().unwrap();
    let with = export(dir.path(), "with", "detaches", Program::Xnnpack, &[DETACH], &[]);
    verified_with(&with, "executorch-patch-detach", "xnnpack");
    assert_eq!(portable_kernel_calls(&with.stdout()), 0, "{}", with.stdout());
    assert!(!names_operator(&with.pte, "aten::alias_copy"));
    assert_no_scratch_left(dir.path());
}

/// The negative control: without the plugin each detach lowers to a portable
/// `alias_copy` between delegates.
#[test]
#[ignore = "full tier: the negative control (detach_leaves_the_xnnpack_program checks the effect)"]
fn detach_stays_in_the_xnnpack_program_without_the_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let without = export(dir.path(), "without", "detaches", Program::Xnnpack, &[], &[]);
    let stdout = verified_without(&without, "xnnpack without the plugin");
    assert!(
        portable_kernel_calls(&stdout) > 0 && names_operator(&without.pte, "aten::alias_copy"),
        "{stdout}"
    );
    assert_no_scratch_left(dir.path());
}

/// Attention over a data-dependent batch (the images a mask keeps), with a
/// boolean mask holding a row masked at every key and as causal grouped-query
/// attention, is computed eagerly (matmul, softmax, matmul): the XNNPACK
/// program lowers and both programs match eager, the masked row's zeros
/// included. Without the plugin ExecuTorch's memory planning guards on the
/// data-dependent batch of SDPA's decomposition.
#[test]
#[ignore = "full tier: the patch on a real trace through ExecuTorch (its self-test checks it in selftests::every_shipped_plugin_passes_its_self_tests)"]
fn attention_over_a_data_dependent_batch_is_computed_eagerly() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = "executorch-patch-sdpa-contiguous";
    for (program, name) in [(Program::Portable, "portable"), (Program::Xnnpack, "xnnpack")] {
        let with = export(
            dir.path(),
            &format!("with-{name}"),
            "data_dependent_attention",
            program,
            &[SDPA],
            &[],
        );
        // The effect on the portable program (which copes with SDPA here too)
        // is in the trace: the plugin's self-test has SDPA gone from it.
        verified_with(&with, plugin, name);
    }
    let without = export(
        dir.path(),
        "without-xnnpack",
        "data_dependent_attention",
        Program::Xnnpack,
        &[],
        &[],
    );
    fails(&without, "GuardOnDataDependentSymNode", "xnnpack");
    assert_no_scratch_left(dir.path());
}
