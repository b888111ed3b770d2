//! The host's graph IR: an exported program's root graph and its sub-graphs.
//!
//! Nodes and values live in arenas addressed by `NodeId` / `ValueId`; the same
//! integers are the handles plugins hold through the WIT contract. Every
//! mutation goes through the methods in `mutate.rs`, which keep the use lists
//! consistent and, inside a transaction, record how to undo themselves: a
//! plugin call that fails leaves the graph exactly as it was before the call.

mod dce;
pub use dce::has_side_effects;
mod mutate;
mod types;

pub use mutate::{GraphError, Replacement};
pub use types::*;

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

/// Who reads a value: a node, or the output list of a (sub-)graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum User {
    Node(NodeId),
    Output(u32),
}

/// A whole program: graph 0 is the root, the rest are sub-graphs of higher-order ops.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Graph {
    nodes: Vec<Option<Node>>,
    values: Vec<Value>,
    subgraphs: Vec<Subgraph>,
    range_constraints: BTreeMap<String, RangeConstraint>,
    #[serde(skip)]
    uses: Vec<Vec<User>>,
    #[serde(skip)]
    names: HashSet<String>,
    #[serde(skip)]
    journal: Option<Vec<mutate::Undo>>,
}

impl Graph {
    /// An empty program with an empty root graph.
    pub fn new() -> Self {
        let mut g = Graph::default();
        g.subgraphs.push(Subgraph::default());
        g
    }

    /// Loads the IR's JSON form (a debugging and test format; `.pt2` is the real one).
    pub fn from_json(text: &str) -> Result<Self, GraphError> {
        let mut g: Graph =
            serde_json::from_str(text).map_err(|e| GraphError::Malformed(e.to_string()))?;
        g.rebuild_indexes()?;
        Ok(g)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("graph IR always serializes")
    }

    /// Rebuilds use lists and the name set, and checks every reference.
    fn rebuild_indexes(&mut self) -> Result<(), GraphError> {
        if self.subgraphs.is_empty() {
            return Err(GraphError::Malformed("program has no root graph".into()));
        }
        self.uses = vec![Vec::new(); self.values.len()];
        self.names = self.values.iter().map(|v| v.name.clone()).collect();
        if self.names.len() != self.values.len() {
            return Err(GraphError::Malformed("two values share a name".into()));
        }
        for (index, sub) in self.subgraphs.iter().enumerate() {
            for &id in &sub.order {
                let node = self.nodes.get(id.0 as usize).and_then(Option::as_ref).ok_or_else(|| {
                    GraphError::Malformed(format!("graph {index} orders missing node {}", id.0))
                })?;
                for value in node.inputs.iter().flat_map(|a| a.value.values()) {
                    let slot = self.uses.get_mut(value.0 as usize).ok_or_else(|| {
                        GraphError::Malformed(format!("node {} reads missing value {}", id.0, value.0))
                    })?;
                    slot.push(User::Node(id));
                }
            }
            for value in sub.outputs.iter().flat_map(Argument::values) {
                let slot = self.uses.get_mut(value.0 as usize).ok_or_else(|| {
                    GraphError::Malformed(format!("graph {index} outputs missing value {}", value.0))
                })?;
                slot.push(User::Output(index as u32));
            }
        }
        Ok(())
    }

    // ── Building (used by loaders and tests) ──

    /// Adds an input of sub-graph `subgraph`.
    pub fn add_input(&mut self, subgraph: u32, name: &str, meta: ValueMeta) -> ValueId {
        let id = self.new_value(name, meta, None);
        self.subgraphs[subgraph as usize].inputs.push(id);
        id
    }

    /// Appends a node at the end of sub-graph `subgraph` (outside any transaction).
    pub fn push_node(
        &mut self,
        subgraph: u32,
        target: &str,
        inputs: Vec<NamedArgument>,
        outputs: Vec<OutputDecl>,
    ) -> Result<NodeId, GraphError> {
        let end = self.subgraphs.get(subgraph as usize).map(|s| s.order.len()).ok_or(GraphError::NoSubgraph(subgraph))?;
        self.insert_at(subgraph, end, target, inputs, outputs)
    }

