//! The `onnx` interface of contract 0.2.0: the builder as in 0.1.0, the model
//! grown for rewrites of patterns (fusions): producers and consumers, graph
//! inputs and outputs, value types, small constants, and adding, removing and
//! rewiring nodes, small initializers and opset imports. Each method bounds
//! and charges what the guest asks of it before allocating, as 0.1.0's do
//! (`host_onnx.rs`); nodes added count against the node budget, names and
//! constants handed in against the write budget, answers against the read
//! budget, and host work over the whole model checks the call's deadline.

use std::mem::size_of;

use wasmtime::component::Resource;

use super::bindings::wit_onnx as o1;
use super::bindings::wit_onnx_v0_2 as o;
use super::bindings::wit_types as t;
use super::bindings::{BuilderRef, ModelRef};
use super::host_onnx::OnnxHost;
use super::ir_model::{self, Constant, ConstantData, MAX_CONSTANT_ELEMENTS};
use super::sandbox::{Ticks, MAX_NODE_OUTPUTS};
use crate::onnx::{Attribute, Node};

type Answer<T> = wasmtime::Result<Result<T, t::Error>>;

fn err<T>(message: impl Into<String>) -> Answer<T> {
    Ok(Err(t::Error { message: message.into(), node: None }))
}

impl o::Host for OnnxHost<'_> {}

impl o::HostBuilder for OnnxHost<'_> {
    fn value_name(&mut self, b: Resource<BuilderRef>, value: u32) -> Answer<String> {
        o1::HostBuilder::value_name(self, b, value)
    }

    fn add_node(
        &mut self,
        b: Resource<BuilderRef>,
        op_type: String,
        domain: String,
        inputs: Vec<String>,
        outputs: u32,
        attributes: Vec<o::NamedAttribute>,
    ) -> Answer<Vec<String>> {
        let attributes = attributes
            .into_iter()
            .map(|a| o1::NamedAttribute { name: a.name, value: to_v0_1(a.value) })
            .collect();
        o1::HostBuilder::add_node(self, b, op_type, domain, inputs, outputs, attributes)
    }

    fn bind(&mut self, b: Resource<BuilderRef>, value: u32, name: String) -> Answer<()> {
        o1::HostBuilder::bind(self, b, value, name)
    }

    fn opset(&mut self, b: Resource<BuilderRef>) -> wasmtime::Result<u32> {
        o1::HostBuilder::opset(self, b)
    }

    fn drop(&mut self, builder: Resource<BuilderRef>) -> wasmtime::Result<()> {
        o1::HostBuilder::drop(self, builder)
    }
}

