//! The `hfx` command line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use serde::Deserialize;

use crate::graph::Graph;
use crate::plugins::{self, lock::LOCK_FILE, upstream, Backend, Limits, Lock, PluginSet, Runtime, RuntimeOptions};
use crate::stages::{self, OnPluginError, StageReport};

#[derive(Debug, Parser)]
#[command(name = "hfx", version, about = "Export PyTorch / Hugging Face models, with workarounds as WebAssembly plugins")]
pub struct Cli {
    /// More output (-v: skipped plugins and drift details).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manage plugins.
    #[command(subcommand)]
    Plugins(PluginsCommand),
    /// Export: run a backend's stages on a traced program (`.pt2`, or a graph
    /// in the IR's JSON form) and write the result: `.pt2` (the dynamo
    /// artifact; for other backends the program after their FX stages) or the
    /// IR's JSON form (`.json`).
    Run(RunArgs),
}

#[derive(Debug, Subcommand)]
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
    /// Load every plugin, check it (and the lock), and run its self-tests.
    Verify {
        #[command(flatten)]
        set: PluginSetArgs,
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
}

/// Where plugins come from and what they are resolved against.
#[derive(Debug, Args, Default)]
pub struct PluginSetArgs {
    /// Plugin folder (repeatable); every plugin.toml below it is found.
    #[arg(long = "plugins", value_name = "DIR")]
    pub plugins: Vec<PathBuf>,
    /// Upstream version to resolve against instead of what is installed
    /// (repeatable), e.g. `--target onnxruntime=1.31.0` for a deployment runtime.
    #[arg(long = "target", value_name = "PACKAGE=VERSION", value_parser = upstream::parse_target)]
    pub targets: Vec<(String, String)>,
    /// Python whose installed packages give the upstream versions [default: $HFX_PYTHON, .venv/bin/python, python3].
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
    #[arg(long, value_parser = parse_backend)]
    pub backend: Option<Backend>,
    /// Take every option from this TOML file; flags given here override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub set: PluginSetArgs,
    /// What a failing plugin call does to the run; its changes are rolled back either way [default: fail].
    #[arg(long, value_enum)]
    pub on_plugin_error: Option<OnPluginError>,
    #[command(flatten)]
    pub model: ModelArgs,
    /// The ONNX opset of the default domain (18-23) [default: 20].
    #[arg(long)]
    pub opset: Option<u32>,
    /// Run the ONNX model in ONNX Runtime against the eager reference (atol/rtol 1e-3) before writing it.
    #[arg(long)]
    pub verify: bool,
    /// Weights in `<out>.onnx.data` beside the model (always past protobuf's 2 GB limit).
    #[arg(long)]
    pub external_data: bool,
    /// Skip the ONNX graph optimization (identity removal, common subexpressions, dead code).
    #[arg(long)]
    pub no_optimize: bool,
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
    /// `python:module:function` returning `(model, inputs)`.
    #[arg(long)]
    pub model_fn: Option<String>,
    /// The transformers class to build (`AutoModelForCausalLM`, `BertModel`, ...), overriding the default.
    #[arg(long)]
    pub task: Option<String>,
    /// Every input axis dynamic (`Dim.AUTO`); sample sizes are >= 2 so nothing specializes.
    #[arg(long)]
    pub dynamic: bool,
    /// Explicit ranges: `input_ids:0=1..32,input_ids:1=2..2048`.
    #[arg(long, value_delimiter = ',')]
    pub dynamic_shapes: Vec<String>,
    /// Deadline for the trace, in seconds [default: 600].
    #[arg(long)]
    pub trace_deadline_s: Option<u64>,
    /// Run `run_decompositions()` on the traced program (the core ATen opset).
    #[arg(long)]
    pub decompose: bool,
    /// Where the model runs while tracing: `cpu` or `cuda` [default: cpu].
    #[arg(long)]
    pub device: Option<String>,
    /// The dtype of the model's weights and floating inputs: `float32`, `bfloat16`, `float16` [default: float32].
    #[arg(long)]
    pub dtype: Option<String>,
}

