//! The trace step: the worker traces the model into a scratch folder beside
//! the output, with the backend's patch plugins answering patched calls.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::Result;

use super::options::Trace;
use super::prewrite::{ArtifactPrewriter, PrewriteTarget};
use super::scratch::Scratch;
use super::trace_cache::TraceCache;
use crate::plugins::loading::LoadedSet;
use crate::plugins::{self, kind, Backend};
use crate::stages;
use crate::trace::protocol::{
    Decomposed, ExportMetadata, KnownAxis, SizeGuard, StepPeaks, StepSeconds, WeightsReport,
};
use crate::trace::Worker;

/// A program traced into a scratch folder (removed on drop).
pub struct Traced {
    /// The folder the program, its side weights and its reference are in.
    pub scratch: Scratch,
    pub program: PathBuf,
    /// The eager outputs (`reference.pt`), moved beside the artifact at the
    /// end; none when the weights were streamed and nothing asked to verify.
    pub reference: Option<PathBuf>,
    /// Where the weights are when the worker wrote them beside the `.pt2`.
    pub side_weights: Option<PathBuf>,
    /// The model folder's checkpoint files the side weights may point into.
    pub checkpoint: Vec<PathBuf>,
    /// An artifact's first weights, being written while the worker traced
    /// (`super::prewrite`); its emit step takes them.
    pub prewriting: std::sync::Mutex<Option<ArtifactPrewriter>>,
    /// The tensor inputs' names (`input_ids`, `input.cache.layers.0.keys`);
    /// empty where the program's placeholder names stand.
    pub input_names: Vec<String>,
    /// The model output's leaf names (`logits`, `cache.layers.0.keys`).
    pub output_names: Vec<String>,
    /// The reference's `ExportMetadata` fields the worker recorded.
    pub export_metadata: ExportMetadata,
    /// The size symbols of the inputs' batch and sequence axes.
    pub axis_kinds: BTreeMap<String, KnownAxis>,
    /// The longest sequence the model's config allows.
    pub max_positions: Option<u64>,
    pub summary: TraceSummary,
}

impl Traced {
    /// What was written while the worker traced, once written, if `wanted`
    /// takes it (Ok); else it stays for another target's emit step.
    pub fn prewritten<T: Send + 'static>(
        &self,
        wanted: impl FnOnce(
            ArtifactPrewriter,
        )
            -> Result<crate::weights::prewrite::Prewriter<T>, ArtifactPrewriter>,
    ) -> Option<T> {
        let mut slot = self.prewriting.lock().ok()?;
        match wanted(slot.take()?) {
            Ok(prewriting) => prewriting.finish(),
            Err(other) => {
                *slot = Some(other);
                None
            }
        }
    }
}

/// What the trace reports to the user.
#[derive(Debug, Clone)]
pub struct TraceSummary {
    pub model_class: String,
    /// The Hub model it was loaded from (`--model-id`), at the commit resolved.
    pub hub: Option<super::model_id::HubModel>,
    pub seconds: f64,
    /// The worker's own times per step.
    pub times: StepSeconds,
    /// The worker's peak resident memory (MiB) at the end of each step.
    pub peaks: StepPeaks,
    pub side_weights: bool,
    /// Where the parameters came from (streamed from the checkpoint, or loaded).
    pub weights: WeightsReport,
    pub outputs: u64,
    /// Patch plugins and how many calls each answered.
    pub patched: Vec<(String, u64)>,
    /// Patched calls the worker answered from programs plugins gave before.
    pub patch_calls_cached: u64,
    /// Ops decomposed after the trace because no translation or fix handles them.
    pub decomposed: Vec<Decomposed>,
    /// torch.export's guards on input sizes that other sizes break and the
    /// artifact cannot check.
    pub size_guards: Vec<SizeGuard>,
    /// Input axes tied to a `--dynamic-shapes` axis.
    pub tied_axes: Vec<crate::trace::protocol::TiedAxis>,
    /// The `--trace-cache` entry the program came from (the worker did not trace).
    pub cached: Option<PathBuf>,
}

