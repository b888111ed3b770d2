//! The worker's memory limit, enforced by mechanism.
//!
//! Where the machine lets hfx create a memory cgroup below its own (cgroup v2:
//! `memory.max`, or a v1 memory hierarchy: `memory.limit_in_bytes`), the worker
//! is moved into a fresh child cgroup and the kernel enforces the limit; the
//! cgroup's `oom_kill` count says it did. Otherwise a sampler thread sums the
//! resident memory of the worker's process tree (its process group and its
//! descendants, from `/proc`) five times a second and kills the tree past the
//! limit. `RLIMIT_AS` would not do: torch reserves large virtual ranges it
//! never touches. The sampler also runs beside a cgroup, measuring only, so a
//! SIGKILL near the limit reads as running out of memory.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub const GIB: u64 = 1 << 30;

/// How the limit is enforced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum MemoryMechanism {
    /// A cgroup where the machine allows one, else the sampler.
    #[default]
    Auto,
    /// A cgroup, or an error.
    Cgroup,
    /// The host samples the worker tree's resident memory.
    Sampler,
}

/// The default limit: three quarters of the machine's memory (8 GiB when
/// `/proc/meminfo` cannot be read).
pub fn default_limit() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|text| mem_total(&text));
    total.map_or(8 * GIB, |t| t / 4 * 3)
}

/// `MemTotal` in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `17179869184` → `16`, `1610612736` → `1.5`: a limit as the user gives it.
pub fn gib_text(bytes: u64) -> String {
    let gib = bytes as f64 / GIB as f64;
    if bytes.is_multiple_of(GIB) {
        format!("{}", bytes / GIB)
    } else if (gib * 10.0).fract() == 0.0 {
        format!("{gib:.1}")
    } else {
        format!("{gib:.2}")
    }
}

// ── cgroups ──

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// The memory controller's folder of this process's own cgroup.
#[derive(Debug, PartialEq)]
struct Controller {
    version: Version,
    dir: PathBuf,
}

/// Undoes mountinfo's octal escapes (`\040` is a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where the memory controller of this process's cgroup is, from
/// `/proc/self/cgroup` and `/proc/self/mountinfo`: cgroup v2 when its
/// hierarchy offers `memory`, else a v1 hierarchy with `memory`.
fn find_controller(
    proc_cgroup: &str,
    mountinfo: &str,
    read: &dyn Fn(&Path) -> Option<String>,
) -> Option<Controller> {
    // (fstype, mount root, mount point, super options) of each cgroup mount.
    let mounts: Vec<(String, String, PathBuf, String)> = mountinfo
        .lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let fields: Vec<&str> = before.split(' ').collect();
            let after: Vec<&str> = after.split(' ').collect();
            let (root, point) = (fields.get(3)?, fields.get(4)?);
            Some((
                after.first()?.to_string(),
                unescape(root),
                PathBuf::from(unescape(point)),
                after.get(2).unwrap_or(&"").to_string(),
            ))
        })
        .filter(|(fstype, ..)| fstype == "cgroup" || fstype == "cgroup2")
        .collect();
    // The folder of `path` (a cgroup path) in a mount of `root` at `point`.
    let folder = |root: &str, point: &Path, path: &str| -> Option<PathBuf> {
        let relative = path.strip_prefix(root.trim_end_matches('/'))?;
        if !(relative.is_empty() || relative.starts_with('/')) {
            return None;
        }
        Some(point.join(relative.trim_start_matches('/')))
    };
    let mut v1 = None;
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            for (_, root, point, _) in mounts.iter().filter(|m| m.0 == "cgroup2") {
                if let Some(dir) = folder(root, point, path) {
                    let offered = read(&dir.join("cgroup.controllers")).unwrap_or_default();
                    if offered.split_whitespace().any(|c| c == "memory") {
                        return Some(Controller { version: Version::V2, dir });
                    }
                }
            }
        } else if controllers.split(',').any(|c| c == "memory") {
            let mount = mounts.iter().find(|(fstype, _, _, options)| {
                fstype == "cgroup" && options.split(',').any(|o| o == "memory")
            });
            v1 = v1.or_else(|| {
                mount
                    .and_then(|(_, root, point, _)| folder(root, point, path))
                    .map(|dir| Controller { version: Version::V1, dir })
            });
        }
    }
    v1
}

