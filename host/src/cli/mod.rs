//! The `hfx` command line: clap's arguments, the run config file and its
//! merge with the flags (`config`), the `plugins` commands (`plugins`). The
//! CLI builds the pipeline's options and prints its summary; it depends on
//! the pipeline, never the other way round.

mod config;
mod plugins;
mod setup;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};

use crate::plugins::loading::SetOptions;
use crate::plugins::{lock::LOCK_FILE, upstream, Backend, Limits, RuntimeOptions};
use crate::stages::OnPluginError;

pub use config::RunConfig;

#[derive(Debug, Parser)]
#[command(
    name = "hfx",
    version,
    about = "Export PyTorch / Hugging Face models, with workarounds as WebAssembly plugins"
)]
pub struct Cli {
    /// More output: -v prints each step with its time when stderr is not a terminal, skipped
    /// plugins, drift details and a failure's whole cause (a Python traceback); -vv debug logs.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// No progress on stderr (on a terminal, each step is shown as it runs).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum Command {
    /// Manage plugins.
    #[command(subcommand)]
    Plugins(PluginsCommand),
    /// Export: trace a model (or read a `.pt2` / IR JSON), run the backend's
    /// stages and write the artifact: `.onnx` (--backend onnx), `.pt2` (the
    /// dynamo artifact; for other backends the program after their FX stages),
    /// an export folder (`-o DIR`, as `ExportedModel.save_pretrained`), or the
    /// IR's JSON form (`.json`).
    Run(RunArgs),
    /// Generate text with an export folder written with `--generation` (ONNX, `.pt2`, `.pte`,
    /// OpenVINO IR, or an ONNX Runtime GenAI package): the folder's tokenizer, each component in
    /// its runtime, the text on stdout as it is produced.
    Generate(GenerateArgs),
    /// Create or repair an installed hfx's worker environment (the pinned
    /// torch, transformers, onnx, onnxruntime, executorch) and report it.
    Setup {
        /// The Python that creates the environment.
        #[arg(long, default_value = "python3")]
        python: String,
    },
    /// Print what hfx would use (install, worker Python and its packages
    /// against the pins, plugin sets, component cache) and what does not fit.
    Doctor {
        #[command(flatten)]
        set: PluginSetArgs,
    },
}

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The export folder (`hfx run ... --generation -o DIR`).
    #[arg(value_name = "DIR")]
    pub folder: PathBuf,
    /// The text the model continues.
    #[arg(long)]
    pub prompt: String,
    /// At most this many new tokens (fewer where the model ends the text).
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub max_new_tokens: u32,
    /// Sample the tokens (--temperature, --top-k) instead of choosing the likeliest.
    #[arg(long)]
    pub sample: bool,
    /// The sampling temperature [default: 1.0].
    #[arg(long, value_name = "T", requires = "sample")]
    pub temperature: Option<f64>,
    /// Sample among the K likeliest tokens, 0 among all [default: 50].
    #[arg(long, value_name = "K", requires = "sample")]
    pub top_k: Option<u32>,
    /// The seed of the random numbers sampling draws, set before each generation.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
    /// Also generate with eager transformers on the source model (the Hub model the folder
    /// records, or --model DIR) and name the first token that differs (an error if one does).
    #[arg(long)]
    pub compare: bool,
    /// The model folder the export was made from, for --compare.
    #[arg(long, value_name = "DIR", requires = "compare")]
    pub model: Option<PathBuf>,
    /// The Python that runs the components [default: $HFX_PYTHON, .venv/bin/python here or in the checkout hfx was built in, python3].
    #[arg(long)]
    pub python: Option<String>,
    /// Deadline for the whole generation, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub deadline_s: u64,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum PluginsCommand {
    /// List plugins: name, version, kind, backend, hash, status, upstream range, targets.
    List {
        #[command(flatten)]
        set: PluginSetArgs,
        /// Show only plugins of this backend.
        #[arg(long, value_parser = parse_backend)]
        backend: Option<Backend>,
    },
    /// Show one plugin: manifest, WIT world, imports and exports, hashes.
    Inspect {
        name: String,
        #[command(flatten)]
        set: PluginSetArgs,
    },
    /// Run the plugins' self-tests below the folders: each case through the
    /// plugin's real stage, and numerically in the worker (fixes against the
    /// piece before them, translations in ONNX Runtime against PyTorch).
    Test {
        /// Plugin folders whose plugins are tested (the default plugins
        /// and `--plugins` folders are loaded beside them, untested).
        #[arg(required = true, value_name = "DIR")]
        folders: Vec<PathBuf>,
        #[command(flatten)]
        set: PluginSetArgs,
    },
    /// Run torch's own OpInfo test inputs through every op the folders' ONNX
    /// translations declare, as `hfx run` exports a model, and compare each
    /// sample's ONNX model in ONNX Runtime with eager PyTorch; per op: samples
    /// passed, failed, skipped (with reasons).
    TestOps(TestOpsArgs),
    /// Cut a self-test case out of a real trace: `hfx run`'s model, plugin
    /// and backend flags, then the op to cut around and the case file.
    Capture(CaptureArgs),
    /// Load every plugin, check it (and the lock), and run the structural
    /// half of its self-tests (no Python; `plugins test` runs all of them).
    Verify {
        #[command(flatten)]
        set: PluginSetArgs,
        /// Fail on any warning too: a plugin folder skipped, drift from the lock, an untrusted cache.
        #[arg(long)]
        strict: bool,
    },
    /// Write the lock of the plugin set that applies now.
    Lock {
        #[command(flatten)]
        set: PluginSetArgs,
        /// Where to write it.
        #[arg(short, long, default_value = LOCK_FILE)]
        output: PathBuf,
    },
    /// Scaffold a plugin crate that builds and passes its self-test as generated.
    New(crate::plugins::scaffold::NewArgs),
    /// Build plugin crates into WebAssembly components, each written beside
    /// its `plugin.toml` (with Debian's `rustc-web`, `-Zbuild-std`; std is
    /// compiled once per target folder: `CARGO_TARGET_DIR` shares one).
    Build {
        /// A plugin crate, or a folder with plugin crates below it.
        #[arg(value_name = "DIR", default_value = ".")]
        dirs: Vec<PathBuf>,
    },
    /// Compile every plugin component of the set into the cache now (for
    /// images and CI), so runs start without compiling.
    Precompile {
        #[command(flatten)]
        set: PluginSetArgs,
    },
}

