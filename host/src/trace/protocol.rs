//! The worker protocol, host side: every message typed, and lines read with
//! a bound.
//!
//! One JSON object per line. The message types below are the protocol's one
//! definition: `tools/protocol-gen` reads them and writes the worker's
//! `hfx_worker/messages.py` (its dataclasses) and `PROTOCOL` (a hash of their
//! shapes) into both ends; `cargo run -p protocol-gen` after changing one,
//! and a unit test here fails while either end is stale. Requests are
//! serialized from the structs below; everything the worker sends is read
//! into structs with `deny_unknown_fields`, so a line that is too long, not
//! UTF-8, not JSON, or has a missing, unknown or mistyped field is one
//! `TraceError::Protocol` naming the message and the field, never a panic
//! and never a default. Both ends check `PROTOCOL` at `hello`.

use std::collections::BTreeMap;
use std::io::{self, BufRead};
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::TraceError;
use crate::plugins::patching::Scalar;
use crate::plugins::Versions;

/// The protocol version: the first 32 bits of the SHA-256 of the messages'
/// canonical form, written by `cargo run -p protocol-gen` (the worker's
/// `messages.PROTOCOL` is the same number).
pub const PROTOCOL: u64 = 1739732958;

/// The longest line the host accepts from the worker (a response carries
/// metadata, never tensors: the largest seen are well under 1 MiB).
pub const MAX_LINE: usize = 64 << 20;

/// What the worker's stdout gave: a line, or why reading stopped.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    Line(String),
    /// A line longer than the limit (the worker is stopped).
    TooLong(usize),
    /// A line that is not UTF-8.
    NotUtf8,
}

/// Reads one line (without its `\n`) of at most `limit` bytes; `None` at the
/// end of the stream. A last line without a newline is still a line. Never
/// holds more than `limit` bytes (plus one read buffer) of a long line.
pub fn read_line_bounded(reader: &mut impl BufRead, limit: usize) -> io::Result<Option<Incoming>> {
    let mut line = Vec::new();
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            if line.is_empty() {
                return Ok(None);
            }
            break;
        }
        let (taken, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (available.len(), false),
        };
        if line.len() + taken > limit {
            return Ok(Some(Incoming::TooLong(limit)));
        }
        line.extend_from_slice(&available[..taken]);
        reader.consume(if done { taken + 1 } else { taken });
        if done {
            break;
        }
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(Some(match String::from_utf8(line) {
        Ok(text) => Incoming::Line(text),
        Err(_) => Incoming::NotUtf8,
    }))
}

// ── Requests (host → worker) ──

/// A request: its method name, its params (serialized as `params`) and the
/// type of its reply.
pub trait Method: Serialize {
    const NAME: &'static str;
    type Reply: DeserializeOwned;
}

/// `hello`: the host's protocol (the worker refuses another), and where the
/// worker may keep what it computes once per installed package
/// (`import_memo.py`): a folder the host checked as it checks the worker
/// package's; none where that cache is not trusted.
#[derive(Debug, Clone, Serialize)]
pub struct Hello {
    pub protocol: u64,
    /// torch imported right after the reply, while the host goes on: the
    /// requests of a worker that traces or runs a model need it; a worker
    /// that only converts to OpenVINO does not.
    pub warm_up: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memo_dir: Option<PathBuf>,
}

impl Method for Hello {
    const NAME: &'static str = "hello";
    type Reply = HelloReply;
}

/// A patch plugin and the targets the worker swaps for shims.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PatchSpec {
    pub plugin: String,
    pub targets: Vec<String>,
}

/// Where the model comes from, as the worker reads it (`kind` tags the variant).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SourceParams {
    Architecture {
        name: String,
        overrides: BTreeMap<String, String>,
    },
    /// A model folder; `trust_remote_code` reaches `from_pretrained` as given
    /// (never left unset: transformers would then prompt on the protocol's stdin).
    /// `layers`: the config truncated to its first N layers.
    Directory {
        path: PathBuf,
        trust_remote_code: bool,
        layers: Option<u32>,
    },
    Function {
        spec: String,
    },
    /// A Python-level program and its inputs (`hfx_worker/program.py`): a patch plugin's case.
    Program {
        program: Value,
        inputs: BTreeMap<String, CaseValue>,
    },
    /// A component `capture_generation` captured in the same worker (`prefill`, `decode`).
    Captured {
        component: String,
    },
    /// The model the worker's process holds: the Python process that started
    /// hfx and serves this protocol itself (`hfx.export`).
    Caller,
}

/// What the worker decomposes after the trace (`kind` tags the variant).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Decompose {
    /// Nothing: the program as torch.export traced it.
    None,
    /// Everything torch's default decomposition table covers (`--decompose`).
    All,
    /// Only when the program holds an op outside `handled` that the default
    /// table decomposes: then the table minus `handled` (the ops the backend's
    /// translation and FX node fix plugins declare stay whole).
    Missing { handled: Vec<String> },
}

/// One `--dynamic-shapes` range: the input axis `input:axis` varies from
/// `min` to `max`; parsed and checked by the host (`shapes.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AxisRange {
    /// The forward's keyword argument (`input_ids`).
    pub input: String,
    pub axis: u32,
    pub min: u32,
    pub max: u32,
}

/// `trace`: every field is sent; the worker has no defaults.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceParams {
    pub source: SourceParams,
    pub task: Option<String>,
    pub dynamic: bool,
    pub dynamic_shapes: Vec<AxisRange>,
    pub batch: u32,
    pub sequence: u32,
    pub output: PathBuf,
    /// Where the eager reference goes; None: no eager run on real weights
    /// (a streamed model's weights are then never read).
    pub reference: Option<PathBuf>,
    pub decompose: Decompose,
    pub device: String,
    pub dtype: String,
    /// The dtype the model's weights are rounded to before it runs in
    /// `dtype`: a 16-bit model computed in float32 activations, as the
    /// reference's OpenVINO export traces one (`patch_16bit_model`). None:
    /// the weights are in `dtype`.
    pub weights_dtype: Option<String>,
    pub experts: Option<String>,
    pub quantize: Option<EagerQuantize>,
    pub folder: Option<PathBuf>,
    pub weights: Weights,
    /// Streamed weights: the worker sends these weights, with where each
    /// one's bytes are (`Message::WeightsPlan`), before torch.export runs.
    pub plan_weights: Option<PlannedWeights>,
    pub patches: Vec<PatchSpec>,
}

/// Backend preparation: the eager model's linear layers and embeddings
/// quantized by torchao (`quantize_`) before it is traced, as ExecuTorch's
/// own LLM export does: the traced program carries torchao's quantized ops,
/// which the XNNPACK partitioner takes, and the eager reference is the
/// quantized model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EagerQuantize {
    /// The linear layers' scheme, if quantized.
    pub linear: Option<LinearScheme>,
    /// The embeddings' scheme, if quantized.
    pub embeddings: Option<WeightBits>,
    /// Weights per quantization group (along each row's input axis).
    pub group_size: u32,
}

/// An int4 ONNX model's weights as eager holds them for `--verify`: each
/// named weight (a checkpoint name, as its initializer's) quantized in blocks
/// of K and dequantized as the artifact's `MatMulNBits` or
/// `GatherBlockQuantized` does, so the eager reference is the quantized
/// model the artifact computes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Int4RoundTrip {
    /// Each weight, and the axis of it its blocks run along (K): 1 for a
    /// weight stored N x K (an `nn.Linear`'s, an embedding's), 0 for one
    /// stored K x N (a `Conv1D`'s).
    pub weights: BTreeMap<String, u32>,
    /// Elements of each weight's input axis per block.
    pub block: u32,
    /// Zero point 8 for every block, else each block's own.
    pub symmetric: bool,
}