/// Traces `trace`'s model in `worker` for `backends` (one program for all of
/// them: every one's patch plugins answer, and what one cannot take whole is
/// decomposed), writing beside `output`. `prewrite`: an artifact whose
/// first weights are written there while the worker traces, when they are
/// streamed.
pub fn run(
    worker: &mut Worker,
    trace: &Trace,
    loaded: &LoadedSet,
    backends: &[Backend],
    output: &Path,
    prewrite: Option<(&Path, PrewriteTarget)>,
) -> Result<Traced> {
    let scratch = Scratch::beside(output, "trace")?;
    let program = scratch.path().join("model.pt2");
    let reference = scratch.path().join("reference.pt");
    let mut patch_plugins = Vec::new();
    for &backend in backends {
        for plugin in stages::select::<kind::Patch>(&loaded.set.plugins, backend) {
            if !patch_plugins
                .iter()
                .any(|p: &plugins::PluginOf<'_, kind::Patch>| p.name() == plugin.name())
            {
                patch_plugins.push(plugin);
            }
        }
    }
    let mut sessions: Vec<_> = patch_plugins
        .into_iter()
        .map(|p| plugins::Session::new(&loaded.runtime, p, "patches"))
        .collect();
    let mut request = trace.request.clone();
    // An op stays whole only if every backend that decomposes takes it whole.
    request.handled = backends
        .iter()
        .filter_map(|&b| stages::handled_ops(&loaded.set.plugins, b))
        .reduce(|kept, other| kept.into_iter().filter(|op| other.contains(op)).collect());
    // The cache, when asked for and the model can be keyed.
    let mut cached = None;
    // Where the weights-plan callback leaves the writer it starts.
    let prewriting: Rc<RefCell<Option<ArtifactPrewriter>>> = Rc::default();
    let cache = match &trace.cache {
        Some(dir) => {
            let cache = TraceCache::open(dir)?;
            let params = request.params(&program, &reference, crate::trace::patch_specs(&sessions));
            let patches: Vec<(String, String)> = sessions
                .iter()
                .map(|s| (s.plugin().name().to_string(), s.plugin().component_sha256.clone()))
                .collect();
            match TraceCache::key(
                &params,
                &request.source,
                &patches,
                &worker.versions(),
                loaded.lock.as_deref(),
            ) {
                Ok(key) => Some((cache, key)),
                Err(why) => {
                    tracing::warn!("--trace-cache: not used: {why:#}");
                    None
                }
            }
        }
        None => None,
    };
    let folder = request.folder.clone();
    let hit = cache.as_ref().and_then(|(cache, key)| cache.lookup(key, request.reference));
    // A damaged entry costs this run a trace, not its export.
    let restored = hit.and_then(|entry| {
        match TraceCache::restore(&entry, scratch.path(), folder.as_deref()) {
            Ok(reply) => Some((entry, reply)),
            Err(e) => {
                tracing::warn!("--trace-cache: {e:#}: traced again");
                let _ = std::fs::remove_dir_all(&entry);
                None
            }
        }
    });
    let result = match restored {
        Some((entry, reply)) => {
            cached = Some(entry);
            reply
        }
        None => {
            // Asked after the cache key is made: where the weights are written does not change the program.
            let prewrite =
                prewrite.filter(|_| request.weights == crate::trace::protocol::Weights::Streamed);
            request.plan_weights = prewrite.map(|(_, to)| to.planned());
            if let Some((path, to)) = prewrite {
                let (slot, path, sources) = (
                    prewriting.clone(),
                    path.to_path_buf(),
                    source_checkpoint(&trace.request.source),
                );
                worker.on_weights_plan = Some(Box::new(move |plan| {
                    *slot.borrow_mut() = Some(to.start(&path, plan, &sources))
                }));
            }
            let reply = crate::trace::trace(
                worker,
                &request,
                &mut sessions,
                &program,
                &reference,
                trace.deadline,
            );
            worker.on_weights_plan = None;
            let reply = reply?;
            if let Some((cache, key)) = &cache {
                // A cache that cannot take the entry costs the next run a trace, not this run its export.
                if let Err(e) = cache.store(key, scratch.path(), folder.as_deref(), &reply) {
                    tracing::warn!("{e:#}");
                }
            }
            reply
        }
    };
    let t = &result.seconds;
    let seconds = t.import + t.build + t.eager + t.export + t.save;
    let patched = sessions.iter().map(|s| (s.plugin().name().to_string(), s.calls)).collect();
    let side_weights = result.side_weights.then(|| crate::graph::pt2::side_weights_path(&program));
    let summary = TraceSummary {
        model_class: result.model_class,
        hub: trace.hub.clone(),
        seconds,
        times: result.seconds,
        peaks: result.peak_rss_mib,
        side_weights: side_weights.is_some(),
        weights: result.weights,
        outputs: result.outputs,
        patched,
        patch_calls_cached: result.patch_calls_cached,
        decomposed: result.decomposed,
        size_guards: result.size_guards,
        tied_axes: result.tied_axes,
        cached,
    };
    let (input_names, output_names, export_metadata) =
        (result.input_names, result.output_names, result.export_metadata);
    let (axis_kinds, max_positions) = (result.axis_kinds, result.max_positions);
    let reference = request.reference.then_some(reference);
    let checkpoint = source_checkpoint(&trace.request.source);
    let prewriting = std::sync::Mutex::new(prewriting.take());
    Ok(Traced {
        scratch,
        program,
        reference,
        side_weights,
        checkpoint,
        prewriting,
        input_names,
        output_names,
        export_metadata,
        axis_kinds,
        max_positions,
        summary,
    })
}

/// The checkpoint files of a model folder source (none for any other).
fn source_checkpoint(source: &crate::trace::ModelSource) -> Vec<PathBuf> {
    match source {
        crate::trace::ModelSource::Directory { path, .. } => checkpoint_files(path),
        _ => Vec::new(),
    }
}

/// A model folder's safetensors files: what streamed weights may point into.
fn checkpoint_files(folder: &Path) -> Vec<PathBuf> {
    let files = super::files_in(folder).unwrap_or_default();
    files.into_iter().filter(|p| p.extension().is_some_and(|x| x == "safetensors")).collect()
}

/// An axis of a model input that torch.export fixed although the export
/// asked for every axis to vary: the model's code depends on its size.
#[derive(Debug, Clone, PartialEq)]
pub struct FixedAxis {
    pub input: String,
    pub axis: usize,
    pub size: i64,
}

/// The model inputs' axes the traced program holds fixed. Sizes 0 and 1 are
/// not listed: torch.export always fixes them (its 0/1 specialization), and
/// hfx's sample inputs avoid them on the axes users vary.
/// A structured input's leaves (`input.cache.layers.0.keys`) report only
/// their batch axis: their other sizes (heads, head size, a state's width)
/// are the model's.
pub fn fixed_axes(
    program: &crate::graph::pt2::schema::ExportedProgram,
    graph: &crate::graph::Graph,
    names: &[String],
) -> Vec<FixedAxis> {
    use crate::graph::{Dim, ValueMeta};
    use crate::onnx::inputs::{input_roles, named_user_inputs, InputRole};
    let inputs = graph.subgraph(0).map(|g| g.inputs.clone()).unwrap_or_default();
    let mut fixed = Vec::new();
    for (value, role) in inputs.iter().zip(named_user_inputs(program, input_roles(program), names))
    {
        let (InputRole::User(input), Ok(value)) = (role, graph.value(*value)) else { continue };
        let ValueMeta::Tensor(meta) = &value.meta else { continue };
        let leaf = input.contains('.');
        for (axis, dim) in meta.shape.iter().enumerate().filter(|(axis, _)| !leaf || *axis == 0) {
            if let Dim::Fixed(size @ 2..) = dim {
                fixed.push(FixedAxis { input: input.clone(), axis, size: *size });
            }
        }
    }
    fixed
}

/// What the run's trace worker may read and write besides its Python, its
/// package and its scratch folder (`trace::confine`): it writes below the
/// run's staging folders (the scratch folders and staged artifacts are there) and
/// reads the model folder (and a Hub snapshot's blobs), the
/// `.pt2` input, the model function's folder, the trace cache and the plugins.
pub fn worker_sandbox(options: &super::options::RunOptions) -> crate::trace::Sandbox {
    use super::options::Source;
    let mut sandbox = crate::trace::Sandbox::default();
    // The run's staging folders, not the outputs' folders (a home folder holds caches and shell start-up files).
    sandbox.write.extend(
        options
            .targets
            .iter()
            .filter_map(|t| super::scratch::Staging::folder_of(t.destination.path())),
    );
    sandbox.write.dedup();
    match &options.source {
        // The file, and the eager outputs beside it that `--verify` compares with.
        Source::Pt2(path) | Source::IrJson(path) => {
            sandbox.read.extend([path.clone(), path.with_extension("reference.pt")])
        }
        Source::Trace(trace) => {
            match &trace.request.source {
                crate::trace::ModelSource::Directory { path, .. } => {
                    sandbox.read.extend(model_folder_reads(path))
                }
                // A model function's module may be found in the current folder.
                crate::trace::ModelSource::Function(_) => {
                    sandbox.read.extend(std::env::current_dir().ok())
                }
                _ => {}
            }
            sandbox.read.extend(trace.cache.iter().cloned());
        }
    }
    sandbox.read.extend(options.plugins.folders.iter().cloned());
    // `--calibration FILE`: the recorded inputs `int8-static` calibrates on.
    sandbox.read.extend(options.targets.iter().filter_map(|t| match &t.artifact {
        super::options::Artifact::Onnx(super::options::OnnxOptions {
            quantize: Some(crate::onnx::quantize::Quantize::Int8Static { calibration, .. }),
            ..
        }) => calibration.file.clone(),
        _ => None,
    }));
    if let Some(target) = options.targets.iter().find(|t| {
        matches!(
            t.artifact,
            super::options::Artifact::Pte(super::options::PteOptions {
                lowering: super::options::Pte::Delegated(_),
                ..
            })
        )
    }) {
        sandbox.runs_programs = Some(format!(
            "--backend {}: ExecuTorch's delegate lowering runs `flatc`",
            target.backend
        ));
    }
    sandbox
}

/// `dir`, and where it is a Hub cache snapshot (`<repo>/snapshots/<commit>`)
/// the repo's `blobs/`, which its files link to. No other link is followed:
/// a model folder's link to `~/.ssh/id_rsa` must not make `~/.ssh` readable.
pub(super) fn model_folder_reads(dir: &Path) -> Vec<PathBuf> {
    let mut found = vec![dir.to_path_buf()];
    let canonical = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    if let Some(repo) = canonical
        .parent()
        .filter(|p| p.file_name().is_some_and(|n| n == "snapshots"))
        .and_then(Path::parent)
    {
        found.push(repo.join("blobs"));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_folder_grants_its_snapshot_blobs_but_never_where_its_links_point() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("private/id_rsa");
        std::fs::create_dir_all(secret.parent().unwrap()).unwrap();
        std::fs::write(&secret, "key").unwrap();
        let folder = dir.path().join("model");
        std::fs::create_dir(&folder).unwrap();
        std::os::unix::fs::symlink(&secret, folder.join("model.safetensors")).unwrap();
        assert_eq!(model_folder_reads(&folder), std::slice::from_ref(&folder));
        let snapshot = dir.path().join("models--org--name/snapshots/abc123");
        std::fs::create_dir_all(&snapshot).unwrap();
        let blobs = std::fs::canonicalize(dir.path()).unwrap().join("models--org--name/blobs");
        assert_eq!(model_folder_reads(&snapshot), [snapshot.clone(), blobs]);
    }
}
