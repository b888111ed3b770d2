//! The limits a plugin runs under, and the store data that enforces the
//! host-side ones.
//!
//! Inside the sandbox: fuel (deterministic, reset before each call), an epoch
//! deadline (wall-clock backstop), a memory cap. Outside it, where the guest
//! cannot see: how many nodes one call may add and how many bytes it may read
//! back from the host. No WASI is linked, so a plugin has no files, network,
//! clock or environment at all.

use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime::ResourceLimiter;

use super::host_onnx::OnnxState;
use crate::graph::Graph;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Linear memory cap per instance.
    pub memory_bytes: usize,
    /// Fuel per call (roughly one unit per wasm instruction).
    pub fuel_per_call: u64,
    /// Wall-clock deadline per call.
    pub deadline: Duration,
    /// Nodes one call may add to the graph.
    pub max_new_nodes: u32,
    /// Bytes one call may read back from the host (strings, lists, metadata).
    pub max_read_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 64 << 20,
            fuel_per_call: 500_000_000,
            deadline: Duration::from_secs(2),
            max_new_nodes: 10_000,
            max_read_bytes: 64 << 20,
        }
    }
}

/// What a Store holds while a plugin runs.
pub struct PluginState {
    pub table: ResourceTable,
    /// The graph under change, moved in for the duration of a call.
    pub graph: Graph,
    /// ONNX builder / model for the ONNX kinds.
    pub onnx: OnnxState,
    /// Translations read the graph but must not change it.
    pub graph_read_only: bool,
    pub limits: Limits,
    pub memory: MemoryLimiter,
    pub budget: CallBudget,
}

impl PluginState {
    pub fn new(limits: Limits) -> Self {
        PluginState {
            table: ResourceTable::new(),
            graph: Graph::new(),
            onnx: OnnxState::default(),
            graph_read_only: false,
            limits,
            memory: MemoryLimiter { cap: limits.memory_bytes, denied: false },
            budget: CallBudget::default(),
        }
    }

    /// Ends a call on the ONNX side: keep its changes, or undo them.
    pub fn onnx_finish(&mut self, ok: bool) {
        if !ok {
            self.onnx.rollback();
        }
    }

    /// Charges `bytes` read by the guest; a trap once over budget.
    pub fn charge_read(&mut self, bytes: usize) -> wasmtime::Result<()> {
        self.budget.read_bytes += bytes as u64;
        if self.budget.read_bytes > self.limits.max_read_bytes {
            let message = format!("read more than {} bytes from the host in one call", self.limits.max_read_bytes);
            self.budget.exceeded = Some(message.clone());
            return Err(wasmtime::Error::msg(message));
        }
        Ok(())
    }

    /// Charges one new node; a trap once over budget.
    pub fn charge_node(&mut self) -> wasmtime::Result<()> {
        self.budget.new_nodes += 1;
        if self.budget.new_nodes > self.limits.max_new_nodes {
            let message = format!("added more than {} nodes in one call", self.limits.max_new_nodes);
            self.budget.exceeded = Some(message.clone());
            return Err(wasmtime::Error::msg(message));
        }
        Ok(())
    }
}

/// Host-side budgets of the current call.
#[derive(Debug, Default)]
pub struct CallBudget {
    pub new_nodes: u32,
    pub read_bytes: u64,
    /// Set when a budget tripped, so the trap it caused is reported as such.
    pub exceeded: Option<String>,
}

/// Caps linear memory and remembers a denial, so the resulting trap is reported
/// as the memory cap rather than as whatever the guest did next.
pub struct MemoryLimiter {
    pub cap: usize,
    pub denied: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.cap {
            self.denied = true;
            return Err(wasmtime::Error::msg(format!("memory growth to {desired} bytes exceeds the cap of {}", self.cap)));
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}
