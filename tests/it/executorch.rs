//! The ExecuTorch backend end to end: `hfx run --backend executorch.xnnpack
//! -o out.pte` traces a tiny random model, runs the FX stages (dynamo and
//! executorch plugins), has ExecuTorch lower the fixed program with the
//! XNNPACK partitioner in the worker, and `--verify` runs the `.pte` in the
//! ExecuTorch runtime against eager PyTorch (atol/rtol 1e-3; a second input
//! size for dynamic exports). An export folder loads in the reference's
//! runtime (`ExportedModel.from_pretrained`).

use crate::common::hfx_with_python as hfx;
use crate::common::tiny::*;
use crate::common::*;

/// Every shipped set: each plugin runs for the backends it names (the
/// reshape patch of `plugins/onnx` serves ExecuTorch too).
const QWEN3_MOE: &str = "vocab_size=128,hidden_size=32,intermediate_size=64,moe_intermediate_size=16,num_hidden_layers=2,num_attention_heads=4,\
num_key_value_heads=2,head_dim=8,num_experts=4,num_experts_per_tok=2,experts_implementation=grouped_mm,max_position_embeddings=64";

fn plugin_folders() -> Vec<String> {
    vec!["--plugins".to_string(), root().join("plugins").display().to_string()]
}

/// `hfx run` to `out` (a `.pte` or a folder) with `extra` flags; its stdout.
fn export(dir: &std::path::Path, arch: &str, set: &str, out: &std::path::Path, extra: &[&str]) -> String {
    let mut args: Vec<String> = ["run", "--backend", "executorch", "--delegate", "xnnpack", "--model", arch, "--set", set, "-o"].map(String::from).to_vec();
    args.push(out.display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(plugin_folders());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = hfx(dir, &args);
    let stdout = String::from_utf8_lossy(&result.stdout).into_owned();
    assert!(result.status.success(), "{arch} {extra:?}: {}{stdout}", String::from_utf8_lossy(&result.stderr));
    stdout
}

/// Tiny Llama (its cache an output), static and dynamic, a BERT, a ViT, a
/// GPT-2 (whose views after attention ExecuTorch refuses without the
/// reshape and SDPA patches) and a Qwen3-MoE built with grouped experts
/// (which XNNPACK has no kernel for: the backend preparation runs them as
/// `batched_mm`): each `.pte` runs in the ExecuTorch runtime and matches
/// eager; a dynamic one also at a second size, within the bounds the
/// executorch range fix gives.
#[test]
fn xnnpack_programs_match_eager_in_the_executorch_runtime() {
    let dir = tempfile::tempdir().unwrap();
    for (arch, set, dynamic) in [("llama", LLAMA, false), ("llama", LLAMA, true), ("bert", BERT, true), ("vit", VIT, false), ("gpt2", GPT2, false), ("qwen3_moe", QWEN3_MOE, false)] {
        let out = dir.path().join(format!("{arch}-{dynamic}.pte"));
        let flags: &[&str] = if dynamic { &["--dynamic", "--verify"] } else { &["--verify"] };
        let stdout = export(dir.path(), arch, set, &out, flags);
        assert!(stdout.contains("stage lower") && stdout.contains("delegated"), "{stdout}");
        let checks = stdout.matches("verify inputs").count();
        assert_eq!(checks, if dynamic { 2 } else { 1 }, "{arch}: {stdout}");
        assert!(!stdout.contains("MISMATCH"), "{stdout}");
        // A .pte: the flatbuffer's identifier at bytes 4..8.
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(&bytes[4..8], b"ET12", "{arch}: not an ExecuTorch program");
        if dynamic {
            assert!(stdout.contains("executorch-fix-range-constraints") && stdout.contains("changed     1"), "{stdout}");
        }
    }
    assert_no_scratch_left(dir.path());
}

/// `-o DIR` writes the reference's ExecuTorch folder (`model.pte`,
/// `export.json` with `export_format` executorch, the configs), which
/// `ExportedModel.from_pretrained` runs unchanged, returning the model's own
/// output type that matches eager.
#[test]
fn an_executorch_export_folder_loads_in_the_reference_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("llama-executorch");
    export(dir.path(), "llama", LLAMA, &folder, &["--dynamic"]);
    for file in ["model.pte", "export.json", "config.json"] {
        assert!(folder.join(file).exists(), "no {file}");
    }
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(folder.join("export.json")).unwrap()).unwrap();
    assert_eq!(manifest["export_format"], "executorch");
    let metadata = &manifest["components"]["model"]["metadata"];
    assert_eq!(metadata["export_config"]["backend"], "xnnpack");
    assert!(metadata["packages"]["executorch"].is_string(), "{metadata}");
    let reference = folder.join("model.reference.pt");
    run_python("check_folder.py", &[folder.to_str().unwrap(), reference.to_str().unwrap(), "1e-3"]);
    assert_no_scratch_left(dir.path());
}

/// The ExecuTorch backend has no translations: its workarounds are FX fixes
/// and patches, and a third party's, loaded from a folder, changes the program
/// ExecuTorch lowers with no rebuild of hfx (silu becomes x * sigmoid(x) in a
/// tiny Llama's MLP: a different `.pte`, still matching eager).
#[test]
fn a_third_party_fx_fix_changes_the_executorch_program() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.pte");
    let fixed = dir.path().join("fixed.pte");
    let stdout = export(dir.path(), "llama", LLAMA, &plain, &["--verify"]);
    assert!(!stdout.contains("test-executorch-silu-as-sigmoid"), "{stdout}");
    let plugin = plugin_dir("tests/plugins/executorch-silu-as-sigmoid").display().to_string();
    let stdout = export(dir.path(), "llama", LLAMA, &fixed, &["--verify", "--plugins", &plugin]);
    let line = stdout.lines().find(|l| l.contains("test-executorch-silu-as-sigmoid")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.contains("changed     2"), "one silu per layer: {line}");
    assert!(!stdout.contains("MISMATCH"), "{stdout}");
    assert_ne!(std::fs::read(&plain).unwrap(), std::fs::read(&fixed).unwrap(), "the fix did not reach the program");
}

/// What is not there yet says so in one line, naming what works instead.
#[test]
fn the_portable_program_and_other_delegates_are_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.pte");
    for (args, expected) in [
        (&["--backend", "executorch"][..], "--backend executorch.xnnpack"),
        (&["--backend", "onnx", "--delegate", "xnnpack"][..], "--delegate xnnpack is an ExecuTorch delegate"),
        (&["--backend", "onnx"][..], "a .pte output needs an ExecuTorch backend"),
    ] {
        let mut all = vec!["run", "--model", "llama", "--set", LLAMA, "-o", out.to_str().unwrap()];
        all.extend(args);
        let result = hfx(dir.path(), &all);
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(!result.status.success() && stderr.contains(expected), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
    assert!(!out.exists());
}
