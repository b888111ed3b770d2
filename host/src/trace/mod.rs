//! ── Stage 1: Trace ──
//!
//! Only Python can run PyTorch model code, so the host delegates the capture
//! to a worker it starts, feeds and supervises (`host/worker/worker.py`,
//! embedded in the binary): JSON lines over pipes, one response per request,
//! a deadline per request. A crash, a Python exception or a hang becomes a
//! `TraceError` with the Python traceback or the tail of stderr attached.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

/// The worker's source; run with `python -c`, so an installed hfx needs no files beside it.
const WORKER: &str = include_str!("../../worker/worker.py");
/// The protocol version this host speaks (the worker's `PROTOCOL`).
const PROTOCOL: u64 = 1;
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
    #[error("{kind} in the trace worker during `{method}`: {message}\n{traceback}")]
    Python { method: String, kind: String, message: String, traceback: String },
    #[error("trace worker protocol: {0}")]
    Protocol(String),
    #[error(transparent)]
    Plugin(crate::plugins::PluginError),
}

/// What the host does with a worker's progress line.
pub type ProgressCallback = Box<dyn FnMut(&Value)>;

pub struct Worker {
    child: Child,
    stdin: ChildStdin,
    responses: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    next_id: u64,
    /// What `hello` answered: protocol, python, upstream versions.
    pub hello: Value,
    /// Called with each progress line the worker sends during a request.
    pub on_progress: Option<ProgressCallback>,
}

impl Worker {
    /// Starts the worker under `python` and checks it speaks this host's protocol.
    pub fn start(python: &str, deadline: Duration) -> Result<Worker, TraceError> {
        Self::start_with_env(python, deadline, &[])
    }

