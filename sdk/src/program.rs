//! Building the straight-line programs patch plugins answer with.
//!
//! ```ignore
//! fn apply(call: PatchedCall) -> Result<Program, Error> {
//!     let input = call.param(0, "input").ok_or_else(|| error("no input", None))?;
//!     if !call.tensor(input).is_some_and(|t| t.meta.dtype.starts_with("complex")) {
//!         return Ok(ProgramBuilder::passthrough(&call));
//!     }
//!     let mut p = ProgramBuilder::new(&call);
//!     let real = p.getattr(input, "real");
//!     ...
//!     Ok(p.finish(out))
//! }
//! ```

use crate::contract::patching::*;
use crate::contract::types::Dim;

/// Reading a patched call's values.
pub trait CallExt {
    /// The argument at `index` if passed positionally, else the keyword `name`.
    fn param(&self, index: usize, name: &str) -> Option<Slot>;
    /// The keyword argument `name`.
    fn kwarg(&self, name: &str) -> Option<Slot>;
    fn value(&self, slot: Slot) -> Option<&CallValue>;
    fn tensor(&self, slot: Slot) -> Option<&LiveTensor>;
    /// A plain int (not a symbolic one).
    fn int(&self, slot: Slot) -> Option<i64>;
    /// A plain float, or an int read as float.
    fn float(&self, slot: Slot) -> Option<f64>;
    fn boolean(&self, slot: Slot) -> Option<bool>;
    fn string(&self, slot: Slot) -> Option<&str>;
    /// Absent, or `None`.
    fn is_none(&self, slot: Option<Slot>) -> bool;
    /// A list or tuple of plain ints.
    fn ints(&self, slot: Slot) -> Option<Vec<i64>>;
    /// A scalar attribute of an object argument (a module's `eps`).
    fn attribute(&self, slot: Slot, name: &str) -> Option<&Scalar>;
    /// The dtype argument, if one was passed.
    fn dtype(&self, slot: Slot) -> Option<&str>;
    /// The keyword arguments as the builder takes them.
    fn kwarg_slots(&self) -> Vec<(&str, Slot)>;
}

impl CallExt for PatchedCall {
    fn param(&self, index: usize, name: &str) -> Option<Slot> {
        self.args
            .get(index)
            .copied()
            .or_else(|| self.kwargs.iter().find(|(k, _)| k == name).map(|(_, s)| *s))
    }
    fn kwarg(&self, name: &str) -> Option<Slot> {
        self.kwargs.iter().find(|(k, _)| k == name).map(|(_, s)| *s)
    }
    fn value(&self, slot: Slot) -> Option<&CallValue> {
        self.values.get(slot as usize)
    }
    fn tensor(&self, slot: Slot) -> Option<&LiveTensor> {
        match self.value(slot) {
            Some(CallValue::Tensor(t)) => Some(t),
            _ => None,
        }
    }
    fn int(&self, slot: Slot) -> Option<i64> {
        match self.value(slot) {
            Some(CallValue::Scalar(Scalar::Int(i))) => Some(*i),
            _ => None,
        }
    }
    fn float(&self, slot: Slot) -> Option<f64> {
        match self.value(slot) {
            Some(CallValue::Scalar(Scalar::Float(f))) => Some(*f),
            Some(CallValue::Scalar(Scalar::Int(i))) => Some(*i as f64),
            _ => None,
        }
    }
    fn boolean(&self, slot: Slot) -> Option<bool> {
        match self.value(slot) {
            Some(CallValue::Scalar(Scalar::Boolean(b))) => Some(*b),
            _ => None,
        }
    }
    fn string(&self, slot: Slot) -> Option<&str> {
        match self.value(slot) {
            Some(CallValue::Scalar(Scalar::Str(s))) => Some(s),
            _ => None,
        }
    }
    fn is_none(&self, slot: Option<Slot>) -> bool {
        slot.is_none_or(|s| matches!(self.value(s), Some(CallValue::Scalar(Scalar::None))))
    }
    fn ints(&self, slot: Slot) -> Option<Vec<i64>> {
        match self.value(slot) {
            Some(CallValue::Sequence(items)) => items.iter().map(|&s| self.int(s)).collect(),
            _ => None,
        }
    }
    fn attribute(&self, slot: Slot, name: &str) -> Option<&Scalar> {
        match self.value(slot) {
            Some(CallValue::Object(o)) => {
                o.attributes.iter().find(|(k, _)| k == name).map(|(_, v)| v)
            }
            _ => None,
        }
    }
    fn dtype(&self, slot: Slot) -> Option<&str> {
        match self.value(slot) {
            Some(CallValue::Dtype(d)) => Some(d),
            _ => None,
        }
    }
    fn kwarg_slots(&self) -> Vec<(&str, Slot)> {
        self.kwargs.iter().map(|(k, s)| (k.as_str(), *s)).collect()
    }
}

/// Facts about a live tensor.
pub trait TensorExt {
    fn rank(&self) -> usize;
    /// The size of `dim` (negative counts from the end) when it is a constant.
    fn fixed_dim(&self, dim: i64) -> Option<i64>;
    /// Whether `dim`'s size is symbolic (varies with the inputs).
    fn symbolic_dim(&self, dim: i64) -> bool;
    fn is_complex(&self) -> bool;
    fn is_floating(&self) -> bool;
}

