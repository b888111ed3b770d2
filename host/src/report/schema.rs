//! The report's JSON schema (`docs/report.md`), built from a run's summary.
//! The HTML page is rendered from this same value, so both say the same.
//!
//! Stable within a `schema_version`: fields are only ever added; a field
//! renamed, removed or changed in meaning is a new version.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::onnx_file;
use crate::pipeline::summary::{Component, Lowered, RunSummary};
use crate::stages::{OpHistogram, StageReport};
use crate::trace::protocol::VerifyModel;

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub hfx_version: String,
    pub backend: String,
    /// The backend whose export of the same run carried the trace
    /// (`--backend onnx,dynamo`: one trace, reported with the first).
    pub trace_shared_with: Option<String>,
    /// The artifact file or export folder written.
    pub written: String,
    pub total_seconds: f64,
    /// One per exported program: `model`, or `--generation`'s components.
    pub components: Vec<ComponentReport>,
    /// `--generation --verify`: greedy tokens through the components against eager `generate`.
    pub generation: Option<GenerationReport>,
    pub plugin_set: PluginSetReport,
    pub environment: EnvironmentReport,
}

/// The report of a run that failed: what the error line said, and what it
/// left out (the worker's traceback of a failure it classified as the input's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureReport {
    pub schema_version: u32,
    pub hfx_version: String,
    /// The error and its causes, joined by `: `.
    pub error: String,
    pub detail: Option<String>,
}

impl FailureReport {
    pub fn of(error: &anyhow::Error) -> FailureReport {
        FailureReport {
            schema_version: SCHEMA_VERSION,
            hfx_version: env!("CARGO_PKG_VERSION").to_string(),
            error: format!("{error:#}"),
            detail: detail(error).map(str::to_string),
        }
    }
}

