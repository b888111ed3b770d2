//! `--quantize int4|int8-dynamic|int8-static`: quantization of an ONNX
//! model's MatMuls, a pass of the optimizer ([`super::passes`]). With int4,
//! each `MatMul` whose B is a 2-D float weight of the checkpoint becomes
//! `com.microsoft::MatMulNBits`
//! (4 bits, blocks of K), the node and initializers ONNX Runtime's
//! `MatMulNBitsQuantizer` writes; each embedding, a `Gather` over such a
//! weight, becomes `com.microsoft::GatherBlockQuantized` over the same
//! blocks along its hidden axis (a tied lm_head reads its own
//! `MatMulNBits` copy: `MatMulNBits` takes its B 3-D, the Gather 2-D). The
//! weights' bytes are quantized as they stream to the file
//! ([`crate::weights::quantize`]), so the model is never a float copy in
//! memory. int8-dynamic makes each MatMul `DynamicQuantizeMatMul`;
//! int8-static writes ONNX Runtime's QDQ format (int8 weights behind
//! `DequantizeLinear`, each activation through a `QuantizeLinear` /
//! `DequantizeLinear` pair whose scale calibration sets:
//! [`super::calibrate`]).
//!
//! It runs before constant folding and `store_weights_transposed`: a
//! `torch.nn.Linear` weight then still reaches its MatMul through
//! `Transpose(W)` with W as the checkpoint stores it, N x K, each output's
//! row contiguous as `MatMulNBits`'s B is laid out, and under its
//! checkpoint name, which `--quantize-exclude` patterns match and the new
//! initializers are named after.

use std::collections::{HashMap, HashSet};

use hfx_dtype::DType;

use super::proto as p;
use super::weights::{Bytes, Initializer};
use super::{Attribute, Node};
use crate::weights::quantize::{Int4Part, Int4Weight, Int8Part, Int8Weight};

/// How `--quantize int4` quantizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Int4Options {
    /// Elements of K per block: 32, 64 or 128.
    pub block: usize,
    /// Zero point 8 everywhere and none stored (ONNX Runtime GenAI's default),
    /// or a zero point per block.
    pub symmetric: bool,
    /// `MatMulNBits`'s `accuracy_level`: the lowest precision its activations
    /// are computed in (0 unset, 1 float32, 2 float16, 3 bfloat16, 4 int8).
    pub accuracy_level: u8,
    /// Weights left float: a pattern with `*` (any run of characters) matches
    /// a whole weight name; one without matches the name or a module's
    /// weights under it (`lm_head` matches `lm_head.weight`).
    pub exclude: Vec<String>,
    /// Embeddings (a `Gather` over a weight) become `GatherBlockQuantized`;
    /// else they stay float, for OpenVINO, whose ONNX frontend converts
    /// `MatMulNBits` but not `GatherBlockQuantized`.
    pub embeddings: bool,
}

impl Default for Int4Options {
    fn default() -> Self {
        // ONNX Runtime GenAI's builder's defaults for CPU: int8 activations
        // make a CPU decode step half again as fast.
        Int4Options {
            block: 32,
            symmetric: true,
            accuracy_level: 4,
            exclude: Vec::new(),
            embeddings: true,
        }
    }
}

/// What quantization did: MatMuls quantized, float weights left float (by
/// name, with why), and the bytes of the model's weights before and after.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct QuantizeReport {
    /// The scheme's name (`int4`); None when nothing was asked.
    pub scheme: Option<String>,
    /// What `int8-static` calibrated on (`MinMax over 8 generated samples`).
    pub calibration: Option<String>,
    /// MatMuls made `MatMulNBits`, and embeddings (Gather) made
    /// `GatherBlockQuantized`.
    pub quantized: usize,
    pub gathers: usize,
    pub excluded: Vec<(String, String)>,
    pub weight_bytes_before: u64,
    pub weight_bytes_after: u64,
    /// The weights quantized (MatMuls' and embeddings'), by name, with the
    /// axis their blocks run along (K: 1 for a weight stored N x K, 0 for
    /// one stored K x N); a weight quantized along both is not here. What
    /// `--verify` round-trips in eager.
    pub weights: std::collections::BTreeMap<String, u32>,
}

impl QuantizeReport {
    /// Whether any weight was quantized.
    pub fn any(&self) -> bool {
        self.quantized + self.gathers > 0
    }

    /// The scheme, where it quantized any weight.
    pub fn applied(&self) -> Option<String> {
        self.scheme.clone().filter(|_| self.any())
    }

    /// The summary's line: what was quantized, what was left float and
    /// why (a few names per reason), and the weights' bytes before and after.
    pub fn line(&self) -> String {
        let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
        for (name, why) in &self.excluded {
            match reasons.iter_mut().find(|(w, _)| w == why) {
                Some((_, names)) => names.push(name),
                None => reasons.push((why, vec![name])),
            }
        }
        let excluded: Vec<String> = reasons
            .iter()
            .map(|(why, names)| {
                let more = names.len().saturating_sub(3);
                let more = if more > 0 { format!(" and {more} more") } else { String::new() };
                format!("{why}: {}{more}", names[..names.len().min(3)].join(", "))
            })
            .collect();
        format!(
            "stage {:<18} {} MatMul(s) -> {}{}{}; left float: {}; weights {} -> {} bytes ({:.2}x)",
            format!("quantize {}", self.scheme.as_deref().unwrap_or("")),
            self.quantized,
            match self.scheme.as_deref() {
                Some("int4") => "MatMulNBits",
                Some("int8-static") => "int8 QDQ (uint8 activations)",
                _ => "DynamicQuantizeMatMul",
            },
            if self.scheme.as_deref() == Some("int4") {
                format!(", {} Gather(s) -> GatherBlockQuantized", self.gathers)
            } else {
                String::new()
            },
            self.calibration.as_ref().map(|c| format!(", calibrated: {c}")).unwrap_or_default(),
            if excluded.is_empty() { "none".to_string() } else { excluded.join("; ") },
            self.weight_bytes_before,
            self.weight_bytes_after,
            self.weight_bytes_after as f64 / self.weight_bytes_before.max(1) as f64
        )
    }
}

/// Custom domain of `MatMulNBits`.
pub const MICROSOFT: &str = "com.microsoft";

const FLOATS: [DType; 3] = [DType::Float32, DType::Float16, DType::Bfloat16];

