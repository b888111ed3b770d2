//! The ExecuTorch backend end to end, both programs: `hfx run --backend
//! executorch -o out.pte` traces a tiny random model, runs the FX stages
//! (dynamo and executorch plugins), and either emits the portable program
//! itself (the worker decomposes with ExecuTorch's edge table; the host lowers
//! to kernels, plans memory and writes the FlatBuffer) or, with `--delegate
//! xnnpack`, has ExecuTorch lower the fixed program with the XNNPACK
//! partitioner in the worker. `--verify` runs the `.pte` in the ExecuTorch
//! runtime against eager PyTorch (atol/rtol 1e-3; a second input size for
//! dynamic exports). An export folder loads in the reference's runtime
//! (`ExportedModel.from_pretrained`).

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

/// The two programs of the backend: the flags that choose each.
const PORTABLE: &[&str] = &[];
const XNNPACK: &[&str] = &["--delegate", "xnnpack"];

/// The arguments of `hfx run --backend executorch PROGRAM` to `out` (a
/// `.pte` or a folder) with `extra` flags.
fn export_args(
    program: &[&str],
    arch: &str,
    set: &str,
    out: &std::path::Path,
    extra: &[&str],
) -> Vec<String> {
    let mut args: Vec<String> =
        ["run", "--backend", "executorch", "--model", arch, "--set", set, "-o"]
            .map(String::from)
            .to_vec();
    args.push(out.display().to_string());
    args.extend(program.iter().chain(extra).map(|s| s.to_string()));
    args.extend(plugin_folders());
    args
}

