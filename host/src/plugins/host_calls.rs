//! Calls the contract's host functions straight from bytes, as a hostile
//! guest would: the body of the `host_calls` fuzz target (`fuzz/bodies.rs`)
//! and of the unit tests of the host functions' bounds.
//!
//! Each step picks a host function of `graph`, `builder` or `model` and its
//! arguments. Strings and lists are what wasmtime could lift out of a guest
//! (each within the write budget, as its hostcall fuel ensures); counts such
//! as `add-node`'s `outputs` are any `u32`. A call that traps ends the run as
//! it ends a plugin call: the graph, the builder and the model are rolled
//! back and must be exactly as before. Any panic, and any allocation far past
//! the budgets (libFuzzer's `-malloc_limit_mb`), is a finding.

use wasmtime::component::Resource;

use super::super::bindings::wit_graph::{self as w, HostGraph};
use super::super::bindings::wit_onnx::{self as o, HostBuilder, HostModel};
use super::super::bindings::wit_onnx_v0_2 as o2;
use super::super::bindings::wit_types as t;
use super::super::host_graph::ApproxSize;
use super::super::ir_model::IrModel;
use super::super::store::PluginState;
use super::Limits;
use crate::graph::{Argument, Dim, Graph, NamedArgument, OutputDecl, TensorMeta, ValueMeta};
use crate::onnx::{Attribute, Node, TranslationBuilder};

/// The budgets of a fuzzed call: the defaults', smaller, so that what they
/// let through stays cheap and what they refuse is quick to reach.
pub fn fuzz_limits() -> Limits {
    Limits {
        max_new_nodes: 1_000,
        max_read_bytes: 4 << 20,
        max_write_bytes: 1 << 20,
        ..Limits::default()
    }
}

/// The most one step hands in, all its strings and lists together: what
/// wasmtime's hostcall fuel lets a guest pass in one call under `fuzz_limits`
/// (a list of one described tensor repeated is cheap to ask for here, as it
/// is not for a guest).
const MAX_LIFTED: usize = 1 << 20;

/// Runs the host-function calls `data` describes on a small graph, builder
/// and model, then checks the rollback of a trapped call.
pub fn drive(data: &[u8]) {
    let mut input = Bytes { data, at: 0, lifted: 0 };
    let mut state = PluginState::new(fuzz_limits());
    state.graph.graph = relu_add_mul();
    state.graph.read_only = input.u8() & 1 == 1;
    state.onnx.builder = TranslationBuilder::new(18);
    state.onnx.model = two_node_model();
    let graph_before = state.graph.graph.fingerprint();
    let builder_before = (state.onnx.builder.nodes.clone(), state.onnx.builder.value_names.clone());
    let model_before = state.onnx.model.clone();
    state.graph.graph.begin();
    state.onnx.begin();
    let mut trapped = false;
    for _ in 0..64 {
        if input.done() {
            break;
        }
        if step(&mut state, &mut input).is_err() {
            trapped = true;
            break;
        }
    }
    if trapped {
        state.graph.graph.rollback();
        state.onnx.rollback();
        assert_eq!(
            state.graph.graph.fingerprint(),
            graph_before,
            "a trapped call's graph changes must be rolled back"
        );
        assert_eq!(
            (&state.onnx.builder.nodes, &state.onnx.builder.value_names),
            (&builder_before.0, &builder_before.1)
        );
        assert_eq!(
            state.onnx.model, model_before,
            "a trapped call's attribute changes must be rolled back"
        );
    } else {
        state.graph.graph.commit();
    }
}