impl ModelArgs {
    fn request(&self) -> Result<Option<crate::trace::TraceRequest>> {
        use crate::trace::{ModelSource, TraceRequest};
        let source = match (&self.model, &self.model_dir, &self.model_fn) {
            (Some(name), _, _) => {
                let overrides = self
                    .set
                    .iter()
                    .map(|kv| kv.split_once('=').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
                    .collect::<Option<Vec<_>>>()
                    .context("--set takes KEY=VALUE pairs")?;
                ModelSource::Architecture { name: name.clone(), overrides }
            }
            (None, Some(dir), _) => ModelSource::Directory(dir.canonicalize().with_context(|| format!("{}", dir.display()))?),
            (None, None, Some(spec)) if spec.starts_with("python:") && spec.matches(':').count() == 2 => ModelSource::Function(spec.clone()),
            (None, None, Some(spec)) => bail!("--model-fn `{spec}`: expected python:module:function"),
            (None, None, None) => return Ok(None),
        };
        let defaults = TraceRequest::new(source);
        Ok(Some(TraceRequest {
            task: self.task.clone(),
            dynamic: self.dynamic,
            dynamic_shapes: self.dynamic_shapes.clone(),
            decompose: self.decompose,
            device: self.device.clone().unwrap_or(defaults.device.clone()),
            dtype: self.dtype.clone().unwrap_or(defaults.dtype.clone()),
            ..defaults
        }))
    }
}

/// The run options a `--config` file may set (the counterpart of the reference
/// `AutoExportConfig.from_dict`). Relative paths are relative to the file.
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
    /// ...or a local model folder, or `python:module:function`.
    pub model_dir: Option<PathBuf>,
    pub model_fn: Option<String>,
    pub task: Option<String>,
    #[serde(default)]
    pub dynamic: bool,
    #[serde(default)]
    pub dynamic_shapes: Vec<String>,
    pub trace_deadline_s: Option<u64>,
    #[serde(default)]
    pub decompose: bool,
    pub opset: Option<u32>,
    #[serde(default)]
    pub verify: bool,
    #[serde(default)]
    pub external_data: bool,
    #[serde(default)]
    pub no_optimize: bool,
    pub device: Option<String>,
    pub dtype: Option<String>,
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

fn parse_backend(s: &str) -> Result<Backend, String> {
    toml::Value::String(s.to_string())
        .try_into::<Backend>()
        .map_err(|_| format!("unknown backend `{s}` (dynamo, onnx, executorch, executorch.xnnpack, executorch.cuda)"))
}

pub fn run(cli: Cli) -> Result<()> {
    let verbose = cli.verbose;
    match cli.command {
        Command::Plugins(PluginsCommand::List { set, backend }) => list(&set, backend),
        Command::Plugins(PluginsCommand::Inspect { name, set }) => inspect(&set, &name),
        Command::Plugins(PluginsCommand::Verify { set }) => verify(&set),
        Command::Plugins(PluginsCommand::Lock { set, output }) => lock(&set, &output),
        Command::Plugins(PluginsCommand::New(args)) => crate::plugins::scaffold::new_plugin(&args),
        Command::Run(args) => run_export(args, verbose),
    }
}

// ── Plugin sets ──

impl SandboxArgs {
    fn runtime(&self) -> Result<Runtime> {
        let defaults = Limits::default();
        let limits = Limits {
            memory_bytes: self.plugin_memory_mib.map_or(defaults.memory_bytes, |m| m << 20),
            fuel_per_call: self.plugin_fuel.unwrap_or(defaults.fuel_per_call),
            deadline: self.plugin_deadline_ms.map_or(defaults.deadline, Duration::from_millis),
            ..defaults
        };
        let cache_dir =
            if self.no_cache { None } else { self.cache_dir.clone().or_else(plugins::cache::ComponentCache::default_dir) };
        Runtime::new(RuntimeOptions { limits, cache_dir })
    }
}

/// A loaded plugin set with its runtime and what the lock says about it.
struct LoadedSet {
    runtime: Runtime,
    set: PluginSet,
    /// Drift from the lock (empty without a lock).
    drift: Vec<String>,
}

impl PluginSetArgs {
    pub(crate) fn python(&self) -> String {
        if let Some(p) = &self.python {
            return p.clone();
        }
        if let Some(p) = std::env::var_os("HFX_PYTHON") {
            return p.to_string_lossy().into_owned();
        }
        if Path::new(".venv/bin/python").exists() {
            return ".venv/bin/python".into();
        }
        "python3".into()
    }

    fn lock_path(&self) -> Option<PathBuf> {
        match &self.lock {
            Some(p) => Some(p.clone()),
            None => Path::new(LOCK_FILE).exists().then(|| PathBuf::from(LOCK_FILE)),
        }
    }

    /// The `plugins` commands need at least one folder; `run` may have none.
    fn require_folders(&self) -> Result<()> {
        if self.plugins.is_empty() {
            bail!("no plugin folder given (--plugins DIR)");
        }
        Ok(())
    }

    /// Upstream versions: `--target` flags, and what is installed for the
    /// `needed` packages the flags do not give (Python is asked only then).
    fn upstream(&self, needed: &BTreeSet<String>) -> upstream::Versions {
        let mut versions = upstream::Versions::new();
        if needed.iter().any(|p| !self.targets.iter().any(|(t, _)| t == p)) {
            match upstream::probe_installed(&self.python()) {
                Ok(v) => versions = v,
                Err(e) => tracing::warn!("cannot read installed upstream versions: {e}"),
            }
        }
        versions.extend(self.targets.iter().cloned());
        versions
    }

    /// Finds, resolves and loads the plugin set, and checks it against the lock
    /// (`for_lock`: the set is about to be locked, so no lock is read).
    fn load(&self, for_lock: bool) -> Result<LoadedSet> {
        self.load_with(for_lock, None)
    }

