//! Mutations of the IR, with the undo journal that makes a plugin call atomic.

use super::*;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    #[error("no node {}", .0.0)]
    NoNode(NodeId),
    #[error("no value {}", .0.0)]
    NoValue(ValueId),
    #[error("no sub-graph {0}")]
    NoSubgraph(u32),
    #[error("value `{value}` is read by node {reader} but defined after it (or in another graph)")]
    NotDominating { value: String, reader: String },
    #[error("cannot erase `{node}`: its output `{value}` is still read")]
    StillUsed { node: String, value: String },
    #[error("cannot replace {kind} value `{value}` with {with}")]
    KindMismatch { value: String, kind: &'static str, with: String },
    #[error("graph is read-only in this stage")]
    ReadOnly,
    #[error("malformed graph: {0}")]
    Malformed(String),
}

/// What a value's readers read instead, in `replace_uses`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Replacement {
    Value(ValueId),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// How to undo one primitive mutation.
#[derive(Debug, Clone)]
pub(super) enum Undo {
    /// A node was appended to the arena and placed in its graph's order.
    Added(NodeId),
    /// A value was appended to the arena.
    AddedValue(ValueId),
    SetInputs(NodeId, Vec<NamedArgument>),
    /// A node was erased; it followed `after` in its graph.
    Erased {
        id: NodeId,
        after: Option<NodeId>,
        node: Box<Node>,
    },
    SetOutputs(u32, Vec<Argument>),
    SetMeta(ValueId, ValueMeta),
    SetRange(String, Option<RangeConstraint>),
}

impl Graph {
    // ── Transactions ──

    /// Starts recording undo information; `rollback` returns to this point.
    pub fn begin(&mut self) {
        self.journal = Some(Vec::new());
    }

    /// Keeps the changes since `begin`.
    pub fn commit(&mut self) {
        self.journal = None;
    }

    /// Undoes every change since `begin`, newest first.
    pub fn rollback(&mut self) {
        let Some(journal) = self.journal.take() else { return };
        self.changes -= journal.len() as u64;
        for undo in journal.into_iter().rev() {
            self.undo(undo);
        }
    }

