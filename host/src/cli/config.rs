//! `hfx run`'s options: the `--config` file (the counterpart of the
//! reference's `AutoExportConfig.from_dict`) merged with the flags, checked,
//! and fixed into the pipeline's [`RunOptions`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use super::{parse_backend, RunArgs, MAX_WORKER_GIB, MIN_WORKER_GIB};
use crate::onnx::quantize::{Calibration, Int4Options, Quantize, CALIBRATION_SAMPLES};
use crate::pipeline::{
    Artifact, Destination, OnnxOptions, OpenvinoOptions, PteOptions, RunOptions, Source, Target,
    Trace,
};
use crate::plugins::Backend;
use crate::report::ReportTarget;
use crate::stages::OnPluginError;
use crate::trace::protocol::{Delegate, EagerQuantize, MemoryPlanning};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RunConfig {
    pub backend: Option<String>,
    pub input: Option<PathBuf>,
    pub output: Option<PathBuf>,
    #[serde(default)]
    pub plugins: Vec<PathBuf>,
    #[serde(default)]
    pub targets: BTreeMap<String, String>,
    pub python: Option<String>,
    pub lock: Option<PathBuf>,
    #[serde(default)]
    pub locked: bool,
    pub on_plugin_error: Option<String>,
    #[serde(default)]
    pub sandbox: SandboxConfig,
    /// The model to trace (instead of `input`): architecture and config overrides...
    pub model: Option<String>,
    #[serde(default)]
    pub set: BTreeMap<String, toml::Value>,
    /// ...or a local model folder, a Hub model (`org/name[@revision]`,
    /// downloaded into the Hub cache if it lacks it), or `python:module:function`.
    pub model_dir: Option<PathBuf>,
    pub model_id: Option<String>,
    pub model_fn: Option<String>,
    /// Load a model folder's own modeling code (`auto_map`).
    #[serde(default)]
    pub trust_remote_code: bool,
    /// With `model-id`: pickled weights may be downloaded and loaded (`--allow-pickle`).
    #[serde(default)]
    pub allow_pickle: bool,
    pub task: Option<String>,
    /// Accepted and ignored: exports are dynamic by default.
    #[serde(default)]
    pub dynamic: bool,
    /// Every input axis fixed at the sample sizes (`--static`).
    #[serde(default, rename = "static")]
    pub static_shapes: bool,
    #[serde(default)]
    pub dynamic_shapes: Vec<String>,
    /// The sample inputs' sizes: `sample = { batch = 1, sequence = 128 }` (`--sample`).
    #[serde(default)]
    pub sample: BTreeMap<String, toml::Value>,
    pub trace_deadline_s: Option<u64>,
    pub worker_memory_gib: Option<f64>,
    #[serde(default)]
    pub decompose: bool,
    pub opset: Option<u32>,
    #[serde(default)]
    pub verify: bool,
    #[serde(default)]
    pub external_data: bool,
    #[serde(default)]
    pub no_optimize: bool,
    /// `--quantize` and its options.
    pub quantize: Option<String>,
    pub quantize_block_size: Option<usize>,
    pub quantize_embeddings: Option<String>,
    #[serde(default)]
    pub quantize_asymmetric: bool,
    pub quantize_accuracy_level: Option<u8>,
    #[serde(default)]
    pub quantize_exclude: Vec<String>,
    pub calibration_samples: Option<u32>,
    pub calibration: Option<PathBuf>,
    /// The `.pte`'s memory planning (the reference's `ExecutorchConfig` fields).
    pub alloc_graph_input: Option<bool>,
    pub alloc_graph_output: Option<bool>,
    pub alloc_mutable_buffers: Option<bool>,
    /// An OpenVINO IR without state (`--stateless`).
    #[serde(default)]
    pub stateless: bool,
    /// An OpenVINO IR's float32 weights stored as float16 (`--compress-to-fp16`).
    #[serde(default)]
    pub compress_to_fp16: bool,
    /// A report of the run (`.html` or `.json`).
    pub report: Option<PathBuf>,
    /// Where traced programs are kept by what made them.
    pub trace_cache: Option<PathBuf>,
    pub device: Option<String>,
    pub dtype: Option<String>,
    /// Export for generation: prefill and decode components (`--generation`).
    #[serde(default)]
    pub generation: bool,
    #[serde(default)]
    pub multi_token_decode: bool,
    pub cache: Option<String>,
    pub max_cache_len: Option<u32>,
    pub generate_steps: Option<u32>,
    /// With `generation`: an ONNX Runtime GenAI package (`--genai`).
    #[serde(default)]
    pub genai: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SandboxConfig {
    pub memory_mib: Option<usize>,
    pub fuel: Option<u64>,
    pub deadline_ms: Option<u64>,
    pub cache_dir: Option<PathBuf>,
    #[serde(default)]
    pub no_cache: bool,
}

/// Merges the flags over the config file and fixes the run's options,
/// refusing every combination the pipeline cannot carry out; with where the
/// run's report goes (`--report`), checked now rather than after the export.
pub(super) fn merge(
    args: RunArgs,
    progress: crate::pipeline::Progress,
) -> Result<(RunOptions, Vec<ReportTarget>)> {
    let (config, base) = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let config: RunConfig = toml::from_str(&text).map_err(|e| {
                anyhow::anyhow!("{}: {}", path.display(), e.message().replace('\n', " "))
            })?;
            (config, path.parent().map(Path::to_path_buf).unwrap_or_default())
        }
        None => (RunConfig::default(), PathBuf::new()),
    };
    let rel = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
    let backends = match (args.backend, &config.backend) {
        (given, _) if !given.is_empty() => given,
        (_, Some(b)) => b
            .split(',')
            .map(|b| parse_backend(b.trim()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(anyhow::Error::msg)?,
        (_, None) => bail!("no backend (--backend or `backend` in the config)"),
    };
    // `--backend executorch --delegate xnnpack` is the reference's spelling of executorch.xnnpack.
    let backends = backends
        .into_iter()
        .map(|backend| match (backend, args.delegate) {
            (Backend::Executorch | Backend::ExecutorchXnnpack, Some(Delegate::Xnnpack)) => Ok(Backend::ExecutorchXnnpack),
            (other, Some(delegate)) => bail!("--delegate {} is an ExecuTorch delegate: give it with --backend executorch, not {other}", delegate.name()),
            (backend, None) => Ok(backend),
        })
        .collect::<Result<Vec<_>>>()?;
    if let Some(twice) =
        backends.iter().enumerate().find_map(|(i, b)| backends[..i].contains(b).then_some(b))
    {
        bail!("--backend names {twice} twice: each backend is written once");
    }
    let on_plugin_error = match (args.on_plugin_error, &config.on_plugin_error) {
        (Some(p), _) => p,
        (None, Some(p)) => {
            <OnPluginError as clap::ValueEnum>::from_str(p, true).map_err(anyhow::Error::msg)?
        }
        (None, None) => OnPluginError::Fail,
    };
    let mut set = args.set;
    if set.plugins.is_empty() {
        set.plugins = config.plugins.into_iter().map(rel).collect();
    }
    if let Some(target) = &args.ort_fusions {
        if !backends.contains(&Backend::Onnx) {
            bail!("--ort-fusions {target} rewrites ONNX graphs: add --backend onnx");
        }
        let defaults = crate::installed::Installed::find().map(|i| i.plugins());
        let folder = crate::plugins::discover::ort_fusion_set(target, defaults.as_deref())
            .map_err(anyhow::Error::msg)?;
        set.plugins.push(folder);
    }
    // Flag targets win over config targets for the same package.
    let mut targets: BTreeMap<String, String> = config.targets;
    targets.extend(set.targets.drain(..));
    set.targets = targets.into_iter().collect();
    set.python = set.python.or(config.python);
    set.lock = set.lock.or(config.lock.map(rel));
    set.locked |= config.locked;
    let s = &mut set.sandbox;
    s.plugin_memory_mib = s.plugin_memory_mib.or(config.sandbox.memory_mib);
    s.plugin_fuel = s.plugin_fuel.or(config.sandbox.fuel);
    s.plugin_deadline_ms = s.plugin_deadline_ms.or(config.sandbox.deadline_ms);
    s.cache_dir = s.cache_dir.take().or(config.sandbox.cache_dir.map(rel));
    s.no_cache |= config.sandbox.no_cache;
    // Model flags win over the config's model; a config model fills in what flags leave out.
    let mut model = args.model;
    if model.model.is_none()
        && model.model_dir.is_none()
        && model.model_id.is_none()
        && model.model_fn.is_none()
        && model.model_caller.is_none()
    {
        model.model = config.model.clone();
        model.model_dir = config.model_dir.clone().map(rel);
        model.model_id = config.model_id.clone();
        model.model_fn = config.model_fn.clone();
    }
    model.trust_remote_code |= config.trust_remote_code;
    model.allow_pickle |= config.allow_pickle;
    if model.set.is_empty() {
        model.set = config
            .set
            .iter()
            .map(|(k, v)| {
                format!("{k}={}", v.as_str().map(String::from).unwrap_or_else(|| v.to_string()))
            })
            .collect();
    }
    model.task = model.task.or(config.task.clone());
    model.dynamic |= config.dynamic;
    model.static_shapes |= config.static_shapes;
    if model.dynamic_shapes.is_empty() {
        model.dynamic_shapes = config.dynamic_shapes.clone();
    }
    if model.sample.is_empty() {
        model.sample = config.sample.iter().map(|(k, v)| format!("{k}={v}")).collect();
    }
    model.trace_deadline_s = model.trace_deadline_s.or(config.trace_deadline_s);
    model.worker_memory_gib = model.worker_memory_gib.or(config.worker_memory_gib);
    model.decompose |= config.decompose;
    model.generation |= config.generation;
    model.multi_token_decode |= config.multi_token_decode;
    model.genai |= config.genai;
    if model.cache.is_none() {
        model.cache = config
            .cache
            .as_deref()
            .map(|c| <crate::cli::CacheKind as clap::ValueEnum>::from_str(c, true))
            .transpose()
            .map_err(anyhow::Error::msg)?;
    }
    model.max_cache_len = model.max_cache_len.or(config.max_cache_len);
    model.generate_steps = model.generate_steps.or(config.generate_steps);
    model.device = model.device.or(config.device.clone());
    model.dtype = model.dtype.or(config.dtype.clone());
    // A `--model-id` the Hub cache lacks is downloaded with the worker's Python.
    let python = crate::plugins::loading::SetOptions::python_for(set.python.as_deref());
    let trace = model.request(&python, progress)?;
    // A Hub model was resolved offline; the worker that loads it stays offline too.
    let offline = trace.as_ref().is_some_and(|(_, hub)| hub.is_some());
    // The deadline of a worker request: the trace's, ExecuTorch's lowering's, and verification's.
    let deadline = Duration::from_secs(model.trace_deadline_s.unwrap_or(600));
    let input = args.input.or(config.input.map(rel));
    let source = match (input, trace) {
        (None, None) => bail!("nothing to export: give a .pt2 (or IR JSON), or a model (--model, --model-dir, --model-id, --model-fn)"),
        (Some(_), Some(_)) => bail!("give either an input file or a model to trace, not both"),
        (Some(input), None) => {
            let ignored = model.trace_only();
            if !ignored.is_empty() {
                bail!("{} apply to a model hfx traces, not to {} (already traced): drop them, or trace with --model", ignored.join(", "), input.display());
            }
            if is_json(&input) { Source::IrJson(input) } else { Source::Pt2(input) }
        }
        (None, Some((mut request, hub))) => {
            // The CUDA set's MoE fusion matches the experts run as batched
            // matmuls, as the reference traces them for `ort_fusions="cuda"`.
            if args.ort_fusions.as_deref() == Some("cuda") {
                request.experts = Some("batched_mm".into());
            }
            let cache = model.trace_cache.clone().or(config.trace_cache.clone().map(rel));
            let verify_layers = model.verify_layers;
            if let Some(layers) = verify_layers {
                if !matches!(request.source, crate::trace::ModelSource::Directory { .. }) {
                    bail!("--verify-layers {layers} truncates a model folder's config over its checkpoint: give --model-dir or --model-id");
                }
                if args.verify || config.verify {
                    bail!("--verify-layers {layers} verifies the model's first {layers} layers instead of the whole model: drop --verify");
                }
                if request.generation.is_some() {
                    bail!("--verify-layers does not apply to --generation (its check generates with the whole model)");
                }
                if layers == 0 {
                    bail!("--verify-layers 0 checks nothing: give 1 or more");
                }
            }
            Source::Trace(Box::new(Trace { request, deadline, hub, load_weights: model.load_weights, cache, verify_layers }))
        }
    };
    let memory_limit = match model.worker_memory_gib {
        None => crate::trace::memory::default_limit(),
        Some(gib) if gib.is_finite() && (MIN_WORKER_GIB..=MAX_WORKER_GIB).contains(&gib) => {
            (gib * crate::trace::memory::GIB as f64) as u64
        }
        Some(gib) => bail!("--worker-memory-gib {gib}: give {MIN_WORKER_GIB} to {MAX_WORKER_GIB}"),
    };
    let caller = model.model_caller.as_deref().map(crate::trace::CallerPipes::parse).transpose()?;
    let worker = crate::trace::WorkerOptions {
        env: if offline { vec![("HF_HUB_OFFLINE".into(), "1".into())] } else { vec![] },
        memory_limit: Some(memory_limit),
        memory_mechanism: model.worker_memory_mechanism.unwrap_or_default(),
        caller,
        ..Default::default()
    };
    let optimize = !(args.no_optimize || config.no_optimize);
    let given = QuantizeArgs {
        scheme: args.quantize.or(config.quantize),
        block: args.quantize_block_size.or(config.quantize_block_size),
        asymmetric: args.quantize_asymmetric || config.quantize_asymmetric,
        accuracy_level: args.quantize_accuracy_level.or(config.quantize_accuracy_level),
        exclude: [args.quantize_exclude, config.quantize_exclude].concat(),
        calibration_samples: args.calibration_samples.or(config.calibration_samples),
        calibration: args.calibration.or(config.calibration.map(rel)),
        ort_fusions: args.ort_fusions.is_some(),
    };
    let embeddings = args.quantize_embeddings.or(config.quantize_embeddings);
    let (quantize, eager_quantize) = if backends.iter().any(|b| b.is_executorch()) {
        (None, eager_quantize(given, embeddings, &backends)?)
    } else if embeddings.is_some() {
        bail!("--quantize-embeddings quantizes an ExecuTorch program's embeddings: use --backend executorch.xnnpack (--quantize int4 on ONNX quantizes the embeddings unless --quantize-exclude names them)");
    } else {
        (quantize(given, optimize, &backends)?, None)
    };
    let mut source = source;
    if let Some(eager) = eager_quantize {
        match &mut source {
            Source::Trace(t) => t.request.quantize = Some(eager),
            _ => bail!("--quantize {}: torchao quantizes the eager model before its trace: give a model to trace (--model, --model-dir, --model-id, --model-fn), not a traced program", eager.name()),
        }
    }
    let output = args
        .output
        .or(config.output.map(rel))
        .context("no output (-o or `output` in the config)")?;
    crate::pipeline::options::check_output(&output)?;
    let reports = if args.report.is_empty() {
        config.report.map(rel).into_iter().collect()
    } else {
        args.report
    };
    let report = reports.iter().map(|path| ReportTarget::new(path)).collect::<Result<Vec<_>>>()?;
    if let Some(same) = report.iter().find(|r| r.path == output) {
        bail!(
            "--report {}: the output's own path; name the report another file",
            same.path.display()
        );
    }
    let opset = args.opset.or(config.opset).unwrap_or(20);
    if !(18..=23).contains(&opset) {
        bail!("--opset {opset}: hfx writes opsets 18 to 23");
    }
    let verify = args.verify || config.verify;
    let onnx = |external_data: bool| {
        Artifact::Onnx(OnnxOptions {
            opset,
            external_data,
            optimize,
            quantize: quantize.clone(),
            weights_dtype: None,
        })
    };
    let external_data = args.external_data || config.external_data;
    let stateful = !(args.stateless || config.stateless);
    if !stateful && !backends.contains(&Backend::Openvino) {
        bail!("--stateless shapes an OpenVINO IR's cache: drop it, or use --backend openvino");
    }
    let compress_to_fp16 = args.compress_to_fp16 || config.compress_to_fp16;
    if compress_to_fp16 && !backends.contains(&Backend::Openvino) {
        bail!("--compress-to-fp16 stores an OpenVINO IR's weights as float16: drop it, or use --backend openvino (--dtype float16 gives other backends float16 weights)");
    }
    let memory = memory_planning(
        MemoryPlanning {
            graph_inputs: !args.no_alloc_graph_input && config.alloc_graph_input.unwrap_or(true),
            graph_outputs: !args.no_alloc_graph_output && config.alloc_graph_output.unwrap_or(true),
            mutable_buffers: !args.no_alloc_mutable_buffers
                && config.alloc_mutable_buffers.unwrap_or(true),
        },
        &backends,
    )?;
    let is_file = output.extension().is_some() && !output.is_dir();
    if let [first, second, ..] = backends.as_slice() {
        if is_file {
            bail!("--backend {first},{second}: each backend writes an export folder of its own (DIR/{first}/, DIR/{second}/): give -o a folder");
        }
        if matches!(&source, Source::Trace(t) if t.request.generation.is_some()) {
            bail!("--generation exports one backend at a time: give --backend one backend");
        }
    }
    let mut targets = Vec::new();
    for &backend in &backends {
        let output =
            if backends.len() > 1 { output.join(backend.to_string()) } else { output.clone() };
        let (mut artifact, destination) =
            target(backend, output, is_file, &source, &onnx, external_data, memory)?;
        if let Artifact::Openvino(openvino) = &mut artifact {
            openvino.stateful = stateful;
            openvino.compress_to_fp16 = compress_to_fp16;
            if let Some(Quantize::Int4(options)) = &mut openvino.onnx.quantize {
                options.embeddings = false;
            }
            let generation = match &source {
                Source::Trace(t) => t.request.generation.as_ref(),
                _ => None,
            };
            if stateful && generation.is_some_and(|g| g.max_cache_len.is_some()) {
                bail!("--cache static --backend openvino: a static cache, updated in place with its length counters, is not folded into OpenVINO state; add --stateless (the cache as inputs and outputs), or drop --cache static");
            }
        }
        if verify && artifact == Artifact::IrJson {
            bail!("--verify runs the artifact in its runtime, and a .json graph has none: write .onnx or .pt2");
        }
        // ONNX Runtime's CPU provider has no bfloat16 kernel for MatMul (nor most
        // ops): the verification would fail only after the trace and the emit.
        if verify
            && matches!(artifact, Artifact::Onnx(_))
            && matches!(&source, Source::Trace(t) if t.request.dtype == "bfloat16")
        {
            bail!("--backend onnx --dtype bfloat16 --verify: ONNX Runtime's CPU provider has no bfloat16 kernels to run the model in: verify with --dtype float32 (or float16), or drop --verify");
        }
        match (&source, &artifact) {
            (Source::IrJson(_), Artifact::Onnx(_) | Artifact::Openvino(_)) => {
                bail!("ONNX is emitted from a .pt2 (its weights), not from IR JSON")
            }
            (Source::IrJson(_), Artifact::Pt2) => {
                bail!("a graph read from JSON can only be written as JSON (-o OUT.json)")
            }
            _ => {}
        }
        targets.push(Target { backend, artifact, destination });
    }
    sixteen_bit_weights(&mut source, &targets, compress_to_fp16)?;
    let options = RunOptions {
        source,
        targets,
        plugins: set.options()?,
        on_plugin_error,
        verify,
        keep_reference: args.keep_reference,
        worker,
        verify_deadline: deadline,
    };
    Ok((options, report))
}

/// What `backend` writes at `output`: the artifact its extension names (a
/// file), or its export folder.
fn target(
    backend: Backend,
    output: PathBuf,
    is_file: bool,
    source: &Source,
    onnx: &impl Fn(bool) -> Artifact,
    external_data: bool,
    memory: MemoryPlanning,
) -> Result<(Artifact, Destination)> {
    // A path with an extension that is not a folder names a file; else it is an export folder.
    Ok(if is_file {
        let artifact = match output.extension().and_then(|e| e.to_str()) {
            Some("pt2") => Artifact::Pt2,
            Some("json") => Artifact::IrJson,
            Some("onnx") if backend == Backend::Onnx => onnx(external_data),
            Some("onnx") => bail!("a .onnx output needs --backend onnx"),
            Some("xml") => openvino(backend, source, onnx)?,
            Some("pte") => pte(backend, memory)?,
            _ => bail!(
                "{}: the output must end in .pt2, .onnx, .pte, .xml or .json",
                output.display()
            ),
        };
        if matches!(&source, Source::Trace(t) if t.request.generation.is_some()) {
            bail!("--generation writes an export folder, one file per component: give -o a folder (-o {}/)", output.with_extension("").display());
        }
        (artifact, Destination::File(output))
    } else {
        if !matches!(source, Source::Trace(_)) {
            bail!("an export folder records the traced model's metadata: trace it (--model, --model-dir, --model-id, --model-fn)");
        }
        let artifact = match backend {
            // The reference's runtime reads an ONNX component's weights from `model.onnx.data`.
            Backend::Onnx => onnx(true),
            Backend::Dynamo => Artifact::Pt2,
            Backend::Executorch | Backend::ExecutorchXnnpack | Backend::ExecutorchCuda => {
                pte(backend, memory)?
            }
            Backend::Openvino => openvino(backend, source, onnx)?,
        };
        if let Source::Trace(t) = &source {
            if t.request.generation.as_ref().is_some_and(|g| g.genai) && backend != Backend::Onnx {
                bail!(
                    "--genai packages an ONNX decoder for ONNX Runtime GenAI: use --backend onnx"
                );
            }
        }
        if let (Artifact::Pte(pte), Source::Trace(t)) = (&artifact, &source) {
            if t.request.generation.is_some()
                && !pte.memory.graph_inputs
                && matches!(pte.lowering, crate::pipeline::Pte::Delegated(_))
            {
                bail!(
                    "--no-alloc-graph-input with --generation --backend {backend}: the program updates its cache's lengths, inputs, in place, and ExecuTorch's runtime keeps an unplanned input's update from one call to the next (its own copy, not the caller's tensor): the components would not generate as eager does; drop the flag, or use --backend executorch (the portable program takes the updated cache as outputs)"
                );
            }
            if t.request.generation.as_ref().is_some_and(|g| g.max_cache_len.is_none()) {
                bail!(
                    "--generation to ExecuTorch needs a fixed-size cache: ExecuTorch plans every buffer at its largest size, and a growing \
                     cache has none; add --cache static --max-cache-len N (ExecuTorch's own LLM export does the same)"
                );
            }
        }
        (artifact, Destination::Folder(output))
    })
}

/// An OpenVINO IR: the model hfx's ONNX stages write (its weights in an
/// external data file, which OpenVINO's frontend maps rather than copies),
/// converted by OpenVINO in the worker. What this backend does not write yet
/// is refused before any work.
fn openvino(
    backend: Backend,
    source: &Source,
    onnx: &impl Fn(bool) -> Artifact,
) -> Result<Artifact> {
    if backend != Backend::Openvino {
        bail!("a .xml output (OpenVINO IR) needs --backend openvino, not {backend}");
    }
    let Artifact::Onnx(mut options) = onnx(true) else {
        unreachable!("`onnx` makes an ONNX artifact")
    };
    // A 16-bit model computes in float32 over its 16-bit weights, as the
    // reference traces it for OpenVINO (`sixteen_bit_weights`).
    if let Source::Trace(t) = source {
        options.weights_dtype = match t.request.dtype.as_str() {
            "bfloat16" => Some(hfx_dtype::DType::Bfloat16),
            "float16" => Some(hfx_dtype::DType::Float16),
            _ => None,
        };
    }
    Ok(Artifact::Openvino(OpenvinoOptions {
        onnx: options,
        stateful: true,
        compress_to_fp16: false,
    }))
}

/// A 16-bit model to OpenVINO, traced as the reference traces it
/// (`patch_16bit_model`): in float32 activations over its weights rounded to
/// the 16-bit dtype, which the IR stores them in
/// ([`crate::onnx::compress`]). The trace is the OpenVINO target's alone, and
/// the weights are stored by a pass of the ONNX optimizer.
fn sixteen_bit_weights(
    source: &mut Source,
    targets: &[Target],
    compress_to_fp16: bool,
) -> Result<()> {
    let Some(options) = targets.iter().find_map(|t| match &t.artifact {
        Artifact::Openvino(o) if o.onnx.weights_dtype.is_some() => Some(&o.onnx),
        _ => None,
    }) else {
        return Ok(());
    };
    let Source::Trace(t) = source else { return Ok(()) };
    let dtype = t.request.dtype.clone();
    if let [first, second, ..] = targets {
        bail!("--dtype {dtype} --backend {},{}: OpenVINO's IR is traced in float32 over {dtype} weights, the other backends in {dtype}: export them one at a time", first.backend, second.backend);
    }
    if !options.optimize {
        bail!("--dtype {dtype} --backend openvino: the IR's weights are stored {dtype} by a pass of the ONNX optimizer, which --no-optimize skips: drop --no-optimize");
    }
    if compress_to_fp16 {
        bail!("--compress-to-fp16 --dtype {dtype}: the IR's weights are {dtype} already: drop --compress-to-fp16");
    }
    t.request.weights_dtype = Some(std::mem::replace(&mut t.request.dtype, "float32".into()));
    Ok(())
}

/// The `.pte` of an ExecuTorch backend: portable (hfx's native emitter), or
/// a delegate ExecuTorch lowers in the worker.
fn pte(backend: Backend, memory: MemoryPlanning) -> Result<Artifact> {
    use crate::pipeline::options::Pte;
    let pte = |lowering| Ok(Artifact::Pte(PteOptions { lowering, memory }));
    match backend {
        Backend::ExecutorchXnnpack => pte(Pte::Delegated(Delegate::Xnnpack)),
        Backend::Executorch => pte(Pte::Portable),
        Backend::ExecutorchCuda => bail!("the ExecuTorch CUDA delegate needs a CUDA GPU and is not implemented: use --backend executorch.xnnpack"),
        other => bail!("a .pte output needs an ExecuTorch backend (--backend executorch.xnnpack), not {other}"),
    }
}

/// The `.pte`'s memory planning, refused where nothing would change: it
/// applies to ExecuTorch backends only, and the portable program has no
/// mutable buffer (its emitter refuses a program that updates one).
fn memory_planning(memory: MemoryPlanning, backends: &[Backend]) -> Result<MemoryPlanning> {
    if memory == MemoryPlanning::default() {
        return Ok(memory);
    }
    let flags = [
        (!memory.graph_inputs, "--no-alloc-graph-input"),
        (!memory.graph_outputs, "--no-alloc-graph-output"),
        (!memory.mutable_buffers, "--no-alloc-mutable-buffers"),
    ];
    let flag = flags.iter().find(|(set, _)| *set).map(|(_, flag)| *flag).unwrap_or_default();
    if let Some(other) = backends.iter().find(|b| {
        !matches!(b, Backend::Executorch | Backend::ExecutorchXnnpack | Backend::ExecutorchCuda)
    }) {
        bail!("{flag} plans an ExecuTorch program's memory, and --backend {other} writes none: drop it, or use --backend executorch.xnnpack");
    }
    if !memory.mutable_buffers && backends.contains(&Backend::Executorch) {
        bail!("--no-alloc-mutable-buffers: the portable program has no mutable buffer to leave out (hfx's emitter takes updated state as inputs); it applies to --backend executorch.xnnpack");
    }
    Ok(memory)
}

/// `--quantize` on an ExecuTorch backend: torchao's schemes for the eager
/// model, checked before any work. The portable program has no kernels for
/// torchao's quantized ops.
fn eager_quantize(
    given: QuantizeArgs,
    embeddings: Option<String>,
    backends: &[Backend],
) -> Result<Option<EagerQuantize>> {
    use crate::trace::protocol::{LinearScheme, WeightBits};
    let QuantizeArgs {
        scheme,
        block,
        asymmetric,
        accuracy_level,
        exclude,
        calibration_samples,
        calibration,
        ort_fusions: _,
    } = given;
    if scheme.is_none() && embeddings.is_none() {
        if block.is_some() {
            bail!("--quantize-block-size tunes --quantize: add --quantize 8da4w (or 4w)");
        }
        return Ok(None);
    }
    let flag = match (&scheme, &embeddings) {
        (Some(s), _) => format!("--quantize {s}"),
        (None, Some(e)) => format!("--quantize-embeddings {e}"),
        (None, None) => unreachable!("returned above"),
    };
    if let Some(other) = backends.iter().find(|b| !b.is_executorch()) {
        bail!("{flag}: one run quantizes for one kind of backend (torchao on the eager model for ExecuTorch, the ONNX writer's own for ONNX), and --backend {other} is the other: export them in two runs");
    }
    if asymmetric
        || accuracy_level.is_some()
        || !exclude.is_empty()
        || calibration_samples.is_some()
        || calibration.is_some()
    {
        bail!("--quantize-asymmetric, --quantize-accuracy-level, --quantize-exclude and the calibration flags tune the ONNX backend's quantizer; ExecuTorch's schemes are torchao's symmetric ones over every linear layer: drop them");
    }
    let linear = match scheme.as_deref() {
        None => None,
        Some("8da4w") => Some(LinearScheme::Int8DynamicInt4Weight),
        Some("4w") => Some(LinearScheme::Int4Weight),
        Some("8w") => Some(LinearScheme::Int8Weight),
        Some(other) => bail!("--quantize {other}: ExecuTorch's schemes are 8da4w, 4w and 8w (int4, int8-dynamic and int8-static are the ONNX backend's)"),
    };
    let embeddings = match embeddings.as_deref() {
        None => None,
        Some("4w") => Some(WeightBits::Int4),
        Some("8w") => Some(WeightBits::Int8),
        Some(other) => bail!("--quantize-embeddings {other}: give 4w or 8w"),
    };
    if backends.contains(&Backend::Executorch) {
        bail!("{flag}: the portable program has no kernels for torchao's quantized ops: use --backend executorch.xnnpack");
    }
    let grouped = linear.is_some_and(|l| l != LinearScheme::Int8Weight)
        || embeddings == Some(WeightBits::Int4);
    let group_size = match block {
        Some(n) if !grouped => bail!("--quantize-block-size {n}: {flag} has no 4-bit groups (8-bit weights are quantized per output channel): drop it"),
        Some(n) if ![32, 64, 128, 256].contains(&n) => bail!("--quantize-block-size {n}: give 32, 64, 128 or 256"),
        Some(n) => n as u32,
        None => EXECUTORCH_GROUP_SIZE,
    };
    Ok(Some(EagerQuantize { linear, embeddings, group_size }))
}

/// The 4-bit schemes' group size on ExecuTorch unless asked (torchao's default).
const EXECUTORCH_GROUP_SIZE: u32 = 32;

fn is_json(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "json")
}

