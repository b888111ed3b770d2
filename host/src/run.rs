//! `hfx run`: the pipeline, in the order of its stages.
//!
//! trace (the worker, with patch plugins answering) or read a `.pt2` → FX
//! stages of the backend → emit (`.pt2`, IR JSON, or for the ONNX backend:
//! translations → IR fixes → optimization → `.onnx`) → `--verify` (ONNX
//! Runtime against eager, before the artifact moves into place) → an export
//! folder when `-o` names one → the summary. Options come merged from flags
//! and the config file (`cli::merge`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::cli::{merge, LoadedSet, RunArgs, RunOptions};
use crate::graph::Graph;
use crate::plugins::{self, Backend, PluginSet};
use crate::stages::{self, StageReport};

/// What `run` reads: a `.pt2` (kept open: its weights are written from the
/// map) or an IR graph in JSON.
enum Input {
    Pt2(Box<crate::graph::pt2::Pt2>),
    Json,
}

fn is_json(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "json")
}

pub fn run_export(args: RunArgs, verbose: u8) -> Result<()> {
    use crate::graph::pt2::{convert, Pt2};
    let started = Instant::now();
    use std::io::IsTerminal;
    SHOW_PROGRESS.store(verbose > 0 || std::io::stderr().is_terminal(), std::sync::atomic::Ordering::Relaxed);
    let mut options = merge(args)?;
    // Scratch folders of an hfx that died (SIGKILL, power loss) beside the output.
    for stale in Scratch::remove_stale_beside(&options.output) {
        tracing::info!("removed the stale scratch folder {}", stale.display());
    }
    // An export folder: the pipeline writes `model.onnx` / `model.pt2` into a scratch
    // folder beside it, and everything moves in at the end (`finish_folder`).
    let folder = ExportFolder::of(&options)?;
    if let Some(f) = &folder {
        options.output = f.artifact.clone();
        // The reference's runtime reads an ONNX component's weights from `model.onnx.data`.
        options.external_data |= options.backend == Backend::Onnx;
        if let Some(request) = options.trace.as_mut() {
            request.folder = Some(f.scratch.0.clone());
        }
    }
    let output = &options.output;
    // Check what can be emitted before doing any work. A `.pt2` is the
    // dynamo artifact, and for the other backends the program after their FX
    // stages (what their lowering would start from).
    let emit_onnx = match output.extension().and_then(|e| e.to_str()) {
        Some("pt2" | "json") => false,
        Some("onnx") if options.backend == Backend::Onnx => true,
        Some("onnx") => bail!("a .onnx output needs --backend onnx"),
        Some("pte") => bail!("emitting .pte is not implemented yet: write the {} backend's FX-fixed program with `-o OUT.pt2`", options.backend),
        _ => bail!("{}: the output must end in .pt2, .onnx or .json", output.display()),
    };
    if let Some(request) = options.trace.as_mut() {
        // An ONNX export reads the weights once, to emit them: the worker need
        // not pack them into the (intermediate) `.pt2`.
        request.side_weights = emit_onnx;
    }
    // The worker says which upstream versions are installed; plugins resolve against them.
    let mut worker = match &options.trace {
        Some(_) => {
            progress(started, "trace", "starting the worker");
            let mut worker = crate::trace::Worker::start_with(&options.set.python(), Duration::from_secs(120), &options.worker)?;
            worker.on_progress = Some(Box::new(move |p| progress(started, "trace", p.stage.description())));
            Some(worker)
        }
        None => None,
    };
    progress(started, "plugins", "resolving and loading");
    let loaded = options.set.load_with(false, worker.as_ref().map(|w| w.versions()))?;
    // ── The trace stage (or read a traced program); patch plugins answer during it ──
    let traced = match (&options.trace, worker.as_mut()) {
        (Some(request), Some(worker)) => Some(trace_model(worker, request, &loaded, &options, output)?),
        _ => None,
    };
    if !options.verify {
        // The worker holds the model and torch: gone before the host's stages, the
        // pipeline's peak memory is the trace's, not the trace's plus the emission's.
        worker = None;
    }
    let input: &Path = match (&traced, &options.input) {
        (Some(t), _) => &t.program,
        (None, Some(input)) => input,
        (None, None) => unreachable!("merge checks there is an input"),
    };
    progress(started, "read", &input.display().to_string());
    let read_started = Instant::now();
    let (source, mut graph) = if is_json(input) {
        let text = std::fs::read_to_string(input).with_context(|| format!("reading {}", input.display()))?;
        (Input::Json, Graph::from_json(&text).with_context(|| format!("{}", input.display()))?)
    } else {
        let mut pt2 = Pt2::open(input)?;
        if let Some(side) = traced.as_ref().and_then(|t| t.side_weights.as_ref()) {
            pt2.attach_side_weights(side)?;
        }
        let program = pt2.programs.get("model").with_context(|| format!("{}: no `model` program", input.display()))?;
        let graph = convert::to_ir(program).map_err(|e| anyhow::anyhow!("{}: {e}", input.display()))?;
        (Input::Pt2(Box::new(pt2)), graph)
    };
    let read_time = read_started.elapsed();
    // A traced program the stages leave as it was is moved into place as torch wrote it
    // (a `.pt2` output only: ONNX is emitted either way).
    let fingerprint = (traced.is_some() && !emit_onnx).then(|| graph.fingerprint());
    let nodes_before = graph.node_count();
    progress(started, "fx stages", &format!("{} nodes", nodes_before));
    let reports = stages::run_fx_stages(&loaded.runtime, &loaded.set.plugins, options.backend, &mut graph, options.on_plugin_error)?;
    // ── Emit ──
    progress(started, "emit", &output.display().to_string());
    let emit_started = Instant::now();
    let unchanged = fingerprint.is_some_and(|f| f == graph.fingerprint());
    let mut reports = reports;
    match (&source, is_json(output)) {
        (Input::Pt2(pt2), false) if emit_onnx => {
            // With --verify the model is checked in a scratch folder and moved
            // into place only when it matches eager.
            let scratch = options.verify.then(|| Scratch::beside(output, "verify")).transpose()?;
            // Same file name as the output: an external data file is referenced by name.
            let target = match &scratch {
                Some(s) => s.0.join(output.file_name().context("the output has no file name")?),
                None => output.clone(),
            };
            let output_names = traced.as_ref().map(|t| t.output_names.clone()).unwrap_or_default();
            reports.extend(emit_onnx_model(pt2, &mut graph, &loaded, &options, started, &target, output_names)?);
            if options.verify {
                let reference = match &traced {
                    Some(t) => t.reference.clone(),
                    None => reference_path(options.input.as_deref().expect("an input when nothing is traced")),
                };
                progress(started, "verify", "ONNX Runtime against eager PyTorch");
                let worker = match worker.as_mut() {
                    Some(w) => w,
                    None => worker.insert(crate::trace::Worker::start_with(&options.set.python(), Duration::from_secs(120), &options.worker)?),
                };
                verify_onnx(worker, &target, &reference, options.trace_deadline)?;
                let data = crate::onnx::emit::data_file(&target);
                if data.exists() {
                    let to = crate::onnx::emit::data_file(output);
                    crate::atomic::move_into_place(&data, &to).with_context(|| format!("writing {}", to.display()))?;
                }
                crate::atomic::move_into_place(&target, output).with_context(|| format!("writing {}", output.display()))?;
            }
        }
        (Input::Json, false) if emit_onnx => bail!("ONNX is emitted from a .pt2 (its weights), not from IR JSON"),
        (Input::Pt2(_), false) if unchanged => {
            let traced = traced.as_ref().expect("a fingerprint is taken of traced programs only");
            crate::atomic::move_into_place(&traced.program, output).with_context(|| format!("writing {}", output.display()))?;
        }
        (_, true) => crate::atomic::write_bytes_atomically(output, graph.to_json().as_bytes())
            .with_context(|| format!("writing {}", output.display()))?,
        (Input::Pt2(pt2), false) => {
            let program = convert::from_ir(&graph, &pt2.programs["model"]).map_err(|e| anyhow::anyhow!("{}: {e}", output.display()))?;
            pt2.write(output, &[("model".to_string(), program)].into())?;
        }
        (Input::Json, false) => bail!("a graph read from JSON can only be written as JSON (-o OUT.json)"),
    }
    let emit_time = emit_started.elapsed();
    if let Some(traced) = &traced {
        // The eager reference goes next to the artifact, for verification.
        let reference = reference_path(output);
        std::fs::rename(&traced.reference, &reference).with_context(|| format!("writing {}", reference.display()))?;
        println!("traced {} in {:.1} s; eager reference: {}", traced.model_class, traced.seconds, reference.display());
        let (seconds, peaks) = (&traced.times, &traced.peaks);
        println!(
            "stage {:<18} {:>8.2} s   import {:.2} s, build {:.2} s, eager {:.2} s, torch.export {:.2} s, save {:.2} s{}; {} output(s)",
            "trace",
            traced.seconds,
            seconds.import,
            seconds.build,
            seconds.eager,
            seconds.export,
            seconds.save,
            if traced.side_weights.is_some() { " (weights beside the program)" } else { "" },
            traced.outputs
        );
        println!(
            "  worker peak RSS {:.0} MiB (after import {:.0}, build {:.0}, torch.export {:.0}, save {:.0})",
            peaks.save, peaks.import, peaks.build, peaks.export, peaks.save
        );
        for (plugin, calls) in &traced.patched {
            println!("  patch {plugin:<30} answered {calls} call(s)");
        }
    }
    println!("stage {:<18} {:>8.2} ms  {nodes_before} nodes", "read", read_time.as_secs_f64() * 1e3);
    print_summary(&reports, &loaded.set, verbose);
    println!("stage {:<18} {:>8.2} ms", "emit", emit_time.as_secs_f64() * 1e3);
    if let Some(folder) = folder {
        let metadata = match traced.as_ref() {
            Some(t) => serde_json::to_value(&t.export_metadata)?,
            None => serde_json::Value::Null,
        };
        let versions = loaded.set.upstream.clone();
        let dir = folder.dir.clone();
        folder.finish(&options, metadata, &versions)?;
        println!("nodes: {nodes_before} -> {}; wrote {} in {:.1} s", graph.node_count(), dir.display(), started.elapsed().as_secs_f64());
        return Ok(());
    }
    println!("nodes: {nodes_before} -> {}; wrote {} in {:.1} s", graph.node_count(), output.display(), started.elapsed().as_secs_f64());
    Ok(())
}

