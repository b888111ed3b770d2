//! The worker's OS sandbox: defence in depth for whatever the worker's own
//! policy (`sandbox.py`) misses. Three mechanisms, each set up in the host
//! before the worker starts and applied between `fork` and `exec`:
//!
//! - files (Landlock): reads only below the worker's Python, its package, its
//!   `PYTHONPATH` entries, the system folders an interpreter needs and what
//!   the run names (model folder, input, plugins, caches); writes only to
//!   the worker's scratch folder (its `TMPDIR`), the outputs' folders, its
//!   memo folder and `/dev/null`. TCP bind / connect and signals or abstract
//!   UNIX sockets outside the worker are refused too where the kernel has them.
//! - network (seccomp): `socket` and `socketpair` for any family but
//!   `AF_UNIX` fail with EACCES; `io_uring_setup` (whose ops would open
//!   sockets past the filter) fails with ENOSYS.
//! - processes (seccomp): the worker cannot stop its own `exec` of Python
//!   from here, so it installs a filter refusing `execve` / `execveat`
//!   itself before its first request (`hfx_worker/confine.py`), asked to by
//!   [`NO_EXEC_ENV`]; a worker that cannot install it exits. A run whose
//!   worker must start a program (ExecuTorch's XNNPACK lowering runs
//!   `flatc`) goes without, and Landlock then still lets it execute only
//!   what is installed: the system's folders and Python's, never a file of
//!   the model, the outputs or the scratch folder.
//!
//! Where the kernel lacks a mechanism the worker runs without it, and
//! [`Applied`] says which protection is off (the run warns, `hfx doctor`
//! shows it).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::TraceError;

use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};

/// Above the highest capability any kernel defines (40 on 6.x): dropping one
/// the kernel does not know is `EINVAL`, and skipped.
const CAP_LAST_CAP_MAX: u8 = 63;

/// Set in the worker's environment when it must refuse `execve` from its first request on.
pub const NO_EXEC_ENV: &str = "HFX_WORKER_NO_EXEC";

/// What a sandboxed worker may read and write beyond what every worker needs
/// (its Python, its package, its `PYTHONPATH`, its scratch folder).
#[derive(Debug, Clone, Default)]
pub struct Sandbox {
    /// Folders and files read below (the model folder, the input, plugins, caches).
    pub read: Vec<PathBuf>,
    /// Folders written below (the outputs' folders); also read.
    pub write: Vec<PathBuf>,
    /// Why the worker must start programs after start-up (None: it may not).
    pub runs_programs: Option<String>,
}

/// Whether one protection holds, and by what or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protection {
    On(String),
    /// Off because the kernel lacks the mechanism.
    Off(String),
    /// Off because the run needs what it would refuse (a delegate's lowering starts `flatc`).
    Waived(String),
}

impl Default for Protection {
    fn default() -> Self {
        Protection::Off("no sandbox was asked for".into())
    }
}

impl std::fmt::Display for Protection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Protection::On(by) => write!(f, "on ({by})"),
            Protection::Off(why) => write!(f, "OFF ({why})"),
            Protection::Waived(why) => write!(f, "off for this run ({why})"),
        }
    }
}

/// The protections a worker runs under.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Reads and writes limited to named folders.
    pub files: Protection,
    /// No sockets but UNIX ones.
    pub network: Protection,
    /// No new program after start-up.
    pub exec: Protection,
}

impl Applied {
    /// `files on (Landlock ABI 7), network on (seccomp), ...`: one line.
    pub fn line(&self) -> String {
        format!("files {}, network {}, processes {}", self.files, self.network, self.exec)
    }

    /// The protections the kernel lacks, named (`files`, `network`, `processes`).
    pub fn off(&self) -> Vec<&'static str> {
        [("files", &self.files), ("network", &self.network), ("processes", &self.exec)]
            .into_iter()
            .filter(|(_, p)| matches!(p, Protection::Off(_)))
            .map(|(name, _)| name)
            .collect()
    }
}

/// What this kernel offers the sandbox.
#[derive(Debug, Clone, Copy)]
pub struct Support {
    /// Landlock's ABI version, None where Landlock is absent or disabled.
    pub landlock_abi: Option<i64>,
    /// seccomp filters that can return an errno.
    pub seccomp: bool,
}

