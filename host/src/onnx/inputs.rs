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
            s::InputSpec::Parameter { parameter_name, .. } => {
                InputRole::Initializer { fqn: parameter_name.clone(), constant: false }
            }
            s::InputSpec::Buffer { buffer_name, .. } => {
                InputRole::Initializer { fqn: buffer_name.clone(), constant: false }
            }
            s::InputSpec::TensorConstant { tensor_constant_name, .. } => {
                InputRole::Initializer { fqn: tensor_constant_name.clone(), constant: true }
            }
            _ => InputRole::Constant,
        })
        .collect()
}

/// The user inputs named as the trace names them (`input_ids`,
/// `input.cache.layers.0.keys`: the reference's leaf paths), where it names
/// each input the call lays out: the trace names them in the order of the
/// program's call inputs, a constant one (a `None` kwarg, no ONNX input)
/// included. Else the program's placeholder names stand.
pub fn named_user_inputs(
    program: &s::ExportedProgram,
    mut roles: Vec<InputRole>,
    names: &[String],
) -> Vec<InputRole> {
    let specs = &program.graph_module.signature.input_specs;
    let call_inputs = specs.iter().filter(|spec| is_call_input(spec)).count();
    if call_inputs != names.len() || roles.len() != specs.len() {
        return roles;
    }
    let mut names = names.iter();
    for (role, spec) in roles.iter_mut().zip(specs) {
        if !is_call_input(spec) {
            continue;
        }
        if let (InputRole::User(name), Some(given)) = (role, names.next()) {
            given.clone_into(name);
        }
    }
    roles
}

/// An input the call gives: a user input, or one torch.export folded to a constant.
fn is_call_input(spec: &s::InputSpec) -> bool {
    matches!(spec, s::InputSpec::UserInput { .. } | s::InputSpec::ConstantInput { .. })
}

/// The graph outputs' names: the model output's leaves as the trace names
/// them (`logits`, `output.cache.layers.0.keys`), after the values of user
/// inputs and buffers the program updates in place (a static cache, a
/// module's state), which the program returns first: `updated.<input>`
/// (`updated.cache.layers.0.cumulative_length`), `updated.<buffer>`
/// (`updated.model.layers.0.state`). Empty (the emitter's own names) where
/// the program's outputs are not exactly those.
pub fn output_names(
    program: &s::ExportedProgram,
    input_names: &[String],
    names: &[String],
) -> Vec<String> {
    let signature = &program.graph_module.signature;
    // The call's inputs by placeholder name, in the order the trace names them.
    let users: Vec<String> = signature
        .input_specs
        .iter()
        .filter_map(|spec| match spec {
            s::InputSpec::UserInput { arg } => Some(user_input_name(arg)),
            s::InputSpec::ConstantInput { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    let mut user_outputs = names.iter();
    for spec in &signature.output_specs {
        match spec {
            s::OutputSpec::UserInputMutation { user_input_name, .. } => {
                let Some(index) = users.iter().position(|u| u == user_input_name) else {
                    return Vec::new();
                };
                let input = input_names.get(index).unwrap_or(user_input_name);
                out.push(format!("updated.{}", input.strip_prefix("input.").unwrap_or(input)));
            }
            s::OutputSpec::BufferMutation { buffer_name, .. } => {
                out.push(format!("updated.{buffer_name}"));
            }
            s::OutputSpec::UserOutput { .. } => match user_outputs.next() {
                Some(name) => out.push(name.clone()),
                None => return Vec::new(),
            },
            _ => return Vec::new(),
        }
    }
    if user_outputs.next().is_some() {
        return Vec::new();
    }
    out
}

fn user_input_name(arg: &s::Argument) -> String {
    match serde_json::to_value(arg)
        .ok()
        .and_then(|v| v.as_object()?.values().next()?.get("name")?.as_str().map(String::from))
    {
        Some(name) => name,
        None => "input".into(),
    }
}

/// The root graph's output values, in order (tensors and sym-ints).
pub fn graph_outputs(graph: &Graph) -> Vec<ValueId> {
    let outputs = graph.subgraph(0).map(|g| g.outputs.clone()).unwrap_or_default();
    outputs.iter().flat_map(Argument::values).collect()
}
