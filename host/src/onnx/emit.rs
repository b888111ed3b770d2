//! ── Emit: ONNX ──
//!
//! In three steps, so the passes run between what the translations made and
//! the proto: [`lower`] gathers the model's parts (inputs with named sizes,
//! initializers from the `.pt2`, the nodes, outputs named as the model's
//! fields); `onnx::passes` rewrite the nodes and initializers; [`plan`] only
//! builds the `ModelProto` (prost types generated from the onnx wheel's
//! `onnx.proto`, `proto.rs`) and [`write`] streams it with the weights,
//! atomically. Names and ordering are deterministic, so the same input gives
//! the same bytes.

use std::collections::{BTreeSet, HashMap, HashSet};

use hfx_dtype::DType;
use prost::Message;

use super::external::{data_file, ALIGNMENT, THRESHOLD};
use super::inputs::{graph_outputs, InputRole};
use super::prewrite::Kept;
use super::proto as p;
use super::weights::{initializer, Initializer, WeightError};
use super::{Attribute, Node, TranslationBuilder};
use crate::atomic::DirectWriter;
use crate::graph::pt2::Pt2;
use crate::graph::{Dim, Graph, ValueMeta};
use crate::weights::files::{write_weight, WeightFiles};

/// The IR version hfx writes (ONNX 1.21 reads up to 13; opset 20 needs 9+).
const IR_VERSION: i64 = 10;

#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    #[error("ONNX has no element type for torch dtype `{0}`")]
    Dtype(String),
    #[error(transparent)]
    Weight(#[from] WeightError),
    #[error(transparent)]
    Storage(#[from] crate::graph::pt2::Pt2Error),
    #[error("graph input `{0}` is a weight, and the model has no weights archive")]
    NoWeights(String),
    #[error("graph input `{0}` is not a tensor")]
    NotATensor(String),
    #[error("value {0} has no ONNX name (no translation produced it)")]
    Unnamed(u32),
    #[error("writing {path}: {source}")]
    Write { path: String, source: std::io::Error },
}

/// What the model is made of: the translation's nodes, the program's graph
/// (inputs, outputs, their metadata) and the `.pt2` (weights).
pub struct ModelParts<'a> {
    pub graph: &'a Graph,
    pub roles: &'a [InputRole],
    /// Where the initializers' bytes are; None for a program whose inputs are
    /// all user inputs (a plugin's self-test case).
    pub weights: Option<&'a Pt2>,
    pub builder: &'a TranslationBuilder,
    /// Names for the graph outputs, in order (the model output's fields:
    /// `logits`, `cache.layers.0.keys`); empty keeps the translation's names.
    pub output_names: Vec<String>,
}

/// The model's parts gathered, before the passes: what they may rewrite
/// (`nodes`, `initializers`) and what they must keep (`output_names`).
pub struct Lowered<'a> {
    pub inputs: Vec<p::ValueInfoProto>,
    pub initializers: Vec<Initializer<'a>>,
    pub nodes: Vec<Node>,
    /// The graph outputs' ONNX names, in order.
    pub output_names: Vec<String>,
    pub outputs: Vec<p::ValueInfoProto>,
    pub opset: u32,
    /// Custom domains the translations used (each imported at version 1).
    pub domains: BTreeSet<String>,
    /// The program's values whose every axis is fixed, by ONNX name, with
    /// that shape (constant folding knows their `Shape`).
    pub static_shapes: HashMap<String, Vec<i64>>,
}

/// The model planned for writing: the `ModelProto` without its graph, the
/// graph without initializers, and the initializers, streamed by [`write`].
pub struct Planned<'a> {
    pub model: p::ModelProto,
    pub graph: p::GraphProto,
    pub initializers: Vec<Initializer<'a>>,
}

