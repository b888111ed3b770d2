//! The stages that run plugins, one module per stage, in the order the
//! reference exporters run them. Each stage walks the graph itself and hands
//! plugins only what they declared: no plugin is called per node blindly.

pub mod fx_node_fix;
pub mod fx_program_fix;
pub mod onnx_ir_fix;
pub mod onnx_translation;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::plugins::kind::{self, Kind};
use crate::plugins::{Backend, Plugin, PluginError, PluginOf, Runtime, Session};

/// What to do when a plugin call fails (its changes are rolled back either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OnPluginError {
    /// Stop the run with the plugin's error.
    #[default]
    Fail,
    /// Warn, treat the call as "did nothing", and go on.
    Skip,
}

/// Per-plugin counts of one stage run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginCounts {
    pub calls: u64,
    /// Calls that consumed / changed what they were given.
    pub changed: u64,
    pub failed: u64,
}

/// Op → how many nodes of it: FX targets (`aten.mm.default`) or ONNX op
/// types (`MatMul`; `domain.Op` outside the default domain).
pub type OpHistogram = BTreeMap<String, u64>;

/// The node changes a stage run records; past this many it only counts them
/// (a translation stage changes every node, and a report of a large model
/// must stay a page a browser opens).
pub const MAX_RECORDED_CHANGES: usize = 4096;
/// The ops listed for what one node became; past this many they are counted.
pub const MAX_OPS_PER_CHANGE: usize = 32;

/// One node a plugin changed: what it was and what stands in its place.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeChange {
    pub plugin: String,
    /// The node's name before the change (its first output's).
    pub node: String,
    /// Its op before the change.
    pub op: String,
    /// The ops in its place after it, in the order they were made: the node
    /// itself if it is kept, then the nodes the call added (a fix), or the
    /// ONNX nodes emitted for it (a translation). Empty: the node is gone.
    pub became: Vec<String>,
    /// Ops it became past [`MAX_OPS_PER_CHANGE`], not listed.
    pub became_unlisted: usize,
}

#[derive(Debug, Clone, Default)]
pub struct StageReport {
    pub stage: &'static str,
    pub plugins: BTreeMap<String, PluginCounts>,
    /// Failures passed over under `--on-plugin-error skip`.
    pub skipped: Vec<PluginError>,
    /// Nodes removed after the walk: dead code, and for an ONNX stage on a
    /// lowered model the copies of nodes its fixes made equal.
    pub dead_code_removed: usize,
    pub elapsed: Duration,
    /// The ops of the program the stage was given, and of the one it handed
    /// on (for the ONNX stages, the ONNX nodes, functions' included).
    pub ops_before: OpHistogram,
    pub ops_after: OpHistogram,
    /// The nodes plugins changed, in the order they did, at most
    /// [`MAX_RECORDED_CHANGES`] (whole-program fixes change no one node).
    pub changes: Vec<NodeChange>,
    /// Changes past [`MAX_RECORDED_CHANGES`], counted only.
    pub changes_unrecorded: u64,
}

impl StageReport {
    fn new(stage: &'static str) -> Self {
        StageReport { stage, ..Default::default() }
    }

    fn changed(&mut self, plugin: &str) {
        self.plugins.entry(plugin.to_string()).or_default().changed += 1;
    }

    /// Whether a change made now would be recorded: the caller then takes
    /// the node's name before the call (the call may erase the node).
    fn recording(&self) -> bool {
        self.changes.len() < MAX_RECORDED_CHANGES
    }

    /// Records one node change (`None`: past the cap, counted only).
    fn record(&mut self, change: Option<NodeChange>) {
        match change {
            Some(change) if self.recording() => self.changes.push(change),
            _ => self.changes_unrecorded += 1,
        }
    }

    /// Records a failure: an error under `fail`, a warning under `skip`.
    fn failed(&mut self, error: PluginError, policy: OnPluginError) -> Result<(), PluginError> {
        self.plugins.entry(error.plugin.clone()).or_default().failed += 1;
        match policy {
            OnPluginError::Fail => Err(error),
            OnPluginError::Skip => {
                tracing::warn!("{error} (skipped: --on-plugin-error skip)");
                self.skipped.push(error);
                Ok(())
            }
        }
    }
}

/// A change's `became`, capped at [`MAX_OPS_PER_CHANGE`].
fn became(ops: impl Iterator<Item = String>) -> (Vec<String>, usize) {
    let mut listed = Vec::new();
    let mut unlisted = 0;
    for op in ops {
        if listed.len() < MAX_OPS_PER_CHANGE {
            listed.push(op);
        } else {
            unlisted += 1;
        }
    }
    (listed, unlisted)
}

/// The op histogram of every (sub-)graph's live nodes.
pub fn fx_ops(graph: &crate::graph::Graph) -> OpHistogram {
    let mut counts: HashMap<&str, u64> = HashMap::new();
    for id in graph.nodes() {
        if let Ok(node) = graph.node(id) {
            *counts.entry(node.target.as_str()).or_default() += 1;
        }
    }
    counts.into_iter().map(|(op, n)| (op.to_string(), n)).collect()
}