    /// How many mutations the graph has had (a rolled-back call's are not
    /// counted): equal before and after means nothing changed.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    fn record(&mut self, undo: Undo) {
        self.changes += 1;
        if let Some(journal) = &mut self.journal {
            journal.push(undo);
        }
    }

    fn undo(&mut self, undo: Undo) {
        match undo {
            Undo::Added(id) => {
                let node = self.nodes[id.0 as usize].take().expect("undo of a live node");
                self.unlink_inputs(id, &node.inputs);
                self.unplace(node.subgraph, id);
                debug_assert_eq!(id.0 as usize, self.nodes.len() - 1);
                self.nodes.pop();
            }
            Undo::AddedValue(id) => {
                let value = self.values.pop().expect("undo of an added value");
                debug_assert_eq!(id.0 as usize, self.values.len());
                self.uses.pop();
                self.names.remove(&value.name);
            }
            Undo::SetInputs(id, inputs) => {
                self.swap_inputs(id, inputs);
            }
            Undo::Erased { id, after, node } => {
                let node = *node;
                let subgraph = node.subgraph;
                self.link_inputs(id, &node.inputs);
                self.nodes[id.0 as usize] = Some(node);
                // Undone newest first, so `after` is again the node this one followed.
                self.place_after(subgraph, after, id);
            }
            Undo::SetOutputs(subgraph, outputs) => {
                self.swap_graph_outputs(subgraph, outputs);
            }
            Undo::SetMeta(id, meta) => self.values[id.0 as usize].meta = meta,
            Undo::SetRange(symbol, old) => match old {
                Some(range) => {
                    self.range_constraints.insert(symbol, range);
                }
                None => {
                    self.range_constraints.remove(&symbol);
                }
            },
        }
    }

    // ── Primitive mutations ──

    /// Inserts a call right after `after` (at the head with None) in `subgraph`.
    pub(super) fn insert_after(
        &mut self,
        subgraph: u32,
        after: Option<NodeId>,
        target: &str,
        inputs: Vec<NamedArgument>,
        outputs: Vec<OutputDecl>,
    ) -> Result<NodeId, GraphError> {
        self.subgraph(subgraph)?;
        self.check_reads(subgraph, after, &inputs, target)?;
        let id = NodeId(self.nodes.len() as u32);
        let base = target.split('.').nth(1).unwrap_or(target).trim_start_matches('_').to_string();
        let outputs =
            outputs.into_iter().map(|decl| self.declare_output(&base, id, decl)).collect();
        self.nodes.push(Some(Node {
            target: target.into(),
            inputs,
            outputs,
            subgraph,
            name: None,
            meta: Default::default(),
        }));
        let inputs = self.nodes[id.0 as usize].as_ref().expect("just pushed").inputs.clone();
        self.link_inputs(id, &inputs);
        self.place_after(subgraph, after, id);
        self.record(Undo::Added(id));
        Ok(id)
    }

    /// Inserts a call right before `before`, in the same graph.
    pub fn insert_before(
        &mut self,
        before: NodeId,
        target: &str,
        inputs: Vec<NamedArgument>,
        outputs: Vec<OutputDecl>,
    ) -> Result<NodeId, GraphError> {
        let subgraph = self.node(before)?.subgraph;
        self.insert_after(subgraph, self.prev(before), target, inputs, outputs)
    }

    pub fn set_inputs(&mut self, id: NodeId, inputs: Vec<NamedArgument>) -> Result<(), GraphError> {
        let node = self.node(id)?;
        let (subgraph, target) = (node.subgraph, node.target.clone());
        self.check_reads(subgraph, self.prev(id), &inputs, &target)?;
        let old = self.swap_inputs(id, inputs);
        self.record(Undo::SetInputs(id, old));
        Ok(())
    }

    pub fn set_input(&mut self, id: NodeId, input: NamedArgument) -> Result<(), GraphError> {
        let mut inputs = self.node(id)?.inputs.clone();
        match inputs.iter_mut().find(|a| a.name == input.name) {
            Some(slot) => *slot = input,
            None => inputs.push(input),
        }
        self.set_inputs(id, inputs)
    }

    /// Makes every reader of `old` read `with` instead.
    pub fn replace_uses(&mut self, old: ValueId, with: Replacement) -> Result<(), GraphError> {
        let old_value = self.value(old)?.clone();
        if let Replacement::Value(new) = with {
            let new_value = self.value(new)?;
            if new_value.meta.kind() != old_value.meta.kind() {
                return Err(GraphError::KindMismatch {
                    value: old_value.name,
                    kind: old_value.meta.kind(),
                    with: format!("{} value `{}`", new_value.meta.kind(), new_value.name),
                });
            }
        }
        for user in self.value_users(old)? {
            match user {
                User::Node(id) => {
                    let node = self.node(id)?;
                    let inputs = node
                        .inputs
                        .iter()
                        .map(|a| {
                            Ok(NamedArgument {
                                value: substitute(&a.value, old, with, &old_value)?,
                                ..a.clone()
                            })
                        })
                        .collect::<Result<Vec<_>, GraphError>>()?;
                    self.set_inputs(id, inputs)?;
                }
                User::Output(subgraph) => {
                    let outputs = self.subgraphs[subgraph as usize]
                        .outputs
                        .iter()
                        .map(|a| substitute(a, old, with, &old_value))
                        .collect::<Result<Vec<_>, _>>()?;
                    self.replace_graph_outputs(subgraph, outputs)?;
                }
            }
        }
        Ok(())
    }

    /// Erases a node whose outputs nobody reads.
    pub fn erase(&mut self, id: NodeId) -> Result<(), GraphError> {
        let node = self.node(id)?;
        let subgraph = node.subgraph;
        if let Some(value) = node.output_values().find(|v| self.is_used(*v)) {
            return Err(GraphError::StillUsed {
                node: self.node_name(id),
                value: self.values[value.0 as usize].name.clone(),
            });
        }
        let node = self.nodes[id.0 as usize].take().expect("checked live");
        self.unlink_inputs(id, &node.inputs);
        let after = self.unplace(subgraph, id);
        // Ids are never reused: the slot stays empty unless a rollback restores it.
        self.record(Undo::Erased { id, after, node: Box::new(node) });
        Ok(())
    }

    pub fn set_value_meta(&mut self, id: ValueId, meta: ValueMeta) -> Result<(), GraphError> {
        let value = self.value(id)?;
        if value.meta.kind() != meta.kind() {
            return Err(GraphError::KindMismatch {
                value: value.name.clone(),
                kind: value.meta.kind(),
                with: format!("{} metadata", meta.kind()),
            });
        }
        let old = std::mem::replace(&mut self.values[id.0 as usize].meta, meta);
        self.record(Undo::SetMeta(id, old));
        Ok(())
    }

    pub fn set_range_constraint(
        &mut self,
        symbol: &str,
        range: RangeConstraint,
    ) -> Result<(), GraphError> {
        if range.max.is_some_and(|max| max < range.min) {
            return Err(GraphError::Malformed(format!("range of `{symbol}` has max < min")));
        }
        let old = self.range_constraints.insert(symbol.into(), range);
        self.record(Undo::SetRange(symbol.into(), old));
        Ok(())
    }

    pub(super) fn replace_graph_outputs(
        &mut self,
        subgraph: u32,
        outputs: Vec<Argument>,
    ) -> Result<(), GraphError> {
        self.subgraph(subgraph)?;
        for value in outputs.iter().flat_map(Argument::values) {
            self.value(value)?;
        }
        let old = self.swap_graph_outputs(subgraph, outputs);
        self.record(Undo::SetOutputs(subgraph, old));
        Ok(())
    }

    // ── Bookkeeping ──

    pub(super) fn new_value(
        &mut self,
        name: &str,
        meta: ValueMeta,
        producer: Option<NodeId>,
    ) -> ValueId {
        let name = self.fresh_name(name);
        let id = ValueId(self.values.len() as u32);
        self.names.insert(name.clone());
        self.values.push(Value { name, meta, producer });
        self.uses.push(Vec::new());
        self.record(Undo::AddedValue(id));
        id
    }

    /// `base`, else `base_N` with the smallest N not taken since the last
    /// `base_N` handed out (a counter per base keeps this O(1) amortized).
    fn fresh_name(&mut self, base: &str) -> String {
        if !self.names.contains(base) {
            return base.to_string();
        }
        let next = self.name_counters.entry(base.to_string()).or_insert(1);
        loop {
            let candidate = format!("{base}_{next}");
            *next += 1;
            if !self.names.contains(&candidate) {
                return candidate;
            }
        }
    }

    fn declare_output(&mut self, base: &str, producer: NodeId, decl: OutputDecl) -> Argument {
        let value = |g: &mut Self, meta| g.new_value(base, meta, Some(producer));
        match decl {
            OutputDecl::Tensor(meta) => Argument::Tensor(value(self, ValueMeta::Tensor(meta))),
            OutputDecl::Tensors(metas) => Argument::Tensors(
                metas.into_iter().map(|m| value(self, ValueMeta::Tensor(m))).collect(),
            ),
            OutputDecl::SymInt(expr) => {
                Argument::SymInt(Sym::Value(value(self, ValueMeta::SymInt(expr))))
            }
            OutputDecl::SymBool(expr) => {
                Argument::SymBool(Sym::Value(value(self, ValueMeta::SymBool(expr))))
            }
            OutputDecl::None => Argument::None,
        }
    }

    /// Every value `inputs` reads must exist and be defined in `subgraph` no later
    /// than `last_visible` (an input of the graph, or produced by a node up to it).
    pub(super) fn check_reads(
        &self,
        subgraph: u32,
        last_visible: Option<NodeId>,
        inputs: &[NamedArgument],
        target: &str,
    ) -> Result<(), GraphError> {
        for value in inputs.iter().flat_map(|a| a.value.values()) {
            let v = self.value(value)?;
            let visible = match (v.producer, last_visible) {
                (None, _) => self.subgraphs[subgraph as usize].inputs.contains(&value),
                (Some(p), Some(last)) => {
                    self.nodes
                        .get(p.0 as usize)
                        .and_then(Option::as_ref)
                        .is_some_and(|n| n.subgraph == subgraph)
                        && self.ordinal(p) <= self.ordinal(last)
                }
                (Some(_), None) => false,
            };
            if !visible {
                return Err(GraphError::NotDominating {
                    value: v.name.clone(),
                    reader: target.into(),
                });
            }
        }
        Ok(())
    }

    fn swap_inputs(&mut self, id: NodeId, inputs: Vec<NamedArgument>) -> Vec<NamedArgument> {
        let old =
            std::mem::take(&mut self.nodes[id.0 as usize].as_mut().expect("live node").inputs);
        self.unlink_inputs(id, &old);
        self.link_inputs(id, &inputs);
        self.nodes[id.0 as usize].as_mut().expect("live node").inputs = inputs;
        old
    }

    fn swap_graph_outputs(&mut self, subgraph: u32, outputs: Vec<Argument>) -> Vec<Argument> {
        let old = std::mem::replace(&mut self.subgraphs[subgraph as usize].outputs, outputs);
        for v in old.iter().flat_map(Argument::values) {
            remove_one(&mut self.uses[v.0 as usize], User::Output(subgraph));
        }
        let new: Vec<ValueId> =
            self.subgraphs[subgraph as usize].outputs.iter().flat_map(Argument::values).collect();
        for v in new {
            self.uses[v.0 as usize].push(User::Output(subgraph));
        }
        old
    }

    pub(super) fn link_inputs(&mut self, id: NodeId, inputs: &[NamedArgument]) {
        for v in inputs.iter().flat_map(|a| a.value.values()) {
            self.uses[v.0 as usize].push(User::Node(id));
        }
    }

    fn unlink_inputs(&mut self, id: NodeId, inputs: &[NamedArgument]) {
        for v in inputs.iter().flat_map(|a| a.value.values()) {
            remove_one(&mut self.uses[v.0 as usize], User::Node(id));
        }
    }
}