/// Whether `pattern` excludes the weight `name`.
pub fn matches(pattern: &str, name: &str) -> bool {
    if !pattern.contains('*') {
        return name == pattern || name.starts_with(&format!("{pattern}."));
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// What `--quantize` names: a scheme and its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Quantize {
    Int4(Int4Options),
    /// int8 weights per output channel, activations quantized at run time
    /// (`com.microsoft::DynamicQuantizeMatMul`); the weights left float.
    Int8Dynamic {
        exclude: Vec<String>,
    },
    /// ONNX Runtime's QDQ format (`quantize_static(quant_format=QDQ,
    /// per_channel=True)`): int8 weights per output channel behind a
    /// `DequantizeLinear`, and each quantized MatMul's activation input
    /// through a `QuantizeLinear` / `DequantizeLinear` pair (uint8, one scale
    /// per tensor) whose scale and zero point calibration sets
    /// ([`super::calibrate`]); written with scale 1 and zero point 0 until then.
    Int8Static {
        exclude: Vec<String>,
        calibration: Calibration,
    },
}

/// What `int8-static` calibrates on: `samples` inputs varied from the eager
/// reference's (`--calibration-samples`), or the recorded inputs of a `.npz`
/// file (`--calibration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calibration {
    pub samples: u32,
    pub file: Option<std::path::PathBuf>,
}

/// `--calibration-samples`'s default: ONNX Runtime's MinMax settles within a
/// few samples of random tokens (see `verify::INT8_STATIC`).
pub const CALIBRATION_SAMPLES: u32 = 8;

impl Quantize {
    /// The scheme's name, as `--quantize` takes it.
    pub fn name(&self) -> &'static str {
        match self {
            Quantize::Int4(_) => "int4",
            Quantize::Int8Dynamic { .. } => "int8-dynamic",
            Quantize::Int8Static { .. } => "int8-static",
        }
    }

    fn exclude(&self) -> &[String] {
        match self {
            Quantize::Int4(options) => &options.exclude,
            Quantize::Int8Dynamic { exclude } | Quantize::Int8Static { exclude, .. } => exclude,
        }
    }
}

/// Quantizes the MatMuls of `nodes` per `quantize`, counting in `report`;
/// `keep`: the graph outputs' names.
pub fn run<'a>(
    nodes: &mut Vec<Node>,
    initializers: &mut Vec<Initializer<'a>>,
    keep: &HashSet<&str>,
    quantize: &Quantize,
    report: &mut QuantizeReport,
) {
    report.scheme = Some(quantize.name().into());
    report.weight_bytes_before = read_weight_bytes(nodes, initializers);
    let index = super::fold::initializer_positions(initializers);
    // A weight read through `Transpose(perm [1, 0])`, by the transpose's output.
    let transposed: HashMap<&str, &str> = nodes
        .iter()
        .filter(|n| {
            n.op_type == "Transpose"
                && n.domain.is_empty()
                && n.inputs.len() == 1
                && matches!(n.attribute("perm"), Some(Attribute::Ints(p)) if p == &[1, 0])
                && index.contains_key(&n.inputs[0])
        })
        .map(|n| (n.outputs[0].as_str(), n.inputs[0].as_str()))
        .collect();
    let is_float = |init: &Initializer| {
        init.header.data_type.and_then(DType::from_onnx).is_some_and(|d| FLOATS.contains(&d))
    };
    let mut excluded: Vec<(String, String)> = Vec::new();
    let mut rewrites: Vec<Rewrite<'a>> = Vec::new();
    // int8-static's activations given a QuantizeLinear / DequantizeLinear pair.
    let mut activations: HashSet<&str> = HashSet::new();
    let constants: HashSet<&str> = index.keys().map(String::as_str).collect();
    // The weights reported left float, and those a MatMul quantized.
    let mut done: HashSet<String> = HashSet::new();
    let mut matmul_weights: HashSet<String> = HashSet::new();
    // Each weight quantized, and the axis along which (a weight may be read both ways).
    let mut axes: Vec<(String, u32)> = Vec::new();
    let mut gathers: Vec<(usize, Node, Vec<Initializer<'a>>)> = Vec::new();
    let mut gathered: HashSet<String> = HashSet::new();
    for (position, node) in nodes.iter().enumerate() {
        if node.op_type == "Gather" && node.domain.is_empty() && node.inputs.len() == 2 {
            if let Some(&i) = index.get(&node.inputs[0]) {
                let init = &initializers[i];
                if is_float(init) {
                    let quantized = match quantize {
                        Quantize::Int4(options) => embedding(node, init, options),
                        Quantize::Int8Dynamic { .. } | Quantize::Int8Static { .. } => {
                            Err("embedding (Gather)".into())
                        }
                    };
                    match quantized {
                        Ok((node, new)) => {
                            // An embedding two Gathers read is quantized once.
                            let weight = init.header.name.clone().unwrap();
                            axes.push((weight.clone(), 1));
                            let first = gathered.insert(weight);
                            gathers.push((position, node, if first { new } else { Vec::new() }));
                        }
                        Err(why) => {
                            if done.insert(node.inputs[0].clone()) {
                                excluded.push((node.inputs[0].clone(), why));
                            }
                        }
                    }
                }
            }
        }
        // A `Gemm` over a weight (a `Conv1D`'s `addmm`) is its MatMul, then its bias added.
        let gemm = Gemm::of(node);
        let original = node;
        let (node, trans_b) = match &gemm {
            Some(gemm) => (&gemm.matmul, gemm.trans_b),
            None if node.op_type == "MatMul"
                && node.domain.is_empty()
                && node.inputs.len() == 2 =>
            {
                (node, false)
            }
            None => continue,
        };
        let b = node.inputs[1].as_str();
        // The weight, whether the MatMul reads it transposed (stored N x K),
        // and whether through a `Transpose` node.
        let (name, stored_n_by_k, through_transpose) = match transposed.get(b) {
            Some(&w) if !keep.contains(b) && !trans_b => (w, true, true),
            _ if index.contains_key(b) => (b, trans_b, false),
            _ => continue,
        };
        let init = &initializers[index[name]];
        if !is_float(init) {
            continue;
        }
        let quantized = streamed(name, init, quantize.exclude()).and_then(|streamed| {
            let (d0, d1) = (init.header.dims[0] as usize, init.header.dims[1] as usize);
            let (k, n) = if stored_n_by_k { (d1, d0) } else { (d0, d1) };
            let weight =
                Weight { name, source: streamed.0, stored: streamed.1, k, n, stored_n_by_k };
            let alone = |(node, new)| (node, new, Vec::new());
            match quantize {
                Quantize::Int4(options) => {
                    Ok(alone(matmul_nbits(node, weight, streamed.2, options)))
                }
                Quantize::Int8Dynamic { .. } => {
                    dynamic_quantize_matmul(node, weight, streamed.2).map(alone)
                }
                Quantize::Int8Static { .. } => {
                    if constants.contains(node.inputs[0].as_str()) || node.function.is_some() {
                        return Err("a MatMul of two constants or inside a function".into());
                    }
                    qdq_matmul(node, weight, streamed.2)
                }
            }
        });
        let (quantized, new, mut before) = match quantized {
            Ok(quantized) => quantized,
            Err(why) => {
                if done.insert(name.to_string()) {
                    excluded.push((name.to_string(), why));
                }
                continue;
            }
        };
        axes.push((name.to_string(), if stored_n_by_k { 1 } else { 0 }));
        // A weight two MatMuls read is quantized once (and dequantized once).
        let mut new = if matmul_weights.insert(name.to_string()) {
            new
        } else {
            before.clear();
            Vec::new()
        };
        // An activation several MatMuls read (q, k and v's) is quantized once.
        let activation = &original.inputs[0];
        if matches!(quantize, Quantize::Int8Static { .. }) && activations.insert(activation) {
            let (pair, parameters) = activation_qdq(activation, node.function.clone());
            before.extend(pair);
            new.extend(parameters);
        }
        let transpose = through_transpose.then(|| b.to_string());
        let quantized = match gemm.and_then(|g| g.bias_add) {
            Some(add) => {
                before.push(quantized);
                add
            }
            None => quantized,
        };
        rewrites.push((position, quantized, new, transpose, before));
    }
    report.quantized += rewrites.len();
    report.gathers += gathers.len();
    let mut conflicting = Vec::new();
    for (name, axis) in axes {
        if *report.weights.entry(name.clone()).or_insert(axis) != axis {
            conflicting.push(name);
        }
    }
    for name in conflicting {
        report.weights.remove(&name);
    }
    for (position, node, new) in gathers {
        nodes[position] = node;
        initializers.extend(new);
    }
    let mut unread = HashSet::new();
    let mut inserted: HashMap<usize, Vec<Node>> = HashMap::new();
    for (position, node, new, transpose, before) in rewrites {
        nodes[position] = node;
        initializers.extend(new);
        unread.extend(transpose);
        inserted.insert(position, before);
    }
    if !inserted.is_empty() {
        // The nodes a rewrite reads go right before it: the graph stays in
        // topological order (a MatMul's activation comes before it).
        let mut placed = Vec::with_capacity(nodes.len() + 3 * inserted.len());
        for (position, node) in std::mem::take(nodes).into_iter().enumerate() {
            placed.extend(inserted.remove(&position).unwrap_or_default());
            placed.push(node);
        }
        *nodes = placed;
    }
    // The transposes the MatMuls read their weights through, where nothing
    // else reads them.
    let read: HashSet<String> = nodes.iter().flat_map(|n| n.inputs.iter().cloned()).collect();
    unread.retain(|t| !read.contains(t));
    nodes.retain(|n| !(n.op_type == "Transpose" && unread.contains(&n.outputs[0])));
    report.excluded.extend(excluded);
    report.weight_bytes_after = read_weight_bytes(nodes, initializers);
}

/// A MatMul's rewrite: its position, the new node, its new initializers,
/// the transpose it read its weight through and the nodes that go before it.
type Rewrite<'a> = (usize, Node, Vec<Initializer<'a>>, Option<String>, Vec<Node>);

