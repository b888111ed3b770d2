//! The `onnx` interface of contract 0.1.0: the translation builder and the
//! model under IR repair (0.2.0's interface, `host_onnx_v0_2.rs`, reuses the
//! builder and the model's reads). Each method bounds what the guest asks of
//! it before allocating: identifiers (op type, domain, value and attribute
//! names) against `MAX_NAME_BYTES`, `add-node`'s `outputs` against
//! `MAX_NODE_OUTPUTS`, the strings and lists handed in against the write
//! budget, and what the host allocates for them (an output name derived from
//! the op type per output) against the write budget at its host size.
//! Answers are charged against the read budget before they are built, ONNX
//! nodes added against the node budget. The model keeps its own journal of a
//! call's changes (`ir_model.rs`).

use std::mem::size_of;

use wasmtime::component::{Resource, ResourceTable};

use super::bindings::wit_onnx as o;
use super::bindings::wit_types as t;
use super::bindings::NoState;
use super::bindings::{BuilderRef, ModelRef};
use super::ir_model::IrModel;
use super::sandbox::{CallBudget, Ticks, MAX_NODE_OUTPUTS};
use crate::graph::ValueId;
use crate::onnx::{Attribute, Node, TranslationBuilder};

/// ONNX state lent to a call.
#[derive(Debug, Default)]
pub struct OnnxState {
    pub builder: TranslationBuilder,
    /// The model under repair; it keeps its own journal of a call's changes.
    pub model: IrModel,
    /// Builder nodes when the call started, for rollback.
    builder_nodes: usize,
    /// Values the call bound, for rollback: a call's own work, never the
    /// builder's whole table (a model's worth of names per call).
    bound: Vec<ValueId>,
}

impl OnnxState {
    /// Marks the start of a call.
    pub fn begin(&mut self) {
        self.model.begin();
        self.bound.clear();
        self.builder_nodes = self.builder.nodes.len();
    }

    /// Undoes what the call did to the builder and the model.
    pub fn rollback(&mut self) {
        self.model.rollback();
        self.builder.nodes.truncate(self.builder_nodes);
        for value in self.bound.drain(..) {
            self.builder.value_names.remove(&value);
        }
    }
}

type Answer<T> = wasmtime::Result<Result<T, t::Error>>;

fn err<T>(message: impl Into<String>) -> Answer<T> {
    Ok(Err(t::Error { message: message.into(), node: None }))
}

/// The `onnx` interface's view of the store.
pub struct OnnxHost<'a> {
    pub(super) table: &'a mut ResourceTable,
    pub(super) onnx: &'a mut OnnxState,
    pub(super) budget: &'a mut CallBudget,
}

impl o::Host for OnnxHost<'_> {}
impl super::bindings::wit_patching::Host for NoState {}

/// Longest `_N` suffix a fresh output name gets (`fresh_name`: the op type in
/// lower case, `_`, a `u64` counter).
const NAME_SUFFIX_BYTES: usize = 21;

impl OnnxHost<'_> {
    /// Identifiers within `MAX_NAME_BYTES`: the names of attributes handed in.
    fn bound_attribute_names(
        &mut self,
        function: &str,
        attributes: &[o::NamedAttribute],
    ) -> wasmtime::Result<()> {
        for a in attributes {
            self.budget.check_name(function, "an attribute name", &a.name)?;
        }
        Ok(())
    }
}

