//! Errors at the plugin boundary. Each names the file, or the plugin, its kind,
//! the stage and the node, so that one line says what failed where.

use std::path::PathBuf;

use super::manifest::PluginKind;

/// A plugin that could not be loaded. The path is the manifest or component file.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct LoadError {
    pub path: PathBuf,
    pub reason: String,
}

impl LoadError {
    pub fn new(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        LoadError { path: path.into(), reason: reason.into() }
    }
}

/// Why a call into a plugin failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Failure {
    /// The plugin returned its typed error.
    #[error("{0}")]
    Returned(String),
    #[error("ran out of fuel ({budget} units): the call does not terminate within its budget")]
    OutOfFuel { budget: u64 },
    #[error("hit the {millis} ms wall-clock deadline")]
    Deadline { millis: u64 },
    /// The deadline passed while a host function worked for the guest
    /// (epochs interrupt wasm code only; host work checks the clock itself).
    #[error("hit the {millis} ms wall-clock deadline in host function `{function}`")]
    HostDeadline { function: String, millis: u64 },
    #[error("exceeded the memory limit (cap of {bytes} bytes)")]
    MemoryCap { bytes: usize },
    #[error("exceeded the table limit (cap of {elements} elements)")]
    TableCap { elements: usize },
    /// Unbounded recursion: the wasm stack cap, not the host's stack.
    #[error("stack overflow: used more than the {bytes}-byte wasm stack")]
    StackOverflow { bytes: usize },
    #[error("exceeded the host budget: {0}")]
    HostBudget(String),
    /// A wasm trap: a panic (unreachable), an out-of-bounds access, ...
    #[error("trapped: {0}")]
    Trap(String),
    #[error("returned an invalid answer: {0}")]
    Invalid(String),
}

/// A failed call, with everything needed to find the cause.
#[derive(Debug, Clone, thiserror::Error)]
#[error("plugin `{plugin}` ({kind}) failed in stage `{stage}`{}: {failure}", node_suffix(.node))]
pub struct PluginError {
    pub plugin: String,
    pub kind: PluginKind,
    pub stage: String,
    /// What the call was about: the node the plugin reported, else the one
    /// it was given.
    pub node: Option<NodeRef>,
    pub failure: Failure,
}

/// What a failed call was about, resolved while the graph or model was at hand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeRef {
    /// An FX node, by its name (`add_3`).
    Fx(String),
    /// A node of the ONNX model under repair: its op type and index.
    Onnx { op_type: String, index: u32 },
    /// The call a patch plugin was asked about, by its target.
    Call(String),
}

impl std::fmt::Display for NodeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeRef::Fx(name) | NodeRef::Call(name) => f.write_str(name),
            NodeRef::Onnx { op_type, index } => write!(f, "{op_type}#{index}"),
        }
    }
}

fn node_suffix(node: &Option<NodeRef>) -> String {
    node.as_ref().map(|n| format!(" at node `{n}`")).unwrap_or_default()
}
