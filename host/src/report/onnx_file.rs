//! What the report shows of a written `.onnx`: its main graph's op
//! histogram, node count and output names, read without its weights.
//! Embedded initializers can be gigabytes, so the file is walked field by
//! field in protobuf's wire format and everything but the graph's nodes and
//! outputs is skipped by its length, never read.

use std::io::{BufReader, Read, Seek};
use std::path::Path;

use crate::stages::OpHistogram;

/// `ModelProto.graph`, `GraphProto.node` / `.output`, `NodeProto.op_type` /
/// `.domain`, `ValueInfoProto.name` (onnx.proto).
const MODEL_GRAPH: u64 = 7;
const GRAPH_NODE: u64 = 1;
const GRAPH_OUTPUT: u64 = 12;
const NODE_OP_TYPE: u64 = 4;
const NODE_DOMAIN: u64 = 7;
const VALUE_INFO_NAME: u64 = 1;
/// The longest op type, domain or output name read; a longer one is not a name hfx wrote.
const MAX_NAME: u64 = 1 << 16;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct GraphFacts {
    pub ops: OpHistogram,
    pub nodes: u64,
    pub outputs: Vec<String>,
}

/// Reads `path`'s main-graph facts; an error is one line naming the file.
pub fn read(path: &Path) -> Result<GraphFacts, String> {
    let fail = |reason: String| format!("{}: {reason}", path.display());
    let file = crate::input::open_regular(path).map_err(|e| e.to_string())?;
    let size = file.metadata().map_err(|e| fail(e.to_string()))?.len();
    let mut wire = Wire { reader: BufReader::new(file), at: 0 };
    let mut facts = GraphFacts::default();
    walk_model(&mut wire, size, &mut facts).map_err(fail)?;
    Ok(facts)
}

fn walk_model<R: Read + Seek>(
    wire: &mut Wire<R>,
    end: u64,
    facts: &mut GraphFacts,
) -> Result<(), String> {
    while wire.at < end {
        match wire.field(end)? {
            (MODEL_GRAPH, Value::Len(len)) => {
                let graph_end = wire.at + len;
                walk_graph(wire, graph_end, facts)?;
            }
            (_, value) => wire.skip(value)?,
        }
    }
    Ok(())
}

fn walk_graph<R: Read + Seek>(
    wire: &mut Wire<R>,
    end: u64,
    facts: &mut GraphFacts,
) -> Result<(), String> {
    while wire.at < end {
        match wire.field(end)? {
            (GRAPH_NODE, Value::Len(len)) => {
                let node_end = wire.at + len;
                let (mut op_type, mut domain) = (String::new(), String::new());
                while wire.at < node_end {
                    match wire.field(node_end)? {
                        (NODE_OP_TYPE, Value::Len(len)) => op_type = wire.string(len)?,
                        (NODE_DOMAIN, Value::Len(len)) => domain = wire.string(len)?,
                        (_, value) => wire.skip(value)?,
                    }
                }
                *facts.ops.entry(crate::stages::onnx_op(&domain, &op_type)).or_default() += 1;
                facts.nodes += 1;
            }
            (GRAPH_OUTPUT, Value::Len(len)) => {
                let output_end = wire.at + len;
                let mut name = String::new();
                while wire.at < output_end {
                    match wire.field(output_end)? {
                        (VALUE_INFO_NAME, Value::Len(len)) => name = wire.string(len)?,
                        (_, value) => wire.skip(value)?,
                    }
                }
                facts.outputs.push(name);
            }
            (_, value) => wire.skip(value)?,
        }
    }
    Ok(())
}

/// A field's value as the wire format lays it out.
enum Value {
    Varint,
    Fixed64,
    Fixed32,
    /// Length-delimited: this many bytes follow.
    Len(u64),
}

/// A reader of protobuf fields that knows its offset.
struct Wire<R> {
    reader: BufReader<R>,
    at: u64,
}

