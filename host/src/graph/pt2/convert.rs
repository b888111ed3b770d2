//! Between a serialized `ExportedProgram` (schema.rs) and the IR.
//!
//! Reading builds the root graph and every sub-graph of higher-order ops, with
//! values named as in the archive; symbolic sizes become their printed form and
//! the `srepr` torch wrote is remembered, so writing spells them as read. What
//! the IR does not model (signature, module call graph, opset, verifiers) is
//! taken from the original program when writing; output specs follow the graph
//! outputs, which fixes may have rewired.

use std::collections::{BTreeMap, HashMap};

use super::schema as s;
use super::sympy;
use crate::graph::{
    Argument, Device, Dim, Graph, NamedArgument, Node, RangeConstraint, Sym, SymExpr, TensorMeta,
    ValueId, ValueMeta,
};

/// Prefix of op targets in the archive that the IR leaves out.
const OPS_PREFIX: &str = "torch.ops.";

const LAYOUTS: &[(i64, &str)] = &[
    (0, "unknown"),
    (1, "sparse_coo"),
    (2, "sparse_csr"),
    (3, "sparse_csc"),
    (4, "sparse_bsr"),
    (5, "sparse_bsc"),
    (6, "_mkldnn"),
    (7, "strided"),
];
const MEMORY_FORMATS: &[(i64, &str)] = &[
    (0, "unknown"),
    (1, "contiguous_format"),
    (2, "channels_last"),
    (3, "channels_last_3d"),
    (4, "preserve_format"),
];

/// The torch dtype name of a `.pt2` scalar-type code (`7` → `float32`).
/// Code 0 is torch's `unknown` dtype, which the table of real dtypes leaves out.
pub(crate) fn dtype_name(code: i64) -> Option<&'static str> {
    match code {
        0 => Some("unknown"),
        _ => i32::try_from(code)
            .ok()
            .and_then(hfx_dtype::DType::from_pt2)
            .map(hfx_dtype::DType::name),
    }
}

fn dtype_of_code(code: i64) -> Result<String, String> {
    dtype_name(code).map(String::from).ok_or_else(|| format!("unknown dtype code {code}"))
}

fn code_of_dtype(name: &str) -> Result<i64, String> {
    match name {
        "unknown" => Ok(0),
        _ => hfx_dtype::DType::from_name(name)
            .map(|d| d.pt2() as i64)
            .ok_or_else(|| format!("unknown dtype `{name}`")),
    }
}

fn name_of(table: &[(i64, &'static str)], code: i64, what: &str) -> Result<String, String> {
    table
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, n)| n.to_string())
        .ok_or_else(|| format!("unknown {what} code {code}"))
}

