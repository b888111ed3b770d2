//! FX node fixes: walk a snapshot of every (sub-)graph's nodes, hand each node
//! to the plugins that declared its target, in stage order; the first that
//! consumes it wins. Dead-code elimination runs at the end of the walk.
//! Fixes run again after decomposition, so they must be idempotent.

use std::time::Instant;

use super::{Dispatcher, OnPluginError, StageReport};
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
    if plugins.is_empty() {
        // No fixes, no walk and no DCE: the program stays exactly as traced.
        return Ok(report);
    }
    let mut dispatcher = Dispatcher::new(runtime, plugins, stage);
    let snapshot: Vec<NodeId> = graph.nodes().collect();
    for node in snapshot {
        let Ok(target) = graph.node(node).map(|n| n.target.clone()) else {
            continue; // erased by an earlier fix
        };
        for index in dispatcher.candidates(&target) {
            match dispatcher.session(index, &mut report).fx_node_fix(graph, node) {
                Ok(true) => {
                    report.changed(dispatcher.name(index));
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
    report.elapsed = start.elapsed();
    Ok(report)
}
