//! `hfx run`: the pipeline, one step per module, in stage order.
//!
//! trace (the worker, with patch plugins answering; or read a `.pt2` / IR
//! JSON) → the backend's FX stages → emit (`.pt2`, IR JSON, or for ONNX:
//! translations → IR fixes → generic passes → `.onnx`) → verify (the artifact
//! in its runtime against eager, before it moves into place) → the export folder.
//! [`run`] takes options fixed once ([`RunOptions`]) and returns a
//! [`RunSummary`] the caller prints; it never prints the summary itself.

pub mod calibrate;
pub mod emit;
pub mod folder;
pub mod genai;
pub mod generate;
pub mod generation;
pub mod hub_download;
pub mod model_id;
pub mod options;
pub mod prewrite;
pub mod progress;
pub mod scratch;
pub mod summary;
pub mod trace;
pub mod trace_cache;
pub mod verify;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

pub use options::{
    Artifact, Destination, OnnxOptions, OpenvinoOptions, Pte, PteOptions, RunOptions, Source,
    Target, Trace,
};
pub use progress::Progress;
pub use summary::{Component, Lowered, RunSummary};

use crate::graph::Graph;
use crate::plugins::loading::{LoadedSet, Purpose};
use crate::plugins::Backend;
use crate::stages::onnx_translation::ProgramSource;
use crate::trace::Worker;
use emit::Program;
use folder::ExportFolder;
use prewrite::{ArtifactPrewriter, PrewriteTarget};
use scratch::Scratch;
use trace::Traced;

/// How long a worker may take to start and import torch.
const WORKER_START: Duration = Duration::from_secs(120);

/// What the emit step reads from: a traced program, or a file named by the user.
#[derive(Clone, Copy)]
enum Input<'a> {
    Traced(&'a Traced),
    Pt2(&'a Path),
    IrJson(&'a Path),
}

impl Input<'_> {
    fn traced(&self) -> Option<&Traced> {
        match self {
            Input::Traced(t) => Some(t),
            Input::Pt2(_) | Input::IrJson(_) => None,
        }
    }
}

/// Where one target's artifacts go: straight to its file, or into the
/// scratch folder of its export folder, which moves in at the end.
struct Written {
    target: Target,
    folder: Option<ExportFolder>,
    components: Vec<Component>,
}

impl Written {
    /// `target`'s, its export folder's scratch folder made (beside the folder).
    fn new(target: &Target) -> Result<Written> {
        let folder = match &target.destination {
            Destination::Folder(dir) => Some(ExportFolder::beside(dir)?),
            Destination::File(_) => None,
        };
        Ok(Written { target: target.clone(), folder, components: Vec::new() })
    }

    fn output(&self, component: &str) -> PathBuf {
        match &self.folder {
            Some(f) => f.component(component, &self.target.artifact),
            None => self.target.destination.path().to_path_buf(),
        }
    }
}

/// What every step of a run reads once its plugins are loaded.
#[derive(Clone, Copy)]
struct Run<'a> {
    options: &'a RunOptions,
    loaded: &'a LoadedSet,
    progress: Progress,
}

impl<'a> Run<'a> {
    fn emitting(&self) -> emit::EmitContext<'a> {
        emit::EmitContext {
            loaded: self.loaded,
            on_plugin_error: self.options.on_plugin_error,
            progress: self.progress,
        }
    }

    /// The worker kept from the trace, or a new one (a run that read its
    /// program from a file, or whose trace worker was not kept).
    fn worker<'w>(&self, worker: &'w mut Option<Worker>) -> Result<&'w mut Worker> {
        Ok(match worker {
            Some(w) => w,
            None => worker.insert(start_worker(self.options, self.progress, false)?),
        })
    }

    /// As [`Run::worker`], a new one importing torch only once a request
    /// needs it: for a request that does not (converting to OpenVINO).
    fn cold_worker<'w>(&self, worker: &'w mut Option<Worker>) -> Result<&'w mut Worker> {
        Ok(match worker {
            Some(w) => w,
            None => worker.insert(start_worker(self.options, self.progress, true)?),
        })
    }
}

/// A run whose program is traced: the model to trace is its source.
#[derive(Clone, Copy)]
struct TracedRun<'a> {
    run: Run<'a>,
    trace: &'a Trace,
}

/// Runs the pipeline: one summary per target, in the order asked.
pub fn run(mut options: RunOptions, progress: Progress) -> Result<Vec<RunSummary>> {
    for target in &options.targets {
        for stale in Scratch::remove_stale_beside(target.destination.path()) {
            tracing::info!("removed the stale scratch folder {}", stale.display());
        }
    }
    // Every scratch folder of the run, the worker's among them, is made in these.
    let _staging = scratch::Staging::beside(options.targets.iter().map(|t| t.destination.path()))?;
    // An export folder: the artifacts are written into a scratch folder beside
    // it, and everything moves in at the end.
    let mut written = options.targets.iter().map(Written::new).collect::<Result<Vec<_>>>()?;
    if let Source::Trace(trace) = &mut options.source {
        let folder = written[0].folder.as_ref().map(|f| f.scratch().to_path_buf());
        let kept = options.verify || options.keep_reference;
        prepare(trace, &options.targets, kept, folder);
    }
    let options = &options;

    // ── trace (or the file named), then each program through each backend ──
    let mut worker = None;
    let mut generation = None;
    // The trace worker's Python, for the summary (the worker may be gone by the end).
    let mut worker_python = None;
    let loaded = match &options.source {
        Source::Trace(trace) => {
            progress.step("trace", "starting the worker");
            let started = start_worker(options, progress, false)?;
            worker_python = Some(started.hello.python.clone());
            // The worker says which upstream versions are installed; plugins resolve against them.
            let loaded = load_plugins(options, Some(&started), progress)?;
            let run = TracedRun { run: Run { options, loaded: &loaded, progress }, trace };
            match &trace.request.generation {
                None => export_traced(run, started, &mut written, &mut worker)?,
                Some(asked) => {
                    let [w] = written.as_mut_slice() else {
                        bail!("--generation exports one backend at a time: give --backend one backend")
                    };
                    generation = export_for_generation(run, asked, started, w, &mut worker)?;
                }
            }
            loaded
        }
        Source::Pt2(path) | Source::IrJson(path) => {
            let loaded = load_plugins(options, None, progress)?;
            let run = Run { options, loaded: &loaded, progress };
            let input = match &options.source {
                Source::Pt2(_) => Input::Pt2(path),
                _ => Input::IrJson(path),
            };
            for w in &mut written {
                let output = w.output(MODEL);
                let job = Job {
                    target: &w.target,
                    name: MODEL,
                    input,
                    output: &output,
                    verify: options.verify,
                    calibrate: true,
                };
                w.components.push(export(run, &mut worker, job)?);
            }
            loaded
        }
    };

    let python = worker_python.or_else(|| worker.as_ref().map(|w| w.hello.python.clone()));
    let first = options.targets[0].backend;
    let mut summaries = Vec::new();
    for Written { target, folder, mut components } in written {
        let path = match folder {
            Some(folder) => {
                let Source::Trace(trace) = &options.source else {
                    bail!("an export folder records the traced model's metadata: trace it (--model, --model-dir, --model-fn)");
                };
                finish_folder(folder, &target, trace, &loaded, &mut components)?
            }
            None => target.destination.path().to_path_buf(),
        };
        summaries.push(RunSummary {
            components,
            generation: generation.take(),
            backend: target.backend,
            trace_shared_with: (target.backend != first
                && matches!(options.source, Source::Trace(_)))
            .then_some(first),
            plugin_set: summary::PluginSetSummary::of(
                &loaded,
                target.backend,
                options.plugins.locked,
            ),
            environment: summary::Environment::of(python.clone(), &loaded, &options.plugins),
            skipped: loaded.set.skipped.clone(),
            written: path,
            total: progress.started.elapsed(),
        });
    }
    Ok(summaries)
}