impl<R: Read + Seek> Wire<R> {
    fn byte(&mut self) -> Result<u8, String> {
        let mut byte = [0u8; 1];
        self.reader.read_exact(&mut byte).map_err(|e| format!("at byte {}: {e}", self.at))?;
        self.at += 1;
        Ok(byte[0])
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!("a varint longer than 10 bytes at byte {}", self.at))
    }

    /// The next field's number and value kind; a length must end by `end`.
    fn field(&mut self, end: u64) -> Result<(u64, Value), String> {
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Value::Varint,
            1 => Value::Fixed64,
            5 => Value::Fixed32,
            2 => {
                let len = self.varint()?;
                if len > end.saturating_sub(self.at) {
                    return Err(format!(
                        "a field of {len} bytes at byte {} runs past its message",
                        self.at
                    ));
                }
                Value::Len(len)
            }
            other => {
                return Err(format!("wire type {other} at byte {} (not written by hfx)", self.at))
            }
        };
        Ok((key >> 3, value))
    }

    fn skip(&mut self, value: Value) -> Result<(), String> {
        let len = match value {
            Value::Varint => return self.varint().map(drop),
            Value::Fixed64 => 8,
            Value::Fixed32 => 4,
            Value::Len(len) => len,
        };
        let offset = i64::try_from(len).map_err(|_| format!("a field of {len} bytes"))?;
        self.reader.seek_relative(offset).map_err(|e| format!("at byte {}: {e}", self.at))?;
        self.at += len;
        Ok(())
    }

    fn string(&mut self, len: u64) -> Result<String, String> {
        if len > MAX_NAME {
            return Err(format!("a name of {len} bytes at byte {}", self.at));
        }
        let mut bytes = vec![0u8; len as usize];
        self.reader.read_exact(&mut bytes).map_err(|e| format!("at byte {}: {e}", self.at))?;
        self.at += len;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::proto as p;
    use prost::Message;

    fn node(op_type: &str, domain: Option<&str>) -> p::NodeProto {
        p::NodeProto {
            op_type: Some(op_type.into()),
            domain: domain.map(String::from),
            input: vec!["x".into()],
            ..Default::default()
        }
    }

    #[test]
    fn ops_and_outputs_are_read_and_weights_skipped() {
        let weight = p::TensorProto {
            name: Some("w".into()),
            raw_data: Some(vec![7u8; 100_000]),
            ..Default::default()
        };
        let output =
            |name: &str| p::ValueInfoProto { name: Some(name.into()), ..Default::default() };
        let graph = p::GraphProto {
            node: vec![
                node("MatMul", None),
                node("Add", Some("")),
                node("MatMul", Some("ai.onnx")),
                node("FusedMatMul", Some("com.microsoft")),
            ],
            initializer: vec![weight],
            output: vec![output("logits"), output("cache.layers.0.keys")],
            ..Default::default()
        };
        let model = p::ModelProto {
            ir_version: Some(10),
            graph: Some(graph),
            producer_name: Some("hfx".into()),
            ..Default::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.onnx");
        std::fs::write(&path, model.encode_to_vec()).unwrap();
        let facts = read(&path).unwrap();
        let expected: OpHistogram = [("Add", 1), ("MatMul", 2), ("com.microsoft.FusedMatMul", 1)]
            .map(|(k, v)| (k.to_string(), v))
            .into();
        assert_eq!(facts.ops, expected);
        assert_eq!(facts.nodes, 4);
        assert_eq!(facts.outputs, ["logits", "cache.layers.0.keys"]);
    }

    #[test]
    fn a_truncated_file_is_an_error_naming_it() {
        let graph = p::GraphProto { node: vec![node("Relu", None)], ..Default::default() };
        let bytes = p::ModelProto { graph: Some(graph), ..Default::default() }.encode_to_vec();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.onnx");
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let error = read(&path).unwrap_err();
        assert!(error.starts_with(&path.display().to_string()) && !error.contains('\n'), "{error}");
    }
}