/// The component files an export folder may hold, of every backend.
const FOLDER_COMPONENTS: &[&str] = &["model.onnx", "model.onnx.data", "model.pt2"];

/// `-o DIR`: what the reference's `ExportedModel.save_pretrained` writes, so
/// `ExportedModel.from_pretrained(DIR)` loads and runs an hfx export: the
/// component (`model.onnx` + `model.onnx.data`, or `model.pt2`), `export.json`
/// (schema 1: format, component file and metadata), `config.json` and
/// `generation_config.json`. Written in a scratch folder beside DIR; each
/// file is renamed into DIR at the end.
struct ExportFolder {
    dir: PathBuf,
    scratch: Scratch,
    artifact: PathBuf,
}

impl ExportFolder {
    fn of(options: &RunOptions) -> Result<Option<ExportFolder>> {
        let out = &options.output;
        if out.extension().is_some() && !out.is_dir() {
            return Ok(None);
        }
        if options.trace.is_none() {
            bail!("an export folder records the traced model's metadata: trace it (--model, --model-dir, --model-fn)");
        }
        let file = match options.backend {
            Backend::Onnx => "model.onnx",
            Backend::Dynamo => "model.pt2",
            other => bail!("an export folder for the {other} backend is not implemented yet"),
        };
        let scratch = Scratch::beside(out, "folder")?;
        let artifact = scratch.0.join(file);
        Ok(Some(ExportFolder { dir: out.clone(), scratch, artifact }))
    }

