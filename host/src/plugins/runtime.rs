//! The wasmtime side: one engine for all plugins, one linker per plugin kind,
//! and loading (compile or cache, import check, export check, `describe`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{types::ComponentItem, Component, Linker};
use wasmtime::{Config, Engine, Store};

use super::bindings::{fx_node_fix, fx_program_fix, onnx_ir_fix, onnx_translation, patch};
use super::cache::{CacheOutcome, ComponentCache};
use super::discover::Discovered;
use super::error::LoadError;
use super::manifest::{Manifest, PluginKind};
use super::sandbox::Limits;
use super::store::PluginState;

/// Resolution of the wall-clock deadline.
pub(super) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The only imports a plugin may have: the contract's own interfaces. No WASI.
const PROVIDED_IMPORTS: &[&str] = &[
    "hfx:plugin/types@0.1.0",
    "hfx:plugin/graph@0.1.0",
    "hfx:plugin/onnx@0.1.0",
    "hfx:plugin/onnx@0.2.0",
    "hfx:plugin/patching@0.1.0",
];

#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    pub limits: Limits,
    /// On-disk cache of compiled components; None compiles every time.
    pub cache_dir: Option<std::path::PathBuf>,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions { limits: Limits::default(), cache_dir: ComponentCache::default_dir() }
    }
}

pub struct Runtime {
    pub(super) engine: Engine,
    linkers: Linkers,
    cache: ComponentCache,
    pub(super) limits: Limits,
    ticker_stop: Arc<AtomicBool>,
}

struct Linkers {
    fx_node_fix: Linker<PluginState>,
    fx_program_fix: Linker<PluginState>,
    patch: Linker<PluginState>,
    onnx_translation: Linker<PluginState>,
    onnx_ir_fix: Linker<PluginState>,
}

/// A loaded plugin: manifest, hashes, and the pre-linked component of its kind.
pub struct Plugin {
    pub manifest: Manifest,
    pub dir: std::path::PathBuf,
    pub component_sha256: String,
    pub manifest_sha256: String,
    /// What the component's `describe` answered (equal to the declared targets).
    pub targets: Vec<String>,
    pub load_time: Duration,
    pub cache: CacheOutcome,
    /// Names the component imports and exports (for `hfx plugins inspect`).
    pub imports: Vec<String>,
    pub exports: Vec<String>,
    /// The engine it was compiled for: it runs only in the runtime that loaded it.
    pub(super) engine: Engine,
    pub(super) pre: KindPre,
}

impl Plugin {
    pub fn name(&self) -> &str {
        &self.manifest.plugin.name
    }

    pub fn kind(&self) -> PluginKind {
        self.manifest.plugin.kind
    }

    /// Stable order within a stage: manifest `order`, then name.
    pub fn sort_key(&self) -> (i32, &str) {
        (self.manifest.plugin.order, self.name())
    }
}

pub enum KindPre {
    FxNodeFix(fx_node_fix::FxNodeFixPre<PluginState>),
    FxProgramFix(fx_program_fix::FxProgramFixPre<PluginState>),
    Patch(patch::PatchPre<PluginState>),
    OnnxTranslation(onnx_translation::OnnxTranslationPre<PluginState>),
    OnnxIrFix(onnx_ir_fix::OnnxIrFixPre<PluginState>),
}

impl Runtime {
    pub fn new(options: RuntimeOptions) -> anyhow::Result<Self> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        // Fuel: the deterministic budget. Epochs: the wall-clock backstop.
        config.consume_fuel(true);
        config.epoch_interruption(true);
        config.max_wasm_stack(super::sandbox::MAX_WASM_STACK);
        let engine = Engine::new(&config)?;
        use Interface::*;
        let linkers = Linkers {
            fx_node_fix: linker(&engine, &[Types, Graph])?,
            fx_program_fix: linker(&engine, &[Types, Graph])?,
            patch: linker(&engine, &[Types, Patching])?,
            onnx_translation: linker(&engine, &[Types, Graph, Onnx, OnnxV0_2])?,
            onnx_ir_fix: linker(&engine, &[Types, Onnx, OnnxV0_2])?,
        };
        let ticker_stop = Arc::new(AtomicBool::new(false));
        spawn_epoch_ticker(engine.clone(), ticker_stop.clone());
        Ok(Runtime {
            engine,
            linkers,
            cache: ComponentCache::new(options.cache_dir),
            limits: options.limits,
            ticker_stop,
        })
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// How many of `found` have no compiled entry in the cache yet: what a
    /// load is about to compile and keep (0 without a cache).
    pub fn uncompiled(&self, found: &[Discovered]) -> usize {
        found
            .iter()
            .filter(|f| {
                self.cache
                    .entry_path(&self.engine, &f.component_sha256)
                    .is_some_and(|p| !p.is_file())
            })
            .count()
    }

    /// Compiles (or fetches from the cache) a discovered plugin and checks
    /// what can be checked without running it: a component, the contract's
    /// imports only, the world of its kind. `Runtime::load` (in `loading.rs`)
    /// then asks it what it serves.
    pub(super) fn compile(&self, found: &Discovered) -> Result<Plugin, LoadError> {
        let component_path = found.component_path();
        let fail = |reason: String| LoadError::new(&component_path, reason);
        if let Some(imports) = core_module_imports(&found.component) {
            return Err(fail(format!(
                "is a core WebAssembly module, not a component (imports {}); build plugins with `cargo xtask build-plugins`",
                if imports.is_empty() { "nothing".into() } else { imports.join(", ") }
            )));
        }
        let (component, cache) = self
            .cache
            .load(&self.engine, &found.component, &found.component_sha256)
            .map_err(|e| fail(format!("not a valid WebAssembly component: {}", one_line(&e))))?;
        self.check_imports(&component).map_err(fail)?;
        let kind = found.manifest.plugin.kind;
        let pre = self.pre(kind, &component).map_err(|e| {
            fail(format!(
                "does not implement the `{kind}` world of hfx:plugin@0.1.0 or 0.2.0: {}",
                one_line(&e)
            ))
        })?;
        let plugin = Plugin {
            manifest: found.manifest.clone(),
            dir: found.dir.clone(),
            component_sha256: found.component_sha256.clone(),
            manifest_sha256: found.manifest_sha256.clone(),
            targets: Vec::new(),
            load_time: Duration::ZERO,
            cache,
            imports: component
                .component_type()
                .imports(&self.engine)
                .map(|(n, _)| n.to_string())
                .collect(),
            exports: component
                .component_type()
                .exports(&self.engine)
                .map(|(n, _)| n.to_string())
                .collect(),
            engine: self.engine.clone(),
            pre,
        };
        Ok(plugin)
    }