/// Readable names for the symbols of the inputs' shapes: axis 0 is `batch`,
/// axis 1 of token inputs `sequence` (`decoder_sequence` for the decoder's),
/// any other `<input>_dim<axis>`. The first input naming a symbol wins.
pub fn dim_names(graph: &Graph, roles: &[InputRole]) -> HashMap<String, String> {
    const TOKENS: &[&str] =
        &["input_ids", "attention_mask", "token_type_ids", "position_ids", "inputs_embeds"];
    let mut names = HashMap::new();
    let inputs = graph.subgraph(0).map(|g| g.inputs.clone()).unwrap_or_default();
    for (&value, role) in inputs.iter().zip(roles) {
        let (InputRole::User(input), Ok(v)) = (role, graph.value(value)) else { continue };
        let ValueMeta::Tensor(meta) = &v.meta else { continue };
        for (axis, dim) in meta.shape.iter().enumerate() {
            let Dim::Symbolic(symbol) = dim else { continue };
            if names.contains_key(symbol) {
                continue;
            }
            let preferred = match (axis, input.as_str()) {
                (0, _) => Some("batch"),
                // A key/value cache leaf (`input.cache.layers.0.keys`): [batch, heads, past, head size].
                (2, i) if i.contains("cache.") && meta.shape.len() == 4 => Some("past_sequence"),
                (1, i) if TOKENS.contains(&i) => Some("sequence"),
                (1, i) if i.starts_with("decoder_") => Some("decoder_sequence"),
                _ => None,
            };
            // A second symbol for the same role (torch proved no equality) gets its own name.
            let name = match preferred {
                Some(p) if !names.values().any(|n| n == p) => p.to_string(),
                _ => format!("{input}_dim{axis}"),
            };
            names.insert(symbol.clone(), name);
        }
    }
    names
}

/// Gives the graph outputs their names: the producing node's output is renamed
/// where that is safe, else an `Identity` carries the new name.
fn name_outputs(
    nodes: &mut Vec<Node>,
    current: &[String],
    wanted: &[String],
    taken: &HashSet<String>,
) -> Vec<String> {
    if wanted.len() != current.len() {
        return current.to_vec();
    }
    let produced: HashSet<String> = nodes.iter().flat_map(|n| n.outputs.iter().cloned()).collect();
    let mut renames: HashMap<String, String> = HashMap::new();
    let mut used: HashSet<String> = HashSet::new();
    let mut finals = Vec::new();
    for (c, w) in current.iter().zip(wanted) {
        let mut name = w.clone();
        if taken.contains(&name) || produced.contains(&name) || used.contains(&name) {
            name = format!("output.{name}");
        }
        used.insert(name.clone());
        if produced.contains(c) && !renames.contains_key(c) {
            renames.insert(c.clone(), name.clone());
        } else {
            let source = renames.get(c).cloned().unwrap_or_else(|| c.clone());
            nodes.push(Node {
                op_type: "Identity".into(),
                domain: String::new(),
                inputs: vec![source],
                outputs: vec![name.clone()],
                attributes: vec![],
                function: None,
            });
        }
        finals.push(name);
    }
    for node in nodes.iter_mut() {
        for name in node.inputs.iter_mut().chain(node.outputs.iter_mut()) {
            if let Some(new) = renames.get(name) {
                *name = new.clone();
            }
        }
    }
    finals
}