#[derive(Debug, Args)]
pub struct TestOpsArgs {
    /// Plugin folders: their ONNX translations are tested (with their FX node fixes and IR fixes).
    #[arg(required = true, value_name = "DIR")]
    pub folders: Vec<PathBuf>,
    #[command(flatten)]
    pub set: PluginSetArgs,
    /// Only this translated op (repeatable): `--op aten.elu.default`.
    #[arg(long = "op", value_name = "OP")]
    pub ops: Vec<String>,
    /// Sample dtypes.
    #[arg(long, value_delimiter = ',', default_value = "float32,float16,int64,bool")]
    pub dtypes: Vec<String>,
    /// Samples per OpInfo and dtype (torch's first N).
    #[arg(long, default_value_t = 4)]
    pub samples: u32,
    /// The opset the samples are written at.
    #[arg(long, default_value_t = 20)]
    pub opset: u32,
    /// The core ATen ops excluded from translation (`[ops] "aten.x.default" = "why"`):
    /// then every core op must be translated or excluded, and every exclusion be a core op not translated.
    #[arg(long, value_name = "FILE")]
    pub exclusions: Option<PathBuf>,
    /// Also write the report as Markdown here.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CaptureArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// The op the case is cut around (`aten.alias.default`).
    #[arg(long, value_name = "TARGET", required_unless_present = "program")]
    pub node: Option<String>,
    /// A patch plugin's case instead: the `--model-fn` model's forward as a
    /// Python-level program, traced with and without the patch.
    #[arg(long, conflicts_with_all = ["node", "count", "radius"])]
    pub program: bool,
    /// How many of its nodes, in program order.
    #[arg(long, default_value_t = 1)]
    pub count: usize,
    /// Also cut the nodes this many hops away (producers and readers).
    #[arg(long, default_value_t = 0)]
    pub radius: usize,
    /// Where the case is written (`plugins/onnx/fix-alias/selftest/llama.json`).
    #[arg(long, value_name = "FILE")]
    pub case: PathBuf,
}