impl EagerQuantize {
    /// As `--quantize` and `--quantize-embeddings` name it: `8da4w`,
    /// `8da4w, embeddings 8w`, `embeddings 4w`.
    pub fn name(&self) -> String {
        let embeddings = self.embeddings.map(|e| format!("embeddings {}", e.name()));
        [self.linear.map(|l| l.name().to_string()), embeddings]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl LinearScheme {
    pub fn name(self) -> &'static str {
        match self {
            LinearScheme::Int8DynamicInt4Weight => "8da4w",
            LinearScheme::Int4Weight => "4w",
            LinearScheme::Int8Weight => "8w",
        }
    }
}

impl WeightBits {
    pub fn name(self) -> &'static str {
        match self {
            WeightBits::Int4 => "4w",
            WeightBits::Int8 => "8w",
        }
    }
}

/// How a linear layer is quantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinearScheme {
    /// int8 activations quantized per token at run time, int4 weights in groups.
    #[serde(rename = "8da4w")]
    Int8DynamicInt4Weight,
    /// Weight-only, int4 in groups.
    #[serde(rename = "4w")]
    Int4Weight,
    /// Weight-only, int8 per output channel.
    #[serde(rename = "8w")]
    Int8Weight,
}

/// A weight-only scheme's bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum WeightBits {
    #[serde(rename = "4w")]
    Int4,
    #[serde(rename = "8w")]
    Int8,
}

/// Where a traced program's weights go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Weights {
    /// Into the `.pt2`, as `torch.export.save` writes them.
    InArchive,
    /// Beside it (`<output>.weights`, indexed by `<output>.weights.json`):
    /// the host maps them and writes them into the artifact.
    Side,
    /// As `Side`, and a model folder's parameters are indexed where its
    /// safetensors hold them: the worker builds the model without reading
    /// them, and reads them only for the eager reference.
    Streamed,
}

/// The weights a trace's plan lists, in the order the host writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlannedWeights {
    /// The `.pt2`'s weight entries, in torch's archive order.
    ArchiveEntries,
    /// The program's parameters then buffers, in its signature's order: an
    /// ONNX model's initializers.
    Parameters,
}

/// Where a traced program's parameters came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightsReport {
    /// Indexed where the model folder's checkpoint holds them.
    pub streamed: bool,
    /// Read into the worker's memory.
    pub loaded: bool,
    /// Why streaming was asked but the weights were loaded.
    pub fallback: Option<String>,
    /// Indexed in hfx's caller's shared memory, where it moved them (`hfx.export`).
    pub caller_memory: bool,
}

impl Method for TraceParams {
    const NAME: &'static str = "trace";
    type Reply = TraceReply;
}

/// `patches_restored`: is each target's original in place (not a shim)?
#[derive(Debug, Clone, Serialize)]
pub struct PatchesRestored {
    pub patches: Vec<PatchSpec>,
}

impl Method for PatchesRestored {
    const NAME: &'static str = "patches_restored";
    type Reply = BTreeMap<String, bool>;
}

/// An artifact `verify` runs, in its runtime.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum VerifyModel {
    /// In ONNX Runtime.
    Onnx { path: PathBuf },
    /// As `torch.export.load(path).module()` (weights inside the `.pt2`).
    Pt2 { path: PathBuf },
    /// In the ExecuTorch runtime; its method's flat inputs are the kwargs
    /// flattened by `in_spec` (torch's pytree JSON, from [`LowerReply`]).
    Pte { path: PathBuf, in_spec: String },
    /// An OpenVINO IR (`.xml`, its `.bin` beside it) on OpenVINO's CPU plugin.
    Openvino { path: PathBuf },
}

impl VerifyModel {
    /// The artifact's file.
    pub fn path_mut(&mut self) -> &mut PathBuf {
        match self {
            VerifyModel::Onnx { path }
            | VerifyModel::Pt2 { path }
            | VerifyModel::Pte { path, .. }
            | VerifyModel::Openvino { path } => path,
        }
    }
}

/// `verify`: an artifact against the eager reference.
#[derive(Debug, Clone, Serialize)]
pub struct Verify {
    pub model: VerifyModel,
    pub reference: PathBuf,
    /// Also at a second input size, for a dynamic export of a generated model.
    pub second_size: bool,
    pub atol: f64,
    pub rtol: f64,
    /// `atol` is a fraction of each output's largest eager magnitude, and
    /// `rtol` unused: a quantized model's error grows with its outputs.
    pub atol_of_max: bool,
    /// An int4 model, against its weights round-tripped in the eager model
    /// the worker traced (not the recorded float outputs).
    pub int4: Option<Int4RoundTrip>,
}

impl Method for Verify {
    const NAME: &'static str = "verify";
    type Reply = VerifyReply;
}

/// `capture_generation`: the worker builds the model and captures the kwargs
/// of its generation components from one `generate` call on its inputs; the
/// `trace` requests that follow name them (`SourceParams::Captured`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaptureGeneration {
    pub source: SourceParams,
    pub task: Option<String>,
    pub batch: u32,
    pub sequence: u32,
    pub device: String,
    pub dtype: String,
    /// As [`TraceParams::weights_dtype`].
    pub weights_dtype: Option<String>,
    pub experts: Option<String>,
    pub quantize: Option<EagerQuantize>,
    pub multi_token_decode: bool,
    /// A static cache of this many positions (`cache_implementation="static"`).
    pub max_cache_len: Option<u32>,
    /// An export folder being written: the model's configs go there.
    pub folder: Option<PathBuf>,
}

impl Method for CaptureGeneration {
    const NAME: &'static str = "capture_generation";
    type Reply = CaptureGenerationReply;
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureGenerationReply {
    pub model_class: String,
    /// In the order `generate` called them.
    pub components: Vec<CapturedComponent>,
    pub seconds: f64,
}

/// A captured component and its tensor inputs' shapes, by leaf path.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapturedComponent {
    pub name: String,
    pub inputs: BTreeMap<String, Vec<u64>>,
}

/// `generate_check`: `steps` greedy tokens through the exported components,
/// each in its runtime, against `model.generate` in eager.
#[derive(Debug, Clone, Serialize)]
pub struct GenerateCheck {
    pub components: BTreeMap<String, VerifyModel>,
    pub steps: u32,
    /// The tolerance of each step's logits.
    pub atol: f64,
    pub rtol: f64,
    /// `atol` is a fraction of each step's largest eager logit magnitude, and
    /// `rtol` unused (a quantized model's tolerance).
    pub atol_of_max: bool,
    /// An ONNX Runtime GenAI folder (`genai_config.json` and its decoder):
    /// its own `Generator` generates `steps` greedy tokens from each prompt row too.
    pub genai: Option<PathBuf>,
    /// Int4 components, against eager `generate` with their weights
    /// round-tripped (the float model's tokens reported beside).
    pub int4: Option<Int4RoundTrip>,
    /// Each step's input is eager's token, not the components' own choice
    /// (a quantized model's check): every step's logits are compared in
    /// eager's context, and each step's tokens are what the components
    /// choose there, so one near-tie costs one token, not the rest of its row.
    pub teacher_forced: bool,
}

impl Method for GenerateCheck {
    const NAME: &'static str = "generate_check";
    type Reply = GenerateCheckReply;
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateCheckReply {
    pub identical: bool,
    /// As the request asked (`GenerateCheck::teacher_forced`).
    pub teacher_forced: bool,
    pub steps: Vec<GenerateStep>,
    /// How many times `generate` called each component.
    pub calls: Vec<ComponentCalls>,
    pub providers: Vec<String>,
    /// The GenAI folder's tokens, when the request named one.
    pub genai: Option<GenaiTokens>,
}

/// Greedy tokens from ONNX Runtime GenAI's `Generator` and from eager
/// `generate`, per prompt row (each row's prompt without its padding).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenaiTokens {
    pub identical: bool,
    pub tokens: Vec<Vec<i64>>,
    pub eager_tokens: Vec<Vec<i64>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentCalls {
    pub name: String,
    pub calls: u64,
    /// A component whose cache is runtime state (a stateful OpenVINO IR):
    /// the calls that loaded a cache into the state (a new sequence's, as
    /// prefill returned it) rather than continuing from the state.
    pub state_loads: Option<u64>,
}

/// One generated position: the token per batch row from the components and
/// from eager, and the max abs error of the logits that chose them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateStep {
    pub tokens: Vec<i64>,
    pub eager_tokens: Vec<i64>,
    pub max_abs: Option<f64>,
    /// The logits within atol/rtol of eager's.
    pub ok: bool,
    /// Where eager is the int4 round trip (`GenerateCheck::int4`): the
    /// components against the float model at this step.
    #[serde(deserialize_with = "present")]
    pub against_float: Option<FloatStep>,
}

