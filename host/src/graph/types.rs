//! The data of the IR: nodes, values, arguments and their metadata.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(pub u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ValueId(pub u32);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// Qualified op name without `torch.ops.`: `aten.sort.stable`, `_operator.le`.
    pub target: String,
    pub inputs: Vec<NamedArgument>,
    /// As in the torch.export schema: each output is a tensor, a tensor list, a sym-int, ...
    pub outputs: Vec<Argument>,
    pub subgraph: u32,
    /// The node's name in the `.pt2` (FX node name); None for nodes hfx added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// FX node metadata as torch.export keeps it (`stack_trace`, `nn_module_stack`, `torch_fn`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub meta: BTreeMap<String, String>,
}

impl Node {
    pub fn output_values(&self) -> impl Iterator<Item = ValueId> + '_ {
        self.outputs.iter().flat_map(Argument::values)
    }

    pub fn input(&self, name: &str) -> Option<&Argument> {
        self.inputs.iter().find(|a| a.name == name).map(|a| &a.value)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Value {
    pub name: String,
    pub meta: ValueMeta,
    /// None for a graph input.
    pub producer: Option<NodeId>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueMeta {
    Tensor(TensorMeta),
    SymInt(String),
    SymFloat(String),
    SymBool(String),
    Opaque(String),
}

impl ValueMeta {
    /// The kind name, for error messages and kind checks.
    pub fn kind(&self) -> &'static str {
        match self {
            ValueMeta::Tensor(_) => "tensor",
            ValueMeta::SymInt(_) => "sym-int",
            ValueMeta::SymFloat(_) => "sym-float",
            ValueMeta::SymBool(_) => "sym-bool",
            ValueMeta::Opaque(_) => "opaque",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorMeta {
    pub dtype: String,
    pub shape: Vec<Dim>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub strides: Vec<Dim>,
    #[serde(default)]
    pub device: Device,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requires_grad: bool,
    #[serde(default = "zero", skip_serializing_if = "is_zero")]
    pub storage_offset: Dim,
    /// "strided", "sparse_coo", ...
    #[serde(default = "strided", skip_serializing_if = "is_strided")]
    pub layout: String,
}

impl TensorMeta {
    /// A contiguous, strided CPU tensor.
    pub fn new(dtype: &str, shape: Vec<Dim>) -> Self {
        TensorMeta {
            dtype: dtype.into(),
            shape,
            strides: vec![],
            device: Device::default(),
            requires_grad: false,
            storage_offset: zero(),
            layout: strided(),
        }
    }
}

fn zero() -> Dim {
    Dim::Fixed(0)
}
fn is_zero(d: &Dim) -> bool {
    *d == Dim::Fixed(0)
}
fn strided() -> String {
    "strided".into()
}
fn is_strided(s: &String) -> bool {
    s == "strided"
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Dim {
    Fixed(i64),
    Symbolic(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<i64>,
}

impl Default for Device {
    fn default() -> Self {
        Device { kind: "cpu".into(), index: None }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedArgument {
    pub name: String,
    pub value: Argument,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keyword: bool,
}

impl NamedArgument {
    pub fn positional(name: &str, value: Argument) -> Self {
        NamedArgument { name: name.into(), value, keyword: false }
    }
    pub fn keyword(name: &str, value: Argument) -> Self {
        NamedArgument { name: name.into(), value, keyword: true }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sym<T> {
    Value(ValueId),
    Const(T),
}

impl<T> Sym<T> {
    fn value(&self) -> Option<ValueId> {
        match self {
            Sym::Value(v) => Some(*v),
            Sym::Const(_) => None,
        }
    }
}

/// One case per kind of the torch.export schema's `Argument`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Argument {
    None,
    Tensor(ValueId),
    Tensors(Vec<ValueId>),
    OptionalTensors(Vec<Option<ValueId>>),
    Int(i64),
    Ints(Vec<i64>),
    Float(f64),
    Floats(Vec<f64>),
    Bool(bool),
    Bools(Vec<bool>),
    Str(String),
    Strs(Vec<String>),
    SymInt(Sym<i64>),
    SymInts(Vec<Sym<i64>>),
    SymFloat(Sym<f64>),
    SymFloats(Vec<Sym<f64>>),
    SymBool(Sym<bool>),
    SymBools(Vec<Sym<bool>>),
    Dtype(String),
    Device(Device),
    Layout(String),
    MemoryFormat(String),
    Subgraph(u32),
    Operator(String),
    Opaque(String),
}

impl Argument {
    /// Every value the argument reads, in order (a value read twice appears twice).
    pub fn values(&self) -> Box<dyn Iterator<Item = ValueId> + '_> {
        use Argument::*;
        match self {
            Tensor(v) => Box::new(std::iter::once(*v)),
            Tensors(vs) => Box::new(vs.iter().copied()),
            OptionalTensors(vs) => Box::new(vs.iter().flatten().copied()),
            SymInt(s) => Box::new(s.value().into_iter()),
            SymInts(ss) => Box::new(ss.iter().filter_map(Sym::value)),
            SymFloat(s) => Box::new(s.value().into_iter()),
            SymFloats(ss) => Box::new(ss.iter().filter_map(Sym::value)),
            SymBool(s) => Box::new(s.value().into_iter()),
            SymBools(ss) => Box::new(ss.iter().filter_map(Sym::value)),
            _ => Box::new(std::iter::empty()),
        }
    }
}

/// What a new node produces; the graph creates and names the values.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputDecl {
    Tensor(TensorMeta),
    Tensors(Vec<TensorMeta>),
    SymInt(String),
    SymBool(String),
    None,
}

/// A graph's inputs and outputs; its nodes are in `Graph::order`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Subgraph {
    /// The sub-graph's name in the `.pt2` (`true_graph_0`); empty for the root.
    pub name: String,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<Argument>,
    /// The `.pt2` flag for a graph returning one bare tensor.
    pub single_tensor_return: bool,
    pub(super) ends: super::order::Ends,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeConstraint {
    pub min: i64,
    /// None is unbounded (torch's `int_oo`).
    pub max: Option<i64>,
}