/// Where plugins come from and what they are resolved against.
#[derive(Debug, Args, Default)]
pub struct PluginSetArgs {
    /// Plugin folder (repeatable); every plugin.toml below it is found. An
    /// installed hfx adds these on top of its default plugin sets.
    #[arg(long = "plugins", value_name = "DIR")]
    pub plugins: Vec<PathBuf>,
    /// Use only the folders given with --plugins, not the installed default sets.
    #[arg(long)]
    pub no_default_plugins: bool,
    /// Upstream version to resolve against instead of what is installed
    /// (repeatable), e.g. `--target onnxruntime=1.31.0` for a deployment runtime.
    #[arg(long = "target", value_name = "PACKAGE=VERSION", value_parser = upstream::parse_target)]
    pub targets: Vec<(String, String)>,
    /// Python whose installed packages give the upstream versions [default: $HFX_PYTHON, .venv/bin/python here or in the checkout hfx was built in, python3].
    #[arg(long)]
    pub python: Option<String>,
    /// Lock file [default: hfx.lock, if present].
    #[arg(long, value_name = "FILE")]
    pub lock: Option<PathBuf>,
    /// Refuse to run if the plugin set or upstream versions differ from the lock.
    #[arg(long)]
    pub locked: bool,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// The largest `--plugin-memory-mib`: what a 32-bit linear memory addresses.
const MAX_PLUGIN_MEMORY_MIB: usize = 4096;

#[derive(Debug, Args, Default)]
pub struct SandboxArgs {
    /// Folder of the compiled-component cache [default: $HFX_CACHE_DIR or ~/.cache/hfx/components].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile every component, use no cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Linear-memory cap per plugin instance, in MiB [default: 64].
    #[arg(long)]
    pub plugin_memory_mib: Option<usize>,
    /// Fuel per plugin call, about one unit per wasm instruction [default: 500000000].
    #[arg(long)]
    pub plugin_fuel: Option<u64>,
    /// Wall-clock deadline per plugin call, in milliseconds [default: 2000].
    #[arg(long)]
    pub plugin_deadline_ms: Option<u64>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The traced program: a `.pt2` (torch.export.save), or the IR's JSON form.
    pub input: Option<PathBuf>,
    /// Where to write the artifact (atomically).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// The backend, or several (`onnx,dynamo`): one trace, then each backend's
    /// artifact in an export folder of its own (`DIR/onnx/`, `DIR/dynamo/`).
    #[arg(long, value_parser = parse_backend, value_delimiter = ',')]
    pub backend: Vec<Backend>,
    /// The ExecuTorch delegate (with --backend executorch): `xnnpack`, lowered by ExecuTorch in the worker.
    #[arg(long, value_parser = parse_delegate)]
    pub delegate: Option<crate::trace::protocol::Delegate>,
    /// Take every option from this TOML file; flags given here override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub set: PluginSetArgs,
    /// ONNX Runtime fusions (the reference's `ort_fusions`): `cpu` adds the opt-in plugin set
    /// `onnx-ort-cpu`, whose plugins rewrite patterns into ONNX Runtime's contrib ops; `cuda` adds
    /// `onnx-ort-cuda` (the CPU set's fusions, and mixture-of-experts blocks as `MoE`); `webgpu`
    /// `onnx-ort-webgpu` (no FusedMatMul, GQA never rotating); `dml` `onnx-ort-dml` (no GQA).
    #[arg(long, value_name = "TARGET")]
    pub ort_fusions: Option<String>,
    /// What a failing plugin call does to the run; its changes are rolled back either way [default: fail].
    #[arg(long, value_enum)]
    pub on_plugin_error: Option<OnPluginError>,
    #[command(flatten)]
    pub model: ModelArgs,
    /// The ONNX opset of the default domain (18-23) [default: 20].
    #[arg(long)]
    pub opset: Option<u32>,
    /// Run the artifact in its runtime against the eager reference before writing it: an .onnx in
    /// ONNX Runtime (atol/rtol 1e-3), a .pt2 as torch.export loads it (1e-4).
    #[arg(long)]
    pub verify: bool,
    /// Keep the eager reference (the sample inputs and eager PyTorch's outputs, `<out>.reference.pt`)
    /// beside an .onnx or .pte, to check it elsewhere. Beside a .pt2 it is always kept (a later
    /// `hfx run <out>.pt2 --verify` reads it), and --verify keeps the one it checked against.
    #[arg(long)]
    pub keep_reference: bool,
    /// Weights in `<out>.onnx.data` beside the model (always past protobuf's 2 GB limit).
    #[arg(long)]
    pub external_data: bool,
    /// Skip the ONNX graph optimization (identity removal, common subexpressions, dead code).
    #[arg(long)]
    pub no_optimize: bool,
    /// Quantize the ONNX model's weights as they stream: `int4` makes each MatMul (and `Gemm`, as
    /// its MatMul and bias) whose B is a 2-D float weight a `com.microsoft::MatMulNBits` (4-bit blocks along K, round to nearest, as ONNX
    /// Runtime's `MatMulNBitsQuantizer`) and each embedding a `com.microsoft::GatherBlockQuantized`
    /// (the same blocks along the hidden axis); lm_head and embeddings are quantized unless
    /// excluded (`--quantize-exclude lm_head`, `--quantize-exclude model.embed_tokens`).
    /// `int8-dynamic` makes each such float32 MatMul a `com.microsoft::DynamicQuantizeMatMul`
    /// (int8 weights per output channel, activations quantized at run time, as ONNX Runtime's
    /// `quantize_dynamic(per_channel=True, reduce_range=True)`: 7-bit weights, right on CPUs
    /// without VNNI too); embeddings stay float. `int8-static` writes ONNX Runtime's QDQ format
    /// (`quantize_static(quant_format=QDQ, per_channel=True, reduce_range=True)`): int8 weights
    /// per output channel and each MatMul's activation quantized to uint8 with a scale calibrated
    /// (MinMax) in ONNX Runtime on `--calibration-samples` generated inputs or `--calibration FILE`.
    /// On OpenVINO, int4 and int8-dynamic: the IR keeps the ONNX model's 4-bit (embeddings
    /// float) or 8-bit weights. On ExecuTorch (`--backend executorch.xnnpack`), torchao quantizes the eager model's linear
    /// layers before the trace, as ExecuTorch's LLM export does: `8da4w` (int8 activations
    /// quantized per token at run time, int4 weights in groups), `4w` (int4 weights in groups),
    /// `8w` (int8 weights per output channel); XNNPACK runs them as its quantized kernels.
    #[arg(long, value_name = "SCHEME")]
    pub quantize: Option<String>,
    /// `--quantize int4`'s elements of K per block: 32, 64 or 128 [default: 32, as ONNX Runtime
    /// GenAI's builder]; on ExecuTorch the 4-bit schemes' group size: 32, 64, 128 or 256
    /// [default: 32].
    #[arg(long, value_name = "N", alias = "group-size")]
    pub quantize_block_size: Option<usize>,
    /// ExecuTorch: the embeddings' weights quantized by torchao too, `4w` (int4 in groups) or `8w`
    /// (int8 per row) (optimum-executorch's `--qembedding`).
    #[arg(long, value_name = "SCHEME")]
    pub quantize_embeddings: Option<String>,
    /// `--quantize int4` with a zero point per block (ONNX Runtime's quantizer's default) rather
    /// than symmetric blocks, zero point 8 (ONNX Runtime GenAI's builder's default).
    #[arg(long)]
    pub quantize_asymmetric: bool,
    /// `--quantize int4`'s lowest precision `MatMulNBits` computes its activations in: 0 (unset,
    /// float), 1 float32, 2 float16, 3 bfloat16, 4 int8 [default: 4, ONNX Runtime GenAI's
    /// builder's for CPU].
    #[arg(long, value_name = "N")]
    pub quantize_accuracy_level: Option<u8>,
    /// A weight `--quantize` leaves float (repeatable): a pattern with `*` matches the whole
    /// weight name (`*.mlp.*`), one without also the weights under a module (`lm_head`).
    #[arg(long, value_name = "PATTERN")]
    pub quantize_exclude: Vec<String>,
    /// `--quantize int8-static`'s generated calibration inputs: N samples varied from the traced
    /// sample's (with `--generation`, N prompts generated from) [default: 8].
    #[arg(long, value_name = "N")]
    pub calibration_samples: Option<u32>,
    /// `--quantize int8-static`'s recorded calibration inputs: a `.npz` (numpy.savez) of one
    /// array per model input, named as the ONNX model's inputs (with `--generation`, as the
    /// prompt's: `input_ids`, `attention_mask`), each with a leading sample axis.
    #[arg(long, value_name = "FILE")]
    pub calibration: Option<PathBuf>,
    /// A `.pte` whose arena leaves out the graph's inputs (the reference's
    /// `alloc_graph_input=False`): the runtime reads the caller's input buffers where they are, and a
    /// program that updates an input (a static cache) writes into the caller's buffer.
    #[arg(long)]
    pub no_alloc_graph_input: bool,
    /// A `.pte` whose arena leaves out the graph's outputs (`alloc_graph_output=False`): the caller
    /// binds each output's buffer before a call (`Method::set_output_data_ptr`).
    #[arg(long)]
    pub no_alloc_graph_output: bool,
    /// An XNNPACK `.pte` whose arena leaves out the mutable buffers (`alloc_mutable_buffers=False`).
    #[arg(long)]
    pub no_alloc_mutable_buffers: bool,
    /// An OpenVINO IR that takes its cache as inputs and returns it as outputs, for runtimes
    /// without OpenVINO's state (its NPU plugin). By default, as the reference's `stateful`, the
    /// cache is OpenVINO state variables, reordered by a `beam_idx` input.
    #[arg(long)]
    pub stateless: bool,
    /// An OpenVINO IR whose float32 weights are stored as float16 (half the `.bin`) and computed
    /// in float32, as the reference's `OpenVINOConfig(compress_to_fp16=True)` writes it (its
    /// default, and hfx's, keeps them float32). `--verify` holds it to 0.01 of each output's
    /// largest eager value.
    #[arg(long)]
    pub compress_to_fp16: bool,
    /// Also write a report of the run: a self-contained page (`.html`) or its facts as JSON
    /// (`.json`): stage timeline, plugins and the nodes they changed, op histograms, parity.
    /// Repeatable: `--report run.html --report run.json` writes both.
    #[arg(long, value_name = "FILE")]
    pub report: Vec<PathBuf>,
}

/// Tracing a model instead of reading a `.pt2`.
#[derive(Debug, Args, Default)]
pub struct ModelArgs {
    /// A random model of this architecture (`llama`, `gpt2`, `bert`, `vit`, ...), built from its config.
    #[arg(long, conflicts_with_all = ["model_dir", "model_fn"])]
    pub model: Option<String>,
    /// Config overrides for --model: `--set hidden_size=64,num_hidden_layers=2` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", value_delimiter = ',')]
    pub set: Vec<String>,
    /// A local Hugging Face model folder (config.json + weights); the class is the one in `architectures`.
    #[arg(long, conflicts_with = "model_fn")]
    pub model_dir: Option<PathBuf>,
    /// A Hugging Face Hub model, `org/name` or `org/name@revision` (a branch, tag or commit hash;
    /// default main), loaded from its snapshot in the Hub cache as --model-dir loads a folder (`$HF_HUB_CACHE`,
    /// else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`). What the cache lacks is downloaded first
    /// (config, generation config, tokenizer, safetensors), unless HF_HUB_OFFLINE is set.
    #[arg(long, conflicts_with_all = ["model", "model_dir", "model_fn"])]
    pub model_id: Option<String>,
    /// With --model-id: download and load pickled weights (`pytorch_model.bin`) when the model has no
    /// safetensors. Loading a pickle can run code.
    #[arg(long)]
    pub allow_pickle: bool,
    /// Load a model folder's own modeling code (`auto_map` in its config.json), which runs in the trace worker.
    #[arg(long)]
    pub trust_remote_code: bool,
    /// Read a model folder's weights into the trace worker. By default they stay in its safetensors
    /// checkpoint: the worker traces the model without reading them (unless --verify needs the eager
    /// reference) and hfx streams them from the checkpoint into the .onnx / .pt2.
    #[arg(long)]
    pub load_weights: bool,
    /// Keep traced programs here, keyed by what made them (the model's files, the trace options, the
    /// patch plugins and their hashes, the upstream versions): a run that would trace the same again
    /// (other backend options, --verify) reads the program from here instead.
    #[arg(long, value_name = "DIR")]
    pub trace_cache: Option<PathBuf>,
    /// Verify on the model folder's first N layers (its config truncated, the same checkpoint) instead
    /// of the whole model: for a model whose weights do not fit in memory. The artifact lands only if
    /// the truncated model matches eager.
    #[arg(long, value_name = "N")]
    pub verify_layers: Option<u32>,
    /// `python:module:function` returning `(model, inputs)`.
    #[arg(long)]
    pub model_fn: Option<String>,
    /// `READ,WRITE`: the model is the caller's, the Python process that started hfx
    /// (`hfx.export`), which serves the worker protocol on these pipes itself.
    #[arg(long, value_name = "READ,WRITE", hide = true, conflicts_with_all = ["model", "model_dir", "model_id", "model_fn"])]
    pub model_caller: Option<String>,
    /// The transformers class to build (`AutoModelForCausalLM`, `BertModel`, ...), overriding the default.
    #[arg(long)]
    pub task: Option<String>,
    /// Fix every input axis at the sample size (--sample): the artifact takes exactly those sizes.
    /// By default every input axis is dynamic (`Dim.AUTO`), except where the model fixes it (the
    /// run's summary names those axes).
    #[arg(long = "static")]
    pub static_shapes: bool,
    /// Accepted and ignored: exports are dynamic by default (--static fixes the sizes).
    #[arg(long)]
    pub dynamic: bool,
    /// Only these axes dynamic, each in its range, every other axis fixed:
    /// `input_ids:1=2..2048`; an axis the model needs equal to a named one is tied to it. An
    /// ExecuTorch program plans its memory for each MAX (without a range: a batch of 4, a sequence
    /// of --max-cache-len or the model's max_position_embeddings).
    #[arg(long, value_name = "INPUT:AXIS=MIN..MAX", value_delimiter = ',')]
    pub dynamic_shapes: Vec<String>,
    /// The sizes of the sample inputs hfx generates for --model, --model-dir and --model-id, which
    /// the trace runs on and a --static export takes: `--sample batch=1,sequence=128` [default:
    /// batch=2,sequence=8; dynamic axes need sizes >= 2, batch and sequence different].
    #[arg(long, value_name = "AXIS=N", value_delimiter = ',')]
    pub sample: Vec<String>,
    /// Deadline for the trace, in seconds [default: 600].
    #[arg(long)]
    pub trace_deadline_s: Option<u64>,
    /// Memory limit of the trace worker and what it starts, in GiB [default: 3/4 of the machine's memory].
    #[arg(long, value_name = "GIB")]
    pub worker_memory_gib: Option<f64>,
    /// How the worker's memory limit is enforced (tests force the sampler).
    #[arg(long, value_enum, hide = true)]
    pub worker_memory_mechanism: Option<crate::trace::MemoryMechanism>,
    /// Run `run_decompositions()` on the traced program (the core ATen opset).
    #[arg(long)]
    pub decompose: bool,
    /// Where the model runs while tracing: `cpu` or `cuda` [default: cpu].
    #[arg(long)]
    pub device: Option<String>,
    /// The dtype of the model's weights and floating inputs: `float32`, `bfloat16`, `float16` [default: float32].
    /// To OpenVINO a 16-bit dtype is the weights' alone: the model computes in float32 over them, as the
    /// reference's OpenVINO export of a 16-bit model does.
    #[arg(long)]
    pub dtype: Option<String>,
    /// Export for generation: the `prefill` and `decode` components one `generate` call is made of
    /// (captured from it, each exported as its own program) into an export folder; with --verify,
    /// greedy tokens through them must equal eager `generate`'s.
    #[arg(long)]
    pub generation: bool,
    /// With --generation: `decode` takes several tokens at once (its sequence axis stays dynamic).
    #[arg(long)]
    pub multi_token_decode: bool,
    /// With --generation: the cache `generate` builds: the model's own (growing) or a static one of
    /// --max-cache-len positions [default: dynamic].
    #[arg(long, value_enum)]
    pub cache: Option<CacheKind>,
    /// With --cache static: the cache's length in positions.
    #[arg(long, value_name = "N")]
    pub max_cache_len: Option<u32>,
    /// With --generation --verify: how many greedy tokens the generation check compares [default: 8].
    #[arg(long, value_name = "N")]
    pub generate_steps: Option<u32>,
    /// With --generation (ONNX): also write an ONNX Runtime GenAI package (`genai_config.json`
    /// naming the decoder); with --verify, GenAI's own `Generator` must generate eager's tokens.
    #[arg(long)]
    pub genai: bool,
}

/// The cache a generation export is traced with (`--cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CacheKind {
    /// The model's own cache (a `DynamicCache`, growing each step).
    Dynamic,
    /// A `StaticCache` of --max-cache-len positions.
    Static,
}