/// The components given the float model's greedy tokens before a step
/// (teacher forced), and the float model's own token at it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FloatStep {
    pub tokens: Vec<i64>,
    pub float_tokens: Vec<i64>,
}

/// `generate`: text from an export folder's components, each in its
/// runtime (or from its ONNX Runtime GenAI package with GenAI's own
/// `Generator`), through transformers' `generate` loop as the generation
/// check runs them; the text is sent as it is produced (`Generated`). With
/// `compare`, the source model folder generates eagerly from the same prompt too.
#[derive(Debug, Clone, Serialize)]
pub struct Generate {
    /// The export folder: its `config.json`, `generation_config.json` and tokenizer.
    pub folder: PathBuf,
    /// Each component's artifact and how it is called, as `export.json` records it.
    pub components: BTreeMap<String, FolderComponent>,
    /// Generate with ONNX Runtime GenAI over the folder's `genai_config.json`.
    pub genai: bool,
    pub prompt: String,
    pub max_new_tokens: u32,
    /// Sampling instead of greedy search.
    pub sampling: Option<Sampling>,
    /// The seed of torch's (and GenAI's) random numbers, set before each generation.
    pub seed: u64,
    /// A model folder eager transformers generates from too.
    pub compare: Option<PathBuf>,
}

impl Method for Generate {
    const NAME: &'static str = "generate";
    type Reply = GenerateReply;
}

/// An export folder's component: its artifact, the kwargs it was traced
/// with (in order), its input and output pytree specs (torch's JSON) and its
/// output's constant leaves (`[index, value]`), from its `export.json` metadata.
#[derive(Debug, Clone, Serialize)]
pub struct FolderComponent {
    pub artifact: VerifyModel,
    pub kwargs: Vec<String>,
    pub in_spec: String,
    pub out_spec: String,
    pub out_constants: Vec<Value>,
}

/// `--sample`: temperature and top-k sampling.
#[derive(Debug, Clone, Serialize)]
pub struct Sampling {
    pub temperature: f64,
    /// 0: every token is a candidate.
    pub top_k: u32,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateReply {
    /// The prompt's length in tokens.
    pub prompt_tokens: u32,
    /// What the export generated.
    pub generated: GeneratedTokens,
    /// What eager transformers generated (with `compare`).
    pub eager: Option<GeneratedTokens>,
    pub providers: Vec<String>,
    pub seconds: f64,
}

/// Generated tokens: their ids, each one's text alone, and the whole text.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratedTokens {
    pub ids: Vec<i64>,
    pub pieces: Vec<String>,
    pub text: String,
}

/// `calibrate`: the range (min and max over every sample) of each named
/// activation of each component, run in ONNX Runtime as
/// `--quantize int8-static` calibrates: on `samples` inputs varied from the
/// eager reference's, or on the arrays of `inputs` (a `.npz`); with
/// `generation`, through `generate` with the components in place of the
/// model (a decode step on the cache its prefill wrote).
#[derive(Debug, Clone, Serialize)]
pub struct Calibrate {
    pub components: BTreeMap<String, CalibrationModel>,
    /// The eager reference whose inputs the generated samples vary (without `generation`).
    pub reference: Option<PathBuf>,
    pub samples: u32,
    pub inputs: Option<PathBuf>,
    pub generation: bool,
    /// New tokens per generated sample (with `generation`).
    pub steps: u32,
}

/// A component's float model with the activations to calibrate among its outputs.
#[derive(Debug, Clone, Serialize)]
pub struct CalibrationModel {
    pub path: PathBuf,
    pub activations: Vec<String>,
}

impl Method for Calibrate {
    const NAME: &'static str = "calibrate";
    type Reply = CalibrateReply;
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrateReply {
    pub components: Vec<CalibratedComponent>,
    /// The samples calibrated on.
    pub samples: u32,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibratedComponent {
    pub name: String,
    pub ranges: Vec<ActivationRange>,
}

/// An activation's smallest and largest value over the samples.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivationRange {
    pub name: String,
    pub min: f64,
    pub max: f64,
}

/// `lower`: a `.pt2` (the program after hfx's FX stages) through ExecuTorch's
/// edge lowering with a delegate's partitioner and `to_executorch`, to a `.pte`.
#[derive(Debug, Clone, Serialize)]
pub struct Lower {
    pub program: PathBuf,
    pub output: PathBuf,
    pub delegate: Delegate,
    pub memory: MemoryPlanning,
}

/// `convert_openvino`: an ONNX model hfx wrote, read by OpenVINO's ONNX
/// frontend (`openvino.convert_model`) and saved as OpenVINO IR: `output`
/// (`.xml`) and its weights beside it (`.bin`), each weight at the precision
/// the ONNX model holds it in. `precision`: the IR's recorded runtime
/// precision (`f32`, `f16`, `bf16`), as the reference records it.
/// `stateful`: every cache tensor the model takes and returns under one leaf
/// path (`input.P`, `output.P`) folded into an OpenVINO state variable, with
/// a `beam_idx` input reordering their batch (the reference's
/// `OpenVINOConfig.stateful`); a model with no such pair stays as it is.
/// `compress_to_fp16`: float32 weights stored as float16, decompressed to
/// float32 in the graph (OpenVINO's `compress_model_transformation`, as the
/// reference's `OpenVINOConfig.compress_to_fp16` applies it).
/// `weights_file`: the ONNX model's external data file. A constant whose
/// bytes are still that file's, as OpenVINO's frontend mapped it, is saved
/// as an input instead (`ConvertOpenvinoReply.weights`), which the host
/// makes a constant at those bytes, the file becoming the IR's `.bin`; none:
/// OpenVINO saves every constant.
#[derive(Debug, Clone, Serialize)]
pub struct ConvertOpenvino {
    pub model: PathBuf,
    pub output: PathBuf,
    pub precision: String,
    pub stateful: bool,
    pub compress_to_fp16: bool,
    pub weights_file: Option<PathBuf>,
}

impl Method for ConvertOpenvino {
    const NAME: &'static str = "convert_openvino";
    type Reply = ConvertOpenvinoReply;
}

/// What the conversion made: the IR's operations, and how long OpenVINO's
/// frontend and its writer took.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ConvertOpenvinoReply {
    pub ops: u64,
    /// The state variables the cache was folded into (0: stateless).
    pub states: u64,
    pub convert_seconds: f64,
    pub save_seconds: f64,
    /// The IR's inputs that stand for bytes of the request's `weights_file`.
    pub weights: Vec<WeightInput>,
}

/// An input of the saved IR (`name`) standing for the constant `constant`
/// (its name in OpenVINO's model), whose bytes are `size` bytes of the
/// weights file from `offset` on; its output keeps the constant's tensor names.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WeightInput {
    pub name: String,
    pub constant: String,
    pub offset: u64,
    pub size: u64,
}

/// What ExecuTorch's memory planning places in the program's arena (the
/// reference's `ExecutorchConfig.alloc_graph_input`, `alloc_graph_output`,
/// `alloc_mutable_buffers`). What it leaves out the caller provides at run
/// time: an input's buffer is read, and updated in place, where the caller
/// holds it; an output is written where the caller binds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MemoryPlanning {
    pub graph_inputs: bool,
    pub graph_outputs: bool,
    pub mutable_buffers: bool,
}