/// Backend preparation, before the trace: where the traced program's weights
/// go, whether the eager reference is written, how experts run; and the
/// export folder's scratch folder, where the worker saves the configs.
/// `kept`: the run verifies, or keeps the eager reference (`--keep-reference`).
fn prepare(trace: &mut Trace, targets: &[Target], kept: bool, folder: Option<PathBuf>) {
    use crate::trace::protocol::Weights;
    trace.request.folder = folder;
    // The host writes an ONNX model's, a `.pt2`'s or a portable `.pte`'s
    // weights itself, from where they are: the worker need not pack them
    // into its `.pt2`, and a model folder's stay in its checkpoint (the
    // worker never reads them unless the eager reference is asked for).
    // ExecuTorch's steps in the worker map them where they are too.
    let from_folder = matches!(trace.request.source, crate::trace::ModelSource::Directory { .. });
    trace.request.weights = match () {
        _ if targets.iter().any(|t| t.artifact == Artifact::IrJson) => Weights::InArchive,
        // torchao's quantized weights are new tensors, in no checkpoint.
        _ if trace.request.quantize.is_some() => Weights::Side,
        _ if from_folder && !trace.load_weights => Weights::Streamed,
        _ => Weights::Side,
    };
    // The eager reference is computed where something reads it: verification,
    // calibration, `--keep-reference`, and a `.pt2` (or IR JSON) a later run
    // may verify, which keeps it beside itself unless its weights stream
    // (reading them all is what streaming avoids). Anywhere else it is a
    // forward for nothing, and a quantized model's is slow.
    let read_later = targets.iter().any(|t| matches!(t.artifact, Artifact::Pt2 | Artifact::IrJson));
    trace.request.reference = kept
        || targets.iter().any(calibrates)
        || (read_later && trace.request.weights != Weights::Streamed);
    // Neither XNNPACK nor the portable kernels run transformers' grouped
    // experts (`_grouped_mm`, `histc`, `sort`): MoE experts run as
    // `batched_mm`, as the reference's `prepare_for_xnnpack` sets them.
    if targets.iter().any(|t| matches!(t.artifact, Artifact::Pte(_))) {
        trace.request.experts = Some("batched_mm".into());
    }
}

