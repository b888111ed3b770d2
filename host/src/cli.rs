//! The `hfx` command line.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use crate::graph::Graph;
use crate::plugins::{self, Backend, Limits, PluginKind, Runtime, RuntimeOptions};
use crate::stages::{self, OnPluginError, StageReport};

#[derive(Debug, Parser)]
#[command(name = "hfx", version, about = "Export PyTorch / Hugging Face models, with workarounds as WebAssembly plugins")]
pub struct Cli {
    /// More output (-v: plugin loads, -vv: every call).
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
    /// Run a backend's FX fix stages (program fixes, then node fixes) on a
    /// graph in the IR's JSON form, and write the fixed graph.
    Fix(FixArgs),
}

#[derive(Debug, Subcommand)]
pub enum PluginsCommand {
    /// List plugins: name, version, kind, backend, targets and content hash.
    List {
        #[command(flatten)]
        sandbox: SandboxArgs,
        /// Show only plugins of this backend.
        #[arg(long, value_parser = parse_backend)]
        backend: Option<Backend>,
    },
}

#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// Plugin folder (repeatable); every plugin.toml below it is loaded.
    #[arg(long = "plugins", value_name = "DIR", required = true)]
    pub plugins: Vec<PathBuf>,
    /// Folder of the compiled-component cache [default: $HFX_CACHE_DIR or ~/.cache/hfx/components].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile every component, use no cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Linear-memory cap per plugin instance, in MiB.
    #[arg(long, default_value_t = 64)]
    pub plugin_memory_mib: usize,
    /// Fuel per plugin call (about one unit per wasm instruction).
    #[arg(long, default_value_t = Limits::default().fuel_per_call)]
    pub plugin_fuel: u64,
    /// Wall-clock deadline per plugin call, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub plugin_deadline_ms: u64,
}

impl SandboxArgs {
    fn runtime(&self) -> Result<Runtime> {
        let limits = Limits {
            memory_bytes: self.plugin_memory_mib << 20,
            fuel_per_call: self.plugin_fuel,
            deadline: Duration::from_millis(self.plugin_deadline_ms),
            ..Limits::default()
        };
        let cache_dir = if self.no_cache { None } else { self.cache_dir.clone().or_else(plugins::cache::ComponentCache::default_dir) };
        Runtime::new(RuntimeOptions { limits, cache_dir })
    }
}

#[derive(Debug, Args)]
pub struct FixArgs {
    /// Graph to fix (the IR's JSON form).
    pub input: PathBuf,
    /// Where to write the fixed graph (atomically).
    #[arg(short, long)]
    pub output: PathBuf,
    #[arg(long, value_parser = parse_backend)]
    pub backend: Backend,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// What a failing plugin call does to the run; its changes are rolled back either way.
    #[arg(long, value_enum, default_value_t = OnPluginError::Fail)]
    pub on_plugin_error: OnPluginError,
}

fn parse_backend(s: &str) -> Result<Backend, String> {
    toml::Value::String(s.to_string())
        .try_into::<Backend>()
        .map_err(|_| format!("unknown backend `{s}` (dynamo, onnx, executorch, executorch.xnnpack, executorch.cuda)"))
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Plugins(PluginsCommand::List { sandbox, backend }) => list(&sandbox, backend),
        Command::Fix(args) => fix(&args),
    }
}

fn list(sandbox: &SandboxArgs, backend: Option<Backend>) -> Result<()> {
    let runtime = sandbox.runtime()?;
    let loaded = plugins::load_all(&runtime, &sandbox.plugins)?;
    println!("{:<28} {:<8} {:<16} {:<10} {:<16} {:<40}", "NAME", "VERSION", "KIND", "BACKEND", "SHA256", "TARGETS");
    for p in loaded.iter().filter(|p| backend.is_none_or(|b| p.manifest.plugin.backend == b)) {
        let m = &p.manifest.plugin;
        println!(
            "{:<28} {:<8} {:<16} {:<10} {:<16} {}",
            m.name,
            m.version,
            m.kind.as_str(),
            m.backend.as_str(),
            &p.component_sha256[..16],
            if p.targets.is_empty() { "(whole program)".to_string() } else { p.targets.join(", ") }
        );
    }
    Ok(())
}

fn fix(args: &FixArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.input).with_context(|| format!("reading {}", args.input.display()))?;
    let mut graph = Graph::from_json(&text).with_context(|| format!("{}", args.input.display()))?;
    let runtime = args.sandbox.runtime()?;
    let loaded = plugins::load_all(&runtime, &args.sandbox.plugins)?;
    let nodes_before = graph.node_count();
    let mut reports: Vec<StageReport> = Vec::new();
    // ── Stage: FX program fixes ──
    let program_fixes = stages::select(&loaded, args.backend, PluginKind::FxProgramFix);
    reports.push(stages::fx_program_fix::run(&runtime, &program_fixes, &mut graph, "fx-program-fixes", args.on_plugin_error)?);
    // ── Stage: FX node fixes ──
    let node_fixes = stages::select(&loaded, args.backend, PluginKind::FxNodeFix);
    reports.push(stages::fx_node_fix::run(&runtime, &node_fixes, &mut graph, "fx-node-fixes", args.on_plugin_error)?);
    crate::atomic::write_bytes_atomically(&args.output, graph.to_json().as_bytes())
        .with_context(|| format!("writing {}", args.output.display()))?;
    print_summary(&reports, nodes_before, graph.node_count(), &args.output);
    Ok(())
}

fn print_summary(reports: &[StageReport], before: usize, after: usize, output: &std::path::Path) {
    for report in reports {
        println!("stage {:<18} {:>8.2} ms  dead code removed: {}", report.stage, report.elapsed.as_secs_f64() * 1e3, report.dead_code_removed);
        for (plugin, c) in &report.plugins {
            println!("  {plugin:<30} calls {:>5}  changed {:>5}  failed {:>3}", c.calls, c.changed, c.failed);
        }
    }
    println!("nodes: {before} -> {after}; wrote {}", output.display());
}
