//! `--trace-cache DIR`: traced programs kept by what made them, so a run that
//! would trace the same program again (another opset, other ONNX options,
//! verification, a backend with the same patch set) skips the worker's trace.
//!
//! The key is the sha256 of what decides the trace: hfx's version and its
//! worker package's sha256, the trace request as the worker gets it (scratch
//! paths aside), the model's files (each file of a model folder by name,
//! size and modification time; a model function's module file by its bytes),
//! the patch plugins by name and component sha256, the upstream versions,
//! and the sha256 of the lock the plugin set was checked against (`hfx.lock`,
//! when one was read): an entry is used only by runs under the very lock
//! that stored it. A model that cannot be keyed (a function whose module
//! file is not found, a patch case's program) is traced as without a cache.
//!
//! An entry is `DIR/<key>/`: the program, its side weights and index, the
//! eager reference, the configs the worker saved (`configs/`), the worker's
//! reply (`reply.json`) and a manifest (`manifest.json`) of every other
//! file's size and sha256. It is written into a temp folder and renamed
//! into place, so an entry is whole or absent. The program and its weights
//! go in and out by hard link (copied where links are refused; the run only
//! reads them), the reference and configs by copy (they land in the user's
//! folder). Nothing is ever evicted: remove the folder to empty the cache.
//!
//! An entry is input like any file handed to hfx, so it is checked before
//! use: the folder is used only when it and every folder above it belong to
//! this user (or root) and are not writable by group or others, as the
//! component cache's ([`crate::private::trust_dir`]); otherwise hfx traces
//! without it, with one warning line. An entry is used only when it, and
//! each of its files, is a folder or regular file of this user not writable
//! by others (no link), holds exactly the files its manifest lists, each of
//! the size and sha256 listed; otherwise it is removed, with one warning
//! line, and the model traced again. The program is then read as any `.pt2`
//! (nothing pickled is loaded from it: [`crate::graph::pt2::Pt2::open`]),
//! and the eager reference loads with `weights_only`. What the manifest
//! binds is the entry to itself: someone who can write this user's files
//! can rewrite both, and could run code as this user anyway.

use std::path::{Path, PathBuf};

use std::collections::BTreeMap;
use std::io::Read;

use anyhow::{anyhow, bail, Context, Result};
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
/// Every file of an entry but itself, by path inside the entry: `[size, sha256]`.
const MANIFEST: &str = "manifest.json";
/// Most bytes a cached reply may hold.
const REPLY_LIMIT: u64 = 64 << 20;
/// Most bytes an entry's manifest may hold.
const MANIFEST_LIMIT: u64 = 1 << 20;

pub struct TraceCache {
    dir: PathBuf,
    /// Why the folder cannot be trusted; then it is neither read nor written.
    untrusted: Option<String>,
}

impl TraceCache {
    /// The cache in `dir` (created 0700 if needed); one that cannot be
    /// trusted is said once and not used.
    pub fn open(dir: &Path) -> Result<TraceCache> {
        let untrusted = crate::private::trust_dir(dir, "the traced programs it keeps").err();
        if let Some(why) = &untrusted {
            tracing::warn!(
                "--trace-cache {} is not used: {why}; tracing without it",
                dir.display()
            );
        }
        Ok(TraceCache { dir: dir.to_path_buf(), untrusted })
    }

