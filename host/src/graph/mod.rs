//! The host's graph IR: an exported program's root graph and its sub-graphs.
//!
//! Nodes and values live in arenas addressed by `NodeId` / `ValueId`; the same
//! integers are the handles plugins hold through the WIT contract. Every
//! mutation goes through the methods in `mutate.rs`, which keep the use lists
//! consistent and, inside a transaction, record how to undo themselves: a
//! plugin call that fails leaves the graph exactly as it was before the call.

pub mod pt2;
mod dce;
pub use dce::has_side_effects;
mod mutate;
mod order;
mod types;

pub use mutate::{GraphError, Replacement};
pub use types::*;

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

/// Who reads a value: a node, or the output list of a (sub-)graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum User {
    Node(NodeId),
    Output(u32),
}

/// A whole program: graph 0 is the root, the rest are sub-graphs of higher-order ops.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    nodes: Vec<Option<Node>>,
    values: Vec<Value>,
    subgraphs: Vec<Subgraph>,
    range_constraints: BTreeMap<String, RangeConstraint>,
    /// Order links, indexed by node id (see `order.rs`).
    links: Vec<order::Link>,
    /// Readers of each value, indexed by value id (a reader reading twice is listed twice).
    uses: Vec<Vec<User>>,
    names: HashSet<String>,
    /// Next suffix to try per name base (see `fresh_name`).
    name_counters: HashMap<String, u32>,
    /// Symbolic expressions read from a `.pt2`, by printed form.
    exprs: BTreeMap<String, SymExpr>,
    journal: Option<Vec<mutate::Undo>>,
}

/// A symbolic expression as a `.pt2` spells it: sympy `srepr` and torch's hint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SymExpr {
    pub srepr: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<serde_json::Value>,
}

/// The serialized form: arenas plus each graph's node order.
#[derive(Serialize, Deserialize)]
struct GraphRepr {
    nodes: Vec<Option<Node>>,
    values: Vec<Value>,
    subgraphs: Vec<SubgraphRepr>,
    range_constraints: BTreeMap<String, RangeConstraint>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    exprs: BTreeMap<String, SymExpr>,
}