    fn finish(self, options: &RunOptions, mut metadata: serde_json::Value, versions: &plugins::Versions) -> Result<()> {
        use serde_json::json;
        let onnx = options.backend == Backend::Onnx;
        let required: &[&str] = if onnx { &["torch", "onnx", "onnxscript"] } else { &["torch"] };
        let packages: serde_json::Map<String, serde_json::Value> = std::iter::once("transformers")
            .chain(required.iter().copied())
            .filter_map(|p| Some((p.to_string(), json!(versions.get(p)?))))
            .collect();
        let trace = options.trace.as_ref().expect("folders are traced");
        let mut config = json!({
            "dynamic": trace.dynamic,
            "dynamic_shapes": if trace.dynamic_shapes.is_empty() { serde_json::Value::Null } else { json!(trace.dynamic_shapes) },
            "export_format": if onnx { "onnx" } else { "dynamo" },
            "prefer_deferred_runtime_asserts_over_guards": !trace.dynamic_shapes.is_empty(),
            "strict": false,
        });
        if onnx {
            config["opset_version"] = json!(options.opset);
            config["optimize"] = json!(!options.no_optimize);
            config["ort_fusions"] = serde_json::Value::Null;
        }
        metadata["packages"] = json!(packages);
        metadata["export_config"] = config;
        let file = self.artifact.file_name().and_then(|n| n.to_str()).unwrap_or("model.onnx").to_string();
        let manifest = json!({
            "schema_version": 1,
            "export_format": if onnx { "onnx" } else { "dynamo" },
            "components": {"model": {"file": file, "metadata": metadata}},
        });
        let text = serde_json::to_string_pretty(&manifest)? + "\n";
        crate::atomic::write_bytes_atomically(&self.scratch.0.join("export.json"), text.as_bytes())?;
        std::fs::create_dir_all(&self.dir).with_context(|| format!("creating {}", self.dir.display()))?;
        let mut written = Vec::new();
        for entry in std::fs::read_dir(&self.scratch.0)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                let to = self.dir.join(entry.file_name());
                std::fs::rename(entry.path(), &to).with_context(|| format!("writing {}", to.display()))?;
                written.push(entry.file_name());
            }
        }
        // A folder exported before with another backend (or with its weights
        // inline): the component files hfx names that this export did not write go.
        for stale in FOLDER_COMPONENTS.iter().filter(|&&f| !written.iter().any(|w| w.as_os_str() == std::ffi::OsStr::new(f))) {
            let path = self.dir.join(stale);
            if path.is_file() {
                std::fs::remove_file(&path).with_context(|| format!("removing the stale {}", path.display()))?;
            }
        }
        Ok(())
    }
}

