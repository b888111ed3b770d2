//! The serialized `ExportedProgram` of a `.pt2` (`models/*.json`), typed after
//! `torch/_export/serde/schema.py` (schema 8.x). Unions are objects with one
//! `as_*` key; unknown fields are refused so a schema change is an error, not
//! silent loss. Non-finite floats are the strings "Infinity", "-Infinity", "NaN".

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Schema major version this reader understands, and the newest minor seen.
pub const SUPPORTED_MAJOR: i64 = 8;
pub const NEWEST_MINOR: i64 = 20;

/// A float that may be non-finite, spelled as torch spells it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct F64(pub f64);

impl Serialize for F64 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            f if f.is_nan() => s.serialize_str("NaN"),
            f if f == f64::INFINITY => s.serialize_str("Infinity"),
            f if f == f64::NEG_INFINITY => s.serialize_str("-Infinity"),
            f => s.serialize_f64(f),
        }
    }
}

impl<'de> Deserialize<'de> for F64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(f) => Ok(F64(f)),
            Raw::Text(t) => match t.as_str() {
                "NaN" => Ok(F64(f64::NAN)),
                "Infinity" => Ok(F64(f64::INFINITY)),
                "-Infinity" => Ok(F64(f64::NEG_INFINITY)),
                other => Err(serde::de::Error::custom(format!("`{other}` is not a float"))),
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportedProgram {
    pub graph_module: GraphModule,
    pub opset_version: BTreeMap<String, i64>,
    pub range_constraints: BTreeMap<String, RangeConstraint>,
    pub schema_version: SchemaVersion,
    #[serde(default)]
    pub verifiers: Vec<String>,
    #[serde(default = "default_torch_version")]
    pub torch_version: String,
    #[serde(default)]
    pub guards_code: Vec<String>,
}

fn default_torch_version() -> String {
    "<=2.4".into()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaVersion {
    pub major: i64,
    pub minor: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RangeConstraint {
    pub min_val: Option<i64>,
    pub max_val: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphModule {
    pub graph: Graph,
    pub signature: GraphSignature,
    pub module_call_graph: Vec<ModuleCallEntry>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(default)]
    pub treespec_namedtuple_fields: BTreeMap<String, NamedTupleDef>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedTupleDef {
    pub field_names: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Graph {
    pub inputs: Vec<Argument>,
    pub outputs: Vec<Argument>,
    pub nodes: Vec<Node>,
    pub tensor_values: BTreeMap<String, TensorMeta>,
    pub sym_int_values: BTreeMap<String, SymInt>,
    pub sym_bool_values: BTreeMap<String, SymBool>,
    #[serde(default)]
    pub is_single_tensor_return: bool,
    #[serde(default)]
    pub custom_obj_values: BTreeMap<String, CustomObjArgument>,
    #[serde(default)]
    pub sym_float_values: BTreeMap<String, SymFloat>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub target: String,
    pub inputs: Vec<NamedArgument>,
    pub outputs: Vec<Argument>,
    pub metadata: BTreeMap<String, String>,
    #[serde(default)]
    pub is_hop_single_tensor_return: Option<bool>,
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedArgument {
    pub name: String,
    pub arg: Argument,
    /// 1 positional, 2 keyword (0 or absent: unknown).
    #[serde(default)]
    pub kind: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Argument {
    AsNone(bool),
    AsTensor(TensorArgument),
    AsTensors(Vec<TensorArgument>),
    AsInt(i64),
    AsInts(Vec<i64>),
    AsFloat(F64),
    AsFloats(Vec<F64>),
    AsString(String),
    AsStrings(Vec<String>),
    AsSymInt(SymIntArgument),
    AsSymInts(Vec<SymIntArgument>),
    AsScalarType(i64),
    AsMemoryFormat(i64),
    AsLayout(i64),
    AsDevice(Device),
    AsBool(bool),
    AsBools(Vec<bool>),
    AsSymBool(SymBoolArgument),
    AsSymBools(Vec<SymBoolArgument>),
    AsGraph(GraphArgument),
    AsOptionalTensors(Vec<OptionalTensorArgument>),
    AsCustomObj(CustomObjArgument),
    AsOperator(String),
    AsSymFloat(SymFloatArgument),
    AsSymFloats(Vec<SymFloatArgument>),
    AsOptionalTensor(OptionalTensorArgument),
    AsComplex(ComplexValue),
    AsNestedTensors(Vec<Vec<TensorArgument>>),
    AsIntLists(Vec<Vec<i64>>),
    AsStringToArgument(BTreeMap<String, Argument>),
    AsFloatLists(Vec<Vec<F64>>),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorArgument {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenArgument {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum OptionalTensorArgument {
    AsTensor(TensorArgument),
    AsNone(bool),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphArgument {
    pub name: String,
    pub graph: Graph,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomObjArgument {
    pub name: String,
    pub class_fqn: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComplexValue {
    pub real: F64,
    pub imag: F64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub index: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum SymExprHint {
    AsInt(i64),
    AsBool(bool),
    AsFloat(F64),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SymExpr {
    /// sympy `srepr`: `Symbol('s77', positive=True, integer=True)`, `Mul(Integer(2), Symbol(...))`.
    pub expr_str: String,
    #[serde(default)]
    pub hint: Option<SymExprHint>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum SymInt {
    AsExpr(SymExpr),
    AsInt(i64),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum SymFloat {
    AsExpr(SymExpr),
    AsFloat(F64),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum SymBool {
    AsExpr(SymExpr),
    AsBool(bool),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum SymIntArgument {
    AsName(String),
    AsInt(i64),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum SymFloatArgument {
    AsName(String),
    AsFloat(F64),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum SymBoolArgument {
    AsName(String),
    AsBool(bool),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorMeta {
    /// `ScalarType` code (7 = float32, 5 = int64, ...).
    pub dtype: i64,
    pub sizes: Vec<SymInt>,
    pub requires_grad: bool,
    pub device: Device,
    pub strides: Vec<SymInt>,
    pub storage_offset: SymInt,
    /// `Layout` code (7 = strided).
    pub layout: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphSignature {
    pub input_specs: Vec<InputSpec>,
    pub output_specs: Vec<OutputSpec>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum InputSpec {
    UserInput { arg: Argument },
    Parameter { arg: TensorArgument, parameter_name: String },
    Buffer { arg: TensorArgument, buffer_name: String, persistent: bool },
    TensorConstant { arg: TensorArgument, tensor_constant_name: String },
    CustomObj { arg: CustomObjArgument, custom_obj_name: String },
    Token { arg: TokenArgument },
    ConstantInput { name: String, value: ConstantValue },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum ConstantValue {
    AsNone(bool),
    AsInt(i64),
    AsFloat(F64),
    AsString(String),
    AsBool(bool),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum OutputSpec {
    UserOutput { arg: Argument },
    LossOutput { arg: TensorArgument },
    BufferMutation { arg: TensorArgument, buffer_name: String },
    GradientToParameter { arg: TensorArgument, parameter_name: String },
    GradientToUserInput { arg: TensorArgument, user_input_name: String },
    UserInputMutation { arg: TensorArgument, user_input_name: String },
    Token { arg: TokenArgument },
    ParameterMutation { arg: TensorArgument, parameter_name: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModuleCallEntry {
    pub fqn: String,
    #[serde(default)]
    pub signature: Option<ModuleCallSignature>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModuleCallSignature {
    pub inputs: Vec<Argument>,
    pub outputs: Vec<Argument>,
    pub in_spec: String,
    pub out_spec: String,
    #[serde(default)]
    pub forward_arg_names: Option<Vec<String>>,
}

/// `data/*/model_*_config.json`: where each weight or constant is stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayloadConfig {
    pub config: BTreeMap<String, PayloadMeta>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayloadMeta {
    pub path_name: String,
    pub is_param: bool,
    pub use_pickle: bool,
    pub tensor_meta: Option<TensorMeta>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_parse_exactly_and_non_finite_ones_are_strings() {
        // torch writes finfo(float32).min as a float64 literal; a 1-ulp parse error
        // makes it overflow float32 when the program runs (T5's attention mask).
        let min: F64 = serde_json::from_str("-3.4028234663852886e+38").unwrap();
        assert_eq!(min.0, f32::MIN as f64);
        assert_eq!(serde_json::to_string(&min).unwrap().parse::<f64>().unwrap(), f32::MIN as f64);
        for (text, value) in [("\"Infinity\"", f64::INFINITY), ("\"-Infinity\"", f64::NEG_INFINITY)]
        {
            let parsed: F64 = serde_json::from_str(text).unwrap();
            assert_eq!(parsed.0, value);
            assert_eq!(serde_json::to_string(&parsed).unwrap(), text);
        }
        let nan: F64 = serde_json::from_str("\"NaN\"").unwrap();
        assert!(nan.0.is_nan());
        assert!(serde_json::from_str::<F64>("\"lots\"").is_err());
    }
}
