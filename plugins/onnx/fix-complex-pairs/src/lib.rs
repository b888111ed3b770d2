//! Complex tensors as real pairs: ONNX has no complex element type, so each
//! complex value becomes a real tensor with a trailing dimension of 2 (real,
//! imaginary), the layout ONNX's `DFT` takes and returns. Every op reading or
//! making a complex value is rewritten on that layout, in program order:
//!
//! - `polar`, `complex`, real-to-complex casts build the pair (`cat` of the
//!   parts unsqueezed last);
//! - `view_as_complex` / `view_as_real` become an alias (the pair is the
//!   real view);
//! - products, quotients and conjugates of complex values are written out on
//!   the parts; sums of two complex values, negation and scaling by a real
//!   value stay elementwise on the pairs;
//! - shape ops keep the pair last: a negative dimension counts one further,
//!   a size gets a trailing 2;
//! - `real`, `imag`, `abs`, `angle` read the parts;
//! - the FFTs keep their node, their complex input or output now a pair
//!   (plugins/onnx/translate-fft takes that layout).
//!
//! A whole-program fix, not a translation: which `aten.mul.Tensor` is complex
//! is known from its operands' dtypes, and one op has exactly one translation,
//! so the real translations then serve the rewritten graph unchanged.
//!
//! An op reading a complex value that is not rewritten here stops the run
//! naming it, as does a complex graph input or output.
//!
//! ExecuTorch is served too: hfx's portable emitter has no complex scalar
//! type, and in the XNNPACK lowering ExecuTorch's edge verifier refuses
//! complex operands (the reference silences it, but the runtime then has no
//! `view_as_complex_copy` kernel). Its FFTs keep their complex nodes, which
//! both ExecuTorch programs refuse.

use std::collections::HashSet;

use hfx_sdk::prelude::*;

/// The real dtype of a complex one's parts.
fn part_dtype(dtype: &str) -> Option<&'static str> {
    match dtype {
        "complex64" => Some("float32"),
        "complex128" => Some("float64"),
        "complex32" => Some("float16"),
        _ => None,
    }
}

fn is_complex(meta: &TensorMeta) -> bool {
    part_dtype(&meta.dtype).is_some()
}

/// A complex value's metadata as its pair's.
fn as_pair(meta: &TensorMeta) -> TensorMeta {
    let dtype = part_dtype(&meta.dtype).unwrap_or(&meta.dtype).to_string();
    let mut shape = meta.shape.clone();
    shape.push(Dim::Fixed(2));
    TensorMeta { dtype, shape, strides: vec![], device: meta.device.clone() }
}

/// A complex value's metadata as one of its parts'.
fn as_part(meta: &TensorMeta) -> TensorMeta {
    let dtype = part_dtype(&meta.dtype).unwrap_or(&meta.dtype).to_string();
    TensorMeta { dtype, shape: meta.shape.clone(), strides: vec![], device: meta.device.clone() }
}

/// A pair's metadata without its trailing 2 (one of its parts).
fn pair_part(meta: &TensorMeta) -> TensorMeta {
    let mut shape = meta.shape.clone();
    shape.pop();
    TensorMeta { shape, strides: vec![], ..meta.clone() }
}

/// A dimension of a complex value counted on its pair: a negative one counts
/// from the end, past the trailing pair.
fn pair_dim(dim: i64) -> i64 {
    if dim < 0 {
        dim - 1
    } else {
        dim
    }
}

/// An operand of an arithmetic op.
enum Operand {
    /// A complex value, now its pair.
    Pair(ValueId),
    /// A real tensor.
    Real(ValueId),
    /// A Python number.
    Scalar(Argument),
}

/// The rewrite of one node: new nodes are inserted before it.
struct Rewrite<'a> {
    graph: &'a Graph,
    node: NodeId,
}