/// Whether progress lines are shown: on a terminal, or with `-v`.
static SHOW_PROGRESS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// ONNX stages 4 and 5 (translations, IR fixes), then the model, written atomically.
fn emit_onnx_model(
    pt2: &crate::graph::pt2::Pt2,
    graph: &mut Graph,
    loaded: &LoadedSet,
    options: &RunOptions,
    started: Instant,
    target: &Path,
    output_names: Vec<String>,
) -> Result<Vec<StageReport>> {
    use crate::onnx::emit;
    use crate::stages::{onnx_ir_fix, onnx_translation};
    let program = pt2.programs.get("model").context("no `model` program")?;
    let roles = onnx_translation::input_roles(program);
    progress(started, "onnx", "translations");
    let translations = stages::select(&loaded.set.plugins, options.backend, plugins::PluginKind::OnnxTranslation);
    let (mut builder, translated) = onnx_translation::run(&loaded.runtime, &translations, graph, &roles, options.opset)?;
    progress(started, "onnx", "IR fixes");
    let ir_fixes = stages::select(&loaded.set.plugins, options.backend, plugins::PluginKind::OnnxIrFix);
    let mut model = crate::onnx::Model { nodes: std::mem::take(&mut builder.nodes) };
    let fixed = onnx_ir_fix::run(&loaded.runtime, &ir_fixes, &mut model, "onnx-ir-fixes", options.on_plugin_error)?;
    builder.nodes = model.nodes;
    let metadata = onnx_metadata(loaded, &[&translated, &fixed]);
    let parts = emit::ModelParts { graph, roles: &roles, pt2, builder: &builder, metadata, graph_name: "main_graph".into(), output_names, optimize: !options.no_optimize };
    let emit::Planned { model, initializers, optimized } = emit::plan(&parts)?;
    if let Some(o) = &optimized {
        println!(
            "stage {:<18} identities removed {}, duplicates merged {}, nodes folded {}, weights stored transposed {}, \
             constants lifted {}, dead nodes removed {}; {} nodes",
            "onnx-optimize",
            o.identities_removed,
            o.merged,
            o.folding.folded,
            o.folding.transposed,
            o.folding.lifted,
            o.dead_removed,
            model.graph.as_ref().map_or(0, |g| g.node.len())
        );
    }
    let weights = emit::weight_bytes(&initializers);
    let storage = if options.external_data || weights >= emit::PROTOBUF_LIMIT {
        emit::WeightStorage::External
    } else {
        emit::WeightStorage::Embedded
    };
    emit::write(target, model, initializers, storage)?;
    Ok(vec![translated, fixed])
}