impl Default for MemoryPlanning {
    fn default() -> Self {
        MemoryPlanning { graph_inputs: true, graph_outputs: true, mutable_buffers: true }
    }
}

impl Method for Lower {
    const NAME: &'static str = "lower";
    type Reply = LowerReply;
}

/// An ExecuTorch delegate whose partitioner and payload ExecuTorch's own code
/// builds, in the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delegate {
    Xnnpack,
}

impl Delegate {
    pub fn name(self) -> &'static str {
        match self {
            Delegate::Xnnpack => "xnnpack",
        }
    }
}

/// What `lower` made.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LowerReply {
    /// The method's inputs as torch's pytree JSON of `((), kwargs)`.
    pub in_spec: String,
    /// Call nodes the delegate took, and kernel calls left to the portable runtime.
    pub delegated_nodes: u64,
    pub portable_nodes: u64,
    /// The delegate's partitions, and how many of them took the delegate
    /// graph of an earlier partition of the same structure
    /// (`lowering_shortcuts.py`: the same bytes, without preprocessing again).
    pub partitions: u64,
    pub partitions_replayed: u64,
    /// Retraces ExecuTorch would have run that change nothing (a
    /// decomposition, op-replacing passes; `lowering_shortcuts.py`), skipped.
    pub retraces_skipped: u64,
    /// Dtype checks of a graph that had passed them as it is, skipped
    /// (`lowering_shortcuts.py`).
    pub checks_skipped: u64,
    pub edge_seconds: f64,
    pub executorch_seconds: f64,
    pub bytes: u64,
    /// Bytes of the memory ExecuTorch planned for the method's tensors.
    pub arena_bytes: u64,
}

/// `edge_program`: a `.pt2` (the program after hfx's FX stages) decomposed
/// with ExecuTorch's edge decomposition table, saved as a `.pt2`: what the
/// native portable emitter starts from.
#[derive(Debug, Clone, Serialize)]
pub struct EdgeProgram {
    pub program: PathBuf,
    pub output: PathBuf,
}

impl Method for EdgeProgram {
    const NAME: &'static str = "edge_program";
    type Reply = EdgeProgramReply;
}

/// The edge program's method specs (torch's pytree JSON) and how long the decomposition took.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeProgramReply {
    pub in_spec: String,
    pub out_spec: String,
    pub seconds: f64,
    /// The weights are in `<output>.weights` (indexed by its `.json`), not
    /// in the archive: written once, from the tensors' memory.
    pub side_weights: bool,
}

/// `capture_values`: the values at `names` (node outputs, inputs) when the
/// `.pt2` at `program` runs on the reference's sample inputs.
#[derive(Debug, Clone, Serialize)]
pub struct CaptureValues {
    pub program: PathBuf,
    pub reference: PathBuf,
    pub names: Vec<String>,
}

impl Method for CaptureValues {
    const NAME: &'static str = "capture_values";
    type Reply = CaptureValuesReply;
}

/// `capture_program`: the forward of a `python:module:function` model as a
/// Python-level program, for a patch plugin's case.
#[derive(Debug, Clone, Serialize)]
pub struct CaptureProgram {
    pub spec: String,
}

impl Method for CaptureProgram {
    const NAME: &'static str = "capture_program";
    type Reply = CaptureProgramReply;
}

/// What a self-test case's program is compared with.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Candidate {
    /// The program after the plugin, in the IR's JSON form.
    Graph { program: Value },
    /// Its ONNX translation.
    Onnx { path: PathBuf },
}

/// `run_case`: `program` (IR JSON) in the worker's interpreter and `candidate`
/// on the same `values`, compared output by output.
#[derive(Debug, Clone, Serialize)]
pub struct RunCase {
    pub program: Value,
    pub candidate: Candidate,
    pub values: BTreeMap<String, CaseValue>,
    pub atol: f64,
    pub rtol: f64,
}

impl Method for RunCase {
    const NAME: &'static str = "run_case";
    type Reply = RunCaseReply;
}

/// `op_infos`: the OpInfos of torch's `op_db` whose first sample dispatches
/// only `translated` ops, and torch's core ATen overloads.
#[derive(Debug, Clone, Serialize)]
pub struct OpInfos {
    pub translated: Vec<String>,
}

impl Method for OpInfos {
    const NAME: &'static str = "op_infos";
    type Reply = OpInfosReply;
}

/// `op_samples`: one OpInfo's samples, up to `per_dtype` per dtype, each
/// exported (then decomposed where `handled` lacks an op, as a trace is) to a
/// `.pt2` in `folder`; the worker keeps their inputs and eager outputs.
#[derive(Debug, Clone, Serialize)]
pub struct OpSamples {
    pub name: String,
    pub variant: String,
    pub dtypes: Vec<String>,
    pub per_dtype: u32,
    pub handled: Vec<String>,
    pub folder: PathBuf,
}

impl Method for OpSamples {
    const NAME: &'static str = "op_samples";
    type Reply = OpSamplesReply;
}

/// `check_sample`: sample `index` of the last `op_samples` as the ONNX model
/// at `onnx`, in ONNX Runtime against eager.
#[derive(Debug, Clone, Serialize)]
pub struct CheckSample {
    pub index: u32,
    pub onnx: PathBuf,
    pub atol: f64,
    pub rtol: f64,
}

impl Method for CheckSample {
    const NAME: &'static str = "check_sample";
    type Reply = RunCaseReply;
}

/// A value of a self-test case: a tensor (base64 of its little-endian bytes,
/// row-major) or a scalar (a symbolic size's value).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum CaseValue {
    Tensor(CaseTensor),
    Int(i64),
    Float(f64),
    Bool(bool),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseTensor {
    pub dtype: String,
    pub shape: Vec<u64>,
    pub data: String,
}

// ── Replies (worker → host) ──

/// An `Option` field that must be present (`null` for none): serde would
/// otherwise take a missing `Option` for `None`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    Option::<T>::deserialize(d)
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelloReply {
    pub protocol: u64,
    /// The worker's Python version.
    pub python: String,
    /// Upstream packages installed (torch, transformers, onnx, ...).
    pub versions: Versions,
}

/// Seconds per step of the trace request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepSeconds {
    pub import: f64,
    pub build: f64,
    pub eager: f64,
    pub export: f64,
    pub save: f64,
}

/// The worker's peak resident memory (MiB) after each step that moves it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepPeaks {
    pub import: f64,
    pub build: f64,
    pub export: f64,
    pub save: f64,
}

/// The fields of the reference's `ExportMetadata` the worker knows; written to
/// an export folder's `export.json` with the host's `packages` and
/// `export_config`. The kwargs' descriptions and the constants are the
/// reference's JSON, passed through.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportMetadata {
    pub architecture: String,
    pub export_dtype: String,
    pub export_device: String,
    /// In the traced order (the reference's loader reads them as written).
    pub kwargs: serde_json::Map<String, Value>,
    pub in_spec: String,
    pub out_spec: String,
    pub in_constants: serde_json::Map<String, Value>,
    pub out_constants: Vec<Value>,
}

/// An op the worker decomposed: how many nodes of it, into how many nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decomposed {
    pub op: String,
    pub nodes: u64,
    pub became: u64,
}

