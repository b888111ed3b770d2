//! The ONNX model the IR-fix stage lends to plugins: the lowered, optimized
//! main graph's nodes under stable handles, with what a rewrite needs to
//! know around them (graph inputs and outputs, value types, small constants)
//! and what it may add (initializers, opset imports).
//!
//! A call's changes are all-or-nothing: the first mutation of a call saves
//! the mutable part (copy on write, so a call that only reads copies
//! nothing), a failed call restores it, and a call that mutated is kept only
//! if the graph it leaves is well formed ([`IrModel::check`]). The saved copy
//! is proportional to the model, never to what the guest hands in, and is
//! taken at most once per call.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::onnx::{Attribute, Node};

/// Elements of a constant a plugin may read or add in one piece: scalars,
/// shape vectors, small scales.
pub const MAX_CONSTANT_ELEMENTS: usize = 4096;

/// One axis of a value's shape.
#[derive(Debug, Clone, PartialEq)]
pub enum Dim {
    Fixed(i64),
    Symbolic(String),
}

/// What is known of a value's type: ONNX element type, shape when known.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueType {
    pub elem_type: i32,
    pub shape: Option<Vec<Dim>>,
}

/// A small tensor's value, in the wider type of its kind.
#[derive(Debug, Clone, PartialEq)]
pub enum ConstantData {
    Floats(Vec<f64>),
    Ints(Vec<i64>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Constant {
    pub elem_type: i32,
    pub dims: Vec<i64>,
    pub data: ConstantData,
}

impl ConstantData {
    pub fn len(&self) -> usize {
        match self {
            ConstantData::Floats(v) => v.len(),
            ConstantData::Ints(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// ONNX element types a constant can be read in or added as.
const FLOAT: i32 = 1;
const UINT8: i32 = 2;
const INT8: i32 = 3;
const INT32: i32 = 6;
const INT64: i32 = 7;
const BOOL: i32 = 9;
const FLOAT16: i32 = 10;
const DOUBLE: i32 = 11;
const BFLOAT16: i32 = 16;

impl Constant {
    /// Decodes an initializer's little-endian bytes; None for a type not read here.
    pub fn from_bytes(elem_type: i32, dims: &[i64], bytes: &[u8]) -> Option<Constant> {
        let floats = |size: usize, f: &dyn Fn(&[u8]) -> f64| {
            ConstantData::Floats(bytes.chunks_exact(size).map(f).collect())
        };
        let ints = |size: usize, f: &dyn Fn(&[u8]) -> i64| {
            ConstantData::Ints(bytes.chunks_exact(size).map(f).collect())
        };
        let data = match elem_type {
            FLOAT => floats(4, &|b| f32::from_le_bytes(b.try_into().unwrap()) as f64),
            DOUBLE => floats(8, &|b| f64::from_le_bytes(b.try_into().unwrap())),
            FLOAT16 => floats(2, &|b| half::f16::from_le_bytes(b.try_into().unwrap()).to_f64()),
            BFLOAT16 => floats(2, &|b| half::bf16::from_le_bytes(b.try_into().unwrap()).to_f64()),
            INT32 => ints(4, &|b| i32::from_le_bytes(b.try_into().unwrap()) as i64),
            INT64 => ints(8, &|b| i64::from_le_bytes(b.try_into().unwrap())),
            INT8 => ints(1, &|b| b[0] as i8 as i64),
            UINT8 | BOOL => ints(1, &|b| b[0] as i64),
            _ => return None,
        };
        let constant = Constant { elem_type, dims: dims.to_vec(), data };
        constant.consistent().then_some(constant)
    }

    /// Whether the dims hold exactly the data's elements.
    pub fn consistent(&self) -> bool {
        self.dims.iter().all(|&d| d >= 0)
            && self.dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d as usize))
                == Some(self.data.len())
    }

    /// Little-endian bytes of an initializer of this value; None for an
    /// element type not written here, or data of the other kind.
    pub fn to_bytes(&self) -> Option<Vec<u8>> {
        Some(match (&self.data, self.elem_type) {
            (ConstantData::Floats(v), FLOAT) => {
                v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect()
            }
            (ConstantData::Floats(v), DOUBLE) => v.iter().flat_map(|&x| x.to_le_bytes()).collect(),
            (ConstantData::Floats(v), FLOAT16) => {
                v.iter().flat_map(|&x| half::f16::from_f64(x).to_le_bytes()).collect()
            }
            (ConstantData::Floats(v), BFLOAT16) => {
                v.iter().flat_map(|&x| half::bf16::from_f64(x).to_le_bytes()).collect()
            }
            (ConstantData::Ints(v), INT64) => v.iter().flat_map(|&x| x.to_le_bytes()).collect(),
            (ConstantData::Ints(v), INT32) => {
                v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect()
            }
            _ => return None,
        })
    }

    /// The value of a `Constant` node given by a scalar or list attribute.
    fn of_node(node: &Node) -> Option<Constant> {
        let (name, value) = node.attributes.first()?;
        let (elem_type, dims, data) = match (name.as_str(), value) {
            ("value_int", Attribute::Int(i)) => (INT64, vec![], ConstantData::Ints(vec![*i])),
            ("value_ints", Attribute::Ints(v)) => {
                (INT64, vec![v.len() as i64], ConstantData::Ints(v.clone()))
            }
            ("value_float", Attribute::Float(f)) => {
                (FLOAT, vec![], ConstantData::Floats(vec![*f as f64]))
            }
            ("value_floats", Attribute::Floats(v)) => (
                FLOAT,
                vec![v.len() as i64],
                ConstantData::Floats(v.iter().map(|&f| f as f64).collect()),
            ),
            _ => return None,
        };
        Some(Constant { elem_type, dims, data })
    }
}

/// What calls change, saved whole by a call's first mutation.
#[derive(Debug, Clone, Default, PartialEq)]
struct Mutable {
    /// Nodes by handle; a removed node leaves `None`.
    slots: Vec<Option<Node>>,
    /// The graph outputs' names, in order.
    outputs: Vec<String>,
    /// Initializers the plugins added, with their values.
    added_initializers: Vec<(String, Constant)>,
    /// Custom domains imported (each at version 1).
    domains: BTreeSet<String>,
    /// Counter of fresh names.
    fresh: u64,
    /// Values that replaced another (`replace-uses`), with the one they
    /// replaced: they have its type.
    replaced: HashMap<String, String>,
}

/// Who produces and who reads each value: rebuilt after a mutation, on demand.
#[derive(Debug, Clone, Default)]
struct Index {
    producers: HashMap<String, u32>,
    consumers: HashMap<String, Vec<u32>>,
    /// Each live handle's place in the topological order.
    positions: HashMap<u32, usize>,
}

/// The model under repair (see the module's doc).
#[derive(Debug, Clone, Default)]
pub struct IrModel {
    m: Mutable,
    /// The graph inputs' names (initializers excluded).
    inputs: HashSet<String>,
    /// Every initializer's name.
    initializers: HashSet<String>,
    /// What is known of values' types, by name.
    types: HashMap<String, ValueType>,
    /// Initializers of at most `MAX_CONSTANT_ELEMENTS` elements, decoded.
    constants: HashMap<String, Constant>,
    index: Option<Index>,
    saved: Option<Mutable>,
    /// Whether the current call mutated the model.
    mutated: bool,
}

/// Two models are equal when their nodes, outputs and additions are.
impl PartialEq for IrModel {
    fn eq(&self, other: &IrModel) -> bool {
        self.m == other.m
    }
}

/// The parts an [`IrModel`] is built from.
pub struct IrParts {
    pub nodes: Vec<Node>,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub initializers: HashSet<String>,
    pub types: HashMap<String, ValueType>,
    pub constants: HashMap<String, Constant>,
}

/// What the stage hands back to the model it was built from.
pub struct IrResult {
    /// Live nodes, in topological order.
    pub nodes: Vec<Node>,
    pub outputs: Vec<String>,
    pub added_initializers: Vec<(String, Constant)>,
    pub domains: BTreeSet<String>,
}

impl IrModel {
    pub fn new(parts: IrParts) -> IrModel {
        IrModel {
            m: Mutable {
                slots: parts.nodes.into_iter().map(Some).collect(),
                outputs: parts.outputs,
                ..Mutable::default()
            },
            inputs: parts.inputs.into_iter().collect(),
            initializers: parts.initializers,
            types: parts.types,
            constants: parts.constants,
            ..IrModel::default()
        }
    }

    /// A model of `nodes` alone: every value read and not produced is taken
    /// as a graph input, every value produced and not read as an output.
    pub fn of_nodes(nodes: Vec<Node>) -> IrModel {
        let produced: HashSet<&String> = nodes.iter().flat_map(|n| &n.outputs).collect();
        let read: HashSet<&String> = nodes.iter().flat_map(|n| &n.inputs).collect();
        let inputs = read.iter().filter(|v| !produced.contains(*v) && !v.is_empty());
        let outputs = nodes.iter().flat_map(|n| &n.outputs).filter(|v| !read.contains(v));
        IrModel::new(IrParts {
            inputs: inputs.map(|s| s.to_string()).collect(),
            outputs: outputs.cloned().collect(),
            nodes,
            initializers: HashSet::new(),
            types: HashMap::new(),
            constants: HashMap::new(),
        })
    }

    /// The stage's result: live nodes in topological order, and what was added.
    pub fn finish(mut self) -> IrResult {
        let order = self.order();
        let mut slots = std::mem::take(&mut self.m.slots);
        IrResult {
            nodes: order.into_iter().filter_map(|h| slots[h as usize].take()).collect(),
            outputs: self.m.outputs,
            added_initializers: self.m.added_initializers,
            domains: self.m.domains,
        }
    }

    // ── Calls ──

    /// Marks the start of a call.
    pub fn begin(&mut self) {
        self.saved = None;
        self.mutated = false;
    }

    /// Undoes what the call did.
    pub fn rollback(&mut self) {
        if let Some(saved) = self.saved.take() {
            self.m = saved;
            self.index = None;
        }
        self.mutated = false;
    }

    /// Whether the current call changed anything.
    pub fn mutated(&self) -> bool {
        self.mutated
    }

    /// The mutable part, saved first if this is the call's first mutation.
    /// The index is the caller's to keep up to date (or drop).
    fn mutate(&mut self) -> &mut Mutable {
        if self.saved.is_none() {
            self.saved = Some(self.m.clone());
        }
        self.mutated = true;
        &mut self.m
    }

    // ── Reads ──

    /// Handles ever given out (live or removed).
    pub fn handles(&self) -> u32 {
        self.m.slots.len() as u32
    }

    pub fn node(&self, handle: u32) -> Option<&Node> {
        self.m.slots.get(handle as usize).and_then(Option::as_ref)
    }

    pub fn live_nodes(&self) -> impl Iterator<Item = &Node> {
        self.m.slots.iter().flatten()
    }

    pub fn is_graph_output(&self, value: &str) -> bool {
        self.m.outputs.iter().any(|o| o == value)
    }

    pub fn is_graph_input(&self, value: &str) -> bool {
        self.inputs.contains(value)
    }

    /// `value`'s type, or that of the value it replaced (a rewrite computes
    /// the same tensor).
    pub fn value_type(&self, value: &str) -> Option<&ValueType> {
        let mut value = value;
        // Each replacement names a value that existed before it: no cycle, but bounded anyway.
        for _ in 0..=self.m.replaced.len() {
            if let Some(t) = self.types.get(value) {
                return Some(t);
            }
            value = self.m.replaced.get(value)?;
        }
        None
    }

    fn is_initializer(&self, value: &str) -> bool {
        self.initializers.contains(value)
            || self.m.added_initializers.iter().any(|(n, _)| n == value)
    }

    /// `value`'s constant: an initializer's or a live `Constant` node's.
    pub fn constant(&mut self, value: &str) -> Option<Constant> {
        if let Some(c) = self.constants.get(value) {
            return Some(c.clone());
        }
        if let Some((_, c)) = self.m.added_initializers.iter().find(|(n, _)| n == value) {
            return Some(c.clone());
        }
        let producer = self.producer(value)?;
        let node = self.node(producer)?;
        (node.op_type == "Constant" && node.domain.is_empty())
            .then(|| Constant::of_node(node))
            .flatten()
    }

    fn index(&mut self) -> &Index {
        if self.index.is_none() {
            let mut index = Index {
                positions: self.order().into_iter().enumerate().map(|(i, h)| (h, i)).collect(),
                ..Index::default()
            };
            for (h, node) in self.m.slots.iter().enumerate() {
                let Some(node) = node else { continue };
                for o in node.outputs.iter().filter(|o| !o.is_empty()) {
                    index.producers.insert(o.clone(), h as u32);
                }
                for i in &node.inputs {
                    let readers = index.consumers.entry(i.clone()).or_default();
                    if readers.last() != Some(&(h as u32)) {
                        readers.push(h as u32);
                    }
                }
            }
            self.index = Some(index);
        }
        self.index.as_ref().expect("built")
    }

    pub fn producer(&mut self, value: &str) -> Option<u32> {
        self.index().producers.get(value).copied()
    }

    /// The readers of `value`, in graph order.
    pub fn consumers(&mut self, value: &str) -> Vec<u32> {
        let index = self.index();
        let mut readers = index.consumers.get(value).cloned().unwrap_or_default();
        readers.sort_by_key(|h| index.positions.get(h).copied().unwrap_or(usize::MAX));
        readers
    }

    /// Live handles in topological order (Kahn's, handle order among the
    /// ready ones, so an unchanged graph keeps its order); nodes on a cycle
    /// come last, in handle order ([`check`](Self::check) refuses them).
    pub fn order(&self) -> Vec<u32> {
        let slots = &self.m.slots;
        let mut producer: HashMap<&str, u32> = HashMap::new();
        for (h, node) in slots.iter().enumerate() {
            for o in node.iter().flat_map(|n| &n.outputs).filter(|o| !o.is_empty()) {
                producer.insert(o, h as u32);
            }
        }
        let mut waiting = vec![0usize; slots.len()];
        let mut readers: Vec<Vec<u32>> = vec![Vec::new(); slots.len()];
        for (h, node) in slots.iter().enumerate() {
            let Some(node) = node else { continue };
            let deps: BTreeSet<u32> =
                node.inputs.iter().filter_map(|i| producer.get(i.as_str()).copied()).collect();
            waiting[h] = deps.len();
            for d in deps {
                readers[d as usize].push(h as u32);
            }
        }
        let mut ready: BTreeSet<u32> = (0..slots.len() as u32)
            .filter(|&h| slots[h as usize].is_some() && waiting[h as usize] == 0)
            .collect();
        let mut order = Vec::with_capacity(slots.len());
        while let Some(h) = ready.pop_first() {
            order.push(h);
            for &r in &readers[h as usize] {
                waiting[r as usize] -= 1;
                if waiting[r as usize] == 0 {
                    ready.insert(r);
                }
            }
        }
        if order.len() < slots.iter().flatten().count() {
            let placed: HashSet<u32> = order.iter().copied().collect();
            order.extend(
                (0..slots.len() as u32)
                    .filter(|h| slots[*h as usize].is_some() && !placed.contains(h)),
            );
        }
        order
    }

    /// Whether the graph is well formed: each value produced once, every
    /// input produced (by a node, a graph input or an initializer), no
    /// cycle, every graph output still there. The reason when not.
    pub fn check(&self) -> Result<(), String> {
        let mut produced: HashSet<&str> = HashSet::new();
        for node in self.live_nodes() {
            // An empty name is an optional output left out.
            for o in node.outputs.iter().filter(|o| !o.is_empty()) {
                if !produced.insert(o) {
                    return Err(format!("two nodes produce `{o}`"));
                }
            }
        }
        for node in self.live_nodes() {
            for i in node.inputs.iter().filter(|i| !i.is_empty()) {
                if !produced.contains(i.as_str())
                    && !self.is_graph_input(i)
                    && !self.is_initializer(i)
                {
                    return Err(format!(
                        "a {} node reads `{i}`, which nothing produces",
                        node.op_type
                    ));
                }
            }
        }
        for o in &self.m.outputs {
            if !produced.contains(o.as_str()) && !self.is_graph_input(o) && !self.is_initializer(o)
            {
                return Err(format!("the graph output `{o}` is no longer produced"));
            }
        }
        if self.has_cycle() {
            return Err("the nodes form a cycle".into());
        }
        Ok(())
    }

    fn has_cycle(&self) -> bool {
        // `order` places cycle members last without their producers first:
        // a node reading a value produced later in the order is on a cycle.
        let mut seen: HashSet<&str> = HashSet::new();
        let order = self.order();
        let mut producer: HashMap<&str, u32> = HashMap::new();
        for &h in &order {
            let outputs = &self.m.slots[h as usize].as_ref().expect("live").outputs;
            for o in outputs.iter().filter(|o| !o.is_empty()) {
                producer.insert(o, h);
            }
        }
        for &h in &order {
            let node = self.m.slots[h as usize].as_ref().expect("live");
            if node
                .inputs
                .iter()
                .any(|i| producer.contains_key(i.as_str()) && !seen.contains(i.as_str()))
            {
                return true;
            }
            seen.extend(node.outputs.iter().map(String::as_str));
        }
        false
    }

    /// A name no value has and not among `also_taken` (names given out for
    /// a node not added yet): `hint` itself if free (so a plugin can find
    /// what it added under a name of its choosing), else `hint_N`.
    pub fn fresh_name(&mut self, hint: &str, also_taken: &[String]) -> String {
        if !self.is_taken(hint) && !also_taken.iter().any(|t| t == hint) {
            return hint.to_string();
        }
        loop {
            self.mutate().fresh += 1;
            let name = format!("{hint}_{}", self.m.fresh);
            if !self.is_taken(&name) && !also_taken.contains(&name) {
                return name;
            }
        }
    }

    fn is_taken(&mut self, name: &str) -> bool {
        let index = self.index();
        index.producers.contains_key(name)
            || index.consumers.contains_key(name)
            || self.is_graph_input(name)
            || self.is_initializer(name)
            || self.is_graph_output(name)
    }

    // ── Mutations ──

    pub fn set_attribute(&mut self, handle: u32, name: &str, value: Attribute) -> bool {
        match self.mutate().slots.get_mut(handle as usize).and_then(Option::as_mut) {
            Some(node) => {
                node.set_attribute(name, value);
                true
            }
            None => false,
        }
    }

    /// Adds `node`; its handle. The index follows (a node added is placed
    /// after every node the stage started with until the next reordering).
    pub fn add_node(&mut self, node: Node) -> u32 {
        let handle = self.m.slots.len() as u32;
        if let Some(index) = &mut self.index {
            for o in node.outputs.iter().filter(|o| !o.is_empty()) {
                index.producers.insert(o.clone(), handle);
            }
            for i in &node.inputs {
                let readers = index.consumers.entry(i.clone()).or_default();
                if readers.last() != Some(&handle) {
                    readers.push(handle);
                }
            }
            index.positions.insert(handle, usize::MAX);
        }
        self.mutate().slots.push(Some(node));
        handle
    }

    pub fn remove_node(&mut self, handle: u32) -> bool {
        let Some(node) = self.m.slots.get(handle as usize).and_then(Option::as_ref) else {
            return false;
        };
        if let Some(index) = &mut self.index {
            for o in &node.outputs {
                if index.producers.get(o) == Some(&handle) {
                    index.producers.remove(o);
                }
            }
            for i in &node.inputs {
                if let Some(readers) = index.consumers.get_mut(i) {
                    readers.retain(|&r| r != handle);
                }
            }
            index.positions.remove(&handle);
        }
        self.mutate().slots[handle as usize].take().is_some()
    }

    /// Every read of `old` reads `new`; a graph output `old` keeps its name,
    /// given to `new`'s producer. The reason when that cannot be.
    pub fn replace_uses(&mut self, old: &str, new: &str) -> Result<(), String> {
        if old == new {
            return Ok(());
        }
        let renamed_output = self.is_graph_output(old);
        if renamed_output {
            if self.producer(new).is_none() {
                return Err(format!(
                    "`{old}` is a graph output and `{new}` is not a node output (it cannot take the output's name)"
                ));
            }
            if self.is_graph_output(new) {
                return Err(format!("`{old}` and `{new}` are both graph outputs"));
            }
        }
        self.index = None;
        let m = self.mutate();
        if !renamed_output {
            m.replaced.entry(new.to_string()).or_insert_with(|| old.to_string());
        }
        for node in m.slots.iter_mut().flatten() {
            for i in node.inputs.iter_mut().filter(|i| *i == old) {
                *i = new.to_string();
            }
        }
        if renamed_output {
            // `new` takes the output's name: its producer and readers follow.
            for node in m.slots.iter_mut().flatten() {
                for v in node.inputs.iter_mut().chain(node.outputs.iter_mut()) {
                    if v == new {
                        *v = old.to_string();
                    }
                }
            }
        }
        Ok(())
    }

    pub fn add_initializer(&mut self, name: String, value: Constant) {
        self.mutate().added_initializers.push((name, value));
    }

    pub fn import_domain(&mut self, domain: &str) {
        if !self.m.domains.contains(domain) {
            self.mutate().domains.insert(domain.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> Node {
        Node {
            op_type: op.into(),
            domain: String::new(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
            attributes: vec![],
            function: None,
        }
    }

    #[test]
    fn a_fused_node_added_last_is_ordered_before_its_readers_and_a_rollback_restores_all() {
        let mut m = IrModel::of_nodes(vec![
            node("Relu", &["x"], &["a"]),
            node("Neg", &["a"], &["b"]),
            node("Abs", &["b"], &["y"]),
        ]);
        m.begin();
        let fused = m.add_node(node("Fused", &["a"], &["f"]));
        m.replace_uses("b", "f").unwrap();
        assert!(m.remove_node(1));
        assert_eq!(m.check(), Ok(()));
        assert_eq!(m.order(), vec![0, fused, 2]);
        assert_eq!(m.consumers("a"), vec![fused]);
        m.rollback();
        assert_eq!(m.order(), vec![0, 1, 2]);
        assert_eq!(m.consumers("b"), vec![2]);
        // The graph output keeps its name: the replacement's producer takes it.
        m.begin();
        let g = m.add_node(node("Gelu", &["b"], &["g"]));
        m.replace_uses("y", "g").unwrap();
        m.remove_node(2);
        assert_eq!(m.check(), Ok(()));
        assert_eq!(m.node(g).unwrap().outputs, ["y"]);
        m.rollback();
        // Broken graphs are named.
        m.begin();
        m.remove_node(0);
        assert_eq!(m.check(), Err("a Neg node reads `a`, which nothing produces".into()));
        m.rollback();
        m.begin();
        m.add_node(node("Cycle1", &["d"], &["c"]));
        m.add_node(node("Cycle2", &["c"], &["d"]));
        assert_eq!(m.check(), Err("the nodes form a cycle".into()));
        m.rollback();
        m.begin();
        m.remove_node(2);
        assert_eq!(m.check(), Err("the graph output `y` is no longer produced".into()));
    }

    #[test]
    fn constants_round_trip_through_initializer_bytes() {
        let c =
            Constant { elem_type: 1, dims: vec![2], data: ConstantData::Floats(vec![1.5, -2.0]) };
        assert_eq!(Constant::from_bytes(1, &[2], &c.to_bytes().unwrap()), Some(c));
        let h = Constant { elem_type: 10, dims: vec![], data: ConstantData::Floats(vec![0.5]) };
        assert_eq!(Constant::from_bytes(10, &[], &h.to_bytes().unwrap()), Some(h));
        assert_eq!(Constant::from_bytes(7, &[3], &[0; 16]), None, "2 elements for dims [3]");
    }
}
