//! `hfx.lock`: the exact plugin set a team validated, and the upstream versions
//! it was resolved against. `--locked` refuses any difference; without it a
//! difference is a drift warning.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::manifest::{Backends, PluginKind};
use super::runtime::Plugin;
use super::upstream::Versions;

pub const LOCK_FILE: &str = "hfx.lock";
const LOCK_VERSION: u32 = 1;
/// A lock larger than this is refused before it is read.
pub const MAX_LOCK_BYTES: u64 = 16 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    pub version: u32,
    /// Upstream versions the set was resolved against.
    #[serde(default)]
    pub upstream: BTreeMap<String, String>,
    #[serde(default, rename = "plugin")]
    pub plugins: Vec<LockedPlugin>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct LockedPlugin {
    pub name: String,
    pub version: String,
    pub kind: PluginKind,
    pub backend: Backends,
    pub component_sha256: String,
    pub manifest_sha256: String,
    /// Folder it was loaded from, for people reading the lock (not compared).
    pub source: String,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("plugin set differs from {path} (--locked): {}", .differences.join("; "))]
    Differs { path: String, differences: Vec<String> },
}

impl Lock {
    /// The lock of a loaded plugin set.
    pub fn of(plugins: &[Plugin], upstream: &Versions) -> Lock {
        let mut plugins: Vec<LockedPlugin> = plugins
            .iter()
            .map(|p| LockedPlugin {
                name: p.name().to_string(),
                version: p.manifest.plugin.version.clone(),
                kind: p.kind(),
                backend: p.manifest.plugin.backend.clone(),
                component_sha256: p.component_sha256.clone(),
                manifest_sha256: p.manifest_sha256.clone(),
                source: p.dir.display().to_string(),
            })
            .collect();
        plugins.sort_by(|a, b| a.name.cmp(&b.name));
        Lock { version: LOCK_VERSION, upstream: upstream.clone(), plugins }
    }

    pub fn read(path: &Path) -> Result<Lock, LockError> {
        let unreadable =
            |reason: String| LockError::Unreadable { path: path.display().to_string(), reason };
        // Regular files only (a FIFO is refused without blocking), and bounded.
        let text = crate::input::read_to_string_bounded(path, MAX_LOCK_BYTES).map_err(|e| {
            let message = e.to_string();
            let prefix = format!("{}: ", path.display());
            unreadable(message.strip_prefix(&prefix).unwrap_or(&message).to_string())
        })?;
        let lock: Lock =
            toml::from_str(&text).map_err(|e| unreadable(e.message().replace('\n', " ")))?;
        if lock.version != LOCK_VERSION {
            return Err(unreadable(format!(
                "lock version {} (this hfx reads {LOCK_VERSION})",
                lock.version
            )));
        }
        Ok(lock)
    }

    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let text = format!(
            "# hfx.lock: written by `hfx plugins lock`; checked by `--locked`. Do not edit by hand.\n{}",
            toml::to_string_pretty(self).expect("locks serialize")
        );
        crate::atomic::write_bytes_atomically(path, text.as_bytes())
    }

    /// Every difference of `current` from this lock, one sentence each.
    pub fn differences(&self, current: &Lock) -> Vec<String> {
        let mut out = Vec::new();
        let locked: BTreeMap<&str, &LockedPlugin> =
            self.plugins.iter().map(|p| (p.name.as_str(), p)).collect();
        let found: BTreeMap<&str, &LockedPlugin> =
            current.plugins.iter().map(|p| (p.name.as_str(), p)).collect();
        for (name, p) in &found {
            match locked.get(name) {
                None => out.push(format!("plugin `{name}` {} added (not in the lock)", p.version)),
                Some(l) => {
                    if l.version != p.version {
                        out.push(format!(
                            "plugin `{name}`: locked version {}, found {}",
                            l.version, p.version
                        ));
                    }
                    if l.component_sha256 != p.component_sha256 {
                        out.push(format!(
                            "plugin `{name}`: component changed (locked sha256 {}, found {})",
                            short(&l.component_sha256),
                            short(&p.component_sha256)
                        ));
                    }
                    if l.manifest_sha256 != p.manifest_sha256 {
                        out.push(format!(
                            "plugin `{name}`: plugin.toml changed (locked sha256 {}, found {})",
                            short(&l.manifest_sha256),
                            short(&p.manifest_sha256)
                        ));
                    }
                }
            }
        }
        for (name, l) in &locked {
            if !found.contains_key(name) {
                out.push(format!("plugin `{name}` {} removed (in the lock, not found)", l.version));
            }
        }
        for (package, version) in &self.upstream {
            match current.upstream.get(package) {
                Some(v) if v == version => {}
                Some(v) => out.push(format!("{package}: locked {version}, found {v}")),
                None => out.push(format!("{package}: locked {version}, not found")),
            }
        }
        for (package, version) in &current.upstream {
            if !self.upstream.contains_key(package) {
                out.push(format!("{package}: found {version}, not in the lock"));
            }
        }
        out
    }

    /// `--locked`: any difference is an error. Otherwise the differences are
    /// returned as drift warnings for the caller to print.
    pub fn check(
        &self,
        path: &Path,
        current: &Lock,
        locked: bool,
    ) -> Result<Vec<String>, LockError> {
        let differences = self.differences(current);
        if locked && !differences.is_empty() {
            return Err(LockError::Differs { path: path.display().to_string(), differences });
        }
        Ok(differences)
    }
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}