    /// As `load`, with the upstream versions already known (the trace worker's
    /// `hello`); `--target` still overrides them.
    fn load_with(&self, for_lock: bool, installed: Option<upstream::Versions>) -> Result<LoadedSet> {
        let lock = match self.lock_path() {
            Some(path) if !for_lock => Some((Lock::read(&path)?, path)),
            None if self.locked && !for_lock => {
                bail!("--locked: no lock file ({LOCK_FILE} not found; write one with `hfx plugins lock`)")
            }
            _ => None,
        };
        let runtime = self.sandbox.runtime()?;
        let found = plugins::discover_all(&self.plugins)?;
        let mut needed: BTreeSet<String> = found.iter().flat_map(|f| f.manifest.upstream.keys().cloned()).collect();
        if for_lock {
            needed.extend(upstream::KNOWN_PACKAGES.iter().map(|p| p.to_string()));
        }
        if let Some((lock, _)) = &lock {
            needed.extend(lock.upstream.keys().cloned());
        }
        let versions = match installed {
            Some(mut versions) => {
                versions.extend(self.targets.iter().cloned());
                versions
            }
            None => self.upstream(&needed),
        };
        let set = plugins::load_set(&runtime, found, versions)?;
        let mut drift = Vec::new();
        if let Some((lock, path)) = &lock {
            drift = lock.check(path, &Lock::of(&set.plugins, &set.upstream), self.locked)?;
            for d in &drift {
                eprintln!("warning: drift from {}: {d}", path.display());
            }
        }
        Ok(LoadedSet { runtime, set, drift })
    }
}

fn list(args: &PluginSetArgs, backend: Option<Backend>) -> Result<()> {
    args.require_folders()?;
    let loaded = args.load(false)?;
    println!(
        "{:<26} {:<8} {:<16} {:<10} {:<16} {:<8} {:<24} TARGETS",
        "NAME", "VERSION", "KIND", "BACKEND", "SHA256", "STATUS", "UPSTREAM"
    );
    let shown = |b: Backend| backend.is_none_or(|want| want == b);
    for p in loaded.set.plugins.iter().filter(|p| shown(p.manifest.plugin.backend)) {
        let m = &p.manifest.plugin;
        let targets = if p.targets.is_empty() { "(whole program)".to_string() } else { p.targets.join(", ") };
        println!(
            "{:<26} {:<8} {:<16} {:<10} {:<16} {:<8} {:<24} {}",
            m.name, m.version, m.kind.as_str(), m.backend.as_str(), &p.component_sha256[..16], "active",
            upstream_text(&p.manifest), targets
        );
    }
    for s in loaded.set.skipped.iter().filter(|s| shown(s.found.manifest.plugin.backend)) {
        let m = &s.found.manifest.plugin;
        println!(
            "{:<26} {:<8} {:<16} {:<10} {:<16} {:<8} {:<24} skipped: {}",
            m.name, m.version, m.kind.as_str(), m.backend.as_str(), &s.found.component_sha256[..16], "skipped",
            upstream_text(&s.found.manifest), s.reason
        );
    }
    Ok(())
}

fn upstream_text(m: &plugins::Manifest) -> String {
    if m.upstream.is_empty() {
        return "any".into();
    }
    m.upstream.iter().map(|(p, r)| format!("{p} {r}")).collect::<Vec<_>>().join("; ")
}

fn inspect(args: &PluginSetArgs, name: &str) -> Result<()> {
    args.require_folders()?;
    let loaded = args.load(false)?;
    let Some(p) = loaded.set.plugins.iter().find(|p| p.name() == name) else {
        let skipped = loaded.set.skipped.iter().find(|s| s.found.manifest.plugin.name == name);
        match skipped {
            Some(s) => bail!("plugin `{name}` is skipped: {}", s.reason),
            None => bail!("no plugin `{name}` in {}", args.plugins.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")),
        }
    };
    let manifest = std::fs::read_to_string(p.dir.join("plugin.toml"))?;
    println!("folder:           {}", p.dir.display());
    println!("world:            hfx:plugin/{}@0.1.0", p.kind());
    println!("component sha256: {}", p.component_sha256);
    println!("manifest sha256:  {}", p.manifest_sha256);
    println!("targets:          {}", if p.targets.is_empty() { "(whole program)".into() } else { p.targets.join(", ") });
    println!("loaded in:        {:.2} ms ({:?})", p.load_time.as_secs_f64() * 1e3, p.cache);
    println!("imports:          {}", p.imports.join(", "));
    println!("exports:          {}", p.exports.join(", "));
    println!("--- plugin.toml ---\n{}", manifest.trim_end());
    Ok(())
}

fn verify(args: &PluginSetArgs) -> Result<()> {
    args.require_folders()?;
    let loaded = args.load(false)?;
    let mut failures = 0;
    for p in &loaded.set.plugins {
        let results = crate::plugins::selftest::run(&loaded.runtime, p)?;
        let failed: Vec<&String> = results.iter().filter_map(|r| r.failure.as_ref()).collect();
        failures += failed.len();
        let status = if failed.is_empty() { "ok" } else { "FAILED" };
        println!("{:<26} {:<8} {:<6} self-tests: {}/{} passed", p.name(), p.manifest.plugin.version, status, results.len() - failed.len(), results.len());
        for f in failed {
            println!("  {f}");
        }
    }
    for s in &loaded.set.skipped {
        println!("{:<26} {:<8} skipped: {}", s.found.manifest.plugin.name, s.found.manifest.plugin.version, s.reason);
    }
    if !loaded.drift.is_empty() {
        println!("{} difference(s) from the lock (see warnings above)", loaded.drift.len());
    }
    if failures > 0 {
        bail!("{failures} self-test(s) failed");
    }
    Ok(())
}

fn lock(args: &PluginSetArgs, output: &Path) -> Result<()> {
    args.require_folders()?;
    let loaded = args.load(true)?;
    let lock = Lock::of(&loaded.set.plugins, &loaded.set.upstream);
    lock.write(output).with_context(|| format!("writing {}", output.display()))?;
    println!("locked {} plugin(s) against {} upstream version(s) in {}", lock.plugins.len(), lock.upstream.len(), output.display());
    Ok(())
}

// ── run ──

/// `run` options after merging flags over the config file.
struct RunOptions {
    /// A `.pt2` or IR JSON to read; None when a model is traced.
    input: Option<PathBuf>,
    trace: Option<crate::trace::TraceRequest>,
    trace_deadline: Duration,
    output: PathBuf,
    backend: Backend,
    set: PluginSetArgs,
    on_plugin_error: OnPluginError,
    opset: u32,
    verify: bool,
    external_data: bool,
    no_optimize: bool,
}

fn merge(args: RunArgs) -> Result<RunOptions> {
    let (config, base) = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let config: RunConfig =
                toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.message().replace('\n', " ")))?;
            (config, path.parent().map(Path::to_path_buf).unwrap_or_default())
        }
        None => (RunConfig::default(), PathBuf::new()),
    };
    let rel = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
    let backend = match (args.backend, &config.backend) {
        (Some(b), _) => b,
        (None, Some(b)) => parse_backend(b).map_err(anyhow::Error::msg)?,
        (None, None) => bail!("no backend (--backend or `backend` in the config)"),
    };
    let on_plugin_error = match (args.on_plugin_error, &config.on_plugin_error) {
        (Some(p), _) => p,
        (None, Some(p)) => <OnPluginError as clap::ValueEnum>::from_str(p, true).map_err(anyhow::Error::msg)?,
        (None, None) => OnPluginError::Fail,
    };
    let mut set = args.set;
    if set.plugins.is_empty() {
        set.plugins = config.plugins.into_iter().map(rel).collect();
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
    if model.model.is_none() && model.model_dir.is_none() && model.model_fn.is_none() {
        model.model = config.model.clone();
        model.model_dir = config.model_dir.clone().map(rel);
        model.model_fn = config.model_fn.clone();
    }
    if model.set.is_empty() {
        model.set = config.set.iter().map(|(k, v)| format!("{k}={}", v.as_str().map(String::from).unwrap_or_else(|| v.to_string()))).collect();
    }
    model.task = model.task.or(config.task.clone());
    model.dynamic |= config.dynamic;
    if model.dynamic_shapes.is_empty() {
        model.dynamic_shapes = config.dynamic_shapes.clone();
    }
    model.trace_deadline_s = model.trace_deadline_s.or(config.trace_deadline_s);
    model.decompose |= config.decompose;
    model.device = model.device.or(config.device.clone());
    model.dtype = model.dtype.or(config.dtype.clone());
    let trace = model.request()?;
    let input = args.input.or(config.input.map(rel));
    match (&input, &trace) {
        (None, None) => bail!("nothing to export: give a .pt2 (or IR JSON), or a model (--model, --model-dir, --model-fn)"),
        (Some(_), Some(_)) => bail!("give either an input file or a model to trace, not both"),
        _ => {}
    }
    let output = args.output.or(config.output.map(rel)).context("no output (-o or `output` in the config)")?;
    let trace_deadline = Duration::from_secs(model.trace_deadline_s.unwrap_or(600));
    let opset = args.opset.or(config.opset).unwrap_or(20);
    if !(18..=23).contains(&opset) {
        bail!("--opset {opset}: hfx writes opsets 18 to 23");
    }
    let verify = args.verify || config.verify;
    if verify && (backend != Backend::Onnx || output.extension().is_some_and(|e| e != "onnx")) {
        bail!("--verify checks an ONNX model: give --backend onnx and -o OUT.onnx (or an export folder)");
    }
    let external_data = args.external_data || config.external_data;
    let no_optimize = args.no_optimize || config.no_optimize;
    Ok(RunOptions { input, trace, trace_deadline, output, backend, set, on_plugin_error, opset, verify, external_data, no_optimize })
}

