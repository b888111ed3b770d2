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

use super::inputs::{graph_outputs, InputRole};
use super::prewrite::Kept;
use super::proto as p;
use super::weights::{initializer, Bytes, Initializer, WeightError};
use super::{Attribute, Node, TranslationBuilder};
use crate::atomic::DirectWriter;
use crate::graph::pt2::cast::Cast;
use crate::graph::pt2::Pt2;
use crate::graph::{Dim, Graph, ValueMeta};

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
/// Initializers smaller than this stay in the `.onnx` with external data, as
/// onnx's `convert_model_to_external_data` keeps them (its `size_threshold`).
pub(super) const EXTERNAL_THRESHOLD: u64 = 1024;
/// Offsets in the external data file are aligned for memory mapping.
pub(super) const EXTERNAL_ALIGNMENT: u64 = 64;

/// `model.onnx` → `model.onnx.data`, the external data file beside it.
pub fn data_file(model: &std::path::Path) -> std::path::PathBuf {
    model.with_file_name(format!(
        "{}.data",
        model.file_name().and_then(|n| n.to_str()).unwrap_or("model.onnx")
    ))
}

/// Writes the model, streaming each weight from the `.pt2`'s memory map into
/// the file: no second copy of the weights is held. With external storage the
/// data file is written first, then the model that points into it (by file
/// name, so the two move together); each is atomic on its own.
/// Where the weights' bytes are stored: asked where a mapped weight lives
/// (it is then read from that file, [`crate::atomic::DirectWriter::write_or_copy`]) and told
/// once it is written (its pages can leave resident memory).
/// And what a weight's bytes are written from (the data file written while
/// the worker traced is kept where its weights are the same bytes).
pub trait WeightFiles {
    fn origin(&self, bytes: &[u8]) -> Option<(&std::fs::File, u64)>;
    fn release(&self, bytes: &[u8]);
    fn place(
        &self,
        bytes: &[u8],
        cast: Option<Cast>,
        transposed: Option<(usize, usize)>,
    ) -> Option<crate::prewrite::Place>;
}

impl WeightFiles for crate::graph::pt2::Pt2 {
    fn origin(&self, bytes: &[u8]) -> Option<(&std::fs::File, u64)> {
        crate::graph::pt2::Pt2::origin(self, bytes)
    }
    fn release(&self, bytes: &[u8]) {
        crate::graph::pt2::Pt2::release(self, bytes)
    }
    fn place(
        &self,
        bytes: &[u8],
        cast: Option<Cast>,
        transposed: Option<(usize, usize)>,
    ) -> Option<crate::prewrite::Place> {
        crate::graph::pt2::Pt2::place(self, bytes, cast, transposed)
    }
}

/// Weights in hfx's own memory (a self-test's model): no file, nothing to release.
pub struct InMemory;

impl WeightFiles for InMemory {
    fn origin(&self, _: &[u8]) -> Option<(&std::fs::File, u64)> {
        None
    }
    fn release(&self, _: &[u8]) {}
    fn place(
        &self,
        _: &[u8],
        _: Option<Cast>,
        _: Option<(usize, usize)>,
    ) -> Option<crate::prewrite::Place> {
        None
    }
}

/// Writes `bytes` to `out`: a weight stored unchanged in a file is read from
/// that file, any other is written from memory.
pub(super) fn write_weight<F: std::borrow::Borrow<std::fs::File>>(
    out: &mut DirectWriter<F>,
    bytes: &Bytes<'_>,
    files: &dyn WeightFiles,
) -> std::io::Result<()> {
    match bytes {
        Bytes::Mapped(mapped) => out.write_or_copy(mapped, files.origin(mapped)),
        other => other.write_releasing(out, &|read| files.release(read)),
    }?;
    if let Some(mapped) = bytes.mapped() {
        files.release(mapped);
    }
    Ok(())
}

/// Writes the model; `release` is called with each weight's mapped bytes
/// once they are written (the map's pages can leave resident memory: a
/// model's weights are then never all resident in hfx at once). How many
/// initializers of the data file were written while the worker traced.
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
                if (init.bytes.len() as u64) < EXTERNAL_THRESHOLD {
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
                let padding = offset.next_multiple_of(EXTERNAL_ALIGNMENT) - offset;
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