/// The bounds of `--worker-memory-gib` (a worker with torch needs ~0.5 GiB to start).
const MIN_WORKER_GIB: f64 = 0.25;
const MAX_WORKER_GIB: f64 = 1048576.0;

impl ModelArgs {
    /// The options given that only shape a trace, as flags.
    fn trace_only(&self) -> Vec<&'static str> {
        let given = [
            ("--set", !self.set.is_empty()),
            ("--task", self.task.is_some()),
            ("--dynamic", self.dynamic),
            ("--static", self.static_shapes),
            ("--dynamic-shapes", !self.dynamic_shapes.is_empty()),
            ("--sample", !self.sample.is_empty()),
            ("--decompose", self.decompose),
            ("--device", self.device.is_some()),
            ("--dtype", self.dtype.is_some()),
            ("--trust-remote-code", self.trust_remote_code),
            ("--allow-pickle", self.allow_pickle),
            ("--generation", self.generation),
        ];
        given.iter().filter(|(_, given)| *given).map(|(flag, _)| *flag).collect()
    }

    /// The model to trace, and the Hub model `--model-id` resolved to
    /// (downloaded with `python`, if the cache lacks it).
    fn request(
        &self,
        python: &str,
        progress: crate::pipeline::Progress,
    ) -> Result<Option<(crate::trace::TraceRequest, Option<crate::pipeline::model_id::HubModel>)>>
    {
        use crate::pipeline::hub_download::{self, Download};
        use crate::pipeline::model_id::{self, HubCache, ModelId};
        use crate::trace::{ModelSource, TraceRequest};
        // clap refuses two of these as flags; a config file can still name two.
        let named: Vec<&str> = [
            ("--model", self.model.is_some()),
            ("--model-dir", self.model_dir.is_some()),
            ("--model-id", self.model_id.is_some()),
            ("--model-fn", self.model_fn.is_some()),
            ("--model-caller", self.model_caller.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect();
        if named.len() > 1 {
            bail!("{} each name a model to trace: give one", named.join(" and "));
        }
        match named.first().copied() {
            _ if self.set.is_empty() => {}
            Some("--model-fn") => {
                bail!("--set changes the config --model builds; --model-fn builds its own model: change the config in the function")
            }
            Some("--model-caller") => {
                bail!("--set changes the config --model builds; the caller's model is built: change its config before exporting")
            }
            Some(other @ ("--model-dir" | "--model-id")) => {
                bail!("--set changes the config --model builds; {other} loads the folder's config.json: edit it there (in a copy of the folder)")
            }
            _ => {}
        }
        let trust_remote_code = self.trust_remote_code;
        if self.allow_pickle && self.model_id.is_none() {
            bail!("--allow-pickle lets --model-id download and load pickled weights (`pytorch_model.bin`): it applies to --model-id only");
        }
        let mut hub = None;
        let source = match (&self.model, &self.model_dir, &self.model_id, &self.model_fn) {
            _ if self.model_caller.is_some() => ModelSource::Caller,
            (Some(name), ..) => {
                let overrides = self
                    .set
                    .iter()
                    .map(|kv| {
                        kv.split_once('=')
                            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                    })
                    .collect::<Option<Vec<_>>>()
                    .context("--set takes KEY=VALUE pairs")?;
                ModelSource::Architecture { name: name.clone(), overrides }
            }
            (_, Some(dir), ..) => {
                let path = dir.canonicalize().with_context(|| format!("{}", dir.display()))?;
                model_id::check_remote_code(
                    &path,
                    &format!("--model-dir {}", dir.display()),
                    trust_remote_code,
                )?;
                ModelSource::Directory { path, trust_remote_code, layers: None }
            }
            (_, _, Some(id), _) => {
                let id = ModelId::parse(id)?;
                let how = Download {
                    python: python.to_string(),
                    allow_pickle: self.allow_pickle,
                    trust_remote_code,
                };
                let resolved = hub_download::fetch(&id, &HubCache::from_env()?, &how, progress)?;
                model_id::check_remote_code(
                    &resolved.snapshot,
                    &format!("--model-id {id}"),
                    trust_remote_code,
                )?;
                hub = Some(resolved.model);
                ModelSource::Directory { path: resolved.snapshot, trust_remote_code, layers: None }
            }
            (.., Some(spec)) if spec.starts_with("python:") && spec.matches(':').count() == 2 => {
                ModelSource::Function(spec.clone())
            }
            (.., Some(spec)) => bail!("--model-fn `{spec}`: expected python:module:function"),
            (None, None, None, None) => return Ok(None),
        };
        if trust_remote_code && !matches!(source, ModelSource::Directory { .. }) {
            bail!("--trust-remote-code lets a model folder's own code run: it applies to --model-dir and --model-id only");
        }
        if self.static_shapes && (self.dynamic || !self.dynamic_shapes.is_empty()) {
            let other = if self.dynamic { "--dynamic" } else { "--dynamic-shapes" };
            bail!("--static fixes every axis and {other} makes axes dynamic: give one");
        }
        let dynamic_shapes = crate::trace::shapes::AxisRange::parse_all(&self.dynamic_shapes)?;
        // Dynamic unless --static; with --dynamic-shapes, the ranges alone are.
        let dynamic = !self.static_shapes && dynamic_shapes.is_empty();
        let sample = crate::trace::shapes::SampleSizes::parse(&self.sample, dynamic)?;
        if self.trace_cache.is_some() && matches!(source, ModelSource::Caller) {
            bail!("--trace-cache keys a program by the files that made it, and the caller's model is in memory: drop --trace-cache");
        }
        if !self.sample.is_empty() && matches!(source, ModelSource::Function(_)) {
            bail!("--sample sizes the inputs hfx generates, and --model-fn's function returns its own: drop --sample");
        }
        let defaults = TraceRequest::new(source);
        let generation = self.generation()?;
        let request = TraceRequest {
            generation,
            task: self.task.as_deref().map(checked_task).transpose()?,
            dynamic,
            dynamic_shapes,
            batch: sample.batch,
            sequence: sample.sequence,
            decompose: self.decompose,
            device: self
                .device
                .as_deref()
                .map(checked_device)
                .transpose()?
                .unwrap_or(defaults.device.clone()),
            dtype: self
                .dtype
                .as_deref()
                .map(checked_dtype)
                .transpose()?
                .unwrap_or(defaults.dtype.clone()),
            ..defaults
        };
        Ok(Some((request, hub)))
    }

    /// `--generation` and the options that only mean something with it.
    fn generation(&self) -> Result<Option<crate::trace::Generation>> {
        if !self.generation {
            let given: Vec<&str> = [
                ("--multi-token-decode", self.multi_token_decode),
                ("--cache", self.cache.is_some()),
                ("--max-cache-len", self.max_cache_len.is_some()),
                ("--generate-steps", self.generate_steps.is_some()),
                ("--genai", self.genai),
            ]
            .into_iter()
            .filter_map(|(flag, given)| given.then_some(flag))
            .collect();
            if !given.is_empty() {
                bail!("{} shape an export for generation: add --generation", given.join(", "));
            }
            return Ok(None);
        }
        if !self.dynamic_shapes.is_empty() {
            bail!("--dynamic-shapes names one program's inputs, and --generation exports several (each dynamic by default): drop --dynamic-shapes");
        }
        let max_cache_len = match (self.cache.unwrap_or(CacheKind::Dynamic), self.max_cache_len) {
            (CacheKind::Dynamic, None) => None,
            (CacheKind::Dynamic, Some(_)) => {
                bail!("--max-cache-len sizes a static cache: add --cache static")
            }
            (CacheKind::Static, None) => {
                bail!("--cache static needs its length: add --max-cache-len N")
            }
            (CacheKind::Static, Some(n)) if n < 2 => bail!(
                "--max-cache-len {n}: a static cache holds at least the prompt and one new token"
            ),
            (CacheKind::Static, Some(n)) => Some(n),
        };
        if max_cache_len.is_none() && self.static_shapes {
            bail!("--generation with the model's growing cache cannot be --static (each decode step reads a past one token longer): drop --static, or use a fixed-size cache: --cache static --max-cache-len N");
        }
        if self.genai && max_cache_len.is_some() {
            bail!("--genai: ONNX Runtime GenAI grows the decoder's cache itself and cannot run one exported against a static cache: drop --cache static");
        }
        let steps = self.generate_steps.unwrap_or(8);
        if !(1..=1024).contains(&steps) {
            bail!("--generate-steps {steps}: give 1 to 1024");
        }
        Ok(Some(crate::trace::Generation {
            // GenAI runs one decoder for the prompt and each new token.
            multi_token_decode: self.multi_token_decode || self.genai,
            max_cache_len,
            steps,
            genai: self.genai,
        }))
    }
}

/// The pipeline tasks of `optimum-cli export` (and transformers' `pipeline`),
/// each with the class `--task` names for it.
const PIPELINE_TASKS: &[(&str, &str)] = &[
    ("audio-classification", "AutoModelForAudioClassification"),
    ("automatic-speech-recognition", "AutoModelForSpeechSeq2Seq"),
    ("feature-extraction", "AutoModel"),
    ("fill-mask", "AutoModelForMaskedLM"),
    ("image-classification", "AutoModelForImageClassification"),
    ("image-segmentation", "AutoModelForImageSegmentation"),
    ("image-text-to-text", "AutoModelForImageTextToText"),
    ("image-to-text", "AutoModelForVision2Seq"),
    ("multiple-choice", "AutoModelForMultipleChoice"),
    ("object-detection", "AutoModelForObjectDetection"),
    ("question-answering", "AutoModelForQuestionAnswering"),
    ("semantic-segmentation", "AutoModelForSemanticSegmentation"),
    ("text-classification", "AutoModelForSequenceClassification"),
    ("text-generation", "AutoModelForCausalLM"),
    ("text2text-generation", "AutoModelForSeq2SeqLM"),
    ("token-classification", "AutoModelForTokenClassification"),
];

/// `--task`, checked before any work: a class name (`AutoModelForCausalLM`,
/// `BertModel`) or a dotted path to one; a pipeline task's name (as optimum
/// takes it) is refused naming the class that builds its model.
fn checked_task(task: &str) -> Result<String> {
    if task.split('.').all(crate::trace::shapes::is_identifier) {
        return Ok(task.to_string());
    }
    let (pipeline, with_past) = match task.strip_suffix("-with-past") {
        Some(base) => (base, " with --generation (the cache is its own input)"),
        None => (task, ""),
    };
    if let Some((_, class)) = PIPELINE_TASKS.iter().find(|(name, _)| *name == pipeline) {
        bail!("--task {task}: names the class to build, not a pipeline task: --task {class}{with_past}");
    }
    let mut close: Vec<(usize, &str, &str)> = PIPELINE_TASKS
        .iter()
        .map(|(name, class)| (edit_distance(pipeline, name), *name, *class))
        .filter(|(distance, name, _)| *distance <= name.len() / 3)
        .collect();
    close.sort();
    let suggestion = match close.first() {
        Some((_, name, class)) => format!(" (for the pipeline task {name}: --task {class})"),
        None => String::new(),
    };
    bail!("--task {task}: not a class name; --task names the class to build (AutoModelForCausalLM, BertModel, ...){suggestion}")
}

/// `--dtype`, checked before any work: a floating dtype a model is traced in.
fn checked_dtype(dtype: &str) -> Result<String> {
    const DTYPES: [&str; 4] = ["float32", "float16", "bfloat16", "float64"];
    if !DTYPES.contains(&dtype) {
        bail!("--dtype {dtype}: not a floating torch dtype; give one of {}", DTYPES.join(", "));
    }
    Ok(dtype.to_string())
}

/// `--device`, checked before any work: `cpu`, `cuda` or `cuda:N`.
fn checked_device(device: &str) -> Result<String> {
    let index = device.strip_prefix("cuda:");
    if !(device == "cpu"
        || device == "cuda"
        || index.is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())))
    {
        bail!("--device {device}: give cpu, cuda or cuda:N");
    }
    Ok(device.to_string())
}

