//! The reference parity ledger (`docs/reference-parity.md`): every
//! registration of the pinned reference exporter answered by a plugin, by the
//! host or by a tested reason, or listed as a known gap under the open issue
//! that ports it.

use std::process::Command;

use crate::common::*;

/// `tools/reference-parity.py --check` imports the reference, reads its
/// registries and fails on a registration nothing answers, on an answer
/// naming no registration, on a named test that does not exist and on the
/// doc out of date (about 10 s: the reference's imports).
#[test]
fn the_reference_parity_ledger_is_complete_and_current() {
    let out = Command::new(python())
        .arg(root().join("tools/reference-parity.py"))
        .arg("--check")
        .current_dir(root())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The reference's targets hfx does not serve yet (the ExecuTorch CUDA and
/// MLX delegates: their registrations are known gaps) are refused in one line
/// before any work.
#[test]
fn backends_and_delegates_hfx_does_not_serve_are_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--backend", "executorch", "--delegate", "mlx"], "unknown ExecuTorch delegate `mlx`"),
        (
            &["--backend", "executorch.cuda"],
            "the ExecuTorch CUDA delegate needs a CUDA GPU and is not implemented",
        ),
    ];
    for (extra, expected) in cases {
        let args: Vec<&str> =
            ["run", "--model", "llama", "-o", "out/"].iter().chain(extra.iter()).copied().collect();
        let out = Command::new(env!("CARGO_BIN_EXE_hfx"))
            .args(&args)
            .current_dir(dir.path())
            .env("HFX_CACHE_DIR", dir.path().join("cache"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expected), "{extra:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{extra:?}: {stderr}");
        assert!(!dir.path().join("out").exists(), "{extra:?}");
    }
}

/// The calls the reference patches for torch.onnx (`torch.where` on mixed
/// dtypes and scalars, `torch.full` of an int, `torch.masked.mean` and
/// `torch.masked.var`) export and verify with hfx's plugins as they are, each
/// output of eager's dtype; and a bfloat16 convolution, which ONNX's `Conv`
/// takes only from opset 22, runs at the default opset (20) in float32
/// (plugins/onnx/translate-conv), matching eager in ONNX Runtime.
#[test]
fn calls_the_reference_patches_for_onnx_and_a_bfloat16_convolution_export_as_eager_computes_them() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = root().join("plugins");
    let cases: [(&str, &[&str], &str); 2] = [
        ("reference_patched_calls", &["--verify"], "1e-4"),
        ("depthwise_convolution", &["--dtype", "bfloat16", "--keep-reference"], "1e-2"),
    ];
    for (pattern, extra, atol) in cases {
        let out = dir.path().join(format!("{pattern}.onnx"));
        let spec = format!("python:fx_patterns:{pattern}");
        let mut args = vec!["run", "--backend", "onnx", "--plugins", plugins.to_str().unwrap()];
        args.extend(["--model-fn", &spec, "-q", "-o", out.to_str().unwrap()]);
        args.extend(extra);
        let result = hfx_with_python(dir.path(), &args);
        assert!(result.status.success(), "{pattern}: {}", String::from_utf8_lossy(&result.stderr));
        let reference = dir.path().join(format!("{pattern}.reference.pt"));
        run_python(
            "check_onnx_types.py",
            &[out.to_str().unwrap(), reference.to_str().unwrap(), atol],
        );
    }
}
