//! ── Emit: ONNX ──
//!
//! The translated nodes, the graph's inputs and outputs and the `.pt2` weights
//! become a `ModelProto` (prost types generated from the onnx wheel's
//! `onnx.proto`, `proto.rs`), written atomically. Names and ordering are
//! deterministic, so the same input gives the same bytes.

use prost::Message;

use super::proto as p;
use super::{Attribute, Node, TranslationBuilder};
use crate::graph::pt2::Pt2;
use crate::graph::{Dim, Graph, TensorMeta, ValueMeta};
use crate::stages::onnx_translation::{graph_outputs, InputRole};

/// The IR version hfx writes (ONNX 1.21 reads up to 13; opset 20 needs 9+).
const IR_VERSION: i64 = 10;

#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    #[error("ONNX has no element type for torch dtype `{0}`")]
    Dtype(String),
    #[error("weight `{0}` is not in the archive")]
    MissingWeight(String),
    #[error("weight `{fqn}`: {reason}")]
    Weight { fqn: String, reason: String },
    #[error("graph input `{0}` is not a tensor")]
    NotATensor(String),
    #[error("writing {path}: {source}")]
    Write { path: String, source: std::io::Error },
}

/// ONNX `TensorProto.DataType` of a torch dtype name.
pub fn onnx_dtype(dtype: &str) -> Result<i32, EmitError> {
    use p::tensor_proto::DataType as D;
    Ok(match dtype {
        "float32" => D::Float,
        "uint8" => D::Uint8,
        "int8" => D::Int8,
        "uint16" => D::Uint16,
        "int16" => D::Int16,
        "int32" => D::Int32,
        "int64" => D::Int64,
        "bool" => D::Bool,
        "float16" => D::Float16,
        "float64" => D::Double,
        "uint32" => D::Uint32,
        "uint64" => D::Uint64,
        "complex64" => D::Complex64,
        "complex128" => D::Complex128,
        "bfloat16" => D::Bfloat16,
        other => return Err(EmitError::Dtype(other.into())),
    } as i32)
}

fn element_size(dtype: &str) -> usize {
    match dtype {
        "bool" | "uint8" | "int8" => 1,
        "float16" | "bfloat16" | "int16" | "uint16" => 2,
        "float32" | "int32" | "uint32" => 4,
        "complex128" => 16,
        _ => 8,
    }
}

/// What goes into the model besides the translated nodes.
pub struct ModelParts<'a> {
    pub graph: &'a Graph,
    pub roles: &'a [InputRole],
    pub pt2: &'a Pt2,
    pub builder: &'a TranslationBuilder,
    /// `(key, value)` for `metadata_props`, in order.
    pub metadata: Vec<(String, String)>,
    pub graph_name: String,
}

