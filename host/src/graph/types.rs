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

/// Bytes per element of a torch dtype as stored; None for a dtype hfx does not know.
pub fn element_size(dtype: &str) -> Option<u64> {
    hfx_dtype::DType::from_name(dtype).map(|d| d.size() as u64)
}

/// Elements of a tensor of `sizes`: None when a size is negative or the count overflows.
pub fn element_count(sizes: &[i64]) -> Option<u64> {
    sizes.iter().try_fold(1u64, |n, &s| n.checked_mul(u64::try_from(s).ok()?))
}

/// Bytes of storage a strided tensor reaches, `(offset + Σ (size − 1) × stride
/// + 1) × element` (0 when it has no elements), with every step checked:
/// negative sizes, strides or offsets and overflow are errors, not wraps.
/// Empty `strides` means contiguous.
pub fn storage_bytes(
    sizes: &[i64],
    strides: &[i64],
    offset: i64,
    element: u64,
) -> Result<u64, String> {
    let too_large = || {
        format!(
            "sizes {sizes:?}, strides {strides:?}, storage offset {offset} reach past 2^64 bytes"
        )
    };
    if let Some(s) = sizes.iter().find(|&&s| s < 0) {
        return Err(format!("negative size {s} in {sizes:?}"));
    }
    if let Some(s) = strides.iter().find(|&&s| s < 0) {
        return Err(format!("negative stride {s} in {strides:?}"));
    }
    let offset = u64::try_from(offset).map_err(|_| format!("negative storage offset {offset}"))?;
    if !strides.is_empty() && strides.len() != sizes.len() {
        return Err(format!("{} strides for {} sizes", strides.len(), sizes.len()));
    }
    if sizes.contains(&0) {
        return Ok(0);
    }
    let last = if strides.is_empty() {
        element_count(sizes).ok_or_else(too_large)? - 1
    } else {
        sizes
            .iter()
            .zip(strides)
            .try_fold(0u64, |sum, (&size, &stride)| {
                (size as u64 - 1).checked_mul(stride as u64)?.checked_add(sum)
            })
            .ok_or_else(too_large)?
    };
    offset
        .checked_add(last)
        .and_then(|n| n.checked_add(1))
        .and_then(|n| n.checked_mul(element))
        .ok_or_else(too_large)
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

impl<T: Clone> Sym<T> {
    fn map_value(&self, mut f: impl FnMut(ValueId) -> ValueId) -> Sym<T> {
        match self {
            Sym::Value(v) => Sym::Value(f(*v)),
            Sym::Const(c) => Sym::Const(c.clone()),
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
    Float(#[serde(with = "json_float")] f64),
    Floats(#[serde(with = "json_floats")] Vec<f64>),
    Bool(bool),
    Bools(Vec<bool>),
    Str(String),
    Strs(Vec<String>),
    SymInt(Sym<i64>),
    SymInts(Vec<Sym<i64>>),
    SymFloat(#[serde(with = "json_sym_float")] Sym<f64>),
    SymFloats(#[serde(with = "json_sym_floats")] Vec<Sym<f64>>),
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

    /// The argument with every value it reads replaced by `f(value)`.
    pub fn map_values(&self, mut f: impl FnMut(ValueId) -> ValueId) -> Argument {
        use Argument::*;
        match self {
            Tensor(v) => Tensor(f(*v)),
            Tensors(vs) => Tensors(vs.iter().map(|v| f(*v)).collect()),
            OptionalTensors(vs) => OptionalTensors(vs.iter().map(|v| v.map(&mut f)).collect()),
            SymInt(s) => SymInt(s.map_value(f)),
            SymInts(ss) => SymInts(ss.iter().map(|s| s.map_value(&mut f)).collect()),
            SymFloat(s) => SymFloat(s.map_value(f)),
            SymFloats(ss) => SymFloats(ss.iter().map(|s| s.map_value(&mut f)).collect()),
            SymBool(s) => SymBool(s.map_value(f)),
            SymBools(ss) => SymBools(ss.iter().map(|s| s.map_value(&mut f)).collect()),
            other => other.clone(),
        }
    }
}

/// Floats in IR JSON: non-finite ones as the strings `"NaN"`, `"Infinity"`,
/// `"-Infinity"` (JSON has no such numbers; serde_json would write `null` and
/// refuse it on reading), as the `.pt2` schema spells them.
mod json_float {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::graph::pt2::schema::F64;

    pub fn serialize<S: Serializer>(value: &f64, s: S) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(&F64(*value), s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        F64::deserialize(d).map(|f| f.0)
    }
}

mod json_floats {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::graph::pt2::schema::F64;

    pub fn serialize<S: Serializer>(values: &[f64], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(values.iter().map(|&v| F64(v)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        Vec::<F64>::deserialize(d).map(|v| v.into_iter().map(|f| f.0).collect())
    }
}

fn to_json_sym(value: &Sym<f64>) -> Sym<crate::graph::pt2::schema::F64> {
    match *value {
        Sym::Value(v) => Sym::Value(v),
        Sym::Const(c) => Sym::Const(crate::graph::pt2::schema::F64(c)),
    }
}

fn from_json_sym(value: Sym<crate::graph::pt2::schema::F64>) -> Sym<f64> {
    match value {
        Sym::Value(v) => Sym::Value(v),
        Sym::Const(c) => Sym::Const(c.0),
    }
}

mod json_sym_float {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Sym;
    use crate::graph::pt2::schema::F64;

    pub fn serialize<S: Serializer>(value: &Sym<f64>, s: S) -> Result<S::Ok, S::Error> {
        super::to_json_sym(value).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Sym<f64>, D::Error> {
        Sym::<F64>::deserialize(d).map(super::from_json_sym)
    }
}

mod json_sym_floats {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Sym;
    use crate::graph::pt2::schema::F64;

    pub fn serialize<S: Serializer>(values: &[Sym<f64>], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(values.iter().map(super::to_json_sym))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Sym<f64>>, D::Error> {
        Vec::<Sym<F64>>::deserialize(d).map(|v| v.into_iter().map(super::from_json_sym).collect())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_bytes_are_checked_not_wrapped() {
        assert_eq!(storage_bytes(&[2, 3], &[3, 1], 0, 4), Ok(24));
        assert_eq!(storage_bytes(&[2, 3], &[], 5, 2), Ok(22));
        assert_eq!(storage_bytes(&[3], &[0], 0, 4), Ok(4), "expanded");
        assert_eq!(storage_bytes(&[0, 1 << 62], &[1 << 62, 1], 0, 4), Ok(0));
        assert!(storage_bytes(&[1 << 62, 4], &[], 0, 4).unwrap_err().contains("past 2^64"));
        assert!(storage_bytes(&[1 << 62], &[1], 0, 8).unwrap_err().contains("past 2^64"));
        assert!(storage_bytes(&[2], &[1 << 62], 0, 8).unwrap_err().contains("past 2^64"));
        assert!(storage_bytes(&[4], &[1], 1 << 62, 8).unwrap_err().contains("past 2^64"));
        assert!(storage_bytes(&[4], &[1], i64::MAX, 2).unwrap_err().contains("past 2^64"));
        assert!(storage_bytes(&[-1], &[1], 0, 4).unwrap_err().contains("negative size"));
        assert!(storage_bytes(&[2], &[-1], 0, 4).unwrap_err().contains("negative stride"));
        assert!(storage_bytes(&[2], &[1], -1, 4).unwrap_err().contains("negative storage offset"));
        assert!(storage_bytes(&[2, 2], &[1], 0, 4).unwrap_err().contains("1 strides for 2 sizes"));
        assert_eq!(element_count(&[1 << 32, 1 << 32]), None);
        assert_eq!(element_count(&[3, -1]), None);
    }

    #[test]
    fn non_finite_floats_survive_ir_json() {
        let args = vec![
            Argument::Float(f64::NEG_INFINITY),
            Argument::Floats(vec![1.5, f64::INFINITY, f64::NAN]),
            Argument::SymFloat(Sym::Const(f64::NAN)),
            Argument::SymFloats(vec![Sym::Const(f64::INFINITY), Sym::Value(ValueId(3))]),
            Argument::Float(-0.25),
        ];
        let json = serde_json::to_string(&args).unwrap();
        assert_eq!(
            json,
            r#"[{"float":"-Infinity"},{"floats":[1.5,"Infinity","NaN"]},{"sym_float":{"const":"NaN"}},{"sym_floats":[{"const":"Infinity"},{"value":3}]},{"float":-0.25}]"#
        );
        let back: Vec<Argument> = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
        assert!(matches!(back[0], Argument::Float(f) if f == f64::NEG_INFINITY));
    }
}