/// Gathers the model's parts: every stored tensor checked first (sizes,
/// CRC-32 on all cores), then inputs, initializers in graph-input order,
/// nodes, and the outputs named.
pub fn lower<'a>(parts: &ModelParts<'a>) -> Result<Lowered<'a>, EmitError> {
    let ModelParts { graph, roles, weights, builder, .. } = parts;
    if let Some(pt2) = weights {
        pt2.check_payloads()?;
    }
    let dims = dim_names(graph, roles);
    let mut inputs = Vec::new();
    let mut initializers = Vec::new();
    let graph_inputs = graph.subgraph(0).map(|g| g.inputs.clone()).unwrap_or_default();
    for (&value, role) in graph_inputs.iter().zip(roles.iter()) {
        let Ok(v) = graph.value(value) else { continue };
        match role {
            InputRole::User(name) => {
                if graph.is_used(value) {
                    inputs.push(value_info(name, &v.meta, &dims)?);
                }
            }
            InputRole::Initializer { fqn, constant } => {
                if !graph.is_used(value) {
                    continue;
                }
                let ValueMeta::Tensor(meta) = &v.meta else {
                    return Err(EmitError::NotATensor(fqn.clone()));
                };
                let pt2 = weights.ok_or_else(|| EmitError::NoWeights(fqn.clone()))?;
                initializers.push(initializer(pt2, fqn, *constant, meta)?);
            }
            InputRole::Constant => {}
        }
    }
    let output_values = graph_outputs(graph);
    let current: Vec<String> = output_values
        .iter()
        .map(|v| builder.value_names.get(v).cloned().ok_or(EmitError::Unnamed(v.0)))
        .collect::<Result<_, _>>()?;
    let mut nodes: Vec<Node> =
        builder.nodes.iter().filter(|n| n.function.is_none()).cloned().collect();
    let taken: HashSet<String> =
        builder.value_names.values().filter(|n| !current.contains(n)).cloned().collect();
    let output_names = if parts.output_names.is_empty() {
        current.clone()
    } else {
        name_outputs(&mut nodes, &current, &parts.output_names, &taken)
    };
    let outputs = output_values
        .iter()
        .zip(&output_names)
        .map(|(value, name)| match graph.value(*value) {
            Ok(v) => value_info(name, &v.meta, &dims),
            Err(_) => Err(EmitError::Unnamed(value.0)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let domains =
        builder.nodes.iter().map(|n| n.domain.clone()).filter(|d| !d.is_empty()).collect();
    let static_shapes = builder
        .value_names
        .iter()
        .filter_map(|(value, name)| {
            let ValueMeta::Tensor(meta) = &graph.value(*value).ok()?.meta else { return None };
            let dims: Option<Vec<i64>> = meta
                .shape
                .iter()
                .map(|d| if let Dim::Fixed(n) = d { Some(*n) } else { None })
                .collect();
            Some((name.clone(), dims?))
        })
        .collect();
    Ok(Lowered {
        inputs,
        initializers,
        nodes,
        output_names,
        outputs,
        opset: builder.opset,
        domains,
        static_shapes,
    })
}

/// The `ModelProto` of the (passed) parts, without initializer bytes.
/// Weights no node reads (any more) are left out.
pub fn plan<'a>(
    lowered: Lowered<'a>,
    graph_name: &str,
    metadata: &[(String, String)],
) -> Planned<'a> {
    let Lowered { inputs, mut initializers, nodes, output_names, outputs, opset, domains, .. } =
        lowered;
    let read: HashSet<&str> = nodes
        .iter()
        .flat_map(|n| n.inputs.iter().map(String::as_str))
        .chain(output_names.iter().map(String::as_str))
        .collect();
    initializers.retain(|i| i.header.name.as_deref().is_some_and(|n| read.contains(n)));
    let node = nodes.iter().map(node_proto).collect();
    let graph = p::GraphProto {
        name: Some(graph_name.into()),
        node,
        input: inputs,
        output: outputs,
        ..Default::default()
    };
    let mut opset_import =
        vec![p::OperatorSetIdProto { domain: Some(String::new()), version: Some(opset as i64) }];
    opset_import.extend(
        domains.into_iter().map(|d| p::OperatorSetIdProto { domain: Some(d), version: Some(1) }),
    );
    let model = p::ModelProto {
        ir_version: Some(IR_VERSION),
        opset_import,
        producer_name: Some("hfx".into()),
        producer_version: Some(env!("CARGO_PKG_VERSION").into()),
        metadata_props: metadata
            .iter()
            .map(|(k, v)| p::StringStringEntryProto {
                key: Some(k.clone()),
                value: Some(v.clone()),
            })
            .collect(),
        ..Default::default()
    };
    Planned { model, graph, initializers }
}

/// Where the weights go.
pub enum WeightStorage {
    /// Inside the `.onnx` (protobuf's 2 GB limit applies).
    Embedded,
    /// In `<model>.onnx.data` beside it, referenced by offset; its first
    /// initializers perhaps written while the worker traced.
    External { prewritten: Option<Box<super::prewrite::PrewrittenData>> },
}

/// Protobuf's hard limit for one message; past it weights must go external.
pub const PROTOBUF_LIMIT: u64 = 2 << 30;

