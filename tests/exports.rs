//! The export matrix: one trial per row of (architecture, mode, backends).
//!
//! A row is one `hfx run --backend B1,B2,... --model ARCH --verify -o DIR/`:
//! the model is traced once for all its backends, each backend's artifact is
//! verified in its runtime against eager (ONNX Runtime and the ExecuTorch
//! runtime at 1e-3, torch.export at 1e-4; a dynamic export at a second size
//! too) and lands in an export folder of its own (`DIR/B/`). The checks read
//! the run's JSON report (`--report`), the artifacts and `export.json`; then
//! one Python process per row loads every folder with the reference's
//! runtime (`ExportedModel.from_pretrained`, `check_folder.py`) and reads a
//! portable `.pte`'s provenance back (`check_pte_provenance.py`).
//!
//! Rows marked `fast` are the fast tier: one architecture per family
//! (decoder, encoder, vision, audio, encoder-decoder, mixture of experts,
//! state space), every backend and both modes at least once. The other rows
//! are ignored by default and run with `--include-ignored` (`cargo xtask test
//! --full`). `cargo test --test exports -- --list` lists them all.

use std::path::{Path, PathBuf};

use hfx::onnx::proto::ModelProto;
use libtest_mimic::{Arguments, Failed, Trial};
use prost::Message;
use serde_json::Value;

// The it binary's helpers; some of its re-exports are unused here.
#[allow(unused_imports)]
#[path = "it/common.rs"]
mod common;

use common::tiny::*;
use common::{assert_no_scratch_left, hfx_with_python, root};

/// Qwen3-MoE with transformers' grouped_mm experts: under torch.export in
/// float32 the ONNX trace calls its `transformers::grouped_mm_fallback`
/// custom op. An ExecuTorch backend in the run has them run as `batched_mm`
/// (neither XNNPACK nor the portable kernels run `_grouped_mm`, `histc`,
/// `sort`): its rows are separate.
const QWEN3_MOE: &str = "vocab_size=128,hidden_size=32,intermediate_size=64,moe_intermediate_size=16,num_hidden_layers=2,num_attention_heads=4,num_key_value_heads=2,head_dim=8,num_experts=4,num_experts_per_tok=2,experts_implementation=grouped_mm,max_position_embeddings=64";
/// A state-space model: its cache is convolution and recurrent state.
const MAMBA: &str =
    "vocab_size=128,hidden_size=32,num_hidden_layers=2,state_size=8,expand=2,conv_kernel=4";

const ONNX: &str = "onnx";
const DYNAMO: &str = "dynamo";
const PORTABLE: &str = "executorch";
const XNNPACK: &str = "executorch.xnnpack";
const ALL: &[&str] = &[ONNX, DYNAMO, PORTABLE, XNNPACK];
const EXECUTORCH: &[&str] = &[ONNX, PORTABLE, XNNPACK];

#[derive(Clone, Copy)]
struct Row {
    arch: &'static str,
    set: &'static str,
    /// The transformers class, when not the architecture's default.
    task: Option<&'static str>,
    dynamic: bool,
    backends: &'static [&'static str],
    /// In the fast tier (`cargo xtask test`); else only with `--full`.
    fast: bool,
    /// The `--quantize` flags of a quantized cell (its backends ExecuTorch's
    /// XNNPACK program), verified at the scheme's tolerance.
    quantize: &'static [&'static str],
}

const fn row(
    arch: &'static str,
    set: &'static str,
    dynamic: bool,
    backends: &'static [&'static str],
    fast: bool,
) -> Row {
    Row { arch, set, task: None, dynamic, backends, fast, quantize: &[] }
}

/// `--quantize 8da4w` (int8 activations per token, int4 weights in groups of
/// 32, torchao on the eager model before the trace), static, the XNNPACK
/// program; the fast cell also quantizes the embeddings (`embedding_byte`).
const fn q8da4w(arch: &'static str, set: &'static str, fast: bool) -> Row {
    let quantize: &[&str] = if fast {
        &["--quantize", "8da4w", "--quantize-embeddings", "8w"]
    } else {
        &["--quantize", "8da4w"]
    };
    Row { quantize, ..row(arch, set, false, &[XNNPACK], fast) }
}

/// The tolerance `--verify` holds an 8da4w program to, as a fraction of each
/// output's largest eager value.
const TOLERANCE_8DA4W: f64 = hfx::pipeline::verify::EXECUTORCH_8DA4W;

const WHISPER_ENCODER: Option<&str> = Some("WhisperEncoder");

