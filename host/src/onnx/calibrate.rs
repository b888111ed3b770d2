//! `--quantize int8-static`'s calibration, on a written model: the float
//! model calibration runs (each activation's `QuantizeLinear` /
//! `DequantizeLinear` pair bypassed, the activation a graph output), and the
//! pairs' scales and zero points set from the ranges it measured, as ONNX
//! Runtime's MinMax calibrator and `compute_scale_zp` set them (uint8,
//! asymmetric, the range widened to hold 0).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use prost::Message;

use super::proto as p;
use super::quantize::ACTIVATION_SCALE;

#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("parsing {path}: {source}")]
    Parse { path: PathBuf, source: prost::DecodeError },
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{path}: no range measured for activation `{name}`")]
    Unmeasured { path: PathBuf, name: String },
}

fn read(path: &Path) -> Result<p::ModelProto, CalibrateError> {
    let bytes =
        std::fs::read(path).map_err(|source| CalibrateError::Read { path: path.into(), source })?;
    p::ModelProto::decode(bytes.as_slice())
        .map_err(|source| CalibrateError::Parse { path: path.into(), source })
}

fn write(path: &Path, model: &p::ModelProto) -> Result<(), CalibrateError> {
    crate::atomic::write_bytes_atomically(path, &model.encode_to_vec())
        .map_err(|source| CalibrateError::Write { path: path.into(), source })
}

/// The activations of `model` that `int8-static` quantizes: each
/// `QuantizeLinear` whose scale is an activation's, by the value it reads.
fn activations(graph: &p::GraphProto) -> Vec<String> {
    graph.node.iter().filter(|n| is_activation_quantize(n)).map(|n| n.input[0].clone()).collect()
}

/// Whether `node` quantizes an activation (its scale is an activation's).
fn is_activation_quantize(node: &p::NodeProto) -> bool {
    node.op_type.as_deref() == Some("QuantizeLinear")
        && node.input.get(1).is_some_and(|s| s.ends_with(ACTIVATION_SCALE))
}

/// Writes to `out` (beside `model`, whose external data it shares) the
/// float model that calibration runs: `model` with each activation's
/// quantize / dequantize pair bypassed and the activation an output, after
/// the model's own outputs. Returns the activations, in graph order.
pub fn calibration_model(model: &Path, out: &Path) -> Result<Vec<String>, CalibrateError> {
    let mut proto = read(model)?;
    let graph = proto.graph.get_or_insert_with(Default::default);
    let activations = activations(graph);
    // Each pair's dequantized value, by the activation its quantize node
    // reads: found by the nodes' links, whatever the passes after
    // quantization named them.
    let quantized: HashMap<&str, &str> = graph
        .node
        .iter()
        .filter(|n| is_activation_quantize(n))
        .filter_map(|n| Some((n.output.first()?.as_str(), n.input[0].as_str())))
        .collect();
    let bypassed: HashMap<String, String> = graph
        .node
        .iter()
        .filter(|n| n.op_type.as_deref() == Some("DequantizeLinear"))
        .filter_map(|n| {
            let activation = quantized.get(n.input.first()?.as_str())?;
            Some((n.output.first()?.clone(), activation.to_string()))
        })
        .collect();
    graph.node.retain(|n| {
        let quantize = is_activation_quantize(n);
        let dequantize = n.op_type.as_deref() == Some("DequantizeLinear")
            && n.output.first().is_some_and(|o| bypassed.contains_key(o));
        !(quantize || dequantize)
    });
    for node in &mut graph.node {
        for input in &mut node.input {
            if let Some(activation) = bypassed.get(input) {
                *input = activation.clone();
            }
        }
    }
    let float = p::TypeProto {
        value: Some(p::type_proto::Value::TensorType(p::type_proto::Tensor {
            elem_type: Some(p::tensor_proto::DataType::Float as i32),
            shape: None,
        })),
        ..Default::default()
    };
    for activation in &activations {
        graph.output.push(p::ValueInfoProto {
            name: Some(activation.clone()),
            r#type: Some(float.clone()),
            ..Default::default()
        });
    }
    write(out, &proto)?;
    Ok(activations)
}

/// uint8 scale and zero point for values in `min..=max`, as ONNX Runtime's
/// `compute_scale_zp` computes them (float32; the range widened to hold 0,
/// so that 0, a padding's value, is exact; scale 1 for an all-zero range).
pub fn scale_zero_point(min: f64, max: f64) -> (f32, u8) {
    let (min, max) = ((min as f32).min(0.0), (max as f32).max(0.0));
    let scale = (max - min) / 255.0;
    if !scale.is_finite() || scale < f32::MIN_POSITIVE {
        return (1.0, 0);
    }
    let zero_point = (-min / scale).round_ties_even().clamp(0.0, 255.0);
    (scale, zero_point as u8)
}