/// What `run` reads: a `.pt2` (kept open: its weights are written from the
/// map) or an IR graph in JSON.
enum Input {
    Pt2(crate::graph::pt2::Pt2),
    Json,
}

fn is_json(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "json")
}

fn run_export(args: RunArgs, verbose: u8) -> Result<()> {
    use crate::graph::pt2::{convert, Pt2};
    let started = Instant::now();
    use std::io::IsTerminal;
    SHOW_PROGRESS.store(verbose > 0 || std::io::stderr().is_terminal(), std::sync::atomic::Ordering::Relaxed);
    let mut options = merge(args)?;
    // An export folder: the pipeline writes `model.onnx` / `model.pt2` into a scratch
    // folder beside it, and everything moves in at the end (`finish_folder`).
    let folder = ExportFolder::of(&options)?;
    if let Some(f) = &folder {
        options.output = f.artifact.clone();
        // The reference's runtime reads an ONNX component's weights from `model.onnx.data`.
        options.external_data |= options.backend == Backend::Onnx;
        if let Some(request) = options.trace.as_mut() {
            request.folder = Some(f.scratch.0.clone());
        }
    }
    let output = &options.output;
    // Check what can be emitted before doing any work. A `.pt2` is the
    // dynamo artifact, and for the other backends the program after their FX
    // stages (what their lowering would start from).
    let emit_onnx = match output.extension().and_then(|e| e.to_str()) {
        Some("pt2" | "json") => false,
        Some("onnx") if options.backend == Backend::Onnx => true,
        Some("onnx") => bail!("a .onnx output needs --backend onnx"),
        Some("pte") => bail!("emitting .pte is not implemented yet: write the {} backend's FX-fixed program with `-o OUT.pt2`", options.backend),
        _ => bail!("{}: the output must end in .pt2, .onnx or .json", output.display()),
    };
    // The worker says which upstream versions are installed; plugins resolve against them.
    let mut worker = match &options.trace {
        Some(_) => {
            progress(started, "trace", "starting the worker");
            let mut worker = crate::trace::Worker::start(&options.set.python(), Duration::from_secs(120))?;
            worker.on_progress = Some(Box::new(move |p| {
                let step = p.get("stage").and_then(|s| s.as_str()).unwrap_or("");
                progress(started, "trace", match step {
                    "import" => "importing torch",
                    "build" => "building the model",
                    "eager" => "running it eagerly (the reference outputs)",
                    "export" => "torch.export",
                    "decompose" => "run_decompositions",
                    "save" => "saving the program",
                    other => other,
                });
            }));
            Some(worker)
        }
        None => None,
    };
    progress(started, "plugins", "resolving and loading");
    let loaded = options.set.load_with(false, worker.as_ref().map(|w| w.versions()))?;
    // ── Stage 1: Trace (or read a traced program), Stage 2: patches answer during it ──
    let traced = match (&options.trace, worker.as_mut()) {
        (Some(request), Some(worker)) => Some(trace_model(worker, request, &loaded, &options, output)?),
        _ => None,
    };
    if !options.verify {
        // The worker holds the model and torch: gone before the host's stages, the
        // pipeline's peak memory is the trace's, not the trace's plus the emission's.
        worker = None;
    }
    let input: &Path = match (&traced, &options.input) {
        (Some(t), _) => &t.program,
        (None, Some(input)) => input,
        (None, None) => unreachable!("merge checks there is an input"),
    };
    progress(started, "read", &input.display().to_string());
    let read_started = Instant::now();
    let (source, mut graph) = if is_json(input) {
        let text = std::fs::read_to_string(input).with_context(|| format!("reading {}", input.display()))?;
        (Input::Json, Graph::from_json(&text).with_context(|| format!("{}", input.display()))?)
    } else {
        let pt2 = Pt2::open(input)?;
        let program = pt2.programs.get("model").with_context(|| format!("{}: no `model` program", input.display()))?;
        let graph = convert::to_ir(program).map_err(|e| anyhow::anyhow!("{}: {e}", input.display()))?;
        (Input::Pt2(pt2), graph)
    };
    let read_time = read_started.elapsed();
    // A traced program the stages leave as it was is moved into place as torch wrote it.
    let fingerprint = traced.as_ref().map(|_| graph.fingerprint());
    let nodes_before = graph.node_count();
    progress(started, "fx stages", &format!("{} nodes", nodes_before));
    let reports = stages::run_fx_stages(&loaded.runtime, &loaded.set.plugins, options.backend, &mut graph, options.on_plugin_error)?;
    // ── Emit ──
    progress(started, "emit", &output.display().to_string());
    let emit_started = Instant::now();
    let unchanged = fingerprint.is_some_and(|f| f == graph.fingerprint());
    let mut reports = reports;
    match (&source, is_json(output)) {
        (Input::Pt2(pt2), false) if emit_onnx => {
            // With --verify the model is checked in a scratch folder and moved
            // into place only when it matches eager.
            let scratch = options.verify.then(|| Scratch::beside(output, "verify")).transpose()?;
            // Same file name as the output: an external data file is referenced by name.
            let target = match &scratch {
                Some(s) => s.0.join(output.file_name().context("the output has no file name")?),
                None => output.clone(),
            };
            let output_names = traced.as_ref().map(|t| t.output_names.clone()).unwrap_or_default();
            reports.extend(emit_onnx_model(pt2, &mut graph, &loaded, &options, started, &target, output_names)?);
            if options.verify {
                let reference = match &traced {
                    Some(t) => t.reference.clone(),
                    None => reference_path(options.input.as_deref().expect("an input when nothing is traced")),
                };
                progress(started, "verify", "ONNX Runtime against eager PyTorch");
                let worker = match worker.as_mut() {
                    Some(w) => w,
                    None => worker.insert(crate::trace::Worker::start(&options.set.python(), Duration::from_secs(120))?),
                };
                verify_onnx(worker, &target, &reference, options.trace_deadline)?;
                let data = crate::onnx::emit::data_file(&target);
                if data.exists() {
                    let to = crate::onnx::emit::data_file(output);
                    crate::atomic::move_into_place(&data, &to).with_context(|| format!("writing {}", to.display()))?;
                }
                crate::atomic::move_into_place(&target, output).with_context(|| format!("writing {}", output.display()))?;
            }
        }
        (Input::Json, false) if emit_onnx => bail!("ONNX is emitted from a .pt2 (its weights), not from IR JSON"),
        (Input::Pt2(_), false) if unchanged => {
            let traced = traced.as_ref().expect("a fingerprint is taken of traced programs only");
            crate::atomic::move_into_place(&traced.program, output).with_context(|| format!("writing {}", output.display()))?;
        }
        (_, true) => crate::atomic::write_bytes_atomically(output, graph.to_json().as_bytes())
            .with_context(|| format!("writing {}", output.display()))?,
        (Input::Pt2(pt2), false) => {
            let program = convert::from_ir(&graph, &pt2.programs["model"]).map_err(|e| anyhow::anyhow!("{}: {e}", output.display()))?;
            pt2.write(output, &[("model".to_string(), program)].into())?;
        }
        (Input::Json, false) => bail!("a graph read from JSON can only be written as JSON (-o OUT.json)"),
    }
    let emit_time = emit_started.elapsed();
    if let Some(traced) = &traced {
        // The eager reference goes next to the artifact, for verification.
        let reference = reference_path(output);
        std::fs::rename(&traced.reference, &reference).with_context(|| format!("writing {}", reference.display()))?;
        println!("traced {} in {:.1} s; eager reference: {}", traced.model_class, traced.seconds, reference.display());
        let seconds = |k: &str| traced.times.get(k).copied().unwrap_or(0.0);
        println!(
            "stage {:<18} {:>8.2} s   import {:.2} s, build {:.2} s, eager {:.2} s, torch.export {:.2} s, save {:.2} s; {} output(s)",
            "trace",
            traced.seconds,
            seconds("import"),
            seconds("build"),
            seconds("eager"),
            seconds("export"),
            seconds("save"),
            traced.outputs
        );
        for (plugin, calls) in &traced.patched {
            println!("  patch {plugin:<30} answered {calls} call(s)");
        }
    }
    println!("stage {:<18} {:>8.2} ms  {nodes_before} nodes", "read", read_time.as_secs_f64() * 1e3);
    print_summary(&reports, &loaded.set, verbose);
    println!("stage {:<18} {:>8.2} ms", "emit", emit_time.as_secs_f64() * 1e3);
    if let Some(folder) = folder {
        let metadata = traced.as_ref().map(|t| t.export_metadata.clone()).unwrap_or_default();
        let versions = loaded.set.upstream.clone();
        let dir = folder.dir.clone();
        folder.finish(&options, metadata, &versions)?;
        println!("nodes: {nodes_before} -> {}; wrote {} in {:.1} s", graph.node_count(), dir.display(), started.elapsed().as_secs_f64());
        return Ok(());
    }
    println!("nodes: {nodes_before} -> {}; wrote {} in {:.1} s", graph.node_count(), output.display(), started.elapsed().as_secs_f64());
    Ok(())
}

