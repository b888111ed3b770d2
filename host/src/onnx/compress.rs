//! A 16-bit model's weights for OpenVINO (`--dtype bfloat16|float16
//! --backend openvino`), a pass of the optimizer ([`super::passes`]).
//!
//! The reference traces a 16-bit model for OpenVINO in float32 activations
//! over its 16-bit weights (`patch_16bit_model`): its `nn.Linear` and
//! `nn.Embedding` patches cast each weight to float32 inside the graph, so
//! the IR holds the weight 16-bit behind a `Convert`, which OpenVINO's CPU
//! plugin decompresses inside its matmuls and gathers. hfx's worker traces
//! the same computation (the model in float32, its weights and buffers
//! rounded to the 16-bit dtype: `sources.prepared`); here every float32
//! weight a `MatMul` or `Gemm` multiplies (directly or through a
//! `Transpose`) or a `Gather` reads rows of is
//! stored in the 16-bit dtype, and its readers read a `Cast` of it to
//! float32. A weight is stored so only where that keeps every value: one the
//! checkpoint holds in that dtype by construction, any other once its
//! elements are checked (a constant the model computed is not rounded), so
//! the model computes exactly what it did.
//!
//! It runs after the weights are stored transposed and as their slabs: it
//! changes only the dtype a weight's bytes stream in ([`narrowed`]), never
//! their layout.

use std::collections::{HashMap, HashSet};

use hfx_dtype::DType;

use super::weights::{Bytes, Initializer};
use super::{Attribute, Node};
use crate::weights::cast::Cast;

/// What the pass stored 16-bit.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CompressReport {
    /// The dtype weights were stored in; None when nothing was asked.
    pub dtype: Option<DType>,
    /// Weights stored in it, each read through one `Cast`.
    pub weights: usize,
    /// float32 weights left as they were: a value the dtype does not hold.
    pub inexact: Vec<String>,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

impl CompressReport {
    /// The summary's line.
    pub fn line(&self) -> String {
        let dtype = self.dtype.map_or("", DType::name);
        let left = match self.inexact.len() {
            0 => String::new(),
            n => format!(
                "; left float32 ({n}, a value {dtype} does not hold): {}",
                self.inexact.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
            ),
        };
        format!(
            "stage {:<18} {} weight(s) stored {dtype}, cast to float32 in the graph: {} -> {} bytes{left}",
            format!("weights {dtype}"),
            self.weights,
            self.bytes_before,
            self.bytes_after,
        )
    }
}

/// Stores the float32 weights matmuls (directly or through a `Transpose`)
/// and gathers read in `dtype` (bfloat16 or float16) where it holds their
/// values, each read through a `Cast` to float32 added in front of the
/// nodes; `keep` are graph outputs.
pub fn store_weights(
    nodes: &mut Vec<Node>,
    initializers: &mut [Initializer],
    keep: &HashSet<&str>,
    dtype: DType,
    report: &mut CompressReport,
) {
    report.dtype = Some(dtype);
    let index = super::fold::initializer_positions(initializers);
    let float32 = DType::Float32.onnx();
    // A `torch.nn.Linear`'s weight the optimizer does not store transposed
    // reaches its matmul through a `Transpose` (`emit::linear_weights_transposed`).
    let multiplied: HashSet<&str> = nodes
        .iter()
        .filter(|n| n.domain.is_empty() && matches!(n.op_type.as_str(), "MatMul" | "Gemm"))
        .flat_map(|n| n.inputs.iter().take(2).map(String::as_str))
        .collect();
    let mut weights: Vec<usize> = Vec::new();
    for node in nodes.iter().filter(|n| n.domain.is_empty() && n.function.is_none()) {
        let operands: &[usize] = match node.op_type.as_str() {
            "MatMul" | "Gemm" => &[0, 1],
            "Gather" => &[0],
            "Transpose" if node.outputs.iter().any(|o| multiplied.contains(o.as_str())) => &[0],
            _ => continue,
        };
        for &operand in operands {
            let Some(&i) = node.inputs.get(operand).and_then(|name| index.get(name)) else {
                continue;
            };
            let name = node.inputs[operand].as_str();
            if initializers[i].header.data_type == float32
                && !keep.contains(name)
                && !weights.contains(&i)
            {
                weights.push(i);
            }
        }
    }
    let taken: HashSet<String> =
        nodes.iter().flat_map(|n| n.outputs.iter().cloned()).chain(index.keys().cloned()).collect();
    let mut casts = Vec::new();
    let mut renames: HashMap<String, String> = HashMap::new();
    for i in weights {
        let init = &mut initializers[i];
        let name = init.header.name.clone().unwrap_or_default();
        let cast_name = format!("{name}/{}", DType::Float32.name());
        let Some(bytes) = narrowed(&init.bytes, dtype).filter(|_| !taken.contains(&cast_name))
        else {
            report.inexact.push(name);
            continue;
        };
        report.bytes_before += init.bytes.len() as u64;
        report.bytes_after += bytes.len() as u64;
        report.weights += 1;
        init.bytes = bytes;
        init.header.data_type = dtype.onnx();
        casts.push(Node {
            op_type: "Cast".into(),
            domain: String::new(),
            inputs: vec![name.clone()],
            outputs: vec![cast_name.clone()],
            attributes: vec![("to".into(), Attribute::Int(DType::Float32.onnx_code().into()))],
            function: None,
        });
        renames.insert(name, cast_name);
    }
    for node in nodes.iter_mut().filter(|n| n.function.is_none()) {
        for input in node.inputs.iter_mut() {
            if let Some(cast) = renames.get(input.as_str()) {
                *input = cast.clone();
            }
        }
    }
    casts.append(nodes);
    *nodes = casts;
}

