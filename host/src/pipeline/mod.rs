//! `hfx run`: the pipeline, one step per module, in stage order.
//!
//! trace (the worker, with patch plugins answering; or read a `.pt2` / IR
//! JSON) → the backend's FX stages → emit (`.pt2`, IR JSON, or for ONNX:
//! translations → IR fixes → generic passes → `.onnx`) → verify (the artifact
//! in its runtime against eager, before it moves into place) → the export folder.
//! [`run`] takes options fixed once ([`RunOptions`]) and returns a
//! [`RunSummary`] the caller prints; it never prints the summary itself.

pub mod emit;
pub mod folder;
pub mod generation;
pub mod model_id;
pub mod options;
pub mod prewrite;
pub mod scratch;
pub mod summary;
pub mod trace;
pub mod trace_cache;
pub mod verify;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

pub use options::{Artifact, Destination, OnnxOptions, Pte, RunOptions, Source, Target, Trace};
pub use summary::{Component, Lowered, RunSummary};

use crate::graph::Graph;
use crate::plugins::loading::{LoadedSet, Purpose};
use crate::plugins::Backend;
use crate::trace::Worker;
use emit::Program;
use folder::ExportFolder;
use prewrite::{ArtifactPrewriter, PrewriteTarget};
use scratch::Scratch;
use trace::Traced;

/// Progress lines on stderr (stdout is the summary), when `shown`.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub started: Instant,
    pub shown: bool,
}

impl Progress {
    pub fn step(&self, stage: &str, what: &str) {
        if self.shown {
            eprintln!("[{:>6.1} s] {stage}: {what}", self.started.elapsed().as_secs_f64());
        }
    }
}

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
    fn output(&self, component: &str) -> PathBuf {
        match &self.folder {
            Some(f) => f.component(component, &self.target.artifact),
            None => self.target.destination.path().to_path_buf(),
        }
    }
}