/// `-o DIR`: what the reference's `ExportedModel.save_pretrained` writes, so
/// `ExportedModel.from_pretrained(DIR)` loads and runs an hfx export: the
/// component (`model.onnx` + `model.onnx.data`, or `model.pt2`), `export.json`
/// (schema 1: format, component file and metadata), `config.json` and
/// `generation_config.json`. Written in a scratch folder beside DIR; each
/// file is renamed into DIR at the end.
struct ExportFolder {
    dir: PathBuf,
    scratch: Scratch,
    artifact: PathBuf,
}

impl ExportFolder {
    fn of(options: &RunOptions) -> Result<Option<ExportFolder>> {
        let out = &options.output;
        if out.extension().is_some() && !out.is_dir() {
            return Ok(None);
        }
        if options.trace.is_none() {
            bail!("an export folder records the traced model's metadata: trace it (--model, --model-dir, --model-fn)");
        }
        let file = match options.backend {
            Backend::Onnx => "model.onnx",
            Backend::Dynamo => "model.pt2",
            other => bail!("an export folder for the {other} backend is not implemented yet"),
        };
        let scratch = Scratch::beside(out, "folder")?;
        let artifact = scratch.0.join(file);
        Ok(Some(ExportFolder { dir: out.clone(), scratch, artifact }))
    }