/// The Levenshtein distance between `a` and `b`, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The run options a `--config` file may set (the counterpart of the reference
/// `AutoExportConfig.from_dict`). Relative paths are relative to the file.
fn parse_delegate(s: &str) -> Result<crate::trace::protocol::Delegate, String> {
    match s {
        "xnnpack" => Ok(crate::trace::protocol::Delegate::Xnnpack),
        other => Err(format!("unknown ExecuTorch delegate `{other}` (xnnpack)")),
    }
}

fn parse_backend(s: &str) -> Result<Backend, String> {
    toml::Value::String(s.to_string()).try_into::<Backend>().map_err(|_| {
        format!(
            "unknown backend `{s}` (dynamo, onnx, executorch, executorch.xnnpack, executorch.cuda, openvino)"
        )
    })
}

pub fn run(cli: Cli) -> Result<()> {
    let verbose = cli.verbose;
    let progress = crate::pipeline::Progress::for_stderr(verbose, cli.quiet);
    match cli.command {
        Command::Plugins(PluginsCommand::List { set, backend }) => {
            plugins::list(&set.folder_options()?, backend)
        }
        Command::Plugins(PluginsCommand::Inspect { name, set }) => {
            plugins::inspect(&set.folder_options()?, &name)
        }
        Command::Plugins(PluginsCommand::Verify { set, strict }) => {
            plugins::verify(&set.folder_options()?, strict)
        }
        Command::Plugins(PluginsCommand::Test { folders, mut set }) => {
            // The folders named are what is tested; the rest of the set (an
            // installed hfx's defaults) translates what their cases need around them.
            set.plugins.extend(folders.iter().cloned());
            plugins::test(&set.folder_options()?, &folders)
        }
        Command::Plugins(PluginsCommand::TestOps(args)) => plugins::test_ops(args, progress),
        Command::Plugins(PluginsCommand::Capture(args)) => capture(args, progress),
        Command::Plugins(PluginsCommand::Lock { set, output }) => {
            plugins::lock(&set.folder_options()?, &output)
        }
        Command::Plugins(PluginsCommand::New(args)) => crate::plugins::scaffold::new_plugin(&args),
        Command::Plugins(PluginsCommand::Build { dirs }) => plugins::build(&dirs),
        Command::Plugins(PluginsCommand::Precompile { set }) => {
            plugins::precompile(&set.folder_options()?)
        }
        Command::Run(args) => run_export(args, verbose, progress),
        Command::Generate(args) => generate(args),
        Command::Setup { python } => setup::setup(&python),
        Command::Doctor { set } => setup::doctor(&set.options()?),
    }
}

