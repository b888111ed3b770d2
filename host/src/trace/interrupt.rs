//! hfx's own SIGINT / SIGTERM: the worker's process groups are killed, its
//! cgroups and hfx's scratch folders removed, and hfx exits 130 / 143; a
//! second signal exits at once.
//!
//! What has to go is registered here while it exists (`guarded`). The signal
//! handler only writes the signal's number to a pipe; a thread waiting on the
//! pipe does the cleanup outside signal context, holding the registry's lock
//! until the process exits, so nothing is registered (a worker started, a
//! scratch folder created) after the cleanup took its list.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard};

/// What hfx must not leave behind.
#[derive(Default)]
pub struct Registry {
    /// Process groups of running workers.
    pub(crate) groups: Vec<i32>,
    /// Cgroup folders of running workers.
    pub(crate) cgroups: Vec<PathBuf>,
    /// Scratch folders.
    pub(crate) scratch: Vec<PathBuf>,
}

static REGISTRY: Mutex<Registry> =
    Mutex::new(Registry { groups: Vec::new(), cgroups: Vec::new(), scratch: Vec::new() });
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static PIPE: AtomicI32 = AtomicI32::new(-1);

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `f` with the registry locked: creating something and registering it
/// is one step for the signal thread.
pub fn guarded<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    f(&mut registry())
}

/// Creates the scratch folder `dir` (and its parents) and registers it.
pub fn create_scratch(dir: &Path) -> std::io::Result<()> {
    guarded(|r| {
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // Not `create_dir_all`: a folder of that name already in use is an error.
        std::fs::create_dir(dir)?;
        r.scratch.push(dir.to_path_buf());
        Ok(())
    })
}

/// Removes the scratch folder `dir` and forgets it.
pub fn remove_scratch(dir: &Path) {
    guarded(|r| {
        let _ = std::fs::remove_dir_all(dir);
        r.scratch.retain(|d| d != dir);
    })
}

extern "C" fn on_signal(signal: libc::c_int) {
    if INTERRUPTED.swap(true, Ordering::SeqCst) {
        // The second one: out at once. SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(128 + signal) };
    }
    let byte = signal as u8;
    // SAFETY: write(2) is async-signal-safe; the buffer is one valid byte.
    unsafe { libc::write(PIPE.load(Ordering::SeqCst), (&byte as *const u8).cast(), 1) };
}

/// Installs the SIGINT / SIGTERM handlers (once per process; `hfx` calls it
/// first thing, library users who want it call it themselves).
pub fn install() -> std::io::Result<()> {
    if PIPE.load(Ordering::SeqCst) >= 0 {
        return Ok(());
    }
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    PIPE.store(fds[1], Ordering::SeqCst);
    let read_end = fds[0];
    std::thread::Builder::new().name("hfx-signals".into()).spawn(move || {
        let mut byte = 0u8;
        loop {
            // SAFETY: reads one byte into `byte`.
            let n = unsafe { libc::read(read_end, (&mut byte as *mut u8).cast(), 1) };
            if n == 1 {
                break;
            }
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        let signal = i32::from(byte);
        let registry = registry();
        clean_up(&registry);
        let name = if signal == libc::SIGINT { "SIGINT" } else { "SIGTERM" };
        let mut done = Vec::new();
        if !registry.groups.is_empty() {
            done.push("stopped the trace worker");
        }
        if !registry.scratch.is_empty() {
            done.push("removed the scratch folders");
        }
        let done = if done.is_empty() { String::new() } else { format!(": {}", done.join(", ")) };
        eprintln!("error: interrupted ({name}){done}");
        // The lock is held until the end: nothing new is registered (or left) after the cleanup.
        std::process::exit(128 + signal);
    })?;
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction with a handler that only touches atomics and
        // async-signal-safe calls; the mask is emptied before use.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

fn clean_up(registry: &Registry) {
    for &group in &registry.groups {
        // SAFETY: killpg(2) has no memory-safety preconditions.
        unsafe { libc::killpg(group, libc::SIGKILL) };
    }
    for dir in &registry.cgroups {
        super::memory::remove_cgroup(dir);
    }
    for dir in &registry.scratch {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Removes the scratch folders (`.hfx-<what>-<pid>`) in `dir` that belong to
/// an hfx that is no longer running; returns them.
pub fn remove_stale_scratch(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return vec![] };
    let mut removed = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(scratch_pid) else { continue };
        if pid != std::process::id()
            && !super::process::alive(pid)
            && entry.file_type().is_ok_and(|t| t.is_dir())
        {
            let path = entry.path();
            if std::fs::remove_dir_all(&path).is_ok() {
                removed.push(path);
            }
        }
    }
    removed
}

/// `.hfx-trace-1234` (or a second one at once, `.hfx-trace-1234.1`) → 1234.
fn scratch_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(".hfx-")?;
    let (what, pid) = rest.rsplit_once('-')?;
    let pid = match pid.split_once('.') {
        Some((pid, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => pid,
        Some(_) => return None,
        None => pid,
    };
    if what.is_empty()
        || !what.bytes().all(|b| b.is_ascii_lowercase())
        || pid.is_empty()
        || !pid.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    pid.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_names_carry_their_pid() {
        assert_eq!(scratch_pid(".hfx-trace-1234"), Some(1234));
        assert_eq!(scratch_pid(".hfx-folder-7"), Some(7));
        assert_eq!(scratch_pid(".hfx-trace-1234.2"), Some(1234));
        for other in [
            ".hfx-trace-",
            ".hfx--12",
            ".hfx-trace-12x",
            "hfx-trace-12",
            ".hfx-Trace-12",
            ".o.pt2.12.tmp",
            ".hfx-trace-12.",
            ".hfx-trace-12.x",
        ] {
            assert_eq!(scratch_pid(other), None, "{other}");
        }
    }

    #[test]
    fn stale_scratch_of_dead_pids_is_removed_and_live_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        // pid_max is at most 2^22: this pid never runs.
        let dead = dir.path().join(".hfx-trace-2147483646");
        let live = dir.path().join(format!(".hfx-verify-{}", std::process::id()));
        let parent_pid = std::os::unix::process::parent_id();
        let other_live = dir.path().join(format!(".hfx-trace-{parent_pid}"));
        let unrelated = dir.path().join(".hfx-notes");
        for d in [&dead, &live, &other_live, &unrelated] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("model.pt2"), "x").unwrap();
        }
        assert_eq!(remove_stale_scratch(dir.path()), std::slice::from_ref(&dead));
        assert!(!dead.exists() && live.exists() && other_live.exists() && unrelated.exists());
    }
}
