//! Calling a plugin: one `Session` per plugin per stage run owns the plugin's
//! Store and instance. Each call gets fresh fuel, a fresh deadline and fresh
//! host budgets; the graph (or ONNX model) is lent to the store for the call and
//! its changes are rolled back if the call fails. After a trap the store is
//! discarded and the next call instantiates afresh. A session is typed by its
//! plugin's kind: it offers exactly that kind's call.

use wasmtime::component::Resource;
use wasmtime::{Store, Trap};

use super::bindings::{wit_patching, wit_types};
use super::bindings::{BuilderRef, GraphRef, ModelRef};
use super::error::{Failure, NodeRef, PluginError};
use super::ir_model::IrModel;
use super::kind::{self, Kind, PluginOf};
use super::manifest::PluginKind;
use super::runtime::{one_line, Plugin, Runtime, EPOCH_TICK};
use super::sandbox::{write_budget_message, MAX_DESCRIBE_BYTES, MAX_MESSAGE_BYTES, MAX_WASM_STACK};
use super::store::PluginState;
use crate::graph::{Graph, NodeId};
use crate::onnx::TranslationBuilder;

pub struct Session<'a, K: Kind> {
    runtime: &'a Runtime,
    plugin: PluginOf<'a, K>,
    stage: String,
    live: Option<(Store<PluginState>, K::Instance)>,
    /// The state of a store discarded after a trap, kept until the lent data is reclaimed.
    discarded: Option<PluginState>,
    /// Calls made, and instances created, in this session.
    pub calls: u64,
    pub instantiations: u64,
}

/// What a call returned, before the host judges it.
type Outcome<T> = wasmtime::Result<Result<T, wit_types::Error>>;

impl<'a, K: Kind> Session<'a, K> {
    pub fn new(runtime: &'a Runtime, plugin: PluginOf<'a, K>, stage: &str) -> Self {
        assert!(
            wasmtime::Engine::same(&runtime.engine, &plugin.engine),
            "plugin `{}` was loaded by another Runtime: load and run plugins with the same one",
            plugin.name()
        );
        Session {
            runtime,
            plugin,
            stage: stage.to_string(),
            live: None,
            discarded: None,
            calls: 0,
            instantiations: 0,
        }
    }

    pub fn plugin(&self) -> &'a Plugin {
        self.plugin.plugin
    }

    /// The plugin's declared targets, at most `MAX_DESCRIBE_BYTES` of them.
    pub fn describe(&mut self) -> Result<Vec<String>, PluginError> {
        let targets = self.call(None, |store, instance| Ok(Ok(K::describe(instance, store)?)))?;
        let bytes = 8 + targets.iter().map(|t| t.len() + 8).sum::<usize>();
        if bytes > MAX_DESCRIBE_BYTES {
            let budget = format!(
                "describe returned {} targets in {bytes} bytes (at most {MAX_DESCRIBE_BYTES})",
                targets.len()
            );
            return Err(self.error(None, Failure::HostBudget(budget)));
        }
        Ok(targets)
    }
}

impl Session<'_, kind::FxNodeFix> {
    /// FX node fix on `node`; true when the plugin consumed it.
    pub fn fx_node_fix(&mut self, graph: &mut Graph, node: NodeId) -> Result<bool, PluginError> {
        self.with_graph(graph, Some(node), false, |store, instance, g| {
            instance.call_apply(store, g, node.0)
        })
    }
}

impl Session<'_, kind::FxProgramFix> {
    /// FX program fix on the whole program.
    pub fn fx_program_fix(&mut self, graph: &mut Graph) -> Result<(), PluginError> {
        self.with_graph(graph, None, false, |store, instance, g| instance.call_apply(store, g))
    }
}

