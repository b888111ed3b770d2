//! The `hfx` command line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use serde::Deserialize;

use crate::plugins::{self, lock::LOCK_FILE, upstream, Backend, Limits, Lock, PluginSet, Runtime, RuntimeOptions};
use crate::stages::OnPluginError;

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
    #[arg(long)]
    pub dtype: Option<String>,
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
            ("--dynamic-shapes", !self.dynamic_shapes.is_empty()),
            ("--decompose", self.decompose),
            ("--device", self.device.is_some()),
            ("--dtype", self.dtype.is_some()),
        ];
        given.iter().filter(|(_, given)| *given).map(|(flag, _)| *flag).collect()
    }

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
        Command::Plugins(PluginsCommand::Verify { set, strict }) => verify(&set, strict),
        Command::Plugins(PluginsCommand::Lock { set, output }) => lock(&set, &output),
        Command::Plugins(PluginsCommand::New(args)) => crate::plugins::scaffold::new_plugin(&args),
        Command::Run(args) => crate::run::run_export(args, verbose),
    }
}

// ── Plugin sets ──

impl SandboxArgs {
    fn runtime(&self) -> Result<Runtime> {
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
        let cache_dir =
            if self.no_cache { None } else { self.cache_dir.clone().or_else(plugins::cache::ComponentCache::default_dir) };
        Runtime::new(RuntimeOptions { limits, cache_dir })
    }
}

/// A loaded plugin set with its runtime and what the lock says about it.
pub(crate) struct LoadedSet {
    pub(crate) runtime: Runtime,
    pub(crate) set: PluginSet,
    /// Drift from the lock (empty without a lock).
    pub(crate) drift: Vec<String>,
    /// What discovery skipped and why (already printed, one line each).
    pub(crate) warnings: Vec<plugins::discover::Warning>,
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
    /// For a lock (`for_lock`), a Python that cannot tell is an error when it
    /// was named with --python or no --target gives a version: the lock would
    /// record upstream versions nobody chose.
    fn upstream(&self, needed: &BTreeSet<String>, for_lock: bool) -> Result<upstream::Versions> {
        let mut versions = upstream::Versions::new();
        if needed.iter().any(|p| !self.targets.iter().any(|(t, _)| t == p)) {
            match upstream::probe_installed(&self.python()) {
                Ok(v) => versions = v,
                Err(e) if for_lock && (self.python.is_some() || self.targets.is_empty()) => bail!(
                    "cannot read the installed upstream versions to lock: {e} (give a Python that runs with --python, or the versions with --target PACKAGE=VERSION)"
                ),
                Err(e) => tracing::warn!("cannot read installed upstream versions: {e}"),
            }
        }
        versions.extend(self.targets.iter().cloned());
        Ok(versions)
    }

    /// Finds, resolves and loads the plugin set, and checks it against the lock
    /// (`for_lock`: the set is about to be locked, so no lock is read).
    fn load(&self, for_lock: bool) -> Result<LoadedSet> {
        self.load_with(for_lock, None)
    }

