//! The ported reference patches, each a WASM `patch` plugin: a real trace of a
//! module (or tiny transformers model) holding the pattern, through
//! `hfx run --model-fn`, shows the plugin answered calls, the pattern is gone
//! from the graph (or its replacement is there), and the program matches eager
//! at 1e-4, at a second input size too for dynamic exports.

use std::path::Path;

use crate::common::*;

struct Case<'a> {
    plugin: &'a str,
    backend: &'a str,
    pattern: &'a str,
    dynamic: bool,
    absent: &'a str,
    present: &'a str,
    /// More `check_patch.py` arguments.
    check: &'a [&'a str],
}

fn traced_with_patch(case: Case) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(format!("{}.pt2", case.pattern));
    let plugin = plugin_dir(case.plugin);
    let spec = format!("python:patch_patterns:{}", case.pattern);
    let mut args = vec!["run", "--backend", case.backend, "--plugins", plugin.to_str().unwrap(), "--model-fn", &spec];
    args.extend(["-o", out.to_str().unwrap()]);
    if case.dynamic {
        args.push("--dynamic");
    }
    let result = hfx_with_python(dir.path(), &args);
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(result.status.success(), "{}: {}\n{stdout}", case.pattern, String::from_utf8_lossy(&result.stderr));
    let answered = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("patch ") && l.contains("answered"))
        .and_then(|l| l.split("answered ").nth(1)?.split(' ').next()?.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(answered > 0, "{}: the patch answered no call\n{stdout}", case.pattern);
    let reference = out.with_extension("reference.pt");
    let (absent, present) = (format!("--absent={}", case.absent), format!("--present={}", case.present));
    let mut args = vec![out.to_str().unwrap(), reference.to_str().unwrap(), case.pattern, &absent, &present];
    args.extend_from_slice(case.check);
    run_python("check_patch.py", &args);
    assert!(Path::new(&out).exists());
}

macro_rules! case {
    (@check) => { &[] };
    (@check $check:expr) => { $check };
    ($test:ident, $plugin:literal, $backend:literal, $pattern:literal, dynamic: $dynamic:literal, absent: $absent:literal, present: $present:literal $(, check: $check:expr)?) => {
        #[test]
        fn $test() {
            traced_with_patch(Case { plugin: $plugin, backend: $backend, pattern: $pattern, dynamic: $dynamic, absent: $absent, present: $present, check: case!(@check $($check)?) });
        }
    };
}

// ── onnx torch patches ──
case!(split_with_a_symbolic_size_becomes_narrows, "plugins/onnx/patch-split-symbolic", "onnx", "split_symbolic",
      dynamic: true, absent: "aten.split", present: "aten.narrow");
case!(chunk_of_a_dynamic_axis_becomes_narrows, "plugins/onnx/patch-chunk-symbolic", "onnx", "chunk_symbolic",
      dynamic: true, absent: "aten.chunk", present: "aten.narrow");
case!(roll_becomes_narrow_and_cat, "plugins/onnx/patch-roll", "onnx", "roll",
      dynamic: true, absent: "aten.roll", present: "aten.cat");
case!(reshape_of_a_transposed_tensor_clones_it_first, "plugins/onnx/patch-reshape-contiguous", "onnx", "reshape_transposed",
      dynamic: false, absent: "", present: "aten.clone");
case!(complex_exp_and_unsqueeze_go_through_real_parts, "plugins/onnx/patch-complex-unsqueeze-exp", "onnx", "complex_rotation",
      dynamic: true, absent: "", present: "aten.cos,aten.sin");
case!(masked_scatter_becomes_cumsum_gather_where, "plugins/onnx/patch-masked-scatter", "onnx", "masked_scatter",
      dynamic: true, absent: "aten.masked_scatter", present: "aten.cumsum,aten.index_select");
case!(rms_norm_without_affine_is_unfused, "plugins/onnx/patch-rms-norm-no-affine", "onnx", "rms_norms",
      dynamic: false, absent: "", present: "aten.rsqrt");
case!(histc_becomes_scatter_add, "plugins/onnx/patch-histc", "onnx", "histograms",
      dynamic: true, absent: "aten.histc", present: "aten.scatter_add");
case!(searchsorted_and_bucketize_become_comparisons, "plugins/onnx/patch-sorted-search", "onnx", "sorted_search",
      dynamic: true, absent: "aten.searchsorted,aten.bucketize", present: "aten.sum");
case!(cummax_and_cummin_become_masked_reductions, "plugins/onnx/patch-cumulative-extremum", "onnx", "cumulative_extremum",
      dynamic: true, absent: "aten.cummax,aten.cummin", present: "aten.tril");