/// One host call; `Err` when it trapped.
fn step(state: &mut PluginState, input: &mut Bytes) -> wasmtime::Result<()> {
    let g = || Resource::<super::super::bindings::GraphRef>::new_borrow(0);
    let b = || Resource::<super::super::bindings::BuilderRef>::new_borrow(0);
    let m = || Resource::<super::super::bindings::ModelRef>::new_borrow(0);
    input.lifted = MAX_LIFTED;
    let id = input.small_u32();
    match input.u8() % 40 {
        0 => drop(state.graph_host().nodes(g())?),
        1 => drop(state.graph_host().nodes_by_target(g(), input.string())?),
        2 => drop(state.graph_host().target(g(), id)?),
        3 => drop(state.graph_host().name(g(), id)?),
        4 => drop(state.graph_host().subgraph_of(g(), id)?),
        5 => drop(state.graph_host().inputs(g(), id)?),
        6 => drop(state.graph_host().input(g(), id, input.string())?),
        7 => drop(state.graph_host().outputs(g(), id)?),
        8 => drop(state.graph_host().users(g(), id)?),
        9 => drop(state.graph_host().value_users(g(), id)?),
        10 => drop(state.graph_host().is_graph_output(g(), id)?),
        11 => drop(state.graph_host().producer(g(), id)?),
        12 => drop(state.graph_host().value_name(g(), id)?),
        13 => drop(state.graph_host().value_meta(g(), id)?),
        14 => drop(state.graph_host().graph_inputs(g())?),
        15 => drop(state.graph_host().graph_outputs(g())?),
        16 => {
            let (target, inputs, outputs) =
                (input.string(), input.named_arguments(), input.output_decls());
            drop(state.graph_host().insert_call(g(), id, target, inputs, outputs)?)
        }
        17 => drop(state.graph_host().set_inputs(g(), id, input.named_arguments())?),
        18 => drop(state.graph_host().set_input(g(), id, input.named_argument())?),
        19 => {
            let by = match input.u8() % 4 {
                0 => w::Replacement::Value(input.small_u32()),
                1 => w::Replacement::Int(input.u32() as i64),
                2 => w::Replacement::Float(f64::from(input.u32())),
                _ => w::Replacement::Boolean(input.u8() & 1 == 1),
            };
            drop(state.graph_host().replace_uses(g(), id, by)?)
        }
        20 => drop(state.graph_host().erase(g(), id)?),
        21 => drop(state.graph_host().set_value_meta(g(), id, input.value_meta())?),
        22 => drop(state.graph_host().range_constraints(g())?),
        23 => {
            let c = w::RangeConstraint {
                symbol: input.string(),
                min: input.u32() as i64,
                max: input.flag().then(|| input.u32() as i64),
            };
            drop(state.graph_host().set_range_constraint(g(), c)?)
        }
        24 => drop(state.onnx_host().value_name(b(), id)?),
        25 => {
            let (op_type, domain, inputs) = (input.string(), input.string(), input.strings());
            // Any u32 a guest can pass: `u32::MAX` included.
            let outputs = if input.flag() { input.u32() } else { input.small_u32() };
            drop(state.onnx_host().add_node(
                b(),
                op_type,
                domain,
                inputs,
                outputs,
                input.named_attributes(),
            )?)
        }
        26 => drop(state.onnx_host().bind(b(), id, input.string())?),
        27 => drop(state.onnx_host().nodes(m())?),
        28 => match input.u8() % 4 {
            0 => drop(state.onnx_host().op_type(m(), id)?),
            1 => drop(state.onnx_host().domain(m(), id)?),
            2 => drop(state.onnx_host().inputs(m(), id)?),
            _ => drop(state.onnx_host().outputs(m(), id)?),
        },
        29 => drop(state.onnx_host().attribute(m(), id, input.string())?),
        30 => {
            let attribute = o::NamedAttribute { name: input.string(), value: input.attribute() };
            drop(state.onnx_host().set_attribute(m(), id, attribute)?)
        }
        // Contract 0.2.0's model.
        32 => drop(o2::HostModel::producer(&mut state.onnx_host(), m(), input.string())?),
        33 => drop(o2::HostModel::consumers(&mut state.onnx_host(), m(), input.string())?),
        34 => match input.u8() % 3 {
            0 => drop(o2::HostModel::is_graph_output(&mut state.onnx_host(), m(), input.string())?),
            1 => drop(o2::HostModel::is_graph_input(&mut state.onnx_host(), m(), input.string())?),
            _ => drop(o2::HostModel::value_type(&mut state.onnx_host(), m(), input.string())?),
        },
        35 => {
            let (value, max) = (input.string(), input.u32());
            drop(o2::HostModel::constant(&mut state.onnx_host(), m(), value, max)?)
        }
        36 => {
            let (op_type, domain) = (input.string(), input.string());
            let (inputs, outputs) = (input.strings(), input.strings());
            let mut host = state.onnx_host();
            drop(o2::HostModel::add_node(&mut host, m(), op_type, domain, inputs, outputs, vec![])?)
        }
        37 => drop(o2::HostModel::remove_node(&mut state.onnx_host(), m(), id)?),
        38 => {
            let (old, new) = (input.string(), input.string());
            drop(o2::HostModel::replace_uses(&mut state.onnx_host(), m(), old, new)?)
        }
        39 => {
            let hint = input.string();
            let n = input.len();
            let data = if input.flag() {
                o2::ConstantData::Ints(vec![1; n])
            } else {
                o2::ConstantData::Floats(vec![0.5; n])
            };
            let dims = vec![n as i64; usize::from(input.flag())];
            let value = o2::Constant { elem_type: if input.flag() { 7 } else { 1 }, dims, data };
            let mut host = state.onnx_host();
            drop(o2::HostModel::add_initializer(&mut host, m(), hint, value)?);
            drop(o2::HostModel::import_opset(&mut host, m(), input.string(), input.u32())?)
        }
        _ => drop(state.onnx_host().opset(b())?),
    }
    Ok(())
}