impl o::HostModel for OnnxHost<'_> {
    fn nodes(&mut self, _: Resource<ModelRef>) -> wasmtime::Result<Vec<u32>> {
        self.model_nodes("model.nodes")
    }

    fn op_type(&mut self, m: Resource<ModelRef>, node: u32) -> Answer<String> {
        o1::HostModel::op_type(self, m, node)
    }

    fn domain(&mut self, m: Resource<ModelRef>, node: u32) -> Answer<String> {
        o1::HostModel::domain(self, m, node)
    }

    fn inputs(&mut self, m: Resource<ModelRef>, node: u32) -> Answer<Vec<String>> {
        o1::HostModel::inputs(self, m, node)
    }

    fn outputs(&mut self, m: Resource<ModelRef>, node: u32) -> Answer<Vec<String>> {
        o1::HostModel::outputs(self, m, node)
    }

    fn attribute(
        &mut self,
        _: Resource<ModelRef>,
        node: u32,
        name: String,
    ) -> Answer<Option<o::Attribute>> {
        Ok(self.model_attribute(node, &name)?.map(|a| a.as_ref().map(to_wit)))
    }

    fn set_attribute(
        &mut self,
        _: Resource<ModelRef>,
        node: u32,
        attribute: o::NamedAttribute,
    ) -> Answer<()> {
        const F: &str = "model.set-attribute";
        self.budget.charge_write(F, attribute.name.len() + 8 + attribute_size(&attribute.value))?;
        self.budget.check_name(F, "an attribute name", &attribute.name)?;
        self.model_set_attribute(node, attribute.name, from_wit(attribute.value))
    }

    fn producer(&mut self, _: Resource<ModelRef>, value: String) -> wasmtime::Result<Option<u32>> {
        const F: &str = "model.producer";
        self.value_name_in(F, &value)?;
        self.budget.charge_read(F, 8)?;
        Ok(self.onnx.model.producer(&value))
    }

    fn consumers(&mut self, _: Resource<ModelRef>, value: String) -> wasmtime::Result<Vec<u32>> {
        const F: &str = "model.consumers";
        self.value_name_in(F, &value)?;
        // At most every node reads it: the answer's bound, charged first.
        self.budget.charge_read(F, 8 + self.onnx.model.handles() as usize * 4)?;
        Ok(self.onnx.model.consumers(&value))
    }

    fn is_graph_output(&mut self, _: Resource<ModelRef>, value: String) -> wasmtime::Result<bool> {
        self.value_name_in("model.is-graph-output", &value)?;
        Ok(self.onnx.model.is_graph_output(&value))
    }

    fn is_graph_input(&mut self, _: Resource<ModelRef>, value: String) -> wasmtime::Result<bool> {
        self.value_name_in("model.is-graph-input", &value)?;
        Ok(self.onnx.model.is_graph_input(&value))
    }

    fn value_type(
        &mut self,
        _: Resource<ModelRef>,
        value: String,
    ) -> wasmtime::Result<Option<o::ValueType>> {
        const F: &str = "model.value-type";
        self.value_name_in(F, &value)?;
        let Some(known) = self.onnx.model.value_type(&value) else { return Ok(None) };
        let dims = known.shape.iter().flatten();
        let bytes = 24 + dims.map(|d| 16 + dim_name(d).len()).sum::<usize>();
        self.budget.charge_read(F, bytes)?;
        let known = self.onnx.model.value_type(&value).expect("looked up above");
        Ok(Some(o::ValueType {
            elem_type: known.elem_type,
            shape: known.shape.as_ref().map(|s| {
                s.iter()
                    .map(|d| match d {
                        ir_model::Dim::Fixed(n) => o::Dim::Fixed(*n),
                        ir_model::Dim::Symbolic(s) => o::Dim::Symbolic(s.clone()),
                    })
                    .collect()
            }),
        }))
    }

    fn constant(
        &mut self,
        _: Resource<ModelRef>,
        value: String,
        max_elements: u32,
    ) -> wasmtime::Result<Option<o::Constant>> {
        const F: &str = "model.constant";
        self.value_name_in(F, &value)?;
        let max = max_elements as usize;
        self.budget.check_count(F, "constant elements", max, MAX_CONSTANT_ELEMENTS)?;
        let Some(c) = self.onnx.model.constant(&value) else { return Ok(None) };
        if c.data.len() > max {
            return Ok(None);
        }
        self.budget.charge_read(F, 32 + c.dims.len() * 8 + c.data.len() * 8)?;
        Ok(Some(o::Constant {
            elem_type: c.elem_type,
            dims: c.dims,
            data: match c.data {
                ConstantData::Floats(v) => o::ConstantData::Floats(v),
                ConstantData::Ints(v) => o::ConstantData::Ints(v),
            },
        }))
    }

    fn add_node(
        &mut self,
        _: Resource<ModelRef>,
        op_type: String,
        domain: String,
        inputs: Vec<String>,
        outputs: Vec<String>,
        attributes: Vec<o::NamedAttribute>,
    ) -> Answer<(u32, Vec<String>)> {
        const F: &str = "model.add-node";
        let handed_in = op_type.len()
            + domain.len()
            + strings_size(&inputs)
            + strings_size(&outputs)
            + attributes.iter().map(|a| a.name.len() + 8 + attribute_size(&a.value)).sum::<usize>();
        self.budget.charge_write(F, handed_in)?;
        self.budget.charge_node(F)?;
        self.budget.check_name(F, "an op type", &op_type)?;
        self.budget.check_name(F, "a domain", &domain)?;
        for input in &inputs {
            self.budget.check_name(F, "an input name", input)?;
        }
        for a in &attributes {
            self.budget.check_name(F, "an attribute name", &a.name)?;
        }
        for hint in &outputs {
            self.budget.check_name(F, "an output name hint", hint)?;
        }
        self.budget.check_count(F, "outputs", outputs.len(), MAX_NODE_OUTPUTS)?;
        if op_type.is_empty() {
            return err("op-type is empty");
        }
        // Each output's name is its hint and a suffix, held twice on the host
        // (the node's outputs, the answer) and read back by the guest; the
        // node itself is kept in the model.
        let names_size = strings_size(&outputs) + outputs.len() * NAME_SUFFIX_BYTES;
        let what = format!("a node with {} outputs", outputs.len());
        let host =
            names_size.checked_mul(2).and_then(|n| n.checked_add(size_of::<Node>() + handed_in));
        self.budget.charge_host(F, &what, host)?;
        self.budget.charge_read(F, names_size.saturating_add(16))?;
        let mut ticks = Ticks::new(F);
        let mut names = Vec::with_capacity(outputs.len());
        for hint in &outputs {
            ticks.step(self.budget)?;
            let name = if hint.is_empty() {
                String::new()
            } else {
                self.onnx.model.fresh_name(hint, &names)
            };
            names.push(name);
        }
        let handle = self.onnx.model.add_node(Node {
            op_type,
            domain,
            inputs,
            outputs: names.clone(),
            attributes: attributes.into_iter().map(|a| (a.name, from_wit(a.value))).collect(),
            function: None,
        });
        Ok(Ok((handle, names)))
    }

    fn remove_node(&mut self, _: Resource<ModelRef>, node: u32) -> Answer<()> {
        self.budget.check_deadline("model.remove-node")?;
        if !self.onnx.model.remove_node(node) {
            return err(format!("no ONNX node {node}"));
        }
        Ok(Ok(()))
    }

    fn replace_uses(&mut self, _: Resource<ModelRef>, old: String, new: String) -> Answer<()> {
        const F: &str = "model.replace-uses";
        self.value_name_in(F, &old)?;
        self.value_name_in(F, &new)?;
        // Each read renamed holds a copy of `new` (or of `old`, for an output).
        let renamed = self.onnx.model.consumers(&old).len() + 1;
        let what = format!("{renamed} renamed reads");
        self.budget.charge_host(F, &what, renamed.checked_mul(old.len().max(new.len()) + 8))?;
        self.budget.check_deadline(F)?;
        Ok(self
            .onnx
            .model
            .replace_uses(&old, &new)
            .map_err(|m| t::Error { message: m, node: None }))
    }

    fn add_initializer(
        &mut self,
        _: Resource<ModelRef>,
        name_hint: String,
        value: o::Constant,
    ) -> Answer<String> {
        const F: &str = "model.add-initializer";
        let elements = match &value.data {
            o::ConstantData::Floats(v) => v.len(),
            o::ConstantData::Ints(v) => v.len(),
        };
        self.budget.charge_write(F, name_hint.len() + value.dims.len() * 8 + elements * 8)?;
        self.budget.check_name(F, "an initializer name", &name_hint)?;
        self.budget.check_count(F, "initializer elements", elements, MAX_CONSTANT_ELEMENTS)?;
        let constant = Constant {
            elem_type: value.elem_type,
            dims: value.dims,
            data: match value.data {
                o::ConstantData::Floats(v) => ConstantData::Floats(v),
                o::ConstantData::Ints(v) => ConstantData::Ints(v),
            },
        };
        if !constant.consistent() {
            return err(format!(
                "add-initializer `{name_hint}`: dims {:?} do not hold {elements} elements",
                constant.dims
            ));
        }
        if constant.to_bytes().is_none() {
            return err(format!(
                "add-initializer `{name_hint}`: element type {} with {} data is not supported (floats as 1 float, 10 float16, 11 double, 16 bfloat16; ints as 6 int32, 7 int64)",
                constant.elem_type,
                if matches!(constant.data, ConstantData::Floats(_)) { "float" } else { "int" }
            ));
        }
        let hint = if name_hint.is_empty() { "initializer" } else { name_hint.as_str() };
        let kept = hint.len() + NAME_SUFFIX_BYTES + elements * 8 + size_of::<(String, Constant)>();
        self.budget.charge_host(F, &"the initializer", Some(kept))?;
        self.budget.charge_read(F, hint.len() + NAME_SUFFIX_BYTES + 8)?;
        let name = self.onnx.model.fresh_name(hint, &[]);
        self.onnx.model.add_initializer(name.clone(), constant);
        Ok(Ok(name))
    }

    fn import_opset(&mut self, _: Resource<ModelRef>, domain: String, version: u32) -> Answer<()> {
        const F: &str = "model.import-opset";
        self.budget.charge_write(F, domain.len() + 8)?;
        self.budget.check_name(F, "a domain", &domain)?;
        if domain.is_empty() || domain == "ai.onnx" {
            return err("import-opset: the default domain's opset is the model's own (--opset)");
        }
        if version != 1 {
            return err(format!(
                "import-opset `{domain}` version {version}: custom domains are imported at version 1"
            ));
        }
        self.budget.charge_host(F, &"the domain's name", Some(domain.len() + 24))?;
        self.onnx.model.import_domain(&domain);
        Ok(Ok(()))
    }

    fn drop(&mut self, model: Resource<ModelRef>) -> wasmtime::Result<()> {
        o1::HostModel::drop(self, model)
    }
}

