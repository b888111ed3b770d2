//! `--trace-cache DIR`: traced programs kept by what made them, so a run that
//! would trace the same program again (another opset, other ONNX options,
//! verification, a backend with the same patch set) skips the worker's trace.
//!
//! The key is the sha256 of what decides the trace: hfx's version and its
//! worker package's sha256, the trace request as the worker gets it (scratch
//! paths aside), the model's files (each file of a model folder by name,
//! size and modification time; a model function's module file by its bytes),
//! the patch plugins by name and component sha256, and the upstream versions.
//! A model that cannot be keyed (a function whose module file is not found, a
//! patch case's program) is traced as without a cache.
//!
//! An entry is `DIR/<key>/`: the program, its side weights and index, the
//! eager reference, the configs the worker saved (`configs/`) and the
//! worker's reply (`reply.json`). It is written into a temp folder and
//! renamed into place, so an entry is whole or absent. The program and its
//! weights go in and out by hard link (copied where links are refused; the
//! run only reads them), the reference and configs by copy (they land in the
//! user's folder). A damaged entry is removed and traced again. Nothing is
//! ever evicted: remove the folder to empty the cache.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use super::files_in;
use crate::plugins::Versions;
use crate::trace::protocol::{TraceParams, TraceReply};
use crate::trace::ModelSource;

/// The files of a traced program in its scratch folder, as the trace step names them.
const PROGRAM: &str = "model.pt2";
const SIDE_WEIGHTS: &str = "model.pt2.weights";
const REFERENCE: &str = "reference.pt";
pub const PROGRAM_FILES: &[&str] = &[PROGRAM, SIDE_WEIGHTS, "model.pt2.weights.json", REFERENCE];
const REPLY: &str = "reply.json";
const CONFIGS: &str = "configs";
/// Most bytes a cached reply may hold.
const REPLY_LIMIT: u64 = 64 << 20;

pub struct TraceCache {
    dir: PathBuf,
}

/// A trace request's key, or why it has none.
pub type Key = std::result::Result<String, String>;

impl TraceCache {
    pub fn open(dir: &Path) -> Result<TraceCache> {
        std::fs::create_dir_all(dir).with_context(|| format!("--trace-cache {}: creating it", dir.display()))?;
        Ok(TraceCache { dir: dir.to_path_buf() })
    }