/// The most `--calibration-samples`: each is a run of the float model in the worker.
const MAX_CALIBRATION_SAMPLES: u32 = 1024;

/// `--quantize` and its options, each a flag or else the config's key.
struct QuantizeArgs {
    scheme: Option<String>,
    block: Option<usize>,
    asymmetric: bool,
    accuracy_level: Option<u8>,
    exclude: Vec<String>,
    calibration_samples: Option<u32>,
    calibration: Option<PathBuf>,
    ort_fusions: bool,
}

/// `--quantize` and its options (flags over the config's keys), checked
/// before any work: a scheme of the ONNX backend, which runs it among the
/// optimizer's passes.
fn quantize(given: QuantizeArgs, optimize: bool, backends: &[Backend]) -> Result<Option<Quantize>> {
    let QuantizeArgs {
        scheme,
        block,
        asymmetric,
        accuracy_level,
        exclude,
        calibration_samples,
        calibration,
        ort_fusions,
    } = given;
    if scheme.as_deref() != Some("int8-static")
        && (calibration_samples.is_some() || calibration.is_some())
    {
        bail!("--calibration-samples and --calibration calibrate --quantize int8-static: add it, or drop them");
    }
    let Some(scheme) = scheme else {
        if block.is_some() || asymmetric || accuracy_level.is_some() || !exclude.is_empty() {
            bail!("--quantize-block-size, --quantize-asymmetric, --quantize-accuracy-level and --quantize-exclude tune --quantize: add --quantize int4");
        }
        return Ok(None);
    };
    // OpenVINO's IR is converted from the ONNX backend's model, whose
    // `MatMulNBits` and `DynamicQuantizeMatMul` OpenVINO's ONNX frontend
    // converts (int8-static's calibration runs in ONNX Runtime on the ONNX
    // model the IR replaces).
    let openvino = scheme == "int4" || scheme == "int8-dynamic";
    for backend in backends {
        match backend {
            Backend::Onnx => {}
            Backend::Openvino if openvino => {}
            Backend::Openvino => bail!("--quantize {scheme} --backend openvino: OpenVINO's IR keeps int4 and int8-dynamic weights; int8-static is calibrated in ONNX Runtime: give --quantize int4 or int8-dynamic, or --backend onnx"),
            other => bail!("--quantize {scheme}: quantization is written by the ONNX backend, not --backend {other}: give --backend onnx"),
        }
    }
    if !optimize {
        bail!("--quantize {scheme}: the quantizer is a pass of the ONNX optimizer, which --no-optimize skips: drop one of them");
    }
    if scheme == "int8-dynamic" {
        if block.is_some() || asymmetric || accuracy_level.is_some() {
            bail!("--quantize-block-size, --quantize-asymmetric and --quantize-accuracy-level tune --quantize int4; int8-dynamic quantizes each output channel symmetrically: drop them");
        }
        return Ok(Some(Quantize::Int8Dynamic { exclude }));
    }
    if scheme == "int8-static" {
        if block.is_some() || asymmetric || accuracy_level.is_some() {
            bail!("--quantize-block-size, --quantize-asymmetric and --quantize-accuracy-level tune --quantize int4; int8-static quantizes each output channel symmetrically: drop them");
        }
        if ort_fusions {
            // The fusions' patterns match float MatMuls, which the QDQ pairs
            // stand between.
            bail!("--quantize int8-static with --ort-fusions: the fusions match float MatMuls, which int8-static puts QDQ pairs around: drop one of them");
        }
        let samples = match (calibration_samples, &calibration) {
            (Some(_), Some(file)) => bail!("--calibration {} and --calibration-samples: the file's samples are the calibration inputs: give one of them", file.display()),
            (Some(n), None) if !(1..=MAX_CALIBRATION_SAMPLES).contains(&n) => {
                bail!("--calibration-samples {n}: give 1 to {MAX_CALIBRATION_SAMPLES}")
            }
            (n, _) => n.unwrap_or(CALIBRATION_SAMPLES),
        };
        if let Some(file) = &calibration {
            if !file.is_file() {
                bail!("--calibration {}: no such file: give a .npz of the model's inputs, each with a leading sample axis", file.display());
            }
        }
        let calibration = Calibration { samples, file: calibration };
        return Ok(Some(Quantize::Int8Static { exclude, calibration }));
    }
    if scheme != "int4" {
        bail!("--quantize {scheme}: hfx quantizes `int4`, `int8-dynamic` and `int8-static`");
    }
    let block = block.unwrap_or(Int4Options::default().block);
    if ![32, 64, 128].contains(&block) {
        bail!("--quantize-block-size {block}: give 32, 64 or 128");
    }
    let accuracy_level = accuracy_level.unwrap_or(Int4Options::default().accuracy_level);
    if accuracy_level > 4 {
        bail!("--quantize-accuracy-level {accuracy_level}: give 0 (unset), 1 (float32), 2 (float16), 3 (bfloat16) or 4 (int8)");
    }
    Ok(Some(Quantize::Int4(Int4Options {
        block,
        symmetric: !asymmetric,
        accuracy_level,
        exclude,
        embeddings: true,
    })))
}