impl Session<'_, kind::OnnxTranslation> {
    /// Translation of `node`; the emitted ONNX nodes land in `builder`.
    pub fn translate(
        &mut self,
        graph: &mut Graph,
        node: NodeId,
        builder: &mut TranslationBuilder,
    ) -> Result<(), PluginError> {
        self.ensure_live()?;
        self.live.as_mut().expect("live").0.data_mut().onnx.builder = std::mem::take(builder);
        let result = self.with_graph(graph, Some(node), true, |store, instance, g| {
            let b = store.data_mut().table.push(BuilderRef)?;
            let b_rep = Resource::<BuilderRef>::new_borrow(b.rep());
            let r = instance.call_translate(&mut *store, g, node.0, b_rep);
            let _ = store.data_mut().table.delete(b);
            r
        });
        *builder = self.reclaim(|s| std::mem::take(&mut s.onnx.builder));
        result
    }
}

impl Session<'_, kind::OnnxIrFix> {
    /// ONNX IR fix on node `node` of `model`; true when it changed the model.
    /// A call that changed the model is kept only if the graph it leaves is
    /// well formed ([`IrModel::check`]); else it is undone and refused.
    pub fn onnx_ir_fix(&mut self, model: &mut IrModel, node: u32) -> Result<bool, PluginError> {
        let name =
            model.node(node).map(|n| NodeRef::Onnx { op_type: n.op_type.clone(), index: node });
        self.ensure_live()?;
        let (store, _) = self.live.as_mut().expect("live");
        store.data_mut().onnx.model = std::mem::take(model);
        let result = self.call(name.clone(), |store, instance| {
            let m = store.data_mut().table.push(ModelRef)?;
            let m_rep = Resource::<ModelRef>::new_borrow(m.rep());
            let r = instance.call_apply(&mut *store, m_rep, node);
            let _ = store.data_mut().table.delete(m);
            r
        });
        let malformed = result.is_ok().then(|| {
            self.reclaim(|s| {
                let reason = s.onnx.model.mutated().then(|| s.onnx.model.check().err()).flatten();
                if reason.is_some() {
                    s.onnx.model.rollback();
                }
                reason
            })
        });
        *model = self.reclaim(|s| std::mem::take(&mut s.onnx.model));
        match malformed.flatten() {
            Some(reason) => Err(self.error(
                name,
                Failure::Invalid(bounded_line(&format!("left a malformed graph: {reason}"))),
            )),
            None => result,
        }
    }
}

impl Session<'_, kind::Patch> {
    /// A trace-time patch: the program that replaces `call`, once `check` accepts it.
    pub fn patch(
        &mut self,
        call: &wit_patching::PatchedCall,
        check: impl FnOnce(&wit_patching::Program) -> Result<(), String>,
    ) -> Result<wit_patching::Program, PluginError> {
        let target = call.target.clone();
        let program = self.call(Some(NodeRef::Call(target.clone())), |store, instance| {
            instance.call_apply(store, call)
        })?;
        check(&program).map_err(|reason| {
            self.error(Some(NodeRef::Call(target)), Failure::Invalid(bounded_line(&reason)))
        })?;
        Ok(program)
    }
}