/// Llama's cache is an output; GPT-2's views after attention ExecuTorch
/// refuses without the reshape and SDPA patches, and its and Phi-3's q/k/v
/// split returns a list (a dynamic XNNPACK batch needs the worker's fix of
/// ExecuTorch's edge verifier); Phi-3's partial rotary slices a whole axis (an
/// alias); Gemma scales its embeddings; ViT's patch embedding is a convolution.
const ROWS: &[Row] = &[
    // ── the fast tier: one architecture per family ──
    row("llama", LLAMA, true, ALL, true),
    row("bert", BERT, false, ALL, true),
    row("vit", VIT, true, &[ONNX, XNNPACK], true),
    Row { task: WHISPER_ENCODER, ..row("whisper", WHISPER, false, EXECUTORCH, true) },
    row("t5", T5, true, &[ONNX, DYNAMO], true),
    row("qwen3_moe", QWEN3_MOE, true, &[ONNX], true),
    row("mamba", MAMBA, false, &[ONNX, DYNAMO], true),
    q8da4w("llama", LLAMA, true),
    // ── the full tier: every architecture, backend and mode ──
    row("llama", LLAMA, false, ALL, false),
    row("qwen3", QWEN3, false, ALL, false),
    row("qwen3", QWEN3, true, ALL, false),
    row("mistral", LLAMA, false, &[ONNX], false),
    row("mistral", LLAMA, true, &[ONNX], false),
    row("gemma", GEMMA, false, EXECUTORCH, false),
    row("gemma", GEMMA, true, EXECUTORCH, false),
    row("phi3", PHI3, false, EXECUTORCH, false),
    row("phi3", PHI3, true, EXECUTORCH, false),
    row("gpt2", GPT2, false, ALL, false),
    row("gpt2", GPT2, true, ALL, false),
    row("bert", BERT, true, ALL, false),
    row("roberta", BERT, false, &[ONNX], false),
    row("roberta", BERT, true, &[ONNX], false),
    row("t5", T5, false, &[ONNX, DYNAMO], false),
    Row { task: WHISPER_ENCODER, ..row("whisper", WHISPER, true, EXECUTORCH, false) },
    row("qwen3_moe", QWEN3_MOE, false, &[ONNX], false),
    row("qwen3_moe", QWEN3_MOE, false, &[PORTABLE, XNNPACK], false),
    row("qwen3_moe", QWEN3_MOE, true, &[PORTABLE, XNNPACK], false),
    row("vit", VIT, false, ALL, false),
    row("vit", VIT, true, &[DYNAMO, PORTABLE], false),
    // Cohere's interleaved rotary stacks over a dynamic batch and sequence.
    row("cohere", LLAMA, true, &[XNNPACK], false),
    // ── the ExecuTorch matrix's architectures, 8da4w ──
    q8da4w("qwen3", QWEN3, false),
    q8da4w("gemma", GEMMA, false),
    q8da4w("phi3", PHI3, false),
    q8da4w("gpt2", GPT2, false),
    q8da4w("bert", BERT, false),
    Row { task: WHISPER_ENCODER, ..q8da4w("whisper", WHISPER, false) },
    q8da4w("qwen3_moe", QWEN3_MOE, false),
    q8da4w("vit", VIT, false),
];

impl Row {
    fn name(&self) -> String {
        let mode = if self.dynamic { "dynamic" } else { "static" };
        let scheme = match self.quantize {
            [] => String::new(),
            flags => format!(
                "::{}",
                flags.iter().skip(1).step_by(2).copied().collect::<Vec<_>>().join("+")
            ),
        };
        format!("{}::{mode}::{}{scheme}", self.arch, self.backends.join("+"))
    }

    /// Where `backend`'s export folder and report are, under `dir`.
    fn folder(&self, dir: &Path, backend: &str) -> PathBuf {
        match self.backends {
            [_] => dir.join("export"),
            _ => dir.join("export").join(backend),
        }
    }

    fn report(&self, dir: &Path, backend: &str) -> PathBuf {
        match self.backends {
            [_] => dir.join("report.json"),
            _ => dir.join(format!("report.{backend}.json")),
        }
    }

