//! The trace stage: the model captured by torch.export, in a worker.
//!
//! Only Python can run PyTorch model code, so the host delegates the capture
//! to a worker it starts, feeds and supervises: the package
//! `host/worker/hfx_worker/`, embedded in the binary and unpacked, verified,
//! into the cache (`package`). Typed JSON lines over pipes (`protocol`), one
//! response per request, a deadline per request. A crash, a Python exception
//! or a hang becomes a `TraceError` with the Python traceback or the tail of
//! stderr attached.
//!
//! The worker runs in a box: its own process group, killed as a whole on a
//! deadline, an error, drop or hfx's own SIGINT / SIGTERM (`interrupt`), a
//! memory limit on its process tree (`memory`), and lines read with a bound
//! (`protocol`). Its Python starts isolated (`-I`: neither the current
//! folder nor `PYTHON*` variables nor the user's site-packages), and where
//! the run asks for it an OS sandbox limits its files, network and processes
//! (`confine`).

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

pub use confine::{Applied as SandboxApplied, Sandbox};
pub use memory::MemoryMechanism;
use memory::{Cgroup, MemoryBox, Sampler};
use protocol::{
    Decompose, Hello, HelloReply, Incoming, Message, Method, PatchAnswer, PatchCall, PatchSpec,
    Progress, SourceParams, TraceParams, TraceReply, WireProgram, PROTOCOL,
};
/// How much of the worker's stderr is kept for error reports.
const STDERR_TAIL: usize = 16 << 10;

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot start the trace worker with `{python}`: {source}")]
    Start { python: String, source: std::io::Error },
    #[error("the trace worker exited ({status}) during `{method}`; its last output:\n{stderr}")]
    Crashed { method: String, status: String, stderr: String },
    #[error("the trace worker did not answer `{method}` within {seconds} s (stopped); its last output:\n{stderr}")]
    Timeout { method: String, seconds: u64, stderr: String },
    /// A Python exception; its traceback follows on the next lines, unless
    /// the worker sent none (an artifact that fails in its runtime: one line).
    #[error("{}", python_error_text(.method, .kind, .message, .traceback))]
    Python { method: String, kind: String, message: String, traceback: String },
    /// A failure the user's input caused, as the worker classified it: its
    /// one line, the traceback kept for `-v` and the report ([`TraceError::detail`]).
    #[error("{line}")]
    User { method: String, kind: protocol::UserErrorKind, line: String, traceback: String },
    #[error("trace worker protocol: {0}")]
    Protocol(String),
    #[error("the trace worker's Python `{python}` has no {missing}: run `cargo xtask setup-python` in the hfx checkout, or give a Python that has them with `--python PATH` or `HFX_PYTHON`")]
    MissingPackages { python: String, missing: String },
    #[error("cannot unpack the trace worker: {0}")]
    Package(String),
    #[error("the trace worker ran out of memory (limit {limit} GiB); try a smaller config (--set ...) or raise --worker-memory-gib")]
    OutOfMemory { limit: String },
    #[error("cannot limit the trace worker's memory with a cgroup: {0}")]
    NoCgroup(String),
    #[error("cannot sandbox the trace worker: {0}")]
    Sandbox(String),
    #[error("--model-caller {fds}: {why} (the descriptors are the pipes `hfx.export` hands hfx; run exports of a live model from Python)")]
    Caller { fds: String, why: String },
    #[error(transparent)]
    Plugin(crate::plugins::PluginError),
}

impl TraceError {
    /// What the error's one line leaves out: the traceback of a failure the
    /// worker classified as the user's (printed with `-v`, kept in the report).
    pub fn detail(&self) -> Option<&str> {
        match self {
            TraceError::User { traceback, .. } if !traceback.is_empty() => Some(traceback),
            _ => None,
        }
    }
}

/// What every request of the worker imports.
const REQUIRED_PACKAGES: [&str; 2] = ["torch", "transformers"];

/// What the host does with a worker's progress line.
pub type ProgressCallback = Box<dyn FnMut(&Progress)>;

/// What the host does with text a `generate` request produced.
pub type GeneratedCallback = Box<dyn FnMut(&str)>;

/// What the host does with a trace's weights plan.
pub type WeightsPlanCallback = Box<dyn FnMut(Vec<protocol::PlannedWeight>)>;

/// How the worker is started.
#[derive(Debug, Clone, Default)]
pub struct WorkerOptions {
    /// More environment variables for the worker (`PYTHONPATH`).
    pub env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    /// The limit on the memory of the worker's process tree, in bytes (None: no limit).
    pub memory_limit: Option<u64>,
    /// What enforces the limit.
    pub memory_mechanism: MemoryMechanism,
    /// Where the worker package is unpacked (None: `package::default_dir`).
    pub package_dir: Option<PathBuf>,
    /// The OS sandbox and what it lets the worker read and write (None: none).
    pub sandbox: Option<Sandbox>,
    /// The worker is the process that started hfx, reached through these
    /// pipes (`--model-caller`): nothing is started, boxed or sandboxed.
    pub caller: Option<CallerPipes>,
    /// The worker imports torch only when a request needs it, not right
    /// after `hello` ([`protocol::Hello::warm_up`]): it is started for
    /// requests that do not (converting to OpenVINO).
    pub cold: bool,
}