/// A MatMul's 2-D weight, K x N as it reads it, and what it streams from.
struct Weight<'w, 'a> {
    name: &'w str,
    source: &'a [u8],
    stored: DType,
    k: usize,
    n: usize,
    stored_n_by_k: bool,
}

/// `node` as `MatMulNBits` over `weight` quantized to 4 bits, and its new
/// initializers.
fn matmul_nbits<'a>(
    node: &Node,
    weight: Weight<'_, 'a>,
    scale: DType,
    options: &Int4Options,
) -> (Node, Vec<Initializer<'a>>) {
    let Weight { name, source, stored, k, n, stored_n_by_k } = weight;
    let weight = Int4Weight {
        k,
        n,
        stored_n_by_k,
        stored,
        scale,
        block: options.block,
        symmetric: options.symmetric,
    };
    let mut parts =
        vec![(Int4Part::Packed, "_Q4", DType::Uint8), (Int4Part::Scales, "_scales", scale)];
    if !options.symmetric {
        parts.push((Int4Part::ZeroPoints, "_zero_points", DType::Uint8));
    }
    let new: Vec<Initializer<'a>> = parts
        .into_iter()
        .map(|(part, suffix, dtype)| Initializer {
            header: p::TensorProto {
                dims: weight.dims(part),
                data_type: dtype.onnx(),
                name: Some(format!("{name}{suffix}")),
                ..Default::default()
            },
            bytes: Bytes::Int4 { source, weight, part },
        })
        .collect();
    let attribute = |name: &str, value: usize| (name.to_string(), Attribute::Int(value as i64));
    let attributes = vec![
        attribute("K", k),
        attribute("N", n),
        attribute("bits", 4),
        attribute("block_size", options.block),
        attribute("accuracy_level", usize::from(options.accuracy_level)),
    ];
    (contrib_matmul(node, "MatMulNBits", &new, attributes), new)
}

/// `node`, a MatMul, as ONNX Runtime's `op_type` over its activations and
/// the quantized weight's initializers `new`.
fn contrib_matmul(
    node: &Node,
    op_type: &str,
    new: &[Initializer],
    attributes: Vec<(String, Attribute)>,
) -> Node {
    let mut inputs = vec![node.inputs[0].clone()];
    inputs.extend(new.iter().filter_map(|i| i.header.name.clone()));
    Node {
        op_type: op_type.into(),
        domain: MICROSOFT.into(),
        inputs,
        outputs: node.outputs.clone(),
        attributes,
        function: node.function.clone(),
    }
}

/// Suffixes of the values and initializers `int8-static` adds per
/// activation: `QuantizeLinear`'s output, `DequantizeLinear`'s (which the
/// MatMuls read), the scale and the zero point calibration sets.
pub const ACTIVATION_QUANTIZED: &str = "_activation_quantized";
pub const ACTIVATION_DEQUANTIZED: &str = "_activation_dequantized";
pub const ACTIVATION_SCALE: &str = "_activation_scale";
pub const ACTIVATION_ZERO_POINT: &str = "_activation_zero_point";