/// `--verify`: the model in ONNX Runtime on the recorded inputs (and a second
/// size for dynamic exports) against eager PyTorch, atol/rtol 1e-3. Prints the
/// max abs/rel error per output; any output out of tolerance is an error.
fn verify_onnx(worker: &mut crate::trace::Worker, model: &Path, reference: &Path, deadline: Duration) -> Result<()> {
    if !reference.exists() {
        bail!("--verify: no eager reference at {} (hfx writes one when it traces)", reference.display());
    }
    let params = crate::trace::protocol::Verify { onnx: model.into(), reference: reference.into(), second_size: true, atol: 1e-3, rtol: 1e-3 };
    let answer = worker.request(&params, deadline)?;
    let mut failed = Vec::new();
    for check in &answer.checks {
        let inputs = serde_json::to_string(&check.inputs)?;
        println!("verify inputs {inputs}");
        for (i, output) in check.outputs.iter().enumerate() {
            println!(
                "  output {i:<3} {:<18} max abs {:>9.2e}  max rel {:>9.2e}  {}",
                serde_json::to_string(&output.shape)?,
                output.max_abs.unwrap_or(f64::NAN),
                output.max_rel.unwrap_or(f64::NAN),
                if output.ok { "ok" } else { "MISMATCH" }
            );
            if !output.ok {
                failed.push(format!("output {i} for inputs {inputs}"));
            }
        }
    }
    if !failed.is_empty() {
        bail!("--verify: ONNX Runtime differs from eager PyTorch beyond atol/rtol 1e-3 ({}); the output was not written", failed.join("; "));
    }
    Ok(())
}

/// `metadata_props`: who wrote the model, against which upstream versions,
/// with which plugins, and what each changed.
fn onnx_metadata(loaded: &LoadedSet, reports: &[&StageReport]) -> Vec<(String, String)> {
    let mut metadata = vec![("hfx.version".to_string(), env!("CARGO_PKG_VERSION").to_string())];
    for (package, version) in &loaded.set.upstream {
        metadata.push((format!("hfx.upstream.{package}"), version.clone()));
    }
    for plugin in &loaded.set.plugins {
        let p = &plugin.manifest.plugin;
        metadata.push((format!("hfx.plugin.{}", p.name), format!("{} sha256:{}", p.version, plugin.component_sha256)));
    }
    for report in reports {
        for (plugin, counts) in &report.plugins {
            metadata.push((format!("hfx.stage.{}.{plugin}", report.stage), format!("changed {}", counts.changed)));
        }
    }
    metadata
}

/// One progress line on stderr (stdout is the summary).
fn progress(started: Instant, stage: &str, what: &str) {
    if SHOW_PROGRESS.load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!("[{:>6.1} s] {stage}: {what}", started.elapsed().as_secs_f64());
    }
}

/// `out.pt2` → `out.reference.pt`.
fn reference_path(output: &Path) -> PathBuf {
    output.with_extension("reference.pt")
}

