//! ONNX IR fixes and rewrites (fusions): every node of the lowered, optimized
//! main graph whose op type a plugin declared goes to that plugin, in stage
//! order; then what the rewrites left unread is removed. The model a plugin
//! sees knows its initializers, small constants' values and values' types.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use super::{Dispatcher, NodeChange, OnPluginError, StageReport};
use crate::graph::{Graph, ValueId, ValueMeta};
use crate::onnx::emit::Lowered;
use crate::onnx::proto as p;
use crate::onnx::weights::Initializer;
use crate::plugins::ir_model::{
    self, Constant, IrModel, IrParts, ValueType, MAX_CONSTANT_ELEMENTS,
};
use crate::plugins::kind;
use crate::plugins::{PluginError, PluginOf, Runtime};
use crate::weights::bytes::Bytes;
use hfx_dtype::DType;

/// Offers each node the stage starts with (nodes a plugin adds are not
/// offered again, so no rewrite can feed itself) to the plugins that
/// declared its op type, in order.
pub fn run(
    runtime: &Runtime,
    plugins: &[PluginOf<'_, kind::OnnxIrFix>],
    model: &mut IrModel,
    stage: &'static str,
    policy: OnPluginError,
) -> Result<StageReport, PluginError> {
    let start = Instant::now();
    let mut report = StageReport::new(stage);
    report.ops_before = super::onnx_ops(model.live_nodes());
    let mut dispatcher = Dispatcher::new(runtime, plugins, stage);
    for node in model.order() {
        let Some(op_type) = model.node(node).map(|n| n.op_type.clone()) else { continue };
        for index in dispatcher.candidates(&op_type) {
            let Some(before) = model.node(node).cloned() else { break };
            let handles = model.handles();
            match dispatcher.session(index, &mut report).onnx_ir_fix(model, node) {
                Ok(true) => {
                    report.changed(dispatcher.name(index));
                    let change = report.recording().then(|| {
                        let op = super::onnx_op(&before.domain, &before.op_type);
                        // What the node became: itself if it stays, and the nodes the call added.
                        let became = model
                            .node(node)
                            .into_iter()
                            .chain((handles..model.handles()).filter_map(|h| model.node(h)))
                            .map(|n| super::onnx_op(&n.domain, &n.op_type))
                            .collect();
                        NodeChange {
                            plugin: dispatcher.name(index).to_string(),
                            node: before.outputs.first().cloned().unwrap_or(format!("#{node}")),
                            op,
                            became,
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
    report.ops_after = super::onnx_ops(model.live_nodes());
    report.elapsed = start.elapsed();
    Ok(report)
}

/// The stage on a lowered model (after the optimizer): the model lent to
/// the plugins is built from `lowered` and `types` (what the traced program
/// knows of values' types, by ONNX name: [`traced_types`]), and what they
/// did goes back into it, followed by common-subexpression and dead-code
/// elimination.
pub fn run_on_lowered(
    runtime: &Runtime,
    plugins: &[PluginOf<'_, kind::OnnxIrFix>],
    lowered: &mut Lowered,
    types: HashMap<String, ValueType>,
    stage: &'static str,
    policy: OnPluginError,
) -> Result<StageReport, PluginError> {
    let mut model = ir_model_of(lowered, types);
    let mut report = run(runtime, plugins, &mut model, stage, policy)?;
    let result = model.finish();
    let mut nodes = result.nodes;
    let keep: HashSet<&str> = lowered.output_names.iter().map(String::as_str).collect();
    // Fixes that rewrite one site each leave equal nodes where their sites
    // read one value (each norm's fused output reshaped alike): one stays.
    report.dead_code_removed =
        crate::onnx::optimize::eliminate_common_subexpressions(&mut nodes, &keep)
            + crate::onnx::optimize::eliminate_dead_code(&mut nodes, &keep);
    lowered.nodes = nodes;
    for (name, constant) in result.added_initializers {
        let header = p::TensorProto {
            dims: constant.dims.clone(),
            data_type: Some(constant.elem_type),
            name: Some(name),
            ..Default::default()
        };
        let bytes = constant.to_bytes().expect("checked when the plugin added it");
        lowered.initializers.push(Initializer { header, bytes: Bytes::Owned(bytes) });
    }
    lowered.domains.extend(result.domains);
    // A plugin packing weights writes their `Concat`: one weight, streamed.
    let packed = crate::onnx::fold::concatenate_weights(
        &mut lowered.nodes,
        &mut lowered.initializers,
        &keep,
    );
    tracing::debug!("{stage}: {packed} concatenation(s) of weights written as one weight");
    Ok(report)
}

/// The model the plugins see: `lowered`'s nodes (moved out), its inputs,
/// outputs and initializers, small initializers' values, and the types known.
fn ir_model_of(lowered: &mut Lowered, mut types: HashMap<String, ValueType>) -> IrModel {
    let mut constants = HashMap::new();
    let mut initializers = HashSet::new();
    for init in &lowered.initializers {
        let Some(name) = init.header.name.clone() else { continue };
        let elem_type = init.header.data_type.unwrap_or(0);
        let dims = init.header.dims.clone();
        let elements = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d.max(0) as usize));
        if elements.is_some_and(|n| n <= MAX_CONSTANT_ELEMENTS) {
            if let Some(c) = Constant::from_bytes(elem_type, &dims, &init.bytes.to_vec()) {
                constants.insert(name.clone(), c);
            }
        }
        let shape = Some(dims.into_iter().map(ir_model::Dim::Fixed).collect());
        types.insert(name.clone(), ValueType { elem_type, shape });
        initializers.insert(name);
    }
    for info in lowered.inputs.iter().chain(&lowered.outputs) {
        if let (Some(name), Some(t)) = (&info.name, value_info_type(info)) {
            types.insert(name.clone(), t);
        }
    }
    IrModel::new(IrParts {
        nodes: std::mem::take(&mut lowered.nodes),
        inputs: lowered.inputs.iter().filter_map(|i| i.name.clone()).collect(),
        outputs: lowered.output_names.clone(),
        initializers,
        types,
        constants,
    })
}

fn value_info_type(info: &p::ValueInfoProto) -> Option<ValueType> {
    let Some(p::type_proto::Value::TensorType(t)) = info.r#type.as_ref()?.value.as_ref() else {
        return None;
    };
    let shape = t.shape.as_ref().map(|s| {
        s.dim
            .iter()
            .map(|d| match &d.value {
                Some(p::tensor_shape_proto::dimension::Value::DimValue(n)) => {
                    ir_model::Dim::Fixed(*n)
                }
                Some(p::tensor_shape_proto::dimension::Value::DimParam(s)) => {
                    ir_model::Dim::Symbolic(s.clone())
                }
                None => ir_model::Dim::Symbolic(String::new()),
            })
            .collect()
    });
    Some(ValueType { elem_type: t.elem_type?, shape })
}

/// What the traced program knows of each ONNX value's type: its element
/// type and shape, symbols named as the model's inputs name them (`dims`,
/// from `emit::dim_names`).
pub fn traced_types(
    graph: &Graph,
    names: &HashMap<ValueId, String>,
    dims: &HashMap<String, String>,
) -> HashMap<String, ValueType> {
    names
        .iter()
        .filter_map(|(value, name)| {
            let ValueMeta::Tensor(meta) = &graph.value(*value).ok()?.meta else { return None };
            let elem_type = DType::from_name(&meta.dtype).and_then(DType::onnx)?;
            let shape = meta
                .shape
                .iter()
                .map(|d| match d {
                    crate::graph::Dim::Fixed(n) => ir_model::Dim::Fixed(*n),
                    crate::graph::Dim::Symbolic(s) => {
                        ir_model::Dim::Symbolic(dims.get(s).cloned().unwrap_or_else(|| s.clone()))
                    }
                })
                .collect();
            Some((name.clone(), ValueType { elem_type, shape: Some(shape) }))
        })
        .collect()
}