/// `oom_kill N` in a cgroup's `memory.events` (v2) or `memory.oom_control` (v1).
fn oom_kill_count(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// A child cgroup holding the worker, removed on drop.
pub(crate) struct Cgroup {
    version: Version,
    pub(crate) dir: PathBuf,
}

fn write(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    // Control files exist in a cgroup folder; never create one.
    std::fs::OpenOptions::new().write(true).open(path)?.write_all(text.as_bytes())
}

impl Cgroup {
    /// A child of this process's cgroup named `name`, limited to `limit` bytes;
    /// an error says why the machine does not allow one.
    pub(crate) fn create(name: &str, limit: u64) -> Result<Cgroup, String> {
        let read = |p: &Path| std::fs::read_to_string(p).ok();
        let proc_cgroup = read(Path::new("/proc/self/cgroup")).ok_or("no /proc/self/cgroup")?;
        let mountinfo = read(Path::new("/proc/self/mountinfo")).ok_or("no /proc/self/mountinfo")?;
        let controller = find_controller(&proc_cgroup, &mountinfo, &read)
            .ok_or("no memory cgroup controller for this process")?;
        let Controller { version, dir: parent } = controller;
        if version == Version::V2 {
            let enabled = read(&parent.join("cgroup.subtree_control")).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == "memory") {
                // Refused (EBUSY) where this cgroup holds processes itself and is not the root.
                write(&parent.join("cgroup.subtree_control"), "+memory").map_err(|e| {
                    format!("cannot enable the memory controller in {}: {e}", parent.display())
                })?;
            }
        }
        remove_stale_cgroups(&parent);
        let dir = parent.join(name);
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let cgroup = Cgroup { version, dir };
        let set = |file: &str, value: &str| {
            write(&cgroup.dir.join(file), value)
                .map_err(|e| format!("cannot set {}/{file}: {e}", cgroup.dir.display()))
        };
        match version {
            Version::V2 => {
                set("memory.max", &limit.to_string())?;
                // No swapping past the limit, and an OOM kill takes the whole tree.
                let _ = set("memory.swap.max", "0");
                let _ = set("memory.oom.group", "1");
            }
            Version::V1 => {
                set("memory.limit_in_bytes", &limit.to_string())?;
                // Present with swap accounting only; must not be below the limit above.
                let _ = set("memory.memsw.limit_in_bytes", &limit.to_string());
            }
        }
        Ok(cgroup)
    }

    /// Moves a process (and its future children) into the cgroup.
    pub(crate) fn add(&self, pid: u32) -> Result<(), String> {
        write(&self.dir.join("cgroup.procs"), &pid.to_string())
            .map_err(|e| format!("cannot move the worker into {}: {e}", self.dir.display()))
    }

    /// How many processes the kernel killed in this cgroup for memory.
    pub(crate) fn oom_kills(&self) -> u64 {
        let file = match self.version {
            Version::V2 => "memory.events",
            Version::V1 => "memory.oom_control",
        };
        std::fs::read_to_string(self.dir.join(file)).map_or(0, |t| oom_kill_count(&t))
    }

    /// Kills every process in the cgroup (also those that left the worker's process group).
    pub(crate) fn kill_all(&self) {
        kill_cgroup(&self.dir);
    }
}

/// SIGKILL to every process of the cgroup folder `dir`.
pub(crate) fn kill_cgroup(dir: &Path) {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Removes the worker cgroups in `parent` of an hfx that is no longer running,
/// killing what its worker left in them, as that hfx would have on exit.
fn remove_stale_cgroups(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix("hfx-worker-"))
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok());
        if pid.is_some_and(|pid| pid != std::process::id() && !super::process::alive(pid)) {
            // Retried: the kernel may report a cgroup busy for a moment after
            // its last process has exited (seen with cgroup v1 on Linux 6.18).
            remove_cgroup(&entry.path());
        }
    }
}

/// Removes a cgroup folder once its processes are gone (killed ones take a
/// moment); gives up, with a warning, after 5 s.
pub(crate) fn remove_cgroup(dir: &Path) {
    for _ in 0..100 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => {
                kill_cgroup(dir);
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    tracing::warn!("could not remove the worker's cgroup {}", dir.display());
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        remove_cgroup(&self.dir);
    }
}

// ── The sampler ──

/// One process from `/proc/PID/stat`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Process {
    pid: i32,
    ppid: i32,
    pgrp: i32,
    /// Resident pages.
    rss: u64,
}