impl TensorExt for LiveTensor {
    fn rank(&self) -> usize {
        self.meta.shape.len()
    }
    fn fixed_dim(&self, dim: i64) -> Option<i64> {
        match self.meta.shape.get(normalize_dim(dim, self.rank())?) {
            Some(Dim::Fixed(n)) => Some(*n),
            _ => None,
        }
    }
    fn symbolic_dim(&self, dim: i64) -> bool {
        normalize_dim(dim, self.rank())
            .is_some_and(|d| matches!(self.meta.shape.get(d), Some(Dim::Symbolic(_))))
    }
    fn is_complex(&self) -> bool {
        self.meta.dtype.starts_with("complex")
    }
    fn is_floating(&self) -> bool {
        crate::helpers::is_floating(&self.meta.dtype)
    }
}

/// `dim` in `0..rank`, from a possibly negative index.
pub fn normalize_dim(dim: i64, rank: usize) -> Option<usize> {
    let d = if dim < 0 { dim + rank as i64 } else { dim };
    (0..rank as i64).contains(&d).then_some(d as usize)
}

/// Appends steps; each returns the slot of its result.
pub struct ProgramBuilder {
    next: Slot,
    steps: Vec<Step>,
}

impl ProgramBuilder {
    /// Slots `0..call.values.len()` are the call's values.
    pub fn new(call: &PatchedCall) -> Self {
        ProgramBuilder { next: call.values.len() as Slot, steps: Vec::new() }
    }

    /// The original target called with the call's own arguments.
    pub fn passthrough(call: &PatchedCall) -> Program {
        let mut p = ProgramBuilder::new(call);
        let out = p.original(&call.args, &call.kwarg_slots());
        p.finish(out)
    }

    fn push(&mut self, step: Step) -> Slot {
        self.steps.push(step);
        self.next += 1;
        self.next - 1
    }

    fn kwargs(kwargs: &[(&str, Slot)]) -> Vec<(String, Slot)> {
        kwargs.iter().map(|(k, s)| (k.to_string(), *s)).collect()
    }

    /// `op(*args)`: an ATen op (`aten.narrow.default`) or a dotted callable (`torch.narrow`).
    pub fn call(&mut self, op: &str, args: &[Slot]) -> Slot {
        self.call_kw(op, args, &[])
    }

    pub fn call_kw(&mut self, op: &str, args: &[Slot], kwargs: &[(&str, Slot)]) -> Slot {
        self.push(Step::Call(OpCall {
            op: op.into(),
            args: args.to_vec(),
            kwargs: Self::kwargs(kwargs),
        }))
    }

    /// The original target.
    pub fn original(&mut self, args: &[Slot], kwargs: &[(&str, Slot)]) -> Slot {
        self.push(Step::Original(OpCall {
            op: String::new(),
            args: args.to_vec(),
            kwargs: Self::kwargs(kwargs),
        }))
    }

    /// Calls the value in `callee` (a module, or a callable the call was handed).
    pub fn invoke(&mut self, callee: Slot, args: &[Slot], kwargs: &[(&str, Slot)]) -> Slot {
        self.push(Step::Invoke(ValueCall {
            callee,
            args: args.to_vec(),
            kwargs: Self::kwargs(kwargs),
        }))
    }

    pub fn getattr(&mut self, slot: Slot, name: &str) -> Slot {
        self.push(Step::Getattr((slot, name.into())))
    }

    /// `slot[index]`; negative counts from the end.
    pub fn item(&mut self, slot: Slot, index: i64) -> Slot {
        self.push(Step::Item((slot, index)))
    }

    pub fn int(&mut self, value: i64) -> Slot {
        self.push(Step::Constant(Scalar::Int(value)))
    }

    pub fn float(&mut self, value: f64) -> Slot {
        self.push(Step::Constant(Scalar::Float(value)))
    }

    pub fn boolean(&mut self, value: bool) -> Slot {
        self.push(Step::Constant(Scalar::Boolean(value)))
    }

    pub fn string(&mut self, value: &str) -> Slot {
        self.push(Step::Constant(Scalar::Str(value.into())))
    }

    pub fn none(&mut self) -> Slot {
        self.push(Step::Constant(Scalar::None))
    }

    /// A value at a dotted path (`torch.float32`).
    pub fn lookup(&mut self, path: &str) -> Slot {
        self.push(Step::Lookup(path.into()))
    }

    /// `torch.<dtype>`.
    pub fn dtype(&mut self, name: &str) -> Slot {
        self.lookup(&format!("torch.{name}"))
    }

    /// A tuple of slots.
    pub fn pack(&mut self, slots: &[Slot]) -> Slot {
        self.push(Step::Pack(slots.to_vec()))
    }

    /// Enters a context manager for the rest of the program.
    pub fn enter(&mut self, context: Slot) -> Slot {
        self.push(Step::Enter(context))
    }

    /// A callable that reaches this plugin's `apply` as target `target`,
    /// with `captured` before its own arguments.
    pub fn callback(&mut self, target: &str, captured: &[Slot]) -> Slot {
        self.push(Step::Callback(Callback { target: target.into(), captured: captured.to_vec() }))
    }

    /// `tensor.size(dim)`: an int, or a symbolic int under dynamic shapes.
    pub fn size(&mut self, tensor: Slot, dim: i64) -> Slot {
        let d = self.int(dim);
        self.call("torch.Tensor.size", &[tensor, d])
    }

    /// `tensor.narrow(dim, start, length)`.
    pub fn narrow(&mut self, tensor: Slot, dim: Slot, start: Slot, length: Slot) -> Slot {
        self.call("torch.Tensor.narrow", &[tensor, dim, start, length])
    }

    pub fn finish(self, output: Slot) -> Program {
        Program { steps: self.steps, output }
    }
}
