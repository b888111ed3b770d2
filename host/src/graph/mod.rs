//! The host's graph IR: an exported program's root graph and its sub-graphs.
//!
//! Nodes and values live in arenas addressed by `NodeId` / `ValueId`; the same
//! integers are the handles plugins hold through the WIT contract. Every
//! mutation goes through the methods in `mutate.rs`, which keep the use lists
//! consistent and, inside a transaction, record how to undo themselves: a
//! plugin call that fails leaves the graph exactly as it was before the call.

mod cut;
mod dce;
#[cfg(test)]
mod layering;
pub mod pt2;
pub use cut::Cut;
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
    /// Mutations kept so far (rolled-back ones are taken back): a run compares
    /// it before and after its stages to know whether the program changed.
    changes: u64,
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
        let repr: GraphRepr =
            serde_json::from_str(text).map_err(|e| GraphError::Malformed(e.to_string()))?;
        Graph::from_repr(repr)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.to_repr()).expect("graph IR always serializes")
    }

    /// The JSON form as a value (for a message that embeds it), not as text.
    pub fn to_json_value(&self) -> serde_json::Value {
        serde_json::to_value(self.to_repr()).expect("graph IR always serializes")
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

    /// Builds the graph and its indexes from the serialized form, checking
    /// every reference: ids that exist, each node in exactly one graph's order,
    /// each value produced by at most one node (and the one its `producer`
    /// names), every read after the value's definition in the same graph (no
    /// cycles), graph inputs not produced, sub-graph references acyclic.
    fn from_repr(repr: GraphRepr) -> Result<Self, GraphError> {
        let malformed = |m: String| GraphError::Malformed(m);
        if repr.subgraphs.is_empty() {
            return Err(malformed("program has no root graph".into()));
        }
        if repr.nodes.len() > u32::MAX as usize
            || repr.values.len() > u32::MAX as usize
            || repr.subgraphs.len() > u32::MAX as usize
        {
            return Err(malformed("more nodes, values or graphs than ids".into()));
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
        // Who produces each value, from the nodes' outputs; it must be what the value says.
        let mut produced_by: Vec<Option<NodeId>> = vec![None; g.values.len()];
        for (index, node) in g.nodes.iter().enumerate() {
            let Some(node) = node else { continue };
            let id = NodeId(index as u32);
            for value in node.output_values() {
                let slot = produced_by.get_mut(value.0 as usize);
                let slot = slot.ok_or_else(|| {
                    malformed(format!("node {index} outputs missing value {}", value.0))
                })?;
                if let Some(other) = slot.replace(id) {
                    return Err(malformed(format!(
                        "value {} is produced by nodes {} and {index}",
                        value.0, other.0
                    )));
                }
            }
        }
        for (index, (value, producer)) in g.values.iter().zip(&produced_by).enumerate() {
            // A value of an erased node (dead-code elimination, a fix) stays in the
            // arena naming it; nothing may read it (checked below: it is never visible).
            let erased =
                value.producer.is_some_and(|p| matches!(g.nodes.get(p.0 as usize), Some(None)));
            if value.producer != *producer && !(erased && producer.is_none()) {
                let said = value.producer.map_or("none".to_string(), |p| format!("node {}", p.0));
                let is = producer.map_or("no node".to_string(), |p| format!("node {}", p.0));
                return Err(malformed(format!(
                    "value {index} (`{}`) names {said} as its producer, but {is} outputs it",
                    value.name
                )));
            }
        }
        // Where each node is placed, as the orders are read.
        let mut placed: Vec<Option<u32>> = vec![None; g.nodes.len()];
        let mut is_input: Vec<Option<u32>> = vec![None; g.values.len()];
        let subgraph_count = repr.subgraphs.len();
        // Sub-graph references, for the cycle check: (referring graph, referred graph).
        let mut calls: Vec<(u32, u32)> = Vec::new();
        for (index, sub) in repr.subgraphs.into_iter().enumerate() {
            let index = index as u32;
            for &input in &sub.inputs {
                let value = g.values.get(input.0 as usize).ok_or_else(|| {
                    malformed(format!("graph {index} has missing input value {}", input.0))
                })?;
                if value.producer.is_some() {
                    return Err(malformed(format!(
                        "graph {index} input `{}` is produced by a node",
                        value.name
                    )));
                }
                if let Some(other) = is_input[input.0 as usize].replace(index) {
                    return Err(malformed(format!(
                        "value `{}` is an input of graph {other} and again of graph {index}",
                        value.name
                    )));
                }
            }
            g.subgraphs.push(Subgraph {
                name: sub.name,
                inputs: sub.inputs,
                outputs: Vec::new(),
                single_tensor_return: sub.single_tensor_return,
                ends: Default::default(),
            });
            // A value is visible in graph `index` once defined there: an input, or an earlier node's output.
            let visible = |g: &Graph, placed: &[Option<u32>], value: ValueId| -> bool {
                match g.values.get(value.0 as usize).map(|v| v.producer) {
                    Some(None) => is_input[value.0 as usize] == Some(index),
                    Some(Some(p)) => placed.get(p.0 as usize).copied().flatten() == Some(index),
                    None => false,
                }
            };
            for id in sub.order {
                let node = g.nodes.get(id.0 as usize).and_then(Option::as_ref);
                let node = node.ok_or_else(|| {
                    malformed(format!("graph {index} orders missing node {}", id.0))
                })?;
                if node.subgraph != index || placed[id.0 as usize].is_some() {
                    return Err(malformed(format!("node {} is misplaced or listed twice", id.0)));
                }
                let reads: Vec<ValueId> =
                    node.inputs.iter().flat_map(|a| a.value.values()).collect();
                for value in reads {
                    if value.0 as usize >= g.values.len() {
                        return Err(malformed(format!(
                            "node {} reads missing value {}",
                            id.0, value.0
                        )));
                    }
                    if !visible(&g, &placed, value) {
                        let name = &g.values[value.0 as usize].name;
                        return Err(malformed(format!(
                            "node {} reads value {} (`{name}`) before it is defined in graph {index} (a cycle, a later node's output, or another graph's value)",
                            id.0, value.0
                        )));
                    }
                    g.uses[value.0 as usize].push(User::Node(id));
                }
                for a in &node.inputs {
                    if let Argument::Subgraph(called) = a.value {
                        if called as usize >= subgraph_count {
                            return Err(malformed(format!(
                                "node {} refers to missing graph {called}",
                                id.0
                            )));
                        }
                        calls.push((index, called));
                    }
                }
                placed[id.0 as usize] = Some(index);
                let tail = g.subgraphs[index as usize].ends.tail;
                g.place_after(index, tail, id);
            }
            for value in sub.outputs.iter().flat_map(Argument::values) {
                if value.0 as usize >= g.values.len() {
                    return Err(malformed(format!(
                        "graph {index} outputs missing value {}",
                        value.0
                    )));
                }
                if !visible(&g, &placed, value) {
                    return Err(malformed(format!(
                        "graph {index} outputs value {} (`{}`), not defined in it",
                        value.0, g.values[value.0 as usize].name
                    )));
                }
                g.uses[value.0 as usize].push(User::Output(index));
            }
            g.subgraphs[index as usize].outputs = sub.outputs;
        }
        if let Some(index) =
            g.nodes.iter().zip(&placed).position(|(n, p)| n.is_some() && p.is_none())
        {
            return Err(malformed(format!("node {index} is in no graph's order")));
        }
        check_subgraph_calls(subgraph_count, &calls).map_err(malformed)?;
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
    pub(crate) fn add_value(
        &mut self,
        name: &str,
        meta: ValueMeta,
        producer: Option<NodeId>,
    ) -> ValueId {
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
        self.nodes().filter(move |&id| {
            self.nodes[id.0 as usize].as_ref().is_some_and(|n| n.target == target)
        })
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
        nodes.sort_by_key(|&n| {
            (self.nodes[n.0 as usize].as_ref().map_or(u32::MAX, |n| n.subgraph), self.ordinal(n))
        });
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

/// Deepest nesting of sub-graphs accepted from IR JSON.
const MAX_NESTING: usize = 100;

/// Refuses a graph that calls itself, directly or through others (the root
/// graph included: nothing may call it).
fn check_subgraph_calls(count: usize, calls: &[(u32, u32)]) -> Result<(), String> {
    let mut callers = vec![0usize; count];
    let mut callees: Vec<Vec<u32>> = vec![Vec::new(); count];
    for &(from, to) in calls {
        if to == 0 {
            return Err(format!("graph {from} calls the root graph"));
        }
        callers[to as usize] += 1;
        callees[from as usize].push(to);
    }
    // Kahn's algorithm: a graph never freed of callers is on a cycle.
    let mut ready: Vec<usize> = (0..count).filter(|&i| callers[i] == 0).collect();
    let mut done = 0;
    // How deep each graph is nested (the writers recurse into sub-graphs).
    let mut depth = vec![0usize; count];
    while let Some(i) = ready.pop() {
        done += 1;
        for &to in &callees[i] {
            depth[to as usize] = depth[to as usize].max(depth[i] + 1);
            if depth[to as usize] > MAX_NESTING {
                return Err(format!("graph {to} is nested more than {MAX_NESTING} graphs deep"));
            }
            callers[to as usize] -= 1;
            if callers[to as usize] == 0 {
                ready.push(to as usize);
            }
        }
    }
    match (0..count).find(|&i| callers[i] > 0) {
        Some(i) if done < count => {
            Err(format!("graph {i} is on a cycle of graphs calling each other"))
        }
        _ => Ok(()),
    }
}

/// Most bytes an IR JSON file may hold (a 125M-parameter Llama's is ~10 MB).
pub const IR_JSON_LIMIT: u64 = 1 << 30;

/// Why an IR JSON file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadJsonError {
    #[error(transparent)]
    Input(#[from] crate::input::InputError),
    #[error("{path}: {source}")]
    Graph { path: String, source: GraphError },
}

impl Graph {
    /// Reads and validates an IR JSON file: a regular file (a FIFO is refused
    /// at once) of at most [`IR_JSON_LIMIT`] bytes.
    pub fn read_json(path: &std::path::Path) -> Result<Graph, ReadJsonError> {
        let text = crate::input::read_to_string_bounded(path, IR_JSON_LIMIT)?;
        Graph::from_json(&text)
            .map_err(|source| ReadJsonError::Graph { path: path.display().to_string(), source })
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
                .push_node(
                    0,
                    "aten.relu.default",
                    vec![NamedArgument::positional("self", Argument::Tensor(prev))],
                    vec![OutputDecl::Tensor(meta())],
                )
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
                .insert_before(
                    nodes[1],
                    "aten.neg.default",
                    vec![NamedArgument::positional("self", Argument::Tensor(x))],
                    vec![OutputDecl::Tensor(meta())],
                )
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
        let e = g.insert_before(
            nodes[1],
            "aten.neg.default",
            vec![NamedArgument::positional("self", Argument::Tensor(late))],
            vec![],
        );
        assert!(matches!(e, Err(GraphError::NotDominating { .. })), "{e:?}");
        let e =
            g.set_inputs(nodes[0], vec![NamedArgument::positional("self", Argument::Tensor(late))]);
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
        g.insert_before(
            nodes[2],
            "aten.neg.default",
            vec![NamedArgument::positional("self", Argument::Tensor(x))],
            vec![OutputDecl::Tensor(meta())],
        )
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
        assert!(
            matches!(Graph::from_json(&dangling), Err(GraphError::Malformed(m)) if m.contains("missing value 99"))
        );
    }

    /// `chain(3)`'s JSON edited by `edit`, loaded: the error message.
    fn load_edited(edit: impl FnOnce(&mut serde_json::Value)) -> String {
        let (g, _) = chain(3);
        let mut json: serde_json::Value = serde_json::from_str(&g.to_json()).unwrap();
        edit(&mut json);
        match Graph::from_json(&json.to_string()) {
            Err(GraphError::Malformed(m)) => m,
            other => panic!("loaded: {other:?}"),
        }
    }

    #[test]
    fn json_with_cycles_is_refused() {
        // Node 0 reads node 2's output (value 3): a cycle through the chain.
        let m = load_edited(|j| j["nodes"][0]["inputs"][0]["value"]["tensor"] = 3.into());
        assert!(m.contains("node 0 reads value 3") && m.contains("before it is defined"), "{m}");
        // A node reading its own output.
        let m = load_edited(|j| j["nodes"][1]["inputs"][0]["value"]["tensor"] = 2.into());
        assert!(m.contains("node 1 reads value 2"), "{m}");
        // The order lists a reader before its producer.
        let m = load_edited(|j| j["subgraphs"][0]["order"] = serde_json::json!([1, 0, 2]));
        assert!(m.contains("node 1 reads value 1"), "{m}");
        // A graph calling itself, and two graphs calling each other.
        let m = load_edited(|j| {
            j["subgraphs"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({"inputs": [], "order": [3], "outputs": []}));
            let call = |graph: u32, calls: u32| serde_json::json!({"target": "higher_order.cond", "inputs": [{"name": "body", "value": {"subgraph": calls}}], "outputs": [], "subgraph": graph});
            j["nodes"].as_array_mut().unwrap().push(call(1, 1));
        });
        assert!(m.contains("graph 1 is on a cycle"), "{m}");
        let m = load_edited(|j| {
            let call = |graph: u32, calls: u32| serde_json::json!({"target": "higher_order.cond", "inputs": [{"name": "body", "value": {"subgraph": calls}}], "outputs": [], "subgraph": graph});
            for (graph, calls, node) in [(1, 2, 3), (2, 1, 4)] {
                j["subgraphs"]
                    .as_array_mut()
                    .unwrap()
                    .push(serde_json::json!({"inputs": [], "order": [node], "outputs": []}));
                j["nodes"].as_array_mut().unwrap().push(call(graph, calls));
            }
        });
        assert!(m.contains("is on a cycle of graphs"), "{m}");
        // Acyclic but deeper than any writer should recurse.
        let m = load_edited(|j| {
            let call = |graph: u32, calls: u32| serde_json::json!({"target": "higher_order.cond", "inputs": [{"name": "body", "value": {"subgraph": calls}}], "outputs": [], "subgraph": graph});
            for graph in 1..=200u32 {
                j["subgraphs"]
                    .as_array_mut()
                    .unwrap()
                    .push(serde_json::json!({"inputs": [], "order": [graph + 2], "outputs": []}));
                j["nodes"].as_array_mut().unwrap().push(call(graph, graph + 1));
            }
            j["subgraphs"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({"inputs": [], "order": [], "outputs": []}));
        });
        assert!(m.contains("nested more than 100 graphs deep"), "{m}");
    }

    #[test]
    fn json_of_a_graph_with_erased_nodes_reloads() {
        // Found by fuzzing (ir_json, on a real trace's IR): values of erased nodes stay
        // in the arena naming their producer; the graph must reload its own JSON.
        let (mut g, nodes) = chain(3);
        let x = g.subgraph(0).unwrap().inputs[0];
        let unused = g
            .push_node(
                0,
                "aten.neg.default",
                vec![NamedArgument::positional("self", Argument::Tensor(x))],
                vec![OutputDecl::Tensor(meta())],
            )
            .unwrap();
        assert_eq!(g.eliminate_dead_code(), 1);
        let again = Graph::from_json(&g.to_json()).unwrap();
        assert_eq!(again.fingerprint(), g.fingerprint());
        // ...but such a value is never readable.
        let dead = g.to_json();
        let mut json: serde_json::Value = serde_json::from_str(&dead).unwrap();
        let dead_value = json["values"]
            .as_array()
            .unwrap()
            .iter()
            .position(|v| v["producer"] == unused.0)
            .unwrap();
        json["nodes"][nodes[2].0 as usize]["inputs"][0]["value"]["tensor"] = dead_value.into();
        let m = match Graph::from_json(&json.to_string()) {
            Err(GraphError::Malformed(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(
            m.contains(&format!("reads value {dead_value}")) && m.contains("before it is defined"),
            "{m}"
        );
    }

    #[test]
    fn json_with_duplicate_producers_or_dangling_ids_is_refused() {
        let m = load_edited(|j| j["nodes"][1]["outputs"][0]["tensor"] = 1.into());
        assert!(m.contains("value 1 is produced by nodes 0 and 1"), "{m}");
        let m = load_edited(|j| j["values"][2]["producer"] = 0.into());
        assert!(
            m.contains("value 2")
                && m.contains("names node 0 as its producer, but node 1 outputs it"),
            "{m}"
        );
        let m = load_edited(|j| j["values"][0]["producer"] = 1.into());
        assert!(
            m.contains("value 0")
                && m.contains("names node 1 as its producer, but no node outputs it"),
            "{m}"
        );
        let m = load_edited(|j| j["values"][0]["producer"] = 9.into());
        assert!(m.contains("names node 9 as its producer"), "{m}");
        let m = load_edited(|j| j["nodes"][1]["outputs"][0]["tensor"] = 7.into());
        assert!(m.contains("node 1 outputs missing value 7"), "{m}");
        let m = load_edited(|j| j["subgraphs"][0]["inputs"] = serde_json::json!([5]));
        assert!(m.contains("missing input value 5"), "{m}");
        let m = load_edited(|j| j["subgraphs"][0]["inputs"] = serde_json::json!([1]));
        assert!(m.contains("input `") && m.contains("is produced by a node"), "{m}");
        let m = load_edited(|j| {
            j["subgraphs"][0]["order"] = serde_json::json!([0, 1]);
            j["subgraphs"][0]["outputs"] = serde_json::json!([{"tensor": 2}]);
        });
        assert!(m.contains("node 2 is in no graph's order"), "{m}");
        let m = load_edited(|j| j["subgraphs"][0]["order"] = serde_json::json!([0, 1, 2, 2]));
        assert!(m.contains("listed twice"), "{m}");
        let m = load_edited(|j| {
            j["nodes"][1]["inputs"][0]["value"] = serde_json::json!({"subgraph": 4})
        });
        assert!(m.contains("missing graph 4"), "{m}");
    }

    #[test]
    fn json_files_are_bounded_and_regular() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.json");
        std::fs::write(&path, chain(2).0.to_json()).unwrap();
        assert_eq!(Graph::read_json(&path).unwrap().node_count(), 2);
        let fifo = dir.path().join("fifo.json");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let e = Graph::read_json(&fifo).unwrap_err().to_string();
        assert!(e.contains("fifo.json") && e.contains("FIFO"), "{e}");
    }
}