/// Asked of the kernel once per process.
pub fn support() -> Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    *SUPPORT.get_or_init(|| {
        const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
        const SECCOMP_GET_ACTION_AVAIL: libc::c_ulong = 2;
        // SAFETY: with a null attribute, size 0 and the VERSION flag the call only returns the ABI version.
        let abi = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        };
        let action: u32 = SECCOMP_RET_ERRNO;
        // SAFETY: the kernel reads one u32 from a valid pointer.
        let seccomp = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                SECCOMP_GET_ACTION_AVAIL,
                0 as libc::c_ulong,
                &action as *const u32,
            )
        } == 0;
        Support { landlock_abi: (abi > 0).then_some(abi as i64), seccomp }
    })
}

/// `hfx doctor`'s line: what a sandboxed worker would get on this machine.
pub fn doctor_line() -> String {
    let support = support();
    let files = match support.landlock_abi {
        Some(abi) => format!("files on (Landlock ABI {abi})"),
        None => "files OFF (no Landlock in this kernel: Linux 5.13+ with landlock in the `lsm=` boot list)".into(),
    };
    let seccomp =
        if support.seccomp { "on (seccomp)" } else { "OFF (no seccomp filters in this kernel)" };
    format!("{files}, network {seccomp}, processes {seccomp}")
}

/// The sandbox, ready to apply in the worker's `pre_exec`: everything that
/// opens files or allocates is done here, before the fork.
pub struct Prepared {
    ruleset: Option<RulesetCreated>,
    filter: Option<Vec<libc::sock_filter>>,
    no_exec: bool,
    pub applied: Applied,
}

/// The folders every Python interpreter reads from outside its prefixes.
const SYSTEM_READ: &[&str] =
    &["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/proc", "/sys"];
/// Of `/etc`, what the dynamic loader, time and user look-ups read (not its secrets: `shadow`, keys).
const ETC_READ: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/os-release",
    "/etc/lsb-release",
    "/etc/mime.types",
    "/etc/alternatives",
];
/// Of `/dev`, the devices read (not disks); a GPU's nodes where they exist.
const DEV_READ: &[&str] = &[
    "/dev/zero",
    "/dev/urandom",
    "/dev/random",
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia0",
    "/dev/dxg",
];

impl Prepared {
    /// Prepares the sandbox of a worker running `python` (its prefixes are
    /// readable), from `package` and `pythonpath`, writing `scratch`, `memo`
    /// and what `sandbox` names.
    pub fn new(
        sandbox: &Sandbox,
        python: &str,
        package: &Path,
        pythonpath: &[PathBuf],
        scratch: &Path,
        memo: Option<&Path>,
    ) -> Result<Prepared, TraceError> {
        let support = support();
        let mut applied = Applied::default();
        let ruleset = match support.landlock_abi {
            None => {
                applied.files = Protection::Off("no Landlock in this kernel".into());
                None
            }
            Some(abi) => {
                let mut installed: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
                installed.extend(python_prefixes(python)?);
                let mut read: Vec<PathBuf> =
                    ETC_READ.iter().chain(DEV_READ).map(PathBuf::from).collect();
                read.push(package.to_path_buf());
                read.extend(pythonpath.iter().cloned());
                read.extend(sandbox.read.iter().cloned());
                let mut write: Vec<PathBuf> = vec![scratch.to_path_buf()];
                write.extend(memo.map(Path::to_path_buf));
                write.extend(sandbox.write.iter().cloned());
                let ruleset = landlock_ruleset(&installed, &read, &write)
                    .map_err(|e| TraceError::Sandbox(format!("its Landlock rules: {e}")))?;
                applied.files = Protection::On(format!("Landlock ABI {abi}"));
                Some(ruleset)
            }
        };
        let filter = if support.seccomp {
            applied.network = Protection::On("seccomp".into());
            applied.exec = match &sandbox.runs_programs {
                None => Protection::On("seccomp, from start-up".into()),
                Some(why) => Protection::Waived(why.clone()),
            };
            Some(network_filter())
        } else {
            applied.network = Protection::Off("no seccomp filters in this kernel".into());
            applied.exec = Protection::Off("no seccomp filters in this kernel".into());
            None
        };
        let no_exec = filter.is_some() && sandbox.runs_programs.is_none();
        Ok(Prepared { ruleset, filter, no_exec, applied })
    }

