//! Writing ATen → ONNX translations: [`Emit`] reads one FX node's arguments
//! and appends ONNX nodes for it.
//!
//! ```ignore
//! hfx_sdk::onnx_translations! {
//!     "aten.relu.default" => |e| unary(e, "Relu"),
//!     "aten.neg.default" => |e| unary(e, "Neg"),
//! }
//!
//! /// The output's ONNX name; the table binds it to the node's output.
//! fn unary(e: &Emit, op: &str) -> Result<String> {
//!     let x = e.tensor("self")?;
//!     e.op(op, &[&x])
//! }
//! ```

use crate::contract::graph::{Argument, Graph, SymFloat, SymInt};
use crate::contract::onnx::{Attribute, Builder, NamedAttribute};
use crate::contract::types::{Dim, Error, NodeId, TensorMeta, ValueId};
use crate::helpers::{error, is_floating, onnx_dtype, GraphExt};

/// An attribute.
pub fn attr(name: &str, value: Attribute) -> NamedAttribute {
    NamedAttribute { name: name.into(), value }
}

/// One FX node being translated.
pub struct Emit<'a> {
    pub graph: &'a Graph,
    pub node: NodeId,
    pub builder: &'a Builder,
}

impl<'a> Emit<'a> {
    pub fn new(graph: &'a Graph, node: NodeId, builder: &'a Builder) -> Self {
        Emit { graph, node, builder }
    }

    pub fn fail(&self, message: impl Into<String>) -> Error {
        error(message, Some(self.node))
    }

    /// The node's target (`aten.add.Tensor`).
    pub fn target(&self) -> Result<String, Error> {
        self.graph.target(self.node)
    }

    // ── Reading the node ──

    pub fn arg(&self, name: &str) -> Result<Option<Argument>, Error> {
        self.graph.input(self.node, name)
    }

    /// The ONNX name of tensor input `name`.
    pub fn tensor(&self, name: &str) -> Result<String, Error> {
        let value = self.graph.tensor_input(self.node, name)?;
        self.builder.value_name(value)
    }

    pub fn tensor_value(&self, name: &str) -> Result<ValueId, Error> {
        self.graph.tensor_input(self.node, name)
    }

    pub fn meta_of(&self, value: ValueId) -> Result<TensorMeta, Error> {
        self.graph.tensor_meta(value)?.ok_or_else(|| self.fail("not a tensor"))
    }

    /// Metadata of tensor input `name`.
    pub fn input_meta(&self, name: &str) -> Result<TensorMeta, Error> {
        self.meta_of(self.tensor_value(name)?)
    }

    /// Metadata of the node's first output.
    pub fn output_meta(&self) -> Result<TensorMeta, Error> {
        let outputs = self.graph.output_values(self.node)?;
        let first = *outputs.first().ok_or_else(|| self.fail("no output"))?;
        self.meta_of(first)
    }

    pub fn int(&self, name: &str, default: i64) -> Result<i64, Error> {
        match self.arg(name)? {
            None | Some(Argument::None) => Ok(default),
            Some(Argument::Int(i)) => Ok(i),
            Some(Argument::SymInt(SymInt::Constant(i))) => Ok(i),
            Some(Argument::Boolean(b)) => Ok(b as i64),
            Some(other) => Err(self.fail(format!("`{name}`: expected an int, got {other:?}"))),
        }
    }

    pub fn float(&self, name: &str, default: f64) -> Result<f64, Error> {
        match self.arg(name)? {
            None | Some(Argument::None) => Ok(default),
            Some(Argument::Float(f)) => Ok(f),
            Some(Argument::Int(i)) => Ok(i as f64),
            Some(other) => Err(self.fail(format!("`{name}`: expected a float, got {other:?}"))),
        }
    }

    pub fn boolean(&self, name: &str, default: bool) -> Result<bool, Error> {
        match self.arg(name)? {
            None | Some(Argument::None) => Ok(default),
            Some(Argument::Boolean(b)) => Ok(b),
            Some(other) => Err(self.fail(format!("`{name}`: expected a bool, got {other:?}"))),
        }
    }

    pub fn ints(&self, name: &str) -> Result<Vec<i64>, Error> {
        match self.arg(name)? {
            Some(Argument::Ints(v)) => Ok(v),
            Some(Argument::Int(i)) => Ok(vec![i]),
            Some(Argument::SymInts(v)) => {
                v.iter()
                    .map(|s| match s {
                        SymInt::Constant(i) => Ok(*i),
                        SymInt::Value(_) => Err(self
                            .fail(format!("`{name}`: a symbolic size here is not supported yet"))),
                    })
                    .collect()
            }
            Some(other) => Err(self.fail(format!("`{name}`: expected ints, got {other:?}"))),
            None => Err(self.fail(format!("missing `{name}`"))),
        }
    }

