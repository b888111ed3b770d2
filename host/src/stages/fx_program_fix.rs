//! FX program fixes: each plugin sees the whole program once, in stage order
//! (range constraints, placeholder metadata).

use std::time::Instant;

use super::{OnPluginError, StageReport};
use crate::graph::Graph;
use crate::plugins::kind;
use crate::plugins::{PluginError, PluginOf, Runtime, Session};

pub fn run(
    runtime: &Runtime,
    plugins: &[PluginOf<'_, kind::FxProgramFix>],
    graph: &mut Graph,
    stage: &'static str,
    policy: OnPluginError,
) -> Result<StageReport, PluginError> {
    let start = Instant::now();
    let mut report = StageReport::new(stage);
    report.ops_before = super::fx_ops(graph);
    for plugin in plugins {
        report.plugins.entry(plugin.name().to_string()).or_default().calls += 1;
        match Session::new(runtime, *plugin, stage).fx_program_fix(graph) {
            Ok(()) => report.changed(plugin.name()),
            Err(error) => report.failed(error, policy)?,
        }
    }
    // A whole-program fix changes no one node: its calls are counted, no change is recorded.
    report.ops_after =
        if plugins.is_empty() { report.ops_before.clone() } else { super::fx_ops(graph) };
    report.elapsed = start.elapsed();
    Ok(report)
}