/// `node`, a float32 MatMul, reading `weight` quantized to int8 per output
/// channel through a `DequantizeLinear` (axis 1: N), and its activation
/// through the pair [`activation_qdq`] adds; the new MatMul, the weight's
/// initializers and the `DequantizeLinear` that goes before it; or why it
/// stays float.
fn qdq_matmul<'a>(
    node: &Node,
    weight: Weight<'_, 'a>,
    scale: DType,
) -> Result<(Node, Vec<Initializer<'a>>, Vec<Node>), String> {
    let (name, n) = (weight.name, weight.n);
    // QuantizeLinear takes a float16 scale from opset 19 only; hfx writes 18.
    let mut new = int8_per_channel(weight, scale, "int8-static quantizes float32 MatMuls")?;
    // Symmetric: a zero point of 0 per channel, as `quantize_static` writes it.
    new.push(Initializer {
        header: p::TensorProto {
            dims: vec![n as i64],
            data_type: DType::Int8.onnx(),
            name: Some(format!("{name}_zero_point")),
            ..Default::default()
        },
        bytes: Bytes::Owned(vec![0; n]),
    });
    let dequantize = Node {
        op_type: "DequantizeLinear".into(),
        domain: String::new(),
        inputs: new.iter().filter_map(|i| i.header.name.clone()).collect(),
        outputs: vec![dequantized(name)],
        attributes: vec![("axis".into(), Attribute::Int(1))],
        function: node.function.clone(),
    };
    let mut matmul = node.clone();
    matmul.inputs = vec![format!("{}{ACTIVATION_DEQUANTIZED}", node.inputs[0]), dequantized(name)];
    Ok((matmul, new, vec![dequantize]))
}

/// The float weight `name` as its `DequantizeLinear` computes it.
fn dequantized(name: &str) -> String {
    format!("{name}_dequantized")
}

/// `QuantizeLinear(activation)` (uint8, one scale) and its
/// `DequantizeLinear`, with the scale and zero point as initializers that
/// calibration sets (1 and 0 until then). uint8: the asymmetric range of an
/// activation (a SiLU's, a norm's output) uses all 256 levels, and u8 x s8
/// is the product MLAS's x86 kernels compute natively (s8 x s8 is computed
/// as u8 x s8 after shifting by 128).
fn activation_qdq<'a>(
    activation: &str,
    function: Option<String>,
) -> ([Node; 2], [Initializer<'a>; 2]) {
    let name = |suffix: &str| format!("{activation}{suffix}");
    let parameters = [
        (ACTIVATION_SCALE, DType::Float32, 1f32.to_le_bytes().to_vec()),
        (ACTIVATION_ZERO_POINT, DType::Uint8, vec![0]),
    ]
    .map(|(suffix, dtype, bytes)| Initializer {
        header: p::TensorProto {
            data_type: dtype.onnx(),
            name: Some(name(suffix)),
            ..Default::default()
        },
        bytes: Bytes::Owned(bytes),
    });
    let node = |op_type: &str, input: String, output: &str| Node {
        op_type: op_type.into(),
        domain: String::new(),
        inputs: vec![input, name(ACTIVATION_SCALE), name(ACTIVATION_ZERO_POINT)],
        outputs: vec![name(output)],
        attributes: Vec::new(),
        function: function.clone(),
    };
    let pair = [
        node("QuantizeLinear", activation.to_string(), ACTIVATION_QUANTIZED),
        node("DequantizeLinear", name(ACTIVATION_QUANTIZED), ACTIVATION_DEQUANTIZED),
    ];
    (pair, parameters)
}

/// `node` as `DynamicQuantizeMatMul` over `weight` quantized to int8 per
/// output channel, and its new initializers; or why it stays float.
/// ONNX Runtime's `quantize_dynamic` writes `DynamicQuantizeLinear`,
/// `MatMulInteger`, `Cast` and two `Mul`s, which its CPU graph optimizer
/// fuses into this node: written fused, the model runs the same kernel
/// without relying on that fusion (or its optimization level).
fn dynamic_quantize_matmul<'a>(
    node: &Node,
    weight: Weight<'_, 'a>,
    scale: DType,
) -> Result<(Node, Vec<Initializer<'a>>), String> {
    // Its CPU kernel multiplies float32 activations only.
    let new = int8_per_channel(weight, scale, "DynamicQuantizeMatMul takes float32")?;
    Ok((contrib_matmul(node, "DynamicQuantizeMatMul", &new, Vec::new()), new))
}

/// `weight` quantized to int8 per output channel as it streams: its values
/// (`{name}_quantized`, K x N) and scales (`{name}_scale`) as initializers;
/// or, for a weight whose scale is not float32, why it stays float
/// (`float32_only`).
fn int8_per_channel<'a>(
    weight: Weight<'_, 'a>,
    scale: DType,
    float32_only: &str,
) -> Result<Vec<Initializer<'a>>, String> {
    let Weight { name, source, stored, k, n, stored_n_by_k } = weight;
    if scale != DType::Float32 {
        return Err(format!("{} MatMul ({float32_only})", scale.name()));
    }
    let weight = Int8Weight { k, n, stored_n_by_k, stored, scale };
    Ok([(Int8Part::Values, "_quantized", DType::Int8), (Int8Part::Scales, "_scale", scale)]
        .into_iter()
        .map(|(part, suffix, dtype)| Initializer {
            header: p::TensorProto {
                dims: weight.dims(part),
                data_type: dtype.onnx(),
                name: Some(format!("{name}{suffix}")),
                ..Default::default()
            },
            bytes: Bytes::Int8 { source, weight, part },
        })
        .collect())
}

/// The bytes a float weight `name` streams from, their dtype and the
/// scales' dtype; or why it stays float.
fn streamed<'a>(
    name: &str,
    init: &Initializer<'a>,
    exclude: &[String],
) -> Result<(&'a [u8], DType, DType), String> {
    if init.header.dims.len() != 2 {
        return Err("not 2-D".into());
    }
    if let Some(pattern) = exclude.iter().find(|p| matches(p, name)) {
        return Err(format!("--quantize-exclude {pattern}"));
    }
    let exported = init.header.data_type.and_then(DType::from_onnx);
    let (source, stored) = match &init.bytes {
        Bytes::Mapped(source) => (*source, exported),
        Bytes::Converted { source, cast } => (*source, Some(cast.from())),
        _ => (&[][..], None),
    };
    match stored {
        Some(stored) => Ok((source, stored, exported.unwrap_or(DType::Float32))),
        None => Err("computed at export time".into()),
    }
}

