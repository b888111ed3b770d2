//! Folders and files only this user can change: where hfx keeps what it
//! will run (compiled components, the worker package). A cache another user
//! could write to would let them run code as this one.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;

/// Creates `dir` (0700) if needed and checks that only this user (or root)
/// can change it or what its path leads to; `holds` names what it keeps, for
/// the reason given when it cannot be trusted.
pub fn trust_dir(dir: &Path, holds: &str) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create it: {e}"))?;
    let real = dir.canonicalize().map_err(|e| format!("cannot resolve it: {e}"))?;
    let meta = std::fs::metadata(&real).map_err(|e| e.to_string())?;
    if !meta.is_dir() {
        return Err("not a folder".into());
    }
    owned_and_private(&meta)?;
    for ancestor in real.ancestors().skip(1) {
        let meta =
            std::fs::metadata(ancestor).map_err(|e| format!("{}: {e}", ancestor.display()))?;
        let owner_ok = meta.uid() == 0 || meta.uid() == euid();
        let sticky = meta.mode() & 0o1000 != 0;
        if !owner_ok || (meta.mode() & 0o022 != 0 && !sticky) {
            return Err(format!(
                "{} (above it) can be changed by others (owner uid {}, mode {:o}), who could replace {holds}",
                ancestor.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ));
        }
    }
    Ok(())
}

/// A file or folder only this user can write.
pub fn owned_and_private(meta: &std::fs::Metadata) -> Result<(), String> {
    if meta.uid() != euid() {
        return Err(format!("owned by uid {}, not by this user (uid {})", meta.uid(), euid()));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!("writable by group or others (mode {:o})", meta.mode() & 0o7777));
    }
    Ok(())
}

/// This process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid takes nothing, cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}