impl o::HostBuilder for OnnxHost<'_> {
    fn value_name(&mut self, _: Resource<BuilderRef>, value: u32) -> Answer<String> {
        match self.onnx.builder.value_names.get(&ValueId(value)) {
            Some(name) => {
                self.budget.charge_read("builder.value-name", name.len() + 8)?;
                Ok(Ok(name.clone()))
            }
            None => err(format!("value {value} has no ONNX name yet (not translated)")),
        }
    }

    fn add_node(
        &mut self,
        _: Resource<BuilderRef>,
        op_type: String,
        domain: String,
        inputs: Vec<String>,
        outputs: u32,
        attributes: Vec<o::NamedAttribute>,
    ) -> Answer<Vec<String>> {
        const F: &str = "builder.add-node";
        let handed_in = op_type.len()
            + domain.len()
            + strings_size(&inputs)
            + attributes.iter().map(named_attribute_size).sum::<usize>();
        self.budget.charge_write(F, handed_in)?;
        self.budget.charge_node(F)?;
        self.budget.check_name(F, "an op type", &op_type)?;
        self.budget.check_name(F, "a domain", &domain)?;
        for input in &inputs {
            self.budget.check_name(F, "an input name", input)?;
        }
        self.bound_attribute_names(F, &attributes)?;
        let outputs = outputs as usize;
        self.budget.check_count(F, "outputs", outputs, MAX_NODE_OUTPUTS)?;
        if op_type.is_empty() {
            return err("op-type is empty");
        }
        // Each output gets a name derived from the op type, held twice on the
        // host (the node's outputs, the answer) and read back by the guest.
        let name = op_type.len() + NAME_SUFFIX_BYTES;
        let what = format!("{outputs} output names of a {}-byte op type", op_type.len());
        self.budget.charge_host(F, &what, outputs.checked_mul(2 * (name + size_of::<String>())))?;
        self.budget.charge_read(F, outputs.saturating_mul(name + 8).saturating_add(8))?;
        let mut ticks = Ticks::new(F);
        let mut names = Vec::with_capacity(outputs);
        for _ in 0..outputs {
            ticks.step(self.budget)?;
            names.push(self.onnx.builder.fresh_name(&op_type));
        }
        self.onnx.builder.nodes.push(Node {
            op_type,
            domain,
            inputs,
            outputs: names.clone(),
            attributes: attributes
                .into_iter()
                .map(|a| (a.name, from_wit_attribute(a.value)))
                .collect(),
            function: None,
        });
        Ok(Ok(names))
    }

    fn bind(&mut self, _: Resource<BuilderRef>, value: u32, name: String) -> Answer<()> {
        const F: &str = "builder.bind";
        self.budget.charge_write(F, name.len() + 8)?;
        self.budget.check_name(F, "a value name", &name)?;
        if self.onnx.builder.value_names.contains_key(&ValueId(value)) {
            return err(format!("value {value} is already bound"));
        }
        self.onnx.builder.value_names.insert(ValueId(value), name);
        self.onnx.bound.push(ValueId(value));
        Ok(Ok(()))
    }

    fn opset(&mut self, _: Resource<BuilderRef>) -> wasmtime::Result<u32> {
        Ok(self.onnx.builder.opset)
    }

    fn drop(&mut self, builder: Resource<BuilderRef>) -> wasmtime::Result<()> {
        let _ = self.table.delete(builder);
        Ok(())
    }
}

impl OnnxHost<'_> {
    fn onnx_node(&self, node: u32) -> Result<&Node, t::Error> {
        self.onnx
            .model
            .node(node)
            .ok_or(t::Error { message: format!("no ONNX node {node}"), node: None })
    }

    /// Charges a read of `size(node)` bytes of node `node`, then answers
    /// `build(node)`: nothing is copied past the budget.
    fn read_node<T>(
        &mut self,
        function: &str,
        node: u32,
        size: impl Fn(&Node) -> usize,
        build: impl Fn(&Node) -> T,
    ) -> Answer<T> {
        let bytes = match self.onnx_node(node) {
            Ok(n) => size(n),
            Err(e) => return Ok(Err(e)),
        };
        self.budget.charge_read(function, bytes)?;
        Ok(self.onnx_node(node).map(build))
    }

    /// The live nodes in topological order, the answer charged first.
    pub(super) fn model_nodes(&mut self, function: &'static str) -> wasmtime::Result<Vec<u32>> {
        let n = self.onnx.model.handles() as usize;
        self.budget.charge_read(function, 8 + n * 4)?;
        self.budget.check_deadline(function)?;
        Ok(self.onnx.model.order())
    }

    pub(super) fn model_attribute(&mut self, node: u32, name: &str) -> Answer<Option<Attribute>> {
        const F: &str = "model.attribute";
        self.budget.charge_write(F, name.len() + 8)?;
        self.budget.check_name(F, "an attribute name", name)?;
        self.read_node(
            F,
            node,
            |n| 4 + n.attribute(name).map_or(0, ir_attribute_size),
            |n| n.attribute(name).cloned(),
        )
    }

    /// Sets an attribute handed in (already charged as written).
    pub(super) fn model_set_attribute(
        &mut self,
        node: u32,
        name: String,
        value: Attribute,
    ) -> Answer<()> {
        if self.onnx.model.node(node).is_none() {
            return err(format!("no ONNX node {node}"));
        }
        self.onnx.model.set_attribute(node, &name, value);
        Ok(Ok(()))
    }
}

