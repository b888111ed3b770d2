//! The edge program (core ATen, from the worker's decomposition) as what the
//! portable runtime executes: one value table, one chain of kernel calls.
//!
//! Each op becomes the kernel the table names (its `.out` overload, a view's
//! copy, the dim-order ops), its arguments laid out by the kernel's schema:
//! every argument in order, defaults filled, `out` included, then the result
//! again. A `view` whose result is not a graph output is no kernel at all: its
//! tensor shares its base's memory (`et_view` re-points it when sizes are
//! dynamic), as ExecuTorch's `ReplaceViewCopyWithViewPass` does. Asserts on
//! sizes are dropped (the runtime checks its bounds).

use std::collections::HashMap;

use hfx_dtype::DType;

use super::bounds::Bounds;
use super::kernels::{self, Arg, ArgType, Kernel};
use crate::graph::pt2::schema as s;
use crate::graph::{Argument, Dim, Graph, NodeId, Sym, TensorMeta, ValueId, ValueMeta};
use crate::trace::protocol::MemoryPlanning;

/// An entry of the program's value table.
#[derive(Debug, Clone, PartialEq)]
pub enum EValue {
    Null,
    Int(i64),
    Bool(bool),
    Double(f64),
    Str(String),
    Tensor(Tensor),
    /// Indices of `Int` values.
    IntList(Vec<u32>),
    DoubleList(Vec<f64>),
    BoolList(Vec<bool>),
    TensorList(Vec<u32>),
    /// Indices of tensors, -1 for None.
    OptionalTensorList(Vec<i32>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// ExecuTorch's `ScalarType` code (torch's numbering).
    pub scalar_type: i8,
    /// Upper bounds where `dynamic`.
    pub sizes: Vec<i32>,
    pub dim_order: Vec<u8>,
    pub dynamic: bool,
    pub storage: Storage,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Storage {
    /// Index into [`Program::constants`].
    Constant(usize),
    /// Memory planned: an activation, an input or an output.
    Planned,
    /// The memory of another tensor (a view of it).
    Alias(u32),
    /// Memory the caller provides at run time: a graph input or output the
    /// arena leaves out (`MemoryPlanning`). A view of it is re-pointed by
    /// `et_view` on every call.
    Caller,
    /// No memory (a `None` passed where the schema wants a tensor).
    Empty,
}

/// A tensor stored in the constant segment.
#[derive(Debug, Clone, PartialEq)]
pub enum Constant {
    /// A weight or constant of the `.pt2` (`lifted`: a tensor constant, not a
    /// parameter or buffer), streamed from its map.
    Archive { fqn: String, lifted: bool, meta: TensorMeta },
    /// A scalar passed where the kernel takes a tensor, as a 0-dim tensor
    /// (ExecuTorch's `ScalarToTensorPass`).
    Scalar(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct KernelCall {
    pub operator: u32,
    pub args: Vec<u32>,
}

#[derive(Debug, Default)]
pub struct Program {
    pub values: Vec<EValue>,
    pub operators: Vec<(String, String)>,
    pub chain: Vec<KernelCall>,
    pub inputs: Vec<u32>,
    pub outputs: Vec<u32>,
    pub constants: Vec<Constant>,
}

#[derive(Debug, thiserror::Error)]
#[error("ExecuTorch portable emission: {0}")]
pub struct LowerError(pub String);

/// Ops that only check sizes: the runtime's bounds checks stand for them.
const DROPPED: &[&str] = &[
    "aten._assert_scalar.default",
    "aten._assert_tensor_metadata.default",
    "aten.sym_constrain_range_for_size.default",
    "aten.sym_constrain_range.default",
    "aten._assert_async.msg",
];

/// `graph` as a portable program whose arena holds what `memory` says: the
/// graph's inputs and outputs it leaves out are [`Storage::Caller`].
pub fn lower(
    graph: &Graph,
    signature: &s::GraphSignature,
    memory: MemoryPlanning,
) -> Result<Program, LowerError> {
    let root = graph.subgraph(0).map_err(|e| LowerError(e.to_string()))?;
    let outputs: Vec<ValueId> = root.outputs.iter().flat_map(Argument::values).collect();
    let mut l = Lowering {
        graph,
        bounds: Bounds::new(graph),
        program: Program::default(),
        ids: HashMap::new(),
        operators: HashMap::new(),
        input_storage: if memory.graph_inputs { Storage::Planned } else { Storage::Caller },
        output_storage: if memory.graph_outputs { Storage::Planned } else { Storage::Caller },
        graph_outputs: outputs.clone(),
    };
    l.inputs(signature)?;
    for id in graph.order(0) {
        l.node(id, &outputs)?;
    }
    for v in outputs {
        let id = l.output(v)?;
        l.program.outputs.push(id);
    }
    Ok(l.program)
}

struct Lowering<'g> {
    graph: &'g Graph,
    bounds: Bounds<'g>,
    program: Program,
    /// The value-table entry of each IR value.
    ids: HashMap<ValueId, u32>,
    operators: HashMap<String, u32>,
    /// Where the graph's inputs live, and its outputs.
    input_storage: Storage,
    output_storage: Storage,
    graph_outputs: Vec<ValueId>,
}

impl Lowering<'_> {
    fn push(&mut self, v: EValue) -> u32 {
        self.program.values.push(v);
        (self.program.values.len() - 1) as u32
    }

    fn error<T>(&self, node: Option<NodeId>, what: String) -> Result<T, LowerError> {
        Err(LowerError(match node {
            Some(n) => format!("node `{}`: {what}", self.graph.node_name(n)),
            None => what,
        }))
    }

    fn tensor(&self, meta: &TensorMeta, storage: Storage) -> Result<Tensor, String> {
        let dtype = DType::from_name(&meta.dtype)
            .ok_or_else(|| format!("dtype `{}` unknown", meta.dtype))?;
        let scalar_type = scalar_type(dtype)
            .ok_or_else(|| format!("ExecuTorch has no scalar type for `{}`", meta.dtype))?;
        let sizes = meta
            .shape
            .iter()
            .map(|d| {
                self.bounds
                    .upper(d)
                    .and_then(|n| i32::try_from(n).map_err(|_| format!("size {n} past 2^31")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let dynamic = meta.shape.iter().any(|d| matches!(d, Dim::Symbolic(_)));
        Ok(Tensor { scalar_type, dim_order: dim_order(meta)?, sizes, dynamic, storage })
    }

    fn tensor_meta(&self, v: ValueId) -> Result<&TensorMeta, String> {
        match &self.graph.value(v).map_err(|e| e.to_string())?.meta {
            ValueMeta::Tensor(t) => Ok(t),
            other => Err(format!(
                "value `{}` is a {}, not a tensor",
                self.graph.value(v).map(|v| v.name.as_str()).unwrap_or("?"),
                other.kind()
            )),
        }
    }

    fn inputs(&mut self, signature: &s::GraphSignature) -> Result<(), LowerError> {
        let root = self.graph.subgraph(0).map_err(|e| LowerError(e.to_string()))?;
        // An input the program updates in place (a static cache) is one more output:
        // the caller gets the updated value back, as from ONNX (`updated.<input>`).
        if let Some(spec) = signature.output_specs.iter().find(|o| {
            !matches!(o, s::OutputSpec::UserOutput { .. } | s::OutputSpec::UserInputMutation { .. })
        }) {
            return self.error(None, format!("the program writes state back ({spec:?}); the native portable emitter plans no mutable buffer (a buffer the program updates; an updated input is fine): use --delegate xnnpack"));
        }
        let mut specs = signature.input_specs.iter();
        for &v in &root.inputs {
            let spec = specs.next();
            // An input torch.export folded to a constant (a `None` the trace saw)
            // is still one of the call's inputs: that constant in the value table.
            if let Some(s::InputSpec::ConstantInput { value, .. }) = spec {
                let constant = match value {
                    s::ConstantValue::AsNone(_) => EValue::Null,
                    s::ConstantValue::AsInt(n) => EValue::Int(*n),
                    s::ConstantValue::AsFloat(f) => EValue::Double(f.0),
                    s::ConstantValue::AsBool(b) => EValue::Bool(*b),
                    s::ConstantValue::AsString(text) => EValue::Str(text.clone()),
                };
                let id = self.push(constant);
                self.ids.insert(v, id);
                self.program.inputs.push(id);
                continue;
            }
            let meta = self.tensor_meta(v).cloned().map_err(LowerError);
            let (storage, constant) = match spec {
                Some(s::InputSpec::Parameter { parameter_name, .. }) => {
                    (None, Some((parameter_name.clone(), false)))
                }
                Some(s::InputSpec::Buffer { buffer_name, .. }) => {
                    (None, Some((buffer_name.clone(), false)))
                }
                Some(s::InputSpec::TensorConstant { tensor_constant_name, .. }) => {
                    (None, Some((tensor_constant_name.clone(), true)))
                }
                Some(s::InputSpec::UserInput { .. }) => (Some(self.input_storage.clone()), None),
                other => {
                    return self.error(
                        None,
                        format!("input {other:?} is not a tensor input the portable runtime takes"),
                    )
                }
            };
            let meta = meta?;
            let storage = match (storage, constant) {
                (Some(s), _) => s,
                (None, Some((fqn, lifted))) => {
                    self.program.constants.push(Constant::Archive {
                        fqn,
                        lifted,
                        meta: meta.clone(),
                    });
                    Storage::Constant(self.program.constants.len() - 1)
                }
                (None, None) => unreachable_input(),
            };
            let is_user = storage == self.input_storage;
            let t = self.tensor(&meta, storage).map_err(|e| {
                LowerError(format!(
                    "input `{}`: {e}",
                    self.graph.value(v).map(|v| v.name.as_str()).unwrap_or("?")
                ))
            })?;
            let id = self.push(EValue::Tensor(t));
            self.ids.insert(v, id);
            if is_user {
                self.program.inputs.push(id);
            }
        }
        Ok(())
    }

    fn operator(&mut self, kernel: &Kernel) -> u32 {
        let (name, overload) = kernel.operator();
        self.named_operator(name, overload)
    }

    fn named_operator(&mut self, name: &str, overload: &str) -> u32 {
        let key = format!("{name}.{overload}");
        if let Some(&i) = self.operators.get(&key) {
            return i;
        }
        self.program.operators.push((name.into(), overload.into()));
        let i = (self.program.operators.len() - 1) as u32;
        self.operators.insert(key, i);
        i
    }

    /// The value-table entry of an IR value already lowered.
    fn id(&self, node: NodeId, v: ValueId) -> Result<u32, LowerError> {
        match self.ids.get(&v) {
            Some(&id) => Ok(id),
            None => self.error(Some(node), format!("reads value {} before it is computed", v.0)),
        }
    }

    fn node(&mut self, id: NodeId, graph_outputs: &[ValueId]) -> Result<(), LowerError> {
        let node = self.graph.node(id).map_err(|e| LowerError(e.to_string()))?;
        if DROPPED.contains(&node.target.as_str()) {
            return Ok(());
        }
        let outputs: Vec<ValueId> = node.output_values().collect();
        // A view of a tensor that is not a graph output: the base's memory, resized.
        if matches!(
            node.target.as_str(),
            "aten.view.default" | "aten._unsafe_view.default" | "aten.alias.default"
        ) && outputs.len() == 1
            && !graph_outputs.contains(&outputs[0])
        {
            'view: {
                let Some(Argument::Tensor(base)) = node.inputs.first().map(|a| &a.value) else {
                    break 'view;
                };
                let base_id = self.id(id, *base)?;
                // An alias has the base's sizes, whatever they are at run time:
                // the base's own value (a value of its own would keep the upper
                // bounds of a dynamic size, never resized).
                if node.target == "aten.alias.default" {
                    self.ids.insert(outputs[0], base_id);
                    return Ok(());
                }
                let root = match &self.program.values[base_id as usize] {
                    EValue::Tensor(Tensor { storage: Storage::Alias(r), .. }) => *r,
                    _ => base_id,
                };
                let meta = self.tensor_meta(outputs[0]).map_err(LowerError)?.clone();
                // A constant is static, and the runtime re-points no view at
                // constant data: a view of one with sizes read from the inputs
                // (a position embedding reshaped to the image's grid) is a
                // copy, by the kernel below.
                let constant_root = matches!(
                    &self.program.values[root as usize],
                    EValue::Tensor(Tensor { storage: Storage::Constant(_), .. })
                );
                if constant_root && meta.shape.iter().any(|d| matches!(d, Dim::Symbolic(_))) {
                    break 'view;
                }
                let (storage, caller) = match &self.program.values[root as usize] {
                    EValue::Tensor(Tensor { storage: Storage::Constant(c), .. }) => {
                        (Storage::Constant(*c), false)
                    }
                    EValue::Tensor(Tensor { storage, .. }) => {
                        (Storage::Alias(root), *storage == Storage::Caller)
                    }
                    _ => (Storage::Alias(root), false),
                };
                let t = self.tensor(&meta, storage).or_else(|e| self.error(Some(id), e))?;
                let dynamic = t.dynamic;
                let out = self.push(EValue::Tensor(t));
                self.ids.insert(outputs[0], out);
                // The caller's memory is known only at run time: `et_view` points the view at it.
                if dynamic || caller {
                    // Spelled as ExecuTorch's emitter spells it (overload `default`).
                    let op = self.named_operator("executorch_prim::et_view", "default");
                    let size = match node.inputs.get(1).map(|a| &a.value) {
                        Some(arg) => self.int_list(id, arg)?,
                        None => return self.error(Some(id), "a view without sizes".into()),
                    };
                    self.program
                        .chain
                        .push(KernelCall { operator: op, args: vec![base_id, size, out] });
                }
                return Ok(());
            }
        }
        let Some(kernel) = kernels::kernel(&node.target) else {
            return self.error(
                Some(id),
                format!("`{}` has no kernel in ExecuTorch's portable runtime (an fx-node-fix plugin for backend \"executorch\" can rewrite it, or use --delegate xnnpack)", node.target),
            );
        };
        let op = self.operator(kernel);
        let mut args = Vec::with_capacity(kernel.args.len() + 1);
        let mut outs = Vec::new();
        let mut out_values = outputs.iter().copied();
        for (position, arg) in kernel.args.iter().enumerate() {
            if arg.out {
                let id_out = match arg.ty {
                    ArgType::Tensor => {
                        let v = out_values.next().ok_or_else(|| {
                            LowerError(format!(
                                "node `{}`: fewer outputs than `{}` writes",
                                self.graph.node_name(id),
                                kernel.kernel
                            ))
                        })?;
                        self.planned(id, v)?
                    }
                    ArgType::TensorList => {
                        let items = out_values
                            .by_ref()
                            .map(|v| self.planned(id, v))
                            .collect::<Result<Vec<_>, _>>()?;
                        self.push(EValue::TensorList(items))
                    }
                    other => {
                        return self.error(Some(id), format!("an out argument of type {other:?}"))
                    }
                };
                args.push(id_out);
                outs.push((arg.ty, id_out));
                continue;
            }
            // A Python sym function's arguments are positional (torch names
            // `math.trunc`'s `x`, ExecuTorch's kernel `a`): by position there.
            let given = node
                .inputs
                .iter()
                .find(|a| a.name == arg.name)
                .or_else(|| if kernel.scalar { node.inputs.get(position) } else { None })
                .map(|a| &a.value);
            // The dim-order ops take the result's dim order where the op had a memory format.
            if arg.name == "dim_order" && kernel.kernel.starts_with("dim_order_ops::") {
                if let Some(Argument::MemoryFormat(m)) = node.input("memory_format") {
                    if m != "contiguous_format" && m != "preserve_format" {
                        return self.error(Some(id), format!("memory format `{m}`: the portable emitter writes contiguous tensors only"));
                    }
                }
                let meta = self.tensor_meta(outputs[0]).map_err(LowerError)?.clone();
                let order = dim_order(&meta).map_err(LowerError)?;
                let items = order.iter().map(|&d| self.int(d as i64)).collect();
                args.push(self.push(EValue::IntList(items)));
                continue;
            }
            let value = self.argument(id, arg, given, &node.target)?;
            args.push(value);
        }
        if kernel.scalar {
            // A scalar op returns its value: a placeholder the kernel overwrites.
            let v = outputs.first().copied().ok_or_else(|| {
                LowerError(format!(
                    "node `{}`: a size op without a result",
                    self.graph.node_name(id)
                ))
            })?;
            let placeholder =
                match &self.graph.value(v).map_err(|e| LowerError(e.to_string()))?.meta {
                    ValueMeta::SymFloat(_) => EValue::Double(0.0),
                    ValueMeta::SymBool(_) => EValue::Bool(false),
                    _ => EValue::Int(0),
                };
            let ret = self.push(placeholder);
            self.ids.insert(v, ret);
            args.push(ret);
        } else {
            // The result again: the out tensor, or a list of the outs.
            match outs.as_slice() {
                [(ArgType::Tensor, one)] => args.push(*one),
                [(ArgType::TensorList, list)] => {
                    let EValue::TensorList(items) = self.program.values[*list as usize].clone()
                    else {
                        unreachable!("pushed as a list above")
                    };
                    let again = self.push(EValue::TensorList(items));
                    args.push(again);
                }
                several => {
                    let items = several.iter().map(|(_, i)| *i).collect();
                    let list = self.push(EValue::TensorList(items));
                    args.push(list);
                }
            }
        }
        self.program.chain.push(KernelCall { operator: op, args });
        Ok(())
    }

    /// A new tensor for the node output `v`: memory-planned, or the caller's
    /// where it is a graph output the arena leaves out.
    fn planned(&mut self, node: NodeId, v: ValueId) -> Result<u32, LowerError> {
        let meta = self.tensor_meta(v).map_err(LowerError)?.clone();
        let storage = if self.graph_outputs.contains(&v) {
            self.output_storage.clone()
        } else {
            Storage::Planned
        };
        let t = self.tensor(&meta, storage).or_else(|e| self.error(Some(node), e))?;
        let id = self.push(EValue::Tensor(t));
        self.ids.insert(v, id);
        Ok(id)
    }

    /// A graph output: its tensor, or a copy where it is an input or a constant
    /// (the runtime hands out the output's own memory).
    fn output(&mut self, v: ValueId) -> Result<u32, LowerError> {
        let id = *self
            .ids
            .get(&v)
            .ok_or_else(|| LowerError(format!("output value {} is never computed", v.0)))?;
        match &self.program.values[id as usize] {
            EValue::Tensor(t)
                if t.storage == self.output_storage && !self.program.inputs.contains(&id) =>
            {
                Ok(id)
            }
            EValue::Tensor(t) => {
                let mut copy = t.clone();
                copy.storage = self.output_storage.clone();
                let kernel = kernels::kernel("aten.clone.default").expect("clone is in the table");
                let op = self.operator(kernel);
                let out = self.push(EValue::Tensor(copy));
                let non_blocking = self.push(EValue::Bool(false));
                let dim_order = self.push(EValue::Null);
                self.program.chain.push(KernelCall {
                    operator: op,
                    args: vec![id, non_blocking, dim_order, out, out],
                });
                Ok(out)
            }
            // A size the program returns (a sequence length): the value the kernel wrote.
            EValue::Int(_) | EValue::Double(_) | EValue::Bool(_) => Ok(id),
            other => Err(LowerError(format!("output value {} is {other:?}, not a tensor", v.0))),
        }
    }

    fn int(&mut self, value: i64) -> u32 {
        self.push(EValue::Int(value))
    }

    fn int_list(&mut self, node: NodeId, arg: &Argument) -> Result<u32, LowerError> {
        let items = match arg {
            Argument::Ints(xs) => xs.iter().map(|&x| self.int(x)).collect(),
            Argument::SymInts(xs) => xs
                .iter()
                .map(|x| match x {
                    Sym::Const(c) => Ok(self.int(*c)),
                    Sym::Value(v) => self.id(node, *v),
                })
                .collect::<Result<Vec<_>, _>>()?,
            other => {
                return self.error(Some(node), format!("expected a list of ints, got {other:?}"))
            }
        };
        Ok(self.push(EValue::IntList(items)))
    }

    /// One schema argument as a value-table entry: the node's, or the default.
    fn argument(
        &mut self,
        node: NodeId,
        arg: &Arg,
        given: Option<&Argument>,
        target: &str,
    ) -> Result<u32, LowerError> {
        let bad = |what: &dyn std::fmt::Debug| {
            LowerError(format!(
                "node `{}` ({target}): argument `{}` of type {:?}: cannot pass {what:?}",
                self.graph.node_name(node),
                arg.name,
                arg.ty
            ))
        };
        let given = match given {
            Some(Argument::None) | None => None,
            Some(a) => Some(a),
        };
        let Some(given) = given else {
            return match (&arg.default, arg.ty) {
                (_, ArgType::Tensor) if !arg.optional => {
                    let empty = Tensor {
                        scalar_type: 0,
                        sizes: vec![0],
                        dim_order: vec![0],
                        dynamic: false,
                        storage: Storage::Empty,
                    };
                    Ok(self.push(EValue::Tensor(empty)))
                }
                (Some(default), ty) => self.json(node, ty, default).map_err(|e| bad(&e)),
                (None, _) if arg.optional => Ok(self.push(EValue::Null)),
                (None, _) if arg.name == "dim_order" => Ok(self.push(EValue::Null)),
                (None, _) => Err(LowerError(format!(
                    "node `{}` ({target}): argument `{}` missing and without default",
                    self.graph.node_name(node),
                    arg.name
                ))),
            };
        };
        let value = match (arg.ty, given) {
            (ArgType::Tensor, Argument::Tensor(v)) => return self.id(node, *v),
            // A scalar where the kernel takes a tensor: a 0-dim constant (int64, float32 or bool, as `torch.tensor` makes it).
            (
                ArgType::Tensor,
                scalar @ (Argument::Int(_) | Argument::Float(_) | Argument::Bool(_)),
            ) => {
                let (scalar_type, bytes) = match scalar {
                    Argument::Int(n) => (4, n.to_le_bytes().to_vec()),
                    Argument::Float(f) => (6, (*f as f32).to_le_bytes().to_vec()),
                    Argument::Bool(b) => (11, vec![*b as u8]),
                    _ => unreachable!("matched above"),
                };
                self.program.constants.push(Constant::Scalar(bytes));
                let storage = Storage::Constant(self.program.constants.len() - 1);
                EValue::Tensor(Tensor {
                    scalar_type,
                    sizes: vec![],
                    dim_order: vec![],
                    dynamic: false,
                    storage,
                })
            }
            (
                ArgType::Tensor,
                sym @ (Argument::SymInt(Sym::Value(v))
                | Argument::SymFloat(Sym::Value(v))
                | Argument::SymBool(Sym::Value(v))),
            ) => return self.scalar_tensor(node, sym, *v),
            (ArgType::TensorList, Argument::Tensors(vs)) => {
                let items = vs.iter().map(|v| self.id(node, *v)).collect::<Result<Vec<_>, _>>()?;
                EValue::TensorList(items)
            }
            (ArgType::OptionalTensorList, Argument::Tensors(vs)) => {
                let items = vs
                    .iter()
                    .map(|v| self.id(node, *v).map(|i| i as i32))
                    .collect::<Result<Vec<_>, _>>()?;
                EValue::OptionalTensorList(items)
            }
            (ArgType::OptionalTensorList, Argument::OptionalTensors(vs)) => {
                let items = vs
                    .iter()
                    .map(|v| v.map(|v| self.id(node, v).map(|i| i as i32)).unwrap_or(Ok(-1)))
                    .collect::<Result<Vec<_>, _>>()?;
                EValue::OptionalTensorList(items)
            }
            (ArgType::IntList, a @ (Argument::Ints(_) | Argument::SymInts(_))) => {
                return self.int_list(node, a)
            }
            (ArgType::Int | ArgType::Scalar, Argument::Int(n))
            | (ArgType::Int | ArgType::Scalar, Argument::SymInt(Sym::Const(n))) => EValue::Int(*n),
            (
                ArgType::Int | ArgType::Scalar | ArgType::Float | ArgType::Bool,
                Argument::SymInt(Sym::Value(v))
                | Argument::SymFloat(Sym::Value(v))
                | Argument::SymBool(Sym::Value(v)),
            ) => return self.id(node, *v),
            (ArgType::Float | ArgType::Scalar, Argument::Float(f))
            | (ArgType::Float | ArgType::Scalar, Argument::SymFloat(Sym::Const(f))) => {
                EValue::Double(*f)
            }
            (ArgType::Float, Argument::Int(n)) => EValue::Double(*n as f64),
            (ArgType::Bool | ArgType::Scalar, Argument::Bool(b))
            | (ArgType::Bool | ArgType::Scalar, Argument::SymBool(Sym::Const(b))) => {
                EValue::Bool(*b)
            }
            (ArgType::FloatList, Argument::Floats(f)) => EValue::DoubleList(f.clone()),
            (ArgType::BoolList, Argument::Bools(b)) => EValue::BoolList(b.clone()),
            (ArgType::Str, Argument::Str(s)) => EValue::Str(s.clone()),
            // TorchScript types carry dtypes, memory formats and layouts as ints.
            (ArgType::ScalarType | ArgType::Int, Argument::Dtype(d)) => {
                let code = DType::from_name(d).and_then(scalar_type).ok_or_else(|| bad(&d))?;
                EValue::Int(code as i64)
            }
            (ArgType::MemoryFormat | ArgType::Int, Argument::MemoryFormat(m)) => {
                EValue::Int(match m.as_str() {
                    // (dim-order ops take no memory format: their `dim_order` is the result's)
                    "contiguous_format" => 0,
                    "preserve_format" => 1,
                    _ => return Err(bad(&m)),
                })
            }
            (ArgType::Layout | ArgType::Int, Argument::Layout(l)) if l == "strided" => {
                EValue::Int(0)
            }
            (_, other) => return Err(bad(other)),
        };
        Ok(self.push(value))
    }

    /// A size (`sym`, the value `v`) passed where the kernel takes a tensor
    /// (`add.Tensor(s0, positions)`): a 0-dim tensor written from it at run
    /// time by `scalar_tensor.out`, typed as ExecuTorch's `SymToTensorPass`
    /// types it (int32, float32, bool).
    fn scalar_tensor(
        &mut self,
        node: NodeId,
        sym: &Argument,
        v: ValueId,
    ) -> Result<u32, LowerError> {
        let scalar_type = match sym {
            Argument::SymFloat(_) => 6,
            Argument::SymBool(_) => 11,
            _ => 3,
        };
        let size = self.id(node, v)?;
        let kernel =
            kernels::kernel("aten.scalar_tensor.default").expect("scalar_tensor is in the table");
        let op = self.operator(kernel);
        let out = self.push(EValue::Tensor(Tensor {
            scalar_type,
            sizes: vec![],
            dim_order: vec![],
            dynamic: false,
            storage: Storage::Planned,
        }));
        self.program.chain.push(KernelCall { operator: op, args: vec![size, out, out] });
        Ok(out)
    }

    fn json(
        &mut self,
        node: NodeId,
        ty: ArgType,
        default: &serde_json::Value,
    ) -> Result<u32, String> {
        use serde_json::Value as J;
        let _ = node;
        let value = match (ty, default) {
            (_, J::Null) => EValue::Null,
            (ArgType::Bool | ArgType::Scalar, J::Bool(b)) => EValue::Bool(*b),
            (ArgType::Float, J::Number(n)) => EValue::Double(n.as_f64().ok_or("not a number")?),
            (
                ArgType::Int
                | ArgType::Scalar
                | ArgType::ScalarType
                | ArgType::MemoryFormat
                | ArgType::Layout,
                J::Number(n),
            ) if n.is_i64() => EValue::Int(n.as_i64().unwrap()),
            (ArgType::Scalar, J::Number(n)) => EValue::Double(n.as_f64().ok_or("not a number")?),
            (ArgType::Str, J::String(s)) => EValue::Str(s.clone()),
            (ArgType::IntList, J::Array(xs)) => {
                let items = xs
                    .iter()
                    .map(|x| x.as_i64().map(|n| self.int(n)).ok_or("not an int"))
                    .collect::<Result<Vec<_>, _>>()?;
                EValue::IntList(items)
            }
            (ArgType::BoolList, J::Array(xs)) => EValue::BoolList(
                xs.iter().map(|x| x.as_bool().ok_or("not a bool")).collect::<Result<_, _>>()?,
            ),
            (ArgType::FloatList, J::Array(xs)) => EValue::DoubleList(
                xs.iter().map(|x| x.as_f64().ok_or("not a float")).collect::<Result<_, _>>()?,
            ),
            (ty, other) => return Err(format!("default {other} for a {ty:?}")),
        };
        Ok(self.push(value))
    }
}

#[cold]
fn unreachable_input() -> Storage {
    Storage::Empty
}

/// torch's (and ExecuTorch's) `ScalarType` numbering.
pub fn scalar_type(dtype: DType) -> Option<i8> {
    use DType::*;
    Some(match dtype {
        Uint8 => 0,
        Int8 => 1,
        Int16 => 2,
        Int32 => 3,
        Int64 => 4,
        Float16 => 5,
        Float32 => 6,
        Float64 => 7,
        Bool => 11,
        Bfloat16 => 15,
        _ => return None,
    })
}

/// Every tensor the portable program holds is contiguous: a view op is a
/// copy into a fresh tensor, so the strides torch recorded for views do not
/// apply (a channels-last memory format is refused where it is asked).
fn dim_order(meta: &TensorMeta) -> Result<Vec<u8>, String> {
    Ok((0..meta.shape.len() as u8).collect())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::graph::{NamedArgument, OutputDecl, RangeConstraint};

    pub(in crate::executorch) fn meta(dtype: &str, shape: &[i64]) -> TensorMeta {
        TensorMeta::new(dtype, shape.iter().map(|&d| Dim::Fixed(d)).collect())
    }

    fn tensor_argument(name: &str) -> s::TensorArgument {
        s::TensorArgument { name: name.into() }
    }

    fn user_input(name: &str) -> s::InputSpec {
        s::InputSpec::UserInput { arg: s::Argument::AsTensor(tensor_argument(name)) }
    }

    fn user_output(name: &str) -> s::OutputSpec {
        s::OutputSpec::UserOutput { arg: s::Argument::AsTensor(tensor_argument(name)) }
    }

    /// The result of `target` called with `inputs` (by schema name).
    fn call(
        g: &mut Graph,
        target: &str,
        inputs: Vec<(&str, Argument)>,
        out: TensorMeta,
    ) -> ValueId {
        let inputs = inputs.into_iter().map(|(n, a)| NamedArgument::positional(n, a)).collect();
        let id = g.push_node(0, target, inputs, vec![OutputDecl::Tensor(out)]).unwrap();
        g.node(id).unwrap().output_values().next().unwrap()
    }

    /// The outputs `base.view(6) * 2.0` (`base` a `[2, 3]` float32) and `also`.
    fn flattened_doubled_and(g: &mut Graph, base: ValueId, also: ValueId) {
        let flat = call(
            g,
            "aten.view.default",
            vec![("self", Argument::Tensor(base)), ("size", Argument::Ints(vec![6]))],
            meta("float32", &[6]),
        );
        let product = call(
            g,
            "aten.mul.Tensor",
            vec![("self", Argument::Tensor(flat)), ("other", Argument::Float(2.0))],
            meta("float32", &[6]),
        );
        g.set_outputs(0, vec![Argument::Tensor(product), Argument::Tensor(also)]).unwrap();
    }

    /// `(x + w).view(6) * 2.0` with `w` a parameter; the outputs are the
    /// product and the input `x` itself.
    pub(in crate::executorch) fn small_program() -> (Graph, s::GraphSignature) {
        let mut g = Graph::new();
        let w = g.add_input(0, "w", ValueMeta::Tensor(meta("float32", &[2, 3])));
        let x = g.add_input(0, "x", ValueMeta::Tensor(meta("float32", &[2, 3])));
        let sum = call(
            &mut g,
            "aten.add.Tensor",
            vec![("self", Argument::Tensor(x)), ("other", Argument::Tensor(w))],
            meta("float32", &[2, 3]),
        );
        flattened_doubled_and(&mut g, sum, x);
        let signature = s::GraphSignature {
            input_specs: vec![
                s::InputSpec::Parameter { arg: tensor_argument("w"), parameter_name: "w".into() },
                user_input("x"),
            ],
            output_specs: vec![user_output("product"), user_output("x")],
        };
        (g, signature)
    }

    /// What the arena leaves out is the caller's: the input, each output (the
    /// product a kernel writes, the input's copy), and a view of the input,
    /// which `et_view` points at the caller's memory on every call.
    #[test]
    fn inputs_and_outputs_the_arena_leaves_out_are_the_callers() {
        let mut g = Graph::new();
        let x = g.add_input(0, "x", ValueMeta::Tensor(meta("float32", &[2, 3])));
        flattened_doubled_and(&mut g, x, x);
        let signature = s::GraphSignature {
            input_specs: vec![user_input("x")],
            output_specs: vec![user_output("product"), user_output("x")],
        };
        let memory =
            MemoryPlanning { graph_inputs: false, graph_outputs: false, ..Default::default() };
        let p = lower(&g, &signature, memory).unwrap();
        let x = p.inputs[0];
        assert_eq!(tensor_of(&p, x).storage, Storage::Caller);
        for &o in &p.outputs {
            assert_eq!(tensor_of(&p, o).storage, Storage::Caller, "output {o}");
        }
        let et_view = p.operators.iter().position(|(n, _)| n == "executorch_prim::et_view");
        let view = p.chain.iter().find(|c| Some(c.operator as usize) == et_view).expect("et_view");
        assert_eq!(
            (view.args[0], tensor_of(&p, view.args[2]).storage.clone()),
            (x, Storage::Alias(x))
        );
        assert!(super::super::memory::plan(&p)
            .offsets
            .iter()
            .all(|&(v, _)| v != x && !p.outputs.contains(&v)));
        let planned = lower(&g, &signature, MemoryPlanning::default()).unwrap();
        assert!(planned.operators.iter().all(|(n, _)| n != "executorch_prim::et_view"));
    }

    fn tensor_of(p: &Program, i: u32) -> &Tensor {
        match &p.values[i as usize] {
            EValue::Tensor(t) => t,
            other => panic!("value {i} is {other:?}"),
        }
    }

    #[test]
    fn ops_become_kernels_with_arguments_by_schema_and_a_view_an_alias() {
        let (g, signature) = small_program();
        let p = lower(&g, &signature, MemoryPlanning::default()).unwrap();
        let operators: Vec<(&str, &str)> =
            p.operators.iter().map(|(n, o)| (n.as_str(), o.as_str())).collect();
        assert_eq!(
            operators,
            [
                ("aten::add", "out"),
                ("aten::mul", "out"),
                ("dim_order_ops::_clone_dim_order", "out")
            ]
        );
        assert_eq!(p.chain.iter().map(|c| c.operator).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(p.inputs.len(), 1, "the parameter is a constant, not an input");
        let x = p.inputs[0];
        assert_eq!(tensor_of(&p, x).storage, Storage::Planned);
        assert_eq!(
            p.constants[0],
            Constant::Archive { fqn: "w".into(), lifted: false, meta: meta("float32", &[2, 3]) }
        );
        // add(self, other, alpha = 1, out) and the result again
        let add = &p.chain[0].args;
        assert_eq!(add.len(), 5);
        assert_eq!((add[0], tensor_of(&p, add[1]).storage.clone()), (x, Storage::Constant(0)));
        assert_eq!(p.values[add[2] as usize], EValue::Int(1), "alpha's default");
        assert_eq!(add[3], add[4]);
        // the view is no kernel: mul reads the sum's memory at the view's sizes
        let mul = &p.chain[1].args;
        let view = tensor_of(&p, mul[0]);
        assert_eq!((view.storage.clone(), view.sizes.clone()), (Storage::Alias(add[3]), vec![6]));
        // a scalar where the kernel takes a tensor: a 0-dim float32 constant
        let scalar = tensor_of(&p, mul[1]);
        assert_eq!((scalar.scalar_type, scalar.sizes.len()), (6, 0));
        assert_eq!(scalar.storage, Storage::Constant(1));
        assert_eq!(p.constants[1], Constant::Scalar(2.0f32.to_le_bytes().to_vec()));
        // an input returned is copied: the runtime hands out the output's own memory
        let clone = &p.chain[2].args;
        assert_eq!(clone[0], x);
        assert_eq!(p.outputs, [mul[2], clone[3]]);
        assert_ne!(clone[3], x);
    }

    /// `x * x` with `x` of shape `[s0, 3]`, `s0` in 1..=8.
    pub(in crate::executorch) fn dynamic_program() -> (Graph, s::GraphSignature) {
        let mut g = Graph::new();
        g.set_range_constraint("s0", RangeConstraint { min: 1, max: Some(8) }).unwrap();
        let dynamic =
            || TensorMeta::new("float32", vec![Dim::Symbolic("s0".into()), Dim::Fixed(3)]);
        let x = g.add_input(0, "x", ValueMeta::Tensor(dynamic()));
        let y = call(
            &mut g,
            "aten.mul.Tensor",
            vec![("self", Argument::Tensor(x)), ("other", Argument::Tensor(x))],
            dynamic(),
        );
        g.set_outputs(0, vec![Argument::Tensor(y)]).unwrap();
        (g, s::GraphSignature { input_specs: vec![user_input("x")], output_specs: vec![] })
    }

    #[test]
    fn a_dynamic_size_is_planned_at_its_upper_bound() {
        let (g, signature) = dynamic_program();
        let p = lower(&g, &signature, MemoryPlanning::default()).unwrap();
        let out = tensor_of(&p, p.outputs[0]);
        assert_eq!((out.sizes.clone(), out.dynamic), (vec![8, 3], true));
        let x = tensor_of(&p, p.inputs[0]);
        assert_eq!((x.sizes.clone(), x.dynamic), (vec![8, 3], true));
    }

    /// What the portable runtime cannot run is refused in one line naming
    /// where and why.
    #[test]
    fn refusals_are_one_line_errors() {
        let refusal = |g: &Graph, signature: &s::GraphSignature| {
            let e = lower(g, signature, MemoryPlanning::default()).unwrap_err().to_string();
            assert!(!e.contains('\n'), "{e}");
            e
        };
        let single = |dtype: &str, target: &str| {
            let mut g = Graph::new();
            let x = g.add_input(0, "x", ValueMeta::Tensor(meta(dtype, &[2])));
            let y = call(&mut g, target, vec![("self", Argument::Tensor(x))], meta(dtype, &[2]));
            g.set_outputs(0, vec![Argument::Tensor(y)]).unwrap();
            g
        };
        let inputs = s::GraphSignature { input_specs: vec![user_input("x")], output_specs: vec![] };
        let e = refusal(&single("complex64", "aten.neg.default"), &inputs);
        assert_eq!(
            e,
            "ExecuTorch portable emission: input `x`: ExecuTorch has no scalar type for `complex64`"
        );
        let e = refusal(&single("float32", "aten.nonexistent.default"), &inputs);
        assert!(
            e.contains("`aten.nonexistent.default` has no kernel in ExecuTorch's portable runtime"),
            "{e}"
        );
        let (g, mut signature) = small_program();
        signature.output_specs.push(s::OutputSpec::BufferMutation {
            arg: tensor_argument("x"),
            buffer_name: "cache".into(),
        });
        assert!(refusal(&g, &signature).contains("use --delegate xnnpack"));
    }
}