/// A program traced into a scratch folder beside the output (removed on drop).
struct Traced {
    _scratch: Scratch,
    program: PathBuf,
    reference: PathBuf,
    model_class: String,
    seconds: f64,
    /// The worker's own times per step.
    times: crate::trace::protocol::StepSeconds,
    /// The worker's peak resident memory (MiB) at the end of each step.
    peaks: crate::trace::protocol::StepPeaks,
    /// Where the weights are when the worker wrote them beside the `.pt2`.
    side_weights: Option<PathBuf>,
    outputs: u64,
    /// The model output's leaf names (`logits`, `cache.layers.0.keys`).
    output_names: Vec<String>,
    /// The reference's `ExportMetadata` fields the worker recorded.
    export_metadata: crate::trace::protocol::ExportMetadata,
    /// Patch plugins and how many calls each answered.
    patched: Vec<(String, u64)>,
}

/// A scratch folder, `.hfx-<what>-<pid>`: removed on drop, and by the
/// SIGINT / SIGTERM handler (`trace::interrupt`) when hfx is stopped.
struct Scratch(PathBuf);

impl Scratch {
    fn parent(output: &Path) -> &Path {
        output.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
    }

    /// A fresh folder beside `output` (same file system: its files rename into place).
    fn beside(output: &Path, what: &str) -> Result<Scratch> {
        let dir = Self::parent(output).join(format!(".hfx-{what}-{}", std::process::id()));
        crate::trace::interrupt::create_scratch(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Scratch(dir))
    }

    /// Removes the scratch folders beside `output` whose hfx is no longer running.
    fn remove_stale_beside(output: &Path) -> Vec<PathBuf> {
        crate::trace::interrupt::remove_stale_scratch(Self::parent(output))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        crate::trace::interrupt::remove_scratch(&self.0);
    }
}

fn trace_model(
    worker: &mut crate::trace::Worker,
    request: &crate::trace::TraceRequest,
    loaded: &LoadedSet,
    options: &RunOptions,
    output: &Path,
) -> Result<Traced> {
    let scratch = Scratch::beside(output, "trace")?;
    let program = scratch.0.join("model.pt2");
    let reference = scratch.0.join("reference.pt");
    let patch_plugins = stages::select(&loaded.set.plugins, options.backend, plugins::PluginKind::Patch);
    let mut sessions: Vec<plugins::Session> =
        patch_plugins.iter().map(|p| plugins::Session::new(&loaded.runtime, p, "patches")).collect();
    let result = crate::trace::trace(worker, request, &mut sessions, &program, &reference, options.trace_deadline)?;
    let t = &result.seconds;
    let seconds = t.import + t.build + t.eager + t.export + t.save;
    let patched: Vec<(String, u64)> = sessions.iter().map(|s| (s.plugin().name().to_string(), s.calls)).collect();
    let side_weights = result.side_weights.then(|| crate::graph::pt2::side_weights_path(&program));
    Ok(Traced {
        _scratch: scratch,
        program,
        reference,
        model_class: result.model_class,
        seconds,
        times: result.seconds,
        peaks: result.peak_rss_mib,
        side_weights,
        outputs: result.outputs,
        output_names: result.output_names,
        export_metadata: result.export_metadata,
        patched,
    })
}

fn print_summary(reports: &[StageReport], set: &PluginSet, verbose: u8) {
    for report in reports {
        println!(
            "stage {:<18} {:>8.2} ms  dead code removed: {}",
            report.stage,
            report.elapsed.as_secs_f64() * 1e3,
            report.dead_code_removed
        );
        for (plugin, c) in &report.plugins {
            println!("  {plugin:<30} calls {:>5}  changed {:>5}  failed {:>3}", c.calls, c.changed, c.failed);
        }
    }
    if !set.skipped.is_empty() {
        println!("skipped plugins: {}", set.skipped.len());
        if verbose > 0 {
            for s in &set.skipped {
                println!("  {} {}: {}", s.found.manifest.plugin.name, s.found.manifest.plugin.version, s.reason);
            }
        }
    }
}