#[derive(Serialize, Deserialize)]
struct SubgraphRepr {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    name: String,
    inputs: Vec<ValueId>,
    order: Vec<NodeId>,
    outputs: Vec<Argument>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    single_tensor_return: bool,
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
        let repr: GraphRepr = serde_json::from_str(text).map_err(|e| GraphError::Malformed(e.to_string()))?;
        Graph::from_repr(repr)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.to_repr()).expect("graph IR always serializes")
    }

    fn to_repr(&self) -> GraphRepr {
        GraphRepr {
            nodes: self.nodes.clone(),
            values: self.values.clone(),
            subgraphs: (0..self.subgraphs.len())
                .map(|i| SubgraphRepr {
                    name: self.subgraphs[i].name.clone(),
                    inputs: self.subgraphs[i].inputs.clone(),
                    order: self.order(i as u32).collect(),
                    outputs: self.subgraphs[i].outputs.clone(),
                    single_tensor_return: self.subgraphs[i].single_tensor_return,
                })
                .collect(),
            range_constraints: self.range_constraints.clone(),
            exprs: self.exprs.clone(),
        }
    }

    /// Builds the graph and its indexes from the serialized form, checking every reference.
    fn from_repr(repr: GraphRepr) -> Result<Self, GraphError> {
        let malformed = |m: String| GraphError::Malformed(m);
        if repr.subgraphs.is_empty() {
            return Err(malformed("program has no root graph".into()));
        }
        let mut g = Graph {
            nodes: repr.nodes,
            values: repr.values,
            range_constraints: repr.range_constraints,
            exprs: repr.exprs,
            ..Graph::default()
        };
        g.uses = vec![Vec::new(); g.values.len()];
        g.names = g.values.iter().map(|v| v.name.clone()).collect();
        if g.names.len() != g.values.len() {
            return Err(malformed("two values share a name".into()));
        }
        let mut placed = vec![false; g.nodes.len()];
        for (index, sub) in repr.subgraphs.into_iter().enumerate() {
            let index = index as u32;
            g.subgraphs.push(Subgraph {
                name: sub.name,
                inputs: sub.inputs,
                outputs: Vec::new(),
                single_tensor_return: sub.single_tensor_return,
                ends: Default::default(),
            });
            for id in sub.order {
                let node = g.nodes.get(id.0 as usize).and_then(Option::as_ref);
                let node = node.ok_or_else(|| malformed(format!("graph {index} orders missing node {}", id.0)))?;
                if node.subgraph != index || std::mem::replace(&mut placed[id.0 as usize], true) {
                    return Err(malformed(format!("node {} is misplaced or listed twice", id.0)));
                }
                let reads: Vec<ValueId> = node.inputs.iter().flat_map(|a| a.value.values()).collect();
                for value in reads {
                    let slot = g.uses.get_mut(value.0 as usize);
                    slot.ok_or_else(|| malformed(format!("node {} reads missing value {}", id.0, value.0)))?.push(User::Node(id));
                }
                let tail = g.subgraphs[index as usize].ends.tail;
                g.place_after(index, tail, id);
            }
            for value in sub.outputs.iter().flat_map(Argument::values) {
                let slot = g.uses.get_mut(value.0 as usize);
                slot.ok_or_else(|| malformed(format!("graph {index} outputs missing value {}", value.0)))?.push(User::Output(index));
            }
            g.subgraphs[index as usize].outputs = sub.outputs;
        }
        Ok(g)
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
        let tail = self.subgraph(subgraph)?.ends.tail;
        self.insert_after(subgraph, tail, target, inputs, outputs)
    }

    /// The id the next node will get (loaders create its output values first).
    pub(crate) fn next_node_id(&self) -> NodeId {
        NodeId(self.nodes.len() as u32)
    }

    /// Adds a value named `name` (or a fresh variant if taken), for loaders.
    pub(crate) fn add_value(&mut self, name: &str, meta: ValueMeta, producer: Option<NodeId>) -> ValueId {
        self.new_value(name, meta, producer)
    }

    /// Appends a fully formed node (outputs created with `next_node_id` as
    /// producer) at the end of its sub-graph, checking what it reads.
    pub(crate) fn push_loaded(&mut self, node: Node) -> Result<NodeId, GraphError> {
        let id = self.next_node_id();
        let subgraph = node.subgraph;
        let tail = self.subgraph(subgraph)?.ends.tail;
        self.check_reads(subgraph, tail, &node.inputs, &node.target)?;
        let inputs = node.inputs.clone();
        self.nodes.push(Some(node));
        self.link_inputs(id, &inputs);
        self.place_after(subgraph, tail, id);
        Ok(id)
    }

    /// The symbolic-expression table (printed form → what the `.pt2` spelled).
    pub fn exprs(&self) -> &BTreeMap<String, SymExpr> {
        &self.exprs
    }

    pub(crate) fn exprs_mut(&mut self) -> &mut BTreeMap<String, SymExpr> {
        &mut self.exprs
    }

    pub fn subgraph_mut(&mut self, index: u32) -> Result<&mut Subgraph, GraphError> {
        self.subgraphs.get_mut(index as usize).ok_or(GraphError::NoSubgraph(index))
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
        (0..self.subgraphs.len() as u32).flat_map(|s| self.order(s))
    }

    pub fn node_count(&self) -> usize {
        self.subgraphs.iter().map(|s| s.ends.len).sum()
    }

    pub fn nodes_by_target<'a>(&'a self, target: &'a str) -> impl Iterator<Item = NodeId> + 'a {
        self.nodes().filter(move |&id| self.nodes[id.0 as usize].as_ref().is_some_and(|n| n.target == target))
    }

    pub fn subgraph(&self, index: u32) -> Result<&Subgraph, GraphError> {
        self.subgraphs.get(index as usize).ok_or(GraphError::NoSubgraph(index))
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
        Ok(self.in_order(users))
    }

    /// `nodes` sorted by their place in the program (graph, then order).
    pub fn in_order(&self, nodes: impl IntoIterator<Item = NodeId>) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = nodes.into_iter().collect();
        nodes.sort_by_key(|&n| (self.nodes[n.0 as usize].as_ref().map_or(u32::MAX, |n| n.subgraph), self.ordinal(n)));
        nodes
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

    /// True where `a` comes before `b` in the same graph.
    pub fn is_before(&self, a: NodeId, b: NodeId) -> bool {
        match (self.node(a), self.node(b)) {
            (Ok(x), Ok(y)) => x.subgraph == y.subgraph && self.ordinal(a) < self.ordinal(b),
            _ => false,
        }
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
        serde_json::to_string(&self.to_repr()).expect("graph IR always serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> TensorMeta {
        TensorMeta::new("float32", vec![Dim::Fixed(2)])
    }

    /// `x → relu → ... ` with `n` nodes; returns the graph and the nodes.
    fn chain(n: usize) -> (Graph, Vec<NodeId>) {
        let mut g = Graph::new();
        let mut prev = g.add_input(0, "x", ValueMeta::Tensor(meta()));
        let mut nodes = vec![];
        for _ in 0..n {
            let id = g
                .push_node(0, "aten.relu.default", vec![NamedArgument::positional("self", Argument::Tensor(prev))], vec![OutputDecl::Tensor(meta())])
                .unwrap();
            prev = g.node(id).unwrap().output_values().next().unwrap();
            nodes.push(id);
        }
        g.set_outputs(0, vec![Argument::Tensor(prev)]).unwrap();
        (g, nodes)
    }

    #[test]
    fn inserting_past_the_ordinal_gap_renumbers_and_keeps_order() {
        let (mut g, nodes) = chain(2);
        let x = g.subgraph(0).unwrap().inputs[0];
        // Always insert right before the second node: halves the same gap each time.
        let mut inserted = vec![];
        for _ in 0..64 {
            let id = g
                .insert_before(nodes[1], "aten.neg.default", vec![NamedArgument::positional("self", Argument::Tensor(x))], vec![OutputDecl::Tensor(meta())])
                .unwrap();
            inserted.push(id);
        }
        let order: Vec<NodeId> = g.nodes().collect();
        assert_eq!(order.len(), 66);
        assert_eq!(order[0], nodes[0]);
        assert_eq!(&order[1..65], &inserted[..]);
        assert_eq!(order[65], nodes[1]);
        assert!(order.windows(2).all(|w| g.is_before(w[0], w[1])));
    }

    #[test]
    fn reads_must_come_before_the_reader() {
        let (mut g, nodes) = chain(3);
        let late = g.node(nodes[2]).unwrap().output_values().next().unwrap();
        let e = g.insert_before(nodes[1], "aten.neg.default", vec![NamedArgument::positional("self", Argument::Tensor(late))], vec![]);
        assert!(matches!(e, Err(GraphError::NotDominating { .. })), "{e:?}");
        let e = g.set_inputs(nodes[0], vec![NamedArgument::positional("self", Argument::Tensor(late))]);
        assert!(matches!(e, Err(GraphError::NotDominating { .. })), "{e:?}");
    }

    #[test]
    fn rollback_restores_erased_nodes_in_place_and_drops_new_ones() {
        let (mut g, nodes) = chain(4);
        let before = g.fingerprint();
        g.begin();
        let x = g.subgraph(0).unwrap().inputs[0];
        let first_out = g.node(nodes[0]).unwrap().output_values().next().unwrap();
        let second_out = g.node(nodes[1]).unwrap().output_values().next().unwrap();
        g.insert_before(nodes[2], "aten.neg.default", vec![NamedArgument::positional("self", Argument::Tensor(x))], vec![OutputDecl::Tensor(meta())])
            .unwrap();
        g.replace_uses(second_out, Replacement::Value(first_out)).unwrap();
        g.erase(nodes[1]).unwrap();
        g.set_range_constraint("s0", RangeConstraint { min: 2, max: None }).unwrap();
        assert_ne!(g.fingerprint(), before);
        g.rollback();
        assert_eq!(g.fingerprint(), before);
        assert_eq!(g.nodes().collect::<Vec<_>>(), nodes);
        assert_eq!(g.node_users(nodes[1]).unwrap(), [nodes[2]]);
        // The graph is fully usable after a rollback.
        assert_eq!(g.eliminate_dead_code(), 0);
    }

    #[test]
    fn json_round_trip_and_malformed_input() {
        let (g, _) = chain(3);
        let again = Graph::from_json(&g.to_json()).unwrap();
        assert_eq!(again.fingerprint(), g.fingerprint());
        assert!(matches!(Graph::from_json("{"), Err(GraphError::Malformed(_))));
        let dangling = g.to_json().replace("\"tensor\": 0", "\"tensor\": 99");
        assert!(matches!(Graph::from_json(&dangling), Err(GraphError::Malformed(m)) if m.contains("missing value 99")));
    }
}