    /// Applies the sandbox to the calling process: between `fork` and `exec`,
    /// so only async-signal-safe calls, no allocation. Once.
    pub fn apply(&mut self) -> std::io::Result<()> {
        // A worker of a root hfx keeps no capability: with the bounding set
        // empty, the exec of Python grants none (no raw devices, no chroot, no
        // bpf). Not root: there is nothing to drop, and the drop is refused.
        // SAFETY: prctl takes plain integers.
        unsafe {
            if libc::geteuid() == 0 {
                for capability in 0..=libc::c_ulong::from(CAP_LAST_CAP_MAX) {
                    if libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0) != 0
                        && *libc::__errno_location() != libc::EINVAL
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
            }
        }
        if let Some(ruleset) = self.ruleset.take() {
            ruleset
                .restrict_self()
                .map_err(|_| std::io::Error::other("Landlock refused the worker's rules"))?;
        }
        if let Some(filter) = &self.filter {
            let program = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            // SAFETY: prctl reads the program, which outlives the call; no-new-privs lets an unprivileged process install it.
            unsafe {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &program as *const libc::sock_fprog,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }

    /// Whether the worker must refuse `execve` from its first request on.
    pub fn no_exec(&self) -> bool {
        self.no_exec
    }
}

/// Rules: `installed` read and executed, `read` read, `write` read and
/// written, nothing of the last two executed; `/dev/null` read and written.
fn landlock_ruleset(
    installed: &[PathBuf],
    read: &[PathBuf],
    write: &[PathBuf],
) -> Result<RulesetCreated, landlock::RulesetError> {
    // The newest ABI this crate knows, kept where the kernel has it (best effort).
    let abi = ABI::V7;
    let all = AccessFs::from_all(abi);
    let read_access = AccessFs::from_read(abi) & !AccessFs::Execute;
    // No device nodes made where it writes (root could make one for a disk).
    let write_access = all & !AccessFs::Execute & !AccessFs::MakeChar & !AccessFs::MakeBlock;
    let null = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate;
    Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)?
        .handle_access(AccessNet::from_all(abi))?
        .scope(Scope::from_all(abi))?
        .create()?
        .add_rules(path_beneath_rules(installed, AccessFs::from_read(abi)))?
        .add_rules(path_beneath_rules(read, read_access))?
        .add_rules(path_beneath_rules(write, write_access))?
        .add_rules(path_beneath_rules(["/dev/null"], null))
}

/// The folders of `python`'s installation, as it reports them: prefixes and
/// `sys.path` (site-packages, `.pth` entries), links resolved. Asked once
/// per interpreter path, isolated (`-I`: nothing of the current folder runs).
fn python_prefixes(python: &str) -> Result<Vec<PathBuf>, TraceError> {
    static ASKED: std::sync::Mutex<Vec<(String, Vec<PathBuf>)>> = std::sync::Mutex::new(Vec::new());
    if let Some((_, found)) = ASKED.lock().expect("prefix cache").iter().find(|(p, _)| p == python)
    {
        return Ok(found.clone());
    }
    const SCRIPT: &str = "import os, sys\n\
for p in [sys.executable, sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path]:\n    \
if p: print(os.path.realpath(p))\n";
    let out = std::process::Command::new(python)
        .args(["-I", "-c", SCRIPT])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| TraceError::Start { python: python.into(), source })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("no error output");
        return Err(TraceError::Sandbox(format!(
            "{python} failed ({}) naming its folders: {last}",
            out.status
        )));
    }
    let mut found: Vec<PathBuf> =
        String::from_utf8_lossy(&out.stdout).lines().map(PathBuf::from).collect();
    // The interpreter as named (a venv's link, `VENV/bin/python`): the venv itself.
    let named = Path::new(python);
    if let Some(venv) = named
        .parent()
        .and_then(Path::parent)
        .filter(|v| named.is_absolute() && v.join("pyvenv.cfg").is_file())
    {
        found.push(venv.to_path_buf());
    }
    found.sort();
    found.dedup();
    ASKED.lock().expect("prefix cache").push((python.to_string(), found.clone()));
    Ok(found)
}

// Classic BPF over `struct seccomp_data` (nr: u32 at 0, arch: u32 at 4, args at 16).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;
/// x86_64's x32 system calls carry this bit: a second table the filter must not miss.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