    fn finish(self, options: &RunOptions, mut metadata: serde_json::Value, versions: &plugins::Versions) -> Result<()> {
        use serde_json::json;
        let onnx = options.backend == Backend::Onnx;
        let required: &[&str] = if onnx { &["torch", "onnx", "onnxscript"] } else { &["torch"] };
        let packages: serde_json::Map<String, serde_json::Value> = std::iter::once("transformers")
            .chain(required.iter().copied())
            .filter_map(|p| Some((p.to_string(), json!(versions.get(p)?))))
            .collect();
        let trace = options.trace.as_ref().expect("folders are traced");
        let mut config = json!({
            "dynamic": trace.dynamic,
            "dynamic_shapes": if trace.dynamic_shapes.is_empty() { serde_json::Value::Null } else { json!(trace.dynamic_shapes) },
            "export_format": if onnx { "onnx" } else { "dynamo" },
            "prefer_deferred_runtime_asserts_over_guards": !trace.dynamic_shapes.is_empty(),
            "strict": false,
        });
        if onnx {
            config["opset_version"] = json!(options.opset);
            config["optimize"] = json!(!options.no_optimize);
            config["ort_fusions"] = serde_json::Value::Null;
        }
        metadata["packages"] = json!(packages);
        metadata["export_config"] = config;
        let file = self.artifact.file_name().and_then(|n| n.to_str()).unwrap_or("model.onnx").to_string();
        let manifest = json!({
            "schema_version": 1,
            "export_format": if onnx { "onnx" } else { "dynamo" },
            "components": {"model": {"file": file, "metadata": metadata}},
        });
        let text = serde_json::to_string_pretty(&manifest)? + "\n";
        crate::atomic::write_bytes_atomically(&self.scratch.0.join("export.json"), text.as_bytes())?;
        std::fs::create_dir_all(&self.dir).with_context(|| format!("creating {}", self.dir.display()))?;
        for entry in std::fs::read_dir(&self.scratch.0)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                let to = self.dir.join(entry.file_name());
                std::fs::rename(entry.path(), &to).with_context(|| format!("writing {}", to.display()))?;
            }
        }
        Ok(())
    }
}