/// `input:axis` given the range of the `--dynamic-shapes` axis `to_input:to_axis`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TiedAxis {
    pub input: String,
    pub axis: u32,
    pub to_input: String,
    pub to_axis: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceReply {
    /// The traced model's class (`LlamaForCausalLM`).
    pub model_class: String,
    /// Shapes of the traced tensor inputs, by name.
    pub inputs: BTreeMap<String, Vec<u64>>,
    /// How many tensor outputs the program returns.
    pub outputs: u64,
    /// The tensor inputs' names in order: leaf paths (`cache.layers.0.keys`),
    /// `input.`-prefixed where an output has the same name; empty where the
    /// program's own placeholder names stand.
    pub input_names: Vec<String>,
    /// The output leaves' names (`logits`, `cache.layers.0.keys`).
    pub output_names: Vec<String>,
    pub export_metadata: ExportMetadata,
    /// Nodes of the traced graph.
    pub nodes: u64,
    /// For each patch target: whether its original is back in place.
    pub patches_restored: BTreeMap<String, bool>,
    /// Patched calls the worker answered with the program the plugin gave
    /// for a call described the same way (no round trip to the host).
    pub patch_calls_cached: u64,
    pub versions: Versions,
    pub seconds: StepSeconds,
    pub peak_rss_mib: StepPeaks,
    /// Whether the weights went to `<output>.weights` rather than into the `.pt2`.
    pub side_weights: bool,
    pub weights: WeightsReport,
    /// The ops decomposed after the trace (`Decompose::Missing`), in program order.
    pub decomposed: Vec<Decomposed>,
    /// torch.export's guards on input sizes beyond its range constraints
    /// that some other size breaks, simplest first: the program is valid only
    /// where they hold, and no artifact carries them.
    pub size_guards: Vec<SizeGuard>,
    /// Input axes given the range of a `--dynamic-shapes` axis because the
    /// model needs them equal.
    pub tied_axes: Vec<TiedAxis>,
    /// The size symbols of input axes known to be a batch or a sequence (by
    /// the size hfx's sample inputs gave them, else by the input's name), with
    /// the size traced: what ExecuTorch's memory plan bounds them by.
    pub axis_kinds: BTreeMap<String, KnownAxis>,
    /// The longest sequence the model's config allows (`max_position_embeddings`
    /// or its architecture's name for it), if it names one.
    pub max_positions: Option<u64>,
}

/// What an input axis is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AxisKind {
    Batch,
    Sequence,
}

/// An input axis's size symbol whose kind is known, and the size it was traced at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnownAxis {
    pub kind: AxisKind,
    pub traced: u64,
}

/// A guard of torch.export on input sizes and where it breaks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeGuard {
    /// As torch writes it, inputs named: `((4 - input_ids.shape[1] % 4) % 4) <= 0`.
    pub guard: String,
    /// Input shapes where it breaks (the inputs whose shape differs from the trace's).
    pub breaks_at: BTreeMap<String, Vec<u64>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureValuesReply {
    pub values: BTreeMap<String, CaseValue>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureProgramReply {
    pub program: Value,
    pub inputs: BTreeMap<String, CaseValue>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpInfosReply {
    pub infos: Vec<OpInfoRef>,
    pub core: Vec<String>,
}

/// An OpInfo of torch's `op_db`, and the ATen overloads its first sample dispatches.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpInfoRef {
    pub name: String,
    pub variant: String,
    pub ops: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpSamplesReply {
    pub samples: Vec<OpSample>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpSample {
    pub index: u32,
    pub dtype: String,
    /// The sample's tensor shapes and other arguments, for the report.
    pub about: String,
    pub exported: SampleExport,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SampleExport {
    /// The sample's `.pt2`, the ATen overloads it holds, whether its outputs
    /// are compared by shape only (random, or uninitialized memory).
    Program { path: PathBuf, ops: Vec<String>, shape_only: bool },
    /// Why the sample is not a program hfx can be tested on (torch fails, a non-tensor output, ...).
    Skipped { reason: String },
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunCaseReply {
    pub outputs: Vec<Comparison>,
}

/// One output of the ONNX model against eager PyTorch.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Comparison {
    pub shape: Vec<u64>,
    pub expected_shape: Vec<u64>,
    /// `None` when the shapes differ or the error is not finite.
    #[serde(deserialize_with = "present")]
    pub max_abs: Option<f64>,
    #[serde(deserialize_with = "present")]
    pub max_rel: Option<f64>,
    pub ok: bool,
    /// Set for a sliding-window cache layer's output, of which eager keeps
    /// only the last positions along the sequence (`sliding_window - 1`)
    /// while the artifact keeps every one (the layer traced whole, the mask
    /// applying the window): the artifact's last `trailing` positions were
    /// compared.
    #[serde(deserialize_with = "present")]
    pub trailing: Option<u64>,
}

/// The outputs for one set of inputs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    pub inputs: BTreeMap<String, Vec<u64>>,
    pub outputs: Vec<Comparison>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyReply {
    pub checks: Vec<Check>,
    /// ONNX Runtime's execution providers used.
    pub providers: Vec<String>,
}

/// A Python exception the worker reports for a request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonError {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    pub traceback: String,
    /// What the user's input did wrong, where the worker recognized the
    /// failure (`hfx_worker/errors.py`); None: a failure of hfx or its upstreams.
    #[serde(deserialize_with = "present")]
    pub user: Option<UserError>,
}

/// A failure the user's input caused: one line naming the input and the fix.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserError {
    pub kind: UserErrorKind,
    pub line: String,
}

/// What a [`UserError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UserErrorKind {
    /// A file the model needs is absent or unreadable.
    MissingFile,
    /// A checkpoint file shorter than its header says.
    TruncatedFile,
    /// `--model NAME` that transformers does not know.
    UnknownArchitecture,
    /// `--task NAME` that names no model class.
    UnknownTask,
    /// `--set KEY=...` that the model's config does not have.
    UnknownConfigKey,
    /// A patch plugin's program that the worker's sandbox refused.
    SandboxRefusal,
    /// An option this worker's torch cannot carry out (`--device cuda` without a GPU).
    UnsupportedOption,
    /// transformers refused to build the model (its config).
    Model,
    /// A `--dynamic-shapes` range the model's inputs or torch.export refuse.
    ShapeSpec,
}

// ── Notifications during a request (worker → host) ──

/// The steps of a `trace` request, in order (the worker's `protocol.STEPS`).
/// `export` is torch.export under the reference exporter's signature,
/// patches and state-cleanup stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceStep {
    Import,
    Build,
    Eager,
    Export,
    Decompose,
    Save,
}

impl TraceStep {
    /// What the step does, for a progress line.
    pub fn description(self) -> &'static str {
        match self {
            TraceStep::Import => "importing torch",
            TraceStep::Build => "building the model",
            TraceStep::Eager => "running it eagerly (the reference outputs)",
            TraceStep::Export => "torch.export",
            TraceStep::Decompose => "run_decompositions",
            TraceStep::Save => "saving the program",
        }
    }
}

/// `{"progress": {...}}`: a step of the running request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Progress {
    pub stage: TraceStep,
}

/// `{"generated": {...}}`: text `generate` produced since the last, during
/// a `generate` request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generated {
    pub text: String,
}

/// One entry of `{"weights_plan": [...]}` (the worker's
/// `checkpoint.weights_plan`): a weight the artifact will start with (`name`:
/// a `.pt2` entry's, with the archive's folder, or a parameter's), filled
/// from `length` bytes of the checkpoint `file` at `offset`, stored as
/// `stored` and written as `dtype`, of sizes `shape`; `linear_weight`: the
/// `weight` of a `torch.nn.Linear`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannedWeight {
    pub name: String,
    pub file: PathBuf,
    pub offset: u64,
    pub length: u64,
    pub stored: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub linear_weight: bool,
}

/// A Python scalar on the wire: null, a bool, an int (an `i64`; a larger
/// integer arrives as a float, as JSON numbers do), a float or a string.
#[derive(Debug, Clone)]
pub struct WireScalar(pub Scalar);

// (The contract's `Scalar` has no `PartialEq`.)
impl PartialEq for WireScalar {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Scalar::None, Scalar::None) => true,
            (Scalar::Boolean(a), Scalar::Boolean(b)) => a == b,
            (Scalar::Int(a), Scalar::Int(b)) => a == b,
            (Scalar::Float(a), Scalar::Float(b)) => a == b,
            (Scalar::Str(a), Scalar::Str(b)) => a == b,
            _ => false,
        }
    }
}

