//! Exporting at scale (#16). Weights streamed from a model folder's
//! safetensors: the worker traces the model without reading a weight and hfx
//! writes each one from the checkpoint's bytes into the artifact. Whichever
//! way the weights arrive — streamed, or read by the worker
//! (`--load-weights`, transformers' `from_pretrained`) — the artifact is the
//! same, byte for byte (a `.pt2`'s streamed weights written while the
//! worker traced, the loaded ones after). And one trace for many artifacts: `--backend
//! onnx,dynamo` traces once and writes each backend's export folder.

use std::path::Path;

use crate::common::hfx_with_python as hfx;
use crate::common::*;

/// A model folder of `kind` (`tests/python/model_folders.py`) in `dir`.
fn model_folder(dir: &Path, kind: &str) -> String {
    let folder = dir.join(kind);
    run_python("model_folders.py", &[kind, folder.to_str().unwrap()]);
    folder.display().to_string()
}

/// `hfx run` of `folder` to an export folder `out`; its stdout.
fn export(dir: &Path, backend: &str, folder: &str, out: &Path, extra: &[&str]) -> String {
    let (stdout, _) = export_with_stderr(dir, backend, folder, out, extra);
    stdout
}

/// `hfx run -v` of `folder` to an export folder `out`; its stdout and stderr (progress).
fn export_with_stderr(dir: &Path, backend: &str, folder: &str, out: &Path, extra: &[&str]) -> (String, String) {
    let plugins = [root().join("plugins/dynamo"), root().join("plugins/onnx")];
    let mut args = vec!["run", "--backend", backend, "--model-dir", folder, "-o"];
    let out = format!("{}/", out.display());
    args.push(&out);
    for p in &plugins {
        args.extend(["--plugins", p.to_str().unwrap()]);
    }
    args.extend(extra);
    args.push("-v");
    let result = hfx(dir, &args);
    let (stdout, stderr) = (String::from_utf8_lossy(&result.stdout).to_string(), String::from_utf8_lossy(&result.stderr).to_string());
    assert!(result.status.success(), "{args:?}\n{stdout}\n{stderr}");
    (stdout, stderr)
}

/// The artifact files of an export folder, by name (not the eager reference,
/// which only a run that read the weights writes).
fn artifact_files(folder: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(folder)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.to_string_lossy().ends_with(".reference.pt"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    files.sort();
    files
}

const STREAMED: &str = "weights: streamed from the model folder's checkpoint into the artifact, never read by the worker";

#[test]
fn streamed_weights_give_the_same_artifacts_as_weights_read_by_the_worker() {
    let dir = tempfile::tempdir().unwrap();
    // One file; several shards and their index; tied embeddings stored once, in
    // bfloat16 (exported as float32: converted as they are written); float32
    // exported as bfloat16 (rounded to nearest even, as torch rounds).
    // Each writer (ONNX initializers and external data, `.pt2` entries) sees
    // plain and converted weights. Without weights the worker names the
    // outputs from the trace's own forward, with them from eager's: other
    // output structures (a pooled output, a cache, image logits) check that
    // both give the same names and metadata.
    let cases = [
        ("llama", &["--dynamic"][..], &["onnx", "dynamo"][..]),
        ("llama-sharded", &[][..], &["onnx"][..]),
        ("llama-tied-bf16", &[][..], &["onnx", "dynamo"][..]),
        ("llama", &["--dtype", "bfloat16"][..], &["dynamo"][..]),
        ("bert", &["--dynamic"][..], &["onnx"][..]),
        ("gpt2", &["--dynamic"][..], &["dynamo"][..]),
        ("vit", &[][..], &["onnx"][..]),
    ];
    for (kind, extra, backends) in cases {
        let folder = dir.path().join(kind);
        let folder = if folder.exists() { folder.display().to_string() } else { model_folder(dir.path(), kind) };
        for &backend in backends {
            let streamed = dir.path().join(format!("{kind}-{backend}-{}-streamed", extra.join("")));
            let loaded = dir.path().join(format!("{kind}-{backend}-{}-loaded", extra.join("")));
            let stdout = export(dir.path(), backend, &folder, &streamed, extra);
            assert!(stdout.contains(STREAMED), "{kind} {backend}: {stdout}");
            // The weights were written while torch.export ran (the worker's
            // plan held: a `.pt2`'s archive entries, an ONNX model's
            // initializers, transposed ones and converted ones included).
            assert!(stdout.contains("weight entries written while torch.export ran)"), "{kind} {backend} {extra:?}: {stdout}");
            assert!(stdout.contains("no eager reference"), "{stdout}");
            let with_load: Vec<&str> = extra.iter().copied().chain(["--load-weights"]).collect();
            let stdout = export(dir.path(), backend, &folder, &loaded, &with_load);
            assert!(!stdout.contains("weights: streamed"), "{stdout}");
            let (a, b) = (artifact_files(&streamed), artifact_files(&loaded));
            assert_eq!(a.iter().map(|f| &f.0).collect::<Vec<_>>(), b.iter().map(|f| &f.0).collect::<Vec<_>>(), "{kind} {backend}");
            for ((name, x), (_, y)) in a.iter().zip(&b) {
                assert!(x == y, "{kind} {backend}: {name} differs between streamed and loaded weights");
            }
        }
    }
    assert_no_scratch_left(dir.path());
}

/// `--verify` reads the weights for the eager reference (nothing else does)
/// and the streamed artifact matches it; the `.pt2` loads in torch.
#[test]
fn a_streamed_export_verifies_against_eager() {
    let dir = tempfile::tempdir().unwrap();
    let folder = model_folder(dir.path(), "llama-sharded");
    for backend in ["onnx", "dynamo"] {
        let out = dir.path().join(format!("verified-{backend}"));
        let stdout = export(dir.path(), backend, &folder, &out, &["--dynamic", "--verify"]);
        assert!(stdout.contains("weights: streamed from the model folder's checkpoint into the artifact (read once for the eager reference)"), "{stdout}");
        assert!(stdout.contains("verify inputs") && !stdout.contains("FAIL"), "{stdout}");
    }
}

/// A checkpoint that lacks a parameter of the model (a `BertModel`'s pooler
/// in a masked-LM checkpoint) cannot be streamed: the worker loads the
/// folder as transformers does and the summary says why.
#[test]
fn a_checkpoint_missing_a_parameter_is_loaded_and_the_summary_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let folder = model_folder(dir.path(), "bert-mlm");
    let out = dir.path().join("bert");
    let stdout = export(dir.path(), "onnx", &folder, &out, &["--task", "BertModel"]);
    assert!(stdout.contains("weights: read into the worker: parameter `pooler.dense.weight` has no tensor in the checkpoint"), "{stdout}");
    // The masked-LM model itself streams (its decoder tied to the word embeddings).
    let stdout = export(dir.path(), "onnx", &folder, &dir.path().join("mlm"), &[]);
    assert!(stdout.contains(STREAMED), "{stdout}");
}