impl Rewrite<'_> {
    fn value(&self, target: &str, inputs: &[NamedArgument], meta: TensorMeta) -> Result<ValueId> {
        self.graph.insert_value(self.node, target, inputs, OutputDecl::Tensor(meta))
    }

    fn meta(&self, value: ValueId) -> Result<TensorMeta> {
        self.graph
            .tensor_meta(value)?
            .ok_or_else(|| error("a tensor without tensor metadata", Some(self.node)))
    }

    /// Part `index` (0 real, 1 imaginary) of `pair`.
    fn part(&self, pair: ValueId, index: i64) -> Result<ValueId> {
        let meta = pair_part(&self.meta(pair)?);
        self.value(
            "aten.select.int",
            &[
                positional("self", Argument::Tensor(pair)),
                positional("dim", Argument::Int(-1)),
                positional("index", Argument::Int(index)),
            ],
            meta,
        )
    }

    fn unsqueeze_last(&self, value: ValueId) -> Result<ValueId> {
        let mut meta = self.meta(value)?;
        meta.shape.push(Dim::Fixed(1));
        meta.strides = vec![];
        self.value(
            "aten.unsqueeze.default",
            &[positional("self", Argument::Tensor(value)), positional("dim", Argument::Int(-1))],
            meta,
        )
    }

    /// The pair of `re` and `im`, both of `part` (the complex result's
    /// metadata as a part).
    fn pair(&self, re: ValueId, im: ValueId, part: &TensorMeta) -> Result<ValueId> {
        let re = self.unsqueeze_last(re)?;
        let im = self.unsqueeze_last(im)?;
        let mut meta = part.clone();
        meta.shape.push(Dim::Fixed(2));
        self.value(
            "aten.cat.default",
            &[
                positional("tensors", Argument::Tensors(vec![re, im])),
                positional("dim", Argument::Int(-1)),
            ],
            meta,
        )
    }

    /// `a op b` (a binary elementwise op of two tensors) of result `meta`.
    fn binary(&self, op: &str, a: ValueId, b: ValueId, meta: &TensorMeta) -> Result<ValueId> {
        self.value(
            op,
            &[positional("self", Argument::Tensor(a)), positional("other", Argument::Tensor(b))],
            meta.clone(),
        )
    }

    fn unary(&self, op: &str, a: ValueId, meta: &TensorMeta) -> Result<ValueId> {
        self.value(op, &[positional("self", Argument::Tensor(a))], meta.clone())
    }

    /// `a · b` of complex pairs; `part` is the result's part metadata.
    fn complex_mul(&self, a: ValueId, b: ValueId, part: &TensorMeta) -> Result<ValueId> {
        let (ar, ai, br, bi) =
            (self.part(a, 0)?, self.part(a, 1)?, self.part(b, 0)?, self.part(b, 1)?);
        let mul = |x, y| self.binary("aten.mul.Tensor", x, y, part);
        let re = self.binary("aten.sub.Tensor", mul(ar, br)?, mul(ai, bi)?, part)?;
        let im = self.binary("aten.add.Tensor", mul(ar, bi)?, mul(ai, br)?, part)?;
        self.pair(re, im, part)
    }

    /// `a / b` of complex pairs: `a · conj(b) / |b|²`.
    fn complex_div(&self, a: ValueId, b: ValueId, part: &TensorMeta) -> Result<ValueId> {
        let (ar, ai, br, bi) =
            (self.part(a, 0)?, self.part(a, 1)?, self.part(b, 0)?, self.part(b, 1)?);
        let b_part = pair_part(&self.meta(b)?);
        let norm = self.binary(
            "aten.add.Tensor",
            self.binary("aten.mul.Tensor", br, br, &b_part)?,
            self.binary("aten.mul.Tensor", bi, bi, &b_part)?,
            &b_part,
        )?;
        let mul = |x, y| self.binary("aten.mul.Tensor", x, y, part);
        let re = self.binary("aten.add.Tensor", mul(ar, br)?, mul(ai, bi)?, part)?;
        let im = self.binary("aten.sub.Tensor", mul(ai, br)?, mul(ar, bi)?, part)?;
        let re = self.binary("aten.div.Tensor", re, norm, part)?;
        let im = self.binary("aten.div.Tensor", im, norm, part)?;
        self.pair(re, im, part)
    }

    /// `x` with `op` applied to its real part only (adding a real value).
    fn on_real_part(
        &self,
        x: ValueId,
        part: &TensorMeta,
        op: impl FnOnce(ValueId) -> Result<ValueId>,
    ) -> Result<ValueId> {
        let re = op(self.part(x, 0)?)?;
        let im = self.part(x, 1)?;
        self.pair(re, im, part)
    }
}