impl o::HostModel for OnnxHost<'_> {
    fn nodes(&mut self, _: Resource<ModelRef>) -> wasmtime::Result<Vec<u32>> {
        self.model_nodes("model.nodes")
    }

    fn op_type(&mut self, _: Resource<ModelRef>, node: u32) -> Answer<String> {
        self.read_node("model.op-type", node, |n| n.op_type.len() + 8, |n| n.op_type.clone())
    }

    fn domain(&mut self, _: Resource<ModelRef>, node: u32) -> Answer<String> {
        self.read_node("model.domain", node, |n| n.domain.len() + 8, |n| n.domain.clone())
    }

    fn inputs(&mut self, _: Resource<ModelRef>, node: u32) -> Answer<Vec<String>> {
        self.read_node("model.inputs", node, |n| strings_size(&n.inputs), |n| n.inputs.clone())
    }

    fn outputs(&mut self, _: Resource<ModelRef>, node: u32) -> Answer<Vec<String>> {
        self.read_node("model.outputs", node, |n| strings_size(&n.outputs), |n| n.outputs.clone())
    }

    fn attribute(
        &mut self,
        _: Resource<ModelRef>,
        node: u32,
        name: String,
    ) -> Answer<Option<o::Attribute>> {
        Ok(self.model_attribute(node, &name)?.map(|a| a.as_ref().map(to_wit_attribute)))
    }

    fn set_attribute(
        &mut self,
        _: Resource<ModelRef>,
        node: u32,
        attribute: o::NamedAttribute,
    ) -> Answer<()> {
        const F: &str = "model.set-attribute";
        self.budget.charge_write(F, named_attribute_size(&attribute))?;
        self.bound_attribute_names(F, std::slice::from_ref(&attribute))?;
        self.model_set_attribute(node, attribute.name, from_wit_attribute(attribute.value))
    }

    fn drop(&mut self, model: Resource<ModelRef>) -> wasmtime::Result<()> {
        let _ = self.table.delete(model);
        Ok(())
    }
}

/// Approximate bytes in guest memory, for the read and write budgets.
fn strings_size(v: &[String]) -> usize {
    8 + v.iter().map(|s| s.len() + 8).sum::<usize>()
}

fn attribute_size(a: &o::Attribute) -> usize {
    16 + match a {
        o::Attribute::Int(_) | o::Attribute::Float(_) => 0,
        o::Attribute::Ints(v) => v.len() * 8,
        o::Attribute::Floats(v) => v.len() * 4,
        o::Attribute::Str(s) => s.len(),
        o::Attribute::Strs(v) => strings_size(v),
    }
}

fn named_attribute_size(a: &o::NamedAttribute) -> usize {
    a.name.len() + 8 + attribute_size(&a.value)
}

/// `attribute_size` of the IR form, known before the contract form is built.
fn ir_attribute_size(a: &Attribute) -> usize {
    16 + match a {
        Attribute::Int(_) | Attribute::Float(_) => 0,
        Attribute::Ints(v) => v.len() * 8,
        Attribute::Floats(v) => v.len() * 4,
        Attribute::Str(s) => s.len(),
        Attribute::Strs(v) => strings_size(v),
    }
}

fn from_wit_attribute(a: o::Attribute) -> Attribute {
    match a {
        o::Attribute::Int(i) => Attribute::Int(i),
        o::Attribute::Ints(v) => Attribute::Ints(v),
        o::Attribute::Float(f) => Attribute::Float(f),
        o::Attribute::Floats(v) => Attribute::Floats(v),
        o::Attribute::Str(s) => Attribute::Str(s),
        o::Attribute::Strs(v) => Attribute::Strs(v),
    }
}

fn to_wit_attribute(a: &Attribute) -> o::Attribute {
    match a.clone() {
        Attribute::Int(i) => o::Attribute::Int(i),
        Attribute::Ints(v) => o::Attribute::Ints(v),
        Attribute::Float(f) => o::Attribute::Float(f),
        Attribute::Floats(v) => o::Attribute::Floats(v),
        Attribute::Str(s) => o::Attribute::Str(s),
        Attribute::Strs(v) => o::Attribute::Strs(v),
    }
}