/// Parses `/proc/PID/stat` (the command name may hold spaces and parentheses).
fn parse_stat(text: &str) -> Option<Process> {
    let (head, tail) = text.rsplit_once(')')?;
    let pid = head.split_once('(')?.0.trim().parse().ok()?;
    // After the name: state(3) ppid(4) pgrp(5) ... rss(24).
    let fields: Vec<&str> = tail.split_whitespace().collect();
    Some(Process {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        rss: fields.get(21)?.parse().ok()?,
    })
}

fn all_processes() -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return vec![] };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|text| parse_stat(&text))
        .collect()
}

/// The worker's tree: its process group, and every descendant of `root`
/// (also one that left the group).
fn tree(processes: &[Process], root: i32) -> Vec<Process> {
    let mut members: Vec<Process> =
        processes.iter().filter(|p| p.pgrp == root || p.pid == root).copied().collect();
    let mut i = 0;
    while i < members.len() {
        let parent = members[i].pid;
        for p in processes.iter().filter(|p| p.ppid == parent) {
            if !members.iter().any(|m| m.pid == p.pid) {
                members.push(*p);
            }
        }
        i += 1;
    }
    members
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as u64
    } else {
        4096
    }
}

/// Resident bytes of the tree rooted at `root`, and its pids.
pub(crate) fn tree_rss(root: i32) -> (u64, Vec<i32>) {
    let members = tree(&all_processes(), root);
    (
        members.iter().map(|p| p.rss).sum::<u64>() * page_size(),
        members.iter().map(|p| p.pid).collect(),
    )
}

#[derive(Default)]
struct SamplerState {
    stop: AtomicBool,
    /// The sampler killed the tree for memory.
    fired: AtomicBool,
    /// The tree's resident bytes at the last sample.
    last: AtomicU64,
}

/// The thread sampling the worker tree's resident memory; stops on drop.
pub(crate) struct Sampler {
    state: Arc<SamplerState>,
}

/// How often the sampler looks.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);

impl Sampler {
    /// Samples the tree of `root` (a process group leader); past `limit` bytes
    /// it kills the tree when `enforce`, and only records otherwise.
    pub(crate) fn start(root: i32, limit: u64, enforce: bool) -> Sampler {
        let state = Arc::new(SamplerState::default());
        let shared = state.clone();
        std::thread::spawn(move || {
            while !shared.stop.load(Ordering::Relaxed) {
                let (rss, pids) = tree_rss(root);
                shared.last.store(rss, Ordering::Relaxed);
                if enforce && rss > limit {
                    shared.fired.store(true, Ordering::Relaxed);
                    // SAFETY: kill(2)/killpg(2) have no memory-safety preconditions.
                    unsafe { libc::killpg(root, libc::SIGKILL) };
                    for pid in pids {
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                    }
                }
                std::thread::sleep(SAMPLE_EVERY);
            }
        });
        Sampler { state }
    }

    pub(crate) fn fired(&self) -> bool {
        self.state.fired.load(Ordering::Relaxed)
    }

    pub(crate) fn last(&self) -> u64 {
        self.state.last.load(Ordering::Relaxed)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
    }
}

/// The worker's box: the limit, and what enforces it.
pub(crate) struct MemoryBox {
    pub(crate) limit: u64,
    pub(crate) cgroup: Option<Cgroup>,
    pub(crate) sampler: Sampler,
}