fn code_of(table: &[(i64, &'static str)], name: &str, what: &str) -> Result<i64, String> {
    table
        .iter()
        .find(|(_, n)| *n == name)
        .map(|(c, _)| *c)
        .ok_or_else(|| format!("unknown {what} `{name}`"))
}

// ── Reading ──

/// The IR of a program.
pub fn to_ir(program: &s::ExportedProgram) -> Result<Graph, String> {
    let mut reader = Reader { graph: Graph::new(), scopes: Vec::new() };
    reader.subgraph(0, &program.graph_module.graph, &constant_input_names(program))?;
    for (symbol, range) in &program.range_constraints {
        let range = RangeConstraint { min: range.min_val.unwrap_or(0), max: range.max_val };
        reader.graph.set_range_constraint(symbol, range).map_err(|e| e.to_string())?;
    }
    Ok(reader.graph)
}

/// Names of constant inputs, in input order (they are inputs without a value).
fn constant_input_names(program: &s::ExportedProgram) -> Vec<String> {
    program
        .graph_module
        .signature
        .input_specs
        .iter()
        .filter_map(|spec| match spec {
            s::InputSpec::ConstantInput { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

struct Reader {
    graph: Graph,
    /// Value names of each sub-graph being read (names are per graph in a `.pt2`).
    scopes: Vec<HashMap<String, ValueId>>,
}

/// Marks a value that stands for a constant graph input; its meta keeps the argument.
const CONSTANT_INPUT: &str = "constant-input:";
/// Marks an opaque argument that is a `.pt2` argument kept as its JSON.
const PT2_ARGUMENT: &str = "pt2-argument:";

impl Reader {
    fn subgraph(
        &mut self,
        index: u32,
        g: &s::Graph,
        constant_names: &[String],
    ) -> Result<(), String> {
        self.scopes.push(HashMap::new());
        self.graph.subgraph_mut(index).map_err(|e| e.to_string())?.single_tensor_return =
            g.is_single_tensor_return;
        let mut constants = constant_names.iter();
        for input in &g.inputs {
            let (name, meta) = match input {
                s::Argument::AsTensor(t) => {
                    (t.name.clone(), ValueMeta::Tensor(self.tensor_meta(g, &t.name)?))
                }
                s::Argument::AsSymInt(s::SymIntArgument::AsName(n)) => {
                    (n.clone(), self.sym_meta(g, n, "int")?)
                }
                s::Argument::AsSymBool(s::SymBoolArgument::AsName(n)) => {
                    (n.clone(), self.sym_meta(g, n, "bool")?)
                }
                s::Argument::AsSymFloat(s::SymFloatArgument::AsName(n)) => {
                    (n.clone(), self.sym_meta(g, n, "float")?)
                }
                s::Argument::AsCustomObj(c) => {
                    (c.name.clone(), ValueMeta::Opaque(format!("custom-obj:{}", c.class_fqn)))
                }
                constant => {
                    let name = constants.next().cloned().unwrap_or_else(|| "constant_input".into());
                    let json = serde_json::to_string(constant).expect("arguments serialize");
                    (name, ValueMeta::Opaque(format!("{CONSTANT_INPUT}{json}")))
                }
            };
            let id = self.graph.add_input(index, &name, meta);
            self.scope().insert(name, id);
        }
        for node in &g.nodes {
            self.node(index, g, node)?;
        }
        let outputs = g.outputs.iter().map(|a| self.argument(a)).collect::<Result<Vec<_>, _>>()?;
        self.graph.set_outputs(index, outputs).map_err(|e| e.to_string())?;
        self.scopes.pop();
        Ok(())
    }

    fn scope(&mut self) -> &mut HashMap<String, ValueId> {
        self.scopes.last_mut().expect("inside a graph")
    }

    fn value(&self, name: &str) -> Result<ValueId, String> {
        self.scopes
            .last()
            .and_then(|s| s.get(name))
            .copied()
            .ok_or_else(|| format!("dangling value reference `{name}`"))
    }

    fn node(&mut self, subgraph: u32, g: &s::Graph, node: &s::Node) -> Result<(), String> {
        let inputs = node
            .inputs
            .iter()
            .map(|a| {
                Ok(NamedArgument {
                    name: a.name.clone(),
                    value: self.argument(&a.arg)?,
                    keyword: a.kind == Some(2),
                })
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(|e| format!("node `{}`: {e}", node.name.as_deref().unwrap_or(&node.target)))?;
        let id = self.graph.next_node_id();
        let mut outputs = Vec::new();
        for output in &node.outputs {
            outputs.push(self.output(g, output, id)?);
        }
        let target = node.target.strip_prefix(OPS_PREFIX).unwrap_or(&node.target).to_string();
        let meta = node.metadata.clone();
        let ir = Node { target, inputs, outputs, subgraph, name: node.name.clone(), meta };
        self.graph.push_loaded(ir).map_err(|e| e.to_string())?;
        Ok(())
    }

    fn output(
        &mut self,
        g: &s::Graph,
        output: &s::Argument,
        producer: crate::graph::NodeId,
    ) -> Result<Argument, String> {
        let define = |this: &mut Self, name: &str, meta: ValueMeta| {
            let id = this.graph.add_value(name, meta, Some(producer));
            this.scope().insert(name.to_string(), id);
            id
        };
        Ok(match output {
            s::Argument::AsNone(_) => Argument::None,
            s::Argument::AsTensor(t) => {
                let meta = ValueMeta::Tensor(self.tensor_meta(g, &t.name)?);
                Argument::Tensor(define(self, &t.name, meta))
            }
            s::Argument::AsTensors(ts) => {
                let mut ids = Vec::new();
                for t in ts {
                    let meta = ValueMeta::Tensor(self.tensor_meta(g, &t.name)?);
                    ids.push(define(self, &t.name, meta));
                }
                Argument::Tensors(ids)
            }
            s::Argument::AsSymInt(s::SymIntArgument::AsName(n)) => {
                let meta = self.sym_meta(g, n, "int")?;
                Argument::SymInt(Sym::Value(define(self, n, meta)))
            }
            s::Argument::AsSymBool(s::SymBoolArgument::AsName(n)) => {
                let meta = self.sym_meta(g, n, "bool")?;
                Argument::SymBool(Sym::Value(define(self, n, meta)))
            }
            s::Argument::AsSymFloat(s::SymFloatArgument::AsName(n)) => {
                let meta = self.sym_meta(g, n, "float")?;
                Argument::SymFloat(Sym::Value(define(self, n, meta)))
            }
            other => return Err(format!("output kind {} is not supported", kind_name(other))),
        })
    }

    fn argument(&mut self, a: &s::Argument) -> Result<Argument, String> {
        use s::Argument as A;
        let sym_int = |this: &Self, s: &s::SymIntArgument| -> Result<Sym<i64>, String> {
            Ok(match s {
                s::SymIntArgument::AsName(n) => Sym::Value(this.value(n)?),
                s::SymIntArgument::AsInt(i) => Sym::Const(*i),
            })
        };
        let sym_bool = |this: &Self, s: &s::SymBoolArgument| -> Result<Sym<bool>, String> {
            Ok(match s {
                s::SymBoolArgument::AsName(n) => Sym::Value(this.value(n)?),
                s::SymBoolArgument::AsBool(b) => Sym::Const(*b),
            })
        };
        let sym_float = |this: &Self, s: &s::SymFloatArgument| -> Result<Sym<f64>, String> {
            Ok(match s {
                s::SymFloatArgument::AsName(n) => Sym::Value(this.value(n)?),
                s::SymFloatArgument::AsFloat(f) => Sym::Const(f.0),
            })
        };
        Ok(match a {
            A::AsNone(_) => Argument::None,
            A::AsTensor(t) => Argument::Tensor(self.value(&t.name)?),
            A::AsTensors(ts) => {
                Argument::Tensors(ts.iter().map(|t| self.value(&t.name)).collect::<Result<_, _>>()?)
            }
            A::AsOptionalTensors(ts) => Argument::OptionalTensors(
                ts.iter()
                    .map(|t| match t {
                        s::OptionalTensorArgument::AsTensor(t) => self.value(&t.name).map(Some),
                        s::OptionalTensorArgument::AsNone(_) => Ok(None),
                    })
                    .collect::<Result<_, _>>()?,
            ),
            A::AsInt(i) => Argument::Int(*i),
            A::AsInts(is) => Argument::Ints(is.clone()),
            A::AsFloat(f) => Argument::Float(f.0),
            A::AsFloats(fs) => Argument::Floats(fs.iter().map(|f| f.0).collect()),
            A::AsString(s) => Argument::Str(s.clone()),
            A::AsStrings(ss) => Argument::Strs(ss.clone()),
            A::AsBool(b) => Argument::Bool(*b),
            A::AsBools(bs) => Argument::Bools(bs.clone()),
            A::AsSymInt(s) => Argument::SymInt(sym_int(self, s)?),
            A::AsSymInts(ss) => {
                Argument::SymInts(ss.iter().map(|s| sym_int(self, s)).collect::<Result<_, _>>()?)
            }
            A::AsSymBool(s) => Argument::SymBool(sym_bool(self, s)?),
            A::AsSymBools(ss) => {
                Argument::SymBools(ss.iter().map(|s| sym_bool(self, s)).collect::<Result<_, _>>()?)
            }
            A::AsSymFloat(s) => Argument::SymFloat(sym_float(self, s)?),
            A::AsSymFloats(ss) => Argument::SymFloats(
                ss.iter().map(|s| sym_float(self, s)).collect::<Result<_, _>>()?,
            ),
            A::AsScalarType(c) => Argument::Dtype(dtype_of_code(*c)?),
            A::AsLayout(c) => Argument::Layout(name_of(LAYOUTS, *c, "layout")?),
            A::AsMemoryFormat(c) => {
                Argument::MemoryFormat(name_of(MEMORY_FORMATS, *c, "memory format")?)
            }
            A::AsDevice(d) => Argument::Device(Device { kind: d.kind.clone(), index: d.index }),
            A::AsOperator(o) => {
                Argument::Operator(o.strip_prefix(OPS_PREFIX).unwrap_or(o).to_string())
            }
            A::AsGraph(ga) => {
                let index = self.graph.add_subgraph();
                self.graph.subgraph_mut(index).map_err(|e| e.to_string())?.name = ga.name.clone();
                self.subgraph(index, &ga.graph, &[])?;
                Argument::Subgraph(index)
            }
            // Kinds that read no value travel through the IR as their own JSON.
            A::AsComplex(_) | A::AsIntLists(_) | A::AsFloatLists(_) => Argument::Opaque(format!(
                "{PT2_ARGUMENT}{}",
                serde_json::to_string(a).expect("arguments serialize")
            )),
            other => {
                return Err(format!("argument kind {} is not supported yet", kind_name(other)))
            }
        })
    }

    fn tensor_meta(&mut self, g: &s::Graph, name: &str) -> Result<TensorMeta, String> {
        let m =
            g.tensor_values.get(name).ok_or_else(|| format!("tensor `{name}` has no metadata"))?;
        Ok(TensorMeta {
            dtype: dtype_of_code(m.dtype)?,
            shape: m.sizes.iter().map(|d| self.dim(d)).collect::<Result<_, _>>()?,
            strides: m.strides.iter().map(|d| self.dim(d)).collect::<Result<_, _>>()?,
            device: Device { kind: m.device.kind.clone(), index: m.device.index },
            requires_grad: m.requires_grad,
            storage_offset: self.dim(&m.storage_offset)?,
            layout: name_of(LAYOUTS, m.layout, "layout")?,
        })
    }

    fn dim(&mut self, d: &s::SymInt) -> Result<Dim, String> {
        Ok(match d {
            s::SymInt::AsInt(i) => Dim::Fixed(*i),
            s::SymInt::AsExpr(e) => Dim::Symbolic(self.expr(e)?),
        })
    }

    /// The printed form of an expression, remembering how the archive spelled it.
    fn expr(&mut self, e: &s::SymExpr) -> Result<String, String> {
        let printed = sympy::printed(&e.expr_str)?;
        let hint = e.hint.as_ref().map(|h| serde_json::to_value(h).expect("hints serialize"));
        self.graph
            .exprs_mut()
            .entry(printed.clone())
            .or_insert(SymExpr { srepr: e.expr_str.clone(), hint });
        Ok(printed)
    }

    fn sym_meta(&mut self, g: &s::Graph, name: &str, kind: &str) -> Result<ValueMeta, String> {
        let missing = || format!("sym-{kind} `{name}` has no metadata");
        Ok(match kind {
            "int" => ValueMeta::SymInt(match g.sym_int_values.get(name).ok_or_else(missing)? {
                s::SymInt::AsExpr(e) => self.expr(e)?,
                s::SymInt::AsInt(i) => i.to_string(),
            }),
            "bool" => {
                ValueMeta::SymBool(match g.sym_bool_values.get(name).ok_or_else(missing)? {
                    s::SymBool::AsExpr(e) => self.expr(e)?,
                    s::SymBool::AsBool(b) => if *b { "True" } else { "False" }.to_string(),
                })
            }
            _ => ValueMeta::SymFloat(match g.sym_float_values.get(name).ok_or_else(missing)? {
                s::SymFloat::AsExpr(e) => self.expr(e)?,
                s::SymFloat::AsFloat(f) => f.0.to_string(),
            }),
        })
    }
}

fn kind_name(a: &s::Argument) -> String {
    serde_json::to_value(a)
        .ok()
        .and_then(|v| v.as_object().and_then(|o| o.keys().next().cloned()))
        .unwrap_or_else(|| "?".into())
}

// ── Writing ──

/// The program `graph` stands for, with everything the IR does not model taken from `original`.
pub fn from_ir(graph: &Graph, original: &s::ExportedProgram) -> Result<s::ExportedProgram, String> {
    let mut program = original.clone();
    let writer = Writer { graph };
    let root = writer.subgraph(0)?;
    // Output specs name the graph outputs: follow them where fixes rewired outputs.
    let specs = &mut program.graph_module.signature.output_specs;
    if specs.len() != root.outputs.len() {
        return Err(format!(
            "{} graph outputs for {} output specs",
            root.outputs.len(),
            specs.len()
        ));
    }
    for (spec, output) in specs.iter_mut().zip(&root.outputs) {
        retarget(spec, output)?;
    }
    program.graph_module.graph = root;
    program.range_constraints = graph
        .range_constraints()
        .iter()
        .map(|(k, r)| (k.clone(), s::RangeConstraint { min_val: Some(r.min), max_val: r.max }))
        .collect();
    Ok(program)
}

fn retarget(spec: &mut s::OutputSpec, output: &s::Argument) -> Result<(), String> {
    let tensor = || match output {
        s::Argument::AsTensor(t) => Ok(t.clone()),
        other => Err(format!("output spec expects a tensor, graph output is {}", kind_name(other))),
    };
    match spec {
        s::OutputSpec::UserOutput { arg } => *arg = output.clone(),
        s::OutputSpec::LossOutput { arg }
        | s::OutputSpec::BufferMutation { arg, .. }
        | s::OutputSpec::GradientToParameter { arg, .. }
        | s::OutputSpec::GradientToUserInput { arg, .. }
        | s::OutputSpec::UserInputMutation { arg, .. }
        | s::OutputSpec::ParameterMutation { arg, .. } => *arg = tensor()?,
        s::OutputSpec::Token { .. } => {}
    }
    Ok(())
}

struct Writer<'a> {
    graph: &'a Graph,
}

impl Writer<'_> {
    fn subgraph(&self, index: u32) -> Result<s::Graph, String> {
        let sub = self.graph.subgraph(index).map_err(|e| e.to_string())?;
        let mut out = s::Graph {
            inputs: Vec::new(),
            outputs: Vec::new(),
            nodes: Vec::new(),
            tensor_values: BTreeMap::new(),
            sym_int_values: BTreeMap::new(),
            sym_bool_values: BTreeMap::new(),
            is_single_tensor_return: sub.single_tensor_return,
            custom_obj_values: BTreeMap::new(),
            sym_float_values: BTreeMap::new(),
        };
        for &input in &sub.inputs {
            let argument = self.define(&mut out, input)?;
            out.inputs.push(argument);
        }
        // A node name must be unique among node names and must not name a value
        // it does not output (torch rebuilds FX nodes from both).
        let mut used_names: std::collections::HashSet<String> =
            self.graph.order(index).filter_map(|n| self.graph.node(n).ok()?.name.clone()).collect();
        let value_names: std::collections::HashSet<String> = self
            .graph
            .order(index)
            .filter_map(|n| self.graph.node(n).ok())
            .flat_map(|n| n.output_values().collect::<Vec<_>>())
            .chain(sub.inputs.iter().copied())
            .filter_map(|v| self.graph.value(v).ok().map(|v| v.name.clone()))
            .collect();
        for id in self.graph.order(index) {
            let node = self.graph.node(id).map_err(|e| e.to_string())?;
            let mut outputs = Vec::new();
            for output in &node.outputs {
                outputs.push(self.define_output(&mut out, output)?);
            }
            let inputs = node
                .inputs
                .iter()
                .map(|a| {
                    Ok(s::NamedArgument {
                        name: a.name.clone(),
                        arg: self.argument(&a.value)?,
                        kind: Some(if a.keyword { 2 } else { 1 }),
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            let name = node.name.clone().unwrap_or_else(|| {
                // FX names a single-output node after its output; others after their op.
                let outputs: Vec<ValueId> = node.output_values().collect();
                if let [only] = outputs[..] {
                    if let Ok(v) = self.graph.value(only) {
                        if used_names.insert(v.name.clone()) {
                            return v.name.clone();
                        }
                    }
                }
                let base = node
                    .target
                    .split('.')
                    .nth(1)
                    .unwrap_or("node")
                    .trim_start_matches('_')
                    .to_string();
                let taken = |n: &String| used_names.contains(n) || value_names.contains(n);
                let mut name = base.clone();
                let mut n = 1;
                while taken(&name) {
                    name = format!("{base}_{n}");
                    n += 1;
                }
                used_names.insert(name.clone());
                name
            });
            out.nodes.push(s::Node {
                target: target_of(&node.target),
                inputs,
                outputs,
                metadata: node.meta.clone(),
                is_hop_single_tensor_return: None,
                name: Some(name),
            });
        }
        out.outputs = sub.outputs.iter().map(|a| self.argument(a)).collect::<Result<_, _>>()?;
        Ok(out)
    }

    /// A graph input: records its metadata and returns the argument naming it.
    fn define(&self, out: &mut s::Graph, id: ValueId) -> Result<s::Argument, String> {
        let value = self.graph.value(id).map_err(|e| e.to_string())?;
        if let ValueMeta::Opaque(o) = &value.meta {
            if let Some(json) = o.strip_prefix(CONSTANT_INPUT) {
                return serde_json::from_str(json).map_err(|e| e.to_string());
            }
            if let Some(class) = o.strip_prefix("custom-obj:") {
                let obj =
                    s::CustomObjArgument { name: value.name.clone(), class_fqn: class.to_string() };
                out.custom_obj_values.insert(value.name.clone(), obj.clone());
                return Ok(s::Argument::AsCustomObj(obj));
            }
        }
        self.record(out, id)
    }

    fn define_output(&self, out: &mut s::Graph, a: &Argument) -> Result<s::Argument, String> {
        match a {
            Argument::Tensors(vs) => {
                let mut ts = Vec::new();
                for &v in vs {
                    self.record(out, v)?;
                    ts.push(s::TensorArgument { name: self.name(v)? });
                }
                Ok(s::Argument::AsTensors(ts))
            }
            Argument::Tensor(v)
            | Argument::SymInt(Sym::Value(v))
            | Argument::SymBool(Sym::Value(v))
            | Argument::SymFloat(Sym::Value(v)) => self.record(out, *v),
            Argument::None => Ok(s::Argument::AsNone(true)),
            other => Err(format!("cannot write output {other:?}")),
        }
    }

    /// Records a value's metadata in the graph's tables; returns its argument.
    fn record(&self, out: &mut s::Graph, id: ValueId) -> Result<s::Argument, String> {
        let value = self.graph.value(id).map_err(|e| e.to_string())?;
        let name = value.name.clone();
        Ok(match &value.meta {
            ValueMeta::Tensor(m) => {
                out.tensor_values.insert(name.clone(), self.tensor_meta(m)?);
                s::Argument::AsTensor(s::TensorArgument { name })
            }
            ValueMeta::SymInt(e) => {
                let v = match e.parse::<i64>() {
                    Ok(i) => s::SymInt::AsInt(i),
                    Err(_) => s::SymInt::AsExpr(self.expr(e)?),
                };
                out.sym_int_values.insert(name.clone(), v);
                s::Argument::AsSymInt(s::SymIntArgument::AsName(name))
            }
            ValueMeta::SymBool(e) => {
                let v = match e.as_str() {
                    "True" => s::SymBool::AsBool(true),
                    "False" => s::SymBool::AsBool(false),
                    _ => s::SymBool::AsExpr(self.expr(e)?),
                };
                out.sym_bool_values.insert(name.clone(), v);
                s::Argument::AsSymBool(s::SymBoolArgument::AsName(name))
            }
            ValueMeta::SymFloat(e) => {
                let v = match e.parse::<f64>() {
                    Ok(f) => s::SymFloat::AsFloat(s::F64(f)),
                    Err(_) => s::SymFloat::AsExpr(self.expr(e)?),
                };
                out.sym_float_values.insert(name.clone(), v);
                s::Argument::AsSymFloat(s::SymFloatArgument::AsName(name))
            }
            ValueMeta::Opaque(kind) => {
                return Err(format!("value `{name}` of kind {kind} cannot be written"))
            }
        })
    }

    fn name(&self, id: ValueId) -> Result<String, String> {
        self.graph.value(id).map(|v| v.name.clone()).map_err(|e| e.to_string())
    }

    fn expr(&self, printed: &str) -> Result<s::SymExpr, String> {
        let known = self.graph.exprs().get(printed);
        let known = known.ok_or_else(|| {
            format!("symbolic expression `{printed}` is not one the program defines")
        })?;
        let hint = known
            .hint
            .clone()
            .map(serde_json::from_value)
            .transpose()
            .map_err(|e| e.to_string())?;
        Ok(s::SymExpr { expr_str: known.srepr.clone(), hint })
    }

    fn dim(&self, d: &Dim) -> Result<s::SymInt, String> {
        Ok(match d {
            Dim::Fixed(i) => s::SymInt::AsInt(*i),
            Dim::Symbolic(e) => s::SymInt::AsExpr(self.expr(e)?),
        })
    }

    fn tensor_meta(&self, m: &TensorMeta) -> Result<s::TensorMeta, String> {
        Ok(s::TensorMeta {
            dtype: code_of_dtype(&m.dtype)?,
            sizes: m.shape.iter().map(|d| self.dim(d)).collect::<Result<_, _>>()?,
            requires_grad: m.requires_grad,
            device: s::Device { kind: m.device.kind.clone(), index: m.device.index },
            strides: if m.strides.is_empty() {
                contiguous(&m.shape)?
            } else {
                m.strides.iter().map(|d| self.dim(d)).collect::<Result<_, _>>()?
            },
            storage_offset: self.dim(&m.storage_offset)?,
            layout: code_of(LAYOUTS, &m.layout, "layout")?,
        })
    }

    fn argument(&self, a: &Argument) -> Result<s::Argument, String> {
        use s::Argument as A;
        let t = |v: &ValueId| self.name(*v).map(|name| s::TensorArgument { name });
        let sym_int = |x: &Sym<i64>| -> Result<s::SymIntArgument, String> {
            Ok(match x {
                Sym::Value(v) => s::SymIntArgument::AsName(self.name(*v)?),
                Sym::Const(c) => s::SymIntArgument::AsInt(*c),
            })
        };
        let sym_bool = |x: &Sym<bool>| -> Result<s::SymBoolArgument, String> {
            Ok(match x {
                Sym::Value(v) => s::SymBoolArgument::AsName(self.name(*v)?),
                Sym::Const(c) => s::SymBoolArgument::AsBool(*c),
            })
        };
        let sym_float = |x: &Sym<f64>| -> Result<s::SymFloatArgument, String> {
            Ok(match x {
                Sym::Value(v) => s::SymFloatArgument::AsName(self.name(*v)?),
                Sym::Const(c) => s::SymFloatArgument::AsFloat(s::F64(*c)),
            })
        };
        Ok(match a {
            Argument::None => A::AsNone(true),
            Argument::Tensor(v) => A::AsTensor(t(v)?),
            Argument::Tensors(vs) => A::AsTensors(vs.iter().map(t).collect::<Result<_, _>>()?),
            Argument::OptionalTensors(vs) => A::AsOptionalTensors(
                vs.iter()
                    .map(|v| match v {
                        Some(v) => t(v).map(s::OptionalTensorArgument::AsTensor),
                        None => Ok(s::OptionalTensorArgument::AsNone(true)),
                    })
                    .collect::<Result<_, _>>()?,
            ),
            Argument::Int(i) => A::AsInt(*i),
            Argument::Ints(is) => A::AsInts(is.clone()),
            Argument::Float(f) => A::AsFloat(s::F64(*f)),
            Argument::Floats(fs) => A::AsFloats(fs.iter().map(|f| s::F64(*f)).collect()),
            Argument::Bool(b) => A::AsBool(*b),
            Argument::Bools(bs) => A::AsBools(bs.clone()),
            Argument::Str(x) => A::AsString(x.clone()),
            Argument::Strs(xs) => A::AsStrings(xs.clone()),
            Argument::SymInt(x) => A::AsSymInt(sym_int(x)?),
            Argument::SymInts(xs) => {
                A::AsSymInts(xs.iter().map(sym_int).collect::<Result<_, _>>()?)
            }
            Argument::SymBool(x) => A::AsSymBool(sym_bool(x)?),
            Argument::SymBools(xs) => {
                A::AsSymBools(xs.iter().map(sym_bool).collect::<Result<_, _>>()?)
            }
            Argument::SymFloat(x) => A::AsSymFloat(sym_float(x)?),
            Argument::SymFloats(xs) => {
                A::AsSymFloats(xs.iter().map(sym_float).collect::<Result<_, _>>()?)
            }
            Argument::Dtype(d) => A::AsScalarType(code_of_dtype(d)?),
            Argument::Layout(l) => A::AsLayout(code_of(LAYOUTS, l, "layout")?),
            Argument::MemoryFormat(m) => {
                A::AsMemoryFormat(code_of(MEMORY_FORMATS, m, "memory format")?)
            }
            Argument::Device(d) => A::AsDevice(s::Device { kind: d.kind.clone(), index: d.index }),
            Argument::Operator(o) => A::AsOperator(target_of(o)),
            Argument::Subgraph(index) => {
                let name = self.graph.subgraph(*index).map_err(|e| e.to_string())?.name.clone();
                A::AsGraph(s::GraphArgument { name, graph: self.subgraph(*index)? })
            }
            Argument::Opaque(o) => match o.strip_prefix(PT2_ARGUMENT) {
                Some(json) => serde_json::from_str(json).map_err(|e| e.to_string())?,
                None => return Err(format!("opaque argument `{o}` cannot be written")),
            },
        })
    }
}

/// Contiguous strides for a shape of fixed sizes (a plugin left strides empty).
fn contiguous(shape: &[Dim]) -> Result<Vec<s::SymInt>, String> {
    let mut strides = vec![s::SymInt::AsInt(1); shape.len()];
    let mut running = 1i64;
    for (i, d) in shape.iter().enumerate().rev() {
        strides[i] = s::SymInt::AsInt(running);
        match d {
            Dim::Fixed(n) => {
                running = running
                    .checked_mul((*n).max(1))
                    .ok_or_else(|| format!("strides of shape {shape:?} overflow 64 bits"))?
            }
            Dim::Symbolic(e) => {
                return Err(format!("strides of a symbolic shape (`{e}`) must be given"))
            }
        }
    }
    Ok(strides)
}

fn target_of(ir: &str) -> String {
    if ir.starts_with("_operator.")
        || ir.starts_with("builtins.")
        || ir.starts_with("math.")
        || ir.starts_with("torch.")
    {
        ir.to_string()
    } else {
        format!("{OPS_PREFIX}{ir}")
    }
}