/// An embedding, `Gather(W, indices)` over a vocabulary x hidden float
/// weight, as `com.microsoft::GatherBlockQuantized`: W quantized in blocks
/// along the hidden axis, each row as a MatMul's N x K weight's
/// ([`Int4Weight`]); its new initializers, named after W; or why it stays
/// float.
fn embedding<'a>(
    node: &Node,
    init: &Initializer<'a>,
    options: &Int4Options,
) -> Result<(Node, Vec<Initializer<'a>>), String> {
    let name = node.inputs[0].as_str();
    if !options.embeddings {
        return Err(
            "embedding (Gather): OpenVINO's ONNX frontend has no GatherBlockQuantized".into()
        );
    }
    if !matches!(node.attribute("axis"), None | Some(Attribute::Int(0))) {
        return Err("Gather along an axis other than 0".into());
    }
    let (source, stored, scale) = streamed(name, init, &options.exclude)?;
    if scale == DType::Bfloat16 {
        // ONNX Runtime's CPU kernel takes float32 and float16 scales only.
        return Err("bfloat16 embedding (GatherBlockQuantized has no CPU kernel for it)".into());
    }
    let (vocabulary, hidden) = (init.header.dims[0] as usize, init.header.dims[1] as usize);
    if hidden % options.block != 0 {
        // A padded last block would widen each gathered row.
        return Err(format!("hidden size {hidden} not a multiple of the block size"));
    }
    let weight = Int4Weight {
        k: hidden,
        n: vocabulary,
        stored_n_by_k: true,
        stored,
        scale,
        block: options.block,
        symmetric: options.symmetric,
    };
    // GatherBlockQuantized's data keeps W's rank: [vocabulary, hidden / 2].
    let mut parts = vec![
        (Int4Part::Packed, "_gather_Q4", DType::Uint8, vec![vocabulary as i64, hidden as i64 / 2]),
        (Int4Part::Scales, "_gather_scales", scale, weight.dims(Int4Part::Scales)),
    ];
    if !options.symmetric {
        let dims = weight.dims(Int4Part::ZeroPoints);
        parts.push((Int4Part::ZeroPoints, "_gather_zero_points", DType::Uint8, dims));
    }
    let new: Vec<Initializer<'a>> = parts
        .into_iter()
        .map(|(part, suffix, dtype, dims)| Initializer {
            header: p::TensorProto {
                dims,
                data_type: dtype.onnx(),
                name: Some(format!("{name}{suffix}")),
                ..Default::default()
            },
            bytes: Bytes::Int4 { source, weight, part },
        })
        .collect();
    let names: Vec<String> = new.iter().filter_map(|i| i.header.name.clone()).collect();
    let mut inputs = vec![names[0].clone(), node.inputs[1].clone()];
    inputs.extend(names[1..].iter().cloned());
    let attribute = |name: &str, value: usize| (name.to_string(), Attribute::Int(value as i64));
    let quantized = Node {
        op_type: "GatherBlockQuantized".into(),
        domain: MICROSOFT.into(),
        inputs,
        outputs: node.outputs.clone(),
        attributes: vec![
            attribute("gather_axis", 0),
            attribute("quantize_axis", 1),
            attribute("block_size", options.block),
            attribute("bits", 4),
        ],
        function: node.function.clone(),
    };
    Ok((quantized, new))
}

/// A `Gemm` (`Y = A B + C`, what `torch.addmm` becomes) as the MatMul it
/// computes (B transposed by `transB`) and the `Add` of its bias after it,
/// where it is one: `alpha` and `beta` 1, A not transposed, C absent or
/// added as it is.
struct Gemm {
    /// A x B into the Gemm's output, or into the `Add`'s input.
    matmul: Node,
    trans_b: bool,
    bias_add: Option<Node>,
}

impl Gemm {
    fn of(node: &Node) -> Option<Gemm> {
        if node.op_type != "Gemm"
            || !node.domain.is_empty()
            || !(2..=3).contains(&node.inputs.len())
        {
            return None;
        }
        let int = |name| match node.attribute(name) {
            None => Some(0),
            Some(Attribute::Int(v)) => Some(*v),
            Some(_) => None,
        };
        let one = |name| match node.attribute(name) {
            None => true,
            Some(Attribute::Float(v)) => *v == 1.0,
            Some(_) => false,
        };
        if int("transA")? != 0 || !one("alpha") || !one("beta") {
            return None;
        }
        let trans_b = match int("transB")? {
            0 => false,
            1 => true,
            _ => return None,
        };
        let output = node.outputs[0].clone();
        let bias = node.inputs.get(2).filter(|c| !c.is_empty());
        let product = match bias {
            Some(_) => format!("{output}_matmul"),
            None => output.clone(),
        };
        let matmul = Node {
            op_type: "MatMul".into(),
            domain: String::new(),
            inputs: node.inputs[..2].to_vec(),
            outputs: vec![product.clone()],
            attributes: Vec::new(),
            function: node.function.clone(),
        };
        let bias_add = bias.map(|bias| Node {
            op_type: "Add".into(),
            domain: String::new(),
            inputs: vec![product, bias.clone()],
            outputs: vec![output],
            attributes: Vec::new(),
            function: node.function.clone(),
        });
        Some(Gemm { matmul, trans_b, bias_add })
    }
}

