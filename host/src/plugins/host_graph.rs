//! The `graph` resource of the contract, implemented over the IR.
//!
//! Every method answers misuse (a stale handle, a value read before it is
//! defined, erasing a node still read) with the contract's typed `error`; only
//! budget overruns and a passed deadline trap. Each method bounds what the
//! guest asks of it before allocating: identifiers against `MAX_NAME_BYTES`,
//! declared outputs against `MAX_NODE_OUTPUTS`, strings and lists handed in
//! against the write budget, and what the host then allocates for the guest
//! (value names derived from a target, copies of a node's inputs, journal
//! entries) against the write budget too, at its host size. Answers are
//! charged against the read budget before they are built, nodes added against
//! the node budget. Work that grows with the graph looks at the call's deadline
//! as it goes.

use std::mem::size_of;

use wasmtime::component::{Resource, ResourceTable};

use super::bindings::wit_graph as w;
use super::bindings::wit_types as t;
use super::bindings::GraphRef;
use super::bindings::NoState;
use super::sandbox::{CallBudget, Ticks, MAX_NODE_OUTPUTS};
use crate::graph::{
    Argument, Device, Dim, Graph, GraphError, NamedArgument, NodeId, OutputDecl, RangeConstraint,
    Replacement, Sym, TensorMeta, User, Value, ValueId, ValueMeta,
};

type Answer<T> = wasmtime::Result<Result<T, t::Error>>;

fn wit_error(e: GraphError, node: Option<u32>) -> t::Error {
    t::Error { message: e.to_string(), node }
}

/// The graph lent to a call, and whether the call may change it.
#[derive(Debug, Default)]
pub struct GraphState {
    pub graph: Graph,
    /// Translations read the graph but must not change it.
    pub read_only: bool,
}

/// The `graph` interface's view of the store.
pub struct GraphHost<'a> {
    pub(super) table: &'a mut ResourceTable,
    pub(super) state: &'a mut GraphState,
    pub(super) budget: &'a mut CallBudget,
}

impl t::Host for NoState {}
impl w::Host for GraphHost<'_> {}

/// Host bytes behind one value a node declares, besides its name: the value,
/// its (empty) list of readers, its place in the name set, its journal entry,
/// and what a tensor's metadata gains on the host (its layout name).
const VALUE_HOST_BYTES: usize =
    size_of::<Value>() + size_of::<Vec<User>>() + 2 * size_of::<String>() + 64;
/// Longest `_N` suffix a fresh name gets.
const NAME_SUFFIX_BYTES: usize = 21;