case!(randperm_becomes_argsort_of_rand, "plugins/onnx/patch-randperm", "onnx", "randperm",
      dynamic: true, absent: "aten.randperm", present: "aten.rand,aten.argsort");
case!(sdpa_zeroes_fully_masked_rows, "plugins/onnx/patch-sdpa-masked-rows", "onnx", "sdpa_masked",
      dynamic: true, absent: "", present: "aten.where,aten.scaled_dot_product_attention");
case!(vmap_mask_expansion_becomes_broadcasting, "plugins/onnx/patch-vmap-mask-expansion", "onnx", "vmap_mask",
      dynamic: true, absent: "_add_batch_dim,_vmap_increment_nesting", present: "aten.expand");

// ── dynamo model patches ──
case!(sdpa_on_cpu_traces_a_data_dependent_batch, "plugins/dynamo/patch-sdpa-math-cpu", "dynamo", "data_dependent_batch",
      dynamic: false, absent: "", present: "aten.scaled_dot_product_attention");
case!(kernels_are_reported_unavailable_while_tracing, "plugins/dynamo/patch-kernels-unavailable", "dynamo", "kernels_or_fallback",
      dynamic: false, absent: "", present: "aten.tanh");
case!(nllb_moe_router_skips_its_classifier_cast, "plugins/dynamo/patch-nllb-moe-classifier-cast", "dynamo", "nllb_moe_router",
      dynamic: false, absent: "", present: "aten.linear");

#[test]
fn without_its_patch_the_nllb_moe_router_does_not_trace() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("router.pt2");
    let result = hfx_with_python(dir.path(), &["run", "--backend", "dynamo", "--model-fn", "python:patch_patterns:nllb_moe_router", "-o", out.to_str().unwrap()]);
    assert!(!result.status.success() && !out.exists());
    assert!(String::from_utf8_lossy(&result.stderr).contains("swap Linear.weight"), "{}", String::from_utf8_lossy(&result.stderr));
}
// Logits match eager; the cache keeps all 8 positions (eager's sliding layer keeps window - 1 = 3),
// so an exported decode does not break past the window.
case!(sliding_window_cache_layers_trace_as_full_layers, "plugins/dynamo/patch-sliding-window-cache", "dynamo", "sliding_window_mistral",
      dynamic: false, absent: "", present: "", check: &["--compare=1", "--shape=1=2x2x8x8"]);

/// The worker's resolved-object policy on its own: every hostile program (shell,
/// files, torch's global state, module re-exports, `__globals__`/`__builtins__`/
/// `__subclasses__` walks, eval/exec/open/__import__, getattr chains to frames) is
/// refused as if the host's check had let it through, nothing runs, and every path
/// and target the shipped plugins use still resolves.
#[test]
fn the_worker_refuses_what_a_patch_program_resolves_to_not_its_path() {
    let dir = tempfile::tempdir().unwrap();
    run_python("check_reach.py", &[dir.path().to_str().unwrap()]);
    assert!(!dir.path().join("escaped").exists());
}

/// Through the whole pipeline: paths that pass the host's string check
/// (`transformers.models.llama.modeling_llama.torch.os.system`,
/// `torch.PyTorchFileWriter`) reach the worker, which refuses what they resolve
/// to; the trace fails naming plugin, target and path, and no command ran.
#[test]
fn a_patch_program_cannot_reach_a_shell_or_a_file_writer_through_allowed_modules() {
    let plugin = plugin_dir("tests/plugins/hostile-reach");
    for (rows, path) in [
        (1, "transformers.models.llama.modeling_llama.torch.os.system"),
        (2, "transformers.models.llama.modeling_llama.torch.os.system"),
        (3, "torch.PyTorchFileWriter"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.onnx");
        let spec = format!("python:hfx_test_models:where_rows_{rows}");
        let result = hfx_with_python(dir.path(), &["run", "--backend", "onnx", "--plugins", plugin.to_str().unwrap(), "--model-fn", &spec, "-o", out.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(!result.status.success() && !out.exists(), "{rows}: {stderr}");
        assert!(stderr.contains("test-hostile-reach") && stderr.contains("torch.where") && stderr.contains("PermissionError"), "{rows}: {stderr}");
        assert!(stderr.contains(path.rsplit('.').next().unwrap()), "{rows}: {stderr}");
        assert!(!dir.path().join("hfx-escaped").exists(), "{rows}: the hostile program ran");
        assert_no_scratch_left(dir.path());
    }
}