pub fn model_proto(parts: &ModelParts) -> Result<p::ModelProto, EmitError> {
    let ModelParts { graph, roles, pt2, builder, .. } = parts;
    let mut inputs = Vec::new();
    let mut initializers = Vec::new();
    let graph_inputs = graph.subgraph(0).map(|g| g.inputs.clone()).unwrap_or_default();
    for (&value, role) in graph_inputs.iter().zip(roles.iter()) {
        let v = graph.value(value).expect("graph inputs exist");
        match role {
            InputRole::User(name) => {
                if graph.is_used(value) {
                    inputs.push(value_info(name, &v.meta)?);
                }
            }
            InputRole::Initializer { fqn, constant } => {
                if !graph.is_used(value) {
                    continue;
                }
                let ValueMeta::Tensor(meta) = &v.meta else { return Err(EmitError::NotATensor(fqn.clone())) };
                initializers.push(initializer(pt2, fqn, *constant, meta)?);
            }
            InputRole::Constant => {}
        }
    }
    let outputs = graph_outputs(graph)
        .into_iter()
        .map(|value| {
            let v = graph.value(value).expect("outputs exist");
            value_info(&builder.value_names[&value], &v.meta)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let nodes = builder.nodes.iter().filter(|n| n.function.is_none()).map(node_proto).collect();
    let graph_proto = p::GraphProto {
        name: Some(parts.graph_name.clone()),
        node: nodes,
        initializer: initializers,
        input: inputs,
        output: outputs,
        ..Default::default()
    };
    let domains: std::collections::BTreeSet<&str> = builder.nodes.iter().map(|n| n.domain.as_str()).filter(|d| !d.is_empty()).collect();
    let mut opset_import = vec![p::OperatorSetIdProto { domain: Some(String::new()), version: Some(builder.opset as i64) }];
    opset_import.extend(domains.into_iter().map(|d| p::OperatorSetIdProto { domain: Some(d.to_string()), version: Some(1) }));
    Ok(p::ModelProto {
        ir_version: Some(IR_VERSION),
        opset_import,
        producer_name: Some("hfx".into()),
        producer_version: Some(env!("CARGO_PKG_VERSION").into()),
        graph: Some(graph_proto),
        metadata_props: parts
            .metadata
            .iter()
            .map(|(k, v)| p::StringStringEntryProto { key: Some(k.clone()), value: Some(v.clone()) })
            .collect(),
        ..Default::default()
    })
}

/// Encodes `model` and writes it atomically.
pub fn write(path: &std::path::Path, model: &p::ModelProto) -> Result<(), EmitError> {
    let bytes = model.encode_to_vec();
    crate::atomic::write_bytes_atomically(path, &bytes).map_err(|source| EmitError::Write { path: path.display().to_string(), source })
}

fn value_info(name: &str, meta: &ValueMeta) -> Result<p::ValueInfoProto, EmitError> {
    let (dtype, shape) = match meta {
        ValueMeta::Tensor(t) => (t.dtype.as_str(), t.shape.clone()),
        // A sym-int output is a 0-d int64 tensor in ONNX.
        ValueMeta::SymInt(_) => ("int64", vec![]),
        ValueMeta::SymBool(_) => ("bool", vec![]),
        ValueMeta::SymFloat(_) => ("float32", vec![]),
        ValueMeta::Opaque(_) => return Err(EmitError::NotATensor(name.into())),
    };
    let dims = shape
        .iter()
        .map(|d| p::tensor_shape_proto::Dimension {
            denotation: None,
            value: Some(match d {
                Dim::Fixed(n) => p::tensor_shape_proto::dimension::Value::DimValue(*n),
                Dim::Symbolic(s) => p::tensor_shape_proto::dimension::Value::DimParam(s.clone()),
            }),
        })
        .collect();
    Ok(p::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(p::TypeProto {
            denotation: None,
            value: Some(p::type_proto::Value::TensorType(p::type_proto::Tensor {
                elem_type: Some(onnx_dtype(dtype)?),
                shape: Some(p::TensorShapeProto { dim: dims }),
            })),
        }),
        ..Default::default()
    })
}

/// A weight's bytes as a contiguous initializer.
fn initializer(pt2: &Pt2, fqn: &str, constant: bool, meta: &TensorMeta) -> Result<p::TensorProto, EmitError> {
    // Non-persistent buffers are stored with the constants.
    let bytes = if constant { pt2.constant("model", fqn) } else { pt2.weight("model", fqn).or_else(|| pt2.constant("model", fqn)) };
    let bytes = bytes.ok_or_else(|| EmitError::MissingWeight(fqn.into()))?;
    let dims = meta
        .shape
        .iter()
        .map(|d| match d {
            Dim::Fixed(n) => Ok(*n),
            Dim::Symbolic(s) => Err(EmitError::Weight { fqn: fqn.into(), reason: format!("symbolic size {s}") }),
        })
        .collect::<Result<Vec<i64>, _>>()?;
    let size = element_size(&meta.dtype);
    let count: i64 = dims.iter().product();
    let offset = match meta.storage_offset {
        Dim::Fixed(n) => n as usize * size,
        _ => return Err(EmitError::Weight { fqn: fqn.into(), reason: "symbolic storage offset".into() }),
    };
    if !is_contiguous(&meta.strides, &dims) {
        return Err(EmitError::Weight { fqn: fqn.into(), reason: "non-contiguous storage".into() });
    }
    let end = offset + count as usize * size;
    let raw = bytes.get(offset..end).ok_or_else(|| EmitError::Weight {
        fqn: fqn.into(),
        reason: format!("storage holds {} bytes, the tensor needs {offset}..{end}", bytes.len()),
    })?;
    Ok(p::TensorProto { dims, data_type: Some(onnx_dtype(&meta.dtype)?), name: Some(fqn.into()), raw_data: Some(raw.to_vec()), ..Default::default() })
}

fn is_contiguous(strides: &[Dim], dims: &[i64]) -> bool {
    if strides.is_empty() {
        return true;
    }
    let mut expected = 1i64;
    for (stride, &size) in strides.iter().zip(dims).rev() {
        if size != 1 && *stride != Dim::Fixed(expected) {
            return false;
        }
        expected *= size.max(1);
    }
    true
}

fn node_proto(node: &Node) -> p::NodeProto {
    p::NodeProto {
        input: node.inputs.clone(),
        output: node.outputs.clone(),
        name: node.outputs.first().map(|o| format!("{}_node", o)),
        op_type: Some(node.op_type.clone()),
        domain: Some(node.domain.clone()),
        attribute: node.attributes.iter().map(|(name, a)| attribute(name, a)).collect(),
        ..Default::default()
    }
}

fn attribute(name: &str, value: &Attribute) -> p::AttributeProto {
    use p::attribute_proto::AttributeType as T;
    let mut a = p::AttributeProto { name: Some(name.into()), ..Default::default() };
    let kind = match value {
        Attribute::Int(i) => {
            a.i = Some(*i);
            T::Int
        }
        Attribute::Ints(v) => {
            a.ints = v.clone();
            T::Ints
        }
        Attribute::Float(f) => {
            a.f = Some(*f);
            T::Float
        }
        Attribute::Floats(v) => {
            a.floats = v.clone();
            T::Floats
        }
        Attribute::Str(s) => {
            a.s = Some(s.as_bytes().to_vec());
            T::String
        }
        Attribute::Strs(v) => {
            a.strings = v.iter().map(|s| s.as_bytes().to_vec()).collect();
            T::Strings
        }
    };
    a.r#type = Some(kind as i32);
    a
}