/// Whether progress lines are shown: on a terminal, or with `-v`.
static SHOW_PROGRESS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// ONNX stages 4 and 5 (translations, IR fixes), then the model, written atomically.
fn emit_onnx_model(
    pt2: &crate::graph::pt2::Pt2,
    graph: &mut Graph,
    loaded: &LoadedSet,
    options: &RunOptions,
    started: Instant,
    target: &Path,
    output_names: Vec<String>,
) -> Result<Vec<StageReport>> {
    use crate::onnx::emit;
    use crate::stages::{onnx_ir_fix, onnx_translation};
    let program = pt2.programs.get("model").context("no `model` program")?;
    let roles = onnx_translation::input_roles(program);
    progress(started, "onnx", "translations");
    let translations = stages::select(&loaded.set.plugins, options.backend, plugins::PluginKind::OnnxTranslation);
    let (mut builder, translated) = onnx_translation::run(&loaded.runtime, &translations, graph, &roles, options.opset)?;
    progress(started, "onnx", "IR fixes");
    let ir_fixes = stages::select(&loaded.set.plugins, options.backend, plugins::PluginKind::OnnxIrFix);
    let mut model = crate::onnx::Model { nodes: std::mem::take(&mut builder.nodes) };
    let fixed = onnx_ir_fix::run(&loaded.runtime, &ir_fixes, &mut model, "onnx-ir-fixes", options.on_plugin_error)?;
    builder.nodes = model.nodes;
    let metadata = onnx_metadata(loaded, &[&translated, &fixed]);
    let parts = emit::ModelParts { graph, roles: &roles, pt2, builder: &builder, metadata, graph_name: "main_graph".into(), output_names, optimize: !options.no_optimize };
    let emit::Planned { model, initializers, optimized } = emit::plan(&parts)?;
    if let Some(o) = &optimized {
        println!(
            "stage {:<18} identities removed {}, duplicates merged {}, dead nodes removed {}; {} nodes",
            "onnx-optimize",
            o.identities_removed,
            o.merged,
            o.dead_removed,
            model.graph.as_ref().map_or(0, |g| g.node.len())
        );
    }
    let weights = emit::weight_bytes(&initializers);
    let storage = if options.external_data || weights >= emit::PROTOBUF_LIMIT {
        emit::WeightStorage::External
    } else {
        emit::WeightStorage::Embedded
    };
    emit::write(target, model, initializers, storage)?;
    Ok(vec![translated, fixed])
}

/// `--verify`: the model in ONNX Runtime on the recorded inputs (and a second
/// size for dynamic exports) against eager PyTorch, atol/rtol 1e-3. Prints the
/// max abs/rel error per output; any output out of tolerance is an error.
fn verify_onnx(worker: &mut crate::trace::Worker, model: &Path, reference: &Path, deadline: Duration) -> Result<()> {
    if !reference.exists() {
        bail!("--verify: no eager reference at {} (hfx writes one when it traces)", reference.display());
    }
    let answer = worker.call("verify", serde_json::json!({"onnx": model, "reference": reference, "second_size": true}), deadline)?;
    let mut failed = Vec::new();
    for check in answer["checks"].as_array().into_iter().flatten() {
        println!("verify inputs {}", check["inputs"]);
        for (i, output) in check["outputs"].as_array().into_iter().flatten().enumerate() {
            let ok = output["ok"].as_bool().unwrap_or(false);
            println!(
                "  output {i:<3} {:<18} max abs {:>9.2e}  max rel {:>9.2e}  {}",
                output["shape"].to_string(),
                output["max_abs"].as_f64().unwrap_or(f64::NAN),
                output["max_rel"].as_f64().unwrap_or(f64::NAN),
                if ok { "ok" } else { "MISMATCH" }
            );
            if !ok {
                failed.push(format!("output {i} for inputs {}", check["inputs"]));
            }
        }
    }
    if !failed.is_empty() {
        bail!("--verify: ONNX Runtime differs from eager PyTorch beyond atol/rtol 1e-3 ({}); the output was not written", failed.join("; "));
    }
    Ok(())
}

