//! The host's ONNX IR, as far as the plugin contract needs it today: the nodes
//! a translation emits and the nodes an IR fix repairs. Emission with prost,
//! initializers and the checker come with the ONNX backend.

use std::collections::{HashMap, HashSet};

pub mod calibrate;
pub mod compress;
pub mod emit;
pub mod external;
pub mod fold;
pub mod guards;
pub mod inputs;
pub mod optimize;
pub mod passes;
pub mod prewrite;
pub mod quantize;
pub mod weights;
#[rustfmt::skip]
pub mod proto;

use crate::graph::ValueId;

#[derive(Debug, Clone, PartialEq)]
pub enum Attribute {
    Int(i64),
    Ints(Vec<i64>),
    Float(f32),
    Floats(Vec<f32>),
    Str(String),
    Strs(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub op_type: String,
    pub domain: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub attributes: Vec<(String, Attribute)>,
    /// The function the node belongs to; None for the main graph.
    pub function: Option<String>,
}

impl Node {
    pub fn attribute(&self, name: &str) -> Option<&Attribute> {
        self.attributes.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    pub fn set_attribute(&mut self, name: &str, value: Attribute) {
        match self.attributes.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => self.attributes.push((name.to_string(), value)),
        }
    }
}

/// An ONNX model under repair: main-graph and function nodes in one list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Model {
    pub nodes: Vec<Node>,
}

/// What translations of one FX graph have emitted so far.
#[derive(Debug, Clone, Default)]
pub struct TranslationBuilder {
    pub opset: u32,
    /// ONNX name of each FX value translated (or provided as input) so far.
    pub value_names: HashMap<ValueId, String>,
    pub nodes: Vec<Node>,
    next_name: u64,
    /// The names of the graph's inputs and weights, which no fresh name takes.
    bound: HashSet<String>,
}

impl TranslationBuilder {
    pub fn new(opset: u32) -> Self {
        TranslationBuilder { opset, ..Default::default() }
    }

    /// Names a graph input or weight `value` as the model names it.
    pub fn bind(&mut self, value: ValueId, name: String) {
        self.bound.insert(name.clone());
        self.value_names.insert(value, name);
    }

    /// A fresh, deterministic value name, none of the bound ones (an input
    /// may be named `transpose_1`: a self-test piece's inputs keep the names
    /// of the values they were cut from).
    pub fn fresh_name(&mut self, op_type: &str) -> String {
        loop {
            self.next_name += 1;
            let name = format!("{}_{}", op_type.to_ascii_lowercase(), self.next_name);
            if !self.bound.contains(&name) {
                return name;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_names_skip_the_bound_inputs_names() {
        let mut builder = TranslationBuilder::new(18);
        builder.bind(ValueId(0), "transpose_1".into());
        builder.bind(ValueId(1), "transpose_3".into());
        let fresh: Vec<String> = (0..3).map(|_| builder.fresh_name("Transpose")).collect();
        assert_eq!(fresh, ["transpose_2", "transpose_4", "transpose_5"]);
    }
}