impl<K: Kind> Session<'_, K> {
    // ── Machinery ──

    /// Takes something back from the store, or from the store discarded after a trap.
    fn reclaim<T>(&mut self, take: impl FnOnce(&mut PluginState) -> T) -> T {
        match (&mut self.live, &mut self.discarded) {
            (Some((store, _)), _) => take(store.data_mut()),
            (None, Some(state)) => take(state),
            (None, None) => panic!("nothing to reclaim from"),
        }
    }

    /// Lends `graph` to the store for one call, under a transaction. `node`, the
    /// node the call is about, is named in an error (after the rollback).
    fn with_graph<T>(
        &mut self,
        graph: &mut Graph,
        node: Option<NodeId>,
        read_only: bool,
        f: impl FnOnce(&mut Store<PluginState>, &K::Instance, Resource<GraphRef>) -> Outcome<T>,
    ) -> Result<T, PluginError> {
        self.ensure_live()?;
        let about = node.map(|id| NodeRef::Fx(graph.node_name(id)));
        {
            let (store, _) = self.live.as_mut().expect("live");
            let state = store.data_mut();
            state.graph.graph = std::mem::take(graph);
            state.graph.graph.begin();
            state.graph.read_only = read_only;
        }
        let result = self.call(about, |store, instance| {
            let g = store.data_mut().table.push(GraphRef)?;
            let borrowed = Resource::<GraphRef>::new_borrow(g.rep());
            let r = f(&mut *store, instance, borrowed);
            let _ = store.data_mut().table.delete(g);
            r
        });
        *graph = self.reclaim(|s| {
            if result.is_ok() {
                s.graph.graph.commit();
            } else {
                s.graph.graph.rollback();
            }
            std::mem::take(&mut s.graph.graph)
        });
        result
    }

    fn ensure_live(&mut self) -> Result<(), PluginError> {
        if self.live.is_some() {
            return Ok(());
        }
        self.discarded = None;
        let mut store = self.runtime.new_store();
        // Instantiation runs guest start code: it gets a budget like any call.
        self.arm(&mut store);
        match K::instantiate(self.plugin.pre, &mut store) {
            Ok(instance) => {
                self.instantiations += 1;
                self.live = Some((store, instance));
                Ok(())
            }
            Err(e) => Err(self.error(None, self.classify(&store, &e))),
        }
    }

    /// Fresh fuel, deadline and host budgets for one call.
    fn arm(&self, store: &mut Store<PluginState>) {
        let limits = self.runtime.limits;
        store.set_fuel(limits.fuel_per_call).expect("fuel is enabled");
        let ticks = (limits.deadline.as_nanos() / EPOCH_TICK.as_nanos()).max(1) as u64;
        store.set_epoch_deadline(ticks);
        // wasmtime meters what one host call (or one returned value) copies out
        // of the guest: no single transfer may exceed the whole write budget.
        store.set_hostcall_fuel(usize::try_from(limits.max_write_bytes).unwrap_or(usize::MAX));
        let state = store.data_mut();
        state.budget.reset();
        state.memory.denied = false;
        state.memory.table_denied = false;
        state.onnx.begin();
    }

    /// One call with limits; a trap discards the store.
    fn call<T>(
        &mut self,
        node: Option<NodeRef>,
        f: impl FnOnce(&mut Store<PluginState>, &K::Instance) -> Outcome<T>,
    ) -> Result<T, PluginError> {
        self.ensure_live()?;
        self.calls += 1;
        let (mut store, instance) = self.live.take().expect("live");
        self.arm(&mut store);
        let outcome = f(&mut store, &instance);
        store.data_mut().onnx_finish(outcome.as_ref().is_ok_and(|r| r.is_ok()));
        match outcome {
            Ok(Ok(value)) => {
                self.live = Some((store, instance));
                Ok(value)
            }
            Ok(Err(returned)) => {
                // The node the plugin names, resolved while what it names is still in the store.
                let node =
                    returned.node.and_then(|id| self.reported_node(store.data(), id)).or(node);
                self.live = Some((store, instance));
                Err(self.error(node, returned_failure(returned.message)))
            }
            Err(trap) => {
                let failure = self.classify(&store, &trap);
                // The instance may be in any state after a trap: keep only the
                // lent data, drop the instance.
                self.discarded = Some(std::mem::replace(
                    store.data_mut(),
                    PluginState::new(self.runtime.limits),
                ));
                Err(self.error(node, failure))
            }
        }
    }

    fn classify(&self, store: &Store<PluginState>, e: &wasmtime::Error) -> Failure {
        let state = store.data();
        if state.memory.denied {
            return Failure::MemoryCap { bytes: state.limits().memory_bytes };
        }
        if state.memory.table_denied {
            return Failure::TableCap { elements: state.limits().max_table_elements };
        }
        if let Some(budget) = &state.budget.exceeded {
            return Failure::HostBudget(budget.clone());
        }
        if let Some(function) = state.budget.deadline_passed_in {
            return Failure::HostDeadline {
                function: function.to_string(),
                millis: state.limits().deadline.as_millis() as u64,
            };
        }
        // wasmtime's hostcall fuel (set to the write budget in `arm`); its error type is private.
        if format!("{e:#}").contains("fuel allocated for hostcalls has been exhausted") {
            return Failure::HostBudget(write_budget_message(state.limits().max_write_bytes));
        }
        match e.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => Failure::OutOfFuel { budget: state.limits().fuel_per_call },
            Some(Trap::Interrupt) => {
                Failure::Deadline { millis: state.limits().deadline.as_millis() as u64 }
            }
            Some(Trap::StackOverflow) => Failure::StackOverflow { bytes: MAX_WASM_STACK },
            Some(trap) => Failure::Trap(trap.to_string()),
            None => Failure::Trap(one_line(e)),
        }
    }

    /// The node a plugin's error names by handle: an FX node for the kinds
    /// that see the graph, a node of the model for IR fixes.
    fn reported_node(&self, state: &PluginState, id: u32) -> Option<NodeRef> {
        match K::KIND {
            PluginKind::FxNodeFix | PluginKind::FxProgramFix | PluginKind::OnnxTranslation => {
                let graph = &state.graph.graph;
                graph.node(NodeId(id)).ok().map(|_| NodeRef::Fx(graph.node_name(NodeId(id))))
            }
            PluginKind::OnnxIrFix => state
                .onnx
                .model
                .node(id)
                .map(|n| NodeRef::Onnx { op_type: n.op_type.clone(), index: id }),
            PluginKind::Patch => None,
        }
    }

    fn error(&self, node: Option<NodeRef>, failure: Failure) -> PluginError {
        PluginError {
            plugin: self.plugin.name().to_string(),
            kind: self.plugin.kind(),
            stage: self.stage.clone(),
            node,
            failure,
        }
    }
}

