//! The plugin platform on the host side: discovery (`discover`), manifests
//! (`manifest`), the wasmtime runtime and its cache (`runtime`, `cache`), the
//! sandbox limits (`sandbox`), the contract's bindings and host implementations
//! (`bindings`, `host_graph`, `host_onnx`), the kinds as types (`kind`) and
//! calls (`session`).

mod bindings;
pub mod cache;
pub mod discover;
pub mod error;
mod host_graph;
mod host_onnx;
mod host_onnx_v0_2;
pub mod ir_model;
pub mod kind;
pub mod loading;
pub mod lock;
pub mod manifest;
pub mod resolve;
mod runtime;
pub mod sandbox;
pub mod scaffold;
mod session;
mod store;
pub mod upstream;

/// The trace-time patch types of the contract (the worker protocol builds on them).
pub mod patching {
    pub use super::bindings::wit_patching::*;
    pub use super::bindings::wit_types::{Device, Dim, TensorMeta};
}
pub use discover::Discovered;
pub use error::{Failure, LoadError, NodeRef, PluginError};
pub use kind::{Kind, PluginOf};
pub use manifest::{Backend, Backends, Manifest, PluginKind};
pub use runtime::{Plugin, Runtime, RuntimeOptions};
pub use sandbox::Limits;
pub use session::Session;

use std::path::PathBuf;

pub use lock::{Lock, LockError};
pub use resolve::{ResolveError, Skipped};
pub use upstream::Versions;

/// Why a plugin set could not be put together.
#[derive(Debug, thiserror::Error)]
pub enum SetError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Resolve(#[from] ResolveError),
}

/// The plugins of a run: those that apply, those skipped and why, and the
/// upstream versions they were resolved against.
pub struct PluginSet {
    pub plugins: Vec<Plugin>,
    pub skipped: Vec<Skipped>,
    pub upstream: Versions,
}

/// Every plugin below each folder, in folder then path order. The first one
/// that cannot be read stops with its error; the same name and version found
/// twice is an error too.
pub fn discover_all(folders: &[PathBuf]) -> Result<Vec<Discovered>, SetError> {
    let (found, warnings) = discover::discover_folders(folders)?;
    for warning in &warnings {
        tracing::warn!("{warning}");
    }
    Ok(found)
}

/// Resolves `found` against `upstream` and loads what applies.
pub fn load_set(
    runtime: &Runtime,
    found: Vec<Discovered>,
    upstream: Versions,
) -> Result<PluginSet, SetError> {
    let resolution = resolve::resolve(found, &upstream)?;
    // Compiling is the slow part of a first run (~1 s a component in a debug
    // build); later runs read the cache. Said to a person at a terminal (a
    // script's stderr keeps its one line per error).
    let uncompiled = runtime.uncompiled(&resolution.active);
    if uncompiled > 1 && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!("compiling {uncompiled} plugin components (first run only; `hfx plugins precompile` does it ahead)…");
    }
    let plugins =
        resolution.active.iter().map(|f| runtime.load(f)).collect::<Result<Vec<_>, _>>()?;
    Ok(PluginSet { plugins, skipped: resolution.skipped, upstream })
}

/// Loads every plugin below the folders that applies without any upstream
/// version known (plugins with `[upstream]` ranges are skipped).
pub fn load_all(runtime: &Runtime, folders: &[PathBuf]) -> Result<Vec<Plugin>, SetError> {
    Ok(load_set(runtime, discover_all(folders)?, Versions::new())?.plugins)
}