impl GraphHost<'_> {
    fn writable(&self, node: Option<u32>) -> Result<(), t::Error> {
        if self.state.read_only {
            return Err(wit_error(GraphError::ReadOnly, node));
        }
        Ok(())
    }

    /// Charges an answer by its approximate size on the guest side, before it
    /// is built (`build` runs only within budget).
    fn answer<T>(
        &mut self,
        function: &'static str,
        sized: Result<usize, GraphError>,
        node: Option<u32>,
        build: impl FnOnce(&Graph) -> T,
    ) -> Answer<T> {
        match sized {
            Ok(size) => {
                self.budget.charge_read(function, size)?;
                Ok(Ok(build(&self.state.graph)))
            }
            Err(e) => Ok(Err(wit_error(e, node))),
        }
    }

    /// Node ids, charged 4 bytes each as they are collected; the deadline is
    /// looked at as the walk goes.
    fn collect_nodes(
        &mut self,
        function: &'static str,
        keep: impl Fn(&Graph, NodeId) -> bool,
    ) -> wasmtime::Result<Vec<u32>> {
        self.budget.check_deadline(function)?;
        self.budget.charge_read(function, 8)?;
        let mut ticks = Ticks::new(function);
        let mut found = Vec::new();
        let graph = &self.state.graph;
        for id in graph.nodes() {
            ticks.step(self.budget)?;
            if keep(graph, id) {
                self.budget.charge_read(function, 4)?;
                found.push(id.0);
            }
        }
        Ok(found)
    }

    /// Bounds the names and the outputs of a call to add: every argument name
    /// and the target within `MAX_NAME_BYTES`, at most `MAX_NODE_OUTPUTS`
    /// declared values; then charges the host what declaring them costs (a
    /// name derived from the target per value, stored twice, and the value
    /// itself) before any is made.
    fn bound_new_node(
        &mut self,
        function: &'static str,
        target: &str,
        inputs: &[w::NamedArgument],
        outputs: &[w::OutputDecl],
    ) -> wasmtime::Result<()> {
        self.budget.check_name(function, "a target", target)?;
        self.bound_arguments(function, inputs)?;
        let values: usize = outputs.iter().map(declared_values).fold(0, usize::saturating_add);
        self.budget.check_count(function, "output values", values, MAX_NODE_OUTPUTS)?;
        for decl in outputs {
            if let w::OutputDecl::Tensor(m) = decl {
                self.bound_tensor_meta(function, m)?;
            } else if let w::OutputDecl::Tensors(ms) = decl {
                for m in ms {
                    self.bound_tensor_meta(function, m)?;
                }
            }
        }
        let base = target.split('.').nth(1).unwrap_or(target).len();
        let per_value = 2 * (base + NAME_SUFFIX_BYTES + size_of::<String>()) + VALUE_HOST_BYTES;
        let what = format!("{values} output values named after a {}-byte target", target.len());
        self.budget.charge_host(
            function,
            &what,
            values.checked_mul(per_value).and_then(|b| b.checked_add(base + 64)),
        )?;
        // The node keeps the inputs handed in (charged as written); the graph
        // adds a reader entry per value they read.
        self.charge_readers(function, inputs)
    }

    /// Argument names within `MAX_NAME_BYTES`, and the names inside them that
    /// are identifiers (a dtype, a device kind, a layout, a memory format).
    fn bound_arguments(
        &mut self,
        function: &'static str,
        arguments: &[w::NamedArgument],
    ) -> wasmtime::Result<()> {
        for a in arguments {
            self.budget.check_name(function, "an argument name", &a.name)?;
            match &a.value {
                w::Argument::Dtype(s) | w::Argument::Layout(s) | w::Argument::MemoryFormat(s) => {
                    self.budget.check_name(function, "a dtype, layout or memory format", s)?
                }
                w::Argument::Device(d) => {
                    self.budget.check_name(function, "a device kind", &d.kind)?
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn bound_tensor_meta(
        &mut self,
        function: &'static str,
        m: &t::TensorMeta,
    ) -> wasmtime::Result<()> {
        self.budget.check_name(function, "a dtype", &m.dtype)?;
        self.budget.check_name(function, "a device kind", &m.device.kind)
    }

    /// The reader entries the graph adds for the values `inputs` read.
    fn charge_readers(
        &mut self,
        function: &'static str,
        inputs: &[w::NamedArgument],
    ) -> wasmtime::Result<()> {
        let readers = inputs.iter().map(|a| reads(&a.value)).fold(0, usize::saturating_add);
        self.budget.charge_host(
            function,
            &"the readers of the node's inputs",
            readers.checked_mul(size_of::<User>()),
        )
    }
}

/// Values an output declaration makes.
fn declared_values(d: &w::OutputDecl) -> usize {
    match d {
        w::OutputDecl::Tensor(_) | w::OutputDecl::SymInt(_) | w::OutputDecl::SymBool(_) => 1,
        w::OutputDecl::Tensors(ms) => ms.len(),
        w::OutputDecl::None => 0,
    }
}

/// Values an argument reads (an upper bound: a list counts all its entries).
fn reads(a: &w::Argument) -> usize {
    use w::Argument as W;
    match a {
        W::Tensor(_) | W::SymInt(_) | W::SymFloat(_) | W::SymBool(_) => 1,
        W::Tensors(v) => v.len(),
        W::OptionalTensors(v) => v.len(),
        W::SymInts(v) => v.len(),
        W::SymFloats(v) => v.len(),
        W::SymBools(v) => v.len(),
        _ => 0,
    }
}

/// Host bytes a copy of a node's `inputs` takes (with their reader entries).
fn ir_inputs_host_size(inputs: &[NamedArgument]) -> usize {
    inputs
        .iter()
        .map(|a| {
            a.name.len()
                + size_of::<NamedArgument>()
                + ir_argument_size(&a.value)
                + a.value.values().count() * size_of::<User>()
        })
        .fold(0, usize::saturating_add)
}

impl w::HostGraph for GraphHost<'_> {
    fn nodes(&mut self, _: Resource<GraphRef>) -> wasmtime::Result<Vec<u32>> {
        self.collect_nodes("graph.nodes", |_, _| true)
    }

    fn nodes_by_target(
        &mut self,
        _: Resource<GraphRef>,
        target: String,
    ) -> wasmtime::Result<Vec<u32>> {
        const F: &str = "graph.nodes-by-target";
        self.budget.check_name(F, "a target", &target)?;
        self.budget.charge_write(F, target.approx_size())?;
        self.collect_nodes(F, |g, id| g.node(id).is_ok_and(|n| n.target == target))
    }

    fn target(&mut self, _: Resource<GraphRef>, node: u32) -> Answer<String> {
        let sized = self.state.graph.node(NodeId(node)).map(|n| n.target.len() + 8);
        self.answer("graph.target", sized, Some(node), |g| {
            g.node(NodeId(node)).map(|n| n.target.clone()).unwrap_or_default()
        })
    }

    fn name(&mut self, _: Resource<GraphRef>, node: u32) -> Answer<String> {
        // A node's name is its first output's name, else `target#id`.
        let g = &self.state.graph;
        let sized = g.node(NodeId(node)).map(|n| {
            match n.output_values().next().and_then(|v| g.value(v).ok()) {
                Some(v) => v.name.len() + 8,
                None => n.target.len() + 20,
            }
        });
        self.answer("graph.name", sized, Some(node), |g| g.node_name(NodeId(node)))
    }

    fn subgraph_of(&mut self, _: Resource<GraphRef>, node: u32) -> Answer<u32> {
        let subgraph = self.state.graph.node(NodeId(node)).map(|n| n.subgraph);
        self.answer("graph.subgraph-of", subgraph.clone().map(|_| 4), Some(node), |_| {
            subgraph.unwrap_or_default()
        })
    }

    fn inputs(&mut self, _: Resource<GraphRef>, node: u32) -> Answer<Vec<w::NamedArgument>> {
        const F: &str = "graph.inputs";
        self.budget.check_deadline(F)?;
        let sized = self
            .state
            .graph
            .node(NodeId(node))
            .map(|n| 8 + n.inputs.iter().map(ir_named_size).fold(0, usize::saturating_add));
        self.answer(F, sized, Some(node), |g| {
            g.node(NodeId(node))
                .map(|n| n.inputs.iter().map(to_wit_named).collect())
                .unwrap_or_default()
        })
    }

    fn input(
        &mut self,
        _: Resource<GraphRef>,
        node: u32,
        name: String,
    ) -> Answer<Option<w::Argument>> {
        const F: &str = "graph.input";
        self.budget.check_name(F, "an argument name", &name)?;
        self.budget.charge_write(F, name.approx_size())?;
        let sized = self
            .state
            .graph
            .node(NodeId(node))
            .map(|n| 4 + n.input(&name).map_or(0, ir_argument_size));
        self.answer(F, sized, Some(node), |g| {
            g.node(NodeId(node)).ok().and_then(|n| n.input(&name).map(to_wit_argument))
        })
    }

    fn outputs(&mut self, _: Resource<GraphRef>, node: u32) -> Answer<Vec<w::Argument>> {
        const F: &str = "graph.outputs";
        self.budget.check_deadline(F)?;
        let sized = self
            .state
            .graph
            .node(NodeId(node))
            .map(|n| 8 + n.outputs.iter().map(ir_argument_size).fold(0, usize::saturating_add));
        self.answer(F, sized, Some(node), |g| {
            g.node(NodeId(node))
                .map(|n| n.outputs.iter().map(to_wit_argument).collect())
                .unwrap_or_default()
        })
    }

    fn users(&mut self, _: Resource<GraphRef>, node: u32) -> Answer<Vec<u32>> {
        const F: &str = "graph.users";
        self.budget.check_deadline(F)?;
        let users = self.state.graph.node_users(NodeId(node));
        self.budget.check_deadline(F)?;
        let sized = users.as_ref().map(|u| 8 + 4 * u.len()).map_err(Clone::clone);
        self.answer(F, sized, Some(node), |_| {
            users.map(|u| u.into_iter().map(|n| n.0).collect()).unwrap_or_default()
        })
    }

    fn value_users(&mut self, _: Resource<GraphRef>, value: u32) -> Answer<Vec<u32>> {
        const F: &str = "graph.value-users";
        self.budget.check_deadline(F)?;
        let users = self.state.graph.value_users(ValueId(value));
        self.budget.check_deadline(F)?;
        let sized = users.as_ref().map(|u| 8 + 4 * u.len()).map_err(Clone::clone);
        self.answer(F, sized, None, |g| {
            let nodes = users.unwrap_or_default().into_iter().filter_map(|u| match u {
                User::Node(n) => Some(n),
                User::Output(_) => None,
            });
            g.in_order(nodes).into_iter().map(|n| n.0).collect()
        })
    }

    fn is_graph_output(&mut self, _: Resource<GraphRef>, value: u32) -> Answer<bool> {
        const F: &str = "graph.is-graph-output";
        self.budget.check_deadline(F)?;
        let sized = self.state.graph.value(ValueId(value)).map(|_| 1);
        self.answer(F, sized, None, |g| g.is_graph_output(ValueId(value)))
    }

    fn producer(&mut self, _: Resource<GraphRef>, value: u32) -> Answer<Option<u32>> {
        let producer = self.state.graph.value(ValueId(value)).map(|v| v.producer.map(|n| n.0));
        self.answer("graph.producer", producer.clone().map(|_| 8), None, |_| {
            producer.unwrap_or_default()
        })
    }

    fn value_name(&mut self, _: Resource<GraphRef>, value: u32) -> Answer<String> {
        let sized = self.state.graph.value(ValueId(value)).map(|v| v.name.len() + 8);
        self.answer("graph.value-name", sized, None, |g| {
            g.value(ValueId(value)).map(|v| v.name.clone()).unwrap_or_default()
        })
    }

    fn value_meta(&mut self, _: Resource<GraphRef>, value: u32) -> Answer<t::ValueMeta> {
        let sized = self.state.graph.value(ValueId(value)).map(|v| ir_value_meta_size(&v.meta));
        self.answer("graph.value-meta", sized, None, |g| {
            g.value(ValueId(value))
                .map(|v| to_wit_value_meta(&v.meta))
                .unwrap_or(t::ValueMeta::Opaque(String::new()))
        })
    }

    fn graph_inputs(&mut self, _: Resource<GraphRef>) -> wasmtime::Result<Vec<u32>> {
        const F: &str = "graph.graph-inputs";
        let count = self.state.graph.subgraph(0).map_or(0, |s| s.inputs.len());
        self.budget.charge_read(F, 8 + count * 4)?;
        Ok(self
            .state
            .graph
            .subgraph(0)
            .map(|s| s.inputs.iter().map(|v| v.0).collect())
            .unwrap_or_default())
    }

    fn graph_outputs(&mut self, _: Resource<GraphRef>) -> wasmtime::Result<Vec<w::Argument>> {
        const F: &str = "graph.graph-outputs";
        self.budget.check_deadline(F)?;
        let size =
            self.state.graph.subgraph(0).map_or(0, |s| {
                s.outputs.iter().map(ir_argument_size).fold(0, usize::saturating_add)
            });
        self.budget.charge_read(F, 8usize.saturating_add(size))?;
        Ok(self
            .state
            .graph
            .subgraph(0)
            .map(|s| s.outputs.iter().map(to_wit_argument).collect())
            .unwrap_or_default())
    }

    fn insert_call(
        &mut self,
        _: Resource<GraphRef>,
        before: u32,
        target: String,
        inputs: Vec<w::NamedArgument>,
        outputs: Vec<w::OutputDecl>,
    ) -> Answer<u32> {
        const F: &str = "graph.insert-call";
        self.budget
            .charge_write(F, target.approx_size() + inputs.approx_size() + outputs.approx_size())?;
        if let Err(e) = self.writable(Some(before)) {
            return Ok(Err(e));
        }
        self.budget.charge_node(F)?;
        self.bound_new_node(F, &target, &inputs, &outputs)?;
        self.budget.check_deadline(F)?;
        let inputs = inputs.into_iter().map(from_wit_named).collect();
        let outputs = outputs.into_iter().map(from_wit_output_decl).collect();
        let r =
            self.state.graph.insert_before(NodeId(before), &target, inputs, outputs).map(|n| n.0);
        Ok(r.map_err(|e| wit_error(e, Some(before))))
    }

    fn set_inputs(
        &mut self,
        _: Resource<GraphRef>,
        node: u32,
        inputs: Vec<w::NamedArgument>,
    ) -> Answer<()> {
        const F: &str = "graph.set-inputs";
        self.budget.charge_write(F, inputs.approx_size())?;
        if let Err(e) = self.writable(Some(node)) {
            return Ok(Err(e));
        }
        self.bound_arguments(F, &inputs)?;
        // The old list moves to the journal: only the reader entries are new.
        self.charge_readers(F, &inputs)?;
        self.budget.check_deadline(F)?;
        let inputs = inputs.into_iter().map(from_wit_named).collect();
        Ok(self.state.graph.set_inputs(NodeId(node), inputs).map_err(|e| wit_error(e, Some(node))))
    }

    fn set_input(
        &mut self,
        _: Resource<GraphRef>,
        node: u32,
        input: w::NamedArgument,
    ) -> Answer<()> {
        const F: &str = "graph.set-input";
        self.budget.charge_write(F, input.approx_size())?;
        if let Err(e) = self.writable(Some(node)) {
            return Ok(Err(e));
        }
        self.bound_arguments(F, std::slice::from_ref(&input))?;
        // The node's list is copied with the one input changed, the old one
        // kept in the journal: each call leaves a whole copy behind.
        self.charge_readers(F, std::slice::from_ref(&input))?;
        if let Ok(n) = self.state.graph.node(NodeId(node)) {
            let copy = ir_inputs_host_size(&n.inputs);
            self.budget.charge_host(
                F,
                &format!("a copy of the {} inputs of node {node}", n.inputs.len()),
                Some(copy),
            )?;
        }
        self.budget.check_deadline(F)?;
        Ok(self
            .state
            .graph
            .set_input(NodeId(node), from_wit_named(input))
            .map_err(|e| wit_error(e, Some(node))))
    }

    fn replace_uses(
        &mut self,
        _: Resource<GraphRef>,
        value: u32,
        by: w::Replacement,
    ) -> Answer<()> {
        const F: &str = "graph.replace-uses";
        let node =
            self.state.graph.value(ValueId(value)).ok().and_then(|v| v.producer).map(|n| n.0);
        if let Err(e) = self.writable(node) {
            return Ok(Err(e));
        }
        // Every reader's inputs (or a graph's outputs) are copied with the
        // value replaced, the old ones kept in the journal.
        self.budget.check_deadline(F)?;
        if let Ok(users) = self.state.graph.value_users(ValueId(value)) {
            let mut ticks = Ticks::new(F);
            let mut copies = 0usize;
            for user in &users {
                ticks.step(self.budget)?;
                let size = match user {
                    User::Node(id) => {
                        self.state.graph.node(*id).map_or(0, |n| ir_inputs_host_size(&n.inputs))
                    }
                    User::Output(s) => self.state.graph.subgraph(*s).map_or(0, |s| {
                        s.outputs.iter().map(ir_argument_size).fold(0, usize::saturating_add)
                    }),
                };
                copies = copies.saturating_add(size + size_of::<Argument>());
            }
            self.budget.charge_host(
                F,
                &format!("copies of the inputs of the {} readers of value {value}", users.len()),
                Some(copies),
            )?;
        }
        self.budget.check_deadline(F)?;
        let by = match by {
            w::Replacement::Value(v) => Replacement::Value(ValueId(v)),
            w::Replacement::Int(i) => Replacement::Int(i),
            w::Replacement::Float(f) => Replacement::Float(f),
            w::Replacement::Boolean(b) => Replacement::Bool(b),
        };
        let r = self.state.graph.replace_uses(ValueId(value), by).map_err(|e| wit_error(e, node));
        self.budget.check_deadline(F)?;
        Ok(r)
    }

    fn erase(&mut self, _: Resource<GraphRef>, node: u32) -> Answer<()> {
        if let Err(e) = self.writable(Some(node)) {
            return Ok(Err(e));
        }
        // The node moves to the journal: nothing is copied.
        self.budget.check_deadline("graph.erase")?;
        Ok(self.state.graph.erase(NodeId(node)).map_err(|e| wit_error(e, Some(node))))
    }

    fn set_value_meta(
        &mut self,
        _: Resource<GraphRef>,
        value: u32,
        meta: t::ValueMeta,
    ) -> Answer<()> {
        const F: &str = "graph.set-value-meta";
        self.budget.charge_write(F, meta.approx_size())?;
        if let Err(e) = self.writable(None) {
            return Ok(Err(e));
        }
        if let t::ValueMeta::Tensor(m) = &meta {
            self.bound_tensor_meta(F, m)?;
        }
        // The old metadata moves to the journal: nothing is copied.
        Ok(self
            .state
            .graph
            .set_value_meta(ValueId(value), from_wit_value_meta(meta))
            .map_err(|e| wit_error(e, None)))
    }

    fn range_constraints(
        &mut self,
        _: Resource<GraphRef>,
    ) -> wasmtime::Result<Vec<w::RangeConstraint>> {
        const F: &str = "graph.range-constraints";
        self.budget.check_deadline(F)?;
        let ranges = self.state.graph.range_constraints();
        let size = 8 + ranges.keys().map(|symbol| symbol.len() + 32).fold(0, usize::saturating_add);
        self.budget.charge_read(F, size)?;
        Ok(ranges
            .iter()
            .map(|(symbol, r)| w::RangeConstraint {
                symbol: symbol.clone(),
                min: r.min,
                max: r.max,
            })
            .collect())
    }

    fn set_range_constraint(&mut self, _: Resource<GraphRef>, c: w::RangeConstraint) -> Answer<()> {
        const F: &str = "graph.set-range-constraint";
        self.budget.charge_write(F, c.approx_size())?;
        if let Err(e) = self.writable(None) {
            return Ok(Err(e));
        }
        self.budget.check_name(F, "a symbol", &c.symbol)?;
        // The symbol is kept twice: in the constraints and in the journal.
        self.budget.charge_host(
            F,
            &"the symbol's name",
            Some(2 * (c.symbol.len() + size_of::<String>()) + 64),
        )?;
        let range = RangeConstraint { min: c.min, max: c.max };
        Ok(self.state.graph.set_range_constraint(&c.symbol, range).map_err(|e| wit_error(e, None)))
    }

    fn drop(&mut self, graph: Resource<GraphRef>) -> wasmtime::Result<()> {
        // Lent handles are removed by the host after the call; a guest drop is a no-op.
        let _ = self.table.delete(graph);
        Ok(())
    }
}

// ── Conversions between the contract's types and the IR ──

fn to_wit_dim(d: &Dim) -> t::Dim {
    match d {
        Dim::Fixed(n) => t::Dim::Fixed(*n),
        Dim::Symbolic(s) => t::Dim::Symbolic(s.clone()),
    }
}

fn from_wit_dim(d: t::Dim) -> Dim {
    match d {
        t::Dim::Fixed(n) => Dim::Fixed(n),
        t::Dim::Symbolic(s) => Dim::Symbolic(s),
    }
}

fn to_wit_device(d: &Device) -> t::Device {
    t::Device { kind: d.kind.clone(), index: d.index }
}

fn from_wit_device(d: t::Device) -> Device {
    Device { kind: d.kind, index: d.index }
}

fn to_wit_tensor_meta(m: &TensorMeta) -> t::TensorMeta {
    t::TensorMeta {
        dtype: m.dtype.clone(),
        shape: m.shape.iter().map(to_wit_dim).collect(),
        strides: m.strides.iter().map(to_wit_dim).collect(),
        device: to_wit_device(&m.device),
    }
}

/// Plugins do not see `requires_grad`, `storage_offset` or `layout`: a tensor a
/// plugin describes is a plain strided one.
fn from_wit_tensor_meta(m: t::TensorMeta) -> TensorMeta {
    TensorMeta {
        strides: m.strides.into_iter().map(from_wit_dim).collect(),
        device: from_wit_device(m.device),
        ..TensorMeta::new(&m.dtype, m.shape.into_iter().map(from_wit_dim).collect())
    }
}

pub(super) fn to_wit_value_meta(m: &ValueMeta) -> t::ValueMeta {
    match m {
        ValueMeta::Tensor(t) => t::ValueMeta::Tensor(to_wit_tensor_meta(t)),
        ValueMeta::SymInt(e) => t::ValueMeta::SymInt(e.clone()),
        ValueMeta::SymFloat(e) => t::ValueMeta::SymFloat(e.clone()),
        ValueMeta::SymBool(e) => t::ValueMeta::SymBool(e.clone()),
        ValueMeta::Opaque(k) => t::ValueMeta::Opaque(k.clone()),
    }
}

fn from_wit_value_meta(m: t::ValueMeta) -> ValueMeta {
    match m {
        t::ValueMeta::Tensor(t) => ValueMeta::Tensor(from_wit_tensor_meta(t)),
        t::ValueMeta::SymInt(e) => ValueMeta::SymInt(e),
        t::ValueMeta::SymFloat(e) => ValueMeta::SymFloat(e),
        t::ValueMeta::SymBool(e) => ValueMeta::SymBool(e),
        t::ValueMeta::Opaque(k) => ValueMeta::Opaque(k),
    }
}

fn to_wit_named(a: &NamedArgument) -> w::NamedArgument {
    w::NamedArgument { name: a.name.clone(), value: to_wit_argument(&a.value), keyword: a.keyword }
}

fn from_wit_named(a: w::NamedArgument) -> NamedArgument {
    NamedArgument { name: a.name, value: from_wit_argument(a.value), keyword: a.keyword }
}

fn sym_int_to(s: &Sym<i64>) -> w::SymInt {
    match s {
        Sym::Value(v) => w::SymInt::Value(v.0),
        Sym::Const(c) => w::SymInt::Constant(*c),
    }
}
fn sym_int_from(s: w::SymInt) -> Sym<i64> {
    match s {
        w::SymInt::Value(v) => Sym::Value(ValueId(v)),
        w::SymInt::Constant(c) => Sym::Const(c),
    }
}
fn sym_float_to(s: &Sym<f64>) -> w::SymFloat {
    match s {
        Sym::Value(v) => w::SymFloat::Value(v.0),
        Sym::Const(c) => w::SymFloat::Constant(*c),
    }
}
fn sym_float_from(s: w::SymFloat) -> Sym<f64> {
    match s {
        w::SymFloat::Value(v) => Sym::Value(ValueId(v)),
        w::SymFloat::Constant(c) => Sym::Const(c),
    }
}
fn sym_bool_to(s: &Sym<bool>) -> w::SymBool {
    match s {
        Sym::Value(v) => w::SymBool::Value(v.0),
        Sym::Const(c) => w::SymBool::Constant(*c),
    }
}
fn sym_bool_from(s: w::SymBool) -> Sym<bool> {
    match s {
        w::SymBool::Value(v) => Sym::Value(ValueId(v)),
        w::SymBool::Constant(c) => Sym::Const(c),
    }
}

fn ids(vs: &[ValueId]) -> Vec<u32> {
    vs.iter().map(|v| v.0).collect()
}

pub(super) fn to_wit_argument(a: &Argument) -> w::Argument {
    use w::Argument as W;
    match a {
        Argument::None => W::None,
        Argument::Tensor(v) => W::Tensor(v.0),
        Argument::Tensors(vs) => W::Tensors(ids(vs)),
        Argument::OptionalTensors(vs) => {
            W::OptionalTensors(vs.iter().map(|v| v.map(|v| v.0)).collect())
        }
        Argument::Int(i) => W::Int(*i),
        Argument::Ints(is) => W::Ints(is.clone()),
        Argument::Float(f) => W::Float(*f),
        Argument::Floats(fs) => W::Floats(fs.clone()),
        Argument::Bool(b) => W::Boolean(*b),
        Argument::Bools(bs) => W::Bools(bs.clone()),
        Argument::Str(s) => W::Str(s.clone()),
        Argument::Strs(ss) => W::Strs(ss.clone()),
        Argument::SymInt(s) => W::SymInt(sym_int_to(s)),
        Argument::SymInts(ss) => W::SymInts(ss.iter().map(sym_int_to).collect()),
        Argument::SymFloat(s) => W::SymFloat(sym_float_to(s)),
        Argument::SymFloats(ss) => W::SymFloats(ss.iter().map(sym_float_to).collect()),
        Argument::SymBool(s) => W::SymBool(sym_bool_to(s)),
        Argument::SymBools(ss) => W::SymBools(ss.iter().map(sym_bool_to).collect()),
        Argument::Dtype(d) => W::Dtype(d.clone()),
        Argument::Device(d) => W::Device(to_wit_device(d)),
        Argument::Layout(l) => W::Layout(l.clone()),
        Argument::MemoryFormat(m) => W::MemoryFormat(m.clone()),
        Argument::Subgraph(g) => W::Subgraph(*g),
        Argument::Operator(o) => W::Operator(o.clone()),
        Argument::Opaque(o) => W::Opaque(o.clone()),
    }
}

pub(super) fn from_wit_argument(a: w::Argument) -> Argument {
    use w::Argument as W;
    let vids = |vs: Vec<u32>| vs.into_iter().map(ValueId).collect();
    match a {
        W::None => Argument::None,
        W::Tensor(v) => Argument::Tensor(ValueId(v)),
        W::Tensors(vs) => Argument::Tensors(vids(vs)),
        W::OptionalTensors(vs) => {
            Argument::OptionalTensors(vs.into_iter().map(|v| v.map(ValueId)).collect())
        }
        W::Int(i) => Argument::Int(i),
        W::Ints(is) => Argument::Ints(is),
        W::Float(f) => Argument::Float(f),
        W::Floats(fs) => Argument::Floats(fs),
        W::Boolean(b) => Argument::Bool(b),
        W::Bools(bs) => Argument::Bools(bs),
        W::Str(s) => Argument::Str(s),
        W::Strs(ss) => Argument::Strs(ss),
        W::SymInt(s) => Argument::SymInt(sym_int_from(s)),
        W::SymInts(ss) => Argument::SymInts(ss.into_iter().map(sym_int_from).collect()),
        W::SymFloat(s) => Argument::SymFloat(sym_float_from(s)),
        W::SymFloats(ss) => Argument::SymFloats(ss.into_iter().map(sym_float_from).collect()),
        W::SymBool(s) => Argument::SymBool(sym_bool_from(s)),
        W::SymBools(ss) => Argument::SymBools(ss.into_iter().map(sym_bool_from).collect()),
        W::Dtype(d) => Argument::Dtype(d),
        W::Device(d) => Argument::Device(from_wit_device(d)),
        W::Layout(l) => Argument::Layout(l),
        W::MemoryFormat(m) => Argument::MemoryFormat(m),
        W::Subgraph(g) => Argument::Subgraph(g),
        W::Operator(o) => Argument::Operator(o),
        W::Opaque(o) => Argument::Opaque(o),
    }
}

fn from_wit_output_decl(d: w::OutputDecl) -> OutputDecl {
    match d {
        w::OutputDecl::Tensor(m) => OutputDecl::Tensor(from_wit_tensor_meta(m)),
        w::OutputDecl::Tensors(ms) => {
            OutputDecl::Tensors(ms.into_iter().map(from_wit_tensor_meta).collect())
        }
        w::OutputDecl::SymInt(e) => OutputDecl::SymInt(e),
        w::OutputDecl::SymBool(e) => OutputDecl::SymBool(e),
        w::OutputDecl::None => OutputDecl::None,
    }
}

/// Approximate bytes a value occupies in guest memory: what an answer costs
/// the read budget, and what a guest's argument costs the write budget.
pub(super) trait ApproxSize {
    fn approx_size(&self) -> usize;
}

impl ApproxSize for String {
    fn approx_size(&self) -> usize {
        self.len() + 8
    }
}
impl ApproxSize for u32 {
    fn approx_size(&self) -> usize {
        4
    }
}
impl ApproxSize for bool {
    fn approx_size(&self) -> usize {
        1
    }
}
impl<T: ApproxSize> ApproxSize for Option<T> {
    fn approx_size(&self) -> usize {
        4 + self.as_ref().map_or(0, ApproxSize::approx_size)
    }
}
impl<T: ApproxSize> ApproxSize for Vec<T> {
    fn approx_size(&self) -> usize {
        8 + self.iter().map(ApproxSize::approx_size).sum::<usize>()
    }
}
impl ApproxSize for w::Argument {
    fn approx_size(&self) -> usize {
        use w::Argument as W;
        16 + match self {
            W::Tensors(v) => v.len() * 4,
            W::OptionalTensors(v) => v.len() * 8,
            W::Ints(v) => v.len() * 8,
            W::Floats(v) => v.len() * 8,
            W::Bools(v) => v.len(),
            W::Str(s)
            | W::Dtype(s)
            | W::Layout(s)
            | W::MemoryFormat(s)
            | W::Operator(s)
            | W::Opaque(s) => s.len(),
            W::Strs(v) => v.iter().map(|s| s.len() + 8).sum(),
            W::SymInts(v) => v.len() * 16,
            W::SymFloats(v) => v.len() * 16,
            W::SymBools(v) => v.len() * 16,
            W::Device(d) => d.kind.len() + 16,
            _ => 0,
        }
    }
}
impl ApproxSize for w::NamedArgument {
    fn approx_size(&self) -> usize {
        self.name.len() + 8 + self.value.approx_size()
    }
}
impl ApproxSize for w::RangeConstraint {
    fn approx_size(&self) -> usize {
        self.symbol.len() + 32
    }
}
impl ApproxSize for t::TensorMeta {
    fn approx_size(&self) -> usize {
        let dims = |ds: &[t::Dim]| {
            ds.iter()
                .map(|d| 16 + if let t::Dim::Symbolic(s) = d { s.len() } else { 0 })
                .sum::<usize>()
        };
        self.dtype.len() + self.device.kind.len() + dims(&self.shape) + dims(&self.strides) + 48
    }
}
impl ApproxSize for w::OutputDecl {
    fn approx_size(&self) -> usize {
        16 + match self {
            w::OutputDecl::Tensor(m) => m.approx_size(),
            w::OutputDecl::Tensors(ms) => ms.approx_size(),
            w::OutputDecl::SymInt(s) | w::OutputDecl::SymBool(s) => s.len(),
            w::OutputDecl::None => 0,
        }
    }
}
impl ApproxSize for t::ValueMeta {
    fn approx_size(&self) -> usize {
        match self {
            t::ValueMeta::Tensor(m) => m.approx_size(),
            t::ValueMeta::SymInt(s)
            | t::ValueMeta::SymFloat(s)
            | t::ValueMeta::SymBool(s)
            | t::ValueMeta::Opaque(s) => s.len() + 16,
        }
    }
}

/// The guest-side size of IR data, the same measure as `ApproxSize` of its
/// contract form: what an answer will cost the read budget, known before the
/// answer is built.
fn ir_argument_size(a: &Argument) -> usize {
    use Argument as A;
    16 + match a {
        A::Tensors(v) => v.len() * 4,
        A::OptionalTensors(v) => v.len() * 8,
        A::Ints(v) => v.len() * 8,
        A::Floats(v) => v.len() * 8,
        A::Bools(v) => v.len(),
        A::Str(s)
        | A::Dtype(s)
        | A::Layout(s)
        | A::MemoryFormat(s)
        | A::Operator(s)
        | A::Opaque(s) => s.len(),
        A::Strs(v) => v.iter().map(|s| s.len() + 8).sum(),
        A::SymInts(v) => v.len() * 16,
        A::SymFloats(v) => v.len() * 16,
        A::SymBools(v) => v.len() * 16,
        A::Device(d) => d.kind.len() + 16,
        _ => 0,
    }
}

fn ir_named_size(a: &NamedArgument) -> usize {
    a.name.len() + 8 + ir_argument_size(&a.value)
}

fn ir_tensor_meta_size(m: &TensorMeta) -> usize {
    let dims = |ds: &[Dim]| {
        ds.iter().map(|d| 16 + if let Dim::Symbolic(s) = d { s.len() } else { 0 }).sum::<usize>()
    };
    m.dtype.len() + m.device.kind.len() + dims(&m.shape) + dims(&m.strides) + 48
}

fn ir_value_meta_size(m: &ValueMeta) -> usize {
    match m {
        ValueMeta::Tensor(t) => ir_tensor_meta_size(t),
        ValueMeta::SymInt(s)
        | ValueMeta::SymFloat(s)
        | ValueMeta::SymBool(s)
        | ValueMeta::Opaque(s) => s.len() + 16,
    }
}
