//! The `onnx` interface of the contract: the translation builder and the model
//! under IR repair. Answers are charged against the call's read budget, the
//! strings and lists the guest hands in against its write budget, ONNX nodes
//! added against its node budget.

use wasmtime::component::{Resource, ResourceTable};

use super::bindings::wit_onnx as o;
use super::bindings::wit_types as t;
use super::bindings::{BuilderRef, ModelRef};
use super::sandbox::CallBudget;
use super::bindings::NoState;
use crate::graph::ValueId;
use crate::onnx::{Attribute, Model, Node, TranslationBuilder};

/// ONNX state lent to a call.
#[derive(Debug, Default)]
pub struct OnnxState {
    pub builder: TranslationBuilder,
    pub model: Model,
    /// Attribute values overwritten in this call, oldest first, for rollback.
    overwritten: Vec<(u32, String, Option<Attribute>)>,
    /// Builder sizes when the call started, for rollback.
    builder_mark: (usize, Vec<ValueId>),
}

impl OnnxState {
    /// Marks the start of a call.
    pub fn begin(&mut self) {
        self.overwritten.clear();
        self.builder_mark = (self.builder.nodes.len(), self.builder.value_names.keys().copied().collect());
    }

    /// Undoes what the call did to the builder and the model.
    pub fn rollback(&mut self) {
        for (node, name, old) in self.overwritten.drain(..).rev() {
            let n = &mut self.model.nodes[node as usize];
            match old {
                Some(a) => n.set_attribute(&name, a),
                None => n.attributes.retain(|(k, _)| *k != name),
            }
        }
        let (nodes, bound) = std::mem::take(&mut self.builder_mark);
        self.builder.nodes.truncate(nodes);
        self.builder.value_names.retain(|k, _| bound.contains(k));
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

impl o::HostBuilder for OnnxHost<'_> {
    fn value_name(&mut self, _: Resource<BuilderRef>, value: u32) -> Answer<String> {
        match self.onnx.builder.value_names.get(&ValueId(value)) {
            Some(name) => {
                let name = name.clone();
                self.budget.charge_read(name.len())?;
                Ok(Ok(name))
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
        self.budget.charge_write(op_type.len() + domain.len() + strings_size(&inputs) + attributes.iter().map(named_attribute_size).sum::<usize>())?;
        self.budget.charge_node()?;
        if op_type.is_empty() {
            return err("op-type is empty");
        }
        let names: Vec<String> = (0..outputs).map(|_| self.onnx.builder.fresh_name(&op_type)).collect();
        self.budget.charge_read(names.iter().map(String::len).sum())?;
        self.onnx.builder.nodes.push(Node {
            op_type,
            domain,
            inputs,
            outputs: names.clone(),
            attributes: attributes.into_iter().map(|a| (a.name, from_wit_attribute(a.value))).collect(),
            function: None,
        });
        Ok(Ok(names))
    }

    fn bind(&mut self, _: Resource<BuilderRef>, value: u32, name: String) -> Answer<()> {
        self.budget.charge_write(name.len() + 8)?;
        if self.onnx.builder.value_names.contains_key(&ValueId(value)) {
            return err(format!("value {value} is already bound"));
        }
        self.onnx.builder.value_names.insert(ValueId(value), name);
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
        self.onnx.model.nodes.get(node as usize).ok_or(t::Error { message: format!("no ONNX node {node}"), node: None })
    }
}

impl o::HostModel for OnnxHost<'_> {
    fn nodes(&mut self, _: Resource<ModelRef>) -> wasmtime::Result<Vec<u32>> {
        let n = self.onnx.model.nodes.len() as u32;
        self.budget.charge_read(n as usize * 4)?;
        Ok((0..n).collect())
    }

    fn op_type(&mut self, _: Resource<ModelRef>, node: u32) -> Answer<String> {
        let r = self.onnx_node(node).map(|n| n.op_type.clone());
        if let Ok(s) = &r {
            self.budget.charge_read(s.len() + 8)?;
        }
        Ok(r)
    }

    fn domain(&mut self, _: Resource<ModelRef>, node: u32) -> Answer<String> {
        let r = self.onnx_node(node).map(|n| n.domain.clone());
        if let Ok(s) = &r {
            self.budget.charge_read(s.len() + 8)?;
        }
        Ok(r)
    }

    fn inputs(&mut self, _: Resource<ModelRef>, node: u32) -> Answer<Vec<String>> {
        let r = self.onnx_node(node).map(|n| n.inputs.clone());
        if let Ok(v) = &r {
            self.budget.charge_read(v.iter().map(|s| s.len() + 8).sum())?;
        }
        Ok(r)
    }

    fn outputs(&mut self, _: Resource<ModelRef>, node: u32) -> Answer<Vec<String>> {
        let r = self.onnx_node(node).map(|n| n.outputs.clone());
        if let Ok(v) = &r {
            self.budget.charge_read(v.iter().map(|s| s.len() + 8).sum())?;
        }
        Ok(r)
    }

    fn attribute(&mut self, _: Resource<ModelRef>, node: u32, name: String) -> Answer<Option<o::Attribute>> {
        self.budget.charge_write(name.len() + 8)?;
        let r = self.onnx_node(node).map(|n| n.attribute(&name).map(to_wit_attribute));
        if let Ok(a) = &r {
            self.budget.charge_read(4 + a.as_ref().map_or(0, attribute_size))?;
        }
        Ok(r)
    }

    fn set_attribute(&mut self, _: Resource<ModelRef>, node: u32, attribute: o::NamedAttribute) -> Answer<()> {
        self.budget.charge_write(named_attribute_size(&attribute))?;
        match self.onnx.model.nodes.get_mut(node as usize) {
            Some(n) => {
                let old = n.attribute(&attribute.name).cloned();
                n.set_attribute(&attribute.name, from_wit_attribute(attribute.value));
                self.onnx.overwritten.push((node, attribute.name, old));
                Ok(Ok(()))
            }
            None => err(format!("no ONNX node {node}")),
        }
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