/// `describe` of a loaded plugin whatever its kind: where a kind known only
/// as a value (from the component) becomes a type.
pub(super) fn describe_any(
    runtime: &Runtime,
    plugin: &Plugin,
    stage: &str,
) -> Result<Vec<String>, PluginError> {
    fn typed<K: Kind>(
        runtime: &Runtime,
        plugin: PluginOf<'_, K>,
        stage: &str,
    ) -> Result<Vec<String>, PluginError> {
        Session::new(runtime, plugin, stage).describe()
    }
    use super::runtime::KindPre;
    match &plugin.pre {
        KindPre::FxNodeFix(pre) => {
            typed::<kind::FxNodeFix>(runtime, PluginOf { plugin, pre }, stage)
        }
        KindPre::FxProgramFix(pre) => {
            typed::<kind::FxProgramFix>(runtime, PluginOf { plugin, pre }, stage)
        }
        KindPre::Patch(pre) => typed::<kind::Patch>(runtime, PluginOf { plugin, pre }, stage),
        KindPre::OnnxTranslation(pre) => {
            typed::<kind::OnnxTranslation>(runtime, PluginOf { plugin, pre }, stage)
        }
        KindPre::OnnxIrFix(pre) => {
            typed::<kind::OnnxIrFix>(runtime, PluginOf { plugin, pre }, stage)
        }
    }
}

/// A plugin's own error: refused past `MAX_MESSAGE_BYTES`, kept to one line.
fn returned_failure(message: String) -> Failure {
    if message.len() > MAX_MESSAGE_BYTES {
        return Failure::HostBudget(format!(
            "returned an error message of {} bytes (at most {MAX_MESSAGE_BYTES})",
            message.len()
        ));
    }
    Failure::Returned(bounded_line(&message))
}

/// Text that reaches an error line: control characters (newlines included)
/// become spaces, and it is cut at `MAX_MESSAGE_BYTES`.
fn bounded_line(text: &str) -> String {
    let mut line = String::with_capacity(text.len().min(MAX_MESSAGE_BYTES + 3));
    for c in text.chars() {
        if line.len() + c.len_utf8() > MAX_MESSAGE_BYTES {
            line.push('…');
            break;
        }
        line.push(if c.is_control() { ' ' } else { c });
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_text_reaches_an_error_line_as_one_bounded_line() {
        assert_eq!(bounded_line("a\nb\r\tc"), "a b  c");
        let long = bounded_line(&"é".repeat(MAX_MESSAGE_BYTES));
        assert!(long.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8() && long.ends_with('…'));
        assert_eq!(returned_failure("two\nlines".into()), Failure::Returned("two lines".into()));
        assert!(matches!(
            returned_failure("x".repeat(MAX_MESSAGE_BYTES + 1)),
            Failure::HostBudget(_)
        ));
    }
}
