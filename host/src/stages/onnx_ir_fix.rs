//! ONNX IR fixes: every node of the finished model (main graph and functions)
//! whose op type a plugin declared goes to that plugin, in stage order.

use std::time::Instant;

use super::{Dispatcher, NodeChange, OnPluginError, StageReport};
use crate::onnx::Model;
use crate::plugins::kind;
use crate::plugins::{PluginError, PluginOf, Runtime};

pub fn run(
    runtime: &Runtime,
    plugins: &[PluginOf<'_, kind::OnnxIrFix>],
    model: &mut Model,
    stage: &'static str,
    policy: OnPluginError,
) -> Result<StageReport, PluginError> {
    let start = Instant::now();
    let mut report = StageReport::new(stage);
    report.ops_before = super::onnx_ops(&model.nodes);
    let mut dispatcher = Dispatcher::new(runtime, plugins, stage);
    for node in 0..model.nodes.len() as u32 {
        let op_type = model.nodes[node as usize].op_type.clone();
        for index in dispatcher.candidates(&op_type) {
            match dispatcher.session(index, &mut report).onnx_ir_fix(model, node) {
                Ok(true) => {
                    report.changed(dispatcher.name(index));
                    // An IR fix repairs a node in place (attributes): it stays itself.
                    let change = report.recording().then(|| {
                        let fixed = &model.nodes[node as usize];
                        let op = super::onnx_op(&fixed.domain, &fixed.op_type);
                        let name =
                            fixed.outputs.first().cloned().unwrap_or_else(|| format!("#{node}"));
                        NodeChange {
                            plugin: dispatcher.name(index).to_string(),
                            node: name,
                            op: op.clone(),
                            became: vec![op],
                            became_unlisted: 0,
                        }
                    });
                    report.record(change);
                }
                Ok(false) => {}
                Err(error) => report.failed(error, policy)?,
            }
        }
    }
    report.ops_after = super::onnx_ops(&model.nodes);
    report.elapsed = start.elapsed();
    Ok(report)
}