/// `x → relu → add(relu, x) → mul(add, 2.0) → output`.
fn relu_add_mul() -> Graph {
    let meta = || TensorMeta::new("float32", vec![Dim::Symbolic("s0".into()), Dim::Fixed(8)]);
    let pos = |name: &str, value| NamedArgument { name: name.into(), value, keyword: false };
    let mut g = Graph::new();
    let x = g.add_input(0, "x", ValueMeta::Tensor(meta()));
    let first = |g: &Graph, n| {
        g.node(n).ok().and_then(|n| n.output_values().next()).expect("declared one output")
    };
    let relu = g
        .push_node(
            0,
            "aten.relu.default",
            vec![pos("self", Argument::Tensor(x))],
            vec![OutputDecl::Tensor(meta())],
        )
        .expect("relu");
    let y = first(&g, relu);
    let add = g
        .push_node(
            0,
            "aten.add.Tensor",
            vec![pos("self", Argument::Tensor(y)), pos("other", Argument::Tensor(x))],
            vec![OutputDecl::Tensor(meta())],
        )
        .expect("add");
    let z = first(&g, add);
    let mul = g
        .push_node(
            0,
            "aten.mul.Tensor",
            vec![pos("self", Argument::Tensor(z)), pos("other", Argument::Float(2.0))],
            vec![OutputDecl::Tensor(meta())],
        )
        .expect("mul");
    let out = first(&g, mul);
    g.set_outputs(0, vec![Argument::Tensor(out)]).expect("outputs");
    g
}

fn two_node_model() -> IrModel {
    let node = |op: &str, attributes| Node {
        op_type: op.into(),
        domain: String::new(),
        inputs: vec!["x".into()],
        outputs: vec![format!("{}_out", op.to_ascii_lowercase())],
        attributes,
        function: None,
    };
    IrModel::of_nodes(vec![
        node("Relu", vec![]),
        node("Cast", vec![("to".into(), Attribute::Int(1))]),
    ])
}

/// The fuzzer's bytes, read front to back; past the end everything is zero.
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
    /// Bytes the current step may still hand in (its guest-side size).
    lifted: usize,
}