    fn run(&self) -> Result<(), Failed> {
        let dir = tempfile::tempdir()?;
        let out = format!("{}/", dir.path().join("export").display());
        let report = dir.path().join("report.json");
        let backends = self.backends.join(",");
        let plugins = root().join("plugins");
        let mut args = vec!["run", "--backend", &backends, "--model", self.arch, "--set", self.set];
        args.extend(["--verify", "-o", &out, "--report", report.to_str().unwrap()]);
        args.extend(["--plugins", plugins.to_str().unwrap()]);
        if let Some(task) = self.task {
            args.extend(["--task", task]);
        }
        if !self.dynamic {
            args.push("--static");
        }
        args.extend(self.quantize);
        let result = hfx_with_python(dir.path(), &args);
        let stdout = String::from_utf8_lossy(&result.stdout);
        if !result.status.success() {
            return Err(format!("{}\n{stdout}", String::from_utf8_lossy(&result.stderr)).into());
        }
        // The trace is reported once, with the first backend; the intermediate
        // `.pt2` goes without its weights (emitted from the worker's side file).
        check(stdout.lines().filter(|l| l.starts_with("traced ")).count() == 1, || {
            format!("one trace for every backend: {stdout}")
        })?;
        check(stdout.contains("(weights beside the program)"), || stdout.to_string())?;
        // The summary states the quantized program's scheme and tolerance.
        let scheme = match self.quantize {
            [_, linear, _, embeddings] => format!("{linear}, embeddings {embeddings} tolerance"),
            [_, linear] => format!("{linear} tolerance"),
            _ => String::new(),
        };
        check(stdout.contains(&scheme), || format!("no `{scheme}`: {stdout}"))?;
        let mut python_checks: Vec<String> = Vec::new();
        for (i, backend) in self.backends.iter().enumerate() {
            let folder = self.folder(dir.path(), backend);
            let report: Value = read_json(&self.report(dir.path(), backend))?;
            let shared = report["trace_shared_with"].as_str();
            let first = (i > 0).then_some(self.backends[0]);
            check(shared == first, || format!("{backend}: the trace shared with {shared:?}"))?;
            self.backend_checks(backend, &folder, &report)
                .map_err(|e| format!("{backend}: {}", e.message().unwrap_or_default()))?;
            // A quantized program is held to a share of each output's largest eager value.
            let atol = match (*backend, self.quantize) {
                (_, [_, ..]) => format!("{TOLERANCE_8DA4W}xmax"),
                (DYNAMO, _) => "1e-4".into(),
                _ => "1e-3".into(),
            };
            let reference = folder.join("model.reference.pt");
            python_checks.extend(
                ["--", "check_folder.py", path_str(&folder), path_str(&reference), atol.as_str()]
                    .map(String::from),
            );
            if *backend == PORTABLE && self.dynamic {
                // The provenance named-data entry, read back by ExecuTorch's own deserializer.
                let pte = folder.join("model.pte");
                python_checks.extend(
                    [
                        "--",
                        "check_pte_provenance.py",
                        path_str(&pte),
                        "executorch-fix-range-constraints",
                    ]
                    .map(String::from),
                );
            }
        }
        let checks: Vec<&str> = python_checks.iter().skip(1).map(String::as_str).collect();
        common::try_python("run_checks.py", &checks)?;
        assert_no_scratch_left(dir.path());
        Ok(())
    }

    /// What one backend's export folder and report must show.
    fn backend_checks(&self, backend: &str, folder: &Path, report: &Value) -> Result<(), Failed> {
        let [component] = report["components"].as_array().map(Vec::as_slice).unwrap_or_default()
        else {
            return Err(format!("not one component: {report}").into());
        };
        // Verified at the traced size, and at a second one when dynamic.
        let parity = &component["parity"];
        let sizes = parity["checks"].as_array().map_or(0, Vec::len);
        check(sizes == if self.dynamic { 2 } else { 1 }, || format!("{sizes} size(s): {parity}"))?;
        let all_ok = parity["checks"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["outputs"].as_array().into_iter().flatten())
            .all(|o| o["ok"] == true);
        check(all_ok, || format!("a mismatch: {parity}"))?;
        if !self.quantize.is_empty() {
            // Verified against the quantized eager model at the scheme's tolerance.
            check(parity["tolerance"].as_f64() == Some(TOLERANCE_8DA4W), || parity.to_string())?;
        }

        let (artifact, format) = match backend {
            ONNX => ("model.onnx", "onnx"),
            DYNAMO => ("model.pt2", "dynamo"),
            _ => ("model.pte", "executorch"),
        };
        for file in [artifact, "export.json", "config.json", "model.reference.pt"] {
            check(folder.join(file).is_file(), || format!("no {file} in {}", folder.display()))?;
        }
        let manifest = read_json(&folder.join("export.json"))?;
        check(manifest["export_format"] == format, || manifest.to_string())?;
        let metadata = &manifest["components"]["model"]["metadata"];
        // Provenance, which the reference's loader skips: hfx's version and the plugins that served the backend.
        check(metadata["hfx"]["version"] == env!("CARGO_PKG_VERSION"), || metadata.to_string())?;
        let plugins = metadata["hfx"]["plugins"].as_array().cloned().unwrap_or_default();
        let served = |name: &str| plugins.iter().find(|p| p["name"] == name);

        match backend {
            ONNX => self.onnx_checks(&folder.join(artifact)),
            DYNAMO => {
                check(served("dynamo-patch-sdpa-math-cpu").is_some(), || metadata.to_string())
            }
            _ => {
                let bytes = std::fs::read(folder.join(artifact))?;
                check(bytes.get(4..8) == Some(b"ET12"), || "not an ExecuTorch program".into())?;
                let program = if backend == XNNPACK { "xnnpack" } else { "portable" };
                check(metadata["export_config"]["backend"] == program, || metadata.to_string())?;
                check(metadata["packages"]["executorch"].is_string(), || metadata.to_string())?;
                check(served("onnx-fix-alias").is_none(), || {
                    format!("an ONNX-only plugin listed for ExecuTorch: {metadata}")
                })?;
                let range_fix = served("executorch-fix-range-constraints");
                check(
                    range_fix.and_then(|p| p["sha256"].as_str()).map(str::len) == Some(64),
                    || metadata.to_string(),
                )?;
                if self.dynamic {
                    let changed = stage_plugin(component, "executorch-fix-range-constraints");
                    check(changed == Some(1), || format!("the range fix changed {changed:?}"))?;
                }
                executorch_lowering(backend, &component["lowering"])
            }
        }
    }