/// `hfx run --backend executorch PROGRAM` to `out` with `extra` flags; its stdout.
fn export(
    dir: &std::path::Path,
    program: &[&str],
    arch: &str,
    set: &str,
    out: &std::path::Path,
    extra: &[&str],
) -> String {
    let args = export_args(program, arch, set, out, extra);
    let result = hfx(dir, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let stdout = String::from_utf8_lossy(&result.stdout).into_owned();
    assert!(
        result.status.success(),
        "{arch} {program:?} {extra:?}: {}{stdout}",
        String::from_utf8_lossy(&result.stderr)
    );
    stdout
}

/// Exports `arch` as the portable and the XNNPACK program, static and
/// `--dynamic`, each verified in the ExecuTorch runtime against eager (a
/// dynamic one also at a second size, within the bounds the executorch range
/// fix gives). GPT-2's and Phi-3's XNNPACK programs keep their batch
/// dynamic only with the worker's fix of ExecuTorch 1.4.1's edge verifier
/// (`lower.list_returns_verified_whole`: their q/k/v split returns a list).
fn runs_in_the_executorch_runtime(arch: &str, set: &str, task: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    for (program, name) in [(PORTABLE, "portable"), (XNNPACK, "xnnpack")] {
        for dynamic in [false, true] {
            let out = dir.path().join(format!("{arch}-{name}-{dynamic}.pte"));
            let mut flags = vec!["--verify"];
            if dynamic {
                flags.push("--dynamic");
            }
            if let Some(task) = task {
                flags.extend(["--task", task]);
            }
            let what = format!("{arch} {name} dynamic={dynamic}");
            let stdout = export(dir.path(), program, arch, set, &out, &flags);
            if program == PORTABLE {
                // Emitted by the host: the edge decomposition, then hfx's own lowering and memory plan.
                assert!(
                    stdout.contains("stage edge-decompose")
                        && stdout.contains("stage pte-emit")
                        && stdout.contains("planned arena"),
                    "{what}: {stdout}"
                );
            } else {
                assert!(
                    stdout.contains("stage lower")
                        && stdout.contains("delegated")
                        && stdout.contains("replayed"),
                    "{what}: {stdout}"
                );
                // Every architecture here leaves the third edge retrace nothing to decompose.
                assert!(
                    !stdout.contains("; 0 retrace(s) that change nothing skipped")
                        && stdout.contains("retrace(s) that change nothing skipped"),
                    "{what}: {stdout}"
                );
            }
            assert_eq!(
                stdout.matches("verify inputs").count(),
                if dynamic { 2 } else { 1 },
                "{what}: {stdout}"
            );
            assert!(!stdout.contains("MISMATCH"), "{what}: {stdout}");
            // A .pte: the flatbuffer's identifier at bytes 4..8.
            let bytes = std::fs::read(&out).unwrap();
            assert_eq!(&bytes[4..8], b"ET12", "{what}: not an ExecuTorch program");
            if dynamic {
                assert!(
                    stdout.contains("executorch-fix-range-constraints")
                        && stdout.contains("changed     1"),
                    "{what}: {stdout}"
                );
                if program == PORTABLE {
                    // The provenance named-data entry, read back by ExecuTorch's own deserializer.
                    run_python(
                        "check_pte_provenance.py",
                        &[out.to_str().unwrap(), "executorch-fix-range-constraints"],
                    );
                }
            }
        }
    }
    assert_no_scratch_left(dir.path());
}

macro_rules! architecture {
    ($test:ident, $arch:literal, $set:expr) => {
        architecture!($test, $arch, $set, None);
    };
    ($test:ident, $arch:literal, $set:expr, $task:expr) => {
        #[test]
        fn $test() {
            runs_in_the_executorch_runtime($arch, $set, $task);
        }
    };
}

// Llama's cache is an output; GPT-2's views after attention ExecuTorch refuses
// without the reshape and SDPA patches; Phi-3's partial rotary slices a whole
// axis (an alias); Qwen3-MoE is built with grouped experts, which neither
// XNNPACK nor the portable kernels run (`_grouped_mm`, `histc`, `sort`): the
// backend preparation runs them as `batched_mm`.
architecture!(llama_runs_in_the_executorch_runtime, "llama", LLAMA);
architecture!(qwen3_runs_in_the_executorch_runtime, "qwen3", QWEN3);
architecture!(gemma_runs_in_the_executorch_runtime, "gemma", GEMMA);
architecture!(phi3_runs_in_the_executorch_runtime, "phi3", PHI3);
architecture!(gpt2_runs_in_the_executorch_runtime, "gpt2", GPT2);
architecture!(bert_runs_in_the_executorch_runtime, "bert", BERT);
architecture!(vit_runs_in_the_executorch_runtime, "vit", VIT);
architecture!(
    whisper_encoder_runs_in_the_executorch_runtime,
    "whisper",
    WHISPER,
    Some("WhisperEncoder")
);
architecture!(qwen3_moe_runs_in_the_executorch_runtime, "qwen3_moe", QWEN3_MOE);

/// `-o DIR` writes the reference's ExecuTorch folder (`model.pte`,
/// `export.json` with `export_format` executorch, the configs), which
/// `ExportedModel.from_pretrained` runs unchanged, returning the model's own
/// output type that matches eager; the export config names the program.
#[test]
fn an_executorch_export_folder_loads_in_the_reference_runtime() {
    let dir = tempfile::tempdir().unwrap();
    for (program, name) in [(PORTABLE, "portable"), (XNNPACK, "xnnpack")] {
        let folder = dir.path().join(format!("llama-{name}"));
        export(dir.path(), program, "llama", LLAMA, &folder, &["--dynamic"]);
        for file in ["model.pte", "export.json", "config.json"] {
            assert!(folder.join(file).exists(), "{name}: no {file}");
        }
        let manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(folder.join("export.json")).unwrap())
                .unwrap();
        assert_eq!(manifest["export_format"], "executorch");
        let metadata = &manifest["components"]["model"]["metadata"];
        assert_eq!(metadata["export_config"]["backend"], name);
        assert!(metadata["packages"]["executorch"].is_string(), "{metadata}");
        // Provenance: hfx's version and the plugins that served the backend, with their hashes.
        assert_eq!(metadata["hfx"]["version"], env!("CARGO_PKG_VERSION"));
        let plugins = metadata["hfx"]["plugins"].as_array().unwrap();
        let range_fix = plugins
            .iter()
            .find(|p| p["name"] == "executorch-fix-range-constraints")
            .unwrap_or_else(|| panic!("{metadata}"));
        assert_eq!(range_fix["sha256"].as_str().map(str::len), Some(64), "{metadata}");
        assert!(
            !plugins.iter().any(|p| p["name"] == "onnx-fix-alias"),
            "an ONNX-only plugin listed for ExecuTorch: {metadata}"
        );
        let reference = folder.join("model.reference.pt");
        run_python(
            "check_folder.py",
            &[folder.to_str().unwrap(), reference.to_str().unwrap(), "1e-3"],
        );
    }
    assert_no_scratch_left(dir.path());
}