    /// The ONNX name of a size list: constants, or a Concat of constants and
    /// symbolic sizes (each a 0-d int64).
    pub fn shape(&self, name: &str) -> Result<String, Error> {
        match self.arg(name)? {
            Some(Argument::SymInts(v)) if v.iter().any(|s| matches!(s, SymInt::Value(_))) => {
                let parts = v.iter().map(|s| self.size_1d(s)).collect::<Result<Vec<_>, _>>()?;
                let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
                self.op_with("Concat", &refs, &[attr("axis", Attribute::Int(0))])
            }
            _ => self.const_ints(&self.ints(name)?),
        }
    }

    /// One size as a 1-D int64 value of one element: a constant, or a
    /// symbolic size (a 0-d value) unsqueezed; what ONNX shape inputs concat.
    pub fn size_1d(&self, size: &SymInt) -> Result<String, Error> {
        match size {
            SymInt::Constant(i) => self.const_ints(&[*i]),
            SymInt::Value(value) => {
                let scalar = self.builder.value_name(*value)?;
                let axes = self.const_ints(&[0])?;
                self.op("Unsqueeze", &[&scalar, &axes])
            }
        }
    }

    /// Int argument `name` (or `default`) as a 1-D int64 value of one element.
    pub fn int_1d(&self, name: &str, default: i64) -> Result<String, Error> {
        match self.arg(name)? {
            Some(Argument::SymInt(size)) => self.size_1d(&size),
            _ => self.const_ints(&[self.int(name, default)?]),
        }
    }

    pub fn dtype_arg(&self, name: &str) -> Result<Option<String>, Error> {
        Ok(match self.arg(name)? {
            Some(Argument::Dtype(d)) => Some(d),
            _ => None,
        })
    }

    // ── Emitting ──

    /// A node with one output and no attributes; returns its name. An empty
    /// input name is an omitted optional input.
    pub fn op(&self, op_type: &str, inputs: &[&str]) -> Result<String, Error> {
        self.op_with(op_type, inputs, &[])
    }

    /// A node with one output and attributes; returns its name.
    pub fn op_with(
        &self,
        op_type: &str,
        inputs: &[&str],
        attributes: &[NamedAttribute],
    ) -> Result<String, Error> {
        Ok(self.op_n(op_type, inputs, 1, attributes)?.remove(0))
    }

    pub fn op_n(
        &self,
        op_type: &str,
        inputs: &[&str],
        outputs: u32,
        attributes: &[NamedAttribute],
    ) -> Result<Vec<String>, Error> {
        let inputs: Vec<String> = inputs.iter().map(|s| s.to_string()).collect();
        self.builder.add_node(op_type, "", &inputs, outputs, attributes)
    }

    /// A 1-D int64 constant.
    pub fn const_ints(&self, values: &[i64]) -> Result<String, Error> {
        self.op_with("Constant", &[], &[attr("value_ints", Attribute::Ints(values.to_vec()))])
    }

    /// A 0-d constant of `dtype`.
    pub fn scalar(&self, value: f64, dtype: &str) -> Result<String, Error> {
        let to = onnx_dtype(dtype).ok_or_else(|| self.fail(format!("no ONNX type for {dtype}")))?;
        let (constant, own) = if is_floating(dtype) {
            (
                self.op_with(
                    "Constant",
                    &[],
                    &[attr("value_float", Attribute::Float(value as f32))],
                )?,
                1,
            )
        } else {
            (self.op_with("Constant", &[], &[attr("value_int", Attribute::Int(value as i64))])?, 7)
        };
        if to == own {
            return Ok(constant);
        }
        self.op_with("Cast", &[&constant], &[attr("to", Attribute::Int(to))])
    }

    /// `name` cast to `dtype` (no node when it already is).
    pub fn cast(&self, name: &str, from: &str, to: &str) -> Result<String, Error> {
        if from == to {
            return Ok(name.to_string());
        }
        let code = onnx_dtype(to).ok_or_else(|| self.fail(format!("no ONNX type for {to}")))?;
        self.op_with("Cast", &[name], &[attr("to", Attribute::Int(code))])
    }

