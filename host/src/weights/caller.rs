//! The memory of hfx's caller. `hfx.export`'s Python process serves the
//! worker protocol itself ([`crate::trace::Worker::attach`]); each CPU
//! storage it indexes as a side weight it first moves into shared memory
//! (torch's `share_memory_()`: the same storage, its tensors and views
//! unchanged) and names in the index by that file's descriptor number in
//! its own process. The host maps those files read-only: an artifact's
//! weights are read from the caller's tensors, never copied to a file first.
//!
//! Only the process that started hfx, and only once `Worker::attach` has
//! said it serves the protocol: an index naming a descriptor in any other
//! run is refused.

use std::fs::File;
use std::sync::OnceLock;

/// The caller's process id, set once this process's worker is its parent.
static CALLER: OnceLock<u32> = OnceLock::new();

/// Records that this process's worker is its parent, `pid`.
pub fn serves_worker(pid: u32) {
    let _ = CALLER.set(pid);
}

/// The caller's shared-memory file behind its descriptor `fd`, opened
/// read-only; an error says why not, for the index's own message.
pub fn open(fd: i32) -> Result<File, String> {
    let Some(&pid) = CALLER.get() else {
        return Err(format!(
            "the caller's descriptor {fd}, and this export has no caller (only `hfx.export` \
             serves weights from its process's memory)"
        ));
    };
    // SAFETY: getppid(2) has no preconditions.
    if fd < 0 || unsafe { libc::getppid() } as u32 != pid {
        return Err(format!("the caller's descriptor {fd}, of a process that is not hfx's parent"));
    }
    let path = format!("/proc/{pid}/fd/{fd}");
    let file = File::open(&path).map_err(|e| format!("the caller's descriptor {fd}: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("the caller's descriptor {fd}: {e}"))?;
    if !meta.file_type().is_file() {
        return Err(format!(
            "the caller's descriptor {fd}, which is not a shared-memory file (a {:?})",
            meta.file_type()
        ));
    }
    Ok(file)
}