impl MemoryBox {
    /// Whether the worker (which exited with `signal`, if by one) ran out of
    /// memory: the cgroup's OOM killer struck, the sampler fired, or it was
    /// SIGKILLed with its tree's memory near the limit.
    pub(crate) fn out_of_memory(&self, signal: Option<i32>) -> bool {
        self.cgroup.as_ref().is_some_and(|c| c.oom_kills() > 0)
            || self.sampler.fired()
            || (signal == Some(libc::SIGKILL) && self.sampler.last() >= self.limit / 10 * 9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_and_limits_read_as_given() {
        assert_eq!(
            mem_total("MemTotal:       24683656 kB\nMemFree: 1 kB\n"),
            Some(24683656 * 1024)
        );
        assert_eq!(mem_total("nothing"), None);
        assert!(default_limit() > 0);
        assert_eq!(gib_text(16 * GIB), "16");
        assert_eq!(gib_text(3 * GIB / 2), "1.5");
        assert_eq!(gib_text(GIB / 4), "0.25");
    }

    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn the_memory_controller_is_found_in_v2_when_offered_else_in_v1() {
        let cgroup = "4:memory:/process_api/abc\n5:devices:/\n0::/user.slice/x.scope\n";
        let none = |_: &Path| None;
        let v1 = find_controller(cgroup, MOUNTINFO, &none).unwrap();
        assert_eq!(
            v1,
            Controller {
                version: Version::V1,
                dir: "/sys/fs/cgroup/memory/process_api/abc".into()
            }
        );
        let offers_memory = |p: &Path| {
            (p == Path::new("/sys/fs/cgroup/unified/user.slice/x.scope/cgroup.controllers"))
                .then(|| "cpu memory pids\n".to_string())
        };
        let v2 = find_controller(cgroup, MOUNTINFO, &offers_memory).unwrap();
        assert_eq!(
            v2,
            Controller {
                version: Version::V2,
                dir: "/sys/fs/cgroup/unified/user.slice/x.scope".into()
            }
        );
        // A pure v2 machine (one `0::` line), the hierarchy mounted with spaces escaped.
        let pure = "50 1 0:26 / /sys/fs/my\\040cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let offers = |_: &Path| Some("memory io".to_string());
        let found = find_controller("0::/\n", pure, &offers).unwrap();
        assert_eq!(found, Controller { version: Version::V2, dir: "/sys/fs/my cgroup".into() });
        // No memory anywhere.
        assert_eq!(find_controller("0::/\n", pure, &none), None);
        assert_eq!(find_controller("5:devices:/\n", MOUNTINFO, &none), None);
    }

    #[test]
    fn a_mount_of_a_subtree_maps_cgroup_paths_below_its_root() {
        let info = "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        let found =
            find_controller("4:memory:/docker/abc/inner\n", info, &|_: &Path| None).unwrap();
        assert_eq!(found.dir, PathBuf::from("/sys/fs/cgroup/memory/inner"));
        // A path outside the mounted subtree is not reachable.
        assert_eq!(find_controller("4:memory:/docker/abcdef\n", info, &|_: &Path| None), None);
    }

    #[test]
    fn oom_kills_are_counted_from_events_and_oom_control() {
        assert_eq!(
            oom_kill_count("low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 1\n"),
            1
        );
        assert_eq!(oom_kill_count("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), 3);
        assert_eq!(oom_kill_count(""), 0);
    }

    #[test]
    fn stat_lines_parse_with_odd_command_names() {
        let stat = "4242 (a (b) c) S 17 4242 4242 0 -1 4194304 100 0 0 0 1 2 0 0 20 0 1 0 123 1000000 2560 184467 0 0";
        assert_eq!(parse_stat(stat), Some(Process { pid: 4242, ppid: 17, pgrp: 4242, rss: 2560 }));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn the_tree_is_the_group_and_every_descendant() {
        let p = |pid, ppid, pgrp| Process { pid, ppid, pgrp, rss: 1 };
        // 10 leads group 10; 11 is its child in the group; 12 left the group
        // (setsid) and has a child 13; 20 is unrelated.
        let all =
            [p(1, 0, 1), p(10, 1, 10), p(11, 10, 10), p(12, 11, 12), p(13, 12, 12), p(20, 1, 20)];
        let mut pids: Vec<i32> = tree(&all, 10).iter().map(|p| p.pid).collect();
        pids.sort();
        assert_eq!(pids, [10, 11, 12, 13]);
    }

    #[test]
    fn the_sampler_kills_a_tree_past_its_limit() {
        use std::os::unix::process::CommandExt;
        // A shell in its own group that starts a child: 1 byte is always exceeded.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 1000 & sleep 1000"])
            .process_group(0)
            .spawn()
            .unwrap();
        let root = child.id() as i32;
        let sampler = Sampler::start(root, 1, true);
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert!(sampler.fired() && sampler.last() > 1);
        // The background `sleep` went with it (a zombie at most, until init reaps it).
        for _ in 0..100 {
            let alive = tree(&all_processes(), root).iter().any(|p| {
                std::fs::read_to_string(format!("/proc/{}/stat", p.pid)).is_ok_and(|s| {
                    !s.rsplit_once(')').is_some_and(|(_, t)| t.trim_start().starts_with('Z'))
                })
            });
            if !alive {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("a process of the sampled tree survived");
    }

    #[test]
    fn a_measuring_sampler_never_kills() {
        let mut child = std::process::Command::new("sleep").arg("0.6").spawn().unwrap();
        let sampler = Sampler::start(child.id() as i32, 1, false);
        assert!(child.wait().unwrap().success());
        assert!(!sampler.fired());
    }
}
