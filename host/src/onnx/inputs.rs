//! What the root graph's inputs and outputs are in the ONNX model: model
//! inputs by their forward argument names, weights and constants as
//! initializers under their qualified names, in the program's signature order.

use crate::graph::pt2::schema as s;
use crate::graph::{Argument, Graph, ValueId};

/// What a root graph input is in the ONNX model.
#[derive(Debug, Clone, PartialEq)]
pub enum InputRole {
    /// A model input, named as the forward argument.
    User(String),
    /// A weight or constant, stored as an initializer under its qualified name.
    Initializer { fqn: String, constant: bool },
    /// A constant input (`use_cache=False`): folded by torch.export, not an ONNX input.
    Constant,
}

/// Roles of the root graph's inputs, in order, from the program's signature.
pub fn input_roles(program: &s::ExportedProgram) -> Vec<InputRole> {
    program
        .graph_module
        .signature
        .input_specs
        .iter()
        .map(|spec| match spec {
            s::InputSpec::UserInput { arg } => InputRole::User(user_input_name(arg)),
            s::InputSpec::Parameter { parameter_name, .. } => InputRole::Initializer { fqn: parameter_name.clone(), constant: false },
            s::InputSpec::Buffer { buffer_name, .. } => InputRole::Initializer { fqn: buffer_name.clone(), constant: false },
            s::InputSpec::TensorConstant { tensor_constant_name, .. } => {
                InputRole::Initializer { fqn: tensor_constant_name.clone(), constant: true }
            }
            _ => InputRole::Constant,
        })
        .collect()
}

fn user_input_name(arg: &s::Argument) -> String {
    match serde_json::to_value(arg).ok().and_then(|v| v.as_object()?.values().next()?.get("name")?.as_str().map(String::from)) {
        Some(name) => name,
        None => "input".into(),
    }
}

/// The root graph's output values, in order (tensors and sym-ints).
pub fn graph_outputs(graph: &Graph) -> Vec<ValueId> {
    let outputs = graph.subgraph(0).map(|g| g.outputs.clone()).unwrap_or_default();
    outputs.iter().flat_map(Argument::values).collect()
}