    /// As `load`, with the upstream versions already known (the trace worker's
    /// `hello`); `--target` still overrides them.
    pub(crate) fn load_with(&self, for_lock: bool, installed: Option<upstream::Versions>) -> Result<LoadedSet> {
        let lock = match self.lock_path() {
            Some(path) if !for_lock => Some((Lock::read(&path)?, path)),
            None if self.locked && !for_lock => {
                bail!("--locked: no lock file ({LOCK_FILE} not found; write one with `hfx plugins lock`)")
            }
            _ => None,
        };
        let runtime = self.sandbox.runtime()?;
        let (found, warnings) = plugins::discover::discover_folders(&self.plugins)?;
        for w in &warnings {
            eprintln!("warning: {w}");
        }
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
            None => self.upstream(&needed, for_lock)?,
        };
        let set = plugins::load_set(&runtime, found, versions)?;
        let mut drift = Vec::new();
        if let Some((lock, path)) = &lock {
            drift = lock.check(path, &Lock::of(&set.plugins, &set.upstream), self.locked)?;
            for d in &drift {
                eprintln!("warning: drift from {}: {d}", path.display());
            }
        }
        Ok(LoadedSet { runtime, set, drift, warnings })
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
    // Read again for display, as discovery reads it: through the plugin folder, bounded.
    let manifest = cap_std::fs::Dir::open_ambient_dir(&p.dir, cap_std::ambient_authority())
        .map_err(anyhow::Error::from)
        .and_then(|dir| Ok(plugins::discover::read_regular(&dir, "plugin.toml", plugins::discover::MAX_MANIFEST_BYTES)?))
        .with_context(|| format!("{}", p.dir.join("plugin.toml").display()))?;
    let manifest = String::from_utf8_lossy(&manifest);
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

fn verify(args: &PluginSetArgs, strict: bool) -> Result<()> {
    args.require_folders()?;
    let loaded = args.load(false)?;
    let mut failures = 0;
    let untrusted_cache = loaded.set.plugins.iter().any(|p| p.cache == plugins::cache::CacheOutcome::Untrusted);
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
    if strict {
        let warnings = loaded.warnings.len() + loaded.drift.len() + usize::from(untrusted_cache);
        if warnings > 0 {
            bail!("--strict: {warnings} warning(s) (see above)");
        }
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
pub(crate) struct RunOptions {
    /// A `.pt2` or IR JSON to read; None when a model is traced.
    pub(crate) input: Option<PathBuf>,
    pub(crate) trace: Option<crate::trace::TraceRequest>,
    pub(crate) trace_deadline: Duration,
    /// How workers start (memory limit).
    pub(crate) worker: crate::trace::WorkerOptions,
    pub(crate) output: PathBuf,
    pub(crate) backend: Backend,
    pub(crate) set: PluginSetArgs,
    pub(crate) on_plugin_error: OnPluginError,
    pub(crate) opset: u32,
    pub(crate) verify: bool,
    pub(crate) external_data: bool,
    pub(crate) no_optimize: bool,
}

pub(crate) fn merge(args: RunArgs) -> Result<RunOptions> {
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
    model.worker_memory_gib = model.worker_memory_gib.or(config.worker_memory_gib);
    model.decompose |= config.decompose;
    model.device = model.device.or(config.device.clone());
    model.dtype = model.dtype.or(config.dtype.clone());
    let trace = model.request()?;
    let input = args.input.or(config.input.map(rel));
    match (&input, &trace) {
        (None, None) => bail!("nothing to export: give a .pt2 (or IR JSON), or a model (--model, --model-dir, --model-fn)"),
        (Some(_), Some(_)) => bail!("give either an input file or a model to trace, not both"),
        (Some(input), None) => {
            let ignored = model.trace_only();
            if !ignored.is_empty() {
                bail!("{} apply to a model hfx traces, not to {} (already traced): drop them, or trace with --model", ignored.join(", "), input.display());
            }
        }
        (None, Some(_)) => {}
    }
    let memory_limit = match model.worker_memory_gib {
        None => crate::trace::memory::default_limit(),
        Some(gib) if gib.is_finite() && (MIN_WORKER_GIB..=MAX_WORKER_GIB).contains(&gib) => (gib * crate::trace::memory::GIB as f64) as u64,
        Some(gib) => bail!("--worker-memory-gib {gib}: give {MIN_WORKER_GIB} to {MAX_WORKER_GIB}"),
    };
    let worker = crate::trace::WorkerOptions {
        env: vec![],
        memory_limit: Some(memory_limit),
        memory_mechanism: model.worker_memory_mechanism.unwrap_or_default(),
        ..Default::default()
    };
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
    Ok(RunOptions { input, trace, trace_deadline, worker, output, backend, set, on_plugin_error, opset, verify, external_data, no_optimize })
}