/// `metadata_props`: who wrote the model, against which upstream versions,
/// with which plugins, and what each changed.
fn onnx_metadata(loaded: &LoadedSet, reports: &[&StageReport]) -> Vec<(String, String)> {
    let mut metadata = vec![("hfx.version".to_string(), env!("CARGO_PKG_VERSION").to_string())];
    for (package, version) in &loaded.set.upstream {
        metadata.push((format!("hfx.upstream.{package}"), version.clone()));
    }
    for plugin in &loaded.set.plugins {
        let p = &plugin.manifest.plugin;
        metadata.push((format!("hfx.plugin.{}", p.name), format!("{} sha256:{}", p.version, plugin.component_sha256)));
    }
    for report in reports {
        for (plugin, counts) in &report.plugins {
            metadata.push((format!("hfx.stage.{}.{plugin}", report.stage), format!("changed {}", counts.changed)));
        }
    }
    metadata
}

/// One progress line on stderr (stdout is the summary).
fn progress(started: Instant, stage: &str, what: &str) {
    if SHOW_PROGRESS.load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!("[{:>6.1} s] {stage}: {what}", started.elapsed().as_secs_f64());
    }
}

/// `out.pt2` → `out.reference.pt`.
fn reference_path(output: &Path) -> PathBuf {
    output.with_extension("reference.pt")
}

/// A program traced into a scratch folder beside the output (removed on drop).
struct Traced {
    _scratch: Scratch,
    program: PathBuf,
    reference: PathBuf,
    model_class: String,
    seconds: f64,
    /// The worker's own times: build, trace, save.
    times: BTreeMap<String, f64>,
    outputs: u64,
    /// The model output's leaf names (`logits`, `cache.layers.0.keys`).
    output_names: Vec<String>,
    /// The reference's `ExportMetadata` fields the worker recorded.
    export_metadata: serde_json::Value,
    /// Patch plugins and how many calls each answered.
    patched: Vec<(String, u64)>,
}

struct Scratch(PathBuf);

impl Scratch {
    /// A fresh folder beside `output` (same file system: its files rename into place).
    fn beside(output: &Path, what: &str) -> Result<Scratch> {
        let parent = output.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let dir = parent.join(format!(".hfx-{what}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn trace_model(
    worker: &mut crate::trace::Worker,
    request: &crate::trace::TraceRequest,
    loaded: &LoadedSet,
    options: &RunOptions,
    output: &Path,
) -> Result<Traced> {
    let scratch = Scratch::beside(output, "trace")?;
    let program = scratch.0.join("model.pt2");
    let reference = scratch.0.join("reference.pt");
    let patch_plugins = stages::select(&loaded.set.plugins, options.backend, plugins::PluginKind::Patch);
    let mut sessions: Vec<plugins::Session> =
        patch_plugins.iter().map(|p| plugins::Session::new(&loaded.runtime, p, "patches")).collect();
    let result = crate::trace::trace(worker, request, &mut sessions, &program, &reference, options.trace_deadline)?;
    let times: BTreeMap<String, f64> = result
        .get("seconds")
        .and_then(|s| s.as_object())
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_f64()?))).collect())
        .unwrap_or_default();
    let seconds = times.values().sum();
    let outputs = result.get("outputs").and_then(|o| o.as_u64()).unwrap_or(0);
    let model_class = result.get("model_class").and_then(|c| c.as_str()).unwrap_or("model").to_string();
    let patched: Vec<(String, u64)> = sessions.iter().map(|s| (s.plugin().name().to_string(), s.calls)).collect();
    let output_names = result
        .get("output_names")
        .and_then(|n| n.as_array())
        .map(|a| a.iter().filter_map(|n| n.as_str().map(String::from)).collect())
        .unwrap_or_default();
    let export_metadata = result.get("export_metadata").cloned().unwrap_or_default();
    Ok(Traced { _scratch: scratch, program, reference, model_class, seconds, times, outputs, output_names, export_metadata, patched })
}

fn print_summary(reports: &[StageReport], set: &PluginSet, verbose: u8) {
    for report in reports {
        println!(
            "stage {:<18} {:>8.2} ms  dead code removed: {}",
            report.stage,
            report.elapsed.as_secs_f64() * 1e3,
            report.dead_code_removed
        );
        for (plugin, c) in &report.plugins {
            println!("  {plugin:<30} calls {:>5}  changed {:>5}  failed {:>3}", c.calls, c.changed, c.failed);
        }
    }
    if !set.skipped.is_empty() {
        println!("skipped plugins: {}", set.skipped.len());
        if verbose > 0 {
            for s in &set.skipped {
                println!("  {} {}: {}", s.found.manifest.plugin.name, s.found.manifest.plugin.version, s.reason);
            }
        }
    }
}