/// Writes the model, streaming each weight from where `files` stores it (the
/// `.pt2`'s memory map) into the file: no second copy of the weights is
/// held, and each weight's pages are released once written (a model's
/// weights are then never all resident in hfx at once). With external
/// storage the data file is written first, then the model that points into
/// it (by file name, so the two move together); each is atomic on its own.
/// Returns how many initializers of the data file were written while the
/// worker traced.
pub fn write(
    path: &std::path::Path,
    planned: Planned,
    storage: WeightStorage,
    files: &dyn WeightFiles,
) -> Result<usize, EmitError> {
    let Planned { mut model, graph, initializers } = planned;
    let error = |source| EmitError::Write { path: path.display().to_string(), source };
    match storage {
        WeightStorage::Embedded => {
            crate::atomic::write_atomically(path, |file| {
                write_embedded(file, &model, &graph, &initializers, files)
            })
            .map_err(error)?;
            Ok(0)
        }
        WeightStorage::External { prewritten } => {
            let data_path = data_file(path);
            let data_name = data_path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("model.onnx.data")
                .to_string();
            let mut headers = Vec::with_capacity(initializers.len());
            let data_error =
                |source| EmitError::Write { path: data_path.display().to_string(), source };
            // Both files are written to temp files first and renamed only when both are
            // complete: a failure leaves neither (nor a new data file beside an old model).
            let Kept { staged: data, mut out, starts: kept } = match prewritten
                .and_then(|p| (*p).kept(&data_path, &initializers, files))
            {
                Some(kept) => kept,
                None => {
                    let mut data = crate::atomic::Staged::create(&data_path).map_err(data_error)?;
                    let out = DirectWriter::new(data.file().try_clone().map_err(data_error)?);
                    Kept { staged: data, out, starts: Vec::new() }
                }
            };
            let mut offset = out.position();
            let mut external = 0;
            for init in &initializers {
                if (init.bytes.len() as u64) < THRESHOLD {
                    // small values stay inline: shape inference reads them (axes, shapes)
                    headers.push(p::TensorProto {
                        raw_data: Some(init.bytes.to_vec()),
                        ..init.header.clone()
                    });
                    continue;
                }
                external += 1;
                if let Some(&start) = kept.get(external - 1) {
                    headers.push(external_header(
                        &init.header,
                        &data_name,
                        start,
                        init.bytes.len() as u64,
                    ));
                    continue;
                }
                let padding = offset.next_multiple_of(ALIGNMENT) - offset;
                std::io::Write::write_all(&mut out, &vec![0u8; padding as usize])
                    .map_err(data_error)?;
                offset += padding;
                write_weight(&mut out, &init.bytes, files).map_err(data_error)?;
                headers.push(external_header(
                    &init.header,
                    &data_name,
                    offset,
                    init.bytes.len() as u64,
                ));
                offset += init.bytes.len() as u64;
            }
            out.finish().map_err(data_error)?;
            model.graph = Some(p::GraphProto { initializer: headers, ..graph });
            let mut staged = crate::atomic::Staged::create(path).map_err(error)?;
            std::io::Write::write_all(staged.file(), &model.encode_to_vec()).map_err(error)?;
            data.commit().map_err(data_error)?;
            staged.commit().map_err(error)?;
            Ok(kept.len())
        }
    }
}

fn external_header(
    header: &p::TensorProto,
    location: &str,
    offset: u64,
    length: u64,
) -> p::TensorProto {
    let entry =
        |k: &str, v: String| p::StringStringEntryProto { key: Some(k.into()), value: Some(v) };
    p::TensorProto {
        data_location: Some(p::tensor_proto::DataLocation::External as i32),
        external_data: vec![
            entry("location", location.into()),
            entry("offset", offset.to_string()),
            entry("length", length.to_string()),
        ],
        ..header.clone()
    }
}

/// `ModelProto` bytes with the graph's initializers appended field by field
/// (protobuf accepts fields in any order), raw bytes copied from the map.
fn write_embedded(
    file: &mut std::fs::File,
    model: &p::ModelProto,
    graph: &p::GraphProto,
    initializers: &[Initializer],
    files: &dyn WeightFiles,
) -> std::io::Result<()> {
    use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};
    let graph_bytes = graph.encode_to_vec();
    let headers: Vec<Vec<u8>> = initializers.iter().map(|i| i.header.encode_to_vec()).collect();
    // A tensor message: its header fields, then raw_data (field 9, one-byte key).
    let tensor_len = |h: &Vec<u8>, n: usize| h.len() + 1 + encoded_len_varint(n as u64) + n;
    let graph_len: usize = graph_bytes.len()
        + headers
            .iter()
            .zip(initializers)
            .map(|(h, i)| {
                let t = tensor_len(h, i.bytes.len());
                1 + encoded_len_varint(t as u64) + t
            })
            .sum::<usize>();
    let mut out = DirectWriter::new(file);
    let mut head = model.encode_to_vec();
    encode_key(7, WireType::LengthDelimited, &mut head); // ModelProto.graph
    encode_varint(graph_len as u64, &mut head);
    head.extend_from_slice(&graph_bytes);
    std::io::Write::write_all(&mut out, &head)?;
    for (h, i) in headers.iter().zip(initializers) {
        let mut prefix = Vec::with_capacity(h.len() + 24);
        encode_key(5, WireType::LengthDelimited, &mut prefix); // GraphProto.initializer
        encode_varint(tensor_len(h, i.bytes.len()) as u64, &mut prefix);
        prefix.extend_from_slice(h);
        encode_key(9, WireType::LengthDelimited, &mut prefix); // TensorProto.raw_data
        encode_varint(i.bytes.len() as u64, &mut prefix);
        std::io::Write::write_all(&mut out, &prefix)?;
        write_weight(&mut out, &i.bytes, files)?;
    }
    out.finish().map(drop)
}