/// What an error's one line leaves out: the traceback of a failure the
/// worker classified as the user's (printed with `-v`, kept in the report).
pub fn detail(error: &anyhow::Error) -> Option<&str> {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<crate::trace::TraceError>())
        .and_then(crate::trace::TraceError::detail)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentReport {
    pub name: String,
    /// The traced model's class (traced runs).
    pub model_class: Option<String>,
    /// The Hub model it came from (`--model-id`), `org/name@revision (commit)`.
    pub hub: Option<String>,
    pub artifact: Option<ArtifactReport>,
    /// The eager reference written beside the artifact.
    pub reference: Option<String>,
    /// Where the weights came from: "streamed" from the model folder's
    /// checkpoint (never read by the worker, or read once for the eager
    /// reference: "streamed, read for the reference"), "loaded" by the worker,
    /// or "loaded: <why they could not be streamed>" (traced runs).
    pub weights: Option<String>,
    /// The run's steps for this program, in order, each after the last.
    pub timeline: Vec<TimelineStep>,
    /// The trace worker's peak resident memory after each step that moves it.
    pub worker_peak_rss_mib: Vec<PeakRss>,
    pub nodes: NodeCounts,
    pub ops: OpHistograms,
    /// The generic ONNX passes (absent with `--no-optimize` and for other artifacts).
    pub optimization: Option<Optimization>,
    /// Every stage that ran plugins, in order.
    pub stages: Vec<StageEntry>,
    /// Patch plugins and the calls each answered during the trace.
    pub patches: Vec<PatchEntry>,
    /// Patched calls the worker answered from programs plugins gave before.
    pub patch_calls_cached: u64,
    /// Ops decomposed after the trace because no translation or fix handles them.
    pub decomposed: Vec<DecomposedOp>,
    /// Input axes torch.export fixed although the export is dynamic.
    pub fixed_axes: Vec<FixedAxis>,
    /// torch.export's guards on input sizes the artifact cannot check.
    pub size_guards: Vec<String>,
    /// How a `.pte` was made.
    pub lowering: Option<Lowering>,
    /// The artifact in its runtime against eager (`--verify`; for `--generation`, the generation check stands instead).
    pub parity: Option<Parity>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArtifactReport {
    /// `onnx`, `pt2`, `pte` or `openvino` (the `.xml`, its `.bin` beside it).
    pub format: String,
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineStep {
    /// `trace/import` … `trace/save` (the worker's steps), `read`, a stage's
    /// name, a `.pte`'s lowering steps, what is left of the emit step
    /// (`write`), then `verify` when the artifact was verified.
    pub name: String,
    /// `worker` (Python) or `host`.
    pub runs_in: String,
    pub start_seconds: f64,
    pub seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeakRss {
    pub step: String,
    pub mib: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeCounts {
    /// The FX program as read, before the stages.
    pub fx_before: u64,
    /// The FX program after the FX stages.
    pub fx_after: u64,
    /// ONNX nodes the ONNX stages made, before the generic passes.
    pub onnx_before_optimization: Option<u64>,
    /// The written ONNX model's main graph.
    pub onnx_written: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpHistograms {
    /// FX targets of the program as read (before the stages).
    pub fx_before: OpHistogram,
    /// FX targets after the FX stages.
    pub fx_after: OpHistogram,
    /// ONNX op types the ONNX stages made, before the generic passes.
    pub onnx_before_optimization: Option<OpHistogram>,
    /// ONNX op types of the written model's main graph (read back from the file).
    pub onnx_written: Option<OpHistogram>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Optimization {
    pub identities_removed: u64,
    pub duplicates_merged: u64,
    pub nodes_folded: u64,
    pub no_op_nodes_removed: u64,
    pub pairs_merged: u64,
    pub weights_stored_transposed: u64,
    pub fused_into_convolutions: u64,
    pub constants_lifted: u64,
    pub dead_nodes_removed: u64,
    pub nodes_after: u64,
    /// `--quantize`: what it quantized and left float.
    #[serde(default)]
    pub quantization: Option<Quantization>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Quantization {
    pub scheme: String,
    pub matmuls_quantized: u64,
    /// Embeddings (Gather) made `GatherBlockQuantized`.
    #[serde(default)]
    pub embeddings_quantized: u64,
    /// The float weights left float, each with why (an embedding, not 2-D, a
    /// `--quantize-exclude` pattern).
    pub excluded: Vec<ExcludedWeight>,
    /// The model's weights' bytes as float and as written.
    pub weight_bytes_before: u64,
    pub weight_bytes_after: u64,
    /// `int8-static`: what its activations were calibrated on.
    #[serde(default)]
    pub calibration: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExcludedWeight {
    pub name: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageEntry {
    pub name: String,
    pub seconds: f64,
    pub dead_code_removed: u64,
    pub plugins: Vec<StagePlugin>,
    /// Each node a plugin changed, in order, up to the host's cap per stage.
    pub changes: Vec<NodeChange>,
    /// Changes past the cap, counted only.
    pub changes_unrecorded: u64,
    /// Plugin failures passed over under `--on-plugin-error skip`.
    pub skipped_failures: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StagePlugin {
    pub plugin: String,
    pub calls: u64,
    pub changed: u64,
    pub failed: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeChange {
    pub plugin: String,
    pub node: String,
    /// The node's op before.
    pub op: String,
    /// The ops in its place after (empty: removed).
    pub became: Vec<String>,
    /// Ops it became beyond those listed.
    pub became_unlisted: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PatchEntry {
    pub plugin: String,
    pub calls: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecomposedOp {
    pub op: String,
    pub nodes: u64,
    pub became: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FixedAxis {
    pub input: String,
    pub axis: u64,
    pub size: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Lowering {
    /// hfx's native emitter, after the worker's edge decomposition.
    Portable {
        edge_seconds: f64,
        emit_seconds: f64,
        kernel_calls: u64,
        operators: u64,
        values: u64,
        arena_bytes: u64,
        bytes: u64,
        constant_bytes: u64,
    },
    /// ExecuTorch's own lowering with a delegate's partitioner, in the worker.
    Delegated {
        edge_seconds: f64,
        executorch_seconds: f64,
        delegated_nodes: u64,
        portable_nodes: u64,
        /// The delegate's partitions, and those that took the delegate graph
        /// of an earlier one of the same structure (absent in older reports).
        #[serde(default)]
        partitions: u64,
        #[serde(default)]
        partitions_replayed: u64,
        /// Retraces skipped because they change nothing (absent in older reports).
        #[serde(default)]
        retraces_skipped: u64,
        /// Dtype checks skipped on a graph that had passed them (absent in older reports).
        #[serde(default)]
        checks_skipped: u64,
        bytes: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Parity {
    /// `ONNX Runtime`, `torch.export`, `the ExecuTorch runtime`.
    pub runtime: String,
    /// atol and rtol.
    pub tolerance: f64,
    /// One per input size checked.
    pub checks: Vec<ParityCheck>,
    /// Checked on the model's first N layers (`--verify-layers`: its config
    /// truncated, the same checkpoint), not on the whole model.
    pub layers: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParityCheck {
    /// Input shapes by name.
    pub inputs: BTreeMap<String, Vec<u64>>,
    pub outputs: Vec<OutputParity>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputParity {
    pub index: u64,
    /// The model output's name where the artifact names it (ONNX).
    pub name: Option<String>,
    pub shape: Vec<u64>,
    pub expected_shape: Vec<u64>,
    /// None where the shapes differ or the error is not finite.
    pub max_abs: Option<f64>,
    pub max_rel: Option<f64>,
    pub ok: bool,
    /// A sliding-window cache layer's output, compared on its last
    /// `trailing` positions: the ones eager keeps (the artifact keeps all).
    #[serde(default)]
    pub trailing: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationReport {
    /// The tokens equal eager's at every step.
    pub identical: bool,
    /// Each step was fed eager's token, and its tokens are the components'
    /// choice there (a quantized model's check).
    #[serde(default)]
    pub teacher_forced: bool,
    /// Of the tokens eager generated, the share the components chose as
    /// eager did: teacher forced, at every step; else each row up to its
    /// first difference (1 when identical).
    #[serde(default)]
    pub greedy_agreement: Option<f64>,
    /// What the logits and tokens were held to (a quantized scheme's own tolerance).
    #[serde(default)]
    pub tolerance: Option<String>,
    pub steps: Vec<GenerationStep>,
    /// How many times `generate` called each component.
    pub calls: Vec<PatchEntry>,
    pub providers: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationStep {
    pub tokens: Vec<i64>,
    pub eager_tokens: Vec<i64>,
    pub max_abs: Option<f64>,
    pub ok: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginSetReport {
    /// Every plugin that applied, patches first, then in stage order.
    pub plugins: Vec<PluginEntry>,
    pub lock: LockReport,
    /// Plugins found but not applying, and why.
    pub skipped: Vec<SkippedPlugin>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginEntry {
    pub name: String,
    pub version: String,
    pub kind: String,
    pub backends: String,
    pub order: i32,
    pub component_sha256: String,
    pub manifest_sha256: String,
    pub folder: String,
    /// Over every component and stage; a patch's answered calls count as calls that changed something.
    pub calls: u64,
    pub changed: u64,
    pub failed: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockReport {
    /// `none` (no lock), `matched`, or `drift` (differences listed).
    pub status: String,
    pub path: Option<String>,
    /// `--locked` was given: any difference would have stopped the run.
    pub locked: bool,
    pub drift: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkippedPlugin {
    pub name: String,
    pub version: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvironmentReport {
    /// The Python the trace worker runs.
    pub interpreter: String,
    /// Its version, as the worker reported it (or, where the worker had
    /// stopped before the report, as the interpreter answers); absent when
    /// neither could tell.
    pub python: Option<String>,
    /// Upstream versions the plugin set was resolved against, as the worker
    /// reported them, `--target`s over them.
    pub upstream: BTreeMap<String, String>,
    /// Packages whose version a `--target` gave.
    pub targets: Vec<String>,
}

impl Report {
    /// The report of `summary`. The written ONNX models are read back for
    /// their op histograms and output names (without their weights).
    pub fn of(summary: &RunSummary) -> Report {
        let components: Vec<ComponentReport> =
            summary.components.iter().map(|c| component(c, &summary.written)).collect();
        Report {
            schema_version: SCHEMA_VERSION,
            hfx_version: env!("CARGO_PKG_VERSION").to_string(),
            backend: summary.backend.to_string(),
            trace_shared_with: summary.trace_shared_with.map(|b| b.to_string()),
            written: display(&summary.written),
            total_seconds: summary.total.as_secs_f64(),
            generation: summary.generation.as_ref().map(|checked| GenerationReport {
                identical: checked.reply.identical,
                teacher_forced: checked.reply.teacher_forced,
                tolerance: Some(checked.tolerance.clone()),
                greedy_agreement: {
                    let (agreed, total) = crate::pipeline::generation::agreement(&checked.reply);
                    Some(agreed as f64 / total.max(1) as f64)
                },
                steps: checked
                    .reply
                    .steps
                    .iter()
                    .map(|s| GenerationStep {
                        tokens: s.tokens.clone(),
                        eager_tokens: s.eager_tokens.clone(),
                        max_abs: s.max_abs,
                        ok: s.ok,
                    })
                    .collect(),
                calls: checked
                    .reply
                    .calls
                    .iter()
                    .map(|c| PatchEntry { plugin: c.name.clone(), calls: c.calls })
                    .collect(),
                providers: checked.reply.providers.clone(),
            }),
            plugin_set: plugin_set(summary, &components),
            environment: EnvironmentReport {
                interpreter: summary.environment.interpreter.clone(),
                python: summary.environment.python.clone(),
                upstream: summary.environment.upstream.clone(),
                targets: summary.environment.targets.clone(),
            },
            components,
        }
    }
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

fn component(c: &Component, written: &Path) -> ComponentReport {
    let onnx = onnx_written(c, written);
    let fx_stages: Vec<&StageReport> = c.stages.iter().filter(|s| is_fx(s)).collect();
    let onnx_stages: Vec<&StageReport> = c.stages.iter().filter(|s| !is_fx(s)).collect();
    // The translations' model is the one the optimizer gets; IR fixes run after it.
    let onnx_before_optimization = onnx_stages.first().map(|s| s.ops_after.clone());
    let trace = c.trace.as_ref();
    ComponentReport {
        name: c.name.clone(),
        model_class: trace.map(|t| t.model_class.clone()),
        hub: trace.and_then(|t| t.hub.as_ref()).map(|h| h.to_string()),
        artifact: c.artifact.as_ref().map(|a| {
            let (format, path) = match a {
                VerifyModel::Onnx { path } => ("onnx", path),
                VerifyModel::Pt2 { path } => ("pt2", path),
                VerifyModel::Pte { path, .. } => ("pte", path),
                VerifyModel::Openvino { path } => ("openvino", path),
            };
            ArtifactReport { format: format.into(), path: display(&final_path(path, written)) }
        }),
        reference: c.reference.as_deref().map(|r| display(&final_path(r, written))),
        weights: trace.map(|t| match (&t.weights.fallback, t.weights.streamed, t.weights.loaded) {
            (_, true, false) => "streamed".to_string(),
            (_, true, true) => "streamed, read for the reference".to_string(),
            (Some(why), false, _) => format!("loaded: {why}"),
            (None, false, _) => "loaded".to_string(),
        }),
        timeline: timeline(c),
        worker_peak_rss_mib: trace
            .map(|t| {
                let p = &t.peaks;
                [
                    ("import", p.import),
                    ("build", p.build),
                    ("torch.export", p.export),
                    ("save", p.save),
                ]
                .into_iter()
                .map(|(step, mib)| PeakRss { step: step.into(), mib })
                .collect()
            })
            .unwrap_or_default(),
        nodes: NodeCounts {
            fx_before: c.nodes_before as u64,
            fx_after: c.nodes_after as u64,
            onnx_before_optimization: onnx_before_optimization.as_ref().map(total),
            onnx_written: c
                .optimized
                .as_ref()
                .map(|(_, n)| *n as u64)
                .or(onnx.as_ref().map(|o| o.nodes)),
        },
        ops: OpHistograms {
            fx_before: fx_stages.first().map(|s| s.ops_before.clone()).unwrap_or_default(),
            fx_after: fx_stages.last().map(|s| s.ops_after.clone()).unwrap_or_default(),
            onnx_before_optimization,
            onnx_written: onnx.as_ref().map(|o| o.ops.clone()),
        },
        optimization: c.optimized.as_ref().map(|(o, nodes)| Optimization {
            identities_removed: o.identities_removed as u64,
            duplicates_merged: o.merged as u64,
            nodes_folded: o.folding.folded as u64,
            no_op_nodes_removed: o.folding.identities as u64,
            pairs_merged: o.folding.merged_pairs as u64,
            weights_stored_transposed: o.folding.transposed as u64,
            fused_into_convolutions: (o.folding.fused.batch_norms + o.folding.fused.pads) as u64,
            constants_lifted: o.folding.lifted as u64,
            dead_nodes_removed: o.dead_removed as u64,
            nodes_after: *nodes as u64,
            quantization: o.quantized.scheme.as_ref().map(|scheme| Quantization {
                scheme: scheme.clone(),
                matmuls_quantized: o.quantized.quantized as u64,
                embeddings_quantized: o.quantized.gathers as u64,
                excluded: o
                    .quantized
                    .excluded
                    .iter()
                    .map(|(name, reason)| ExcludedWeight {
                        name: name.clone(),
                        reason: reason.clone(),
                    })
                    .collect(),
                weight_bytes_before: o.quantized.weight_bytes_before,
                weight_bytes_after: o.quantized.weight_bytes_after,
                calibration: o.quantized.calibration.clone(),
            }),
        }),
        stages: c.stages.iter().map(stage).collect(),
        patches: trace
            .map(|t| {
                t.patched
                    .iter()
                    .map(|(plugin, calls)| PatchEntry { plugin: plugin.clone(), calls: *calls })
                    .collect()
            })
            .unwrap_or_default(),
        patch_calls_cached: trace.map_or(0, |t| t.patch_calls_cached),
        decomposed: trace
            .map(|t| {
                t.decomposed
                    .iter()
                    .map(|d| DecomposedOp { op: d.op.clone(), nodes: d.nodes, became: d.became })
                    .collect()
            })
            .unwrap_or_default(),
        fixed_axes: c
            .fixed_axes
            .iter()
            .map(|f| FixedAxis { input: f.input.clone(), axis: f.axis as u64, size: f.size })
            .collect(),
        size_guards: trace
            .map(|t| t.size_guards.iter().map(|g| g.guard.clone()).collect())
            .unwrap_or_default(),
        lowering: c.lowered.as_ref().map(|l| match l {
            Lowered::Portable { edge, emitted, emit } => Lowering::Portable {
                edge_seconds: edge.seconds,
                emit_seconds: emit.as_secs_f64(),
                kernel_calls: emitted.instructions as u64,
                operators: emitted.operators as u64,
                values: emitted.values as u64,
                arena_bytes: emitted.arena,
                bytes: emitted.written.bytes,
                constant_bytes: emitted.written.constant_bytes,
            },
            Lowered::Delegated(r) => Lowering::Delegated {
                edge_seconds: r.edge_seconds,
                executorch_seconds: r.executorch_seconds,
                delegated_nodes: r.delegated_nodes,
                portable_nodes: r.portable_nodes,
                partitions: r.partitions,
                partitions_replayed: r.partitions_replayed,
                retraces_skipped: r.retraces_skipped,
                checks_skipped: r.checks_skipped,
                bytes: r.bytes,
            },
        }),
        parity: parity(c, onnx.as_ref().map(|o| o.outputs.as_slice())),
    }
}

/// The FX stages run before emission; the others (ONNX) inside it.
fn is_fx(stage: &StageReport) -> bool {
    stage.stage.starts_with("fx-")
}

fn total(histogram: &OpHistogram) -> u64 {
    histogram.values().sum()
}

/// Where a component's file is now: an export folder's components were
/// written in a scratch folder and moved into it under their own names.
fn final_path(path: &Path, written: &Path) -> std::path::PathBuf {
    match path.file_name() {
        Some(name) if written.is_dir() => written.join(name),
        _ => path.to_path_buf(),
    }
}

/// The written ONNX model's ops and outputs, read back; None for other
/// artifacts, or (with a warning) when the file cannot be read.
fn onnx_written(c: &Component, written: &Path) -> Option<onnx_file::GraphFacts> {
    let Some(VerifyModel::Onnx { path }) = &c.artifact else { return None };
    let path = final_path(path, written);
    match onnx_file::read(&path) {
        Ok(facts) => Some(facts),
        Err(e) => {
            tracing::warn!("the report leaves out the ONNX model's ops: {e}");
            None
        }
    }
}

/// The run's steps for one program, back to back: the worker's trace
/// steps, read, the FX stages, then the emit step: the ONNX stages or a
/// `.pte`'s lowering inside it, and what is left of it (passes, writing,
/// verification).
fn timeline(c: &Component) -> Vec<TimelineStep> {
    let mut steps: Vec<(String, &str, f64)> = Vec::new();
    if let Some(t) = &c.trace {
        let s = &t.times;
        for (name, seconds) in [
            ("import", s.import),
            ("build", s.build),
            ("eager", s.eager),
            ("torch.export", s.export),
            ("save", s.save),
        ] {
            steps.push((format!("trace/{name}"), "worker", seconds));
        }
    }
    steps.push(("read".into(), "host", c.read.as_secs_f64()));
    for stage in c.stages.iter().filter(|s| is_fx(s)) {
        steps.push((stage.stage.to_string(), "host", stage.elapsed.as_secs_f64()));
    }
    let mut inside_emit = Vec::new();
    for stage in c.stages.iter().filter(|s| !is_fx(s)) {
        inside_emit.push((stage.stage.to_string(), "host", stage.elapsed.as_secs_f64()));
    }
    match &c.lowered {
        Some(Lowered::Portable { edge, emit, .. }) => {
            inside_emit.push(("edge-decompose".into(), "worker", edge.seconds));
            inside_emit.push(("pte-emit".into(), "host", emit.as_secs_f64()));
        }
        Some(Lowered::Delegated(l)) => {
            inside_emit.push(("lower".into(), "worker", l.edge_seconds + l.executorch_seconds))
        }
        None => {}
    }
    let verify = c.verify.as_secs_f64();
    let accounted: f64 = inside_emit.iter().map(|(_, _, s)| s).sum::<f64>() + verify;
    let rest = (c.emit.as_secs_f64() - accounted).max(0.0);
    steps.extend(inside_emit);
    steps.push((
        String::from(if c.optimized.is_some() { "optimize + write" } else { "write" }),
        "host",
        rest,
    ));
    if !c.verified.is_empty() {
        steps.push(("verify".into(), "worker", verify));
    }
    let mut start = 0.0;
    steps
        .into_iter()
        .map(|(name, runs_in, seconds)| {
            let step =
                TimelineStep { name, runs_in: runs_in.into(), start_seconds: start, seconds };
            start += seconds;
            step
        })
        .collect()
}

fn stage(s: &StageReport) -> StageEntry {
    StageEntry {
        name: s.stage.to_string(),
        seconds: s.elapsed.as_secs_f64(),
        dead_code_removed: s.dead_code_removed as u64,
        plugins: s
            .plugins
            .iter()
            .map(|(plugin, c)| StagePlugin {
                plugin: plugin.clone(),
                calls: c.calls,
                changed: c.changed,
                failed: c.failed,
            })
            .collect(),
        changes: s
            .changes
            .iter()
            .map(|c| NodeChange {
                plugin: c.plugin.clone(),
                node: c.node.clone(),
                op: c.op.clone(),
                became: c.became.clone(),
                became_unlisted: c.became_unlisted as u64,
            })
            .collect(),
        changes_unrecorded: s.changes_unrecorded,
        skipped_failures: s.skipped.iter().map(|e| e.to_string()).collect(),
    }
}

/// The verification's checks; outputs named by the ONNX model's outputs
/// when it has as many as the checks compared.
fn parity(c: &Component, onnx_outputs: Option<&[String]>) -> Option<Parity> {
    if c.verified.is_empty() {
        return None;
    }
    let runtime = c.runtime.clone()?;
    let checks = c
        .verified
        .iter()
        .map(|check| {
            let names = onnx_outputs.filter(|names| names.len() == check.outputs.len());
            ParityCheck {
                inputs: check.inputs.clone(),
                outputs: check
                    .outputs
                    .iter()
                    .enumerate()
                    .map(|(index, o)| OutputParity {
                        index: index as u64,
                        name: names.and_then(|n| n.get(index)).cloned(),
                        shape: o.shape.clone(),
                        expected_shape: o.expected_shape.clone(),
                        max_abs: o.max_abs,
                        max_rel: o.max_rel,
                        ok: o.ok,
                        trailing: o.trailing,
                    })
                    .collect(),
            }
        })
        .collect();
    Some(Parity {
        runtime: runtime.name().to_string(),
        tolerance: runtime.tolerance(),
        checks,
        layers: c.verified_layers,
    })
}

fn plugin_set(summary: &RunSummary, components: &[ComponentReport]) -> PluginSetReport {
    // Calls, changes and failures per plugin over every component and stage.
    let mut counts: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
    for c in components {
        for s in &c.stages {
            for p in &s.plugins {
                let entry = counts.entry(p.plugin.as_str()).or_default();
                *entry = (entry.0 + p.calls, entry.1 + p.changed, entry.2 + p.failed);
            }
        }
        for p in &c.patches {
            let entry = counts.entry(p.plugin.as_str()).or_default();
            *entry = (entry.0 + p.calls, entry.1 + p.calls, entry.2);
        }
    }
    let set = &summary.plugin_set;
    let status = match (&set.lock, set.drift.is_empty()) {
        (None, _) => "none",
        (Some(_), true) => "matched",
        (Some(_), false) => "drift",
    };
    PluginSetReport {
        plugins: set
            .plugins
            .iter()
            .map(|p| {
                let (calls, changed, failed) =
                    counts.get(p.name.as_str()).copied().unwrap_or_default();
                PluginEntry {
                    name: p.name.clone(),
                    version: p.version.clone(),
                    kind: p.kind.as_str().to_string(),
                    backends: p.backends.clone(),
                    order: p.order,
                    component_sha256: p.component_sha256.clone(),
                    manifest_sha256: p.manifest_sha256.clone(),
                    folder: display(&p.folder),
                    calls,
                    changed,
                    failed,
                }
            })
            .collect(),
        lock: LockReport {
            status: status.into(),
            path: set.lock.as_deref().map(display),
            locked: set.locked,
            drift: set.drift.clone(),
        },
        skipped: summary
            .skipped
            .iter()
            .map(|s| SkippedPlugin {
                name: s.found.manifest.plugin.name.clone(),
                version: s.found.manifest.plugin.version.clone(),
                reason: s.reason.clone(),
            })
            .collect(),
    }
}