fn remove_one(uses: &mut Vec<User>, user: User) {
    if let Some(i) = uses.iter().position(|u| *u == user) {
        uses.swap_remove(i);
    }
}

/// `arg` with every read of `old` replaced.
fn substitute(
    arg: &Argument,
    old: ValueId,
    with: Replacement,
    old_value: &Value,
) -> Result<Argument, GraphError> {
    use Argument as A;
    let mismatch = || GraphError::KindMismatch {
        value: old_value.name.clone(),
        kind: old_value.meta.kind(),
        with: format!("{with:?}"),
    };
    let value = |v: ValueId| -> Result<ValueId, GraphError> {
        match (v == old, with) {
            (false, _) => Ok(v),
            (true, Replacement::Value(new)) => Ok(new),
            (true, _) => Err(mismatch()),
        }
    };
    let sym_int = |s: &Sym<i64>| -> Result<Sym<i64>, GraphError> {
        match (s, with) {
            (Sym::Value(v), Replacement::Int(c)) if *v == old => Ok(Sym::Const(c)),
            (Sym::Value(v), _) => Ok(Sym::Value(value(*v)?)),
            (c, _) => Ok(*c),
        }
    };
    let sym_float = |s: &Sym<f64>| -> Result<Sym<f64>, GraphError> {
        match (s, with) {
            (Sym::Value(v), Replacement::Float(c)) if *v == old => Ok(Sym::Const(c)),
            (Sym::Value(v), _) => Ok(Sym::Value(value(*v)?)),
            (c, _) => Ok(*c),
        }
    };
    let sym_bool = |s: &Sym<bool>| -> Result<Sym<bool>, GraphError> {
        match (s, with) {
            (Sym::Value(v), Replacement::Bool(c)) if *v == old => Ok(Sym::Const(c)),
            (Sym::Value(v), _) => Ok(Sym::Value(value(*v)?)),
            (c, _) => Ok(*c),
        }
    };
    Ok(match arg {
        A::Tensor(v) => A::Tensor(value(*v)?),
        A::Tensors(vs) => A::Tensors(vs.iter().map(|v| value(*v)).collect::<Result<_, _>>()?),
        A::OptionalTensors(vs) => A::OptionalTensors(
            vs.iter().map(|v| v.map(value).transpose()).collect::<Result<_, _>>()?,
        ),
        A::SymInt(s) => A::SymInt(sym_int(s)?),
        A::SymInts(ss) => A::SymInts(ss.iter().map(sym_int).collect::<Result<_, _>>()?),
        A::SymFloat(s) => A::SymFloat(sym_float(s)?),
        A::SymFloats(ss) => A::SymFloats(ss.iter().map(sym_float).collect::<Result<_, _>>()?),
        A::SymBool(s) => A::SymBool(sym_bool(s)?),
        A::SymBools(ss) => A::SymBools(ss.iter().map(sym_bool).collect::<Result<_, _>>()?),
        other => other.clone(),
    })
}
