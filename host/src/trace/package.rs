//! The worker package (`host/worker/hfx_worker/`), embedded in the binary
//! and unpacked where Python can import it.
//!
//! Python runs the files it finds on `sys.path`, so what runs must be exactly
//! what this hfx was built with:
//!
//! - The package goes to `<cache>/worker/<sha256>/hfx_worker/`, the sha256
//!   taken over every embedded file (name and bytes). `<cache>` is
//!   `$HFX_CACHE_DIR`, else `$XDG_CACHE_HOME/hfx`, else `~/.cache/hfx`.
//! - It is written into a fresh temp folder (0700, files 0400) and renamed
//!   into place, so a half-written package is never seen.
//! - Before every start the folder is checked: `<sha256>/` holds only
//!   `hfx_worker/`, which holds only the embedded files (no `__pycache__`, no
//!   module beside the package that could shadow `torch`); folders and files
//!   are not symlinks, belong to this user and are not writable by group or
//!   others; each file equals the embedded one byte for byte. A copy that fails
//!   any check is moved aside, removed and written again.
//! - The cache folder is used only when it and every folder above it belong to
//!   this user (or root) and are not writable by others (sticky folders such
//!   as `/tmp` excepted), the rule of the component cache
//!   (`plugins/cache.rs`). Otherwise the package goes to a private temp folder
//!   (registered as scratch, so a signal removes it too) removed when the
//!   worker is dropped.
//!
//! - Beside the packages, `<cache>/worker/memo/` (same rule) is where the
//!   worker keeps what it computes once per installed package rather than
//!   per start (`import_memo.py`: transformers' import structures, each
//!   valid while the files it was computed from are unchanged).
//!
//! Whoever can write these folders as this user can run code as this user
//! anyway; the checks keep other users, stale copies and damage out.

use std::fs::{DirBuilder, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

/// The package's name: the folder on `sys.path` holds this one entry.
pub const PACKAGE: &str = "hfx_worker";

/// The folder beside the packages (in `<cache>/worker/`) where the worker
/// keeps what it computes once per installed package.
pub const MEMO: &str = "memo";

/// Every file of the package, embedded (name within `hfx_worker/`, text).
pub const FILES: &[(&str, &str)] = &[
    ("__init__.py", include_str!("../../worker/hfx_worker/__init__.py")),
    ("__main__.py", include_str!("../../worker/hfx_worker/__main__.py")),
    ("allowlist.json", include_str!("../../worker/hfx_worker/allowlist.json")),
    ("calibrate.py", include_str!("../../worker/hfx_worker/calibrate.py")),
    ("checkpoint.py", include_str!("../../worker/hfx_worker/checkpoint.py")),
    ("confine.py", include_str!("../../worker/hfx_worker/confine.py")),
    ("eager_quantize.py", include_str!("../../worker/hfx_worker/eager_quantize.py")),
    ("edge_rewrites.py", include_str!("../../worker/hfx_worker/edge_rewrites.py")),
    ("errors.py", include_str!("../../worker/hfx_worker/errors.py")),
    ("generation.py", include_str!("../../worker/hfx_worker/generation.py")),
    ("graph.py", include_str!("../../worker/hfx_worker/graph.py")),
    ("import_memo.py", include_str!("../../worker/hfx_worker/import_memo.py")),
    ("imports.py", include_str!("../../worker/hfx_worker/imports.py")),
    ("lower.py", include_str!("../../worker/hfx_worker/lower.py")),
    ("lowering_shortcuts.py", include_str!("../../worker/hfx_worker/lowering_shortcuts.py")),
    ("messages.py", include_str!("../../worker/hfx_worker/messages.py")),
    ("openvino_ir.py", include_str!("../../worker/hfx_worker/openvino_ir.py")),
    ("opinfo.py", include_str!("../../worker/hfx_worker/opinfo.py")),
    ("precompute.py", include_str!("../../worker/hfx_worker/precompute.py")),
    ("program.py", include_str!("../../worker/hfx_worker/program.py")),
    ("protocol.py", include_str!("../../worker/hfx_worker/protocol.py")),
    ("pytree.py", include_str!("../../worker/hfx_worker/pytree.py")),
    ("quantizers.py", include_str!("../../worker/hfx_worker/quantizers.py")),
    ("resident.py", include_str!("../../worker/hfx_worker/resident.py")),
    ("round_trip.py", include_str!("../../worker/hfx_worker/round_trip.py")),
    ("sandbox.py", include_str!("../../worker/hfx_worker/sandbox.py")),
    ("selftest.py", include_str!("../../worker/hfx_worker/selftest.py")),
    ("server.py", include_str!("../../worker/hfx_worker/server.py")),
    ("sources.py", include_str!("../../worker/hfx_worker/sources.py")),
    ("trace.py", include_str!("../../worker/hfx_worker/trace.py")),
    ("trace_shortcuts.py", include_str!("../../worker/hfx_worker/trace_shortcuts.py")),
    ("verify.py", include_str!("../../worker/hfx_worker/verify.py")),
];

/// What `python -I -c` runs: the verified folder first on `sys.path`, the
/// `PYTHONPATH` entries (which `-I` ignores) last, after the standard library
/// and site-packages (a `json.py` or `torch/` there shadows nothing), the
/// server imported without writing bytecode beside it (the folder must stay
/// exactly as checked), then the request loop. The folder is `sys.argv[1]`.
pub const BOOTSTRAP: &str = "import os, sys\n\
sys.path.insert(0, sys.argv[1])\n\
sys.path.extend(os.path.abspath(p) for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p)\n\
saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True\n\
import hfx_worker.server\n\
sys.dont_write_bytecode = saved\n\
hfx_worker.server.main()\n";

/// The sha256 (hex) of the embedded package: every file's name, length and bytes.
pub fn sha256() -> &'static str {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| {
        let mut hasher = Sha256::new();
        for (name, text) in FILES {
            hasher.update((name.len() as u64).to_le_bytes());
            hasher.update(name.as_bytes());
            hasher.update((text.len() as u64).to_le_bytes());
            hasher.update(text.as_bytes());
        }
        hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
    })
}