impl<'de> Deserialize<'de> for WireScalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(WireScalar(match Value::deserialize(d)? {
            Value::Null => Scalar::None,
            Value::Bool(b) => Scalar::Boolean(b),
            Value::Number(n) => match (n.as_i64(), n.as_f64()) {
                (Some(i), _) => Scalar::Int(i),
                (None, Some(f)) => Scalar::Float(f),
                (None, None) => {
                    return Err(serde::de::Error::custom(format!(
                        "the number {n} is not an i64 or f64"
                    )))
                }
            },
            Value::String(s) => Scalar::Str(s),
            other => {
                return Err(serde::de::Error::custom(format!(
                    "a scalar is null, a bool, a number or a string, not {other}"
                )))
            }
        }))
    }
}

impl Serialize for WireScalar {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Scalar::None => s.serialize_none(),
            Scalar::Boolean(b) => s.serialize_bool(*b),
            Scalar::Int(i) => s.serialize_i64(*i),
            Scalar::Float(f) => s.serialize_f64(*f),
            Scalar::Str(text) => s.serialize_str(text),
        }
    }
}

/// A tensor dimension: a size, or `{"symbolic": "s0"}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum WireDim {
    Fixed(i64),
    Symbolic(SymbolicDim),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SymbolicDim {
    pub symbolic: String,
}

/// A live tensor of a patched call.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireTensor {
    pub dtype: String,
    pub shape: Vec<WireDim>,
    pub device: String,
    pub contiguous: bool,
    /// The sample's sizes (-1 for a data-dependent one).
    pub sizes: Vec<i64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireSym {
    pub expr: String,
    #[serde(deserialize_with = "present")]
    pub hint: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireObject {
    #[serde(rename = "type")]
    pub type_name: String,
    pub attributes: BTreeMap<String, WireScalar>,
}

/// One value of a patched call's table (the worker's `sandbox.describe`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum WireValue {
    Scalar(WireScalar),
    Sequence(Vec<u32>),
    Tensor(WireTensor),
    SymInt(WireSym),
    Dtype(String),
    Object(WireObject),
}

/// `{"patch_call": {...}}`: a patched call the host answers with a program.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchCall {
    pub plugin: String,
    pub target: String,
    pub values: Vec<WireValue>,
    pub args: Vec<u32>,
    pub kwargs: Vec<(String, u32)>,
}

// ── The answer to a patch call (host → worker) ──

/// `{"program": {...}}` or `{"error": "..."}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchAnswer {
    Program(WireProgram),
    Error(String),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WireProgram {
    pub steps: Vec<WireStep>,
    pub output: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WireOp {
    pub op: String,
    pub args: Vec<u32>,
    pub kwargs: Vec<(String, u32)>,
}

/// A program step as the worker's `sandbox.run_program` reads it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WireStep {
    Call(WireOp),
    Original(WireOp),
    Invoke { callee: u32, args: Vec<u32>, kwargs: Vec<(String, u32)> },
    Getattr((u32, String)),
    Item((u32, i64)),
    Constant(WireScalar),
    Lookup(String),
    Pack(Vec<u32>),
    Enter(u32),
    Callback { target: String, captured: Vec<u32> },
}

// ── Lines ──

/// One line from the worker.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Progress(Progress),
    Generated(Generated),
    WeightsPlan(Vec<PlannedWeight>),
    PatchCall(PatchCall),
    /// `{"id": N, "result": ...}` or `{"id": N, "error": {...}}`; the result is
    /// typed by the caller, who knows the method (`reply`).
    Response {
        id: u64,
        outcome: Result<Value, PythonError>,
    },
}

/// The first characters of a line, for an error message (a line may be 64 MiB).
fn excerpt(line: &str) -> String {
    const SHOWN: usize = 200;
    match line.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}... ({} bytes)", &line[..cut], line.len()),
        None => line.to_string(),
    }
}

/// Types one worker line.
pub fn parse_message(line: &str) -> Result<Message, TraceError> {
    let bad = |why: &str| TraceError::Protocol(format!("{why}: `{}`", excerpt(line)));
    let value: Value =
        serde_json::from_str(line).map_err(|e| bad(&format!("a worker line is not JSON ({e})")))?;
    let Value::Object(mut fields) = value else {
        return Err(bad("a worker line is not a JSON object"));
    };
    // What is left once a message's own fields are taken is refused by name.
    let no_more = |fields: &serde_json::Map<String, Value>, what: &str| match fields.keys().next() {
        Some(key) => Err(bad(&format!("{what} has an unknown field `{key}`"))),
        None => Ok(()),
    };
    if let Some(progress) = fields.remove("progress") {
        no_more(&fields, "a progress line")?;
        let progress =
            Progress::deserialize(progress).map_err(|e| bad(&format!("a progress line: {e}")))?;
        return Ok(Message::Progress(progress));
    }
    if let Some(generated) = fields.remove("generated") {
        no_more(&fields, "a generated line")?;
        let generated = Generated::deserialize(generated)
            .map_err(|e| bad(&format!("a generated line: {e}")))?;
        return Ok(Message::Generated(generated));
    }
    if let Some(plan) = fields.remove("weights_plan") {
        no_more(&fields, "a weights plan")?;
        let plan = Vec::<PlannedWeight>::deserialize(plan)
            .map_err(|e| bad(&format!("a weights plan: {e}")))?;
        return Ok(Message::WeightsPlan(plan));
    }
    if let Some(call) = fields.remove("patch_call") {
        no_more(&fields, "a patch call")?;
        let call = PatchCall::deserialize(call).map_err(|e| bad(&format!("a patch call: {e}")))?;
        return Ok(Message::PatchCall(call));
    }
    let id = match fields.remove("id") {
        Some(id) => id.as_u64().ok_or_else(|| bad("a response's `id` is not a request number"))?,
        None => return Err(bad("a worker line is neither progress, generated text, a weights plan, a patch call nor a response (no `id`)")),
    };
    let outcome = match (fields.remove("result"), fields.remove("error")) {
        (Some(_), Some(_)) => return Err(bad("a response has both `result` and `error`")),
        (None, Some(error)) => Err(PythonError::deserialize(error)
            .map_err(|e| bad(&format!("a response's `error` is malformed ({e})")))?),
        (Some(result), None) => Ok(result),
        (None, None) => return Err(bad("a response has neither `result` nor `error`")),
    };
    no_more(&fields, "a response")?;
    Ok(Message::Response { id, outcome })
}

