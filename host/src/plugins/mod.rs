//! The plugin platform on the host side: discovery (`discover`), manifests
//! (`manifest`), the wasmtime runtime and its cache (`runtime`, `cache`), the
//! sandbox limits (`sandbox`), the contract's bindings and host implementations
//! (`bindings`, `host_graph`, `host_onnx`) and calls (`session`).

mod bindings;
pub mod cache;
pub mod discover;
pub mod error;
mod host_graph;
mod host_onnx;
pub mod manifest;
mod runtime;
pub mod sandbox;
mod session;

/// The trace-time patch types of the contract (the worker protocol builds on them).
pub mod patching {
    pub use super::bindings::wit_patching::*;
    pub use super::bindings::wit_types::{Device, Dim, TensorMeta};
}
pub use discover::Discovered;
pub use error::{Failure, LoadError, PluginError};
pub use manifest::{Backend, Manifest, PluginKind};
pub use runtime::{Plugin, Runtime, RuntimeOptions};
pub use sandbox::Limits;
pub use session::Session;

use std::path::PathBuf;

/// Loads every plugin below each folder, in path order. The first plugin that
/// cannot be read or loaded stops the load with its error.
pub fn load_all(runtime: &Runtime, folders: &[PathBuf]) -> Result<Vec<Plugin>, LoadError> {
    let mut plugins: Vec<Plugin> = Vec::new();
    for folder in folders {
        for found in discover::discover(folder)? {
            let plugin = runtime.load(&found?)?;
            if let Some(other) = plugins.iter().find(|p| p.name() == plugin.name()) {
                return Err(LoadError::new(
                    plugin.dir.join("plugin.toml"),
                    format!("plugin `{}` is already loaded from {}", plugin.name(), other.dir.display()),
                ));
            }
            plugins.push(plugin);
        }
    }
    Ok(plugins)
}