    /// `start`, with more environment variables for the worker (`PYTHONPATH`).
    pub fn start_with_env(python: &str, deadline: Duration, env: &[(&str, &std::ffi::OsStr)]) -> Result<Worker, TraceError> {
        let mut child = Command::new(python)
            .args(["-u", "-c", WORKER])
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| TraceError::Start { python: python.into(), source })?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let mut stderr_pipe = child.stderr.take().expect("piped");
        let (tx, responses) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
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
                    let cut = (cut..kept.len()).find(|&i| kept.is_char_boundary(i)).unwrap_or(kept.len());
                    kept.drain(..cut);
                }
            }
        });
        let mut worker = Worker { child, stdin, responses, stderr, next_id: 0, hello: Value::Null, on_progress: None };
        let hello = worker.call("hello", json!({}), deadline)?;
        let protocol = hello.get("protocol").and_then(Value::as_u64);
        if protocol != Some(PROTOCOL) {
            return Err(TraceError::Protocol(format!("worker speaks protocol {protocol:?}, this hfx speaks {PROTOCOL}")));
        }
        worker.hello = hello;
        Ok(worker)
    }

    /// Upstream versions the worker's Python has installed.
    pub fn versions(&self) -> crate::plugins::Versions {
        self.hello
            .get("versions")
            .and_then(Value::as_object)
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
            .unwrap_or_default()
    }

    /// One request; waits at most `deadline` for its response.
    pub fn call(&mut self, method: &str, params: Value, deadline: Duration) -> Result<Value, TraceError> {
        self.call_with(method, params, deadline, &mut |_| Err("no patches were requested".into()))
    }

    /// One request during which the worker may ask the host to answer patched
    /// calls (`{"patch_call": ...}` lines); `on_patch` answers each with a program.
    pub fn call_with(
        &mut self,
        method: &str,
        params: Value,
        deadline: Duration,
        on_patch: &mut dyn FnMut(&Value) -> Result<Value, String>,
    ) -> Result<Value, TraceError> {
        self.next_id += 1;
        let request = json!({"id": self.next_id, "method": method, "params": params});
        if writeln!(self.stdin, "{request}").and_then(|()| self.stdin.flush()).is_err() {
            return Err(self.crashed(method));
        }
        let end = std::time::Instant::now() + deadline;
        let line = loop {
            let left = end.saturating_duration_since(std::time::Instant::now());
            let line = match self.responses.recv_timeout(left) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err(TraceError::Timeout { method: method.into(), seconds: deadline.as_secs(), stderr: self.stderr_tail() });
                }
                Err(RecvTimeoutError::Disconnected) => return Err(self.crashed(method)),
            };
            let message: Value = serde_json::from_str(&line).map_err(|e| TraceError::Protocol(format!("bad message `{line}`: {e}")))?;
            if let Some(progress) = message.get("progress") {
                if let Some(show) = self.on_progress.as_mut() {
                    show(progress);
                }
                continue;
            }
            let Some(call) = message.get("patch_call") else { break line };
            let answer = match on_patch(call) {
                Ok(program) => json!({"program": program}),
                Err(error) => json!({"error": error}),
            };
            if writeln!(self.stdin, "{answer}").and_then(|()| self.stdin.flush()).is_err() {
                return Err(self.crashed(method));
            }
        };
        let response: Value = serde_json::from_str(&line).map_err(|e| TraceError::Protocol(format!("bad response `{line}`: {e}")))?;
        if response.get("id").and_then(Value::as_u64) != Some(self.next_id) {
            return Err(TraceError::Protocol(format!("response to another request: {line}")));
        }
        if let Some(error) = response.get("error") {
            let field = |k: &str| error.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            return Err(TraceError::Python { method: method.into(), kind: field("type"), message: field("message"), traceback: field("traceback") });
        }
        Ok(response.get("result").cloned().unwrap_or(Value::Null))
    }

    fn crashed(&mut self, method: &str) -> TraceError {
        let status = match self.child.wait() {
            Ok(status) => status.to_string(),
            Err(e) => e.to_string(),
        };
        // The stderr reader may still be draining: give it a moment.
        std::thread::sleep(Duration::from_millis(100));
        TraceError::Crashed { method: method.into(), status, stderr: self.stderr_tail() }
    }

    fn stderr_tail(&self) -> String {
        let text = self.stderr.lock().expect("stderr lock").clone();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the model comes from.
#[derive(Debug, Clone)]
pub enum ModelSource {
    /// A tiny (or any) random model from an architecture name and config overrides.
    Architecture { name: String, overrides: Vec<(String, String)> },
    /// A local Hugging Face model folder (config.json + weights).
    Directory(PathBuf),
    /// `python:module:function` returning `(model, inputs)`.
    Function(String),
}

/// What to trace and how.
#[derive(Debug, Clone)]
pub struct TraceRequest {
    pub source: ModelSource,
    pub task: Option<String>,
    pub dynamic: bool,
    /// `name:axis=min..max`, each.
    pub dynamic_shapes: Vec<String>,
    /// Sizes of the generated inputs (>= 2 on axes meant to be dynamic).
    pub batch: u32,
    pub sequence: u32,
    /// `run_decompositions()` after the trace.
    pub decompose: bool,
    /// Backend preparation: where the model runs and in which dtype.
    pub device: String,
    pub dtype: String,
    /// An export folder being written: the worker saves the model's configs there.
    pub folder: Option<PathBuf>,
    /// Weights to `<output>.weights` (indexed by `<output>.weights.json`) rather
    /// than into the `.pt2`: for an ONNX export, where the `.pt2` is
    /// intermediate and the host maps the weights from the side file.
    pub side_weights: bool,
}

impl TraceRequest {
    /// A request with the defaults `hfx run` uses: static shapes, batch 2 and
    /// sequence 8, cpu, float32, no decomposition.
    pub fn new(source: ModelSource) -> Self {
        TraceRequest {
            source,
            task: None,
            dynamic: false,
            dynamic_shapes: vec![],
            batch: 2,
            sequence: 8,
            decompose: false,
            device: "cpu".into(),
            dtype: "float32".into(),
            folder: None,
            side_weights: false,
        }
    }

    fn params(&self, output: &std::path::Path, reference: &std::path::Path) -> Value {
        let source = match &self.source {
            ModelSource::Architecture { name, overrides } => {
                let overrides: serde_json::Map<String, Value> = overrides.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
                json!({"kind": "architecture", "name": name, "overrides": overrides})
            }
            ModelSource::Directory(path) => json!({"kind": "directory", "path": path}),
            ModelSource::Function(spec) => json!({"kind": "function", "spec": spec}),
        };
        json!({
            "source": source, "task": self.task, "dynamic": self.dynamic, "dynamic_shapes": self.dynamic_shapes,
            "batch": self.batch, "sequence": self.sequence, "output": output, "reference": reference,
            "decompose": self.decompose, "device": self.device, "dtype": self.dtype, "folder": self.folder,
            "side_weights": self.side_weights,
        })
    }
}

/// Traces `request` into `output` (a `.pt2`) and `reference` (eager inputs and
/// outputs), with `patches` (patch plugins) answering calls to their targets.
pub fn trace(
    worker: &mut Worker,
    request: &TraceRequest,
    patches: &mut [crate::plugins::Session<'_>],
    output: &std::path::Path,
    reference: &std::path::Path,
    deadline: Duration,
) -> Result<Value, TraceError> {
    let mut params = request.params(output, reference);
    params["patches"] = patches
        .iter()
        .map(|s| json!({"plugin": s.plugin().name(), "targets": s.plugin().targets}))
        .collect::<Vec<_>>()
        .into();
    let mut failure: Option<crate::plugins::PluginError> = None;
    let result = worker.call_with("trace", params, deadline, &mut |call| {
        let name = call.get("plugin").and_then(Value::as_str).unwrap_or("");
        let session = patches.iter_mut().find(|s| s.plugin().name() == name).ok_or_else(|| format!("no patch plugin `{name}`"))?;
        let patched = patch::call_from_json(call)?;
        match session.patch(&patched, |program| patch::check_program(&patched, program)) {
            Ok(program) => Ok(patch::program_to_json(&program)),
            Err(error) => {
                let message = error.to_string();
                failure = Some(error);
                Err(message)
            }
        }
    });
    match (result, failure) {
        // A plugin's failure is the cause of the worker's error: report the plugin's.
        (Err(TraceError::Python { .. }), Some(plugin)) => Err(TraceError::Plugin(plugin)),
        (result, _) => result,
    }
}

mod patch;
pub use patch::check_program;
