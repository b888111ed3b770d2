//! Compiled components on disk. Loading a compiled entry runs its machine code
//! as is (wasmtime cannot check it), so the cache is trusted only when it can be:
//!
//! - An entry is named by the sha256 of the component bytes it was compiled
//!   from and by wasmtime's compatibility hash of the engine
//!   (`Engine::precompile_compatibility_hash`): a different component, engine
//!   configuration or wasmtime version never looks up the same entry.
//! - An entry records the component's sha256, the engine hash and the sha256
//!   of the compiled bytes; on load all three are recomputed and compared. An
//!   entry copied under another component's name (or damaged) does not verify
//!   and is recompiled and rewritten.
//! - The folder is created 0700. It is used only when it and every folder
//!   above it belong to this user (or root) and are not writable by group or
//!   others (sticky folders like `/tmp` excepted); an entry only when it is a
//!   regular file of this user, not writable by group or others. Otherwise the
//!   component is compiled in memory, with one warning line.
//!
//! Whoever can write the folder as this user can run code as this user
//! anyway; the checks keep anyone else out, and keep the compiled code bound
//! to the component bytes the lock hashes. Entries are written 0600, through
//! a temp file and a rename.

use std::fs::OpenOptions;
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

/// Entry layout version 2: MAGIC, component sha256, engine hash, payload sha256 (32 bytes each), payload.
const MAGIC: &[u8; 8] = b"HFXCWAS2";
const HEADER: usize = MAGIC.len() + 3 * 32;
/// An entry larger than this is not read (compiled code of a 64 MiB component fits).
const MAX_ENTRY_BYTES: u64 = 1 << 30;

/// How a component was obtained, for reports and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Compiled now (no cache, or no entry yet).
    Compiled,
    /// Deserialized from a verified cache entry.
    Hit,
    /// An entry existed but did not verify (damaged, or compiled from other
    /// bytes); compiled now and rewritten.
    Replaced,
    /// The cache folder or the entry could be written by someone else; compiled
    /// now, in memory (an untrusted entry in a trusted folder is rewritten).
    Untrusted,
}

#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: Option<PathBuf>,
    /// Whether the folder can be trusted, decided (and warned about) once.
    trusted: OnceLock<Result<(), String>>,
}

