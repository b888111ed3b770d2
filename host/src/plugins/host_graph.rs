//! The `graph` resource of the contract, implemented over the IR.
//!
//! Every method answers misuse (a stale handle, a value read before it is
//! defined, erasing a node still read) with the contract's typed `error`; only
//! budget overruns trap. Reads are charged against the call's read budget,
//! nodes added against its node budget, strings and lists the guest hands in
//! against its write budget.

use wasmtime::component::{Resource, ResourceTable};

use super::bindings::wit_graph as w;
use super::bindings::wit_types as t;
use super::bindings::GraphRef;
use super::sandbox::CallBudget;
use super::bindings::NoState;
use crate::graph::{
    Argument, Device, Dim, Graph, GraphError, NamedArgument, NodeId, OutputDecl, RangeConstraint, Replacement, Sym,
    TensorMeta, ValueId, ValueMeta,
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

impl GraphHost<'_> {
    fn writable(&self, node: Option<u32>) -> Result<(), t::Error> {
        if self.state.read_only {
            return Err(wit_error(GraphError::ReadOnly, node));
        }
        Ok(())
    }

    /// Charges an answer by its approximate size on the guest side.
    fn answer<T: ApproxSize>(&mut self, result: Result<T, GraphError>, node: Option<u32>) -> Answer<T> {
        match result {
            Ok(value) => {
                self.budget.charge_read(value.approx_size())?;
                Ok(Ok(value))
            }
            Err(e) => Ok(Err(wit_error(e, node))),
        }
    }
}

