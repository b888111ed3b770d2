//! Cutting a piece out of a program: the nodes asked for, in order, as a
//! program of their own whose inputs are every value they read from outside
//! (named as in the original, so values recorded there fit) and whose outputs
//! are every value they produce. Plugin self-test cases are made this way
//! (`hfx plugins capture`).

use std::collections::HashMap;

use super::{Argument, Graph, GraphError, Node, NodeId, ValueId};

/// A program cut from another.
pub struct Cut {
    pub program: Graph,
    /// The original names of its inputs, in order.
    pub inputs: Vec<String>,
}

impl Graph {
    /// The nodes `nodes` (of the root graph) as a program of their own, in
    /// program order; symbols keep their ranges.
    pub fn cut(&self, nodes: &[NodeId]) -> Result<Cut, GraphError> {
        let mut program = Graph::new();
        program.range_constraints = self.range_constraints.clone();
        program.exprs = self.exprs.clone();
        let mut mapped: HashMap<ValueId, ValueId> = HashMap::new();
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        for id in self.in_order(nodes.iter().copied()) {
            let node = self.node(id)?;
            if node.subgraph != 0 {
                return Err(GraphError::Malformed(format!("node `{}` is in a sub-graph; only root-graph nodes can be cut", self.node_name(id))));
            }
            for value in node.inputs.iter().flat_map(|a| a.value.values()) {
                if let std::collections::hash_map::Entry::Vacant(slot) = mapped.entry(value) {
                    let v = self.value(value)?;
                    slot.insert(program.add_input(0, &v.name, v.meta.clone()));
                    inputs.push(v.name.clone());
                }
            }
            let read = |v: ValueId| mapped[&v];
            let node_inputs = node.inputs.iter().map(|a| super::NamedArgument { value: a.value.map_values(read), ..a.clone() }).collect();
            let next = program.next_node_id();
            let mut produced = HashMap::new();
            for value in node.outputs.iter().flat_map(Argument::values) {
                let v = self.value(value)?;
                produced.insert(value, program.add_value(&v.name, v.meta.clone(), Some(next)));
            }
            let node_outputs: Vec<Argument> = node.outputs.iter().map(|a| a.map_values(|v| produced[&v])).collect();
            outputs.extend(node_outputs.iter().filter(|a| a.values().next().is_some()).cloned());
            mapped.extend(produced);
            program.push_loaded(Node { inputs: node_inputs, outputs: node_outputs, subgraph: 0, ..node.clone() })?;
        }
        program.set_outputs(0, outputs)?;
        Ok(Cut { program, inputs })
    }
}