    pub fn add_subgraph(&mut self) -> u32 {
        self.subgraphs.push(Subgraph::default());
        (self.subgraphs.len() - 1) as u32
    }

    pub fn set_outputs(&mut self, subgraph: u32, outputs: Vec<Argument>) -> Result<(), GraphError> {
        self.replace_graph_outputs(subgraph, outputs)
    }

    // ── Queries ──

    pub fn node(&self, id: NodeId) -> Result<&Node, GraphError> {
        self.nodes.get(id.0 as usize).and_then(Option::as_ref).ok_or(GraphError::NoNode(id))
    }

    pub fn value(&self, id: ValueId) -> Result<&Value, GraphError> {
        self.values.get(id.0 as usize).ok_or(GraphError::NoValue(id))
    }

    /// Live nodes of every graph, root first, each in topological order.
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.subgraphs.iter().flat_map(|s| s.order.iter().copied())
    }

    pub fn node_count(&self) -> usize {
        self.subgraphs.iter().map(|s| s.order.len()).sum()
    }

    pub fn nodes_by_target<'a>(&'a self, target: &'a str) -> impl Iterator<Item = NodeId> + 'a {
        self.nodes().filter(move |&id| self.nodes[id.0 as usize].as_ref().is_some_and(|n| n.target == target))
    }

    pub fn subgraph(&self, index: u32) -> Result<&Subgraph, GraphError> {
        self.subgraphs.get(index as usize).ok_or(GraphError::NoSubgraph(index))
    }

    pub fn subgraph_count(&self) -> u32 {
        self.subgraphs.len() as u32
    }

    /// Readers of a value, each once, in the order they were recorded.
    pub fn value_users(&self, id: ValueId) -> Result<Vec<User>, GraphError> {
        self.value(id)?;
        let mut seen = Vec::new();
        for user in &self.uses[id.0 as usize] {
            if !seen.contains(user) {
                seen.push(*user);
            }
        }
        Ok(seen)
    }

    /// Nodes reading any output of `id`, each once, in topological order.
    pub fn node_users(&self, id: NodeId) -> Result<Vec<NodeId>, GraphError> {
        let node = self.node(id)?;
        let mut users: HashSet<NodeId> = HashSet::new();
        for value in node.output_values() {
            users.extend(self.uses[value.0 as usize].iter().filter_map(|u| match u {
                User::Node(n) => Some(*n),
                User::Output(_) => None,
            }));
        }
        let order = &self.subgraphs[node.subgraph as usize].order;
        Ok(order.iter().copied().filter(|n| users.contains(n)).collect())
    }

    pub fn is_used(&self, id: ValueId) -> bool {
        self.uses.get(id.0 as usize).is_some_and(|u| !u.is_empty())
    }

    pub fn is_graph_output(&self, id: ValueId) -> bool {
        self.uses.get(id.0 as usize).is_some_and(|u| u.iter().any(|x| matches!(x, User::Output(_))))
    }

    pub fn range_constraints(&self) -> &BTreeMap<String, RangeConstraint> {
        &self.range_constraints
    }

    /// Position of a node in its graph's order.
    pub fn position(&self, id: NodeId) -> Result<(u32, usize), GraphError> {
        let node = self.node(id)?;
        let order = &self.subgraphs[node.subgraph as usize].order;
        let pos = order.iter().position(|&n| n == id).ok_or(GraphError::NoNode(id))?;
        Ok((node.subgraph, pos))
    }

    /// The display name of a node: its first output's name, else `target#id`.
    pub fn node_name(&self, id: NodeId) -> String {
        match self.node(id) {
            Ok(node) => node
                .output_values()
                .next()
                .and_then(|v| self.values.get(v.0 as usize))
                .map(|v| v.name.clone())
                .unwrap_or_else(|| format!("{}#{}", node.target, id.0)),
            Err(_) => format!("#{}", id.0),
        }
    }

    /// A structural fingerprint: equal for graphs that read and write the same.
    /// Tests use it to prove a failed plugin call left the graph untouched.
    pub fn fingerprint(&self) -> String {
        serde_json::to_string(self).expect("graph IR always serializes")
    }
}