fn statement(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// `socket` / `socketpair` of another family than AF_UNIX: EACCES;
/// `io_uring_setup`: ENOSYS; another architecture's calls: EPERM.
fn network_filter() -> Vec<libc::sock_filter> {
    let errno = |e: i32| SECCOMP_RET_ERRNO | (e as u32 & 0xffff);
    vec![
        statement(BPF_LD_W_ABS, 4),
        jump(BPF_JEQ_K, AUDIT_ARCH, 1, 0),
        statement(BPF_RET_K, errno(libc::EPERM)),
        statement(BPF_LD_W_ABS, 0),
        jump(BPF_JGE_K, X32_SYSCALL_BIT, 0, 1),
        statement(BPF_RET_K, errno(libc::EPERM)),
        jump(BPF_JEQ_K, libc::SYS_io_uring_setup as u32, 0, 1),
        statement(BPF_RET_K, errno(libc::ENOSYS)),
        jump(BPF_JEQ_K, libc::SYS_socket as u32, 1, 0),
        jump(BPF_JEQ_K, libc::SYS_socketpair as u32, 0, 4),
        // The family: the low 32 bits of the first argument (little-endian).
        statement(BPF_LD_W_ABS, 16),
        jump(BPF_JEQ_K, libc::AF_UNIX as u32, 0, 1),
        statement(BPF_RET_K, SECCOMP_RET_ALLOW),
        statement(BPF_RET_K, errno(libc::EACCES)),
        statement(BPF_RET_K, SECCOMP_RET_ALLOW),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_filter_refuses_inet_sockets_and_io_uring_and_keeps_unix_sockets() {
        if !support().seccomp {
            return;
        }
        let filter = network_filter();
        let program = libc::sock_fprog {
            len: filter.len() as u16,
            filter: filter.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: the child makes only async-signal-safe calls and leaves with _exit; the parent reaps it.
        unsafe {
            let pid = libc::fork();
            if pid == 0 {
                let installed = libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
                    && libc::prctl(
                        libc::PR_SET_SECCOMP,
                        libc::SECCOMP_MODE_FILTER,
                        &program as *const libc::sock_fprog,
                    ) == 0;
                let refused = |result: libc::c_long, errno: i32| {
                    result == -1 && *libc::__errno_location() == errno
                };
                let inet = refused(
                    libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) as libc::c_long,
                    libc::EACCES,
                );
                let inet6 = refused(
                    libc::socket(libc::AF_INET6, libc::SOCK_DGRAM, 0) as libc::c_long,
                    libc::EACCES,
                );
                let mut pair = [0; 2];
                let inet_pair = refused(
                    libc::socketpair(libc::AF_INET, libc::SOCK_STREAM, 0, pair.as_mut_ptr())
                        as libc::c_long,
                    libc::EACCES,
                );
                let uring = refused(
                    libc::syscall(libc::SYS_io_uring_setup, 1u32, std::ptr::null_mut::<u8>()),
                    libc::ENOSYS,
                );
                let unix = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) >= 0;
                let unix_pair =
                    libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, pair.as_mut_ptr()) == 0;
                let code = [installed, inet, inet6, inet_pair, uring, unix, unix_pair]
                    .iter()
                    .position(|ok| !ok)
                    .map_or(0, |i| 10 + i as i32);
                libc::_exit(code);
            }
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
            // 10 + the index of the first check that failed: installed, inet, inet6, inet pair, io_uring, unix, unix pair.
            assert_eq!(libc::WEXITSTATUS(status), 0, "status {status}");
        }
    }

    #[test]
    fn the_protections_off_are_named() {
        let applied = Applied {
            files: Protection::On("Landlock ABI 7".into()),
            network: Protection::Off("no seccomp filters in this kernel".into()),
            exec: Protection::Waived(
                "--backend executorch.xnnpack: ExecuTorch's delegate lowering runs `flatc`".into(),
            ),
        };
        assert_eq!(applied.off(), ["network"], "a waiver the run needs is not the kernel's lack");
        assert!(
            applied.line().starts_with("files on (Landlock ABI 7), network OFF (no seccomp"),
            "{}",
            applied.line()
        );
        assert!(applied.line().ends_with("processes off for this run (--backend executorch.xnnpack: ExecuTorch's delegate lowering runs `flatc`)"));
    }
}
