//! Complex numbers in the ONNX path: plugins/onnx/fix-complex-pairs holds
//! each complex value as a real pair (a trailing 2) and rewrites the ops on
//! it; plugins/onnx/translate-fft makes the FFTs ONNX `DFT`s on that layout.
//! Each export is verified against eager PyTorch (`--verify`, 1e-3; a
//! mismatch writes nothing); each negative control is the same export
//! without the plugin, which stops naming the op.

use std::path::Path;
use std::process::Output;

use crate::common::*;

const COMPLEX_PAIRS: &str = "fix-complex-pairs";
const FFT: &str = "translate-fft";

/// `hfx run` of `model` (`--model-fn` or `--model-dir` and its value) to
/// `out`, verified, with the onnx plugin set but `without`.
fn export(dir: &Path, backend: &str, model: &[&str], out: &str, without: &[&str]) -> Output {
    let mut args: Vec<String> = vec!["run".into(), "--backend".into(), backend.into()];
    args.extend(model.iter().map(|s| s.to_string()));
    args.extend(["--verify".into(), "-o".into(), out.into()]);
    if without.is_empty() {
        args.extend(["--plugins".into(), root().join("plugins").display().to_string()]);
    } else {
        let mut sets: Vec<_> = std::fs::read_dir(root().join("plugins/onnx"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("plugin.toml").exists())
            .filter(|p| !without.iter().any(|w| p.ends_with(w)))
            .collect();
        sets.sort();
        sets.push(root().join("plugins/dynamo"));
        for set in sets {
            args.extend(["--plugins".into(), set.display().to_string()]);
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    hfx_with_python(dir, &args)
}

/// The stdout of an export that verified, after checking `plugin` changed the program.
fn verified(out: &Output, plugin: &str) -> String {
    let stdout = succeeded(out);
    assert!(stdout.contains("verify inputs") && !stdout.contains("MISMATCH"), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(plugin))
        .unwrap_or_else(|| panic!("{plugin} did not run:\n{stdout}"));
    assert!(!line.contains("changed     0"), "{plugin} changed nothing: {line}");
    stdout
}

fn model_dir(kind: &str, dir: &Path) -> Vec<String> {
    vec!["--model-dir".into(), model_folder(kind, dir).display().to_string()]
}

fn exports_and_verifies(kind: &str, backend: &str, out: &str, plugin: &str) {
    let dir = tempfile::tempdir().unwrap();
    let model = model_dir(kind, dir.path());
    let model: Vec<&str> = model.iter().map(String::as_str).collect();
    verified(&export(dir.path(), backend, &model, out, &[]), plugin);
    assert!(dir.path().join(out).exists());
    assert_no_scratch_left(dir.path());
}

/// RoPE in complex numbers (`torch.polar`, `view_as_complex`, a complex
/// product, `view_as_real`; with a quotient, a real term, a conjugate, a
/// `cat` and a transpose of complex values) exports and matches eager.
#[test]
fn complex_rope_exports_to_onnx_on_real_pairs_and_matches_eager() {
    let dir = tempfile::tempdir().unwrap();
    let model = ["--model-fn", "python:fx_patterns:complex_rotary"];
    verified(&export(dir.path(), "onnx", &model, "rope.onnx", &[]), "onnx-fix-complex-pairs");
    assert_no_scratch_left(dir.path());
}

/// The negative control: without fix-complex-pairs no translation takes
/// `aten.polar`, and the export stops naming it.
#[test]
#[ignore = "full tier: the negative control (complex_rope_exports_to_onnx_on_real_pairs_and_matches_eager checks the effect)"]
fn complex_rope_stops_naming_polar_without_fix_complex_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let model = ["--model-fn", "python:fx_patterns:complex_rotary"];
    let out = export(dir.path(), "onnx", &model, "rope.onnx", &[COMPLEX_PAIRS]);
    let error = one_line_error(&out);
    assert!(error.contains("`aten.polar.default`"), "{error}");
    assert!(!dir.path().join("rope.onnx").exists());
}

/// A 2-D FFT's real part and a 1-D inverse FFT's imaginary part (`norm="ortho"`)
/// as ONNX `DFT`s match eager, and so do half spectra back to real values
/// (`irfft` of an odd length, `irfftn`: `aten._fft_c2r`).
#[test]
#[ignore = "full tier: FFTs (translate-fft's self-test checks its DFT in ONNX Runtime; complex_rope_exports_to_onnx_on_real_pairs_and_matches_eager covers the pairs)"]
fn ffts_export_to_onnx_dft_and_match_eager() {
    let dir = tempfile::tempdir().unwrap();
    let model = ["--model-fn", "python:fx_patterns:real_fourier"];
    verified(&export(dir.path(), "onnx", &model, "fft.onnx", &[]), "onnx-translate-fft");
    let half = ["--model-fn", "python:fx_patterns:half_spectrum"];
    verified(&export(dir.path(), "onnx", &half, "half.onnx", &[]), "onnx-translate-fft");
    // The negative control: without translate-fft the trace decomposes the
    // FFTs to torch's primitives (`_fft_r2c`, `_fft_c2c`), which no other
    // translation takes.
    let out = export(dir.path(), "onnx", &model, "unfixed.onnx", &[FFT]);
    let error = one_line_error(&out);
    assert!(error.contains("no translation plugin for `aten._fft_"), "{error}");
    assert!(!dir.path().join("unfixed.onnx").exists());
}

/// DeepSeek-V2 (its complex RoPE and a layer of experts) exports to ONNX
/// with dynamic axes, verified at two sizes.
#[test]
#[ignore = "full tier: a real decoder with complex RoPE (complex_rope_exports_to_onnx_on_real_pairs_and_matches_eager covers the rewrite)"]
fn a_tiny_deepseek_v2_exports_to_onnx_and_matches_eager() {
    exports_and_verifies("deepseek_v2", "onnx", "deepseek_v2.onnx", "onnx-fix-complex-pairs");
}

/// Llama 4's text decoder (complex RoPE, `freqs_cis[:, :, None, :]`).
#[test]
#[ignore = "full tier: a real decoder with complex RoPE (complex_rope_exports_to_onnx_on_real_pairs_and_matches_eager covers the rewrite)"]
fn a_tiny_llama4_text_decoder_exports_to_onnx_and_matches_eager() {
    exports_and_verifies("llama4_text", "onnx", "llama4.onnx", "onnx-fix-complex-pairs");
}

/// FNet's token mixing, `torch.fft.fftn(...).real`.
#[test]
#[ignore = "full tier: a real encoder mixing tokens by FFT (ffts_export_to_onnx_dft_and_match_eager covers the translation)"]
fn a_tiny_fnet_exports_to_onnx_and_matches_eager() {
    exports_and_verifies("fnet", "onnx", "fnet.onnx", "onnx-translate-fft");
}

/// torch.fft's transforms as the reference patches each for OpenVINO (`rfft`,
/// `irfft`, `rfftn`, `irfftn`, `fftn`, `ifftn`, `fft`, `ifft`, each over a
/// dimension other than 1; pattern `fourier`), exported with dynamic axes,
/// match eager at the traced size (`--verify`) and at another, odd and even
/// lengths swapped, in ONNX Runtime and on OpenVINO's CPU plugin.
#[test]
#[ignore = "full tier: FFTs in OpenVINO (translate-fft's self-tests check its DFTs in ONNX Runtime)"]
fn ffts_with_dynamic_axes_match_eager_at_two_sizes_in_onnx_runtime_and_openvino() {
    let dir = tempfile::tempdir().unwrap();
    let model = ["--model-fn", "python:openvino_patterns:fourier", "--dynamic"];
    for (backend, out) in [("onnx", "fourier.onnx"), ("openvino", "fourier.xml")] {
        verified(&export(dir.path(), backend, &model, out, &[]), "onnx-translate-fft");
        let path = dir.path().join(out).display().to_string();
        run_python("openvino_patterns.py", &["resized", &path, "fourier", "2,5,8"]);
    }
    // Why the DFTs are written over dimension 1 at opset 20: OpenVINO's ONNX
    // frontend reads an opset-20 DFT over dimension 2 as one over dimension 1.
    run_python("openvino_patterns.py", &["dft_axis_input"]);
    assert_no_scratch_left(dir.path());
}

/// FNet's token mixing on OpenVINO's CPU plugin, at two sizes.
#[test]
#[ignore = "full tier: a real encoder mixing tokens by FFT in OpenVINO (ffts_export_to_onnx_dft_and_match_eager covers the translation)"]
fn a_tiny_fnet_exports_to_openvino_and_matches_eager() {
    exports_and_verifies("fnet", "openvino", "fnet_ov", "onnx-translate-fft");
}

/// OpenVINO reads the ONNX model hfx writes: DeepSeek-V2's complex RoPE on
/// real pairs runs on its CPU plugin and matches eager.
#[test]
#[ignore = "full tier: OpenVINO on a decoder with complex RoPE (complex_rope_exports_to_onnx_on_real_pairs_and_matches_eager covers the rewrite)"]
fn a_tiny_deepseek_v2_exports_to_openvino_and_matches_eager() {
    exports_and_verifies(
        "deepseek_v2-dense",
        "openvino",
        "deepseek_v2_ov",
        "onnx-fix-complex-pairs",
    );
}