#[hfx_sdk::fx_program_fix]
fn complex_pairs(graph: &Graph) -> Result<()> {
    let mut pairs: HashSet<ValueId> = HashSet::new();
    for node in graph.nodes() {
        rewrite_node(graph, node, &mut pairs)?;
    }
    for output in graph.graph_outputs() {
        if let Argument::Tensor(value) = output {
            if pairs.contains(&value) {
                let name = graph.value_name(value)?;
                return Err(error(
                    format!("graph output `{name}` is complex, which ONNX has no type for: return `torch.view_as_real` of it"),
                    None,
                ));
            }
        }
    }
    Ok(())
}

/// The tensors a node reads, in order.
fn tensor_inputs(inputs: &[NamedArgument]) -> Vec<ValueId> {
    inputs
        .iter()
        .flat_map(|input| match &input.value {
            Argument::Tensor(v) => vec![*v],
            Argument::Tensors(vs) => vs.clone(),
            Argument::OptionalTensors(vs) => vs.iter().flatten().copied().collect(),
            _ => vec![],
        })
        .collect()
}

fn rewrite_node(graph: &Graph, node: NodeId, pairs: &mut HashSet<ValueId>) -> Result<()> {
    let inputs = graph.inputs(node)?;
    // torch's decompositions of complex ops (`imag` is `_neg_view` of the
    // conjugate's real view) leave a lazily negated view: a negation, which
    // has a translation where the view has none.
    if graph.target(node)? == "aten._neg_view.default" {
        let neg = graph.replace_with_call(node, "aten.neg.default", inputs)?;
        return rewrite_node(graph, neg, pairs);
    }
    let reads = tensor_inputs(&inputs);
    let outputs = graph.output_values(node)?;
    let mut complex_out = Vec::new();
    for &value in &outputs {
        if let Some(meta) = graph.tensor_meta(value)? {
            if is_complex(&meta) {
                complex_out.push((value, meta));
            }
        }
    }
    let reads_pair = reads.iter().any(|v| pairs.contains(v));
    for &value in &reads {
        if !pairs.contains(&value) && graph.tensor_meta(value)?.is_some_and(|m| is_complex(&m)) {
            let name = graph.value_name(value)?;
            return Err(error(
                format!("`{name}` is a complex graph input, which ONNX has no type for: pass `torch.view_as_real` of it"),
                Some(node),
            ));
        }
    }
    if !reads_pair && complex_out.is_empty() {
        return Ok(());
    }
    let target = graph.target(node)?;
    let r = Rewrite { graph, node };
    let input = |name: &str| -> Result<Argument> {
        graph
            .input(node, name)?
            .ok_or_else(|| error(format!("`{target}` without `{name}`"), Some(node)))
    };
    let operand = |name: &str| -> Result<Operand> {
        Ok(match input(name)? {
            Argument::Tensor(v) if pairs.contains(&v) => Operand::Pair(v),
            Argument::Tensor(v) => Operand::Real(v),
            other => Operand::Scalar(other),
        })
    };
    let unsupported = || {
        error(
            format!("`{target}` reads or makes a complex value, which fix-complex-pairs does not rewrite on real pairs"),
            Some(node),
        )
    };
    // The one complex output, its metadata as a part.
    let single = || -> Result<(ValueId, TensorMeta)> {
        match complex_out.as_slice() {
            [(value, meta)] => Ok((*value, as_part(meta))),
            _ => Err(unsupported()),
        }
    };
    // Keeps the node: its complex outputs become pairs.
    let keep = |pairs: &mut HashSet<ValueId>| -> Result<()> {
        for (value, meta) in &complex_out {
            graph.set_value_meta(*value, &ValueMeta::Tensor(as_pair(meta)))?;
            pairs.insert(*value);
        }
        Ok(())
    };
    // Replaces the node's one output by `by`, a pair (or a real value).
    let replace =
        |pairs: &mut HashSet<ValueId>, old: ValueId, by: ValueId, is_pair: bool| -> Result<()> {
            graph.replace_uses(old, Replacement::Value(by))?;
            graph.erase(node)?;
            if is_pair {
                pairs.insert(by);
            }
            Ok(())
        };
    // Sets a dimension argument counted on the pair.
    let shift_dim = |name: &str| -> Result<()> {
        if let Some(Argument::Int(dim)) = graph.input(node, name)? {
            let keyword = inputs.iter().any(|i| i.name == name && i.keyword);
            let value = Argument::Int(pair_dim(dim));
            graph.set_input(node, &NamedArgument { name: name.into(), value, keyword })?;
        }
        Ok(())
    };
    let set = |name: &str, value: Argument| -> Result<()> {
        let keyword = inputs.iter().any(|i| i.name == name && i.keyword);
        graph.set_input(node, &NamedArgument { name: name.into(), value, keyword })
    };
    let only_output = || -> Result<ValueId> {
        match outputs.as_slice() {
            [value] => Ok(*value),
            _ => Err(unsupported()),
        }
    };

    match target.as_str() {
        "aten.polar.default" => {
            let (out, part) = single()?;
            let abs = graph.tensor_input(node, "abs")?;
            let angle = graph.tensor_input(node, "angle")?;
            let re = r.binary(
                "aten.mul.Tensor",
                abs,
                r.unary("aten.cos.default", angle, &r.meta(angle)?)?,
                &part,
            )?;
            let im = r.binary(
                "aten.mul.Tensor",
                abs,
                r.unary("aten.sin.default", angle, &r.meta(angle)?)?,
                &part,
            )?;
            let pair = r.pair(re, im, &part)?;
            replace(pairs, out, pair, true)
        }
        "aten.complex.default" => {
            let (out, part) = single()?;
            let re = graph.tensor_input(node, "real")?;
            let im = graph.tensor_input(node, "imag")?;
            if r.meta(re)?.shape != part.shape || r.meta(im)?.shape != part.shape {
                return Err(error(
                    "`aten.complex.default` of parts of different shapes: broadcast them first (`torch.broadcast_tensors`)",
                    Some(node),
                ));
            }
            let pair = r.pair(re, im, &part)?;
            replace(pairs, out, pair, true)
        }
        "aten.view_as_complex.default" => {
            let (out, part) = single()?;
            let x = graph.tensor_input(node, "self")?;
            let mut meta = part.clone();
            meta.shape.push(Dim::Fixed(2));
            let alias =
                r.value("aten.alias.default", &[positional("self", Argument::Tensor(x))], meta)?;
            replace(pairs, out, alias, true)
        }
        "aten.view_as_real.default" => {
            let out = only_output()?;
            let x = graph.tensor_input(node, "self")?;
            let alias = r.value(
                "aten.alias.default",
                &[positional("self", Argument::Tensor(x))],
                r.meta(out)?,
            )?;
            replace(pairs, out, alias, false)
        }
        "aten.real.default" | "aten.imag.default" => {
            let out = only_output()?;
            let x = graph.tensor_input(node, "self")?;
            let part = r.part(x, if target == "aten.real.default" { 0 } else { 1 })?;
            replace(pairs, out, part, false)
        }
        "aten.abs.default" => {
            let out = only_output()?;
            let x = graph.tensor_input(node, "self")?;
            let meta = r.meta(out)?;
            let (re, im) = (r.part(x, 0)?, r.part(x, 1)?);
            let squares = r.binary(
                "aten.add.Tensor",
                r.binary("aten.mul.Tensor", re, re, &meta)?,
                r.binary("aten.mul.Tensor", im, im, &meta)?,
                &meta,
            )?;
            let abs = r.unary("aten.sqrt.default", squares, &meta)?;
            replace(pairs, out, abs, false)
        }
        "aten.angle.default" => {
            let out = only_output()?;
            let x = graph.tensor_input(node, "self")?;
            let angle =
                r.binary("aten.atan2.default", r.part(x, 1)?, r.part(x, 0)?, &r.meta(out)?)?;
            replace(pairs, out, angle, false)
        }
        "aten._conj.default"
        | "aten.conj.default"
        | "aten.conj_physical.default"
        | "aten._conj_physical.default" => {
            let (out, part) = single()?;
            let x = graph.tensor_input(node, "self")?;
            let im = r.unary("aten.neg.default", r.part(x, 1)?, &part)?;
            let pair = r.pair(r.part(x, 0)?, im, &part)?;
            replace(pairs, out, pair, true)
        }
        "aten.mul.Tensor" | "aten.mul.Scalar" | "aten.div.Tensor" | "aten.div.Scalar" => {
            let (out, part) = single()?;
            let div = target.starts_with("aten.div");
            match (operand("self")?, operand("other")?) {
                (Operand::Pair(a), Operand::Pair(b)) => {
                    let pair =
                        if div { r.complex_div(a, b, &part)? } else { r.complex_mul(a, b, &part)? };
                    replace(pairs, out, pair, true)
                }
                // A real factor scales both parts: it broadcasts against the pair once unsqueezed last.
                (Operand::Pair(a), Operand::Real(b)) => {
                    let b = r.unsqueeze_last(b)?;
                    let value = r.binary(&target, a, b, &as_pair(&complex_out[0].1))?;
                    replace(pairs, out, value, true)
                }
                (Operand::Real(a), Operand::Pair(b)) if !div => {
                    let a = r.unsqueeze_last(a)?;
                    let value = r.binary(&target, a, b, &as_pair(&complex_out[0].1))?;
                    replace(pairs, out, value, true)
                }
                (Operand::Pair(_), Operand::Scalar(Argument::Int(_) | Argument::Float(_))) => {
                    keep(pairs)
                }
                (Operand::Scalar(Argument::Int(_) | Argument::Float(_)), Operand::Pair(_))
                    if !div =>
                {
                    keep(pairs)
                }
                _ => Err(unsupported()),
            }
        }
        "aten.add.Tensor" | "aten.sub.Tensor" | "aten.add.Scalar" | "aten.sub.Scalar" => {
            let (out, part) = single()?;
            let alpha = graph.input(node, "alpha")?;
            match (operand("self")?, operand("other")?) {
                (Operand::Pair(_), Operand::Pair(_)) => keep(pairs),
                // A real term adds to the real part only.
                (Operand::Pair(a), other @ (Operand::Real(_) | Operand::Scalar(_))) => {
                    let other = match other {
                        Operand::Real(b) => Argument::Tensor(b),
                        Operand::Scalar(s) => s,
                        Operand::Pair(_) => unreachable!(),
                    };
                    let pair = r.on_real_part(a, &part, |re| {
                        let mut args = vec![
                            positional("self", Argument::Tensor(re)),
                            positional("other", other),
                        ];
                        if let Some(alpha) = alpha {
                            args.push(keyword("alpha", alpha));
                        }
                        let op = if matches!(args[1].value, Argument::Tensor(_)) {
                            target.replace(".Scalar", ".Tensor")
                        } else {
                            target.clone()
                        };
                        r.value(&op, &args, part.clone())
                    })?;
                    replace(pairs, out, pair, true)
                }
                _ => Err(unsupported()),
            }
        }
        "aten.neg.default"
        | "aten.clone.default"
        | "aten.alias.default"
        | "aten.detach.default"
        | "aten.contiguous.default"
        | "aten.lift_fresh_copy.default" => keep(pairs),
        "aten._assert_tensor_metadata.default" => {
            if let Some(Argument::Dtype(dtype)) = graph.input(node, "dtype")? {
                if let Some(real) = part_dtype(&dtype) {
                    set("dtype", Argument::Dtype(real.into()))?;
                }
            }
            if let Some(Argument::Ints(sizes)) = graph.input(node, "size")? {
                set("size", Argument::Ints(sizes.into_iter().chain([2]).collect()))?;
            }
            if graph.input(node, "stride")?.is_some() {
                set("stride", Argument::None)?;
            }
            Ok(())
        }
        "aten.to.dtype"
        | "aten.to.dtype_layout"
        | "aten.to.device"
        | "aten._to_copy.default"
        | "aten.type_as.default" => {
            let (out, part) = single()?;
            let x = graph.tensor_input(node, "self")?;
            if pairs.contains(&x) {
                if let Some(Argument::Dtype(dtype)) = graph.input(node, "dtype")? {
                    let real = part_dtype(&dtype).ok_or_else(unsupported)?;
                    set("dtype", Argument::Dtype(real.into()))?;
                }
                if target == "aten.type_as.default" {
                    return Err(unsupported());
                }
                return keep(pairs);
            }
            // A real value made complex: its imaginary part is zero.
            let re = r.value(
                "aten._to_copy.default",
                &[
                    positional("self", Argument::Tensor(x)),
                    keyword("dtype", Argument::Dtype(part.dtype.clone())),
                ],
                part.clone(),
            )?;
            let im = r.value(
                "aten.zeros_like.default",
                &[
                    positional("self", Argument::Tensor(re)),
                    keyword("pin_memory", Argument::Boolean(false)),
                ],
                part.clone(),
            )?;
            let pair = r.pair(re, im, &part)?;
            replace(pairs, out, pair, true)
        }
        "aten.unsqueeze.default"
        | "aten.squeeze.dim"
        | "aten.select.int"
        | "aten.slice.Tensor"
        | "aten.narrow.default"
        | "aten.cat.default" => {
            if tensor_inputs(&inputs).iter().any(|v| !pairs.contains(v)) {
                return Err(error(
                    format!(
                        "`{target}` of complex and real tensors: make the real ones complex first"
                    ),
                    Some(node),
                ));
            }
            shift_dim("dim")?;
            keep(pairs)
        }
        "aten.transpose.int" => {
            shift_dim("dim0")?;
            shift_dim("dim1")?;
            keep(pairs)
        }
        "aten.flatten.using_ints" => {
            shift_dim("start_dim")?;
            shift_dim("end_dim")?;
            keep(pairs)
        }
        "aten.squeeze.dims" | "aten.flip.default" => {
            let name = if target == "aten.flip.default" { "dims" } else { "dim" };
            if let Some(Argument::Ints(dims)) = graph.input(node, name)? {
                set(name, Argument::Ints(dims.into_iter().map(pair_dim).collect()))?;
            }
            keep(pairs)
        }
        "aten.permute.default" => {
            let rank =
                complex_out.first().map(|(_, m)| m.shape.len() as i64).ok_or_else(unsupported)?;
            if let Some(Argument::Ints(dims)) = graph.input(node, "dims")? {
                let dims = dims
                    .into_iter()
                    .map(|d| if d < 0 { d + rank } else { d })
                    .chain([rank])
                    .collect();
                set("dims", Argument::Ints(dims))?;
            }
            keep(pairs)
        }
        // A size gets the trailing pair (a broadcast or a view keeps it last).
        "aten.reshape.default"
        | "aten.view.default"
        | "aten._unsafe_view.default"
        | "aten.expand.default"
        | "aten.repeat.default" => {
            let name = if target == "aten.repeat.default" { "repeats" } else { "size" };
            let last = if target == "aten.repeat.default" { 1 } else { 2 };
            match graph.input(node, name)? {
                Some(Argument::Ints(sizes)) => {
                    set(name, Argument::Ints(sizes.into_iter().chain([last]).collect()))?
                }
                Some(Argument::SymInts(sizes)) => set(
                    name,
                    Argument::SymInts(sizes.into_iter().chain([SymInt::Constant(last)]).collect()),
                )?,
                _ => return Err(unsupported()),
            }
            keep(pairs)
        }
        // The FFTs keep their node; translate-fft reads and writes pairs.
        "aten._fft_r2c.default"
        | "aten._fft_c2c.default"
        | "aten._fft_c2r.default"
        | "aten.fft_fft.default"
        | "aten.fft_ifft.default"
        | "aten.fft_fftn.default"
        | "aten.fft_ifftn.default" => keep(pairs),
        _ => Err(unsupported()),
    }
}