    /// The key of `params` (the request as sent) for `source`, with the patch
    /// plugins `(name, component sha256)`, the upstream `versions` and the
    /// lock file the plugin set was checked against; the error says why the
    /// request has none.
    pub fn key(
        params: &TraceParams,
        source: &ModelSource,
        patches: &[(String, String)],
        versions: &Versions,
        lock: Option<&Path>,
    ) -> Result<String> {
        let model = model_fingerprint(source)?;
        let lock = match lock {
            Some(path) => {
                let bytes = crate::input::read_bounded(path, crate::plugins::lock::MAX_LOCK_BYTES)
                    .map_err(|e| anyhow!("the lock cannot be read: {e}"))?;
                serde_json::Value::String(hex(&Sha256::digest(&bytes)))
            }
            None => serde_json::Value::Null,
        };
        let mut request = serde_json::to_value(params)?;
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
            "lock": lock,
        });
        Ok(hex(&Sha256::digest(keyed.to_string().as_bytes())))
    }

    /// The entry of `key`, if the cache holds it whole (with the eager
    /// reference when the run needs one) and it verifies ([`verify`]); an
    /// entry that does not is removed, with one warning line.
    pub fn lookup(&self, key: &str, reference: bool) -> Option<PathBuf> {
        if self.untrusted.is_some() {
            return None;
        }
        let entry = self.dir.join(key);
        std::fs::symlink_metadata(&entry).ok()?;
        if let Err(why) = verify(&entry) {
            tracing::warn!(
                "--trace-cache: entry {} discarded: {why:#}; traced again",
                entry.display()
            );
            if std::fs::symlink_metadata(&entry)
                .is_ok_and(|m| m.file_type().is_symlink() || !m.is_dir())
            {
                let _ = std::fs::remove_file(&entry);
            } else {
                let _ = std::fs::remove_dir_all(&entry);
            }
            return None;
        }
        (entry.join(REPLY).is_file() && (!reference || entry.join(REFERENCE).is_file()))
            .then_some(entry)
    }

    /// Puts `entry`'s files into `scratch` and its configs into `folder`
    /// (an export folder's scratch, when the run writes one); its reply.
    /// Side weights are linked (the run only reads them); what may land in
    /// the user's folder ([`reaches_the_user`], the configs) is copied. On an
    /// error the scratch folder is left as it was.
    pub fn restore(entry: &Path, scratch: &Path, folder: Option<&Path>) -> Result<TraceReply> {
        let restored = (|| -> Result<TraceReply> {
            let text = crate::input::read_bounded(&entry.join(REPLY), REPLY_LIMIT)
                .map_err(|e| anyhow::anyhow!("{}: {e}", entry.display()))?;
            let reply: TraceReply = serde_json::from_slice(&text)
                .with_context(|| format!("{}: its reply", entry.display()))?;
            let weights_inside = !entry.join(SIDE_WEIGHTS).exists();
            for name in PROGRAM_FILES {
                let from = entry.join(name);
                if from.exists() {
                    let to = scratch.join(name);
                    if reaches_the_user(name, weights_inside) {
                        copy_for_the_user(&from, &to)?;
                    } else {
                        link_or_copy(&from, &to)?;
                    }
                }
            }
            if let Some(folder) = folder {
                for config in files_in(&entry.join(CONFIGS))? {
                    let to = folder.join(config.file_name().context("a config without a name")?);
                    copy_for_the_user(&config, &to)?;
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
    pub fn store(
        &self,
        key: &str,
        scratch: &Path,
        folder: Option<&Path>,
        reply: &TraceReply,
    ) -> Result<()> {
        if self.untrusted.is_some() {
            return Ok(());
        }
        let entry = self.dir.join(key);
        // An entry without the eager reference gives way to one with it.
        if entry.join(REPLY).is_file()
            && (entry.join(REFERENCE).is_file() || !scratch.join(REFERENCE).is_file())
        {
            return Ok(());
        }
        let staging = self.dir.join(format!(".{key}.{}.tmp", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        let stored = (|| -> Result<()> {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().mode(0o700).create(&staging)?;
            std::fs::DirBuilder::new().mode(0o700).create(staging.join(CONFIGS))?;
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
                    std::fs::copy(
                        &config,
                        staging
                            .join(CONFIGS)
                            .join(config.file_name().context("a config without a name")?),
                    )?;
                }
            }
            crate::atomic::write_bytes_atomically(
                &staging.join(REPLY),
                &serde_json::to_vec(reply)?,
            )?;
            write_manifest(&staging)?;
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
fn model_fingerprint(source: &ModelSource) -> Result<serde_json::Value> {
    match source {
        ModelSource::Architecture { .. } => Ok(serde_json::Value::Null), // the request names it whole
        ModelSource::Directory { path, .. } => {
            let mut found = Vec::new();
            for file in files_in(path)? {
                let meta =
                    std::fs::metadata(&file).map_err(|e| anyhow!("{}: {e}", file.display()))?;
                let modified = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_nanos());
                found.push(serde_json::json!([
                    file.file_name().map(|n| n.to_string_lossy().to_string()),
                    meta.len(),
                    modified.map(|m| m.to_string())
                ]));
            }
            found.sort_by_key(|v| v.to_string());
            Ok(serde_json::Value::Array(found))
        }
        ModelSource::Function(spec) => {
            let module = spec.split(':').nth(1).unwrap_or_default();
            let file = module_file(module).ok_or_else(|| {
                anyhow!(
                    "the module file of {spec} is not found in the current folder or PYTHONPATH"
                )
            })?;
            let bytes = std::fs::read(&file).map_err(|e| anyhow!("{}: {e}", file.display()))?;
            Ok(serde_json::json!([
                file.display().to_string(),
                Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect::<String>()
            ]))
        }
        ModelSource::Program { .. } | ModelSource::Captured { .. } | ModelSource::Caller => {
            bail!(
                "a patch case's program, a generation component or a caller's model is not cached"
            )
        }
    }
}

/// `module`'s source file where the worker imports it from: the current
/// folder first (the worker puts it first on `sys.path`), then `PYTHONPATH`.
fn module_file(module: &str) -> Option<PathBuf> {
    let relative = PathBuf::from(module.replace('.', "/"));
    let roots = std::iter::once(std::env::current_dir().ok()?).chain(
        std::env::var_os("PYTHONPATH")
            .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .unwrap_or_default(),
    );
    for root in roots {
        for candidate in
            [root.join(&relative).with_extension("py"), root.join(&relative).join("__init__.py")]
        {
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// Copies an entry's file (private, 0600) to `to`, where it may land in the
/// user's folder: readable as a file the run wrote (0644).
fn copy_for_the_user(from: &Path, to: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o644))
        .with_context(|| format!("{}", to.display()))
}

fn link_or_copy(from: &Path, to: &Path) -> Result<()> {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to)
            .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    }
    Ok(())
}

/// Every file of `entry` but the manifest, by its path inside the entry
/// (`configs/` is its one folder); an error for anything else there (a link,
/// another folder, a FIFO), or for a part another user could have written.
fn entry_files(entry: &Path) -> Result<BTreeMap<String, PathBuf>> {
    fn walk(dir: &Path, prefix: &str, found: &mut BTreeMap<String, PathBuf>) -> Result<()> {
        let entries = std::fs::read_dir(dir).map_err(|e| anyhow!("{}: {e}", dir.display()))?;
        for item in entries {
            let item = item.map_err(|e| anyhow!("{}: {e}", dir.display()))?;
            let path = item.path();
            let name = item
                .file_name()
                .to_str()
                .map(str::to_string)
                .ok_or_else(|| anyhow!("{}: a name that is not UTF-8", path.display()))?;
            let meta =
                std::fs::symlink_metadata(&path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
            let folder = meta.is_dir() && prefix.is_empty() && name == CONFIGS;
            if !folder && !meta.file_type().is_file() {
                bail!("`{prefix}{name}` is not a regular file");
            }
            crate::private::owned_and_private(&meta)
                .map_err(|why| anyhow!("`{prefix}{name}` is {why}"))?;
            if folder {
                walk(&path, &format!("{CONFIGS}/"), found)?;
            } else if !(prefix.is_empty() && name == MANIFEST) {
                found.insert(format!("{prefix}{name}"), path);
            }
        }
        Ok(())
    }
    let meta = std::fs::symlink_metadata(entry)?;
    if !meta.is_dir() {
        bail!("not a folder");
    }
    crate::private::owned_and_private(&meta).map_err(anyhow::Error::msg)?;
    let mut found = BTreeMap::new();
    walk(entry, "", &mut found)?;
    Ok(found)
}

/// The size and sha256 of regular file `path`, read without following a link.
fn digest(path: &Path) -> Result<(u64, String)> {
    let mut file = crate::weights::checkpoint::open_no_follow(path).map_err(anyhow::Error::msg)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buffer).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        size += n as u64;
    }
    Ok((size, hex(&hasher.finalize())))
}

/// Records every file of the staged entry `staging` in its manifest, each
/// made private first (a hard link shares the scratch file's mode).
fn write_manifest(staging: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut manifest = BTreeMap::new();
    for (name, path) in entry_files(staging)? {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        manifest.insert(name, digest(&path)?);
    }
    crate::atomic::write_bytes_atomically(
        &staging.join(MANIFEST),
        &serde_json::to_vec(&manifest)?,
    )?;
    std::fs::set_permissions(staging.join(MANIFEST), std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

/// Whether `entry` holds exactly the files its manifest lists, each of the
/// size and sha256 listed, all of them this user's and private; the reason
/// if not.
fn verify(entry: &Path) -> Result<()> {
    let found = entry_files(entry)?;
    let manifest_path = entry.join(MANIFEST);
    let text = crate::input::read_bounded(&manifest_path, MANIFEST_LIMIT)
        .map_err(|e| anyhow!("its manifest: {e}"))?;
    let manifest: BTreeMap<String, (u64, String)> =
        serde_json::from_slice(&text).map_err(|e| anyhow!("its manifest: {e}"))?;
    if let Some(extra) = found.keys().find(|name| !manifest.contains_key(*name)) {
        bail!("`{extra}` is not in its manifest");
    }
    for (name, (size, sha256)) in &manifest {
        let path = found.get(name).ok_or_else(|| anyhow!("`{name}` is missing"))?;
        let (found_size, found_sha256) = digest(path)?;
        if found_size != *size || found_sha256 != *sha256 {
            bail!(
                "`{name}` is not what was stored (size {found_size}, sha256 {}; stored {size}, {})",
                &found_sha256[..12],
                sha256.get(..12).unwrap_or(sha256)
            );
        }
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A staged entry: a program, side weights and a config, its manifest written.
    fn staged() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let entry = dir.path().join("key");
        std::fs::create_dir_all(entry.join(CONFIGS)).unwrap();
        std::fs::write(entry.join(PROGRAM), b"program").unwrap();
        std::fs::write(entry.join(SIDE_WEIGHTS), vec![7u8; 3000]).unwrap();
        std::fs::write(entry.join(CONFIGS).join("config.json"), b"{}").unwrap();
        std::fs::write(entry.join(REPLY), b"{}").unwrap();
        write_manifest(&entry).unwrap();
        (dir, entry)
    }

    /// Why `entry` does not verify, as the warning says it.
    fn why(entry: &Path) -> String {
        format!("{:#}", verify(entry).unwrap_err())
    }

    /// An entry is used only as it was stored: any byte changed, a file
    /// added, removed or replaced by a link, or a file others could write,
    /// and it does not verify.
    #[test]
    fn an_entry_verifies_only_as_it_was_stored() {
        let (_dir, entry) = staged();
        verify(&entry).unwrap();
        for mode in [0o600, 0o644] {
            std::fs::set_permissions(
                entry.join(SIDE_WEIGHTS),
                std::fs::Permissions::from_mode(mode),
            )
            .unwrap();
            verify(&entry).unwrap();
        }

        let (_dir, entry) = staged();
        let mut bytes = std::fs::read(entry.join(SIDE_WEIGHTS)).unwrap();
        bytes[1234] ^= 1;
        std::fs::write(entry.join(SIDE_WEIGHTS), &bytes).unwrap();
        let e = why(&entry);
        assert!(
            e.starts_with("`model.pt2.weights` is not what was stored (size 3000, sha256 "),
            "{e}"
        );

        let (_dir, entry) = staged();
        std::fs::write(entry.join(CONFIGS).join("extra.py"), b"").unwrap();
        assert_eq!(why(&entry), "`configs/extra.py` is not in its manifest");

        let (_dir, entry) = staged();
        std::fs::remove_file(entry.join(PROGRAM)).unwrap();
        assert_eq!(why(&entry), "`model.pt2` is missing");

        let (dir, entry) = staged();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"program").unwrap();
        std::fs::remove_file(entry.join(PROGRAM)).unwrap();
        std::os::unix::fs::symlink(&secret, entry.join(PROGRAM)).unwrap();
        assert_eq!(why(&entry), "`model.pt2` is not a regular file");

        let (_dir, entry) = staged();
        std::fs::set_permissions(entry.join(REPLY), std::fs::Permissions::from_mode(0o666))
            .unwrap();
        assert_eq!(why(&entry), "`reply.json` is writable by group or others (mode 666)");

        let (_dir, entry) = staged();
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o770)).unwrap();
        assert_eq!(why(&entry), "writable by group or others (mode 770)");

        let (_dir, entry) = staged();
        std::fs::write(entry.join(MANIFEST), b"{").unwrap();
        assert!(why(&entry).starts_with("its manifest: "));
    }

    /// A cache folder others can write is not used: nothing is looked up or stored.
    #[test]
    fn a_cache_folder_others_can_write_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let (_entries, stored) = staged();
        let cache = dir.path().join("cache");
        let trusted = TraceCache::open(&cache).unwrap();
        assert!(trusted.untrusted.is_none());
        std::fs::rename(&stored, cache.join("key")).unwrap();
        assert!(trusted.lookup("key", false).is_some());
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
        let exposed = TraceCache::open(&cache).unwrap();
        assert_eq!(exposed.untrusted.as_deref(), Some("writable by group or others (mode 777)"));
        assert!(exposed.lookup("key", false).is_none());
        // A damaged entry in a trusted folder is removed.
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(cache.join("key").join(REPLY), b"[]").unwrap();
        assert!(trusted.lookup("key", false).is_none());
        assert!(!cache.join("key").exists());
    }

    fn key_of(request: &crate::trace::TraceRequest, output: &str) -> Result<String> {
        let params = request.params(Path::new(output), Path::new("reference.pt"), Vec::new());
        let versions: Versions = [("torch".to_string(), "2.13.0".to_string())].into();
        TraceCache::key(&params, &request.source, &[], &versions, None)
    }

    /// What decides the trace makes the key; where its files go does not.
    #[test]
    fn a_key_is_what_decides_the_trace() {
        use crate::trace::TraceRequest;
        let llama = ModelSource::Architecture { name: "llama".into(), overrides: Vec::new() };
        let request = TraceRequest::new(llama.clone());
        let key = key_of(&request, "/tmp/.hfx-trace-1/model.pt2").unwrap();
        assert_eq!(key.len(), 64);
        assert_eq!(key_of(&request, "/elsewhere/model.pt2").unwrap(), key);
        let mut folder = request.clone();
        folder.folder = Some("/tmp/.hfx-folder-1".into());
        let with_folder = key_of(&folder, "model.pt2").unwrap();
        folder.folder = Some("/tmp/.hfx-folder-2".into());
        assert_eq!(key_of(&folder, "model.pt2").unwrap(), with_folder);
        assert_ne!(with_folder, key);
        let mut without_reference = request.clone();
        without_reference.reference = false;
        assert_eq!(key_of(&without_reference, "model.pt2").unwrap(), key);

        let mut dynamic = request.clone();
        dynamic.dynamic = true;
        assert_ne!(key_of(&dynamic, "model.pt2").unwrap(), key);
        let params = request.params(Path::new("model.pt2"), Path::new("reference.pt"), Vec::new());
        let patch = [("fix".to_string(), "ab12".to_string())];
        let patched = TraceCache::key(&params, &llama, &patch, &Versions::new(), None).unwrap();
        let unpatched = TraceCache::key(&params, &llama, &[], &Versions::new(), None).unwrap();
        assert_ne!(patched, unpatched);
        assert_ne!(unpatched, key, "the upstream versions are part of the key");

        // Under another lock, another key; a lock that cannot be read, none.
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("hfx.lock");
        std::fs::write(&lock, "a").unwrap();
        let locked = TraceCache::key(&params, &llama, &[], &Versions::new(), Some(&lock)).unwrap();
        std::fs::write(&lock, "b").unwrap();
        let relocked =
            TraceCache::key(&params, &llama, &[], &Versions::new(), Some(&lock)).unwrap();
        assert_ne!(locked, relocked);
        assert_ne!(locked, unpatched);
        let missing = dir.path().join("missing.lock");
        let why = TraceCache::key(&params, &llama, &[], &Versions::new(), Some(&missing));
        assert!(format!("{:#}", why.unwrap_err()).starts_with("the lock cannot be read: "));
    }

    #[test]
    fn a_model_folder_is_keyed_by_its_files_and_a_captured_program_not_at_all() {
        use crate::trace::TraceRequest;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        let folder = ModelSource::Directory {
            path: dir.path().into(),
            trust_remote_code: false,
            layers: None,
        };
        let request = TraceRequest::new(folder);
        let key = key_of(&request, "model.pt2").unwrap();
        assert_eq!(key_of(&request, "model.pt2").unwrap(), key);
        std::fs::write(dir.path().join("config.json"), "{\"hidden_size\": 8}").unwrap();
        assert_ne!(key_of(&request, "model.pt2").unwrap(), key);

        let captured = TraceRequest::new(ModelSource::Captured { component: "decode".into() });
        assert_eq!(
            format!("{:#}", key_of(&captured, "model.pt2").unwrap_err()),
            "a patch case's program, a generation component or a caller's model is not cached"
        );
        let function =
            TraceRequest::new(ModelSource::Function("python:no_such_module_here:f".into()));
        assert_eq!(
            format!("{:#}", key_of(&function, "model.pt2").unwrap_err()),
            "the module file of python:no_such_module_here:f is not found in the current folder or PYTHONPATH"
        );
    }
}