/// The pipes to a caller that serves the worker protocol itself (`hfx.export`):
/// hfx reads the worker's lines from `read` and writes requests to `write`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerPipes {
    pub read: RawFd,
    pub write: RawFd,
}

impl CallerPipes {
    /// `READ,WRITE`: two descriptors, each an open pipe of this process.
    pub fn parse(text: &str) -> Result<CallerPipes, TraceError> {
        let refused = |why: &str| TraceError::Caller { fds: text.into(), why: why.into() };
        let (read, write) = text.split_once(',').ok_or_else(|| refused("expected READ,WRITE"))?;
        let fd = |s: &str| {
            s.trim()
                .parse::<RawFd>()
                .ok()
                .filter(|fd| *fd > 2)
                .ok_or_else(|| refused("each descriptor is a number above 2"))
        };
        let pipes = CallerPipes { read: fd(read)?, write: fd(write)? };
        if pipes.read == pipes.write {
            return Err(refused("the two descriptors are one"));
        }
        for fd in [pipes.read, pipes.write] {
            // SAFETY: fstat(2) writes only into the buffer it is given.
            let mut stat: libc::stat = unsafe { std::mem::zeroed() };
            if unsafe { libc::fstat(fd, &mut stat) } != 0 {
                return Err(refused(&format!("descriptor {fd} is not open")));
            }
            if stat.st_mode & libc::S_IFMT != libc::S_IFIFO {
                return Err(refused(&format!("descriptor {fd} is not a pipe")));
            }
        }
        Ok(pipes)
    }

    /// Owned copies of the two descriptors (close-on-exec: no process hfx
    /// starts inherits them).
    fn take(self) -> Result<(File, File), TraceError> {
        let dup = |fd: RawFd| {
            // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor this process then owns alone.
            let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
            if new < 0 {
                return Err(TraceError::Caller {
                    fds: format!("{},{}", self.read, self.write),
                    why: format!(
                        "cannot take descriptor {fd}: {}",
                        std::io::Error::last_os_error()
                    ),
                });
            }
            // SAFETY: `new` is open and owned by nothing else.
            Ok(File::from(unsafe { OwnedFd::from_raw_fd(new) }))
        };
        let pair = (dup(self.read)?, dup(self.write)?);
        // SAFETY: the originals are this process's and no longer used.
        unsafe {
            libc::close(self.read);
            libc::close(self.write);
        }
        Ok(pair)
    }
}

/// How often a waiting request checks that the worker is still alive (a
/// process it started may hold its stdout open after it died).
const POLL: Duration = Duration::from_millis(100);

pub struct Worker {
    /// The worker's process, or none where the worker is hfx's caller.
    child: Option<Child>,
    /// The worker's process group (its pid): everything it starts is killed with it.
    group: Option<i32>,
    /// Killed and reaped.
    stopped: bool,
    memory: Option<MemoryBox>,
    stdin: File,
    responses: Receiver<Incoming>,
    stderr: Arc<Mutex<String>>,
    next_id: u64,
    /// The package the worker runs (a temp copy is removed after the worker);
    /// a caller runs its own.
    _package: Option<package::Unpacked>,
    /// A sandboxed worker's own scratch folder (its `TMPDIR`), removed after it.
    scratch: Option<tempfile::TempDir>,
    /// The protections of the OS sandbox the worker runs in.
    pub sandbox: SandboxApplied,
    /// What `hello` answered: protocol, python, upstream versions.
    pub hello: HelloReply,
    /// Called with each progress line the worker sends during a request.
    pub on_progress: Option<ProgressCallback>,
    /// Called with a trace's weights plan (`TraceParams::plan_weights`).
    pub on_weights_plan: Option<WeightsPlanCallback>,
    /// Called with each piece of text a `generate` request produced.
    pub on_generated: Option<GeneratedCallback>,
}

impl Worker {
    /// A temp folder for files the worker reads and writes: inside its own
    /// scratch folder where it is sandboxed (the one place it may write), else
    /// in the system's temp folder. Removed on drop.
    pub fn temp_dir(&self, prefix: &str) -> std::io::Result<tempfile::TempDir> {
        let mut builder = tempfile::Builder::new();
        builder.prefix(prefix);
        match &self.scratch {
            Some(scratch) => builder.tempdir_in(scratch.path()),
            None => builder.tempdir(),
        }
    }

