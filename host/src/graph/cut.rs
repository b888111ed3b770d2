//! Cutting a piece out of a program: some nodes of the root graph, in order,
//! as a program of their own. Its inputs are every value the nodes read from
//! outside (named as in the original, so values recorded there fit); its
//! outputs are the values they produce that the rest of the program reads
//! (or that it returns). Plugin self-test cases are made this way
//! (`hfx plugins capture`).

use std::collections::{BTreeSet, HashMap};

use super::{Argument, Graph, GraphError, NamedArgument, Node, NodeId, User, ValueId};

/// A program cut from another.
pub struct Cut {
    pub program: Graph,
    /// The original names of its inputs, in order.
    pub inputs: Vec<String>,
}

impl Graph {
    /// `nodes` and the root-graph nodes within `radius` hops of them (the
    /// producers of what they read, the readers of what they produce), in
    /// program order.
    pub fn neighbourhood(&self, nodes: &[NodeId], radius: usize) -> Vec<NodeId> {
        let mut found: BTreeSet<NodeId> = nodes.iter().copied().collect();
        let mut frontier: Vec<NodeId> = nodes.to_vec();
        for _ in 0..radius {
            let mut next = Vec::new();
            for &id in &frontier {
                let Ok(node) = self.node(id) else { continue };
                let producers = node
                    .inputs
                    .iter()
                    .flat_map(|a| a.value.values())
                    .filter_map(|v| self.value(v).ok()?.producer);
                let readers = node
                    .output_values()
                    .flat_map(|v| self.value_users(v).unwrap_or_default())
                    .filter_map(|u| match u {
                        User::Node(n) => Some(n),
                        User::Output(_) => None,
                    });
                for n in producers.chain(readers) {
                    if self.node(n).is_ok_and(|n| n.subgraph == 0) && found.insert(n) {
                        next.push(n);
                    }
                }
            }
            frontier = next;
        }
        self.in_order(found)
    }

    /// The nodes `nodes` (of the root graph) as a program of their own, in
    /// program order; symbols keep their ranges.
    pub fn cut(&self, nodes: &[NodeId]) -> Result<Cut, GraphError> {
        let order = self.in_order(nodes.iter().copied());
        let inside: BTreeSet<NodeId> = order.iter().copied().collect();
        let mut program = Graph::new();
        program.range_constraints = self.range_constraints.clone();
        program.exprs = self.exprs.clone();
        let mut mapped: HashMap<ValueId, ValueId> = HashMap::new();
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        for &id in &order {
            let node = self.node(id)?;
            if node.subgraph != 0 {
                return Err(GraphError::Malformed(format!(
                    "node `{}` is in a sub-graph; only root-graph nodes can be cut",
                    self.node_name(id)
                )));
            }
            for value in node.inputs.iter().flat_map(|a| a.value.values()) {
                if let std::collections::hash_map::Entry::Vacant(slot) = mapped.entry(value) {
                    let v = self.value(value)?;
                    slot.insert(program.add_input(0, &v.name, v.meta.clone()));
                    inputs.push(v.name.clone());
                }
            }
            let node_inputs = node
                .inputs
                .iter()
                .map(|a| NamedArgument { value: a.value.map_values(|v| mapped[&v]), ..a.clone() })
                .collect();
            let next = program.next_node_id();
            let mut produced = HashMap::new();
            for value in node.output_values() {
                let v = self.value(value)?;
                produced.insert(value, program.add_value(&v.name, v.meta.clone(), Some(next)));
                let read_outside = self.value_users(value)?.iter().any(|u| match u {
                    User::Node(n) => !inside.contains(n),
                    User::Output(_) => true,
                });
                if read_outside {
                    outputs.push(value);
                }
            }
            let node_outputs: Vec<Argument> =
                node.outputs.iter().map(|a| a.map_values(|v| produced[&v])).collect();
            mapped.extend(produced);
            program.push_loaded(Node {
                inputs: node_inputs,
                outputs: node_outputs,
                subgraph: 0,
                ..node.clone()
            })?;
        }
        // A piece whose results nothing else reads still shows its last node's.
        if outputs.is_empty() {
            if let Some(&last) = order.last() {
                outputs = self.node(last)?.output_values().collect();
            }
        }
        let outputs = outputs
            .into_iter()
            .map(|v| self.value(v).map(|value| output_argument(&value.meta, mapped[&v])))
            .collect::<Result<_, _>>()?;
        program.set_outputs(0, outputs)?;
        Ok(Cut { program, inputs })
    }
}

/// A graph output reading `value`, by its kind.
fn output_argument(meta: &super::ValueMeta, value: ValueId) -> Argument {
    use super::{Sym, ValueMeta};
    match meta {
        ValueMeta::SymInt(_) => Argument::SymInt(Sym::Value(value)),
        ValueMeta::SymFloat(_) => Argument::SymFloat(Sym::Value(value)),
        ValueMeta::SymBool(_) => Argument::SymBool(Sym::Value(value)),
        ValueMeta::Tensor(_) | ValueMeta::Opaque(_) => Argument::Tensor(value),
    }
}