/// Runs the pipeline: one summary per target, in the order asked.
pub fn run(mut options: RunOptions, progress: Progress) -> Result<Vec<RunSummary>> {
    let mut written = Vec::new();
    for target in &options.targets {
        for stale in Scratch::remove_stale_beside(target.destination.path()) {
            tracing::info!("removed the stale scratch folder {}", stale.display());
        }
    }
    // Every scratch folder of the run, the worker's among them, is made in these.
    let _staging = scratch::Staging::beside(options.targets.iter().map(|t| t.destination.path()))?;
    for target in &options.targets {
        // An export folder: the artifacts are written into a scratch folder beside
        // it, and everything moves in at the end.
        let folder = match &target.destination {
            Destination::Folder(dir) => Some(ExportFolder::beside(dir)?),
            Destination::File(_) => None,
        };
        written.push(Written { target: target.clone(), folder, components: Vec::new() });
    }
    let lowered_by_worker = options.targets.iter().any(|t| matches!(t.artifact, Artifact::Pte(_)));
    if let Source::Trace(trace) = &mut options.source {
        trace.request.folder = written[0].folder.as_ref().map(|f| f.scratch().to_path_buf());
        // The host writes an ONNX model's, a `.pt2`'s or a portable `.pte`'s
        // weights itself, from where they are: the worker need not pack them
        // into its `.pt2`, and a model folder's stay in its checkpoint (the
        // worker never reads them unless the eager reference is asked for).
        // ExecuTorch's steps in the worker map them where they are too.
        use crate::trace::protocol::Weights;
        let from_folder =
            matches!(trace.request.source, crate::trace::ModelSource::Directory { .. });
        trace.request.weights = match () {
            _ if options.targets.iter().any(|t| t.artifact == Artifact::IrJson) => {
                Weights::InArchive
            }
            _ if from_folder && !trace.load_weights => Weights::Streamed,
            _ => Weights::Side,
        };
        trace.request.reference = options.verify || trace.request.weights != Weights::Streamed;
        // Neither XNNPACK nor the portable kernels run transformers' grouped
        // experts (`_grouped_mm`, `histc`, `sort`): MoE experts run as
        // `batched_mm`, as the reference's `prepare_for_xnnpack` sets them.
        if lowered_by_worker {
            trace.request.experts = Some("batched_mm".into());
        }
    }

    // ── trace (or the file named), then each program through each backend ──
    let mut worker = None;
    let mut generation = None;
    // The trace worker's Python, for the summary (the worker may be gone by the end).
    let mut worker_python = None;
    let loaded = match &options.source {
        Source::Trace(trace) => {
            progress.step("trace", "starting the worker");
            let started = start_worker(&options, progress)?;
            worker_python = Some(started.hello.python.clone());
            // The worker says which upstream versions are installed; plugins resolve against them.
            let loaded = load_plugins(&options, Some(&started), progress)?;
            match &trace.request.generation {
                None => export_traced(
                    &options,
                    trace,
                    &loaded,
                    started,
                    &mut written,
                    &mut worker,
                    lowered_by_worker,
                    progress,
                )?,
                Some(asked) => {
                    let [w] = written.as_mut_slice() else {
                        bail!("--generation exports one backend at a time: give --backend one backend")
                    };
                    generation = export_for_generation(
                        &options,
                        trace,
                        asked,
                        &loaded,
                        started,
                        w,
                        &mut worker,
                        lowered_by_worker,
                        progress,
                    )?;
                }
            }
            loaded
        }
        Source::Pt2(path) | Source::IrJson(path) => {
            let loaded = load_plugins(&options, None, progress)?;
            let input = match &options.source {
                Source::Pt2(_) => Input::Pt2(path),
                _ => Input::IrJson(path),
            };
            for w in &mut written {
                let output = w.output(MODEL);
                w.components.push(export(
                    &options,
                    &w.target,
                    &loaded,
                    &mut worker,
                    MODEL,
                    input,
                    &output,
                    options.verify,
                    progress,
                )?);
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
                // The files moved from the scratch folder into the export folder: say where they are.
                let moved = |path: &mut PathBuf| {
                    if let Some(name) = path.file_name() {
                        *path = dir.join(name);
                    }
                };
                for c in &mut components {
                    if let Some(reference) = &mut c.reference {
                        moved(reference);
                    }
                    if let Some(artifact) = &mut c.artifact {
                        moved(artifact.path_mut());
                    }
                }
                dir
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

/// A traced model, one trace for every target: each target's export of it
/// (checked first on the model's first layers with `--verify-layers`).
#[allow(clippy::too_many_arguments)] // the run's parts, each distinct
fn export_traced(
    options: &RunOptions,
    trace: &Trace,
    loaded: &LoadedSet,
    mut started: Worker,
    written: &mut [Written],
    worker: &mut Option<Worker>,
    lowered_by_worker: bool,
    progress: Progress,
) -> Result<()> {
    let backends: Vec<Backend> = written.iter().map(|w| w.target.backend).collect();
    // A `.pt2`, or an ONNX model's external data, going into an export folder
    // gets its weights written while the worker traces (into the scratch
    // folder, which goes on every way out); verified, it is written elsewhere
    // first. One artifact: the first that can.
    let prewrite = written.iter().filter(|w| w.folder.is_some() && !options.verify).find_map(|w| {
        let to = match &w.target.artifact {
            Artifact::Pt2 => PrewriteTarget::Archive,
            Artifact::Onnx(onnx) if onnx.external_data => {
                PrewriteTarget::OnnxData { transposed_linear: onnx.optimize }
            }
            _ => return None,
        };
        Some((w.output(MODEL), to))
    });
    let prewrite = prewrite.as_ref().map(|(path, to)| (path.as_path(), *to));
    let traced =
        trace::run(&mut started, trace, loaded, &backends, &written[0].output(MODEL), prewrite)?;
    // Checked on a truncated model before anything lands: each target's checks.
    let mut kept = Some(started);
    let truncated = match trace.verify_layers {
        Some(layers) => Some((
            layers,
            verify_truncated(options, trace, layers, loaded, &mut kept, written, progress)?,
        )),
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
    if options.verify || lowered_by_worker {
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
        // The trace is reported once, with the first target.
        let mut component = export(
            options,
            &w.target,
            loaded,
            worker,
            MODEL,
            Input::Traced(&traced),
            &output,
            options.verify,
            progress,
        )?;
        if let Some((layers, checks)) = &truncated {
            component.verified = checks[i].clone();
            component.verified_layers = Some(*layers);
        }
        w.components.push(Component { trace: component.trace.filter(|_| i == 0), ..component });
    }
    Ok(())
}

/// `--generation`: the components one `generate` call is made of, each traced
/// by name in the worker that captured them and exported to `w`'s target;
/// with `--verify`, the generation check.
#[allow(clippy::too_many_arguments)] // the run's parts, each distinct
fn export_for_generation(
    options: &RunOptions,
    trace: &Trace,
    asked: &crate::trace::Generation,
    loaded: &LoadedSet,
    mut started: Worker,
    w: &mut Written,
    worker: &mut Option<Worker>,
    lowered_by_worker: bool,
    progress: Progress,
) -> Result<Option<crate::trace::protocol::GenerateCheckReply>> {
    let backends = [w.target.backend];
    let mut generation = None;
    if w.folder.is_none() {
        bail!("--generation writes an export folder: name one with -o DIR/");
    }
    progress.step("trace", "capturing the generation components from one `generate` call");
    let capture = trace.request.capture_params(asked).map_err(anyhow::Error::msg)?;
    let captured = started.request(&capture, trace.deadline)?;
    // The worker keeps the model and the captured calls for every component's trace.
    *worker = Some(started);
    // Each traced component's folder lives until every component is traced:
    // the worker links the next one's weights to its side file (one model,
    // the same weights) instead of writing them again.
    let mut traced_folders = Vec::new();
    let outputs: Vec<PathBuf> = captured.components.iter().map(|c| w.output(&c.name)).collect();
    let (target, components) = (&w.target, &mut w.components);
    std::thread::scope(|scope| -> Result<()> {
        // Each component is emitted on a thread of its own while the worker
        // traces the next (a `.pte` is lowered by the worker: in turn).
        let mut emitting: Option<std::thread::ScopedJoinHandle<'_, Result<Exported>>> = None;
        for (component, output) in captured.components.iter().zip(outputs) {
            let name = &component.name;
            progress.step("trace", &format!("component `{name}`"));
            let mut request = trace.request.clone();
            request.source = crate::trace::ModelSource::Captured { component: name.clone() };
            request.folder = None; // the capture saved the configs
            let one = Trace {
                request,
                deadline: trace.deadline,
                hub: trace.hub.clone(),
                load_weights: trace.load_weights,
                cache: None,
                verify_layers: None,
            };
            let traced = trace::run(
                kept_or_started(worker, options, progress)?,
                &one,
                loaded,
                &backends,
                &output,
                None,
            )
            .with_context(|| format!("component `{name}`"))?;
            if let Some(previous) = emitting.take() {
                let (component, folder) = joined(previous)?;
                components.push(component);
                traced_folders.push(folder);
            }
            // Verified by generating with all of them (below): a component's cache
            // output may differ from eager by design (a sliding window traced whole).
            let emit = move |worker: &mut Option<Worker>| -> Result<Exported> {
                let component = export(
                    options,
                    target,
                    loaded,
                    worker,
                    name,
                    Input::Traced(&traced),
                    &output,
                    false,
                    progress,
                )
                .with_context(|| format!("component `{name}`"))?;
                Ok((component, traced.scratch))
            };
            if lowered_by_worker {
                let (component, folder) = emit(worker)?;
                components.push(component);
                traced_folders.push(folder);
            } else {
                emitting = Some(scope.spawn(move || emit(&mut None)));
            }
        }
        if let Some(last) = emitting.take() {
            components.push(joined(last)?.0);
        }
        Ok(())
    })?;
    drop(traced_folders);
    if options.verify {
        progress.step(
            "verify",
            &format!(
                "{} greedy tokens through the components against eager `generate`",
                asked.steps
            ),
        );
        let tolerance = verify::tolerance(&target.artifact);
        let worker = kept_or_started(worker, options, progress)?;
        let check =
            generation::check(worker, components, asked.steps, tolerance, options.verify_deadline)?;
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
    options: &RunOptions,
    trace: &Trace,
    layers: u32,
    loaded: &LoadedSet,
    worker: &mut Option<Worker>,
    written: &[Written],
    progress: Progress,
) -> Result<Vec<Vec<crate::trace::protocol::Check>>> {
    let crate::trace::ModelSource::Directory { path, trust_remote_code, .. } =
        &trace.request.source
    else {
        bail!("--verify-layers truncates a model folder's config: give --model-dir or --model-id")
    };
    progress
        .step("verify", &format!("the model's first {layers} layers, from the same checkpoint"));
    let mut request = trace.request.clone();
    request.source = crate::trace::ModelSource::Directory {
        path: path.clone(),
        trust_remote_code: *trust_remote_code,
        layers: Some(layers),
    };
    request.reference = true;
    request.folder = None;
    let small = Trace {
        request,
        deadline: trace.deadline,
        hub: None,
        load_weights: trace.load_weights,
        cache: None,
        verify_layers: None,
    };
    let scratch = Scratch::beside(written[0].target.destination.path(), "verify-layers")?;
    let backends: Vec<Backend> = written.iter().map(|w| w.target.backend).collect();
    let traced = trace::run(
        kept_or_started(worker, options, progress)?,
        &small,
        loaded,
        &backends,
        &scratch.path().join("model"),
        None,
    )?;
    let mut checks = Vec::new();
    for w in written {
        let output =
            scratch.path().join(w.target.artifact.folder_file(&format!("first-{layers}-layers")));
        let component = export(
            options,
            &w.target,
            loaded,
            worker,
            "truncated",
            Input::Traced(&traced),
            &output,
            true,
            progress,
        )
        .with_context(|| format!("--verify-layers {layers}: the model's first {layers} layers"))?;
        checks.push(component.verified);
    }
    Ok(checks)
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

/// The component of a single export, and its file's name in an export folder (`model.onnx`).
const MODEL: &str = "model";

/// A generation component exported, and the scratch folder its trace was in
/// (the caller decides how long it lives).
type Exported = (Component, Scratch);

/// One program from read to artifact at `output`: the backend's FX stages,
/// emission, and (`verify`) the artifact in its runtime against eager before
/// it moves into place; the eager reference goes beside it.
#[allow(clippy::too_many_arguments)] // the run's parts and the program's, each distinct
fn export(
    options: &RunOptions,
    target: &Target,
    loaded: &LoadedSet,
    worker: &mut Option<Worker>,
    name: &str,
    input: Input,
    output: &Path,
    verify: bool,
    progress: Progress,
) -> Result<Component> {
    // ── read ──
    let read_started = Instant::now();
    let mut program = read(&input, progress)?;
    let read = read_started.elapsed();
    let nodes_before = program.graph().node_count();
    let changes_before = program.graph().changes();
    // --dynamic asks for every axis to vary; the ones the model's code fixed are said.
    let fixed_axes = match (&options.source, &program) {
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
    };

    // ── the backend's FX stages ──
    progress.step("fx stages", &format!("{nodes_before} nodes"));
    let mut stages = crate::stages::run_fx_stages(
        &loaded.runtime,
        &loaded.set.plugins,
        target.backend,
        program.graph_mut(),
        options.on_plugin_error,
    )?;

    // ── emit, and verify ──
    progress.step("emit", &output.display().to_string());
    let emit_started = Instant::now();
    let mut optimized = None;
    let mut verified = Vec::new();
    // With --verify the artifact is written into a scratch folder, checked in
    // its runtime and moved into place only when it matches eager.
    let scratch = verify.then(|| Scratch::beside(output, "verify")).transpose()?;
    // Same file name as the output: an external data file is referenced by name.
    let staged = match &scratch {
        Some(s) => s.path().join(output.file_name().context("the output has no file name")?),
        None => output.to_path_buf(),
    };
    let mut lowered = None;
    let mut weights_prewritten = 0;
    let mut verify_time = Duration::ZERO;
    let runtime = match (&target.artifact, &mut program) {
        (Artifact::IrJson, program) => {
            emit::ir_json(program.graph(), output)?;
            None
        }
        (Artifact::Pt2, Program::Archive { pt2, graph }) => {
            match &input {
                // A traced program the stages left as it was, its weights inside, moves into place as torch wrote it
                // (one from the trace cache is rebuilt from what was read and checked, as a `.pt2` input is).
                Input::Traced(traced)
                    if graph.changes() == changes_before
                        && traced.side_weights.is_none()
                        && traced.summary.cached.is_none() =>
                {
                    crate::atomic::link_into_place(&traced.program, &staged)
                        .with_context(|| format!("writing {}", staged.display()))?
                }
                _ => {
                    let prewritten =
                        input.traced().and_then(|t| t.prewritten(ArtifactPrewriter::archive));
                    weights_prewritten = emit::pt2(pt2, graph, &staged, prewritten)?;
                }
            }
            Some(verify::Runtime::Pt2)
        }
        (Artifact::Onnx(onnx), Program::Archive { pt2, graph }) => {
            let names = input
                .traced()
                .map(|t| (t.input_names.clone(), t.output_names.clone()))
                .unwrap_or_default();
            let prewritten =
                input.traced().and_then(|t| t.prewritten(ArtifactPrewriter::onnx_data));
            let emitted = emit::onnx(
                pt2,
                graph,
                loaded,
                onnx,
                options.on_plugin_error,
                names,
                &staged,
                prewritten,
                progress,
            )
            .map_err(|mut e| {
                use crate::stages::onnx_translation::{ProgramSource, TranslationError};
                if let Some(TranslationError::Missing { source_note, .. }) =
                    e.downcast_mut::<TranslationError>()
                {
                    *source_note = if input.traced().is_some() {
                        ProgramSource::Traced
                    } else {
                        ProgramSource::Saved
                    };
                }
                e
            })?;
            stages.extend(emitted.stages);
            optimized = emitted.optimized.map(|o| (o, emitted.nodes));
            weights_prewritten = emitted.weights_prewritten;
            Some(verify::Runtime::Onnx)
        }
        (Artifact::Pte(pte), Program::Archive { pt2, graph }) => {
            // ExecuTorch lowers the program after hfx's FX stages, as a `.pt2`:
            // the traced one where the stages left it as it was.
            let work = Scratch::beside(output, "lower")?;
            let program = match &input {
                Input::Traced(traced)
                    if graph.changes() == changes_before && traced.summary.cached.is_none() =>
                {
                    traced.program.clone()
                }
                _ => {
                    let program = work.path().join("program.pt2");
                    emit::pt2_for_worker(pt2, graph, &program)?;
                    program
                }
            };
            let worker = kept_or_started(worker, options, progress)?;
            let in_spec = match pte {
                Pte::Delegated(delegate) => {
                    progress.step(
                        "lower",
                        &format!(
                            "ExecuTorch edge + {} partitioner, to_executorch",
                            delegate.name()
                        ),
                    );
                    // Written in the scratch folder, then moved into place: a `.pte` is never half there.
                    let pte = work.path().join("model.pte");
                    let request = crate::trace::protocol::Lower {
                        program,
                        output: pte.clone(),
                        delegate: *delegate,
                    };
                    let reply = worker
                        .request(&request, options.verify_deadline)
                        .context("lowering with ExecuTorch")?;
                    crate::atomic::move_into_place(&pte, &staged)
                        .with_context(|| format!("writing {}", staged.display()))?;
                    let in_spec = reply.in_spec.clone();
                    lowered = Some(Lowered::Delegated(reply));
                    in_spec
                }
                Pte::Portable => {
                    progress.step("lower", "ExecuTorch's edge decomposition (worker)");
                    let edge_path = work.path().join("edge.pt2");
                    let request =
                        crate::trace::protocol::EdgeProgram { program, output: edge_path.clone() };
                    let edge = worker
                        .request(&request, options.verify_deadline)
                        .context("decomposing for ExecuTorch's edge dialect")?;
                    progress.step("emit", "portable .pte (hfx's native emitter)");
                    let started = Instant::now();
                    let mut edge_pt2 = crate::graph::pt2::Pt2::open(&edge_path)?;
                    if edge.side_weights {
                        // The weights the worker left where they were: in the files the traced program's are in.
                        edge_pt2.attach_side_weights(
                            &crate::graph::pt2::side_weights_path(&edge_path),
                            &pt2.side_files(),
                        )?;
                    }
                    let model = edge_pt2
                        .programs
                        .get("model")
                        .with_context(|| format!("{}: no `model` program", edge_path.display()))?;
                    let edge_graph = crate::graph::pt2::convert::to_ir(model)
                        .map_err(anyhow::Error::msg)
                        .with_context(|| format!("{}", edge_path.display()))?;
                    let specs = crate::executorch::write::Specs {
                        inputs: &edge.in_spec,
                        outputs: &edge.out_spec,
                    };
                    let provenance =
                        serde_json::to_vec(&folder::provenance(&loaded.set, target.backend))?;
                    let emitted = crate::executorch::emit(
                        &edge_pt2,
                        &edge_graph,
                        specs,
                        &provenance,
                        &staged,
                    )?;
                    let in_spec = edge.in_spec.clone();
                    lowered = Some(Lowered::Portable { edge, emitted, emit: started.elapsed() });
                    in_spec
                }
            };
            Some(verify::Runtime::Executorch { in_spec })
        }
        (Artifact::Pt2 | Artifact::Onnx(_) | Artifact::Pte(_), Program::IrJson { .. }) => {
            bail!("a graph read from JSON can only be written as JSON (-o OUT.json)")
        }
    };
    if let (Some(runtime), true) = (&runtime, verify) {
        let reference = match &input {
            Input::Traced(t) => t
                .reference
                .clone()
                .context("the trace wrote no eager reference to verify against")?,
            Input::Pt2(path) | Input::IrJson(path) => reference_path(path),
        };
        progress.step("verify", &format!("{} against eager PyTorch", runtime.name()));
        let worker = kept_or_started(worker, options, progress)?;
        let started = Instant::now();
        verified = verify::run(worker, runtime, &staged, &reference, options.verify_deadline)?;
        verify_time = started.elapsed();
        let data = crate::onnx::external::data_file(&staged);
        if data.exists() {
            let to = crate::onnx::external::data_file(output);
            crate::atomic::move_into_place(&data, &to)
                .with_context(|| format!("writing {}", to.display()))?;
        }
        crate::atomic::move_into_place(&staged, output)
            .with_context(|| format!("writing {}", output.display()))?;
    }
    let emit = emit_started.elapsed();

    // The eager reference goes next to the artifact, for verification.
    let (reference, summary, metadata) = match &input {
        Input::Traced(traced) => {
            let reference = match &traced.reference {
                Some(eager) => {
                    let reference = reference_path(output);
                    crate::atomic::link_into_place(eager, &reference)
                        .with_context(|| format!("writing {}", reference.display()))?;
                    Some(reference)
                }
                None => None,
            };
            (
                reference,
                Some(traced.summary.clone()),
                Some(serde_json::to_value(&traced.export_metadata)?),
            )
        }
        Input::Pt2(_) | Input::IrJson(_) => (None, None, None),
    };
    let component = Component {
        name: name.to_string(),
        trace: summary,
        metadata,
        fixed_axes,
        reference,
        read,
        nodes_before,
        nodes_after: program.graph().node_count(),
        stages,
        optimized,
        lowered,
        verified,
        verified_layers: None,
        emit,
        weights_prewritten,
        verify: verify_time,
        artifact: runtime.map(|r| r.model(output)),
    };
    Ok(component)
}

/// A component emitted on its own thread: its result, or its panic as an error.
fn joined(handle: std::thread::ScopedJoinHandle<'_, Result<Exported>>) -> Result<Exported> {
    handle.join().map_err(|_| anyhow::anyhow!("emitting a component panicked"))?
}

fn start_worker(options: &RunOptions, progress: Progress) -> Result<Worker> {
    let worker_options = crate::trace::WorkerOptions {
        sandbox: Some(trace::worker_sandbox(options)),
        ..options.worker.clone()
    };
    let mut worker = Worker::start_with(&options.plugins.python(), WORKER_START, &worker_options)?;
    if !worker.sandbox.off().is_empty() {
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

/// The worker kept from the trace, or a new one (a run that read its program
/// from a file, or whose trace worker was not kept).
fn kept_or_started<'w>(
    worker: &'w mut Option<Worker>,
    options: &RunOptions,
    progress: Progress,
) -> Result<&'w mut Worker> {
    Ok(match worker {
        Some(w) => w,
        None => worker.insert(start_worker(options, progress)?),
    })
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
    progress.step("read", &path.display().to_string());
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
