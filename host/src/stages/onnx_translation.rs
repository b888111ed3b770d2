//! ── onnx-translations ──
//!
//! Every node of the (fixed) FX program, in order, goes to the translation
//! plugin for its target; the plugin emits ONNX nodes through the builder and
//! binds the node's outputs to ONNX names. Of several plugins for one target,
//! the last in stage order (highest `order`) translates it: that is how a third
//! party replaces a default translation without rebuilding hfx.
//!
//! The host binds what no plugin should: graph inputs to their ONNX names
//! (user inputs by name, parameters, buffers and constants by their qualified
//! names, which become initializers).

use std::time::Instant;

use super::{Dispatcher, NodeChange, StageReport};
use crate::graph::{Graph, ValueId};
use crate::onnx::inputs::{graph_outputs, InputRole};
use crate::onnx::TranslationBuilder;
use crate::plugins::kind;
use crate::plugins::{PluginError, PluginOf, Runtime};

#[derive(Debug, thiserror::Error)]
pub enum TranslationError {
    #[error("no translation plugin for `{target}` (node `{node}`{made_at}){source_note}: add one (`hfx plugins new --kind onnx-translation NAME`) to the plugin folders")]
    Missing { target: String, node: String, made_at: String, source_note: ProgramSource },
    #[error("plugin `{plugin}` translated node `{node}` (`{target}`) but left its output `{value}` without an ONNX name")]
    Unbound { plugin: String, node: String, target: String, value: String },
    #[error("the graph output `{0}` was never translated")]
    Output(String),
    #[error(transparent)]
    Plugin(#[from] PluginError),
}

/// Where the program an op is missing from came from, which says whether
/// decomposition was tried; set by the caller that knows (the pipeline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramSource {
    Unknown,
    /// Traced by hfx: what no plugin handles was decomposed where torch's default table can.
    Traced,
    /// A `.pt2` read as saved: nothing was decomposed.
    Saved,
}

impl std::fmt::Display for ProgramSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ProgramSource::Unknown => "",
            ProgramSource::Traced => ", and torch's default table does not decompose it",
            ProgramSource::Saved => " (a `.pt2` is translated as saved: trace the model with hfx to decompose what no plugin translates)",
        })
    }
}

/// Translates the root graph of `graph`. Returns the builder (nodes and value
/// names) and the stage report.
pub fn run(
    runtime: &Runtime,
    plugins: &[PluginOf<'_, kind::OnnxTranslation>],
    graph: &mut Graph,
    roles: &[InputRole],
    opset: u32,
) -> Result<(TranslationBuilder, StageReport), TranslationError> {
    let start = Instant::now();
    let stage = "onnx-translations";
    let mut report = StageReport::new(stage);
    report.ops_before = super::fx_ops(graph);
    let mut builder = TranslationBuilder::new(opset);
    bind_inputs(graph, roles, &mut builder);
    let mut dispatcher = Dispatcher::new(runtime, plugins, stage);
    let nodes: Vec<_> = graph.order(0).collect();
    for id in nodes {
        let node = graph.node(id).expect("ordered nodes exist");
        let target = node.target.clone();
        let Some(&index) = dispatcher.candidates(&target).last() else {
            let made_at = model_line(node).map(|line| format!(", {line}")).unwrap_or_default();
            return Err(TranslationError::Missing {
                target,
                node: graph.node_name(id),
                made_at,
                source_note: ProgramSource::Unknown,
            });
        };
        let outputs: Vec<ValueId> = node.output_values().collect();
        let name = report.recording().then(|| graph.node_name(id));
        let first_emitted = builder.nodes.len();
        dispatcher.session(index, &mut report).translate(graph, id, &mut builder)?;
        report.changed(dispatcher.name(index));
        let change = name.map(|name| {
            let emitted = builder.nodes.get(first_emitted..).unwrap_or_default();
            let (became, became_unlisted) =
                super::became(emitted.iter().map(|n| super::onnx_op(&n.domain, &n.op_type)));
            NodeChange {
                plugin: dispatcher.name(index).to_string(),
                node: name,
                op: target.clone(),
                became,
                became_unlisted,
            }
        });
        report.record(change);
        // Every output something reads must have a name now.
        if let Some(&value) =
            outputs.iter().find(|&&v| graph.is_used(v) && !builder.value_names.contains_key(&v))
        {
            return Err(TranslationError::Unbound {
                plugin: dispatcher.name(index).to_string(),
                node: graph.node_name(id),
                target,
                value: graph.value(value).map(|v| v.name.clone()).unwrap_or_default(),
            });
        }
    }
    for output in graph_outputs(graph) {
        if !builder.value_names.contains_key(&output) {
            return Err(TranslationError::Output(
                graph.value(output).map(|v| v.name.clone()).unwrap_or_default(),
            ));
        }
    }
    report.ops_after = super::onnx_ops(&builder.nodes);
    report.elapsed = start.elapsed();
    Ok((builder, report))
}

fn bind_inputs(graph: &Graph, roles: &[InputRole], builder: &mut TranslationBuilder) {
    let inputs = graph.subgraph(0).map(|g| g.inputs.clone()).unwrap_or_default();
    for (value, role) in inputs.iter().zip(roles) {
        let name = match role {
            InputRole::User(name) => name.clone(),
            InputRole::Initializer { fqn, .. } => fqn.clone(),
            InputRole::Constant => continue,
        };
        builder.bind(*value, name);
    }
}

/// Where the model's code made `node`: the innermost frame of its
/// `stack_trace`, as `modeling_bloom.py:245 in forward`.
fn model_line(node: &crate::graph::Node) -> Option<String> {
    let trace = node.meta.get("stack_trace")?;
    let frame = trace.lines().rev().find_map(|l| l.trim().strip_prefix("File \""))?;
    let (path, rest) = frame.split_once("\", line ")?;
    let (line, function) = rest.split_once(", in ")?;
    let file = path.rsplit('/').next()?;
    Some(format!("{file}:{line} in {}", function.trim()))
}
