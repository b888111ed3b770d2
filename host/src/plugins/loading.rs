//! Loading: one plugin (compiled by the runtime, then asked in a session
//! what it serves, which must be what it declared), and a plugin set for a
//! run or a `plugins` command: discovery, the upstream versions it resolves
//! against, the runtime, and the lock check. The CLI fills [`SetOptions`]
//! from flags and the config file; everything after that (which Python to
//! ask, when to ask it, what the lock says) is here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Result};

use super::lock::LOCK_FILE;
use super::manifest::{same_targets, META_SECTION};
use super::session::describe_any;
use super::{
    discover, upstream, Discovered, LoadError, Lock, Plugin, PluginSet, Runtime, RuntimeOptions,
    Versions,
};

impl Runtime {
    /// Compiles (or fetches from the cache) and checks a discovered plugin,
    /// then calls its `describe`: the targets it answers must be the ones it
    /// declared (in its `hfx:plugin-meta` section, or an old manifest).
    pub fn load(&self, found: &Discovered) -> Result<Plugin, LoadError> {
        let start = Instant::now();
        let mut plugin = self.compile(found)?;
        let component_path = found.component_path();
        let fail = |reason: String| LoadError::new(&component_path, reason);
        let described = describe_any(self, &plugin, "load").map_err(|e| fail(e.to_string()))?;
        if !same_targets(&found.manifest.plugin.targets, &described) {
            let (mut declared, mut described) =
                (found.manifest.plugin.targets.clone(), described.clone());
            for list in [&mut declared, &mut described] {
                list.sort();
                list.dedup();
            }
            // Blame whoever stated the targets: the component's declaration, else the manifest.
            return Err(match &found.declared {
                Some(_) => fail(format!(
                    "declares the targets {declared:?} ({META_SECTION}) but its describe() answers {described:?}"
                )),
                None => LoadError::new(
                    found.manifest_path(),
                    format!("plugin.targets {declared:?} differ from what the component describes: {described:?}"),
                ),
            });
        }
        plugin.targets = described;
        plugin.load_time = start.elapsed();
        Ok(plugin)
    }
}

/// Where plugins come from and what they are resolved against.
#[derive(Debug, Clone, Default)]
pub struct SetOptions {
    /// Plugin folders; every `plugin.toml` below each is found.
    pub folders: Vec<PathBuf>,
    /// Upstream versions given explicitly (`--target PACKAGE=VERSION`); they
    /// win over what is installed.
    pub targets: Vec<(String, String)>,
    /// The Python named by the user (`--python`); see [`SetOptions::python`].
    pub python: Option<String>,
    /// The lock file named by the user; else `hfx.lock` when present.
    pub lock: Option<PathBuf>,
    /// Refuse any difference from the lock.
    pub locked: bool,
    pub runtime: RuntimeOptions,
}

/// Why a set is loaded: to run it, or to write its lock (then no lock is
/// read, and every known upstream package is asked for its version).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Use,
    Lock,
}

/// A loaded plugin set with its runtime and what the lock says about it.
pub struct LoadedSet {
    pub runtime: Runtime,
    pub set: PluginSet,
    /// The lock the set was checked against, if any.
    pub lock: Option<PathBuf>,
    /// Drift from the lock (empty without a lock).
    pub drift: Vec<String>,
    /// What discovery skipped and why (already printed, one line each).
    pub warnings: Vec<discover::Warning>,
}

impl SetOptions {
    /// The Python whose packages give the upstream versions (and which runs
    /// the trace worker): `--python`, else `$HFX_PYTHON`, else an installed
    /// hfx's environment (`hfx setup`), else the current folder's
    /// `.venv/bin/python`, else that of the checkout this hfx was built in
    /// (so a checkout's hfx works from any folder), else `python3`.
    pub fn python(&self) -> String {
        Self::python_for(self.python.as_deref())
    }

    /// [`SetOptions::python`] when `--python` is `given`.
    pub fn python_for(given: Option<&str>) -> String {
        if let Some(p) = given {
            return p.to_string();
        }
        if let Some(p) = std::env::var_os("HFX_PYTHON") {
            return p.to_string_lossy().into_owned();
        }
        if let Some(python) =
            crate::installed::Installed::find().map(|i| i.python()).filter(|p| p.exists())
        {
            return python.to_string_lossy().into_owned();
        }
        let checkout = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .map(|root| root.join(".venv/bin/python"));
        for venv in std::iter::once(PathBuf::from(".venv/bin/python")).chain(checkout) {
            if venv.exists() {
                return venv.to_string_lossy().into_owned();
            }
        }
        "python3".into()
    }

    fn lock_path(&self) -> Option<PathBuf> {
        match &self.lock {
            Some(p) => Some(p.clone()),
            None => Path::new(LOCK_FILE).exists().then(|| PathBuf::from(LOCK_FILE)),
        }
    }

    /// Finds, resolves and loads the plugin set, and checks it against the
    /// lock. `installed`: the upstream versions when already known (the trace
    /// worker's `hello`); `targets` still override them.
    pub fn load(&self, purpose: Purpose, installed: Option<Versions>) -> Result<LoadedSet> {
        let for_lock = purpose == Purpose::Lock;
        let lock = match self.lock_path() {
            Some(path) if !for_lock => Some((Lock::read(&path)?, path)),
            None if self.locked && !for_lock => {
                bail!("--locked: no lock file ({LOCK_FILE} not found; write one with `hfx plugins lock`)")
            }
            _ => None,
        };
        let runtime = Runtime::new(self.runtime.clone())?;
        let (found, warnings) = discover::discover_folders(&self.folders)?;
        for w in &warnings {
            eprintln!("warning: {w}");
        }
        let mut needed: BTreeSet<String> =
            found.iter().flat_map(|f| f.manifest.upstream.keys().cloned()).collect();
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
        let set = super::load_set(&runtime, found, versions)?;
        let mut drift = Vec::new();
        if let Some((lock, path)) = &lock {
            drift = lock.check(path, &Lock::of(&set.plugins, &set.upstream), self.locked)?;
            for d in &drift {
                eprintln!("warning: drift from {}: {d}", path.display());
            }
        }
        Ok(LoadedSet { runtime, set, lock: lock.map(|(_, path)| path), drift, warnings })
    }

    /// Upstream versions: the explicit targets, and what is installed for the
    /// `needed` packages they do not give (Python is asked only then). For a
    /// lock, a Python that cannot tell is an error when it was named with
    /// --python or no --target gives a version: the lock would record
    /// upstream versions nobody chose.
    fn upstream(&self, needed: &BTreeSet<String>, for_lock: bool) -> Result<Versions> {
        let mut versions = Versions::new();
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
}