/// The ExecuTorch backend has no translations: its workarounds are FX fixes
/// and patches, and a third party's, loaded from a folder, changes the program
/// hfx emits (and the one ExecuTorch lowers) with no rebuild of hfx (silu
/// becomes x * sigmoid(x) in a tiny Llama's MLP: a different `.pte`, still
/// matching eager).
#[test]
fn a_third_party_fx_fix_changes_the_executorch_program() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = plugin_dir("tests/plugins/executorch-silu-as-sigmoid").display().to_string();
    for (program, name) in [(PORTABLE, "portable"), (XNNPACK, "xnnpack")] {
        let plain = dir.path().join(format!("plain-{name}.pte"));
        let fixed = dir.path().join(format!("fixed-{name}.pte"));
        let stdout = export(dir.path(), program, "llama", LLAMA, &plain, &["--verify"]);
        assert!(!stdout.contains("test-executorch-silu-as-sigmoid"), "{stdout}");
        let stdout = export(
            dir.path(),
            program,
            "llama",
            LLAMA,
            &fixed,
            &["--verify", "--plugins", &plugin],
        );
        let line = stdout
            .lines()
            .find(|l| l.contains("test-executorch-silu-as-sigmoid"))
            .unwrap_or_else(|| panic!("{stdout}"));
        assert!(line.contains("changed     2"), "{name}: one silu per layer: {line}");
        assert!(!stdout.contains("MISMATCH"), "{stdout}");
        assert_ne!(
            std::fs::read(&plain).unwrap(),
            std::fs::read(&fixed).unwrap(),
            "{name}: the fix did not reach the program"
        );
    }
}

/// Sizes used where a kernel takes a tensor (`x + x.shape[1]` with a dynamic
/// sequence): the portable program writes each into a 0-dim tensor at run
/// time (`scalar_tensor`, as ExecuTorch's `SymToTensorPass`), so the program
/// follows the size it is given.
#[test]
fn sizes_used_as_tensors_follow_the_input_in_the_portable_program() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.pte");
    let plugins = root().join("plugins").display().to_string();
    let model = "hfx_test_models:adds_its_length";
    let args = [
        "run",
        "--backend",
        "executorch",
        "--model-fn",
        &format!("python:{model}"),
        "--dynamic",
        "--verify",
        "--plugins",
        &plugins,
        "-o",
        out.to_str().unwrap(),
    ];
    let result = hfx(dir.path(), &args);
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(result.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&result.stderr));
    assert!(stdout.contains("stage pte-emit") && stdout.contains(" ok"), "{stdout}");
    run_python("run_pte_at.py", &[out.to_str().unwrap(), model, "2x5", "3x9", "1x2"]);
}

/// The worker's shortcuts through ExecuTorch's XNNPACK lowering (a partition
/// whose structure was seen takes the delegate graph made of it; a sorted
/// graph is not re-sorted; a retrace that would change nothing, the
/// decomposition after XNNPACK's kept ops are renamed and three op-replacing
/// passes with nothing to replace, is skipped: four on each model here) give
/// ExecuTorch's own `.pte`, byte for byte: a Llama static and dynamic (its
/// second layer's partitions replayed) and a ViT (a convolution's weight is
/// stored channels-last: that partition is never replayed). The skips'
/// conditions see what a retrace would change.
#[test]
fn the_lowering_shortcuts_give_executorchs_own_bytes() {
    run_python(
        "check_lowering_shortcuts.py",
        &["llama", &overrides_json(LLAMA), "dynamic", "5", "4"],
    );
    run_python(
        "check_lowering_shortcuts.py",
        &["llama", &overrides_json(LLAMA), "static", "2", "4"],
    );
    run_python("check_lowering_shortcuts.py", &["vit", &overrides_json(VIT), "static", "1", "4"]);
}

/// What cannot be emitted says so in one line, naming the node and the way
/// out, and writes nothing: an op the portable runtime has no kernel for
/// (`aten.sort`), a delegate of another backend, a `.pte` from ONNX.
#[test]
fn what_cannot_be_emitted_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.pte");
    let plugins = root().join("plugins").display().to_string();
    let llama = ["--model", "llama", "--set", LLAMA];
    for (args, expected) in [
        (
            &[
                "--backend",
                "executorch",
                "--model-fn",
                "python:hfx_test_models:sorts",
                "--plugins",
                &plugins,
            ][..],
            "`aten.sort.default` has no kernel in ExecuTorch's portable runtime",
        ),
        (
            &[&llama[..], &["--backend", "onnx", "--delegate", "xnnpack"]].concat()[..],
            "--delegate xnnpack is an ExecuTorch delegate",
        ),
        (
            &[&llama[..], &["--backend", "onnx"]].concat()[..],
            "a .pte output needs an ExecuTorch backend",
        ),
    ] {
        let mut all = vec!["run", "-o", out.to_str().unwrap()];
        all.extend(args);
        let result = hfx(dir.path(), &all);
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(!result.status.success() && stderr.contains(expected), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(!out.exists(), "{args:?}: wrote {}", out.display());
    }
    assert_no_scratch_left(dir.path());
}