/// `hfx generate`: the text on stdout as the worker produces it, then with
/// `--compare` whether eager transformers generated the same tokens.
fn generate(args: GenerateArgs) -> Result<()> {
    use crate::pipeline::generate::{first_difference, token_at, Compare, GenerateOptions};
    use std::io::Write as _;

    if args.max_new_tokens == 0 {
        bail!("--max-new-tokens 0 generates nothing: give 1 or more");
    }
    let sampling = if args.sample {
        let temperature = args.temperature.unwrap_or(1.0);
        if !(temperature.is_finite() && temperature > 0.0) {
            bail!("--temperature {temperature}: give a number above 0 (1.0 samples as the model's probabilities say)");
        }
        Some(crate::trace::protocol::Sampling { temperature, top_k: args.top_k.unwrap_or(50) })
    } else {
        None
    };
    let compare = match (args.compare, args.model) {
        (false, _) => Compare::No,
        (true, Some(model)) => Compare::Folder(model),
        (true, None) => Compare::Recorded,
    };
    let set = SetOptions { python: args.python, ..Default::default() };
    let options = GenerateOptions {
        folder: args.folder,
        prompt: args.prompt,
        max_new_tokens: args.max_new_tokens,
        sampling,
        seed: args.seed,
        compare,
        python: set.python(),
        worker: crate::trace::WorkerOptions {
            env: vec![("HF_HUB_OFFLINE".into(), "1".into())],
            memory_limit: Some(crate::trace::memory::default_limit()),
            ..Default::default()
        },
        deadline: Duration::from_secs(args.deadline_s),
    };
    let stream = Box::new(|text: &str| {
        let mut out = std::io::stdout().lock();
        // A closed stdout ends nothing here: the worker finishes, and hfx exits after it.
        let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    });
    let reply = crate::pipeline::generate::generate(&options, stream)?;
    println!();
    tracing::info!(
        "{} token(s) after a prompt of {} in {:.1} s ({})",
        reply.generated.ids.len(),
        reply.prompt_tokens,
        reply.seconds,
        reply.providers.join(", ")
    );
    let Some(eager) = &reply.eager else { return Ok(()) };
    match first_difference(&reply.generated, eager) {
        None => {
            println!(
                "--compare: the {} token(s) are eager `generate`'s ({})",
                eager.ids.len(),
                reply.providers.join(", ")
            );
            Ok(())
        }
        Some(at) => {
            println!("eager `generate`: {}", eager.text);
            bail!(
                "--compare: token {} differs: the export generated {}, eager `generate` {} (the {at} token(s) before it agree)",
                at + 1,
                token_at(&reply.generated, at),
                token_at(eager, at)
            )
        }
    }
}