    /// Input `name` as an ONNX value of `dtype`: a tensor (cast if needed) or a
    /// scalar argument as a constant.
    pub fn operand(&self, name: &str, dtype: &str) -> Result<String, Error> {
        match self.arg(name)? {
            Some(Argument::Tensor(value)) => {
                let meta = self.meta_of(value)?;
                let onnx = self.builder.value_name(value)?;
                self.cast(&onnx, &meta.dtype, dtype)
            }
            Some(Argument::Int(i)) => self.scalar(i as f64, dtype),
            Some(Argument::Float(f)) => self.scalar(f, dtype),
            Some(Argument::Boolean(b)) => self.scalar(b as i64 as f64, dtype),
            Some(Argument::SymInt(SymInt::Value(v))) => {
                let onnx = self.builder.value_name(v)?;
                self.cast(&onnx, "int64", dtype)
            }
            Some(Argument::SymInt(SymInt::Constant(i))) => self.scalar(i as f64, dtype),
            // A symbolic float (`x * (x.shape[1] / 4)`) is a 0-d float32, as
            // translate-symbolic computes it.
            Some(Argument::SymFloat(SymFloat::Value(v))) => {
                let onnx = self.builder.value_name(v)?;
                self.cast(&onnx, "float32", dtype)
            }
            Some(Argument::SymFloat(SymFloat::Constant(f))) => self.scalar(f, dtype),
            other => {
                Err(self.fail(format!("`{name}`: expected a tensor or a number, got {other:?}")))
            }
        }
    }

    /// `Where(condition, a, b)` of any dtype: ONNX Runtime's CPU `Where` has
    /// no bool kernel, so bools are `(c & a) | (!c & b)`.
    pub fn where_any(
        &self,
        condition: &str,
        a: &str,
        b: &str,
        dtype: &str,
    ) -> Result<String, Error> {
        if dtype != "bool" {
            return self.op("Where", &[condition, a, b]);
        }
        let picked = self.op("And", &[condition, a])?;
        let kept = self.op("And", &[&self.op("Not", &[condition])?, b])?;
        self.op("Or", &[&picked, &kept])
    }

    /// `a // b` floored toward -inf, as Python and torch do (ONNX `Div`
    /// truncates integers): trunc(a/b) - (sign(a) != sign(b) and a mod b != 0),
    /// the reference's `_operator_floordiv`; floats are `Floor(a / b)`.
    pub fn floor_div(&self, a: &str, b: &str, dtype: &str) -> Result<String, Error> {
        let quotient = self.op("Div", &[a, b])?;
        if is_floating(dtype) {
            return self.op("Floor", &[&quotient]);
        }
        let same_sign = self.op("Equal", &[&self.op("Sign", &[a])?, &self.op("Sign", &[b])?])?;
        let differ = self.op("Not", &[&same_sign])?;
        let rest = self.op_with("Mod", &[a, b], &[attr("fmod", Attribute::Int(0))])?;
        let inexact = self.cast(&rest, dtype, "bool")?;
        let offset = self.op("And", &[&differ, &inexact])?;
        let offset = self.cast(&offset, "bool", dtype)?;
        self.op("Sub", &[&quotient, &offset])
    }

    /// Binds the node's single output to `name`.
    pub fn bind_output(&self, name: &str) -> Result<(), Error> {
        let outputs = self.graph.output_values(self.node)?;
        let [output] = outputs[..] else {
            return Err(self.fail(format!("expected one output, found {}", outputs.len())));
        };
        self.builder.bind(output, name)
    }

    /// Binds the node's outputs, in order.
    pub fn bind_outputs(&self, names: &[String]) -> Result<(), Error> {
        let outputs = self.graph.output_values(self.node)?;
        if outputs.len() != names.len() {
            return Err(self.fail(format!(
                "{} outputs to bind, {} names",
                outputs.len(),
                names.len()
            )));
        }
        outputs.iter().zip(names).try_for_each(|(&v, n)| self.builder.bind(v, n))
    }

    /// The rank of tensor input `name`.
    pub fn rank(&self, name: &str) -> Result<i64, Error> {
        Ok(self.input_meta(name)?.shape.len() as i64)
    }
}

/// What a function of an `onnx_translations!` table returns: `()` when it
/// bound the node's outputs itself, else the ONNX name of its single output
/// (`String`) or of each output in order (`Vec<String>`), which the table binds.
pub trait Translated {
    fn bind(self, emit: &Emit) -> Result<(), Error>;
}

impl Translated for () {
    fn bind(self, _: &Emit) -> Result<(), Error> {
        Ok(())
    }
}

impl Translated for String {
    fn bind(self, emit: &Emit) -> Result<(), Error> {
        emit.bind_output(&self)
    }
}

impl Translated for Vec<String> {
    fn bind(self, emit: &Emit) -> Result<(), Error> {
        emit.bind_outputs(&self)
    }
}

/// Calls one entry of an `onnx_translations!` table (its right-hand side gets
/// its signature from here, so a closure needs no annotations).
#[doc(hidden)]
pub fn __translate_with<T: Translated>(
    emit: &Emit,
    function: impl FnOnce(&Emit) -> Result<T, Error>,
) -> Result<(), Error> {
    function(emit)?.bind(emit)
}

/// The constant sizes of `meta`, if none is symbolic.
pub fn fixed_shape(meta: &TensorMeta) -> Option<Vec<i64>> {
    meta.shape
        .iter()
        .map(|d| match d {
            Dim::Fixed(n) => Some(*n),
            Dim::Symbolic(_) => None,
        })
        .collect()
}