/// `--backend onnx,dynamo` traces once (the worker gets one `trace` request:
/// one "traced" line, one progress line of torch.export) and writes each
/// backend's export folder, each verified in its runtime and loadable by the
/// reference's `ExportedModel.from_pretrained`.
#[test]
fn several_backends_share_one_trace() {
    let dir = tempfile::tempdir().unwrap();
    let folder = model_folder(dir.path(), "llama");
    let out = dir.path().join("both");
    let (stdout, stderr) = export_with_stderr(dir.path(), "onnx,dynamo", &folder, &out, &["--dynamic", "--verify"]);
    assert_eq!(stdout.matches("traced LlamaForCausalLM").count(), 1, "{stdout}");
    assert_eq!(stderr.matches("trace: torch.export").count(), 1, "{stderr}");
    assert!(stdout.contains("trace: the onnx export's (one trace for every backend of the run)"), "{stdout}");
    assert_eq!(stdout.matches("verify inputs").count(), 4, "two sizes for each backend: {stdout}");
    for (backend, file) in [("onnx", "model.onnx"), ("dynamo", "model.pt2")] {
        let sub = out.join(backend);
        for name in [file, "export.json", "config.json"] {
            assert!(sub.join(name).exists(), "{} missing", sub.join(name).display());
        }
        let reference = sub.join("model.reference.pt");
        run_python("check_folder.py", &[sub.to_str().unwrap(), reference.to_str().unwrap(), "1e-3"]);
    }
    // A file output cannot hold two artifacts; each backend at most once.
    let result = hfx(dir.path(), &["run", "--backend", "onnx,dynamo", "--model-dir", &folder, "-o", "x.onnx"]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(stderr.contains("each backend writes an export folder of its own") && stderr.trim().lines().count() == 1, "{stderr}");
    let result = hfx(dir.path(), &["run", "--backend", "onnx,onnx", "--model-dir", &folder, "-o", "x/"]);
    assert!(String::from_utf8_lossy(&result.stderr).contains("--backend names onnx twice"));
    assert_no_scratch_left(dir.path());
}

/// `--trace-cache DIR`: a run that would trace the same program again reads
/// it from the cache (the worker gets no `trace` request) and writes the same
/// artifact; the model's files changing, or another trace option, misses.
#[test]
fn a_trace_cache_hit_skips_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let folder = model_folder(dir.path(), "llama");
    let cache = dir.path().join("cache");
    let cache_arg = cache.to_str().unwrap();
    let first = dir.path().join("first");
    let (stdout, stderr) = export_with_stderr(dir.path(), "onnx", &folder, &first, &["--dynamic", "--verify", "--trace-cache", cache_arg]);
    assert!(stderr.contains("trace: torch.export") && !stdout.contains("the trace cache's"), "{stdout}");
    // Another opset, without --verify: the same trace (the entry's eager reference unused).
    let second = dir.path().join("second");
    let (stdout, stderr) = export_with_stderr(dir.path(), "onnx", &folder, &second, &["--dynamic", "--opset", "19", "--trace-cache", cache_arg]);
    assert!(stdout.contains("the trace cache's") && !stderr.contains("trace: torch.export"), "{stdout}\n{stderr}");
    assert_eq!(std::fs::read(first.join("model.onnx.data")).unwrap(), std::fs::read(second.join("model.onnx.data")).unwrap());
    // With --verify: checked against the entry's eager reference.
    let (stdout, stderr) = export_with_stderr(dir.path(), "onnx", &folder, &dir.path().join("verified"), &["--dynamic", "--opset", "18", "--verify", "--trace-cache", cache_arg]);
    assert!(stdout.contains("the trace cache's") && !stderr.contains("trace: torch.export"), "{stdout}\n{stderr}");
    assert!(stdout.contains("verify inputs") && !stdout.contains("FAIL"), "{stdout}");
    // A damaged entry is traced again (and replaced), not an error.
    let entry = std::fs::read_dir(&cache).unwrap().map(|e| e.unwrap().path()).find(|p| p.join("reply.json").exists()).unwrap();
    std::fs::write(entry.join("reply.json"), "{").unwrap();
    let (stdout, stderr) = export_with_stderr(dir.path(), "onnx", &folder, &dir.path().join("damaged"), &["--dynamic", "--trace-cache", cache_arg]);
    assert!(stderr.contains("traced again") && stderr.contains("trace: torch.export") && !stdout.contains("the trace cache's"), "{stderr}");
    let (stdout, _) = export_with_stderr(dir.path(), "onnx", &folder, &dir.path().join("repaired"), &["--dynamic", "--trace-cache", cache_arg]);
    assert!(stdout.contains("the trace cache's"), "the entry was stored again: {stdout}");
    // Static instead of dynamic: another trace.
    let (_, stderr) = export_with_stderr(dir.path(), "onnx", &folder, &dir.path().join("third"), &["--trace-cache", cache_arg]);
    assert!(stderr.contains("trace: torch.export"), "{stderr}");
    // The model folder changed: traced again.
    let config = Path::new(&folder).join("config.json");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": 1e-05")).unwrap();
    let (stdout, stderr) = export_with_stderr(dir.path(), "onnx", &folder, &dir.path().join("fourth"), &["--dynamic", "--trace-cache", cache_arg]);
    assert!(stderr.contains("trace: torch.export") && !stdout.contains("the trace cache's"), "{stdout}");
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 3, "one entry per distinct trace");
    assert_no_scratch_left(dir.path());
}