/// Sets each activation's scale and zero point in the model at `path` from
/// `ranges` (min, max by activation); every activation must have one.
/// Returns how many were set.
pub fn set_ranges(
    path: &Path,
    ranges: &HashMap<String, (f64, f64)>,
) -> Result<usize, CalibrateError> {
    let mut proto = read(path)?;
    let graph = proto.graph.get_or_insert_with(Default::default);
    // The values of each quantize node's scale and zero point, by the
    // initializers' names (named after the value first quantized, which a
    // later pass may have bypassed: the node's input is what is measured).
    let mut values: HashMap<String, Vec<u8>> = HashMap::new();
    let mut activations = 0;
    for node in graph.node.iter().filter(|n| is_activation_quantize(n)) {
        let activation = &node.input[0];
        let Some(&(min, max)) = ranges.get(activation) else {
            return Err(CalibrateError::Unmeasured { path: path.into(), name: activation.clone() });
        };
        let (scale, zero_point) = scale_zero_point(min, max);
        values.insert(node.input[1].clone(), scale.to_le_bytes().to_vec());
        if let Some(name) = node.input.get(2) {
            values.insert(name.clone(), vec![zero_point]);
        }
        activations += 1;
    }
    for init in &mut graph.initializer {
        if let Some(value) = init.name.as_ref().and_then(|n| values.remove(n)) {
            init.raw_data = Some(value);
        }
    }
    write(path, &proto)?;
    Ok(activations)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ONNX Runtime 1.32's `compute_scale_zp(rmin, rmax, 0, 255)` (uint8,
    /// asymmetric) on these ranges, printed by
    /// `[compute_scale_zp(np.float32(a), np.float32(b), 0, 255) for a, b in ...]`.
    #[test]
    fn scales_and_zero_points_are_onnx_runtimes() {
        let (scale, zero_point) = scale_zero_point(-1.0, 3.0);
        assert_eq!(zero_point, 64);
        assert!((scale - 4.0 / 255.0).abs() < 1e-9);
        // The range widened to hold 0.
        assert_eq!(scale_zero_point(0.5, 2.0).1, 0);
        assert_eq!(scale_zero_point(-2.0, -0.5).1, 255);
        assert_eq!(scale_zero_point(0.0, 0.0), (1.0, 0));
        let (scale, zero_point) = scale_zero_point(-0.3, 7.1);
        assert_eq!((format!("{scale:.8}"), zero_point), ("0.02901961".into(), 10));
    }

    fn node(op: &str, inputs: &[&str], output: &str) -> p::NodeProto {
        p::NodeProto {
            op_type: Some(op.into()),
            input: inputs.iter().map(|i| i.to_string()).collect(),
            output: vec![output.into()],
            ..Default::default()
        }
    }

    fn scalar(name: &str, data_type: p::tensor_proto::DataType, raw: Vec<u8>) -> p::TensorProto {
        p::TensorProto {
            name: Some(name.into()),
            data_type: Some(data_type as i32),
            raw_data: Some(raw),
            ..Default::default()
        }
    }

    /// An activation's pair, its quantize node reading a value other than
    /// the one its parameters are named after (a later pass bypassed a
    /// no-op Slice) and its dequantized value renamed: the calibration model
    /// reads the activation itself and outputs it; the ranges then set the
    /// pair's scale and zero point; a model whose activation has no range
    /// is refused, naming it.
    #[test]
    fn the_calibration_model_bypasses_each_pair_and_ranges_set_its_parameters() {
        use p::tensor_proto::DataType;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.onnx");
        let model = p::ModelProto {
            graph: Some(p::GraphProto {
                node: vec![
                    node("QuantizeLinear", &["mul", "s_activation_scale", "s_activation_zp"], "q"),
                    node("DequantizeLinear", &["q", "s_activation_scale", "s_activation_zp"], "dq"),
                    node("MatMul", &["dq", "w"], "out"),
                ],
                initializer: vec![
                    scalar("s_activation_scale", DataType::Float, 1f32.to_le_bytes().to_vec()),
                    scalar("s_activation_zp", DataType::Uint8, vec![0]),
                ],
                output: vec![p::ValueInfoProto { name: Some("out".into()), ..Default::default() }],
                ..Default::default()
            }),
            ..Default::default()
        };
        std::fs::write(&path, model.encode_to_vec()).unwrap();
        let calibration = dir.path().join("m.calibration.onnx");
        assert_eq!(calibration_model(&path, &calibration).unwrap(), ["mul"]);
        let graph = read(&calibration).unwrap().graph.unwrap();
        assert_eq!(graph.node, [node("MatMul", &["mul", "w"], "out")]);
        let outputs: Vec<_> = graph.output.iter().filter_map(|o| o.name.as_deref()).collect();
        assert_eq!(outputs, ["out", "mul"]);
        let ranges = HashMap::from([("mul".to_string(), (-1.0, 3.0))]);
        assert_eq!(set_ranges(&path, &ranges).unwrap(), 1);
        let graph = read(&path).unwrap().graph.unwrap();
        let raw: Vec<_> = graph.initializer.iter().map(|i| i.raw_data.clone().unwrap()).collect();
        assert_eq!(raw, [(4f32 / 255.0).to_le_bytes().to_vec(), vec![64]]);
        let error = set_ranges(&path, &HashMap::new()).unwrap_err();
        assert!(error.to_string().ends_with("no range measured for activation `mul`"), "{error}");
    }
}
