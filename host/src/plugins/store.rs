//! What a plugin's Store holds, composed of one part per contract interface
//! (the graph, the ONNX side) plus what every call shares: the resource table,
//! the memory limiter and the call's budgets. Each interface is linked with a
//! getter that hands its host implementation only its own part (wasmtime's
//! `add_to_linker(…, |s| s.graph_host())` style), so no interface can reach
//! another's state.

use wasmtime::component::{HasData, ResourceTable};

use super::host_graph::{GraphHost, GraphState};
use super::host_onnx::{OnnxHost, OnnxState};
use super::sandbox::{CallBudget, Limits, MemoryLimiter};

pub struct PluginState {
    pub table: ResourceTable,
    /// The graph under change, moved in for the duration of a call.
    pub graph: GraphState,
    /// ONNX builder / model for the ONNX kinds.
    pub onnx: OnnxState,
    pub memory: MemoryLimiter,
    pub budget: CallBudget,
}

impl PluginState {
    pub fn new(limits: Limits) -> Self {
        PluginState {
            table: ResourceTable::new(),
            graph: GraphState::default(),
            onnx: OnnxState::default(),
            memory: MemoryLimiter::new(&limits),
            budget: CallBudget::new(limits),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.budget.limits
    }

    /// Ends a call on the ONNX side: keep its changes, or undo them.
    pub fn onnx_finish(&mut self, ok: bool) {
        if !ok {
            self.onnx.rollback();
        }
    }

    /// The `graph` interface's part.
    pub fn graph_host(&mut self) -> GraphHost<'_> {
        GraphHost { table: &mut self.table, state: &mut self.graph, budget: &mut self.budget }
    }

    /// The `onnx` interface's part.
    pub fn onnx_host(&mut self) -> OnnxHost<'_> {
        OnnxHost { table: &mut self.table, onnx: &mut self.onnx, budget: &mut self.budget }
    }
}

/// `HasData` markers: which part of the store an interface is linked with.
pub struct GraphPart;
impl HasData for GraphPart {
    type Data<'a> = GraphHost<'a>;
}

pub struct OnnxPart;
impl HasData for OnnxPart {
    type Data<'a> = OnnxHost<'a>;
}