/// `--verify-layers N`: the whole model is exported without its weights ever
/// being read, and checked on its first N layers (the config truncated, the
/// same checkpoint) in each runtime; the summary says what was verified.
#[test]
fn a_model_is_verified_on_its_first_layers() {
    let dir = tempfile::tempdir().unwrap();
    let folder = model_folder(dir.path(), "llama-sharded");
    let out = dir.path().join("first-layer");
    let stdout = export(dir.path(), "onnx", &folder, &out, &["--dynamic", "--verify-layers", "1"]);
    assert!(stdout.contains(STREAMED), "the whole model's weights stay unread: {stdout}");
    assert!(stdout.contains("verified on the model's first 1 layers"), "{stdout}");
    assert_eq!(stdout.matches("verify inputs").count(), 2, "{stdout}");
    assert!(!stdout.contains("FAIL") && out.join("model.onnx").exists(), "{stdout}");
    for (extra, why) in [
        (&["--verify-layers", "1", "--verify"][..], "drop --verify"),
        (&["--verify-layers", "0"][..], "checks nothing"),
    ] {
        let mut args = vec!["run", "--backend", "onnx", "--model-dir", folder.as_str(), "-o", "x/"];
        args.extend(extra);
        let result = hfx(dir.path(), &args);
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(!result.status.success() && stderr.contains(why) && stderr.trim().lines().count() == 1, "{stderr}");
    }
    let result = hfx(dir.path(), &["run", "--backend", "onnx", "--model", "llama", "--verify-layers", "1", "-o", "x/"]);
    assert!(String::from_utf8_lossy(&result.stderr).contains("give --model-dir or --model-id"));
    assert_no_scratch_left(dir.path());
}