/// float32 `bytes` as they stream in `dtype`, if that holds every value:
/// by construction for bytes converted from it (a checkpoint's weight), else
/// once each element is checked. The layout (transposed or not, the runs of
/// a weight's part) is kept.
fn narrowed<'a>(bytes: &Bytes<'a>, dtype: DType) -> Option<Bytes<'a>> {
    // The conversion from a source of dtype `from` to `dtype`, if its values keep.
    let narrowing = |source: &[u8], from: DType| match Cast::new(from, dtype) {
        None => Some(None),
        Some(cast) => holds(source, from, dtype).then_some(Some(cast)),
    };
    Some(match *bytes {
        Bytes::Mapped(source) => match narrowing(source, DType::Float32)? {
            Some(cast) => Bytes::Converted { source, cast },
            None => Bytes::Mapped(source),
        },
        Bytes::Converted { source, cast } => match narrowing(source, cast.from())? {
            Some(cast) => Bytes::Converted { source, cast },
            None => Bytes::Mapped(source),
        },
        Bytes::Transposed { source, rows, cols, element, cast } => {
            let from = cast.map_or(DType::Float32, Cast::from);
            Bytes::Transposed { source, rows, cols, element, cast: narrowing(source, from)? }
        }
        Bytes::Owned(ref values) => {
            let cast = narrowing(values, DType::Float32)??;
            let mut out = Vec::with_capacity(cast.output_len(values.len()));
            cast.write(values, &mut out).ok()?;
            Bytes::Owned(out)
        }
        Bytes::Concatenated { ref parts, outer } => {
            let parts = parts.iter().map(|part| narrowed(part, dtype)).collect::<Option<_>>()?;
            Bytes::concatenated(parts, outer).ok()?
        }
        Bytes::Int4 { .. } | Bytes::Int8 { .. } => return None,
    })
}