fn value_info(
    name: &str,
    meta: &ValueMeta,
    dims: &HashMap<String, String>,
) -> Result<p::ValueInfoProto, EmitError> {
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
                Dim::Symbolic(s) => {
                    p::tensor_shape_proto::dimension::Value::DimParam(renamed(s, dims))
                }
            }),
        })
        .collect();
    Ok(p::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(p::TypeProto {
            denotation: None,
            value: Some(p::type_proto::Value::TensorType(p::type_proto::Tensor {
                elem_type: Some(
                    DType::from_name(dtype)
                        .and_then(DType::onnx)
                        .ok_or_else(|| EmitError::Dtype(dtype.into()))?,
                ),
                shape: Some(p::TensorShapeProto { dim: dims }),
            })),
        }),
        ..Default::default()
    })
}

/// A symbolic size with its symbols renamed (`s72` → `batch`, `s53 + 1` → `sequence + 1`).
fn renamed(expr: &str, dims: &HashMap<String, String>) -> String {
    if let Some(name) = dims.get(expr) {
        return name.clone();
    }
    let mut out = String::new();
    let mut token = String::new();
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' {
            token.push(c);
        } else {
            out.push_str(dims.get(&token).map(String::as_str).unwrap_or(&token));
            token.clear();
            out.push(c);
        }
    }
    out.pop();
    out
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::graph::pt2::testing::{archive, open, Stored};
    use crate::graph::TensorMeta;
    use crate::onnx::prewrite::{write as prewrite, PrewrittenData};
    use crate::onnx::weights::Bytes;
    use crate::weights::checkpoint::Checkpoints;
    use crate::weights::plan::PlannedWeight;
    use crate::weights::prewrite::Prewriter;

    /// A checkpoint's tensors: (fqn, rows, columns, stored dtype); the
    /// program's are float32, and `*_proj` ones are `Linear` weights.
    const TENSORS: [(&str, u64, u64, &str); 5] = [
        ("embed", 767, 512, "float32"), // not a whole number of 4 KiB blocks
        ("q_proj", 512, 768, "float32"),
        ("norm", 1, 4, "float32"),
        ("wide", 2048, 1024, "bfloat16"),
        ("o_proj", 1024, 1024, "float32"),
    ];

    /// The data file written while tracing is kept up to the first
    /// initializer that is not what was written (other bytes, another
    /// order, not transposed as the optimizer stored it), rewound there
    /// (within the block being filled, and into blocks written already);
    /// the model and its data file are the same bytes either way, and no
    /// temp file is left (a plan dropped unfinished included).
    #[test]
    fn external_data_written_while_tracing_is_kept_as_far_as_the_model_starts_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let side = dir.path().join("p.pt2.weights");
        std::fs::write(&side, b"").unwrap();
        let checkpoint = dir.path().join("model.safetensors");
        let (mut bytes, mut index, mut plan) = (vec![0u8; 16], serde_json::Map::new(), Vec::new());
        for (i, &(fqn, rows, cols, stored)) in TENSORS.iter().enumerate() {
            let element = if stored == "float32" { 4 } else { 2 };
            let length = rows * cols * element;
            index.insert(fqn.into(), serde_json::json!([1, bytes.len(), length, stored]));
            plan.push(PlannedWeight {
                name: fqn.into(),
                file: checkpoint.clone(),
                offset: bytes.len() as u64,
                length,
                stored: stored.into(),
                dtype: "float32".into(),
                shape: if rows == 1 { vec![cols] } else { vec![rows, cols] },
                linear_weight: fqn.ends_with("_proj"),
            });
            bytes.extend((0..length).map(|b| (b * 7 + b / 4093 + i as u64) as u8 & 0x3f));
        }
        std::fs::write(&checkpoint, &bytes).unwrap();
        let index = serde_json::json!({"files": ["p.pt2.weights", checkpoint], "weights": index, "constants": {}});
        std::fs::write(dir.path().join("p.pt2.weights.json"), index.to_string()).unwrap();
        let stored = |&(fqn, rows, cols, _): &(&'static str, u64, u64, &str)| Stored {
            fqn,
            sizes: vec![rows as i64, cols as i64],
            strides: vec![cols as i64, 1],
            offset: 0,
            bytes: Some(vec![]),
        };
        let mut pt2 = open(archive(&TENSORS.iter().map(stored).collect::<Vec<_>>()));
        pt2.attach_side_weights(&side, std::slice::from_ref(&checkpoint)).unwrap();
        // The optimized model's initializers: the `Linear` weights stored transposed.
        let planned = || {
            let initializers = TENSORS
                .iter()
                .map(|&(fqn, rows, cols, _)| {
                    let meta = TensorMeta::new(
                        "float32",
                        vec![Dim::Fixed(rows as i64), Dim::Fixed(cols as i64)],
                    );
                    let mut init = initializer(&pt2, fqn, false, &meta).unwrap();
                    if fqn.ends_with("_proj") {
                        let Bytes::Mapped(source) = init.bytes else {
                            panic!("{fqn} is stored as float32")
                        };
                        init.bytes = Bytes::Transposed {
                            source,
                            rows: rows as usize,
                            cols: cols as usize,
                            element: 4,
                            cast: None,
                        };
                        init.header.dims = vec![cols as i64, rows as i64];
                    }
                    init
                })
                .collect();
            Planned { model: Default::default(), graph: Default::default(), initializers }
        };
        let model = dir.path().join("out/model.onnx");
        let data = data_file(&model);
        let written = |prewritten: Option<PrewrittenData>| {
            let kept = write(
                &model,
                planned(),
                WeightStorage::External { prewritten: prewritten.map(Box::new) },
                &pt2,
            )
            .unwrap();
            (kept, std::fs::read(&model).unwrap(), std::fs::read(&data).unwrap())
        };
        let (_, plain_model, plain_data) = written(None);
        let prewritten = |to: &Path, plan: &[PlannedWeight], sources: &Path| {
            let (to, plan, checkpoints) =
                (to.to_path_buf(), plan.to_vec(), Checkpoints::new(&[sources.to_path_buf()]));
            Prewriter::start(move |stop| prewrite(&to, plan, checkpoints, true, stop))
        };
        let not_linear = |fqn: &str| {
            let mut plan = plan.clone();
            plan.iter_mut().filter(|p| p.name == fqn).for_each(|p| p.linear_weight = false);
            plan
        };
        let reordered = [plan[1].clone(), plan[0].clone()];
        // Sizes no weight has (the plan is a worker line): not transposed, no overflow.
        let mut absurd = plan.clone();
        absurd[1].shape = vec![u64::MAX, 2];
        let cases: [(&[PlannedWeight], usize); 6] = [
            (&plan, 4), // `norm` is stored in the model
            (&plan[..2], 2),
            (&not_linear("o_proj"), 3), // rewound in the block being filled
            (&not_linear("q_proj"), 1), // rewound into a block written already
            (&absurd, 1),
            (&reordered, 0),
        ];
        for (plan, kept) in cases {
            let names: Vec<&str> = plan.iter().map(|p| p.name.as_str()).collect();
            let (got, model_bytes, data_bytes) =
                written(prewritten(&data, plan, &checkpoint).finish());
            assert_eq!(got, kept, "{names:?}");
            assert!(
                model_bytes == plain_model && data_bytes == plain_data,
                "{names:?}: other bytes"
            );
            // Written for another data file: not kept.
            let (got, _, data_bytes) = written(
                prewritten(&dir.path().join("elsewhere.onnx.data"), plan, &checkpoint).finish(),
            );
            assert_eq!(got, 0);
            assert!(data_bytes == plain_data);
            // A plan naming a file that is not one of the checkpoint's: nothing is read.
            assert!(prewritten(&data, plan, &side).finish().is_none(), "{names:?}");
        }
        drop(prewritten(&dir.path().join("out/failed.onnx.data"), &plan, &checkpoint));
        let mut left: Vec<_> = std::fs::read_dir(dir.path().join("out"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["model.onnx", "model.onnx.data"], "temp files left");
    }
}