    /// The key of `params` (the request as sent) for `source`, with the patch
    /// plugins `(name, component sha256)` and the upstream `versions`.
    pub fn key(params: &TraceParams, source: &ModelSource, patches: &[(String, String)], versions: &Versions) -> Key {
        let model = model_fingerprint(source)?;
        let mut request = serde_json::to_value(params).map_err(|e| e.to_string())?;
        // Where the scratch files go is not what is traced; and an entry with
        // the eager reference also serves a run that does not ask for it.
        request["output"] = "output".into();
        request["reference"] = "reference".into();
        if !request["folder"].is_null() {
            request["folder"] = "folder".into();
        }
        let keyed = serde_json::json!({
            "hfx": env!("CARGO_PKG_VERSION"),
            "worker": crate::trace::package::sha256(),
            "request": request,
            "model": model,
            "patches": patches,
            "versions": versions,
        });
        let digest = Sha256::digest(keyed.to_string().as_bytes());
        Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// The entry of `key`, if the cache holds it whole (with the eager
    /// reference when the run needs one).
    pub fn lookup(&self, key: &str, reference: bool) -> Option<PathBuf> {
        let entry = self.dir.join(key);
        (entry.join(REPLY).is_file() && (!reference || entry.join(REFERENCE).is_file())).then_some(entry)
    }

    /// Puts `entry`'s files into `scratch` and its configs into `folder`
    /// (an export folder's scratch, when the run writes one); its reply.
    /// Side weights are linked (the run only reads them); what may land in
    /// the user's folder ([`reaches_the_user`], the configs) is copied. On an
    /// error the scratch folder is left as it was.
    pub fn restore(entry: &Path, scratch: &Path, folder: Option<&Path>) -> Result<TraceReply> {
        let restored = (|| -> Result<TraceReply> {
            let text = crate::input::read_bounded(&entry.join(REPLY), REPLY_LIMIT).map_err(|e| anyhow::anyhow!("{}: {e}", entry.display()))?;
            let reply: TraceReply = serde_json::from_slice(&text).with_context(|| format!("{}: its reply", entry.display()))?;
            let weights_inside = !entry.join(SIDE_WEIGHTS).exists();
            for name in PROGRAM_FILES {
                let from = entry.join(name);
                if from.exists() {
                    let to = scratch.join(name);
                    if reaches_the_user(name, weights_inside) {
                        std::fs::copy(&from, &to).with_context(|| format!("copying {}", from.display()))?;
                    } else {
                        link_or_copy(&from, &to)?;
                    }
                }
            }
            if let Some(folder) = folder {
                for config in files_in(&entry.join(CONFIGS))? {
                    let to = folder.join(config.file_name().context("a config without a name")?);
                    std::fs::copy(&config, &to).with_context(|| format!("copying {}", config.display()))?;
                }
            }
            Ok(reply)
        })();
        if restored.is_err() {
            // Nothing linked to the entry may stay: the trace that follows writes these files.
            for name in PROGRAM_FILES {
                let _ = std::fs::remove_file(scratch.join(name));
            }
        }
        restored
    }

    /// Keeps the program traced into `scratch` (and the configs the worker
    /// saved into `folder`) under `key`. Another run that stored the same key
    /// meanwhile wins; its entry is the same trace.
    pub fn store(&self, key: &str, scratch: &Path, folder: Option<&Path>, reply: &TraceReply) -> Result<()> {
        let entry = self.dir.join(key);
        // An entry without the eager reference gives way to one with it.
        if entry.join(REPLY).is_file() && (entry.join(REFERENCE).is_file() || !scratch.join(REFERENCE).is_file()) {
            return Ok(());
        }
        let staging = self.dir.join(format!(".{key}.{}.tmp", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        let stored = (|| -> Result<()> {
            std::fs::create_dir_all(staging.join(CONFIGS))?;
            let weights_inside = !scratch.join(SIDE_WEIGHTS).exists();
            for name in PROGRAM_FILES {
                let from = scratch.join(name);
                if from.exists() {
                    if reaches_the_user(name, weights_inside) {
                        std::fs::copy(&from, staging.join(name))?;
                    } else {
                        link_or_copy(&from, &staging.join(name))?;
                    }
                }
            }
            if let Some(folder) = folder {
                for config in files_in(folder)? {
                    std::fs::copy(&config, staging.join(CONFIGS).join(config.file_name().context("a config without a name")?))?;
                }
            }
            crate::atomic::write_bytes_atomically(&staging.join(REPLY), &serde_json::to_vec(reply)?)?;
            // The old entry goes aside first: a rename does not replace a folder that has files.
            let replaced = self.dir.join(format!(".{key}.{}.old", std::process::id()));
            if entry.exists() {
                std::fs::rename(&entry, &replaced)?;
            }
            let renamed = std::fs::rename(&staging, &entry);
            let _ = std::fs::remove_dir_all(&replaced);
            match renamed {
                Ok(()) => Ok(()),
                Err(_) if entry.exists() => Ok(()),
                Err(e) => Err(e.into()),
            }
        })();
        let _ = std::fs::remove_dir_all(&staging);
        stored.with_context(|| format!("--trace-cache: storing {}", entry.display()))
    }
}

/// Whether a traced file may end up in the user's folder (the eager
/// reference; a program holding its weights, placed as an unchanged `.pt2`):
/// such a file is copied in and out of the cache, never linked, so editing
/// it there cannot change an entry.
fn reaches_the_user(name: &str, weights_inside: bool) -> bool {
    name == REFERENCE || (name == PROGRAM && weights_inside)
}

/// What identifies the model's own files.
fn model_fingerprint(source: &ModelSource) -> std::result::Result<serde_json::Value, String> {
    match source {
        ModelSource::Architecture { .. } => Ok(serde_json::Value::Null), // the request names it whole
        ModelSource::Directory { path, .. } => {
            let mut found = Vec::new();
            for file in files_in(path).map_err(|e| e.to_string())? {
                let meta = std::fs::metadata(&file).map_err(|e| format!("{}: {e}", file.display()))?;
                let modified = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map(|d| d.as_nanos());
                found.push(serde_json::json!([file.file_name().map(|n| n.to_string_lossy().to_string()), meta.len(), modified.map(|m| m.to_string())]));
            }
            found.sort_by_key(|v| v.to_string());
            Ok(serde_json::Value::Array(found))
        }
        ModelSource::Function(spec) => {
            let module = spec.split(':').nth(1).unwrap_or_default();
            let file = module_file(module).ok_or_else(|| format!("the module file of {spec} is not found in the current folder or PYTHONPATH"))?;
            let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            Ok(serde_json::json!([file.display().to_string(), Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect::<String>()]))
        }
        ModelSource::Program { .. } | ModelSource::Captured { .. } => Err("a patch case's program or a generation component is not cached".into()),
    }
}

/// `module`'s source file where the worker imports it from: the current
/// folder first (the worker puts it first on `sys.path`), then `PYTHONPATH`.
fn module_file(module: &str) -> Option<PathBuf> {
    let relative = PathBuf::from(module.replace('.', "/"));
    let roots = std::iter::once(std::env::current_dir().ok()?).chain(std::env::var_os("PYTHONPATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default());
    for root in roots {
        for candidate in [root.join(&relative).with_extension("py"), root.join(&relative).join("__init__.py")] {
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

fn link_or_copy(from: &Path, to: &Path) -> Result<()> {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    }
    Ok(())
}