    /// Named as users expect: the forward's arguments, the output's fields,
    /// a dynamic batch axis named `batch`.
    fn onnx_checks(&self, model: &Path) -> Result<(), Failed> {
        use hfx::onnx::proto::{tensor_shape_proto::dimension::Value as Dim, type_proto};
        let model = ModelProto::decode(std::fs::read(model)?.as_slice())?;
        let graph = model.graph.ok_or("no graph")?;
        let first_output = graph.output[0].name.clone().unwrap_or_default();
        check(["logits", "last_hidden_state"].contains(&first_output.as_str()), || {
            format!("first output {first_output}")
        })?;
        let first_input = &graph.input[0];
        let name = first_input.name.as_deref().unwrap_or_default();
        check(["input_ids", "pixel_values", "input_features"].contains(&name), || {
            format!("first input {name}")
        })?;
        if self.dynamic {
            let Some(type_proto::Value::TensorType(t)) =
                first_input.r#type.as_ref().and_then(|t| t.value.as_ref())
            else {
                return Err("the first input is not a tensor".into());
            };
            let batch = t.shape.as_ref().and_then(|s| s.dim.first()).and_then(|d| d.value.clone());
            check(batch == Some(Dim::DimParam("batch".into())), || {
                format!("the batch axis is {batch:?}")
            })?;
        }
        Ok(())
    }
}

/// A `.pte` made by hfx's own emitter (after the worker's edge
/// decomposition) or by ExecuTorch's XNNPACK lowering in the worker, whose
/// shortcuts took effect: every architecture here leaves a retrace that
/// changes nothing to skip, and a dtype check of a graph that passed it.
fn executorch_lowering(backend: &str, lowering: &Value) -> Result<(), Failed> {
    let count = |field: &str| lowering[field].as_u64().unwrap_or(0);
    match backend {
        XNNPACK => check(
            lowering["kind"] == "delegated"
                && count("delegated_nodes") > 0
                && count("partitions") > 0
                && count("retraces_skipped") > 0
                && count("checks_skipped") > 0,
            || format!("lowering: {lowering}"),
        ),
        _ => check(
            lowering["kind"] == "portable" && count("kernel_calls") > 0 && count("arena_bytes") > 0,
            || format!("lowering: {lowering}"),
        ),
    }
}

/// How many nodes `plugin` changed over the component's stages.
fn stage_plugin(component: &Value, plugin: &str) -> Option<u64> {
    component["stages"]
        .as_array()?
        .iter()
        .flat_map(|s| s["plugins"].as_array().into_iter().flatten())
        .find(|p| p["plugin"] == plugin)
        .and_then(|p| p["changed"].as_u64())
}

fn check(ok: bool, why: impl FnOnce() -> String) -> Result<(), Failed> {
    if ok {
        Ok(())
    } else {
        Err(why().into())
    }
}

fn read_json(path: &Path) -> Result<Value, Failed> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temp path")
}

fn main() {
    let args = Arguments::from_args();
    let trials = ROWS
        .iter()
        .map(|&row| Trial::test(row.name(), move || row.run()).with_ignored_flag(!row.fast))
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