/// `hfx run`: options fixed once, the pipeline, then its summary (and report).
fn run_export(args: RunArgs, verbose: u8, progress: crate::pipeline::Progress) -> Result<()> {
    let (options, report) = config::merge(args, progress)?;
    let summaries = crate::pipeline::run(options, progress);
    crate::pipeline::progress::finish();
    let summaries = match summaries {
        Ok(summaries) => summaries,
        Err(error) => {
            for report in &report {
                if let Err(unwritten) = crate::report::write_failure(&error, report) {
                    tracing::warn!("{unwritten:#}");
                }
            }
            return Err(error);
        }
    };
    let several = summaries.len() > 1;
    for summary in &summaries {
        if several {
            println!("── {} → {}", summary.backend, summary.written.display());
        }
        summary.print(verbose);
        for report in &report {
            // One report per backend: `report.html` → `report.onnx.html`.
            let path =
                if several { report.per_backend(summary.backend) } else { report.path.clone() };
            crate::report::write(
                summary,
                &crate::report::ReportTarget { path: path.clone(), ..report.clone() },
            )?;
            println!("report: {}", path.display());
        }
    }
    Ok(())
}

fn capture(mut args: CaptureArgs, progress: crate::pipeline::Progress) -> Result<()> {
    if args.run.output.is_some() || args.run.verify {
        bail!("capture writes the case (--case FILE): drop -o and --verify");
    }
    if args.count == 0 {
        bail!("--count 0 cuts nothing: give 1 or more");
    }
    // A placeholder the pipeline's options need; capture writes into a scratch folder.
    args.run.output = Some(args.case.with_extension("pt2"));
    if args.program && args.run.backend.is_empty() {
        // A program is captured before any backend's stage: any backend will do.
        args.run.backend = vec![Backend::Dynamo];
    }
    let (options, report) = config::merge(args.run, progress)?;
    if !report.is_empty() {
        bail!("capture writes the case (--case FILE): drop --report");
    }
    let Some(target) = args.node else {
        let captured = crate::selftest::capture::capture_program(options, &args.case)?;
        println!(
            "wrote {}: a program of {} node(s), {} input value(s), {} KiB",
            args.case.display(),
            captured.nodes,
            captured.inputs,
            captured.bytes.div_ceil(1024)
        );
        return Ok(());
    };
    let what = crate::selftest::capture::CaptureOptions {
        target,
        count: args.count,
        radius: args.radius,
        case: args.case,
    };
    let captured = crate::selftest::capture::capture(options, &what, progress)?;
    crate::pipeline::progress::finish();
    println!(
        "wrote {}: {} node(s) around {}, {} input value(s), {} KiB",
        what.case.display(),
        captured.nodes,
        what.target,
        captured.inputs,
        captured.bytes.div_ceil(1024)
    );
    Ok(())
}

// ── Plugin sets ──

/// The installed default sets (`defaults`, when they exist), then the folders
/// given. A given folder that holds the defaults or lies inside them (a
/// checkout's `plugins/onnx`, the install's own folder) replaces them: the
/// same plugin is never found twice.
fn with_default_plugins(given: Vec<PathBuf>, defaults: Option<PathBuf>) -> Vec<PathBuf> {
    let Some(defaults) = defaults.and_then(|d| d.canonicalize().ok()).filter(|d| d.is_dir()) else {
        return given;
    };
    // An opt-in set inside the defaults is skipped by their discovery: it adds to them.
    let overlaps = given.iter().filter_map(|g| g.canonicalize().ok()).any(|g| {
        (g.starts_with(&defaults) && !crate::plugins::discover::is_opt_in_set(&g))
            || defaults.starts_with(&g)
    });
    if overlaps {
        return given;
    }
    std::iter::once(defaults).chain(given).collect()
}

impl SandboxArgs {
    /// The plugin runtime's options, each limit checked.
    fn runtime_options(&self) -> Result<RuntimeOptions> {
        let defaults = Limits::default();
        let memory_bytes = match self.plugin_memory_mib {
            None => defaults.memory_bytes,
            // A plugin's linear memory is 32-bit: 4 GiB is all it can address.
            Some(m) if (1..=MAX_PLUGIN_MEMORY_MIB).contains(&m) => m << 20,
            Some(m) => bail!("--plugin-memory-mib {m}: give 1 to {MAX_PLUGIN_MEMORY_MIB} (a plugin's 32-bit memory)"),
        };
        let limits = Limits {
            memory_bytes,
            fuel_per_call: self.plugin_fuel.unwrap_or(defaults.fuel_per_call),
            deadline: self.plugin_deadline_ms.map_or(defaults.deadline, Duration::from_millis),
            ..defaults
        };
        let cache_dir = if self.no_cache {
            None
        } else {
            self.cache_dir.clone().or_else(crate::plugins::cache::ComponentCache::default_dir)
        };
        Ok(RuntimeOptions { limits, cache_dir })
    }
}

