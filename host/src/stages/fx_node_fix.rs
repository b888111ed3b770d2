//! FX node fixes: walk a snapshot of every (sub-)graph's nodes, hand each node
//! to the plugins that declared its target, in stage order; the first that
//! consumes it wins. Dead-code elimination runs at the end of the walk.
//! Fixes run again after decomposition, so they must be idempotent.

use std::collections::HashMap;
use std::time::Instant;

use super::{OnPluginError, StageReport};
use crate::graph::{Graph, NodeId};
use crate::plugins::{Plugin, PluginError, Runtime, Session};

pub fn run(
    runtime: &Runtime,
    plugins: &[&Plugin],
    graph: &mut Graph,
    stage: &'static str,
    policy: OnPluginError,
) -> Result<StageReport, PluginError> {
    let start = Instant::now();
    let mut report = StageReport::new(stage);
    let mut dispatch: HashMap<&str, Vec<usize>> = HashMap::new();
    for (index, plugin) in plugins.iter().enumerate() {
        for target in &plugin.targets {
            dispatch.entry(target.as_str()).or_default().push(index);
        }
    }
    let mut sessions: Vec<Option<Session>> = plugins.iter().map(|_| None).collect();
    let snapshot: Vec<NodeId> = graph.nodes().collect();
    for node in snapshot {
        let Ok(target) = graph.node(node).map(|n| n.target.clone()) else {
            continue; // erased by an earlier fix
        };
        let Some(candidates) = dispatch.get(target.as_str()) else { continue };
        for &index in candidates {
            let session = sessions[index].get_or_insert_with(|| Session::new(runtime, plugins[index], stage));
            let counts = report.plugins.entry(plugins[index].name().to_string()).or_default();
            counts.calls += 1;
            match session.fx_node_fix(graph, node) {
                Ok(true) => {
                    counts.changed += 1;
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