impl OnnxHost<'_> {
    /// A value name handed in: charged as written, bounded as an identifier.
    fn value_name_in(&mut self, function: &'static str, name: &str) -> wasmtime::Result<()> {
        self.budget.charge_write(function, name.len() + 8)?;
        self.budget.check_name(function, "a value name", name)?;
        // Lookups may rebuild the model's index after a mutation.
        self.budget.check_deadline(function)
    }
}

/// Longest `_N` suffix a fresh name gets (a `u64` counter).
const NAME_SUFFIX_BYTES: usize = 21;

fn dim_name(d: &ir_model::Dim) -> &str {
    match d {
        ir_model::Dim::Fixed(_) => "",
        ir_model::Dim::Symbolic(s) => s,
    }
}

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

fn from_wit(a: o::Attribute) -> Attribute {
    match a {
        o::Attribute::Int(i) => Attribute::Int(i),
        o::Attribute::Ints(v) => Attribute::Ints(v),
        o::Attribute::Float(f) => Attribute::Float(f),
        o::Attribute::Floats(v) => Attribute::Floats(v),
        o::Attribute::Str(s) => Attribute::Str(s),
        o::Attribute::Strs(v) => Attribute::Strs(v),
    }
}

fn to_wit(a: &Attribute) -> o::Attribute {
    match a.clone() {
        Attribute::Int(i) => o::Attribute::Int(i),
        Attribute::Ints(v) => o::Attribute::Ints(v),
        Attribute::Float(f) => o::Attribute::Float(f),
        Attribute::Floats(v) => o::Attribute::Floats(v),
        Attribute::Str(s) => o::Attribute::Str(s),
        Attribute::Strs(v) => o::Attribute::Strs(v),
    }
}

fn to_v0_1(a: o::Attribute) -> o1::Attribute {
    match a {
        o::Attribute::Int(i) => o1::Attribute::Int(i),
        o::Attribute::Ints(v) => o1::Attribute::Ints(v),
        o::Attribute::Float(f) => o1::Attribute::Float(f),
        o::Attribute::Floats(v) => o1::Attribute::Floats(v),
        o::Attribute::Str(s) => o1::Attribute::Str(s),
        o::Attribute::Strs(v) => o1::Attribute::Strs(v),
    }
}