/// The op histogram of ONNX nodes, keyed by [`onnx_op`].
pub fn onnx_ops<'n>(nodes: impl IntoIterator<Item = &'n crate::onnx::Node>) -> OpHistogram {
    let mut counts: HashMap<(&str, &str), u64> = HashMap::new();
    for node in nodes {
        *counts.entry((node.domain.as_str(), node.op_type.as_str())).or_default() += 1;
    }
    let mut histogram = OpHistogram::new();
    for ((domain, op_type), n) in counts {
        // `` and `ai.onnx` are one domain.
        *histogram.entry(onnx_op(domain, op_type)).or_default() += n;
    }
    histogram
}

/// An ONNX op as histograms name it: `MatMul` in the default domain, else
/// `com.microsoft.FusedMatMul`.
pub fn onnx_op(domain: &str, op_type: &str) -> String {
    match domain {
        "" | "ai.onnx" => op_type.to_string(),
        domain => format!("{domain}.{op_type}"),
    }
}

/// The plugins of kind `K` for one backend, in stage order (manifest `order`,
/// then name); which plugins serve a backend is [`Backends::serve`].
pub fn select<K: Kind>(plugins: &[Plugin], backend: Backend) -> Vec<PluginOf<'_, K>> {
    let mut chosen: Vec<PluginOf<K>> = plugins
        .iter()
        .filter(|p| p.manifest.plugin.backend.serve(backend))
        .filter_map(Plugin::of_kind::<K>)
        .collect();
    chosen.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    chosen
}

/// The ops a backend that translates ops handles, as its translations and FX
/// node fixes declare them; None for a backend without translations. After
/// the trace, only ops outside this set are decomposed (so a third party's
/// translation keeps its op whole).
pub fn handled_ops(plugins: &[Plugin], backend: Backend) -> Option<Vec<String>> {
    let translations = select::<kind::OnnxTranslation>(plugins, backend);
    if translations.is_empty() {
        return None;
    }
    let fixes = select::<kind::FxNodeFix>(plugins, backend);
    let declared = translations.iter().map(|t| &t.targets).chain(fixes.iter().map(|f| &f.targets));
    Some(declared.flatten().cloned().collect())
}

/// Per-target dispatch over a stage's plugins, each with a session created on
/// its first call (one Store per plugin per stage run).
struct Dispatcher<'a, K: Kind> {
    runtime: &'a Runtime,
    plugins: &'a [PluginOf<'a, K>],
    stage: &'static str,
    by_target: HashMap<&'a str, Vec<usize>>,
    sessions: Vec<Option<Session<'a, K>>>,
}

impl<'a, K: Kind> Dispatcher<'a, K> {
    fn new(runtime: &'a Runtime, plugins: &'a [PluginOf<'a, K>], stage: &'static str) -> Self {
        let mut by_target: HashMap<&str, Vec<usize>> = HashMap::new();
        for (index, plugin) in plugins.iter().enumerate() {
            for target in &plugin.targets {
                by_target.entry(target.as_str()).or_default().push(index);
            }
        }
        Dispatcher {
            runtime,
            plugins,
            stage,
            by_target,
            sessions: plugins.iter().map(|_| None).collect(),
        }
    }

    /// Indexes of the plugins that declared `target`, in stage order.
    fn candidates(&self, target: &str) -> Vec<usize> {
        self.by_target.get(target).cloned().unwrap_or_default()
    }

    /// The plugin's session, counting the call in `report`.
    fn session(&mut self, index: usize, report: &mut StageReport) -> &mut Session<'a, K> {
        report.plugins.entry(self.plugins[index].name().to_string()).or_default().calls += 1;
        let (runtime, plugin, stage) = (self.runtime, self.plugins[index], self.stage);
        self.sessions[index].get_or_insert_with(|| Session::new(runtime, plugin, stage))
    }

    fn name(&self, index: usize) -> &str {
        self.plugins[index].name()
    }
}

/// The FX stages a backend runs on a traced program, in order. hfx numbers its
/// pipeline as the ExecuTorch exporter does (1 backend preparation, 2-3
/// patches at trace time, 4 program fixes, 5 node fixes); the labels also name
/// the reference stage of the other backends. The dynamo backend runs the same
/// two for its own plugins; ONNX runs node fixes again after decomposition
/// once hfx decomposes.
pub fn run_fx_stages(
    runtime: &Runtime,
    plugins: &[Plugin],
    backend: Backend,
    graph: &mut crate::graph::Graph,
    policy: OnPluginError,
) -> Result<Vec<StageReport>, PluginError> {
    // ── fx-program-fixes: whole-program repairs (ranges, placeholder metadata) ──
    let program_fixes = select::<kind::FxProgramFix>(plugins, backend);
    let program = fx_program_fix::run(runtime, &program_fixes, graph, "fx-program-fixes", policy)?;
    // ── fx-node-fixes: per-node rewrites by declared target, DCE at the end ──
    let node_fixes = select::<kind::FxNodeFix>(plugins, backend);
    let node = fx_node_fix::run(runtime, &node_fixes, graph, "fx-node-fixes", policy)?;
    Ok(vec![program, node])
}