impl w::HostGraph for GraphHost<'_> {
    fn nodes(&mut self, _: Resource<GraphRef>) -> wasmtime::Result<Vec<u32>> {
        let nodes: Vec<u32> = self.state.graph.nodes().map(|n| n.0).collect();
        self.budget.charge_read(nodes.len() * 4)?;
        Ok(nodes)
    }

    fn nodes_by_target(&mut self, _: Resource<GraphRef>, target: String) -> wasmtime::Result<Vec<u32>> {
        self.budget.charge_write(target.approx_size())?;
        let nodes: Vec<u32> = self.state.graph.nodes_by_target(&target).map(|n| n.0).collect();
        self.budget.charge_read(nodes.len() * 4)?;
        Ok(nodes)
    }

    fn target(&mut self, _: Resource<GraphRef>, node: u32) -> Answer<String> {
        let r = self.state.graph.node(NodeId(node)).map(|n| n.target.clone());
        self.answer(r, Some(node))
    }

    fn name(&mut self, _: Resource<GraphRef>, node: u32) -> Answer<String> {
        let r = self.state.graph.node(NodeId(node)).map(|_| self.state.graph.node_name(NodeId(node)));
        self.answer(r, Some(node))
    }

    fn subgraph_of(&mut self, _: Resource<GraphRef>, node: u32) -> Answer<u32> {
        let r = self.state.graph.node(NodeId(node)).map(|n| n.subgraph);
        self.answer(r, Some(node))
    }

    fn inputs(&mut self, _: Resource<GraphRef>, node: u32) -> Answer<Vec<w::NamedArgument>> {
        let r = self.state.graph.node(NodeId(node)).map(|n| n.inputs.iter().map(to_wit_named).collect());
        self.answer(r, Some(node))
    }

    fn input(&mut self, _: Resource<GraphRef>, node: u32, name: String) -> Answer<Option<w::Argument>> {
        self.budget.charge_write(name.approx_size())?;
        let r = self.state.graph.node(NodeId(node)).map(|n| n.input(&name).map(to_wit_argument));
        self.answer(r, Some(node))
    }

    fn outputs(&mut self, _: Resource<GraphRef>, node: u32) -> Answer<Vec<w::Argument>> {
        let r = self.state.graph.node(NodeId(node)).map(|n| n.outputs.iter().map(to_wit_argument).collect());
        self.answer(r, Some(node))
    }

    fn users(&mut self, _: Resource<GraphRef>, node: u32) -> Answer<Vec<u32>> {
        let r = self.state.graph.node_users(NodeId(node)).map(|u| u.into_iter().map(|n| n.0).collect());
        self.answer(r, Some(node))
    }

    fn value_users(&mut self, _: Resource<GraphRef>, value: u32) -> Answer<Vec<u32>> {
        let r = self.state.graph.value_users(ValueId(value)).map(|users| {
            let nodes = users.into_iter().filter_map(|u| match u {
                crate::graph::User::Node(n) => Some(n),
                crate::graph::User::Output(_) => None,
            });
            self.state.graph.in_order(nodes).into_iter().map(|n| n.0).collect()
        });
        self.answer(r, None)
    }

    fn is_graph_output(&mut self, _: Resource<GraphRef>, value: u32) -> Answer<bool> {
        let r = self.state.graph.value(ValueId(value)).map(|_| self.state.graph.is_graph_output(ValueId(value)));
        self.answer(r, None)
    }

    fn producer(&mut self, _: Resource<GraphRef>, value: u32) -> Answer<Option<u32>> {
        let r = self.state.graph.value(ValueId(value)).map(|v| v.producer.map(|n| n.0));
        self.answer(r, None)
    }

    fn value_name(&mut self, _: Resource<GraphRef>, value: u32) -> Answer<String> {
        let r = self.state.graph.value(ValueId(value)).map(|v| v.name.clone());
        self.answer(r, None)
    }

    fn value_meta(&mut self, _: Resource<GraphRef>, value: u32) -> Answer<t::ValueMeta> {
        let r = self.state.graph.value(ValueId(value)).map(|v| to_wit_value_meta(&v.meta));
        self.answer(r, None)
    }

    fn graph_inputs(&mut self, _: Resource<GraphRef>) -> wasmtime::Result<Vec<u32>> {
        let inputs: Vec<u32> = self.state.graph.subgraph(0).map(|s| s.inputs.iter().map(|v| v.0).collect()).unwrap_or_default();
        self.budget.charge_read(inputs.len() * 4)?;
        Ok(inputs)
    }

    fn graph_outputs(&mut self, _: Resource<GraphRef>) -> wasmtime::Result<Vec<w::Argument>> {
        let outputs: Vec<w::Argument> =
            self.state.graph.subgraph(0).map(|s| s.outputs.iter().map(to_wit_argument).collect()).unwrap_or_default();
        self.budget.charge_read(outputs.approx_size())?;
        Ok(outputs)
    }

    fn insert_call(
        &mut self,
        _: Resource<GraphRef>,
        before: u32,
        target: String,
        inputs: Vec<w::NamedArgument>,
        outputs: Vec<w::OutputDecl>,
    ) -> Answer<u32> {
        self.budget.charge_write(target.approx_size() + inputs.approx_size() + outputs.approx_size())?;
        if let Err(e) = self.writable(Some(before)) {
            return Ok(Err(e));
        }
        self.budget.charge_node()?;
        let inputs = inputs.into_iter().map(from_wit_named).collect();
        let outputs = outputs.into_iter().map(from_wit_output_decl).collect();
        let r = self.state.graph.insert_before(NodeId(before), &target, inputs, outputs).map(|n| n.0);
        Ok(r.map_err(|e| wit_error(e, Some(before))))
    }

    fn set_inputs(&mut self, _: Resource<GraphRef>, node: u32, inputs: Vec<w::NamedArgument>) -> Answer<()> {
        self.budget.charge_write(inputs.approx_size())?;
        if let Err(e) = self.writable(Some(node)) {
            return Ok(Err(e));
        }
        let inputs = inputs.into_iter().map(from_wit_named).collect();
        Ok(self.state.graph.set_inputs(NodeId(node), inputs).map_err(|e| wit_error(e, Some(node))))
    }

    fn set_input(&mut self, _: Resource<GraphRef>, node: u32, input: w::NamedArgument) -> Answer<()> {
        self.budget.charge_write(input.approx_size())?;
        if let Err(e) = self.writable(Some(node)) {
            return Ok(Err(e));
        }
        Ok(self.state.graph.set_input(NodeId(node), from_wit_named(input)).map_err(|e| wit_error(e, Some(node))))
    }

    fn replace_uses(&mut self, _: Resource<GraphRef>, value: u32, by: w::Replacement) -> Answer<()> {
        let node = self.state.graph.value(ValueId(value)).ok().and_then(|v| v.producer).map(|n| n.0);
        if let Err(e) = self.writable(node) {
            return Ok(Err(e));
        }
        let by = match by {
            w::Replacement::Value(v) => Replacement::Value(ValueId(v)),
            w::Replacement::Int(i) => Replacement::Int(i),
            w::Replacement::Float(f) => Replacement::Float(f),
            w::Replacement::Boolean(b) => Replacement::Bool(b),
        };
        Ok(self.state.graph.replace_uses(ValueId(value), by).map_err(|e| wit_error(e, node)))
    }

    fn erase(&mut self, _: Resource<GraphRef>, node: u32) -> Answer<()> {
        if let Err(e) = self.writable(Some(node)) {
            return Ok(Err(e));
        }
        Ok(self.state.graph.erase(NodeId(node)).map_err(|e| wit_error(e, Some(node))))
    }

    fn set_value_meta(&mut self, _: Resource<GraphRef>, value: u32, meta: t::ValueMeta) -> Answer<()> {
        self.budget.charge_write(meta.approx_size())?;
        if let Err(e) = self.writable(None) {
            return Ok(Err(e));
        }
        Ok(self.state.graph.set_value_meta(ValueId(value), from_wit_value_meta(meta)).map_err(|e| wit_error(e, None)))
    }

    fn range_constraints(&mut self, _: Resource<GraphRef>) -> wasmtime::Result<Vec<w::RangeConstraint>> {
        let ranges: Vec<w::RangeConstraint> = self
            .state
            .graph
            .range_constraints()
            .iter()
            .map(|(symbol, r)| w::RangeConstraint { symbol: symbol.clone(), min: r.min, max: r.max })
            .collect();
        self.budget.charge_read(ranges.approx_size())?;
        Ok(ranges)
    }

    fn set_range_constraint(&mut self, _: Resource<GraphRef>, c: w::RangeConstraint) -> Answer<()> {
        self.budget.charge_write(c.approx_size())?;
        if let Err(e) = self.writable(None) {
            return Ok(Err(e));
        }
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
        Argument::OptionalTensors(vs) => W::OptionalTensors(vs.iter().map(|v| v.map(|v| v.0)).collect()),
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
        W::OptionalTensors(vs) => Argument::OptionalTensors(vs.into_iter().map(|v| v.map(ValueId)).collect()),
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
        w::OutputDecl::Tensors(ms) => OutputDecl::Tensors(ms.into_iter().map(from_wit_tensor_meta).collect()),
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
            W::Str(s) | W::Dtype(s) | W::Layout(s) | W::MemoryFormat(s) | W::Operator(s) | W::Opaque(s) => s.len(),
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
        let dims = |ds: &[t::Dim]| ds.iter().map(|d| 16 + if let t::Dim::Symbolic(s) = d { s.len() } else { 0 }).sum::<usize>();
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
            t::ValueMeta::SymInt(s) | t::ValueMeta::SymFloat(s) | t::ValueMeta::SymBool(s) | t::ValueMeta::Opaque(s) => {
                s.len() + 16
            }
        }
    }
}