/// `<cache>/worker`: `$HFX_CACHE_DIR/worker`, else `$XDG_CACHE_HOME/hfx/worker`, else `~/.cache/hfx/worker`.
pub fn default_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("HFX_CACHE_DIR") {
        return Some(PathBuf::from(dir).join("worker"));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("hfx").join("worker"))
}

/// A verified copy of the package: `root` goes on `sys.path` (it holds `hfx_worker/`).
#[derive(Debug)]
pub struct Unpacked {
    pub root: PathBuf,
    /// `<cache>/worker/memo`, where the worker keeps what it computes once per
    /// installed package (`import_memo.py`); only beside a package in the
    /// trusted cache, under the same rule, and a UTF-8 path (`hello` carries it).
    pub memo_dir: Option<PathBuf>,
    /// A private temp copy, removed on drop (the cache was not trusted).
    temporary: bool,
}

impl Drop for Unpacked {
    fn drop(&mut self) {
        if self.temporary {
            super::interrupt::remove_scratch(&self.root);
        }
    }
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

fn unique(prefix: &str) -> String {
    format!("{prefix}.{}.{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// Removes what an hfx that died mid-way (SIGKILL) left in `dir`: folders
/// named `<prefix>.<pid>.<n>` (`unique`) of this user whose pid is not running.
fn remove_leftovers(dir: &Path, matches: impl Fn(&str) -> bool) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let mut parts = name.rsplitn(3, '.');
        let (Some(n), Some(pid), Some(prefix)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if !matches(prefix)
            || n.parse::<u64>().is_err()
            || pid == std::process::id()
            || super::process::alive(pid)
        {
            continue;
        }
        let path = entry.path();
        if std::fs::symlink_metadata(&path)
            .is_ok_and(|m| m.is_dir() && m.uid() == crate::private::euid())
        {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// The package, verified, in `cache` (`<cache>/<sha256>/`) when that folder can
/// be trusted, else in a private temp folder. `None`: no cache folder.
pub fn unpack(cache: Option<&Path>) -> Result<Unpacked, String> {
    if let Some(cache) = cache {
        match crate::private::trust_dir(cache, "the worker").and_then(|()| unpack_in_cache(cache)) {
            Ok(root) => {
                let memo = cache.join(MEMO);
                // The folder travels in `hello`'s JSON, which holds only UTF-8 paths.
                let checked = match memo.to_str() {
                    Some(_) => crate::private::trust_dir(&memo, "what the worker keeps"),
                    None => {
                        Err("not a UTF-8 path, which the worker protocol cannot carry".to_string())
                    }
                };
                let memo_dir = match checked {
                    Ok(()) => Some(memo),
                    Err(why) => {
                        tracing::warn!(
                            "worker memo folder {}: {why}; the worker keeps nothing",
                            memo.display()
                        );
                        None
                    }
                };
                return Ok(Unpacked { root, memo_dir, temporary: false });
            }
            Err(why) => tracing::warn!(
                "worker package cache {}: {why}; using a private temp folder",
                cache.display()
            ),
        }
    }
    unpack_temporary()
}

fn unpack_in_cache(cache: &Path) -> Result<PathBuf, String> {
    // Temp and set-aside copies start with a dot; packages are named by their hash.
    remove_leftovers(cache, |prefix| prefix.starts_with('.'));
    let root = cache.join(sha256());
    let found = match std::fs::symlink_metadata(&root) {
        Ok(_) => Some(verify(&root)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(Err(format!("{}: {e}", root.display()))),
    };
    match found {
        Some(Ok(())) => return Ok(root),
        Some(Err(why)) => {
            tracing::warn!("worker package {}: {why}; writing it again", root.display());
            set_aside(&root)?;
        }
        None => {}
    }
    let fresh = cache.join(unique(&format!(".{}", sha256())));
    let result = write_package(&fresh).and_then(|()| match std::fs::rename(&fresh, &root) {
        Ok(()) => Ok(()),
        // Another hfx put its copy in place meanwhile: use it if it is intact.
        Err(_) if root.exists() => verify(&root),
        Err(e) => Err(format!("cannot move the package into {}: {e}", root.display())),
    });
    if fresh.exists() {
        let _ = std::fs::remove_dir_all(&fresh);
    }
    result?;
    verify(&root)?;
    Ok(root)
}

/// Moves a copy that failed its check out of the way and removes it.
fn set_aside(root: &Path) -> Result<(), String> {
    let aside = root.with_file_name(unique(".stale"));
    std::fs::rename(root, &aside)
        .map_err(|e| format!("cannot move the damaged {} aside: {e}", root.display()))?;
    // remove_dir_all does not follow symlinks: a planted link only loses itself.
    if std::fs::symlink_metadata(&aside).is_ok_and(|m| m.is_dir()) {
        let _ = std::fs::remove_dir_all(&aside);
    } else {
        let _ = std::fs::remove_file(&aside);
    }
    Ok(())
}

fn unpack_temporary() -> Result<Unpacked, String> {
    remove_leftovers(&std::env::temp_dir(), |prefix| prefix == "hfx-worker");
    let root = std::env::temp_dir().join(unique("hfx-worker"));
    // Created (0700) and registered in one step: a signal removes it too.
    super::interrupt::guarded(|registry| {
        DirBuilder::new()
            .mode(0o700)
            .create(&root)
            .map_err(|e| format!("cannot create {}: {e}", root.display()))?;
        registry.scratch.push(root.clone());
        Ok::<(), String>(())
    })?;
    let unpacked = Unpacked { root, memo_dir: None, temporary: true };
    let inner = unpacked.root.join(PACKAGE);
    write_files(&inner)?;
    verify(&unpacked.root)?;
    Ok(unpacked)
}

/// `root/hfx_worker/*`, `root` created here (0700).
fn write_package(root: &Path) -> Result<(), String> {
    DirBuilder::new()
        .mode(0o700)
        .create(root)
        .map_err(|e| format!("cannot create {}: {e}", root.display()))?;
    write_files(&root.join(PACKAGE))
}

fn write_files(dir: &Path) -> Result<(), String> {
    DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (name, text) in FILES {
        let path = dir.join(name);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o400)
            .open(&path)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Checks the copy at `root` is exactly the embedded package (see the module's doc).
pub fn verify(root: &Path) -> Result<(), String> {
    private_dir(root)?;
    only_entries(root, &[PACKAGE])?;
    let dir = root.join(PACKAGE);
    private_dir(&dir)?;
    let names: Vec<&str> = FILES.iter().map(|(name, _)| *name).collect();
    only_entries(&dir, &names)?;
    for (name, text) in FILES {
        let path = dir.join(name);
        // O_NOFOLLOW: a symlink fails to open; the opened file is the one checked.
        let mut file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let meta = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?;
        if !meta.is_file() {
            return Err(format!("{} is not a regular file", path.display()));
        }
        crate::private::owned_and_private(&meta)
            .map_err(|why| format!("{}: {why}", path.display()))?;
        if meta.len() != text.len() as u64 {
            return Err(format!(
                "{} differs from this hfx's worker ({} bytes, expected {})",
                path.display(),
                meta.len(),
                text.len()
            ));
        }
        let mut bytes = Vec::with_capacity(text.len());
        Read::by_ref(&mut file)
            .take(text.len() as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if bytes != text.as_bytes() {
            return Err(format!("{} differs from this hfx's worker", path.display()));
        }
    }
    Ok(())
}

fn private_dir(dir: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a folder", dir.display()));
    }
    crate::private::owned_and_private(&meta).map_err(|why| format!("{}: {why}", dir.display()))
}

/// `dir` holds exactly `expected` (an extra module could shadow an import).
fn only_entries(dir: &Path, expected: &[&str]) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut found = 0;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = entry.file_name();
        if !expected.iter().any(|e| std::ffi::OsStr::new(e) == name) {
            return Err(format!(
                "{} holds {}, which is not part of this hfx's worker",
                dir.display(),
                name.to_string_lossy()
            ));
        }
        found += 1;
    }
    if found != expected.len() {
        return Err(format!("{} lacks files of this hfx's worker", dir.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o777
    }

    #[test]
    fn the_package_is_unpacked_once_private_and_reused() {
        let cache = tempfile::tempdir().unwrap();
        let dir = cache.path().join("worker");
        let first = unpack(Some(&dir)).unwrap();
        assert_eq!(first.root, dir.join(sha256()));
        assert!(!first.temporary);
        assert_eq!(
            (mode(&dir), mode(&first.root), mode(&first.root.join(PACKAGE))),
            (0o700, 0o700, 0o700)
        );
        for (name, text) in FILES {
            let path = first.root.join(PACKAGE).join(name);
            assert_eq!(std::fs::read_to_string(&path).unwrap(), *text);
            assert_eq!(mode(&path), 0o400, "{name}");
        }
        let inode = std::fs::metadata(first.root.join(PACKAGE).join("server.py")).unwrap().ino();
        let second = unpack(Some(&dir)).unwrap();
        assert_eq!(
            std::fs::metadata(second.root.join(PACKAGE).join("server.py")).unwrap().ino(),
            inode,
            "reused, not rewritten"
        );
        // The worker's memo folder beside it, private.
        assert_eq!(second.memo_dir.as_deref(), Some(dir.join(MEMO).as_path()));
        assert_eq!(mode(&dir.join(MEMO)), 0o700);
        // Nothing but the package and the memo folder is left in the cache (no temp folders).
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    }

    #[test]
    fn a_tampered_or_extended_copy_is_replaced_before_use() {
        let cache = tempfile::tempdir().unwrap();
        let dir = cache.path().join("worker");
        let root = unpack(Some(&dir)).unwrap().root.clone();
        let server = root.join(PACKAGE).join("server.py");
        type Damage<'a> = Box<dyn Fn() + 'a>;
        let damage: Vec<(&str, Damage)> = vec![
            (
                "edited file",
                Box::new(|| {
                    std::fs::set_permissions(&server, std::fs::Permissions::from_mode(0o600))
                        .unwrap();
                    std::fs::write(&server, "import os; os.system('touch escaped')\n").unwrap();
                }),
            ),
            (
                "same size, other bytes",
                Box::new(|| {
                    let mut text = std::fs::read(&server).unwrap();
                    text[0] ^= 1;
                    std::fs::set_permissions(&server, std::fs::Permissions::from_mode(0o600))
                        .unwrap();
                    std::fs::write(&server, text).unwrap();
                }),
            ),
            (
                "module shadowing torch",
                Box::new(|| std::fs::write(root.join("torch.py"), "raise SystemExit").unwrap()),
            ),
            (
                "bytecode",
                Box::new(|| std::fs::create_dir(root.join(PACKAGE).join("__pycache__")).unwrap()),
            ),
            (
                "group-writable file",
                Box::new(|| {
                    std::fs::set_permissions(&server, std::fs::Permissions::from_mode(0o620))
                        .unwrap()
                }),
            ),
            (
                "symlinked file",
                Box::new(|| {
                    let elsewhere = cache.path().join("server.py");
                    std::fs::copy(&server, &elsewhere).unwrap();
                    std::fs::remove_file(&server).unwrap();
                    std::os::unix::fs::symlink(&elsewhere, &server).unwrap();
                }),
            ),
            (
                "missing file",
                Box::new(|| std::fs::remove_file(root.join(PACKAGE).join("sandbox.py")).unwrap()),
            ),
        ];
        for (what, damage) in damage {
            damage();
            assert!(verify(&root).is_err(), "{what}: the damaged copy passed the check");
            let again = unpack(Some(&dir)).unwrap();
            assert_eq!(again.root, root, "{what}");
            verify(&root).unwrap_or_else(|why| panic!("{what}: not repaired: {why}"));
            assert_eq!(
                std::fs::read_dir(&dir).unwrap().count(),
                2,
                "{what}: the damaged copy is gone (the package and the memo folder are left)"
            );
        }
    }

    #[test]
    fn an_untrusted_cache_falls_back_to_a_private_temp_folder_removed_on_drop() {
        let cache = tempfile::tempdir().unwrap();
        let dir = cache.path().join("worker");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let unpacked = unpack(Some(&dir)).unwrap();
        assert!(unpacked.temporary && !unpacked.root.starts_with(&dir), "{:?}", unpacked.root);
        assert_eq!(unpacked.memo_dir, None, "no memo in an untrusted cache");
        assert_eq!(mode(&unpacked.root), 0o700);
        verify(&unpacked.root).unwrap();
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "nothing written to the untrusted folder"
        );
        let root = unpacked.root.clone();
        drop(unpacked);
        assert!(!root.exists(), "the temp copy is removed");
        // No cache folder at all: a temp copy too.
        let unpacked = unpack(None).unwrap();
        assert!(unpacked.temporary);
    }

    #[test]
    fn a_cache_path_the_protocol_cannot_carry_gets_the_package_and_no_memo() {
        use std::os::unix::ffi::OsStrExt;
        let cache = tempfile::tempdir().unwrap();
        let dir = cache.path().join(std::ffi::OsStr::from_bytes(b"worker-\xff"));
        let unpacked = unpack(Some(&dir)).unwrap();
        assert!(!unpacked.temporary && unpacked.root.starts_with(&dir), "{:?}", unpacked.root);
        verify(&unpacked.root).unwrap();
        assert_eq!(unpacked.memo_dir, None);
    }

    #[test]
    fn copies_left_by_a_dead_hfx_are_removed() {
        let cache = tempfile::tempdir().unwrap();
        let dir = cache.path().join("worker");
        std::fs::create_dir_all(&dir).unwrap();
        // pid_max is at most 2^22: this pid never runs.
        let dead =
            [dir.join(format!(".{}.2147483646.0", sha256())), dir.join(".stale.2147483646.3")];
        let live = dir.join(format!(".stale.{}.9", std::os::unix::process::parent_id()));
        let unrelated = dir.join(".notes");
        for d in dead.iter().chain([&live, &unrelated]) {
            std::fs::create_dir(d).unwrap();
        }
        let unpacked = unpack(Some(&dir)).unwrap();
        assert!(
            dead.iter().all(|d| !d.exists())
                && live.exists()
                && unrelated.exists()
                && unpacked.root.exists()
        );
    }

    #[test]
    fn the_hash_covers_every_file() {
        assert_eq!(sha256().len(), 64);
        let names: Vec<_> = FILES.iter().map(|(n, _)| *n).collect();
        let on_disk: std::collections::BTreeSet<String> =
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/worker/hfx_worker"))
                .unwrap()
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".py") || n.ends_with(".json"))
                .collect();
        assert_eq!(
            on_disk,
            names.iter().map(|n| n.to_string()).collect(),
            "every module and data file of host/worker/hfx_worker is embedded"
        );
    }
}