/// Writes `export.json` and moves the export folder's files in; the
/// components' paths then name where their files are. Returns the folder.
fn finish_folder(
    folder: ExportFolder,
    target: &Target,
    trace: &Trace,
    loaded: &LoadedSet,
    components: &mut [Component],
) -> Result<PathBuf> {
    let dir = folder.dir().to_path_buf();
    let recorded = components
        .iter()
        .map(|c| {
            Ok((
                c.name.clone(),
                c.metadata
                    .clone()
                    .context("an export folder records the traced model's metadata")?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    folder.finish(&target.artifact, trace, &recorded, &loaded.set, target.backend)?;
    for c in components {
        if let Some(reference) = &mut c.reference {
            moved_into(&dir, reference);
        }
        if let Some(artifact) = &mut c.artifact {
            moved_into(&dir, artifact.path_mut());
        }
    }
    Ok(dir)
}

/// `path` as it is once its file has moved into `dir`.
fn moved_into(dir: &Path, path: &mut PathBuf) {
    if let Some(name) = path.file_name() {
        *path = dir.join(name);
    }
}

/// The artifact whose first weights are written while the worker traces, and
/// what it is: a `.pt2`, or an ONNX model's external data, going into an
/// export folder (into its scratch folder, which goes on every way out); one
/// verified is written elsewhere first. One artifact: the first that can.
fn prewritten_target(written: &[Written], verify: bool) -> Option<(PathBuf, PrewriteTarget)> {
    if verify {
        return None;
    }
    written.iter().filter(|w| w.folder.is_some()).find_map(|w| {
        let to = match &w.target.artifact {
            Artifact::Pt2 => PrewriteTarget::Archive,
            // Quantized weights are computed at the emit step, from the map.
            Artifact::Onnx(onnx) if onnx.external_data && onnx.quantize.is_none() => {
                let transposed = emit::linear_weights_transposed(Backend::Onnx);
                PrewriteTarget::OnnxData { transposed_linear: onnx.optimize && transposed }
            }
            // The data file of the ONNX model OpenVINO converts, which becomes
            // the IR's weights ([`crate::openvino`]); not where OpenVINO reads
            // them, nor where they are stored 16-bit at the emit step.
            Artifact::Openvino(o)
                if o.onnx.quantize.is_none()
                    && o.onnx.weights_dtype.is_none()
                    && !o.compress_to_fp16 =>
            {
                let transposed_linear =
                    o.onnx.optimize && emit::linear_weights_transposed(Backend::Openvino);
                let to = PrewriteTarget::OnnxData { transposed_linear };
                return Some((onnx_for_openvino(&w.output(MODEL)), to));
            }
            _ => return None,
        };
        Some((w.output(MODEL), to))
    })
}

/// A traced model, one trace for every target: each target's export of it
/// (checked first on the model's first layers with `--verify-layers`).
fn export_traced(
    traced_run: TracedRun,
    mut started: Worker,
    written: &mut [Written],
    worker: &mut Option<Worker>,
) -> Result<()> {
    let TracedRun { run, trace } = traced_run;
    let options = run.options;
    let backends: Vec<Backend> = written.iter().map(|w| w.target.backend).collect();
    let prewrite = prewritten_target(written, options.verify);
    let prewrite = prewrite.as_ref().map(|(path, to)| (path.as_path(), *to));
    let traced = trace::run(
        &mut started,
        trace,
        run.loaded,
        &backends,
        &written[0].output(MODEL),
        prewrite,
    )?;
    // Checked on a truncated model before anything lands: each target's checks.
    let mut kept = Some(started);
    let truncated = match trace.verify_layers {
        Some(layers) => Some((layers, verify_truncated(traced_run, layers, &mut kept, written)?)),
        None => None,
    };
    let started = kept.context("the trace worker went away")?;
    // The worker holds the model and torch: gone before the host's stages, the
    // pipeline's peak memory is the trace's, not the trace's plus the emission's
    // (unless it is needed again: to verify, or to lower a `.pte`). Killed
    // now, its memory freed as it dies while the host reads the program;
    // reaped when `_killed` drops, at the end of this function (waiting for
    // a 700 MB process to go took 50 ms of the run).
    let mut _killed = None;
    if options.verify || options.lowers_in_worker() || written.iter().any(|w| calibrates(&w.target))
    {
        *worker = Some(started);
    } else {
        _killed.insert(started).kill();
    }
    // The configs the worker saved go to every export folder.
    let configs =
        written[0].folder.as_ref().map(|f| files_in(f.scratch())).transpose()?.unwrap_or_default();
    for (i, w) in written.iter_mut().enumerate() {
        if let (Some(folder), true) = (&w.folder, i > 0) {
            for config in &configs {
                let to =
                    folder.scratch().join(config.file_name().context("a config without a name")?);
                std::fs::copy(config, &to).with_context(|| format!("writing {}", to.display()))?;
            }
        }
        let output = w.output(MODEL);
        let job = Job {
            target: &w.target,
            name: MODEL,
            input: Input::Traced(&traced),
            output: &output,
            verify: options.verify,
            calibrate: true,
        };
        let mut component = export(run, worker, job)?;
        if let Some((layers, checks)) = &truncated {
            component.verified = checks[i].clone();
            component.verified_layers = Some(*layers);
        }
        // The trace is reported once, with the first target.
        w.components.push(Component { trace: component.trace.filter(|_| i == 0), ..component });
    }
    Ok(())
}

/// `--generation`: the components one `generate` call is made of, each traced
/// by name in the worker that captured them and exported to `w`'s target;
/// with `--verify`, the generation check.
fn export_for_generation(
    traced_run: TracedRun,
    asked: &crate::trace::Generation,
    mut started: Worker,
    w: &mut Written,
    worker: &mut Option<Worker>,
) -> Result<Option<generation::Checked>> {
    let TracedRun { run, trace } = traced_run;
    let (options, progress) = (run.options, run.progress);
    let backends = [w.target.backend];
    let mut generation = None;
    if w.folder.is_none() {
        bail!("--generation writes an export folder: name one with -o DIR/");
    }
    progress.step("trace", "capturing the generation components from one `generate` call");
    let capture = trace.request.capture_params(asked).map_err(anyhow::Error::msg)?;
    let captured = started.request(&capture, trace.deadline)?;
    let folder = w.folder.as_ref().map(|f| f.scratch().to_path_buf());
    if asked.genai {
        genai::check_components(captured.components.iter().map(|c| c.name.as_str()))?;
        genai::model_type(folder.as_deref().context("an export folder")?)?;
    }
    // The worker keeps the model and the captured calls for every component's trace.
    *worker = Some(started);
    // Each traced component's folder lives until every component is traced:
    // the worker links the next one's weights to its side file (one model,
    // the same weights) instead of writing them again.
    let mut traced_folders = Vec::new();
    let outputs: Vec<PathBuf> = captured.components.iter().map(|c| w.output(&c.name)).collect();
    let (target, components) = (&w.target, &mut w.components);
    // A `.pte`'s components are lowered by a worker once every one is traced.
    let mut to_lower = Vec::new();
    std::thread::scope(|scope| -> Result<()> {
        // Each component is emitted on a thread of its own while the worker
        // traces the next.
        let mut emitting: Option<std::thread::ScopedJoinHandle<'_, Result<Exported>>> = None;
        for (component, output) in captured.components.iter().zip(outputs) {
            let name = &component.name;
            progress.step("trace", &format!("component `{name}`"));
            let one = trace.captured(name);
            let traced =
                trace::run(run.worker(worker)?, &one, run.loaded, &backends, &output, None)
                    .with_context(|| format!("component `{name}`"))?;
            if let Some(previous) = emitting.take() {
                let (component, folder) = joined(previous)?;
                components.push(component);
                traced_folders.push(folder);
            }
            if options.lowers_in_worker() {
                to_lower.push((name, traced, output));
            } else {
                emitting =
                    Some(scope.spawn(move || {
                        export_component(run, target, name, traced, output, &mut None)
                    }));
            }
        }
        if let Some(last) = emitting.take() {
            components.push(joined(last)?.0);
        }
        Ok(())
    })?;
    if !to_lower.is_empty() {
        // The trace worker holds the model; lowered in a new one, the run's
        // peak memory is the trace's or the lowering's, not both. Kept where
        // the generation check needs the model, or calibration its worker.
        if !options.verify && calibration(&target.artifact).is_none() {
            if let Some(mut tracer) = worker.take() {
                tracer.kill();
            }
        }
        for (name, traced, output) in to_lower {
            let (component, folder) = export_component(run, target, name, traced, output, worker)?;
            components.push(component);
            traced_folders.push(folder);
        }
    }
    drop(traced_folders);
    if let Some(calibration) = calibration(&target.artifact) {
        progress.step("calibrate", "int8-static activations, generating through the components");
        let written: Vec<(String, PathBuf)> = components
            .iter()
            .filter_map(|c| match &c.artifact {
                Some(crate::trace::protocol::VerifyModel::Onnx { path }) => {
                    Some((c.name.clone(), path.clone()))
                }
                _ => None,
            })
            .collect();
        let inputs = calibrate::Inputs::Generation { steps: asked.steps };
        let worker = run.worker(worker)?;
        let on = calibrate::run(worker, &written, calibration, inputs, options.verify_deadline)?;
        for component in components.iter_mut() {
            if let Some((optimized, _)) = component.optimized.as_mut() {
                optimized.quantized.calibration = Some(on.clone());
            }
        }
    }
    let genai_folder = match (asked.genai, &folder) {
        (true, Some(folder)) => {
            let decoder = target.artifact.folder_file(genai::DECODER);
            let (inputs, outputs) = genai::fit_decoder(&folder.join(&decoder), folder)?;
            genai::write_config(folder, &decoder, &inputs, &outputs)?;
            Some(folder.clone())
        }
        _ => None,
    };
    if options.verify {
        progress.step(
            "verify",
            &format!(
                "{} greedy tokens through the components against eager `generate`",
                asked.steps
            ),
        );
        let int4 = verify::int4_round_trip(
            &target.artifact,
            components.iter().filter_map(|c| c.optimized.as_ref().map(|(o, _)| &o.quantized)),
        );
        let (tolerance, quantized) = verify::tolerance(
            &target.artifact,
            eager_quantized(&options.source).as_ref(),
            int4.as_ref(),
        );
        let worker = run.worker(worker)?;
        let artifacts =
            components.iter().filter_map(|c| Some((c.name.clone(), c.artifact.clone()?))).collect();
        let check = generation::check(
            worker,
            artifacts,
            asked.steps,
            (tolerance, quantized.as_deref()),
            int4,
            genai_folder,
            options.verify_deadline,
        )?;
        generation = Some(check);
    }
    Ok(generation)
}

/// `--verify-layers N`: the model folder's first N layers (a truncated
/// config over the same checkpoint) traced as the model was and exported
/// for each target into a scratch folder, each checked in its runtime
/// against eager; the checks, per target. The whole model's weights are never
/// read: only the first layers' (and the layers around them, embeddings and
/// head) for the eager reference.
fn verify_truncated(
    traced_run: TracedRun,
    layers: u32,
    worker: &mut Option<Worker>,
    written: &[Written],
) -> Result<Vec<Vec<crate::trace::protocol::Check>>> {
    let TracedRun { run, trace } = traced_run;
    let small = trace.truncated(layers)?;
    run.progress
        .step("verify", &format!("the model's first {layers} layers, from the same checkpoint"));
    let scratch = Scratch::beside(written[0].target.destination.path(), "verify-layers")?;
    let backends: Vec<Backend> = written.iter().map(|w| w.target.backend).collect();
    let traced = trace::run(
        run.worker(worker)?,
        &small,
        run.loaded,
        &backends,
        &scratch.path().join("model"),
        None,
    )?;
    let mut checks = Vec::new();
    for w in written {
        let output = scratch.path().join(truncated_file(&w.target.artifact, layers));
        let job = Job {
            target: &w.target,
            name: "truncated",
            input: Input::Traced(&traced),
            output: &output,
            verify: true,
            calibrate: true,
        };
        let component = export(run, worker, job).with_context(|| {
            format!("--verify-layers {layers}: the model's first {layers} layers")
        })?;
        checks.push(component.verified);
    }
    Ok(checks)
}

/// The file `--verify-layers N` exports the truncated model to, in its scratch folder.
fn truncated_file(artifact: &Artifact, layers: u32) -> String {
    artifact.folder_file(&format!("first-{layers}-layers"))
}

/// The regular files directly in `dir` (links followed); none if it does not exist.
fn files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    Ok(entries.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_file()).collect())
}

/// `--quantize int8-static`'s calibration, where `artifact` asks for it.
fn calibration(artifact: &Artifact) -> Option<&crate::onnx::quantize::Calibration> {
    match artifact {
        Artifact::Onnx(OnnxOptions {
            quantize: Some(crate::onnx::quantize::Quantize::Int8Static { calibration, .. }),
            ..
        }) => Some(calibration),
        _ => None,
    }
}

/// Whether the target's artifact is calibrated in the worker (which stays for it).
fn calibrates(target: &Target) -> bool {
    calibration(&target.artifact).is_some()
}

/// The component of a single export, and its file's name in an export folder (`model.onnx`).
const MODEL: &str = "model";

/// A generation component exported, and the scratch folder its trace was in
/// (the caller decides how long it lives).
type Exported = (Component, Scratch);

/// A traced generation component exported to `target` at `output`; with
/// the scratch folder of its trace. Not verified on its own: the components
/// are verified by generating with all of them (`export_for_generation`),
/// as a component's cache output may differ from eager by design (a
/// sliding window traced whole).
fn export_component(
    run: Run,
    target: &Target,
    name: &str,
    traced: Traced,
    output: PathBuf,
    worker: &mut Option<Worker>,
) -> Result<Exported> {
    let input = Input::Traced(&traced);
    let job = Job { target, name, input, output: &output, verify: false, calibrate: false };
    let component = export(run, worker, job).with_context(|| format!("component `{name}`"))?;
    Ok((component, traced.scratch))
}

/// The ONNX model OpenVINO converts into the IR at `ir`, beside it: where
/// its weights are written while the worker traces ([`prewritten_target`])
/// and where the emit step writes it then ([`emit_artifact`]).
fn onnx_for_openvino(ir: &Path) -> PathBuf {
    ir.with_extension("onnx")
}

/// One program to export: what it is read from, for which target, to where.
#[derive(Clone, Copy)]
struct Job<'a> {
    target: &'a Target,
    /// `model`, a generation component's name, or `truncated` (`--verify-layers`).
    name: &'a str,
    input: Input<'a>,
    output: &'a Path,
    /// Run the artifact in its runtime against eager before it moves into place.
    verify: bool,
    /// Calibrate an `int8-static` artifact on its own (not a generation
    /// component: those are calibrated together, through `generate`).
    calibrate: bool,
}

/// One program from read to artifact: the backend's FX stages, emission,
/// and (`job.verify`) the artifact in its runtime against eager before it
/// moves into place; the eager reference goes beside it.
fn export(run: Run, worker: &mut Option<Worker>, job: Job) -> Result<Component> {
    // ── read ──
    let read_started = Instant::now();
    let mut program = read(&job.input, run.progress)?;
    let read = read_started.elapsed();
    let nodes_before = program.graph().node_count();
    let changes_before = program.graph().changes();
    let fixed_axes = fixed_axes(run.options, &job.input, &program);
    let declared_bounds = declare_bounds(run.options, &job, &mut program)?;

    // ── the backend's FX stages ──
    run.progress.step("fx stages", &format!("{nodes_before} nodes"));
    let mut stages = crate::stages::run_fx_stages(
        &run.loaded.runtime,
        &run.loaded.set.plugins,
        job.target.backend,
        program.graph_mut(),
        run.options.on_plugin_error,
    )?;

    // ── emit, and verify ──
    // The staged path is scratch: the step names the artifact by its file name.
    let artifact = job.output.file_name().unwrap_or(job.output.as_os_str());
    run.progress.step("emit", &artifact.to_string_lossy());
    let emit_started = Instant::now();
    // Calibrated in the worker, which reads the staging folders only.
    let calibration = calibration(&job.target.artifact).filter(|_| job.calibrate);
    let staged = Staged::for_output(job.output, job.verify || calibration.is_some())?;
    let unchanged = job.input.traced().filter(|traced| {
        program.graph().changes() == changes_before && traced.summary.cached.is_none()
    });
    let mut emitted = emit_artifact(run, worker, &job, &mut program, unchanged, staged.path())?;
    if let Some(calibration) = calibration {
        let reference = match &job.input {
            Input::Traced(t) => t.reference.clone(),
            Input::Pt2(path) | Input::IrJson(path) => Some(reference_path(path)),
        }
        .filter(|reference| reference.exists());
        let quantized = emitted.optimized.as_mut().filter(|(o, _)| o.quantized.any());
        if let Some((optimized, _)) = quantized {
            run.progress.step("calibrate", "int8-static activations in ONNX Runtime");
            let components = [(job.name.to_string(), staged.path().to_path_buf())];
            let inputs = calibrate::Inputs::Reference(reference.as_deref());
            let deadline = run.options.verify_deadline;
            let worker = run.worker(worker)?;
            let on = calibrate::run(worker, &components, calibration, inputs, deadline)?;
            optimized.quantized.calibration = Some(on);
        }
    }
    stages.extend(emitted.stages);
    let (verified, verify_time) = match (&emitted.runtime, job.verify) {
        (Some(runtime), true) => {
            let checked = verify_staged(run, worker, &job, runtime, staged.path())?;
            staged.move_into_place(job.output)?;
            checked
        }
        _ => {
            if calibration.is_some() {
                staged.move_into_place(job.output)?;
            }
            (Vec::new(), Duration::ZERO)
        }
    };
    let emit = emit_started.elapsed();

    // The eager reference goes next to the artifact it checked, or a `.pt2`
    // that a later run may verify (or where asked); else it goes with the scratch folder.
    let keep = job.verify
        || run.options.keep_reference
        || matches!(job.target.artifact, Artifact::Pt2 | Artifact::IrJson);
    let (reference, summary, metadata) = match &job.input {
        Input::Traced(traced) => (
            if keep { place_reference(traced, job.output)? } else { None },
            Some(traced.summary.clone()),
            Some(serde_json::to_value(&traced.export_metadata)?),
        ),
        Input::Pt2(_) | Input::IrJson(_) => (None, None, None),
    };
    Ok(Component {
        name: job.name.to_string(),
        trace: summary,
        metadata,
        fixed_axes,
        declared_bounds,
        reference,
        read,
        nodes_before,
        nodes_after: program.graph().node_count(),
        stages,
        optimized: emitted.optimized,
        lowered: emitted.lowered,
        verified,
        verified_layers: None,
        emit,
        weights_prewritten: emitted.weights_prewritten,
        guards_checked: emitted.guards_checked,
        verify: verify_time,
        artifact: emitted.runtime.as_ref().map(|r| r.model(job.output)),
        runtime: emitted.runtime,
    })
}

/// An ExecuTorch program plans memory for the largest size of each dynamic
/// axis: its batch and sequence axes get their declared maxima before the
/// backend's stages (`executorch::bounds`): a static cache's length, else
/// the model's longest sequence.
fn declare_bounds(
    options: &RunOptions,
    job: &Job,
    program: &mut Program,
) -> Result<Vec<crate::executorch::bounds::Declared>> {
    use crate::executorch::bounds::{declare, Maxima, MAX_BATCH};
    use crate::trace::protocol::{AxisKind, KnownAxis};
    let (Artifact::Pte(_), Some(traced)) = (&job.target.artifact, job.input.traced()) else {
        return Ok(Vec::new());
    };
    let symbols = |kind: AxisKind| -> Vec<(String, i64)> {
        let size = |axis: &KnownAxis| i64::try_from(axis.traced).unwrap_or(i64::MAX);
        traced
            .axis_kinds
            .iter()
            .filter(|(_, axis)| axis.kind == kind)
            .map(|(symbol, axis)| (symbol.clone(), size(axis)))
            .collect()
    };
    let Source::Trace(trace) = &options.source else { return Ok(Vec::new()) };
    let request = &trace.request;
    let max_cache_len = request.generation.as_ref().and_then(|g| g.max_cache_len);
    let sequence = max_cache_len.map(u64::from).or(traced.max_positions);
    // Never below the sizes traced (`--sample`), which verification runs.
    let maxima = Maxima {
        batch: MAX_BATCH.max(i64::from(request.batch)),
        sequence: sequence
            .and_then(|s| i64::try_from(s).ok())
            .map(|s| s.max(i64::from(request.sequence))),
    };
    declare(program.graph_mut(), &symbols(AxisKind::Batch), &symbols(AxisKind::Sequence), maxima)
        .context("declaring the ExecuTorch program's input bounds")
}

/// How the traced model was quantized before its trace, if it was.
fn eager_quantized(source: &Source) -> Option<crate::trace::protocol::EagerQuantize> {
    match source {
        Source::Trace(trace) => trace.request.quantize.clone(),
        _ => None,
    }
}

/// A dynamic export asks for every axis to vary: the ones the model's code fixed.
fn fixed_axes(options: &RunOptions, input: &Input, program: &Program) -> Vec<trace::FixedAxis> {
    match (&options.source, program) {
        (Source::Trace(trace), Program::Archive { pt2, graph })
            if trace.request.dynamic && trace.request.dynamic_shapes.is_empty() =>
        {
            let names = input.traced().map(|t| t.input_names.as_slice()).unwrap_or_default();
            pt2.programs
                .get("model")
                .map(|p| trace::fixed_axes(p, graph, names))
                .unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

/// Where the emit step writes an artifact: its output, or with `--verify`
/// a scratch folder beside it (removed on drop), whence it moves into place
/// once it matches eager.
struct Staged {
    scratch: Option<Scratch>,
    path: PathBuf,
}

impl Staged {
    fn for_output(output: &Path, verify: bool) -> Result<Staged> {
        let scratch = verify.then(|| Scratch::beside(output, "verify")).transpose()?;
        // Same file name as the output: an external data file is referenced by name.
        let path = match &scratch {
            Some(s) => s.path().join(output.file_name().context("the output has no file name")?),
            None => output.to_path_buf(),
        };
        Ok(Staged { scratch, path })
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the staged artifact, and its ONNX external data or OpenVINO
    /// weights if any (first: the model never lands without them), to
    /// `output` (where it was written already, unless staged in a scratch folder).
    fn move_into_place(&self, output: &Path) -> Result<()> {
        if self.scratch.is_none() {
            return Ok(());
        }
        let companion = |model: &Path| match model.extension() {
            Some(e) if e == "xml" => model.with_extension("bin"),
            _ => crate::onnx::external::data_file(model),
        };
        let data = companion(&self.path);
        if data.exists() {
            let to = companion(output);
            crate::atomic::move_into_place(&data, &to)
                .with_context(|| format!("writing {}", to.display()))?;
        }
        crate::atomic::move_into_place(&self.path, output)
            .with_context(|| format!("writing {}", output.display()))
    }
}

/// What the emit step made of a program: how the artifact runs (none for IR
/// JSON), and what it reports.
#[derive(Default)]
struct Emitted {
    runtime: Option<verify::Runtime>,
    /// The ONNX stages (translations, IR fixes).
    stages: Vec<crate::stages::StageReport>,
    optimized: Option<(crate::onnx::optimize::OptimizeReport, usize)>,
    lowered: Option<Lowered>,
    weights_prewritten: usize,
    /// The size guards an ONNX model checks at run time.
    guards_checked: Vec<String>,
}

/// The emit step: `program`, after the FX stages, as `job`'s artifact at
/// `staged`. `unchanged`: the traced program, when the file torch wrote
/// still is the program (the FX stages left it as it was, and it was not
/// restored from the trace cache, whose program is rebuilt from what was
/// read and checked, as a `.pt2` input is).
fn emit_artifact(
    run: Run,
    worker: &mut Option<Worker>,
    job: &Job,
    program: &mut Program,
    unchanged: Option<&Traced>,
    staged: &Path,
) -> Result<Emitted> {
    let mut emitted = Emitted::default();
    emitted.runtime = match (&job.target.artifact, program) {
        (Artifact::IrJson, program) => {
            emit::ir_json(program.graph(), job.output)?;
            None
        }
        (Artifact::Pt2, Program::Archive { pt2, graph }) => {
            // A traced program with its weights inside moves into place as torch wrote it.
            match unchanged.filter(|traced| traced.side_weights.is_none()) {
                Some(traced) => emit::pt2_as_traced(&traced.program, staged)?,
                None => {
                    let prewritten =
                        job.input.traced().and_then(|t| t.prewritten(ArtifactPrewriter::archive));
                    emitted.weights_prewritten = emit::pt2(pt2, graph, staged, prewritten)?;
                }
            }
            Some(verify::Runtime::Pt2)
        }
        (Artifact::Onnx(onnx), Program::Archive { pt2, graph }) => {
            let input = onnx_input(job);
            let onnx = emit::onnx(run.emitting(), Backend::Onnx, pt2, graph, onnx, input, staged)?;
            if let (true, Some(node)) = (run.options.verify, &onnx.cpu_unrunnable) {
                bail!("--verify runs the model in ONNX Runtime's CPU provider, which cannot run its {node}: drop --verify (the model is for another provider), or verify it exported for the CPU (`--ort-fusions cpu`)");
            }
            emitted.stages = onnx.stages;
            emitted.optimized = onnx.optimized.map(|o| (o, onnx.nodes));
            emitted.weights_prewritten = onnx.weights_prewritten;
            emitted.guards_checked = onnx.guards_checked;
            let (quantized, int4) = quantization(job, &emitted);
            Some(verify::Runtime::Onnx { quantized, int4 })
        }
        (Artifact::Openvino(options), Program::Archive { pt2, graph }) => {
            // The ONNX model OpenVINO reads is scratch: only the IR lands. It
            // goes beside the IR where its weights were written while the
            // worker traced ([`prewritten_target`]), into its data file.
            let work = Scratch::beside(job.output, "openvino")?;
            let input = onnx_input(job);
            let beside = onnx_for_openvino(job.output);
            let onnx_path = match input.prewritten.as_ref().map(|p| p.data_file()) {
                Some(data) if data == crate::onnx::external::data_file(&beside) => beside,
                _ => work.path().join(Artifact::Onnx(options.onnx.clone()).folder_file(MODEL)),
            };
            let onnx = emit::onnx(
                run.emitting(),
                Backend::Openvino,
                pt2,
                graph,
                &options.onnx,
                input,
                &onnx_path,
            )?;
            emitted.stages = onnx.stages;
            emitted.optimized = onnx.optimized.map(|o| (o, onnx.nodes));
            emitted.weights_prewritten = onnx.weights_prewritten;
            let conversion = emit::Lowering {
                worker: run.cold_worker(worker)?,
                deadline: run.options.verify_deadline,
                work: work.path(),
            };
            emit::openvino(run.progress, conversion, &onnx_path, options, staged)?;
            let (quantized, int4) = quantization(job, &emitted);
            let compressed = options.compress_to_fp16;
            Some(verify::Runtime::Openvino { quantized, int4, compressed })
        }
        (Artifact::Pte(pte), Program::Archive { pt2, graph }) => {
            // ExecuTorch lowers the program after hfx's FX stages, as a `.pt2`:
            // the traced one where the stages left it as it was.
            let work = Scratch::beside(job.output, "lower")?;
            let program = match unchanged {
                Some(traced) => traced.program.clone(),
                None => {
                    let program = work.path().join("program.pt2");
                    emit::pt2_for_worker(pt2, graph, &program)?;
                    program
                }
            };
            let lowering = emit::Lowering {
                worker: run.worker(worker)?,
                deadline: run.options.verify_deadline,
                work: work.path(),
            };
            let lowered = match pte.lowering {
                Pte::Delegated(delegate) => emit::pte_delegated(
                    run.progress,
                    lowering,
                    program,
                    delegate,
                    pte.memory,
                    staged,
                )?,
                Pte::Portable => {
                    let provenance = folder::provenance(&run.loaded.set, job.target.backend);
                    let provenance = serde_json::to_vec(&provenance)?;
                    let side_files = pt2.side_files();
                    let progress = run.progress;
                    emit::pte_portable(
                        progress,
                        lowering,
                        program,
                        &side_files,
                        pte.memory,
                        &provenance,
                        staged,
                    )?
                }
            };
            let in_spec = lowered.in_spec().to_string();
            emitted.lowered = Some(lowered);
            let quantized = eager_quantized(&run.options.source);
            Some(verify::Runtime::Executorch { in_spec, quantized })
        }
        (
            Artifact::Pt2 | Artifact::Onnx(_) | Artifact::Pte(_) | Artifact::Openvino(_),
            Program::IrJson { .. },
        ) => {
            bail!("a graph read from JSON can only be written as JSON (-o OUT.json)")
        }
    };
    Ok(emitted)
}

/// The scheme an emitted ONNX model's weights were quantized with, if any,
/// and of int4, the weights its eager reference round-trips in the model
/// the worker traced (none where the trace was restored from the trace
/// cache or a `.pt2` was read: then the worker holds no model).
fn quantization(
    job: &Job,
    emitted: &Emitted,
) -> (Option<String>, Option<crate::trace::protocol::Int4RoundTrip>) {
    let report = emitted.optimized.as_ref().map(|(o, _)| &o.quantized);
    let traced_here = job.input.traced().filter(|t| t.summary.cached.is_none());
    let int4 = traced_here.and_then(|_| verify::int4_round_trip(&job.target.artifact, report));
    (report.and_then(|q| q.applied()), int4)
}

/// What the ONNX emission of `job` takes from its input: the traced names
/// and the weights written while the worker traced, or a saved program's own.
fn onnx_input(job: &Job) -> emit::OnnxInput {
    match job.input.traced() {
        Some(traced) => emit::OnnxInput {
            source: ProgramSource::Traced,
            input_names: traced.input_names.clone(),
            output_names: traced.output_names.clone(),
            prewritten: traced.prewritten(ArtifactPrewriter::onnx_data),
            size_guards: traced.summary.size_guards.iter().map(|g| g.guard.clone()).collect(),
        },
        None => emit::OnnxInput {
            source: ProgramSource::Saved,
            input_names: Vec::new(),
            output_names: Vec::new(),
            prewritten: None,
            size_guards: Vec::new(),
        },
    }
}

/// The verify step: the artifact at `staged` in `runtime`, against the eager
/// reference; the checks and how long they took.
fn verify_staged(
    run: Run,
    worker: &mut Option<Worker>,
    job: &Job,
    runtime: &verify::Runtime,
    staged: &Path,
) -> Result<(Vec<crate::trace::protocol::Check>, Duration)> {
    let reference = match &job.input {
        Input::Traced(t) => {
            t.reference.clone().context("the trace wrote no eager reference to verify against")?
        }
        Input::Pt2(path) | Input::IrJson(path) => reference_path(path),
    };
    run.progress.step("verify", &format!("{} against eager PyTorch", runtime.name()));
    let worker = run.worker(worker)?;
    let started = Instant::now();
    let checks = verify::run(worker, runtime, staged, &reference, run.options.verify_deadline)?;
    Ok((checks, started.elapsed()))
}

/// The traced eager reference, linked beside the artifact at `output` (for
/// verification); none when the trace wrote none.
fn place_reference(traced: &Traced, output: &Path) -> Result<Option<PathBuf>> {
    let Some(eager) = &traced.reference else { return Ok(None) };
    let reference = reference_path(output);
    crate::atomic::link_into_place(eager, &reference)
        .with_context(|| format!("writing {}", reference.display()))?;
    Ok(Some(reference))
}

/// A component emitted on its own thread: its result, or its panic as an error.
fn joined(handle: std::thread::ScopedJoinHandle<'_, Result<Exported>>) -> Result<Exported> {
    handle.join().map_err(|_| anyhow::anyhow!("emitting a component panicked"))?
}

/// A worker for `options`' run; `cold`: importing torch only once a request
/// needs it ([`crate::trace::WorkerOptions::cold`]).
fn start_worker(options: &RunOptions, progress: Progress, cold: bool) -> Result<Worker> {
    let worker_options = crate::trace::WorkerOptions {
        sandbox: Some(trace::worker_sandbox(options)),
        cold,
        ..options.worker.clone()
    };
    let mut worker = Worker::start_with(&options.plugins.python(), WORKER_START, &worker_options)?;
    if worker.is_caller() {
        tracing::info!("the trace worker is the calling Python process: no OS sandbox");
    } else if !worker.sandbox.off().is_empty() {
        tracing::warn!(
            "the trace worker runs with part of its OS sandbox off: {}",
            worker.sandbox.line()
        );
    } else {
        tracing::info!("the trace worker's OS sandbox: {}", worker.sandbox.line());
    }
    worker.on_progress = Some(Box::new(move |p| progress.step("trace", p.stage.description())));
    Ok(worker)
}

fn load_plugins(
    options: &RunOptions,
    worker: Option<&Worker>,
    progress: Progress,
) -> Result<LoadedSet> {
    progress.step("plugins", "resolving and loading");
    options.plugins.load(Purpose::Use, worker.map(Worker::versions))
}

fn read(input: &Input, progress: Progress) -> Result<Program> {
    use crate::graph::pt2::{convert, Pt2};
    let (path, side_weights, checkpoint) = match input {
        Input::IrJson(path) => {
            progress.step("read", &path.display().to_string());
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let graph = Graph::from_json(&text).with_context(|| format!("{}", path.display()))?;
            return Ok(Program::IrJson { graph });
        }
        Input::Pt2(path) => (*path, None, &[][..]),
        Input::Traced(t) => {
            (t.program.as_path(), t.side_weights.as_deref(), t.checkpoint.as_slice())
        }
    };
    match input {
        Input::Traced(_) => progress.step("read", "the traced program"),
        _ => progress.step("read", &path.display().to_string()),
    }
    let mut pt2 = Pt2::open(path)?;
    if let Some(side) = side_weights {
        pt2.attach_side_weights(side, checkpoint)?;
    }
    let model = pt2
        .programs
        .get("model")
        .with_context(|| format!("{}: no `model` program", path.display()))?;
    let graph = convert::to_ir(model)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("{}", path.display()))?;
    Ok(Program::Archive { pt2: Box::new(pt2), graph })
}

/// `out.pt2` → `out.reference.pt`.
fn reference_path(output: &Path) -> PathBuf {
    output.with_extension("reference.pt")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::protocol::{Delegate, Weights};
    use crate::trace::{ModelSource, TraceRequest};

    fn trace(source: ModelSource) -> Trace {
        Trace {
            request: TraceRequest::new(source),
            deadline: Duration::from_secs(60),
            hub: None,
            load_weights: false,
            cache: None,
            verify_layers: None,
        }
    }

    fn model_folder() -> ModelSource {
        ModelSource::Directory {
            path: "/models/tiny".into(),
            trust_remote_code: false,
            layers: None,
        }
    }

    fn architecture() -> ModelSource {
        ModelSource::Architecture { name: "llama".into(), overrides: Vec::new() }
    }

    fn onnx(external_data: bool, optimize: bool) -> Artifact {
        Artifact::Onnx(OnnxOptions {
            opset: 18,
            external_data,
            optimize,
            quantize: None,
            weights_dtype: None,
        })
    }

    fn target(artifact: Artifact, destination: Destination) -> Target {
        let backend = match &artifact {
            Artifact::Pt2 | Artifact::IrJson => Backend::Dynamo,
            Artifact::Onnx(_) => Backend::Onnx,
            Artifact::Openvino(_) => Backend::Openvino,
            Artifact::Pte(PteOptions { lowering: Pte::Portable, .. }) => Backend::Executorch,
            Artifact::Pte(PteOptions { lowering: Pte::Delegated(_), .. }) => {
                Backend::ExecutorchXnnpack
            }
        };
        Target { backend, artifact, destination }
    }

    #[test]
    fn a_model_folders_weights_stream_from_its_checkpoint_unless_read_or_written_as_json() {
        let folder = Destination::Folder("out".into());
        let targets = [target(onnx(true, true), folder.clone())];
        let mut streamed = trace(model_folder());
        prepare(&mut streamed, &targets, false, Some("scratch".into()));
        assert_eq!(streamed.request.weights, Weights::Streamed);
        // Streamed and not verified: the weights are never read, so no eager reference.
        assert!(!streamed.request.reference);
        assert_eq!(streamed.request.folder, Some(PathBuf::from("scratch")));

        prepare(&mut streamed, &targets, true, None);
        assert_eq!(
            (streamed.request.weights, streamed.request.reference),
            (Weights::Streamed, true)
        );
        assert_eq!(streamed.request.folder, None);

        let mut read = trace(model_folder());
        read.load_weights = true;
        prepare(&mut read, &targets, false, None);
        assert_eq!((read.request.weights, read.request.reference), (Weights::Side, false));

        let mut built = trace(architecture());
        prepare(&mut built, &targets, false, None);
        assert_eq!((built.request.weights, built.request.reference), (Weights::Side, false));

        // IR JSON holds no side weights: a run writing it keeps them in the archive.
        let with_json = [targets[0].clone(), target(Artifact::IrJson, folder)];
        let mut json = trace(model_folder());
        prepare(&mut json, &with_json, false, None);
        assert_eq!((json.request.weights, json.request.reference), (Weights::InArchive, true));
    }

    #[test]
    fn the_eager_reference_is_computed_only_where_something_reads_it() {
        let file = |name: &str| Destination::File(name.into());
        let reference = |source: ModelSource, artifact: Artifact, kept: bool| {
            let mut t = trace(source);
            prepare(&mut t, &[target(artifact, file("out"))], kept, None);
            t.request.reference
        };
        let xnnpack = || Artifact::Pte(Pte::Delegated(Delegate::Xnnpack).into());
        // Nothing reads it: an unverified ONNX model or `.pte`.
        assert!(!reference(architecture(), onnx(false, true), false));
        assert!(!reference(architecture(), xnnpack(), false));
        // Verified or kept (`--keep-reference`), streamed or not.
        assert!(reference(architecture(), xnnpack(), true));
        assert!(reference(model_folder(), onnx(false, true), true));
        // A `.pt2` keeps it beside itself for a later run to verify, unless
        // its weights stream (the reference would read them all).
        assert!(reference(architecture(), Artifact::Pt2, false));
        assert!(!reference(model_folder(), Artifact::Pt2, false));
    }

    #[test]
    fn a_pte_target_runs_moe_experts_as_batched_matmuls() {
        let file = |name: &str| Destination::File(name.into());
        for (artifact, experts) in [
            (Artifact::Pte(Pte::Portable.into()), Some("batched_mm")),
            (Artifact::Pte(Pte::Delegated(Delegate::Xnnpack).into()), Some("batched_mm")),
            (onnx(false, true), None),
            (Artifact::Pt2, None),
        ] {
            let mut t = trace(architecture());
            prepare(&mut t, &[target(artifact.clone(), file("out"))], false, None);
            assert_eq!(t.request.experts.as_deref(), experts, "{artifact:?}");
        }
    }

    #[test]
    fn a_targets_files_go_to_its_file_or_into_its_folders_scratch_folder() {
        let dir = tempfile::tempdir().unwrap();
        let file =
            Written::new(&target(onnx(true, true), Destination::File(dir.path().join("m.onnx"))))
                .unwrap();
        assert!(file.folder.is_none());
        assert_eq!(file.output(MODEL), dir.path().join("m.onnx"));
        // A file destination has one component: every name writes the file named.
        assert_eq!(file.output("decode"), dir.path().join("m.onnx"));

        let out = dir.path().join("export");
        let folder = Written::new(&target(
            Artifact::Pte(Pte::Portable.into()),
            Destination::Folder(out.clone()),
        ))
        .unwrap();
        let scratch = folder.folder.as_ref().unwrap().scratch().to_path_buf();
        assert_eq!(scratch.parent(), Some(dir.path()));
        let scratch_name = scratch.file_name().unwrap().to_string_lossy().to_string();
        assert_eq!(scratch_name, format!(".hfx-folder-{}", std::process::id()));
        assert_eq!(folder.output(MODEL), scratch.join("model.pte"));
        assert_eq!(folder.output("decode"), scratch.join("decode.pte"));
        // Nothing lands in the export folder before the run finishes.
        assert!(!out.exists());
        drop(folder);
        assert!(!scratch.exists());
    }

    #[test]
    fn the_first_folder_target_that_can_has_its_weights_written_while_tracing() {
        let dir = tempfile::tempdir().unwrap();
        let to = |name: &str| Destination::Folder(dir.path().join(name));
        let written = [
            Written::new(&target(onnx(false, true), to("inline"))).unwrap(),
            Written::new(&target(Artifact::Pte(Pte::Portable.into()), to("pte"))).unwrap(),
            Written::new(&target(onnx(true, false), to("external"))).unwrap(),
            Written::new(&target(Artifact::Pt2, to("pt2"))).unwrap(),
        ];
        assert_eq!(
            prewritten_target(&written, false),
            Some((written[2].output(MODEL), PrewriteTarget::OnnxData { transposed_linear: false }))
        );
        assert_eq!(
            prewritten_target(&written[3..], false),
            Some((written[3].output(MODEL), PrewriteTarget::Archive))
        );
        // Verified artifacts are written elsewhere first; and only an inline ONNX or a `.pte`: none.
        assert_eq!(prewritten_target(&written, true), None);
        assert_eq!(prewritten_target(&written[..2], false), None);
        // Quantized weights are not the checkpoint's bytes: none.
        let quantized = Artifact::Onnx(OnnxOptions {
            quantize: Some(crate::onnx::quantize::Quantize::Int4(Default::default())),
            ..OnnxOptions {
                opset: 18,
                external_data: true,
                optimize: true,
                quantize: None,
                weights_dtype: None,
            }
        });
        let quantized = Written::new(&target(quantized, to("int4"))).unwrap();
        assert_eq!(prewritten_target(&[quantized], false), None);
        let file =
            Written::new(&target(Artifact::Pt2, Destination::File(dir.path().join("m.pt2"))))
                .unwrap();
        assert_eq!(prewritten_target(&[file], false), None);
    }

    #[test]
    fn a_staged_artifact_moves_in_with_its_data_or_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("model.onnx");
        let unstaged = Staged::for_output(&output, false).unwrap();
        assert_eq!(unstaged.path(), output);

        // A failed verification: the scratch folder goes, with what was written in it.
        let staged = Staged::for_output(&output, true).unwrap();
        assert_eq!(staged.path().file_name(), output.file_name());
        let scratch = staged.path().parent().unwrap().to_path_buf();
        assert_eq!(scratch.parent(), Some(dir.path()));
        std::fs::write(staged.path(), "model").unwrap();
        drop(staged);
        assert!(!scratch.exists());
        assert!(!output.exists());

        let staged = Staged::for_output(&output, true).unwrap();
        std::fs::write(staged.path(), "model").unwrap();
        std::fs::write(crate::onnx::external::data_file(staged.path()), "weights").unwrap();
        staged.move_into_place(&output).unwrap();
        drop(staged);
        assert_eq!(std::fs::read_to_string(&output).unwrap(), "model");
        let data = crate::onnx::external::data_file(&output);
        assert_eq!(std::fs::read_to_string(data).unwrap(), "weights");
        let left: Vec<_> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 2, "{left:?}");
    }

    #[test]
    fn references_and_truncated_models_are_named_after_their_artifact() {
        assert_eq!(reference_path(Path::new("out/model.pt2")), Path::new("out/model.reference.pt"));
        assert_eq!(reference_path(Path::new("m.onnx")), Path::new("m.reference.pt"));
        assert_eq!(truncated_file(&onnx(true, true), 2), "first-2-layers.onnx");
        assert_eq!(truncated_file(&Artifact::Pte(Pte::Portable.into()), 1), "first-1-layers.pte");
    }

    #[test]
    fn moved_files_are_named_where_they_landed() {
        let mut path = PathBuf::from("/tmp/.hfx-folder-1/model.onnx");
        moved_into(Path::new("out"), &mut path);
        assert_eq!(path, Path::new("out/model.onnx"));
    }

    #[test]
    fn an_ir_json_program_is_read_as_written() {
        let example = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/graphs/dynamic-batch-sort.json");
        let hidden = Progress::hidden();
        let program = read(&Input::IrJson(&example), hidden).unwrap();
        let Program::IrJson { graph } = &program else { panic!("read as an archive") };
        assert!(graph.node_count() > 0);
        let dir = tempfile::tempdir().unwrap();
        let written = dir.path().join("again.json");
        emit::ir_json(graph, &written).unwrap();
        let again = read(&Input::IrJson(&written), hidden).unwrap();
        assert_eq!(again.graph().to_json(), graph.to_json());

        let missing = dir.path().join("missing.json");
        let error = read(&Input::IrJson(&missing), hidden).err().unwrap();
        assert_eq!(format!("{error}"), format!("reading {}", missing.display()));
    }
}