/// Bytes of the initializers some node reads: the weights the model will hold.
fn read_weight_bytes(nodes: &[Node], initializers: &[Initializer]) -> u64 {
    let read: HashSet<&str> =
        nodes.iter().flat_map(|n| n.inputs.iter().map(String::as_str)).collect();
    initializers
        .iter()
        .filter(|i| i.header.name.as_deref().is_some_and(|n| read.contains(n)))
        .map(|i| i.bytes.len() as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::fold::testing::{node, ops};

    fn mapped<'a>(name: &str, dims: &[i64], bytes: &'a [u8]) -> Initializer<'a> {
        let header = p::TensorProto {
            dims: dims.to_vec(),
            data_type: DType::Float32.onnx(),
            name: Some(name.into()),
            ..Default::default()
        };
        Initializer { header, bytes: Bytes::Mapped(bytes) }
    }

    #[test]
    fn exclude_patterns_match_whole_names_or_a_modules_weights() {
        assert!(matches("lm_head", "lm_head.weight") && matches("lm_head", "lm_head"));
        assert!(!matches("lm_head", "lm_head_2.weight") && !matches("head", "lm_head.weight"));
        assert!(matches("*.mlp.*", "model.layers.0.mlp.up_proj.weight"));
        assert!(!matches("*.mlp.*", "model.layers.0.self_attn.q_proj.weight"));
        assert!(matches("model.layers.1*.weight", "model.layers.11.mlp.down_proj.weight"));
        assert!(!matches("model.*.q_proj", "model.layers.0.q_proj.weight") && matches("*", "x"));
    }

    /// A `Gemm` over a weight (a `Conv1D`'s `addmm`, K x N; or N x K with
    /// `transB`) is quantized as its MatMul, its bias added after it, under
    /// the Gemm's output; one that scales its product stays as it is.
    #[test]
    fn a_gemm_over_a_weight_is_quantized_as_its_matmul_and_its_bias_added() {
        let (k, n) = (32usize, 8usize);
        let floats: Vec<u8> =
            (0..k * n).flat_map(|i| ((i as f32 * 0.37).sin()).to_le_bytes()).collect();
        let scaled = ("alpha", Attribute::Float(0.5));
        let mut nodes = vec![
            node("Gemm", &["x", "c_fc.weight", "c_fc.bias"], "h", vec![]),
            node("Gemm", &["h", "proj.weight"], "y", vec![("transB", Attribute::Int(1))]),
            node("Gemm", &["y", "scaled.weight"], "z", vec![scaled]),
        ];
        let mut initializers = vec![
            mapped("c_fc.weight", &[k as i64, n as i64], &floats),
            mapped("c_fc.bias", &[n as i64], &floats[..n * 4]),
            mapped("proj.weight", &[n as i64, k as i64], &floats),
            mapped("scaled.weight", &[k as i64, n as i64], &floats),
        ];
        let mut report = QuantizeReport::default();
        let keep = ["z"].into();
        let int4 = Quantize::Int4(Int4Options::default());
        run(&mut nodes, &mut initializers, &keep, &int4, &mut report);
        assert_eq!(ops(&nodes), ["MatMulNBits", "Add", "MatMulNBits", "Gemm"]);
        assert_eq!(nodes[0].outputs, ["h_matmul"]);
        assert_eq!(
            (nodes[1].inputs.as_slice(), nodes[1].outputs[0].as_str()),
            (&["h_matmul".to_string(), "c_fc.bias".to_string()][..], "h")
        );
        assert_eq!((nodes[2].inputs[0].as_str(), nodes[2].outputs[0].as_str()), ("h", "y"));
        // Blocks along K: a column of the K x N weight, a row of the transposed one.
        let weights: Vec<(&str, u32)> =
            report.weights.iter().map(|(name, axis)| (name.as_str(), *axis)).collect();
        assert_eq!(weights, [("c_fc.weight", 0), ("proj.weight", 1)]);
        assert_eq!(report.quantized, 2);
    }

    /// A Linear's weight read through a transpose (twice), a K x N weight
    /// read directly and twice, an embedding, an excluded weight and a 3-D
    /// one: the first two become MatMulNBits over the quantized bytes, each
    /// quantized once, the rest stay float and are reported with why.
    #[test]
    fn matmuls_of_2d_float_weights_become_matmul_nbits_and_the_rest_say_why_not() {
        let (k, n) = (40usize, 8usize);
        let floats: Vec<u8> =
            (0..k * n).flat_map(|i| ((i as f32 * 0.37).sin()).to_le_bytes()).collect();
        let nodes = vec![
            node("Gather", &["embed.weight", "ids"], "x", vec![]),
            node("Transpose", &["q.weight"], "qt", vec![("perm", Attribute::Ints(vec![1, 0]))]),
            node("MatMul", &["x", "qt"], "q", vec![]),
            node("MatMul", &["x", "qt"], "q2", vec![]),
            node("MatMul", &["q", "up"], "u", vec![]),
            node("MatMul", &["q", "up"], "u2", vec![]),
            node("MatMul", &["u", "lm_head.weight"], "logits", vec![]),
            node("MatMul", &["u2", "batched"], "b", vec![]),
        ];
        let initializers = vec![
            mapped("embed.weight", &[n as i64, k as i64], &floats),
            mapped("q.weight", &[n as i64, k as i64], &floats),
            mapped("up", &[k as i64, n as i64], &floats),
            mapped("lm_head.weight", &[k as i64, n as i64], &floats),
            mapped("batched", &[1, k as i64, n as i64], &floats),
        ];
        let (mut nodes, mut initializers) = (nodes, initializers);
        let options =
            Int4Options { symmetric: false, exclude: vec!["lm_head".into()], ..Default::default() };
        let mut report = QuantizeReport::default();
        let keep = ["logits", "b", "q2"].into();
        run(&mut nodes, &mut initializers, &keep, &Quantize::Int4(options), &mut report);
        assert_eq!(
            ops(&nodes),
            [
                "Gather",
                "MatMulNBits",
                "MatMulNBits",
                "MatMulNBits",
                "MatMulNBits",
                "MatMul",
                "MatMul"
            ]
        );
        // Two MatMuls reading one transpose: both quantized, the transpose gone.
        assert_eq!(nodes[2].inputs, nodes[1].inputs);
        let q = &nodes[1];
        assert_eq!((q.domain.as_str(), q.outputs[0].as_str()), (MICROSOFT, "q"));
        assert_eq!(q.inputs, ["x", "q.weight_Q4", "q.weight_scales", "q.weight_zero_points"]);
        let int = |name| match q.attribute(name) {
            Some(Attribute::Int(v)) => *v,
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(
            [int("K"), int("N"), int("bits"), int("block_size"), int("accuracy_level")],
            [40, 8, 4, 32, 4]
        );
        assert_eq!(nodes[4].inputs[1..], nodes[3].inputs[1..]);
        let added: Vec<(&str, &[i64])> = initializers[5..]
            .iter()
            .map(|i| (i.header.name.as_deref().unwrap(), i.header.dims.as_slice()))
            .collect();
        assert_eq!(
            added,
            [
                ("q.weight_Q4", &[8, 2, 16][..]),
                ("q.weight_scales", &[8, 2]),
                ("q.weight_zero_points", &[8, 1]),
                ("up_Q4", &[8, 2, 16]),
                ("up_scales", &[8, 2]),
                ("up_zero_points", &[8, 1]),
            ]
        );
        // The N x K weight read as stored, the K x N one read by columns.
        let expected = |stored_n_by_k| {
            let weight = Int4Weight {
                k,
                n,
                stored_n_by_k,
                stored: DType::Float32,
                scale: DType::Float32,
                block: 32,
                symmetric: false,
            };
            let mut out = Vec::new();
            weight.write(&floats, Int4Part::Packed, &mut out, None).unwrap();
            out
        };
        assert_eq!(initializers[5].bytes.to_vec(), expected(true));
        assert_eq!(initializers[8].bytes.to_vec(), expected(false));
        assert_ne!(expected(true), expected(false));
        let excluded: Vec<(&str, &str)> =
            report.excluded.iter().map(|(n, w)| (n.as_str(), w.as_str())).collect();
        assert_eq!(
            excluded,
            [
                ("embed.weight", "hidden size 40 not a multiple of the block size"),
                ("lm_head.weight", "--quantize-exclude lm_head"),
                ("batched", "not 2-D")
            ]
        );
        assert_eq!(report.quantized, 4);
        // What `--verify` round-trips: each weight once, with the axis of K.
        let weights: Vec<(&str, u32)> =
            report.weights.iter().map(|(name, axis)| (name.as_str(), *axis)).collect();
        assert_eq!(weights, [("q.weight", 1), ("up", 0)]);
        let float = (k * n * 4) as u64;
        let int4 = (8 * 32 + 8 * 2 * 4 + 8) as u64;
        assert_eq!(report.weight_bytes_before, 5 * float);
        assert_eq!(report.weight_bytes_after, 3 * float + 2 * int4);
        assert!(report.line().starts_with("stage quantize int4      4 MatMul(s) -> MatMulNBits, 0 Gather(s) -> GatherBlockQuantized; left float: hidden size 40 not a multiple of the block size: embed.weight; --quantize-exclude lm_head: lm_head.weight; not 2-D: batched; weights"), "{}", report.line());
    }

    /// A tied embedding, read by a Gather and (transposed) by the lm_head's
    /// MatMul: the Gather becomes GatherBlockQuantized over W's rows
    /// quantized as MatMulNBits's N x K rows are, keeping W's rank; the
    /// MatMul its own MatMulNBits; each with its initializers, whichever
    /// reads W first. Excluded by a pattern, both stay float; left float
    /// for its width, the embedding stays a Gather and the MatMul still
    /// gets its initializers.
    #[test]
    fn a_tied_embedding_becomes_gather_block_quantized_and_its_lm_head_matmul_nbits() {
        let (vocabulary, hidden) = (8usize, 64usize);
        let floats: Vec<u8> = (0..vocabulary * hidden)
            .flat_map(|i| ((i as f32 * 0.37).sin()).to_le_bytes())
            .collect();
        let perm = || vec![("perm", Attribute::Ints(vec![1, 0]))];
        let gather = node("Gather", &["embed", "ids"], "x", vec![]);
        let lm_head = [
            node("Transpose", &["embed"], "et", perm()),
            node("MatMul", &["x", "et"], "logits", vec![]),
        ];
        let keep = ["logits"].into();
        for gather_first in [true, false] {
            let cases = [(vec![], 32), (vec!["embed".to_string()], 32), (vec![], 128)];
            for (exclude, block) in cases {
                let mut nodes = vec![gather.clone()];
                if gather_first {
                    nodes.extend(lm_head.iter().cloned());
                } else {
                    nodes.splice(0..0, lm_head.iter().cloned());
                }
                let mut initializers =
                    vec![mapped("embed", &[vocabulary as i64, hidden as i64], &floats)];
                let excluded = !exclude.is_empty();
                let options =
                    Int4Options { block, symmetric: false, exclude, ..Default::default() };
                let mut report = QuantizeReport::default();
                run(&mut nodes, &mut initializers, &keep, &Quantize::Int4(options), &mut report);
                let mut names: HashSet<&str> =
                    initializers.iter().filter_map(|i| i.header.name.as_deref()).collect();
                names.extend(nodes.iter().flat_map(|n| n.outputs.iter().map(String::as_str)));
                for node in &nodes {
                    for input in &node.inputs[..] {
                        let read =
                            names.contains(input.as_str()) || ["x", "ids"].contains(&&**input);
                        assert!(read, "{} reads {input}, which nothing holds", node.op_type);
                    }
                }
                let gather = nodes.iter().find(|n| n.outputs[0] == "x").unwrap();
                assert_eq!(report.quantized, usize::from(!excluded));
                if excluded {
                    assert_eq!((gather.op_type.as_str(), report.gathers), ("Gather", 0));
                    assert_eq!(
                        report.excluded,
                        [("embed".into(), "--quantize-exclude embed".into())]
                    );
                    continue;
                }
                if block == 128 {
                    assert_eq!((gather.op_type.as_str(), report.gathers), ("Gather", 0));
                    let why = "hidden size 64 not a multiple of the block size";
                    assert_eq!(report.excluded, [("embed".into(), why.into())]);
                    continue;
                }
                assert_eq!(report.gathers, 1);
                assert_eq!(report.weights.get("embed"), Some(&1), "{:?}", report.weights);
                assert_eq!(gather.op_type, "GatherBlockQuantized");
                assert_eq!(gather.domain, MICROSOFT);
                assert_eq!(
                    gather.inputs,
                    ["embed_gather_Q4", "ids", "embed_gather_scales", "embed_gather_zero_points"]
                );
                let int = |name| match gather.attribute(name) {
                    Some(Attribute::Int(v)) => *v,
                    other => panic!("{name}: {other:?}"),
                };
                let attributes =
                    [int("gather_axis"), int("quantize_axis"), int("block_size"), int("bits")];
                assert_eq!(attributes, [0, 1, 32, 4]);
                let init = |name: &str| {
                    initializers.iter().find(|i| i.header.name.as_deref() == Some(name)).unwrap()
                };
                assert_eq!(init("embed_gather_Q4").header.dims, [8, 32]);
                assert_eq!(init("embed_gather_scales").header.dims, [8, 2]);
                assert_eq!(init("embed_gather_zero_points").header.dims, [8, 1]);
                // The embedding's rows are the lm_head's N x K rows, quantized alike.
                for (gathered, multiplied) in [("_gather_Q4", "_Q4"), ("_gather_scales", "_scales")]
                {
                    assert_eq!(
                        init(&format!("embed{gathered}")).bytes.to_vec(),
                        init(&format!("embed{multiplied}")).bytes.to_vec()
                    );
                }
                assert!(report.excluded.is_empty(), "{:?}", report.excluded);
            }
        }
    }

    /// int8-dynamic: a Linear's weight read through a transpose becomes
    /// DynamicQuantizeMatMul over its int8 values (K x N) and per-channel
    /// scales, the transpose gone; a float16 MatMul and the embedding stay
    /// float, each with why.
    #[test]
    fn int8_dynamic_matmuls_become_dynamic_quantize_matmul() {
        let (k, n) = (40usize, 8usize);
        let floats: Vec<u8> =
            (0..k * n).flat_map(|i| ((i as f32 * 0.37).sin()).to_le_bytes()).collect();
        let perm = || vec![("perm", Attribute::Ints(vec![1, 0]))];
        let mut nodes = vec![
            node("Gather", &["embed", "ids"], "x", vec![]),
            node("Transpose", &["q.weight"], "qt", perm()),
            node("MatMul", &["x", "qt"], "q", vec![]),
            node("MatMul", &["q", "half"], "h", vec![]),
        ];
        let mut half = mapped("half", &[k as i64, n as i64], &floats[..k * n * 2]);
        half.header.data_type = DType::Float16.onnx();
        let mut initializers = vec![
            mapped("embed", &[n as i64, k as i64], &floats),
            mapped("q.weight", &[n as i64, k as i64], &floats),
            half,
        ];
        let mut report = QuantizeReport::default();
        let quantize = Quantize::Int8Dynamic { exclude: Vec::new() };
        run(&mut nodes, &mut initializers, &["h"].into(), &quantize, &mut report);
        assert_eq!(ops(&nodes), ["Gather", "DynamicQuantizeMatMul", "MatMul"]);
        assert_eq!(nodes[1].domain, MICROSOFT);
        assert_eq!(nodes[1].inputs, ["x", "q.weight_quantized", "q.weight_scale"]);
        let added: Vec<(&str, &[i64], Option<i32>)> = initializers[3..]
            .iter()
            .map(|i| (i.header.name.as_deref().unwrap(), &i.header.dims[..], i.header.data_type))
            .collect();
        let (int8, float) = (DType::Int8.onnx(), DType::Float32.onnx());
        assert_eq!(
            added,
            [("q.weight_quantized", &[40, 8][..], int8), ("q.weight_scale", &[8][..], float)]
        );
        let weight =
            Int8Weight { k, n, stored_n_by_k: true, stored: DType::Float32, scale: DType::Float32 };
        let mut values = Vec::new();
        weight.write(&floats, Int8Part::Values, &mut values, None).unwrap();
        assert_eq!(initializers[3].bytes.to_vec(), values);
        let excluded: Vec<(&str, &str)> =
            report.excluded.iter().map(|(n, w)| (n.as_str(), w.as_str())).collect();
        assert_eq!(
            excluded,
            [
                ("embed", "embedding (Gather)"),
                ("half", "float16 MatMul (DynamicQuantizeMatMul takes float32)")
            ]
        );
        assert_eq!((report.quantized, report.gathers), (1, 0));
        assert!(report.line().starts_with("stage quantize int8-dynamic 1 MatMul(s) -> DynamicQuantizeMatMul; left float: embedding (Gather): embed; float16"), "{}", report.line());
    }

    /// int8-static: each MatMul over a float32 2-D weight reads it through a
    /// `DequantizeLinear` (int8 K x N, a scale and a zero point of 0 per
    /// output channel, axis 1) and its activation through one
    /// `QuantizeLinear` / `DequantizeLinear` pair per activation (two
    /// MatMuls reading `x` share one), each before the first node that reads
    /// it; a float16 MatMul stays float, with why.
    #[test]
    fn int8_static_matmuls_read_dequantized_weights_and_activations() {
        let (k, n) = (40usize, 8usize);
        let floats: Vec<u8> =
            (0..k * n).flat_map(|i| ((i as f32 * 0.37).sin()).to_le_bytes()).collect();
        let perm = || vec![("perm", Attribute::Ints(vec![1, 0]))];
        let mut nodes = vec![
            node("Transpose", &["q.weight"], "qt", perm()),
            node("MatMul", &["x", "qt"], "q", vec![]),
            node("MatMul", &["x", "up"], "u", vec![]),
            node("MatMul", &["q", "half"], "h", vec![]),
        ];
        let mut half = mapped("half", &[k as i64, n as i64], &floats[..k * n * 2]);
        half.header.data_type = DType::Float16.onnx();
        let mut initializers = vec![
            mapped("q.weight", &[n as i64, k as i64], &floats),
            mapped("up", &[k as i64, n as i64], &floats),
            half,
        ];
        let mut report = QuantizeReport::default();
        let calibration = Calibration { samples: 8, file: None };
        let quantize = Quantize::Int8Static { exclude: Vec::new(), calibration };
        run(&mut nodes, &mut initializers, &["h", "u"].into(), &quantize, &mut report);
        let io = |n: &Node| (n.op_type.clone(), n.inputs.clone(), n.outputs[0].clone());
        let strings = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let expected = [
            (
                "DequantizeLinear",
                &["q.weight_quantized", "q.weight_scale", "q.weight_zero_point"][..],
                "q.weight_dequantized",
            ),
            (
                "QuantizeLinear",
                &["x", "x_activation_scale", "x_activation_zero_point"],
                "x_activation_quantized",
            ),
            (
                "DequantizeLinear",
                &["x_activation_quantized", "x_activation_scale", "x_activation_zero_point"],
                "x_activation_dequantized",
            ),
            ("MatMul", &["x_activation_dequantized", "q.weight_dequantized"], "q"),
            ("DequantizeLinear", &["up_quantized", "up_scale", "up_zero_point"], "up_dequantized"),
            ("MatMul", &["x_activation_dequantized", "up_dequantized"], "u"),
            ("MatMul", &["q", "half"], "h"),
        ];
        let expected: Vec<(String, Vec<String>, String)> =
            expected.iter().map(|(op, i, o)| (op.to_string(), strings(i), o.to_string())).collect();
        assert_eq!(nodes.iter().map(io).collect::<Vec<_>>(), expected);
        assert_eq!(nodes[0].attribute("axis"), Some(&Attribute::Int(1)));
        let init = |name: &str| {
            initializers.iter().find(|i| i.header.name.as_deref() == Some(name)).unwrap()
        };
        let weight =
            Int8Weight { k, n, stored_n_by_k: true, stored: DType::Float32, scale: DType::Float32 };
        let mut values = Vec::new();
        weight.write(&floats, Int8Part::Values, &mut values, None).unwrap();
        assert_eq!(init("q.weight_quantized").bytes.to_vec(), values);
        assert_eq!(init("q.weight_quantized").header.dims, [40, 8]);
        assert_eq!(init("q.weight_zero_point").bytes.to_vec(), [0; 8]);
        assert_eq!(init("q.weight_zero_point").header.data_type, DType::Int8.onnx());
        // Scale 1 and zero point 0 until calibration sets them.
        assert_eq!(init("x_activation_scale").bytes.to_vec(), 1f32.to_le_bytes());
        assert_eq!(init("x_activation_zero_point").header.data_type, DType::Uint8.onnx());
        assert!(init("x_activation_scale").header.dims.is_empty());
        assert_eq!(
            report.excluded,
            [("half".into(), "float16 MatMul (int8-static quantizes float32 MatMuls)".into())]
        );
        assert_eq!(report.quantized, 2);
        assert!(report.line().starts_with("stage quantize int8-static 2 MatMul(s) -> int8 QDQ (uint8 activations); left float"), "{}", report.line());
    }
}
