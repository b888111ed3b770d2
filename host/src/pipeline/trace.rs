//! The trace step: the worker traces the model into a scratch folder beside
//! the output, with the backend's patch plugins answering patched calls.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::options::Trace;
use super::scratch::Scratch;
use crate::plugins::loading::LoadedSet;
use crate::plugins::{self, Backend, PluginKind};
use crate::stages;
use crate::trace::Worker;

/// A program traced into a scratch folder (removed on drop).
pub struct Traced {
    _scratch: Scratch,
    pub program: PathBuf,
    /// The eager outputs (`reference.pt`), moved beside the artifact at the end.
    pub reference: PathBuf,
    /// Where the weights are when the worker wrote them beside the `.pt2`.
    pub side_weights: Option<PathBuf>,
    /// The model output's leaf names (`logits`, `cache.layers.0.keys`).
    pub output_names: Vec<String>,
    /// The reference's `ExportMetadata` fields the worker recorded.
    pub export_metadata: serde_json::Value,
    pub summary: TraceSummary,
}

/// What the trace reports to the user.
#[derive(Debug, Clone, Default)]
pub struct TraceSummary {
    pub model_class: String,
    pub seconds: f64,
    /// The worker's own times per step (import, build, eager, export, save).
    pub times: BTreeMap<String, f64>,
    /// The worker's peak resident memory (MiB) at the end of each step.
    pub peaks: BTreeMap<String, f64>,
    pub side_weights: bool,
    pub outputs: u64,
    /// Patch plugins and how many calls each answered.
    pub patched: Vec<(String, u64)>,
}

/// Traces `trace`'s model in `worker`, writing beside `output`.
pub fn run(worker: &mut Worker, trace: &Trace, loaded: &LoadedSet, backend: Backend, output: &Path) -> Result<Traced> {
    let scratch = Scratch::beside(output, "trace")?;
    let program = scratch.path().join("model.pt2");
    let reference = scratch.path().join("reference.pt");
    let patch_plugins = stages::select(&loaded.set.plugins, backend, PluginKind::Patch);
    let mut sessions: Vec<plugins::Session> =
        patch_plugins.iter().map(|p| plugins::Session::new(&loaded.runtime, p, "patches")).collect();
    let result = crate::trace::trace(worker, &trace.request, &mut sessions, &program, &reference, trace.deadline)?;
    let numbers = |key: &str| -> BTreeMap<String, f64> {
        result
            .get(key)
            .and_then(|s| s.as_object())
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_f64()?))).collect())
            .unwrap_or_default()
    };
    let (times, peaks) = (numbers("seconds"), numbers("peak_rss_mib"));
    let seconds = times.values().sum();
    let outputs = result.get("outputs").and_then(|o| o.as_u64()).unwrap_or(0);
    let model_class = result.get("model_class").and_then(|c| c.as_str()).unwrap_or("model").to_string();
    let patched = sessions.iter().map(|s| (s.plugin().name().to_string(), s.calls)).collect();
    let output_names = result
        .get("output_names")
        .and_then(|n| n.as_array())
        .map(|a| a.iter().filter_map(|n| n.as_str().map(String::from)).collect())
        .unwrap_or_default();
    let export_metadata = result.get("export_metadata").cloned().unwrap_or_default();
    let side_weights =
        (result.get("side_weights").and_then(|s| s.as_bool()) == Some(true)).then(|| crate::graph::pt2::side_weights_path(&program));
    let summary = TraceSummary { model_class, seconds, times, peaks, side_weights: side_weights.is_some(), outputs, patched };
    Ok(Traced { _scratch: scratch, program, reference, side_weights, output_names, export_metadata, summary })
}