/// A loaded plugin set with its runtime and what the lock says about it.
impl PluginSetArgs {
    /// The set's options, as `run` takes them (no folder is fine: no plugins).
    fn options(self) -> Result<SetOptions> {
        let runtime = self.sandbox.runtime_options()?;
        let defaults = if self.no_default_plugins {
            None
        } else {
            crate::installed::Installed::find().map(|i| i.plugins())
        };
        let folders = with_default_plugins(self.plugins, defaults);
        Ok(SetOptions {
            folders,
            targets: self.targets,
            python: self.python,
            lock: self.lock,
            locked: self.locked,
            runtime,
        })
    }

    /// The set's options for a `plugins` command, which needs a folder (the
    /// installed default sets count).
    fn folder_options(self) -> Result<SetOptions> {
        let options = self.options()?;
        if options.folders.is_empty() {
            bail!("no plugin folder given (--plugins DIR; an installed hfx has its default sets)");
        }
        Ok(options)
    }
}

#[cfg(test)]
mod readme {
    //! The README's commands run as written: every `hfx` line of its first
    //! block and of its command list parses with this CLI (placeholders taken
    //! as written, `a|b` as its first choice, `[optional]` parts included),
    //! and every script and binary it names exists.

    use clap::Parser;

    const README: &str = include_str!("../../../README.md");
    const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

    /// The commands of the README's first shell block and of its command list.
    fn commands() -> Vec<String> {
        let mut lines = Vec::new();
        // None outside a code block; inside, whether it is shell.
        let mut block: Option<bool> = None;
        let mut section = "";
        for line in README.lines() {
            if let Some(title) = line.strip_prefix("## ") {
                section = title;
            }
            if line.starts_with("```") {
                block = match block {
                    Some(_) => None,
                    None => Some(line == "```sh"),
                };
                continue;
            }
            if block == Some(true) && (section.is_empty() || section == "Commands") {
                let command = line.split(" #").next().unwrap_or("").trim();
                if !command.is_empty() && !command.starts_with('#') {
                    lines.push(command.to_string());
                }
            }
        }
        lines
    }

    /// `hfx ...` as the words clap gets: `[x]` → `x`, `a|b` → `a`, `x | y`
    /// → `x` (the alternative after ` | `: its first word and the values up
    /// to the next flag), a `...` (the rest of a command shown above)
    /// dropped, `N` a count.
    fn words(command: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut alternative = None; // Some(started) inside the alternative after ` | `
        for word in command.replace(['[', ']'], "").split_whitespace() {
            if word == "|" {
                alternative = Some(false);
                continue;
            }
            match alternative {
                Some(false) => {
                    alternative = Some(true);
                    continue;
                }
                Some(true) if !word.starts_with('-') => continue,
                _ => alternative = None,
            }
            if word == "..." {
                continue;
            }
            let word = word.split('|').next().unwrap_or(word);
            words.push(if word == "N" { "8".to_string() } else { word.to_string() });
        }
        words
    }

    #[test]
    fn every_hfx_command_of_the_readme_parses() {
        let commands = commands();
        let mut checked = 0;
        for command in &commands {
            // The first command is `cargo xtask install && cd /tmp && ~/.local/bin/hfx run ... && python ...`.
            let Some(start) =
                command.find("hfx run").or_else(|| command.strip_prefix("hfx ").map(|_| 0))
            else {
                continue;
            };
            // ... `&& python -c ...`: what follows the hfx command is another's.
            let hfx = &command[start..];
            let words = words(hfx.split(" && ").next().unwrap_or(hfx));
            if words.iter().any(|w| w == "flags") {
                continue; // `[flags override the file]`: prose in a command
            }
            let parsed = super::Cli::try_parse_from(&words);
            // `hfx run ...` lines that show only some options lack a backend or output: clap
            // parses them; the pipeline's own checks say what is missing.
            assert!(
                parsed.is_ok(),
                "README: `{command}` does not parse: {}",
                parsed.err().map(|e| e.to_string()).unwrap_or_default()
            );
            checked += 1;
        }
        assert!(checked >= 20, "only {checked} hfx commands found in the README");
    }

    /// The README's generation loops are `tests/python/generation_loops.py`'s,
    /// which the generation tests run: its text between the README markers.
    #[test]
    fn the_readme_generation_loops_are_the_tested_ones() {
        let loops = include_str!("../../../tests/python/generation_loops.py");
        let start = loops.find("# ── README: loading ──").expect("the loops' first marker");
        let end = loops.find("# ── end of the README's loops ──").expect("the loops' end marker");
        let tested = loops[start..end].trim_end();
        assert!(
            README.contains(&format!("{tested}\n```")),
            "README's generation loops differ from tests/python/generation_loops.py: paste its text between the markers"
        );
    }

    #[test]
    fn every_script_and_binary_the_readme_names_exists() {
        for command in commands() {
            for word in command.split_whitespace() {
                if (word.starts_with("bench/")
                    || word.starts_with("tests/")
                    || word.starts_with("tools/"))
                    && word.ends_with(".py")
                {
                    assert!(
                        std::path::Path::new(ROOT).join(word).is_file(),
                        "README names {word}, which does not exist"
                    );
                }
            }
            if let Some(bin) =
                command.split("--bin ").nth(1).and_then(|rest| rest.split_whitespace().next())
            {
                let manifest =
                    std::fs::read_to_string(std::path::Path::new(ROOT).join("bench/Cargo.toml"))
                        .unwrap();
                assert!(
                    manifest.contains(&format!("name = \"{bin}\"")),
                    "README runs --bin {bin}, which bench/Cargo.toml does not declare"
                );
            }
            if let Some(task) =
                command.strip_prefix("cargo xtask ").and_then(|rest| rest.split_whitespace().next())
            {
                let xtask =
                    std::fs::read_to_string(std::path::Path::new(ROOT).join("xtask/src/main.rs"))
                        .unwrap();
                assert!(
                    xtask.contains(&format!("\"{task}\"")),
                    "README runs `cargo xtask {task}`, which xtask does not know"
                );
            }
        }
    }
}

#[cfg(test)]
mod default_plugins {
    use super::with_default_plugins;

    /// A folder inside the defaults replaces them, unless it is an opt-in set
    /// (which their discovery skips): that one adds to them.
    #[test]
    fn an_opt_in_set_inside_the_defaults_adds_to_them() {
        let dir = tempfile::tempdir().unwrap();
        let defaults = dir.path().canonicalize().unwrap();
        for folder in ["onnx", "onnx-ort-cpu"] {
            std::fs::create_dir(defaults.join(folder)).unwrap();
        }
        std::fs::write(defaults.join("onnx-ort-cpu/set.toml"), "").unwrap();
        let set = defaults.join("onnx-ort-cpu");
        assert_eq!(
            with_default_plugins(vec![set.clone()], Some(defaults.clone())),
            [defaults.clone(), set]
        );
        let onnx = defaults.join("onnx");
        assert_eq!(with_default_plugins(vec![onnx.clone()], Some(defaults)), [onnx]);
    }
}