impl Bytes<'_> {
    /// `n` items of `size` bytes, or as many as the step may still hand in.
    fn lift(&mut self, n: usize, size: usize) -> usize {
        let n = n.min(self.lifted / size.max(1));
        self.lifted -= n * size.max(1);
        n
    }

    fn done(&self) -> bool {
        self.at >= self.data.len()
    }

    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    fn flag(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// Mostly an id or a count that exists (0..16), sometimes anything.
    fn small_u32(&mut self) -> u32 {
        match self.u8() {
            b @ 0..=239 => u32::from(b % 16),
            240..=247 => u32::MAX,
            _ => self.u32(),
        }
    }

    /// A length: mostly small, sometimes up to what one host call may lift.
    fn len(&mut self) -> usize {
        match self.u8() {
            b @ 0..=223 => usize::from(b % 8),
            b @ 224..=251 => 1 << (b - 224).min(20),
            _ => MAX_LIFTED,
        }
    }

    /// A string of a chosen length, its bytes repeated from one chosen byte
    /// (a long identifier costs the fuzzer two bytes, not a megabyte).
    fn string(&mut self) -> String {
        let len = self.len();
        let len = self.lift(len + 8, 1).saturating_sub(8);
        let c = char::from(b'a' + self.u8() % 26);
        match self.u8() % 4 {
            0 => ["aten.relu.default", "aten.add.Tensor", "self", "x", "float32", "s0"][len % 6]
                .to_string(),
            _ => std::iter::repeat_n(c, len).collect(),
        }
    }

    fn strings(&mut self) -> Vec<String> {
        let n = self.len();
        (0..n).map_while(|_| (self.lifted > 0).then(|| self.string())).collect()
    }

    fn dim(&mut self) -> t::Dim {
        if self.flag() {
            t::Dim::Symbolic(self.string())
        } else {
            t::Dim::Fixed(i64::from(self.u8()))
        }
    }

    fn tensor_meta(&mut self) -> t::TensorMeta {
        let rank = self.len().min(64);
        let rank = self.lift(rank, 16);
        t::TensorMeta {
            dtype: self.string(),
            shape: (0..rank).map(|_| self.dim()).collect(),
            strides: vec![],
            device: t::Device {
                kind: if self.flag() { "cpu".into() } else { self.string() },
                index: None,
            },
        }
    }

    fn value_meta(&mut self) -> t::ValueMeta {
        match self.u8() % 3 {
            0 => t::ValueMeta::Tensor(self.tensor_meta()),
            1 => t::ValueMeta::SymInt(self.string()),
            _ => t::ValueMeta::Opaque(self.string()),
        }
    }

    fn output_decls(&mut self) -> Vec<w::OutputDecl> {
        let n = self.len().min(16);
        (0..n)
            .map(|_| match self.u8() % 4 {
                0 => w::OutputDecl::Tensor(self.tensor_meta()),
                1 => {
                    // Many values of one shared description: cheap to ask for, each a value on the host.
                    let meta = self.tensor_meta();
                    let count = self.len();
                    let count = self.lift(count, meta.approx_size());
                    w::OutputDecl::Tensors(vec![meta; count])
                }
                2 => w::OutputDecl::SymInt(self.string()),
                _ => w::OutputDecl::None,
            })
            .collect()
    }

    fn argument(&mut self) -> w::Argument {
        match self.u8() % 8 {
            0 => w::Argument::Tensor(self.small_u32()),
            1 => {
                let (value, n) = (self.small_u32(), self.len());
                w::Argument::Tensors(vec![value; self.lift(n, 4)])
            }
            2 => w::Argument::Int(i64::from(self.u32())),
            3 => w::Argument::Str(self.string()),
            4 => w::Argument::Dtype(self.string()),
            5 => w::Argument::Device(t::Device { kind: self.string(), index: None }),
            6 => {
                let n = self.len();
                w::Argument::Ints(vec![1; self.lift(n, 8)])
            }
            _ => w::Argument::None,
        }
    }

    fn named_argument(&mut self) -> w::NamedArgument {
        w::NamedArgument { name: self.string(), value: self.argument(), keyword: self.flag() }
    }

    fn named_arguments(&mut self) -> Vec<w::NamedArgument> {
        let n = self.len().min(64);
        (0..n).map_while(|_| (self.lift(1, 16) == 1).then(|| self.named_argument())).collect()
    }

    fn attribute(&mut self) -> o::Attribute {
        match self.u8() % 4 {
            0 => o::Attribute::Int(i64::from(self.u32())),
            1 => {
                let n = self.len();
                o::Attribute::Ints(vec![7; self.lift(n, 8)])
            }
            2 => o::Attribute::Str(self.string()),
            _ => o::Attribute::Strs(self.strings()),
        }
    }

    fn named_attributes(&mut self) -> Vec<o::NamedAttribute> {
        let n = self.len().min(16);
        (0..n)
            .map_while(|_| {
                (self.lift(1, 16) == 1)
                    .then(|| o::NamedAttribute { name: self.string(), value: self.attribute() })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn state() -> PluginState {
        let mut state = PluginState::new(Limits::default());
        state.graph.graph = relu_add_mul();
        state.onnx.builder = TranslationBuilder::new(18);
        state.onnx.model = two_node_model();
        state
    }

    fn b() -> Resource<super::super::super::bindings::BuilderRef> {
        Resource::new_borrow(0)
    }

    fn g() -> Resource<super::super::super::bindings::GraphRef> {
        Resource::new_borrow(0)
    }

    fn trap_message<T: std::fmt::Debug>(r: wasmtime::Result<T>) -> String {
        format!("{:#}", r.expect_err("the call must trap"))
    }

    #[test]
    fn add_node_refuses_u32_max_outputs_before_naming_any() {
        let mut state = state();
        let start = Instant::now();
        let r = state.onnx_host().add_node(
            b(),
            "Split".into(),
            String::new(),
            vec![],
            u32::MAX,
            vec![],
        );
        assert_eq!(
            trap_message(r),
            "`builder.add-node` was asked for 4294967295 outputs (at most 65536)"
        );
        assert!(start.elapsed() < Duration::from_secs(1));
        assert!(state.onnx.builder.nodes.is_empty());
        assert!(state.budget.exceeded.is_some(), "reported as a host budget");
    }

    #[test]
    fn add_node_charges_the_output_names_it_derives_from_the_op_type() {
        let mut state = state();
        let r = state.onnx_host().add_node(
            b(),
            "A".repeat(4096),
            String::new(),
            vec![],
            60_000,
            vec![],
        );
        let message = trap_message(r);
        assert!(message.starts_with("`builder.add-node` would allocate"), "{message}");
        assert!(message.contains("for 60000 output names of a 4096-byte op type, over the write budget of 16777216 bytes"), "{message}");
        assert!(state.onnx.builder.nodes.is_empty());
        // An op type past the identifier cap is refused whatever the count.
        let mut state = super::tests::state();
        let r = state.onnx_host().add_node(
            b(),
            "S".repeat(1 << 20),
            String::new(),
            vec![],
            1200,
            vec![],
        );
        assert_eq!(
            trap_message(r),
            "`builder.add-node` was given an op type of 1048576 bytes (at most 4096)"
        );
        // The cap on outputs is a limit, not a refusal of many: 65536 short names go through.
        let mut state = super::tests::state();
        let names = state
            .onnx_host()
            .add_node(b(), "Split".into(), String::new(), vec![], 65_536, vec![])
            .unwrap()
            .unwrap();
        assert_eq!((names.len(), names[65_535].as_str()), (65_536, "split_65536"));
    }

    #[test]
    fn insert_call_charges_the_values_it_declares_before_declaring_them() {
        let mut state = state();
        let before = state.graph.graph.fingerprint();
        let target = format!("aten.{}", "v".repeat(4090));
        let meta = t::TensorMeta {
            dtype: "float32".into(),
            shape: vec![],
            strides: vec![],
            device: t::Device { kind: "cpu".into(), index: None },
        };
        let outputs = vec![w::OutputDecl::Tensors(vec![meta; 60_000])];
        let relu = state.graph.graph.nodes().next().unwrap().0;
        let message =
            trap_message(state.graph_host().insert_call(g(), relu, target, vec![], outputs));
        assert!(message.starts_with("`graph.insert-call` would allocate"), "{message}");
        assert!(
            message.contains("for 60000 output values named after a 4095-byte target"),
            "{message}"
        );
        state.graph.graph.rollback();
        assert_eq!(state.graph.graph.fingerprint(), before);
        // More values than one node may declare: refused by count.
        let mut state = super::tests::state();
        let meta = t::TensorMeta {
            dtype: "f".into(),
            shape: vec![],
            strides: vec![],
            device: t::Device { kind: "c".into(), index: None },
        };
        let outputs = vec![w::OutputDecl::Tensors(vec![meta; 70_000])];
        let message = trap_message(state.graph_host().insert_call(
            g(),
            relu,
            "aten.x.y".into(),
            vec![],
            outputs,
        ));
        assert_eq!(
            message,
            "`graph.insert-call` was asked for 70000 output values (at most 65536)"
        );
    }

    #[test]
    fn set_input_charges_the_copy_of_the_inputs_it_journals() {
        // A node holding 8 MiB of inputs: each `set-input` copies them (and
        // journals the old list), so the second copy is over the 16 MiB budget.
        let mut state = state();
        state.graph.graph.begin();
        let mul = state.graph.graph.nodes().nth(2).unwrap().0;
        let big = w::NamedArgument {
            name: "big".into(),
            value: w::Argument::Ints(vec![0; 1 << 20]),
            keyword: true,
        };
        state.graph_host().set_input(g(), mul, big).unwrap().unwrap();
        state.budget.reset();
        let small = || w::NamedArgument {
            name: "other".into(),
            value: w::Argument::Float(3.0),
            keyword: false,
        };
        state.graph_host().set_input(g(), mul, small()).unwrap().unwrap();
        let message = trap_message(state.graph_host().set_input(g(), mul, small()));
        assert!(
            message.starts_with("`graph.set-input` would allocate")
                && message.contains("a copy of the 3 inputs of node"),
            "{message}"
        );
    }

    #[test]
    fn host_work_growing_with_the_input_stops_at_the_call_deadline() {
        let mut state = state();
        state.budget.deadline = Instant::now() - Duration::from_millis(1);
        // Looked at every few thousand names: 60000 short ones pass the budgets, not the clock.
        let r =
            state.onnx_host().add_node(b(), "Split".into(), String::new(), vec![], 60_000, vec![]);
        assert_eq!(trap_message(r), "`builder.add-node` ran past the call's deadline");
        assert_eq!(state.budget.deadline_passed_in, Some("builder.add-node"));
        assert!(state.onnx.builder.nodes.is_empty());
        let mut state = super::tests::state();
        state.budget.deadline = Instant::now() - Duration::from_millis(1);
        assert_eq!(
            trap_message(state.graph_host().nodes(g())),
            "`graph.nodes` ran past the call's deadline"
        );
    }

    #[test]
    fn every_host_function_survives_a_sample_of_hostile_inputs() {
        // A few fixed inputs the fuzz target starts from (and regressions it found).
        for data in [
            &[][..],
            &[0, 25, 0, 1, 255, 255, 255, 255][..],
            &[1, 16, 0, 255, 3, 1, 1, 255, 3][..],
            &[0, 30, 1, 255, 0, 1, 1][..],
        ] {
            drive(data);
        }
        // Contract 0.2.0's model functions, each with a few bytes of arguments.
        for function in 32..40u8 {
            drive(&[0, 0, function, 3, b'r', b'e', b'l', 2, 1, 255, 0, 1, function, 1, 4, 0]);
        }
    }
}