/// A response's result as the reply of `method`: a missing, unknown or
/// mistyped field is a protocol error naming the method and the field.
pub fn reply<R: DeserializeOwned>(method: &str, result: Value) -> Result<R, TraceError> {
    R::deserialize(result)
        .map_err(|e| TraceError::Protocol(format!("the worker's `{method}` reply: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], limit: usize) -> Vec<Incoming> {
        // A tiny buffer: lines span many reads.
        let mut reader = io::BufReader::with_capacity(3, input);
        let mut got = Vec::new();
        // As the host reads: a refused line is the last.
        while let Some(incoming) = read_line_bounded(&mut reader, limit).unwrap() {
            let refused = !matches!(incoming, Incoming::Line(_));
            got.push(incoming);
            if refused {
                break;
            }
        }
        got
    }

    #[test]
    fn lines_are_split_at_newlines_and_a_last_line_needs_none() {
        let got = lines(b"{\"a\": 1}\nsecond\r\n\nlast", 64);
        let text = |s: &str| Incoming::Line(s.into());
        assert_eq!(got, [text("{\"a\": 1}"), text("second"), text(""), text("last")]);
        assert_eq!(lines(b"", 64), []);
    }

    #[test]
    fn a_line_at_the_limit_passes_and_one_byte_more_is_refused() {
        assert_eq!(
            lines(b"12345678\nnext\n", 8),
            [Incoming::Line("12345678".into()), Incoming::Line("next".into())]
        );
        assert_eq!(lines(b"123456789\n", 8), [Incoming::TooLong(8)]);
    }

    #[test]
    fn a_long_line_without_newline_is_refused_without_reading_it_all() {
        // An endless stream: the reader must stop at the limit, not wait for a newline.
        let mut endless = io::BufReader::new(io::repeat(b'x'));
        assert_eq!(
            read_line_bounded(&mut endless, 1 << 20).unwrap(),
            Some(Incoming::TooLong(1 << 20))
        );
    }

    #[test]
    fn a_line_that_is_not_utf8_is_reported() {
        assert_eq!(lines(b"\xff\xfe\n", 64), [Incoming::NotUtf8]);
    }

    #[test]
    fn messages_are_typed() {
        use serde_json::json;
        assert_eq!(
            parse_message(r#"{"progress": {"stage": "import"}}"#).unwrap(),
            Message::Progress(Progress { stage: TraceStep::Import })
        );
        let plan = r#"{"weights_plan": [{"name": "model/data/weights/weight_0", "file": "/m/model.safetensors", "offset": 8, "length": 64, "stored": "bfloat16", "dtype": "float32", "shape": [4, 4], "linear_weight": false}]}"#;
        let Message::WeightsPlan(plan) = parse_message(plan).unwrap() else { panic!() };
        assert_eq!(
            (plan[0].name.as_str(), plan[0].offset, plan[0].length),
            ("model/data/weights/weight_0", 8, 64)
        );
        let e = parse_message(r#"{"weights_plan": [{"name": "w", "file": "f", "offset": -1, "length": 1, "stored": "a", "dtype": "a", "shape": [], "linear_weight": false}]}"#).unwrap_err().to_string();
        assert!(e.contains("a weights plan:"), "{e}");
        let e = parse_message(r#"{"weights_plan": [], "id": 3}"#).unwrap_err().to_string();
        assert!(e.contains("a weights plan has an unknown field `id`"), "{e}");
        let call = r#"{"patch_call": {"plugin": "p", "target": "torch.where", "values": [
            {"tensor": {"dtype": "float32", "shape": [2, {"symbolic": "s0"}], "device": "cpu", "contiguous": true, "sizes": [2, 8]}},
            {"scalar": null}, {"scalar": 3}, {"scalar": 0.5}, {"scalar": "x"}, {"sequence": [0, 1]},
            {"sym_int": {"expr": "s0", "hint": null}}, {"dtype": "int64"},
            {"object": {"type": "LlamaRMSNorm", "attributes": {"eps": 1e-06}}}],
            "args": [0, 1], "kwargs": [["dim", 2]]}}"#;
        let Message::PatchCall(call) = parse_message(&call.replace('\n', "")).unwrap() else {
            panic!()
        };
        assert_eq!(
            (call.plugin.as_str(), call.values.len(), call.kwargs.clone()),
            ("p", 9, vec![("dim".to_string(), 2)])
        );
        assert_eq!(call.values[2], WireValue::Scalar(WireScalar(Scalar::Int(3))));
        assert_eq!(call.values[6], WireValue::SymInt(WireSym { expr: "s0".into(), hint: None }));
        assert_eq!(
            parse_message(r#"{"id": 3, "result": {}}"#).unwrap(),
            Message::Response { id: 3, outcome: Ok(json!({})) }
        );
        let error = r#"{"id": 4, "error": {"type": "ValueError", "message": "no", "traceback": "Traceback...", "user": null}}"#;
        let expected = PythonError {
            kind: "ValueError".into(),
            message: "no".into(),
            traceback: "Traceback...".into(),
            user: None,
        };
        assert_eq!(
            parse_message(error).unwrap(),
            Message::Response { id: 4, outcome: Err(expected) }
        );
    }

    #[test]
    fn malformed_messages_are_protocol_errors_naming_the_problem() {
        let tensor = r#"{"dtype": "float32", "shape": [2], "device": "cpu", "contiguous": true, "sizes": [2]}"#;
        let cases = [
            ("not json".to_string(), "not JSON"),
            ("[1, 2]".into(), "not a JSON object"),
            (r#"{"hello": 1}"#.into(), "no `id`"),
            (r#"{"id": "one", "result": 1}"#.into(), "not a request number"),
            (r#"{"id": -1, "result": 1}"#.into(), "not a request number"),
            (r#"{"id": 1}"#.into(), "neither `result` nor `error`"),
            (r#"{"id": 1, "result": 1, "error": {}}"#.into(), "both `result` and `error`"),
            (r#"{"id": 1, "result": 1, "extra": 2}"#.into(), "a response has an unknown field `extra`"),
            (r#"{"id": 1, "error": "boom"}"#.into(), "`error` is malformed"),
            (r#"{"id": 1, "error": {"type": "E"}}"#.into(), "missing field `message`"),
            (r#"{"id": 1, "error": {"type": "E", "message": "m"}}"#.into(), "missing field `traceback`"),
            (r#"{"id": 1, "error": {"type": "E", "message": "m", "traceback": "", "x": 1}}"#.into(), "unknown field `x`"),
            (r#"{"progress": {"stage": "lunch"}}"#.into(), "unknown variant `lunch`"),
            (r#"{"progress": {"stage": "import", "percent": 5}}"#.into(), "unknown field `percent`"),
            (r#"{"progress": {}}"#.into(), "missing field `stage`"),
            (r#"{"progress": {"stage": "import"}, "id": 1}"#.into(), "a progress line has an unknown field `id`"),
            (r#"{"patch_call": {"plugin": "p"}}"#.into(), "a patch call: missing field `target`"),
            (
                format!(r#"{{"patch_call": {{"plugin": "p", "target": "t", "values": [{{"tensor": {tensor}, "x": 1}}], "args": [], "kwargs": []}}}}"#),
                "a patch call:",
            ),
            (r#"{"patch_call": {"plugin": "p", "target": "t", "values": [{"scalar": [1]}], "args": [], "kwargs": []}}"#.into(), "a scalar is null"),
            (r#"{"patch_call": {"plugin": "p", "target": "t", "values": [{"blob": 1}], "args": [], "kwargs": []}}"#.into(), "unknown variant `blob`"),
            (r#"{"patch_call": {"plugin": "p", "target": "t", "values": [{"sym_int": {"expr": "s0"}}], "args": [], "kwargs": []}}"#.into(), "missing field `hint`"),
            (r#"{"patch_call": {"plugin": "p", "target": "t", "values": [], "args": [-1], "kwargs": []}}"#.into(), "a patch call:"),
        ];
        for (line, why) in cases {
            match parse_message(&line) {
                Err(TraceError::Protocol(message)) => {
                    assert!(
                        message.contains(why) && message.contains(&excerpt(&line)),
                        "{line}: {message}"
                    );
                    assert!(!message.contains('\n'), "one line: {message}");
                }
                other => panic!("{line}: {other:?}"),
            }
        }
    }

    fn trace_reply() -> Value {
        serde_json::json!({
            "model_class": "Doubler", "inputs": {"x": [2, 3]}, "outputs": 1, "input_names": ["x"], "output_names": ["output"],
            "export_metadata": {"architecture": "Doubler", "export_dtype": "float32", "export_device": "cpu",
                "kwargs": {"x": {"rank": 2, "shape": [2, 3], "dtype": "float32"}}, "in_spec": "[]", "out_spec": "[]",
                "in_constants": {}, "out_constants": []},
            "nodes": 4, "patches_restored": {"torch.where": true}, "patch_calls_cached": 0, "versions": {"torch": "2.13.0"},
            "seconds": {"import": 1.0, "build": 0.1, "eager": 0.1, "export": 0.5, "save": 0.1},
            "peak_rss_mib": {"import": 300.0, "build": 310.0, "export": 400.0, "save": 410.0},
            "side_weights": false, "weights": {"streamed": false, "loaded": true, "fallback": null, "caller_memory": false},
            "decomposed": [{"op": "aten.softplus.default", "nodes": 1, "became": 4}],
            "size_guards": [{"guard": "((4 + (-1)*(x.shape[1] % 4)) % 4) <= 0", "breaks_at": {"x": [2, 4]}}],
            "tied_axes": [], "axis_kinds": {"s0": {"kind": "batch", "traced": 2}}, "max_positions": 64,
        })
    }

    #[test]
    fn replies_are_typed_and_a_missing_unknown_or_mistyped_field_is_named() {
        let reply: TraceReply = super::reply("trace", trace_reply()).unwrap();
        assert_eq!(
            (reply.model_class.as_str(), reply.outputs, reply.seconds.export),
            ("Doubler", 1, 0.5)
        );
        let mut missing = trace_reply();
        missing.as_object_mut().unwrap().remove("nodes");
        let mut unknown = trace_reply();
        unknown["export_metadata"]["opset"] = 18.into();
        let mut mistyped = trace_reply();
        mistyped["side_weights"] = "yes".into();
        let mut step = trace_reply();
        step["seconds"].as_object_mut().unwrap().remove("eager");
        for (value, why) in [
            (missing, "missing field `nodes`"),
            (unknown, "unknown field `opset`"),
            (mistyped, "invalid type: string \"yes\", expected a boolean"),
            (step, "missing field `eager`"),
        ] {
            match super::reply::<TraceReply>("trace", value) {
                Err(TraceError::Protocol(message)) => assert!(
                    message.starts_with("the worker's `trace` reply: ") && message.contains(why),
                    "{message}"
                ),
                other => panic!("{why}: {other:?}"),
            }
        }
        let verify = serde_json::json!({"checks": [{"inputs": {"x": [2]}, "outputs": [
            {"shape": [2], "expected_shape": [2], "max_abs": 0.0, "max_rel": null, "ok": true, "trailing": null}]}], "providers": ["CPUExecutionProvider"]});
        let reply: VerifyReply = super::reply("verify", verify.clone()).unwrap();
        assert_eq!(reply.checks[0].outputs[0].max_rel, None);
        let mut absent = verify;
        absent["checks"][0]["outputs"][0].as_object_mut().unwrap().remove("max_rel");
        let Err(TraceError::Protocol(message)) = super::reply::<VerifyReply>("verify", absent)
        else {
            panic!()
        };
        assert!(message.contains("missing field `max_rel`"), "{message}");
        let hello = serde_json::json!({"protocol": PROTOCOL, "python": "3.11.7", "versions": {}, "debug": true});
        let Err(TraceError::Protocol(message)) = super::reply::<HelloReply>("hello", hello) else {
            panic!()
        };
        assert!(message.contains("unknown field `debug`"), "{message}");
    }

    #[test]
    fn requests_and_answers_have_the_workers_shapes() {
        use serde_json::json;
        let params = TraceParams {
            source: SourceParams::Architecture {
                name: "llama".into(),
                overrides: [("vocab_size".to_string(), "128".to_string())].into(),
            },
            task: None,
            dynamic: true,
            dynamic_shapes: vec![],
            batch: 2,
            sequence: 8,
            output: "m.pt2".into(),
            reference: Some("r.pt".into()),
            decompose: Decompose::Missing { handled: vec!["aten.mean.dim".into()] },
            device: "cpu".into(),
            dtype: "float32".into(),
            weights_dtype: Some("bfloat16".into()),
            experts: Some("batched_mm".into()),
            quantize: Some(EagerQuantize {
                linear: Some(LinearScheme::Int8DynamicInt4Weight),
                embeddings: Some(WeightBits::Int8),
                group_size: 32,
            }),
            folder: None,
            weights: Weights::Streamed,
            plan_weights: Some(PlannedWeights::Parameters),
            patches: vec![PatchSpec { plugin: "p".into(), targets: vec!["torch.where".into()] }],
        };
        let value = serde_json::to_value(&params).unwrap();
        assert_eq!(
            value["source"],
            json!({"kind": "architecture", "name": "llama", "overrides": {"vocab_size": "128"}})
        );
        assert_eq!(value["weights"], json!("streamed"));
        assert_eq!(value["plan_weights"], json!("parameters"));
        assert_eq!(
            value["quantize"],
            json!({"linear": "8da4w", "embeddings": "8w", "group_size": 32})
        );
        assert_eq!(
            (value["task"].clone(), value["patches"][0]["targets"][0].clone()),
            (Value::Null, json!("torch.where"))
        );
        let program = WireProgram {
            steps: vec![
                WireStep::Call(WireOp {
                    op: "aten.where.self".into(),
                    args: vec![0, 1],
                    kwargs: vec![("dim".into(), 2)],
                }),
                WireStep::Invoke { callee: 3, args: vec![], kwargs: vec![] },
                WireStep::Getattr((1, "eps".into())),
                WireStep::Constant(WireScalar(Scalar::None)),
                WireStep::Callback { target: "t".into(), captured: vec![0] },
            ],
            output: 4,
        };
        assert_eq!(
            serde_json::to_value(PatchAnswer::Program(program)).unwrap(),
            json!({"program": {"steps": [
                {"call": {"op": "aten.where.self", "args": [0, 1], "kwargs": [["dim", 2]]}},
                {"invoke": {"callee": 3, "args": [], "kwargs": []}},
                {"getattr": [1, "eps"]},
                {"constant": null},
                {"callback": {"target": "t", "captured": [0]}},
            ], "output": 4}})
        );
        assert_eq!(
            serde_json::to_value(PatchAnswer::Error("no".into())).unwrap(),
            json!({"error": "no"})
        );
    }

    #[test]
    fn op_samples_are_a_program_or_a_reason() {
        // As the worker writes them: `dataclasses.asdict` of `OpSample`, `kind` a field.
        let reply = serde_json::json!({"samples": [
            {"index": 0, "dtype": "float32", "about": "[2x3]", "exported": {"path": "0.pt2", "ops": ["aten.abs.default"], "shape_only": false, "kind": "program"}},
            {"index": 1, "dtype": "bool", "about": "[2]", "exported": {"reason": "torch.export fails: x", "kind": "skipped"}}]});
        let reply: OpSamplesReply = super::reply("op_samples", reply).unwrap();
        assert_eq!(
            reply.samples[0].exported,
            SampleExport::Program {
                path: "0.pt2".into(),
                ops: vec!["aten.abs.default".into()],
                shape_only: false
            }
        );
        assert_eq!(
            reply.samples[1].exported,
            SampleExport::Skipped { reason: "torch.export fails: x".into() }
        );
        let both = serde_json::json!({"samples": [{"index": 0, "dtype": "bool", "about": "", "exported": {"reason": "r", "path": "p", "kind": "skipped"}}]});
        let Err(TraceError::Protocol(message)) = super::reply::<OpSamplesReply>("op_samples", both)
        else {
            panic!()
        };
        assert!(message.contains("unknown field `path`"), "{message}");
    }

    #[test]
    fn the_workers_messages_and_the_version_are_generated_from_these_types() {
        let generated = protocol_gen::generate(include_str!("protocol.rs")).unwrap();
        let python = include_str!("../../worker/hfx_worker/messages.py");
        assert!(
            generated.rust == include_str!("protocol.rs") && generated.python == python,
            "{} or {}'s PROTOCOL is not generated from the types in {}: run `{}`",
            protocol_gen::PYTHON,
            protocol_gen::RUST,
            protocol_gen::RUST,
            protocol_gen::COMMAND
        );
    }

    #[test]
    fn the_version_follows_the_messages_shapes_not_their_docs() {
        let source = include_str!("protocol.rs");
        let version = |text: &str| protocol_gen::generate(text).unwrap().version;
        let field = "    pub second_size: bool,\n";
        assert!(source.contains(field));
        assert_ne!(version(&source.replace(field, "    pub second_size: u32,\n")), PROTOCOL);
        let documented = format!("    /// Said otherwise.\n{field}");
        assert_eq!(version(&source.replace(field, &documented)), PROTOCOL);
    }

    #[test]
    fn a_long_malformed_line_is_shown_shortened() {
        let line = "x".repeat(10_000);
        let Err(TraceError::Protocol(message)) = parse_message(&line) else { panic!() };
        assert!(message.len() < 500 && message.contains("(10000 bytes)"), "{message}");
    }
}
