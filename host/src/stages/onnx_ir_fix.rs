//! ONNX IR fixes: every node of the finished model (main graph and functions)
//! whose op type a plugin declared goes to that plugin, in stage order.

use std::collections::HashMap;
use std::time::Instant;

use super::{OnPluginError, StageReport};
use crate::onnx::Model;
use crate::plugins::{Plugin, PluginError, Runtime, Session};

pub fn run(
    runtime: &Runtime,
    plugins: &[&Plugin],
    model: &mut Model,
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
    for node in 0..model.nodes.len() as u32 {
        let op_type = model.nodes[node as usize].op_type.clone();
        let Some(candidates) = dispatch.get(op_type.as_str()) else { continue };
        for &index in candidates {
            let session = sessions[index].get_or_insert_with(|| Session::new(runtime, plugins[index], stage));
            let counts = report.plugins.entry(plugins[index].name().to_string()).or_default();
            counts.calls += 1;
            match session.onnx_ir_fix(model, node) {
                Ok(true) => counts.changed += 1,
                Ok(false) => {}
                Err(error) => report.failed(error, policy)?,
            }
        }
    }
    report.elapsed = start.elapsed();
    Ok(report)
}
