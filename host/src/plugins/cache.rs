//! Compiled components, cached on disk by the component's sha256 and the
//! engine's compatibility hash. An entry is verified before it is used: a file
//! whose checksum does not match is recompiled and overwritten, never trusted.
//! Entries are written atomically (temp file + rename).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};


use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

const MAGIC: &[u8; 8] = b"HFXCWASM";

/// How a component was obtained, for reports and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Compiled now (no cache, or no entry yet).
    Compiled,
    /// Deserialized from a verified cache entry.
    Hit,
    /// An entry existed but did not verify; compiled now and rewritten.
    Replaced,
}

#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: Option<PathBuf>,
}

impl ComponentCache {
    /// A cache in `dir`, or no on-disk cache with `None`.
    pub fn new(dir: Option<PathBuf>) -> Self {
        ComponentCache { dir }
    }

    /// `$HFX_CACHE_DIR`, else `$XDG_CACHE_HOME/hfx/components`, else `~/.cache/hfx/components`.
    pub fn default_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("HFX_CACHE_DIR") {
            return Some(PathBuf::from(dir));
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(base.join("hfx").join("components"))
    }

    pub fn entry_path(&self, engine: &Engine, component_sha256: &str) -> Option<PathBuf> {
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let file = format!("{component_sha256}-{:016x}.cwasm", hasher.finish());
        self.dir.as_ref().map(|d| d.join(file))
    }

    /// The compiled component for `bytes`, from the cache when a valid entry exists.
    pub fn load(&self, engine: &Engine, bytes: &[u8], sha256: &str) -> wasmtime::Result<(Component, CacheOutcome)> {
        let Some(path) = self.entry_path(engine, sha256) else {
            return Ok((Component::new(engine, bytes)?, CacheOutcome::Compiled));
        };
        let existed = path.exists();
        if existed {
            if let Some(component) = read_entry(engine, &path) {
                return Ok((component, CacheOutcome::Hit));
            }
        }
        let component = Component::new(engine, bytes)?;
        // A cache that cannot be written only costs the next run a compile.
        if let Err(e) = write_entry(&path, &component.serialize()?) {
            tracing::warn!("component cache: cannot write {}: {e}", path.display());
        }
        Ok((component, if existed { CacheOutcome::Replaced } else { CacheOutcome::Compiled }))
    }
}

/// Layout: MAGIC, sha256 of the payload (32 bytes), payload (`Component::serialize`).
fn read_entry(engine: &Engine, path: &Path) -> Option<Component> {
    let data = std::fs::read(path).ok()?;
    let header = MAGIC.len() + 32;
    if data.len() < header || &data[..MAGIC.len()] != MAGIC {
        return None;
    }
    let (checksum, payload) = data[MAGIC.len()..].split_at(32);
    if Sha256::digest(payload).as_slice() != checksum {
        return None;
    }
    // SAFETY: the payload was written by `Component::serialize` of an engine with
    // the same compatibility hash (it is in the file name) and verified against
    // its checksum above; wasmtime also checks its own header and version.
    unsafe { Component::deserialize(engine, payload) }.ok()
}

fn write_entry(path: &Path, payload: &[u8]) -> std::io::Result<()> {
    crate::atomic::write_atomically(path, |file| {
        file.write_all(MAGIC)?;
        file.write_all(&Sha256::digest(payload))?;
        file.write_all(payload)
    })
}