    /// Starts the worker under `python` and checks it speaks this host's protocol.
    /// The worker dies with the thread that started it (`PR_SET_PDEATHSIG`):
    /// start it on a thread that outlives its use.
    pub fn start(python: &str, deadline: Duration) -> Result<Worker, TraceError> {
        Self::start_with_env(python, deadline, &[])
    }

    /// `start`, with more environment variables for the worker (`PYTHONPATH`).
    pub fn start_with_env(
        python: &str,
        deadline: Duration,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Result<Worker, TraceError> {
        let env = env.iter().map(|(k, v)| (k.into(), v.into())).collect();
        Self::start_with(python, deadline, &WorkerOptions { env, ..Default::default() })
    }

    /// `start`, with `options`: environment and memory limit.
    pub fn start_with(
        python: &str,
        deadline: Duration,
        options: &WorkerOptions,
    ) -> Result<Worker, TraceError> {
        if let Some(caller) = options.caller {
            return Self::attach(caller, deadline);
        }
        let cache = options.package_dir.clone().or_else(package::default_dir);
        let unpacked = package::unpack(cache.as_deref()).map_err(TraceError::Package)?;
        let mut command = Command::new(python);
        command
            .args(["-I", "-u", "-c", package::BOOTSTRAP])
            .arg(&unpacked.root)
            .envs(options.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let (mut confinement, scratch) = match &options.sandbox {
            None => (None, None),
            Some(sandbox) => {
                let scratch =
                    tempfile::Builder::new().prefix("hfx-worker-").tempdir().map_err(|e| {
                        TraceError::Sandbox(format!(
                            "cannot create its scratch folder in {}: {e}",
                            std::env::temp_dir().display()
                        ))
                    })?;
                let pythonpath = worker_pythonpath(&options.env);
                let prepared = confine::Prepared::new(
                    sandbox,
                    python,
                    &unpacked.root,
                    &pythonpath,
                    scratch.path(),
                    unpacked.memo_dir.as_deref(),
                )?;
                // What the worker's libraries write goes to its scratch folder, the one place it may write.
                command
                    .env("TMPDIR", scratch.path())
                    .env("HF_MODULES_CACHE", scratch.path().join("modules"));
                if prepared.no_exec() {
                    command.env(confine::NO_EXEC_ENV, "1");
                }
                (Some(prepared), Some(scratch))
            }
        };
        let applied = confinement.as_ref().map(|c| c.applied.clone()).unwrap_or_default();
        // Should hfx itself die without cleaning up (SIGKILL, the OOM killer), the worker goes too.
        let host = std::process::id() as libc::pid_t;
        // SAFETY: prctl and getppid are async-signal-safe; the sandbox was prepared before the fork and allocates nothing.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                    || libc::getppid() != host
                {
                    return Err(std::io::Error::other("hfx exited while starting the worker"));
                }
                // Only its three pipes cross into the worker: any other descriptor hfx was
                // handed (`9</secret` in a shell) would pass by every path rule. Marked
                // close-on-exec rather than closed, so the spawn's own error pipe still works.
                const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
                if libc::syscall(
                    libc::SYS_close_range,
                    3 as libc::c_uint,
                    libc::c_uint::MAX,
                    CLOSE_RANGE_CLOEXEC,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                match confinement.as_mut() {
                    Some(confinement) => confinement.apply(),
                    None => Ok(()),
                }
            });
        }
        // Started and registered in one step: a SIGINT now kills it too.
        let (mut child, memory) = interrupt::guarded(|registry| {
            let mut child = command
                .spawn()
                .map_err(|source| TraceError::Start { python: python.into(), source })?;
            let group = child.id() as i32;
            registry.groups.push(group);
            match options
                .memory_limit
                .map(|limit| memory_box(group, limit, options.memory_mechanism))
                .transpose()
            {
                Ok(memory) => {
                    registry.cgroups.extend(
                        memory.as_ref().and_then(|m| m.cgroup.as_ref()).map(|c| c.dir.clone()),
                    );
                    Ok((child, memory))
                }
                Err(e) => {
                    // SAFETY: killpg(2) has no memory-safety preconditions.
                    unsafe { libc::killpg(group, libc::SIGKILL) };
                    let _ = child.wait();
                    registry.groups.retain(|&g| g != group);
                    Err(e)
                }
            }
        })?;
        let group = child.id() as i32;
        let stdin = File::from(OwnedFd::from(child.stdin.take().expect("piped")));
        let stdout = child.stdout.take().expect("piped");
        let stderr_pipe = child.stderr.take().expect("piped");
        let memo_dir = unpacked.memo_dir.clone();
        let worker = Worker::connected(
            Some(child),
            Some(group),
            memory,
            stdin,
            stdout,
            Some(stderr_pipe),
            Some(unpacked),
            scratch,
            applied,
        );
        worker.greet(python, memo_dir, !options.cold, deadline)
    }