impl ComponentCache {
    /// A cache in `dir`, or no on-disk cache with `None`.
    pub fn new(dir: Option<PathBuf>) -> Self {
        ComponentCache { dir, trusted: OnceLock::new() }
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

    /// Where the entry of the component with this sha256 (hex) lives.
    pub fn entry_path(&self, engine: &Engine, component_sha256: &str) -> Option<PathBuf> {
        let engine_hash = hex(&engine_hash(engine));
        let file = format!("{component_sha256}-{}.cwasm", &engine_hash[..16]);
        self.dir.as_ref().map(|d| d.join(file))
    }

    /// The compiled component for `bytes`, from the cache when a trusted, valid
    /// entry compiled from exactly these bytes exists. The key and the check use
    /// the sha256 of `bytes` computed here, never a hash handed in.
    pub fn load(
        &self,
        engine: &Engine,
        bytes: &[u8],
        _sha256: &str,
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let Some(dir) = &self.dir else {
            return Ok((Component::new(engine, bytes)?, CacheOutcome::Compiled));
        };
        if self.trusted.get_or_init(|| trust_dir(dir)).is_err() {
            return Ok((Component::new(engine, bytes)?, CacheOutcome::Untrusted));
        }
        let component_sha: [u8; 32] = Sha256::digest(bytes).into();
        let engine_sha = engine_hash(engine);
        let path = self.entry_path(engine, &hex(&component_sha)).expect("a cache folder");
        let outcome = match read_entry(engine, &path, &component_sha, &engine_sha) {
            Entry::Valid(component) => return Ok((component, CacheOutcome::Hit)),
            Entry::Absent => CacheOutcome::Compiled,
            Entry::Invalid => CacheOutcome::Replaced,
            Entry::Untrusted(why) => {
                tracing::warn!(
                    "component cache: refusing {}: {why}; compiling in memory and rewriting it",
                    path.display()
                );
                CacheOutcome::Untrusted
            }
        };
        let component = Component::new(engine, bytes)?;
        // A cache that cannot be written only costs the next run a compile.
        if let Err(e) = write_entry(&path, &component_sha, &engine_sha, &component.serialize()?) {
            tracing::warn!("component cache: cannot write {}: {e}", path.display());
        }
        Ok((component, outcome))
    }
}

enum Entry {
    Valid(Component),
    Absent,
    /// Damaged, from another component or engine: replaced.
    Invalid,
    /// Someone else could have written it.
    Untrusted(String),
}

fn read_entry(
    engine: &Engine,
    path: &Path,
    component_sha: &[u8; 32],
    engine_sha: &[u8; 32],
) -> Entry {
    let link = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Entry::Absent,
        Err(e) => return Entry::Untrusted(e.to_string()),
    };
    if !link.file_type().is_file() {
        return Entry::Untrusted("not a regular file".into());
    }
    let Ok(mut file) = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)
    else {
        return Entry::Invalid;
    };
    let Ok(meta) = file.metadata() else { return Entry::Invalid };
    // The file opened must be the one checked (not swapped in between).
    if meta.dev() != link.dev() || meta.ino() != link.ino() || !meta.is_file() {
        return Entry::Untrusted("it changed while being opened".into());
    }
    if let Err(why) = crate::private::owned_and_private(&meta) {
        return Entry::Untrusted(why);
    }
    if meta.len() > MAX_ENTRY_BYTES {
        return Entry::Invalid;
    }
    let mut data = Vec::with_capacity(meta.len() as usize);
    if (&mut file).take(MAX_ENTRY_BYTES).read_to_end(&mut data).is_err()
        || data.len() < HEADER
        || &data[..MAGIC.len()] != MAGIC
    {
        return Entry::Invalid;
    }
    let header = &data[MAGIC.len()..HEADER];
    let (compiled_from, rest) = header.split_at(32);
    let (compiled_for, payload_sha) = rest.split_at(32);
    let payload = &data[HEADER..];
    if compiled_from != component_sha
        || compiled_for != engine_sha
        || Sha256::digest(payload).as_slice() != payload_sha
    {
        return Entry::Invalid;
    }
    // SAFETY: the payload was written by `Component::serialize` of an engine with
    // the same compatibility hash, compiled from the very bytes being loaded
    // (both recorded in the entry and compared above), and it is intact (its
    // sha256). Only this user could have written it (checked above, and the
    // folder is trusted). wasmtime also checks its own header and version.
    match unsafe { Component::deserialize(engine, payload) } {
        Ok(component) => Entry::Valid(component),
        Err(_) => Entry::Invalid,
    }
}

fn write_entry(
    path: &Path,
    component_sha: &[u8; 32],
    engine_sha: &[u8; 32],
    payload: &[u8],
) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().expect("entries live in the cache folder");
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("entry");
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        file.write_all(MAGIC)?;
        file.write_all(component_sha)?;
        file.write_all(engine_sha)?;
        file.write_all(&Sha256::digest(payload))?;
        file.write_all(payload)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The cache folder, trusted (`private::trust_dir`) or not, with a warning.
fn trust_dir(dir: &Path) -> Result<(), String> {
    let result = crate::private::trust_dir(dir, "the cache");
    if let Err(why) = &result {
        tracing::warn!(
            "component cache {} is not trusted: {why}; compiling components in memory",
            dir.display()
        );
    }
    result
}

/// sha256 of wasmtime's compatibility hash of `engine` (its version, target,
/// and every setting that changes compiled code).
fn engine_hash(engine: &Engine) -> [u8; 32] {
    struct Sha(Sha256);
    impl Hasher for Sha {
        fn finish(&self) -> u64 {
            0 // only written to
        }
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
    }
    let mut hasher = Sha(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.0.update(MAGIC);
    hasher.0.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