    /// Refuses any import outside the contract, naming it.
    fn check_imports(&self, component: &Component) -> Result<(), String> {
        let ty = component.component_type();
        let mut refused = Vec::new();
        for (name, import) in ty.imports(&self.engine) {
            // A world's `use` imports types by name; a type grants nothing.
            let capability =
                !matches!(import.ty, ComponentItem::Type(_) | ComponentItem::Resource(_));
            if capability && !PROVIDED_IMPORTS.contains(&name) {
                refused.push(format!("`{name}`"));
            }
        }
        if refused.is_empty() {
            return Ok(());
        }
        Err(format!(
            "imports {}, which hfx does not provide (plugins get no WASI: no files, network, clock or environment)",
            refused.join(", ")
        ))
    }

    fn pre(&self, kind: PluginKind, component: &Component) -> wasmtime::Result<KindPre> {
        let l = &self.linkers;
        Ok(match kind {
            PluginKind::FxNodeFix => KindPre::FxNodeFix(fx_node_fix::FxNodeFixPre::new(
                l.fx_node_fix.instantiate_pre(component)?,
            )?),
            PluginKind::FxProgramFix => KindPre::FxProgramFix(
                fx_program_fix::FxProgramFixPre::new(l.fx_program_fix.instantiate_pre(component)?)?,
            ),
            PluginKind::Patch => {
                KindPre::Patch(patch::PatchPre::new(l.patch.instantiate_pre(component)?)?)
            }
            PluginKind::OnnxTranslation => {
                KindPre::OnnxTranslation(onnx_translation::OnnxTranslationPre::new(
                    l.onnx_translation.instantiate_pre(component)?,
                )?)
            }
            PluginKind::OnnxIrFix => KindPre::OnnxIrFix(onnx_ir_fix::OnnxIrFixPre::new(
                l.onnx_ir_fix.instantiate_pre(component)?,
            )?),
        })
    }

    /// A fresh store with this runtime's limits.
    pub(super) fn new_store(&self) -> Store<PluginState> {
        let mut store = Store::new(&self.engine, PluginState::new(self.limits));
        store.limiter(|s| &mut s.memory);
        store.epoch_deadline_trap();
        store
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

/// The contract's interfaces a world imports.
#[derive(Debug, Clone, Copy)]
enum Interface {
    Types,
    Graph,
    Onnx,
    /// 0.2.0's `onnx`, beside 0.1.0's: a world's linker links either version.
    OnnxV0_2,
    Patching,
}

/// A linker with exactly the interfaces of one world, each given only its
/// own part of the store (`store.rs`).
fn linker(engine: &Engine, interfaces: &[Interface]) -> wasmtime::Result<Linker<PluginState>> {
    use super::bindings::{wit_graph, wit_onnx, wit_onnx_v0_2, wit_patching, wit_types, NoState};
    use super::store::{GraphPart, OnnxPart};
    let mut linker = Linker::new(engine);
    for interface in interfaces {
        match interface {
            Interface::Types => wit_types::add_to_linker::<_, NoState>(&mut linker, |_| NoState)?,
            Interface::Graph => {
                wit_graph::add_to_linker::<_, GraphPart>(&mut linker, PluginState::graph_host)?
            }
            Interface::Onnx => {
                wit_onnx::add_to_linker::<_, OnnxPart>(&mut linker, PluginState::onnx_host)?
            }
            Interface::OnnxV0_2 => {
                wit_onnx_v0_2::add_to_linker::<_, OnnxPart>(&mut linker, PluginState::onnx_host)?
            }
            Interface::Patching => {
                wit_patching::add_to_linker::<_, NoState>(&mut linker, |_| NoState)?
            }
        }
    }
    Ok(linker)
}

fn spawn_epoch_ticker(engine: Engine, stop: Arc<AtomicBool>) {
    std::thread::Builder::new()
        .name("hfx-epoch".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(EPOCH_TICK);
                engine.increment_epoch();
            }
        })
        .expect("spawning the epoch thread");
}

/// wasmtime errors carry a chain of causes; one line for the user.
pub(super) fn one_line(e: &wasmtime::Error) -> String {
    format!("{e:#}").replace('\n', " ")
}

/// The imports of `bytes` if they are a core module (`\0asm` version 1), as
/// `module.name`; `None` for anything else (a component goes on to wasmtime).
fn core_module_imports(bytes: &[u8]) -> Option<Vec<String>> {
    if !bytes.starts_with(b"\0asm\x01\0\0\0") {
        return None;
    }
    let mut imports = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        let Ok(wasmparser::Payload::ImportSection(section)) = payload else { continue };
        for import in section.into_imports().flatten() {
            if imports.len() == 8 {
                imports.push("...".into());
                return Some(imports);
            }
            imports.push(format!("`{}.{}`", import.module, import.name));
        }
    }
    Some(imports)
}
