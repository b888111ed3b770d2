//! FX node fixes: walk a snapshot of every (sub-)graph's nodes, hand each node
//! to the plugins that declared its target, in stage order; the first that
//! consumes it wins. Dead-code elimination runs at the end of the walk.
//! Fixes run again after decomposition, so they must be idempotent.

use std::time::Instant;

use super::{Dispatcher, NodeChange, OnPluginError, StageReport};
use crate::graph::{Graph, NodeId};
use crate::plugins::kind;
use crate::plugins::{PluginError, PluginOf, Runtime};

pub fn run(
    runtime: &Runtime,
    plugins: &[PluginOf<'_, kind::FxNodeFix>],
    graph: &mut Graph,
    stage: &'static str,
    policy: OnPluginError,
) -> Result<StageReport, PluginError> {
    let start = Instant::now();
    let mut report = StageReport::new(stage);
    report.ops_before = super::fx_ops(graph);
    if plugins.is_empty() {
        // No fixes, no walk and no DCE: the program stays exactly as traced.
        report.ops_after = report.ops_before.clone();
        return Ok(report);
    }
    let mut dispatcher = Dispatcher::new(runtime, plugins, stage);
    let snapshot: Vec<NodeId> = graph.nodes().collect();
    for node in snapshot {
        let Ok(target) = graph.node(node).map(|n| n.target.clone()) else {
            continue; // erased by an earlier fix
        };
        for index in dispatcher.candidates(&target) {
            // Taken before the call, which may erase the node.
            let name = report.recording().then(|| graph.node_name(node));
            let first_added = graph.next_node_id();
            match dispatcher.session(index, &mut report).fx_node_fix(graph, node) {
                Ok(true) => {
                    report.changed(dispatcher.name(index));
                    let change = name.map(|name| {
                        let (became, became_unlisted) =
                            super::became(in_place_of(graph, node, first_added));
                        NodeChange {
                            plugin: dispatcher.name(index).to_string(),
                            node: name,
                            op: target.clone(),
                            became,
                            became_unlisted,
                        }
                    });
                    report.record(change);
                    break;
                }
                Ok(false) => {}
                Err(error) => report.failed(error, policy)?,
            }
            if graph.node(node).is_err() {
                break; // a declining fix erased it anyway
            }
        }
    }
    report.dead_code_removed = graph.eliminate_dead_code();
    report.ops_after = super::fx_ops(graph);
    report.elapsed = start.elapsed();
    Ok(report)
}

/// The ops in `node`'s place after a fix: the node if the fix kept it, then
/// every live node the call added (the arena only grows, so those are the
/// ids from `first_added` on).
fn in_place_of(
    graph: &Graph,
    node: NodeId,
    first_added: NodeId,
) -> impl Iterator<Item = String> + '_ {
    let kept = graph.node(node).ok().map(|n| n.target.clone());
    let added = (first_added.0..graph.next_node_id().0)
        .filter_map(|id| graph.node(NodeId(id)).ok())
        .map(|n| n.target.clone());
    kept.into_iter().chain(added)
}