    /// The worker that is hfx's caller, serving the protocol on `pipes`
    /// (`hfx.export`): the process and the model are the caller's, so hfx
    /// neither starts, boxes nor sandboxes it (docs/security.md).
    pub fn attach(pipes: CallerPipes, deadline: Duration) -> Result<Worker, TraceError> {
        let (read, write) = pipes.take()?;
        // SAFETY: getppid(2) has no preconditions.
        crate::weights::caller::serves_worker(unsafe { libc::getppid() } as u32);
        let worker = Worker::connected(
            None,
            None,
            None,
            write,
            read,
            None,
            None,
            None,
            SandboxApplied::default(),
        );
        worker.greet("the calling Python process", None, false, deadline)
    }

    /// Whether the worker is hfx's caller (`attach`).
    pub fn is_caller(&self) -> bool {
        self.child.is_none()
    }

    /// A worker over its pipes, its output read on threads of its own; not greeted yet.
    #[allow(clippy::too_many_arguments)]
    fn connected(
        child: Option<Child>,
        group: Option<i32>,
        memory: Option<MemoryBox>,
        stdin: File,
        stdout: impl Read + Send + 'static,
        stderr_pipe: Option<std::process::ChildStderr>,
        package: Option<package::Unpacked>,
        scratch: Option<tempfile::TempDir>,
        sandbox: SandboxApplied,
    ) -> Worker {
        let (tx, responses) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            // Ends at the end of the stream, a read error or a line the host refuses.
            while let Ok(Some(incoming)) =
                protocol::read_line_bounded(&mut reader, protocol::MAX_LINE)
            {
                let refused = !matches!(incoming, Incoming::Line(_));
                if tx.send(incoming).is_err() || refused {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        if let Some(mut stderr_pipe) = stderr_pipe {
            std::thread::spawn(move || {
                let mut buffer = [0u8; 4096];
                while let Ok(n) = stderr_pipe.read(&mut buffer) {
                    if n == 0 {
                        break;
                    }
                    let mut kept = sink.lock().expect("stderr lock");
                    kept.push_str(&String::from_utf8_lossy(&buffer[..n]));
                    if kept.len() > STDERR_TAIL {
                        let cut = kept.len() - STDERR_TAIL;
                        let cut = (cut..kept.len())
                            .find(|&i| kept.is_char_boundary(i))
                            .unwrap_or(kept.len());
                        kept.drain(..cut);
                    }
                }
            });
        }
        let placeholder =
            HelloReply { protocol: 0, python: String::new(), versions: Default::default() };
        Worker {
            child,
            group,
            stopped: false,
            memory,
            stdin,
            responses,
            stderr,
            next_id: 0,
            _package: package,
            scratch,
            sandbox,
            hello: placeholder,
            on_progress: None,
            on_weights_plan: None,
            on_generated: None,
        }
    }

    /// `hello`: both ends check they speak one protocol, and the worker's
    /// Python has what every request needs.
    fn greet(
        mut self,
        python: &str,
        memo_dir: Option<PathBuf>,
        warm_up: bool,
        deadline: Duration,
    ) -> Result<Worker, TraceError> {
        let hello = Hello { protocol: PROTOCOL, memo_dir, warm_up };
        // Both ends check the version: the worker refuses another host's, the host another worker's.
        let result = match self.exchange(Hello::NAME, &hello, deadline, &mut no_patches) {
            Err(TraceError::Python { message, .. }) => {
                self.stop();
                return Err(TraceError::Protocol(format!("the worker refused `hello`: {message}")));
            }
            other => other?,
        };
        match result.get("protocol").and_then(Value::as_u64) {
            Some(PROTOCOL) => {}
            other => {
                self.stop();
                let spoken =
                    other.map_or_else(|| "no version".to_string(), |v| format!("protocol {v}"));
                return Err(TraceError::Protocol(format!(
                    "the worker speaks {spoken}, this hfx speaks protocol {PROTOCOL}: the worker package is not this hfx's"
                )));
            }
        }
        self.hello = protocol::reply(Hello::NAME, result).inspect_err(|_| self.stop())?;
        // Said before any request needs them, in one line (not a traceback's last).
        let missing: Vec<&str> = REQUIRED_PACKAGES
            .iter()
            .copied()
            .filter(|p| !self.hello.versions.contains_key(*p))
            .collect();
        if !missing.is_empty() {
            self.stop();
            return Err(TraceError::MissingPackages {
                python: python.to_string(),
                missing: missing.join(", "),
            });
        }
        Ok(self)
    }

    /// Upstream versions the worker's Python has installed.
    pub fn versions(&self) -> crate::plugins::Versions {
        self.hello.versions.clone()
    }

    /// One request; waits at most `deadline` for its typed reply.
    pub fn request<M: Method>(
        &mut self,
        params: &M,
        deadline: Duration,
    ) -> Result<M::Reply, TraceError> {
        self.request_with(params, deadline, &mut no_patches)
    }

    /// One request during which the worker may ask the host to answer patched
    /// calls (`patch_call` lines); `on_patch` answers each with a program.
    pub fn request_with<M: Method>(
        &mut self,
        params: &M,
        deadline: Duration,
        on_patch: &mut dyn FnMut(&PatchCall) -> Result<WireProgram, String>,
    ) -> Result<M::Reply, TraceError> {
        let result = self.exchange(M::NAME, params, deadline, on_patch)?;
        // A reply of another shape: the worker is not the one this host speaks with.
        protocol::reply(M::NAME, result).inspect_err(|_| self.stop())
    }

    /// Sends one request and waits for its response, answering patch calls and
    /// showing progress meanwhile; the untyped result.
    fn exchange(
        &mut self,
        method: &str,
        params: &impl Serialize,
        deadline: Duration,
        on_patch: &mut dyn FnMut(&PatchCall) -> Result<WireProgram, String>,
    ) -> Result<Value, TraceError> {
        #[derive(Serialize)]
        struct Request<'a, P> {
            id: u64,
            method: &'a str,
            params: &'a P,
        }
        self.next_id += 1;
        let request = serde_json::to_string(&Request { id: self.next_id, method, params })
            .map_err(|e| {
                TraceError::Protocol(format!("cannot write the `{method}` request: {e}"))
            })?;
        if writeln!(self.stdin, "{request}").and_then(|()| self.stdin.flush()).is_err() {
            return Err(self.crashed(method));
        }
        let end = Instant::now() + deadline;
        let (id, outcome) = loop {
            let now = Instant::now();
            if now >= end {
                self.stop();
                return Err(TraceError::Timeout {
                    method: method.into(),
                    seconds: deadline.as_secs(),
                    stderr: self.stderr_tail(),
                });
            }
            let incoming = match self.responses.recv_timeout((end - now).min(POLL)) {
                Ok(incoming) => incoming,
                Err(RecvTimeoutError::Timeout) => {
                    // Dead, while something it started may hold its stdout open.
                    if self.child.as_mut().is_some_and(|c| !matches!(c.try_wait(), Ok(None))) {
                        return Err(self.crashed(method));
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return Err(self.crashed(method)),
            };
            let line = match incoming {
                Incoming::Line(line) => line,
                Incoming::TooLong(limit) => {
                    self.stop();
                    return Err(TraceError::Protocol(format!(
                        "a line from the worker is longer than {} MiB (the limit); the worker was stopped",
                        limit >> 20
                    )));
                }
                Incoming::NotUtf8 => {
                    self.stop();
                    return Err(TraceError::Protocol(
                        "a line from the worker is not UTF-8; the worker was stopped".into(),
                    ));
                }
            };
            let message = match protocol::parse_message(&line) {
                Ok(message) => message,
                Err(e) => {
                    self.stop();
                    return Err(e);
                }
            };
            match message {
                Message::Progress(progress) => {
                    if let Some(show) = self.on_progress.as_mut() {
                        show(&progress);
                    }
                }
                Message::Generated(generated) => {
                    if let Some(show) = self.on_generated.as_mut() {
                        show(&generated.text);
                    }
                }
                Message::WeightsPlan(plan) => {
                    if let Some(take) = self.on_weights_plan.as_mut() {
                        take(plan);
                    }
                }
                Message::PatchCall(call) => {
                    let answer = match on_patch(&call) {
                        Ok(program) => PatchAnswer::Program(program),
                        Err(error) => PatchAnswer::Error(error),
                    };
                    let line = match serde_json::to_string(&answer) {
                        Ok(line) => line,
                        Err(e) => {
                            self.stop();
                            return Err(TraceError::Protocol(format!(
                                "cannot write the answer to a patch call: {e}"
                            )));
                        }
                    };
                    if writeln!(self.stdin, "{line}").and_then(|()| self.stdin.flush()).is_err() {
                        return Err(self.crashed(method));
                    }
                }
                Message::Response { id, outcome } => break (id, outcome),
            }
        };
        if id != self.next_id {
            self.stop();
            return Err(TraceError::Protocol(format!(
                "a response to request {id} while waiting for request {}",
                self.next_id
            )));
        }
        outcome.map_err(|e| match e.user {
            Some(user) => TraceError::User {
                method: method.into(),
                kind: user.kind,
                line: user.line,
                traceback: e.traceback,
            },
            None => TraceError::Python {
                method: method.into(),
                kind: e.kind,
                message: e.message,
                traceback: e.traceback,
            },
        })
    }

    /// Kills the worker's process group (and cgroup) and reaps the worker; once.
    /// Kills the worker's processes without waiting for them: their memory
    /// is freed as they die, and dropping the worker reaps them.
    pub fn kill(&mut self) {
        let Some(group) = self.group else { return };
        // SAFETY: killpg(2) has no memory-safety preconditions.
        unsafe { libc::killpg(group, libc::SIGKILL) };
        if let Some(cgroup) = self.memory.as_ref().and_then(|m| m.cgroup.as_ref()) {
            cgroup.kill_all();
        }
    }

    fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.kill();
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.stopped = true;
    }

    fn crashed(&mut self, method: &str) -> TraceError {
        let Some(child) = self.child.as_mut() else {
            self.stopped = true;
            return TraceError::Crashed {
                method: method.into(),
                status: "the calling Python process closed the pipe".into(),
                stderr: String::new(),
            };
        };
        // Its own exit status, if it exits by itself in a moment; then the group goes with it.
        for _ in 0..50 {
            if !matches!(child.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop();
        let status = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
        if let Some(memory) = &self.memory {
            if memory.out_of_memory(status.and_then(|s| s.signal())) {
                return TraceError::OutOfMemory { limit: memory::gib_text(memory.limit) };
            }
        }
        // The stderr reader may still be draining: give it a moment.
        std::thread::sleep(Duration::from_millis(100));
        let status =
            status.map_or_else(|| "killed after closing its output".to_string(), |s| s.to_string());
        TraceError::Crashed { method: method.into(), status, stderr: self.stderr_tail() }
    }

    fn stderr_tail(&self) -> String {
        let text = self.stderr.lock().expect("stderr lock").clone();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

/// The patch answer of a request that asked for no patches.
fn no_patches(_: &PatchCall) -> Result<WireProgram, String> {
    Err("no patches were requested".into())
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop();
        let cgroup = self.memory.take().and_then(|m| m.cgroup);
        let dir = cgroup.as_ref().map(|c| c.dir.clone());
        // Removes the cgroup folder.
        drop(cgroup);
        interrupt::guarded(|registry| {
            registry.groups.retain(|&g| Some(g) != self.group);
            registry.cgroups.retain(|c| Some(c) != dir.as_ref());
        });
    }
}

/// The box for the worker `group` (its leader's pid): a cgroup unless
/// `mechanism` says sample, or the machine does not allow one.
fn memory_box(group: i32, limit: u64, mechanism: MemoryMechanism) -> Result<MemoryBox, TraceError> {
    static COUNT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let cgroup = match mechanism {
        MemoryMechanism::Sampler => None,
        MemoryMechanism::Auto | MemoryMechanism::Cgroup => {
            let name = format!(
                "hfx-worker-{}-{}",
                std::process::id(),
                COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            match Cgroup::create(&name, limit).and_then(|c| c.add(group as u32).map(|()| c)) {
                Ok(cgroup) => Some(cgroup),
                Err(why) if mechanism == MemoryMechanism::Auto => {
                    tracing::debug!("the worker's memory limit is sampled: no cgroup ({why})");
                    None
                }
                Err(why) => return Err(TraceError::NoCgroup(why)),
            }
        }
    };
    tracing::debug!(
        "worker memory limit {} GiB by {}",
        memory::gib_text(limit),
        if cgroup.is_some() { "cgroup" } else { "sampling" }
    );
    // Beside a cgroup the sampler only measures.
    let sampler = Sampler::start(group, limit, cgroup.is_none());
    Ok(MemoryBox { limit, cgroup, sampler })
}

/// Where the model comes from.
#[derive(Debug, Clone)]
pub enum ModelSource {
    /// A tiny (or any) random model from an architecture name and config overrides.
    Architecture { name: String, overrides: Vec<(String, String)> },
    /// A local Hugging Face model folder (config.json + weights), or a Hub
    /// model's snapshot in the local cache; its own modeling code (`auto_map`)
    /// is loaded only with `trust_remote_code`; `layers`: only its first N
    /// layers (`--verify-layers`: a truncated config, the same checkpoint).
    Directory { path: PathBuf, trust_remote_code: bool, layers: Option<u32> },
    /// `python:module:function` returning `(model, inputs)`.
    Function(String),
    /// A Python-level program and its inputs: a patch plugin's self-test case.
    Program {
        program: serde_json::Value,
        inputs: std::collections::BTreeMap<String, protocol::CaseValue>,
    },
    /// A generation component (`prefill`, `decode`) of the model the same
    /// worker captured (`capture_generation`).
    Captured { component: String },
    /// The model the worker's process holds: the Python process that started
    /// hfx (`hfx.export`, `--model-caller`), which is the worker.
    Caller,
}

impl std::fmt::Display for ModelSource {
    /// As the flags that name it (`--model llama --set hidden_size=64`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelSource::Architecture { name, overrides } => {
                write!(f, "--model {name}")?;
                if !overrides.is_empty() {
                    let set: Vec<String> =
                        overrides.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    write!(f, " --set {}", set.join(","))?;
                }
                Ok(())
            }
            ModelSource::Directory { path, trust_remote_code, layers } => {
                write!(
                    f,
                    "--model-dir {}{}",
                    path.display(),
                    if *trust_remote_code { " --trust-remote-code" } else { "" }
                )?;
                match layers {
                    Some(n) => write!(f, " (its first {n} layers)"),
                    None => Ok(()),
                }
            }
            ModelSource::Function(spec) => write!(f, "--model-fn {spec}"),
            ModelSource::Program { .. } => write!(f, "a self-test case's program"),
            ModelSource::Captured { component } => {
                write!(f, "the captured `{component}` component")
            }
            ModelSource::Caller => write!(f, "the caller's model"),
        }
    }
}

/// What to trace and how.
#[derive(Debug, Clone)]
pub struct TraceRequest {
    pub source: ModelSource,
    pub task: Option<String>,
    pub dynamic: bool,
    /// `--dynamic-shapes`: each named axis in its range, every other axis fixed.
    pub dynamic_shapes: Vec<shapes::AxisRange>,
    /// Sizes of the generated inputs ([`shapes::SampleSizes`]).
    pub batch: u32,
    pub sequence: u32,
    /// `run_decompositions()` after the trace (`--decompose`).
    pub decompose: bool,
    /// The ops the backend's translation and FX node fix plugins declare: when
    /// set, an op outside them that torch's default table decomposes is
    /// decomposed after the trace (and those ops stay whole).
    pub handled: Option<Vec<String>>,
    /// Backend preparation: where the model runs and in which dtype.
    pub device: String,
    pub dtype: String,
    /// Backend preparation: the dtype the model's weights are rounded to
    /// before it runs in `dtype` (16-bit weights in float32 activations, as
    /// OpenVINO's `--dtype bfloat16` exports them); None: they are in `dtype`.
    pub weights_dtype: Option<String>,
    /// Backend preparation: how a mixture-of-experts model runs its experts
    /// (transformers' `set_experts_implementation`), where the backend has no
    /// kernel for the model's own; None keeps it.
    pub experts: Option<String>,
    /// Backend preparation: the eager model quantized by torchao before the
    /// trace (`--quantize` on ExecuTorch).
    pub quantize: Option<protocol::EagerQuantize>,
    /// An export folder being written: the worker saves the model's configs there.
    pub folder: Option<PathBuf>,
    /// Where the traced program's weights go: into the `.pt2`, or beside it
    /// for the host to map and write into the artifact (and for a model
    /// folder, left where its checkpoint holds them).
    pub weights: protocol::Weights,
    /// Whether the worker writes the eager reference: a streamed model's
    /// weights are read only for it.
    pub reference: bool,
    /// Export for generation (`--generation`): the components a `generate`
    /// call is made of, each traced and exported as its own program.
    pub generation: Option<Generation>,
    /// Streamed weights: the worker says where these weights' bytes are
    /// before torch.export runs ([`Worker::on_weights_plan`]).
    pub plan_weights: Option<protocol::PlannedWeights>,
}

/// How a generative model is split and checked (`--generation`).
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// `decode` takes several tokens at once (its sequence axis stays symbolic).
    pub multi_token_decode: bool,
    /// A static cache of this many positions, else the model's own (growing) cache.
    pub max_cache_len: Option<u32>,
    /// Greedy tokens the generation check compares (`--verify`).
    pub steps: u32,
    /// An ONNX Runtime GenAI package is written too (`--genai`).
    pub genai: bool,
}

impl TraceRequest {
    /// A request with static shapes at the default sample sizes, cpu,
    /// float32, no decomposition (`hfx run` asks for dynamic shapes unless
    /// `--static`).
    pub fn new(source: ModelSource) -> Self {
        let sample = shapes::SampleSizes::default();
        TraceRequest {
            source,
            task: None,
            dynamic: false,
            dynamic_shapes: vec![],
            batch: sample.batch,
            sequence: sample.sequence,
            decompose: false,
            handled: None,
            device: "cpu".into(),
            dtype: "float32".into(),
            weights_dtype: None,
            experts: None,
            quantize: None,
            folder: None,
            weights: protocol::Weights::InArchive,
            reference: true,
            generation: None,
            plan_weights: None,
        }
    }

    /// The `capture_generation` request for this model (a model the worker
    /// builds: an architecture, a folder or a model function).
    pub fn capture_params(
        &self,
        generation: &Generation,
    ) -> Result<protocol::CaptureGeneration, String> {
        if matches!(self.source, ModelSource::Program { .. } | ModelSource::Captured { .. }) {
            return Err(format!("--generation: {} is not a model generate can run", self.source));
        }
        Ok(protocol::CaptureGeneration {
            source: self.source_params(),
            task: self.task.clone(),
            batch: self.batch,
            sequence: self.sequence,
            device: self.device.clone(),
            dtype: self.dtype.clone(),
            weights_dtype: self.weights_dtype.clone(),
            experts: self.experts.clone(),
            quantize: self.quantize.clone(),
            multi_token_decode: generation.multi_token_decode,
            max_cache_len: generation.max_cache_len,
            folder: self.folder.clone(),
        })
    }

    fn source_params(&self) -> SourceParams {
        match &self.source {
            ModelSource::Architecture { name, overrides } => SourceParams::Architecture {
                name: name.clone(),
                overrides: overrides.iter().cloned().collect(),
            },
            ModelSource::Directory { path, trust_remote_code, layers } => SourceParams::Directory {
                path: path.clone(),
                trust_remote_code: *trust_remote_code,
                layers: *layers,
            },
            ModelSource::Function(spec) => SourceParams::Function { spec: spec.clone() },
            ModelSource::Program { program, inputs } => {
                SourceParams::Program { program: program.clone(), inputs: inputs.clone() }
            }
            ModelSource::Captured { component } => {
                SourceParams::Captured { component: component.clone() }
            }
            ModelSource::Caller => SourceParams::Caller,
        }
    }

    /// The `trace` request for this model, writing `output` and `reference`, with `patches`.
    pub fn params(
        &self,
        output: &std::path::Path,
        reference: &std::path::Path,
        patches: Vec<PatchSpec>,
    ) -> TraceParams {
        TraceParams {
            source: self.source_params(),
            task: self.task.clone(),
            dynamic: self.dynamic,
            dynamic_shapes: self.dynamic_shapes.clone(),
            batch: self.batch,
            sequence: self.sequence,
            output: output.to_path_buf(),
            reference: self.reference.then(|| reference.to_path_buf()),
            decompose: match (&self.decompose, &self.handled) {
                (true, _) => Decompose::All,
                (false, Some(handled)) => Decompose::Missing { handled: handled.clone() },
                (false, None) => Decompose::None,
            },
            device: self.device.clone(),
            dtype: self.dtype.clone(),
            weights_dtype: self.weights_dtype.clone(),
            experts: self.experts.clone(),
            quantize: self.quantize.clone(),
            folder: self.folder.clone(),
            weights: self.weights,
            plan_weights: self.plan_weights,
            patches,
        }
    }
}

/// The patch plugins of `patches` and the targets the worker swaps for shims.
pub fn patch_specs(
    patches: &[crate::plugins::Session<'_, crate::plugins::kind::Patch>],
) -> Vec<PatchSpec> {
    patches
        .iter()
        .map(|s| PatchSpec {
            plugin: s.plugin().name().to_string(),
            targets: s.plugin().targets.clone(),
        })
        .collect()
}

/// Traces `request` into `output` (a `.pt2`) and `reference` (eager inputs and
/// outputs), with `patches` (patch plugins) answering calls to their targets.
pub fn trace(
    worker: &mut Worker,
    request: &TraceRequest,
    patches: &mut [crate::plugins::Session<'_, crate::plugins::kind::Patch>],
    output: &std::path::Path,
    reference: &std::path::Path,
    deadline: Duration,
) -> Result<TraceReply, TraceError> {
    let params = request.params(output, reference, patch_specs(patches));
    let mut failure: Option<crate::plugins::PluginError> = None;
    let result = worker.request_with(&params, deadline, &mut |call| {
        let session = patches
            .iter_mut()
            .find(|s| s.plugin().name() == call.plugin)
            .ok_or_else(|| format!("no patch plugin `{}`", call.plugin))?;
        let patched = patch::call_from_wire(call);
        match session.patch(&patched, |program| patch::check_program(&patched, program)) {
            Ok(program) => Ok(patch::program_to_wire(&program)),
            Err(error) => {
                let message = error.to_string();
                failure = Some(error);
                Err(message)
            }
        }
    });
    match (result, failure) {
        // A plugin's failure is the cause of the worker's error: report the plugin's.
        (Err(TraceError::Python { .. } | TraceError::User { .. }), Some(plugin)) => {
            Err(TraceError::Plugin(plugin))
        }
        (result, _) => result,
    }
}

/// The worker's `PYTHONPATH` entries (its own environment's over hfx's),
/// which its bootstrap appends to `sys.path` and the sandbox lets it read.
fn worker_pythonpath(env: &[(std::ffi::OsString, std::ffi::OsString)]) -> Vec<PathBuf> {
    let value = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PYTHONPATH")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var_os("PYTHONPATH"));
    value
        .map(|v| std::env::split_paths(&v).filter(|p| !p.as_os_str().is_empty()).collect())
        .unwrap_or_default()
}

pub mod confine;
pub mod interrupt;
pub mod memory;
pub mod package;
mod patch;
mod process;
pub mod protocol;
pub mod shapes;
pub use patch::check_program;

/// A Python exception as one line, then its traceback. The worker sends no
/// traceback only where the message says everything (an artifact that fails
/// in its runtime, `ArtifactFailed`): the step and the message then.
fn python_error_text(method: &str, kind: &str, message: &str, traceback: &str) -> String {
    if traceback.is_empty() {
        format!("{method}: {message}")
    } else {
        format!("{kind} in the trace worker during `{method}`: {message}\n{traceback}")
    }
}