/// Whether every element of `source` (of dtype `from`) is a value of `to`.
fn holds(source: &[u8], from: DType, to: DType) -> bool {
    source.chunks_exact(from.size()).all(|element| {
        let value = match from {
            DType::Bfloat16 => half::bf16::from_le_bytes([element[0], element[1]]).to_f32(),
            DType::Float16 => half::f16::from_le_bytes([element[0], element[1]]).to_f32(),
            _ => f32::from_le_bytes([element[0], element[1], element[2], element[3]]),
        };
        let back = match to {
            DType::Bfloat16 => half::bf16::from_f32(value).to_f32(),
            DType::Float16 => half::f16::from_f32(value).to_f32(),
            _ => value,
        };
        back == value || (back.is_nan() && value.is_nan())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::fold::testing::*;

    fn bf16_exact(values: &[f32]) -> Vec<f32> {
        values.iter().map(|&v| half::bf16::from_f32(v).to_f32()).collect()
    }

    /// The values an initializer holds, float32 or 16-bit, as float32.
    fn values(inits: &[Initializer], name: &str) -> (DType, Vec<f32>) {
        let init = inits.iter().find(|i| i.header.name.as_deref() == Some(name)).unwrap();
        let dtype = DType::from_onnx(init.header.data_type.unwrap()).unwrap();
        let bytes = init.bytes.to_vec();
        let values = bytes
            .chunks_exact(dtype.size())
            .map(|e| match dtype {
                DType::Bfloat16 => half::bf16::from_le_bytes([e[0], e[1]]).to_f32(),
                _ => f32::from_le_bytes([e[0], e[1], e[2], e[3]]),
            })
            .collect();
        (dtype, values)
    }

    /// An embedding, a linear layer's weight tied to it (stored transposed: a
    /// MatMul's B) and one read through a Transpose (as OpenVINO's model
    /// keeps it) are stored bfloat16 with their values, each read through
    /// its Cast by every reader; a weight bfloat16 does not hold, and an
    /// operand that is not a matmul's or a gather's, stay.
    #[test]
    fn matmul_and_gather_weights_are_stored_16_bit_behind_a_cast_with_their_values() {
        let table = bf16_exact(&(0..12).map(|v| v as f32 * 0.37 - 2.0).collect::<Vec<_>>());
        let mut transposed = table.clone();
        for r in 0..4 {
            for c in 0..3 {
                transposed[c * 4 + r] = table[r * 3 + c];
            }
        }
        let inexact: Vec<f32> = (0..12).map(|v| 1.0 + v as f32 / 1024.0).collect();
        let mut nodes = vec![
            node("Gather", &["embed", "ids"], "rows", vec![]),
            node("MatMul", &["rows", "embed_t"], "logits", vec![]),
            node("MatMul", &["rows", "other"], "other_out", vec![]),
            node("Add", &["logits", "bias"], "y", vec![]),
            node("Mul", &["embed", "embed"], "squares", vec![]),
            node("Transpose", &["linear"], "linear_t", vec![]),
            node("MatMul", &["rows", "linear_t"], "linear_out", vec![]),
        ];
        let mut inits = vec![
            floats("embed", &[4, 3], &table),
            floats("embed_t", &[3, 4], &transposed),
            floats("other", &[3, 4], &inexact),
            floats("bias", &[4], &bf16_exact(&[0.1, 0.2, 0.3, 0.4])),
            floats("linear", &[4, 3], &table),
        ];
        let keep = ["y", "other_out", "squares", "linear_out"].into_iter().collect();
        let mut report = CompressReport::default();
        store_weights(&mut nodes, &mut inits, &keep, DType::Bfloat16, &mut report);
        assert_eq!(report.weights, 3, "{report:?}");
        assert_eq!(report.inexact, ["other"]);
        assert_eq!((report.bytes_before, report.bytes_after), (144, 72));
        assert_eq!(
            ops(&nodes),
            [
                "Cast",
                "Cast",
                "Cast",
                "Gather",
                "MatMul",
                "MatMul",
                "Add",
                "Mul",
                "Transpose",
                "MatMul"
            ]
        );
        assert_eq!(values(&inits, "linear"), (DType::Bfloat16, table.clone()));
        assert_eq!(values(&inits, "embed"), (DType::Bfloat16, table.clone()));
        assert_eq!(values(&inits, "embed_t"), (DType::Bfloat16, transposed));
        assert_eq!(values(&inits, "other"), (DType::Float32, inexact));
        assert_eq!(values(&inits, "bias").0, DType::Float32, "an Add's operand is no weight here");
        assert_eq!(nodes[0].inputs, ["embed"]);
        assert_eq!(nodes[0].attribute("to"), Some(&Attribute::Int(1)));
        assert_eq!(nodes[3].inputs, ["embed/float32", "ids"]);
        assert_eq!(nodes[4].inputs, ["rows", "embed_t/float32"]);
        assert_eq!(nodes[5].inputs, ["rows", "other"]);
        assert_eq!(
            nodes[7].inputs,
            ["embed/float32", "embed/float32"],
            "every reader reads the Cast"
        );
        assert_eq!(nodes[8].inputs, ["linear/float32"], "a matmul's weight through its Transpose");
    }

    /// A weight converted from a bfloat16 checkpoint streams as stored: no
    /// conversion at all, nothing read to check.
    #[test]
    fn a_weight_converted_from_the_dtype_streams_as_the_checkpoint_stores_it() {
        let stored: Vec<u8> = [1.5f32, -0.25, 3.0]
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect();
        let converted = Bytes::Converted {
            source: &stored,
            cast: Cast::new(DType::Bfloat16, DType::Float32).unwrap(),
        };
        assert!(
            matches!(narrowed(&converted, DType::Bfloat16), Some(Bytes::Mapped(b)) if b == stored)
        );
        let half_stored: Vec<u8> = [1.0f32 + 1.0 / 1024.0]
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect();
        let from_half = Bytes::Converted {
            source: &half_stored,
            cast: Cast::new(DType::Float16, DType::Float32).unwrap(),
        };
        assert!(
            narrowed(&from_half, DType::Bfloat16).is_none(),
            "float16's 1 + 2^-10 is no bfloat16"
        );
        assert!(matches!(narrowed(&from_half, DType::Float16), Some(Bytes::Mapped(_))));
    }
}
