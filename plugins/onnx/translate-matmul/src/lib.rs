//! Matrix products → ONNX: `linear` directly (MatMul with the transposed
//! weight, then the bias), as torch.onnx's ONNX-friendly table does, instead
//! of decomposing it first. Grouped products (`_grouped_mm`, transformers'
//! `grouped_mm_fallback`, the MoE experts) unroll into one `MatMul` per group,
//! as the reference's `_aten_grouped_mm` does.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.linear.default" => linear,
    "aten.matmul.default" => |e| product(e, "other"),
    "aten.mm.default" => |e| product(e, "mat2"),
    "aten.bmm.default" => |e| product(e, "mat2"),
    "aten.addmm.default" => addmm,
    "aten.mm.dtype" => mm_dtype,
    "aten._grouped_mm.default" => |e| grouped_mm(e, "self", "mat2"),
    "transformers.grouped_mm_fallback.default" => |e| grouped_mm(e, "input", "weight"),
    "aten.einsum.default" => einsum,
}

/// `torch.einsum(equation, *operands)` → ONNX `Einsum` (opset 12), kept whole
/// rather than decomposed into the permutes, reshapes and batched products
/// torch's composite writes (state-space scans hold dozens of them). The
/// equation language is the same (letters, `...`, `->`); torch allows
/// spaces, ONNX's parser too, but they are dropped. ONNX Runtime's CPU
/// `Einsum` takes floating and 32/64-bit integer operands; others (bool,
/// 8/16-bit) run through int64 and back. `path` (a contraction order hint)
/// does not change the result.
fn einsum(e: &Emit) -> Result<String> {
    let Some(Argument::Str(equation)) = e.arg("equation")? else {
        return Err(e.fail("einsum without an equation"));
    };
    let Some(Argument::Tensors(values)) = e.arg("tensors")? else {
        return Err(e.fail("einsum without operands"));
    };
    let equation: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    if !equation.chars().all(|c| c.is_ascii_alphabetic() || matches!(c, ',' | '-' | '>' | '.')) {
        return Err(e.fail(format!(
            "einsum equation `{equation}` has characters ONNX's Einsum does not take"
        )));
    }
    let dtype = e.output_meta()?.dtype;
    let runs = matches!(dtype.as_str(), "float32" | "float64" | "float16" | "int32" | "int64");
    let via = if runs { dtype.clone() } else { "int64".to_string() };
    let mut operands = Vec::new();
    for &v in &values {
        let meta = e.meta_of(v)?;
        operands.push(e.cast(&e.builder.value_name(v)?, &meta.dtype, &via)?);
    }
    let names: Vec<&str> = operands.iter().map(String::as_str).collect();
    let product = e.op_with("Einsum", &names, &[attr("equation", Attribute::Str(equation))])?;
    e.cast(&product, &via, &dtype)
}

/// `self @ other`.
fn product(e: &Emit, other: &str) -> Result<String> {
    let (a, b) = (e.tensor("self")?, e.tensor(other)?);
    e.op("MatMul", &[&a, &b])
}

fn linear(e: &Emit) -> Result<String> {
    let x = e.tensor("input")?;
    let weight = e.tensor("weight")?;
    let transposed = if e.rank("weight")? == 2 {
        e.op_with("Transpose", &[&weight], &[attr("perm", Attribute::Ints(vec![1, 0]))])?
    } else {
        weight
    };
    let product = e.op("MatMul", &[&x, &transposed])?;
    match e.arg("bias")? {
        Some(Argument::Tensor(_)) => e.op("Add", &[&product, &e.tensor("bias")?]),
        _ => Ok(product),
    }
}

fn addmm(e: &Emit) -> Result<String> {
    let (beta, alpha) = (e.float("beta", 1.0)?, e.float("alpha", 1.0)?);
    let out = e.output_meta()?.dtype;
    if matches!(out.as_str(), "float16" | "float32" | "float64") {
        let (input, a, b) = (e.tensor("self")?, e.tensor("mat1")?, e.tensor("mat2")?);
        return e.op_with(
            "Gemm",
            &[&a, &b, &input],
            &[
                attr("alpha", Attribute::Float(alpha as f32)),
                attr("beta", Attribute::Float(beta as f32)),
            ],
        );
    }
    // ONNX Runtime's CPU Gemm is floating only: `beta*self + alpha*(mat1 @ mat2)` in MatMul and Add.
    let (input, a, b) =
        (e.operand("self", &out)?, e.operand("mat1", &out)?, e.operand("mat2", &out)?);
    let scaled = |x: String, k: f64| -> Result<String> {
        if k == 1.0 {
            return Ok(x);
        }
        let k = e.scalar(k, &out)?;
        e.op("Mul", &[&x, &k])
    };
    let product = scaled(e.op("MatMul", &[&a, &b])?, alpha)?;
    if beta == 0.0 {
        return Ok(product); // torch ignores `self` (even NaN) when beta is 0
    }
    e.op("Add", &[&scaled(input, beta)?, &product])
}

/// `torch.mm(a, b, out_dtype=...)`: the product in `out_dtype`, as the kernel accumulates in it.
fn mm_dtype(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let (a, b) = (e.operand("self", &out)?, e.operand("mat2", &out)?);
    e.op("MatMul", &[&a, &b])
}

/// `out[r] = a[r] @ b[group(r)]` for `a: (M, K)`, `b: (G, K, N)`, rows sorted by
/// group and `offs: (G,)` the cumulative end of each group. `G` is a weight
/// dimension, so static: one `Slice` + `MatMul` per group and a `Concat` (no
/// `(M, K, N)` gather of weights per row). Rows past `offs[-1]` (tokens routed
/// to no local expert) come out as zeros, as transformers' fallback leaves them.
/// bf16 products are computed in float32 and rounded once at the end: the bf16
/// kernels accumulate in float32, and ONNX Runtime's CPU has no bf16 `MatMul`.
fn grouped_mm(e: &Emit, a_name: &str, b_name: &str) -> Result<String> {
    let (a_meta, b_meta) = (e.input_meta(a_name)?, e.input_meta(b_name)?);
    let out = e.output_meta()?.dtype;
    let offs = match e.arg("offs")? {
        Some(Argument::Tensor(_)) => e.operand("offs", "int64")?,
        _ if a_meta.shape.len() == 3 && b_meta.shape.len() == 3 => {
            // no offsets: a batch of products
            let product = e.op("MatMul", &[&e.tensor(a_name)?, &e.tensor(b_name)?])?;
            return e.cast(&product, &a_meta.dtype, &out);
        }
        _ => return Err(e.fail("grouped mm without offsets on 2-D operands is not translated")),
    };
    if a_meta.shape.len() != 2 || b_meta.shape.len() != 3 {
        return Err(e.fail(format!(
            "grouped mm of a {}-D by a {}-D operand is not translated (only (M, K) by (G, K, N))",
            a_meta.shape.len(),
            b_meta.shape.len()
        )));
    }
    let groups = match b_meta.shape[0] {
        Dim::Fixed(g) if g > 0 => g,
        _ => return Err(e.fail("grouped mm: the number of groups (mat2.shape[0]) must be static")),
    };
    let compute =
        if a_meta.dtype == "bfloat16" { "float32".to_string() } else { a_meta.dtype.clone() };
    let a = e.cast(&e.tensor(a_name)?, &a_meta.dtype, &compute)?;
    let split = |x: &str| -> Result<Vec<String>> {
        if groups == 1 {
            return Ok(vec![x.to_string()]);
        }
        e.op_n(
            "Split",
            &[x],
            groups as u32,
            &[attr("axis", Attribute::Int(0)), attr("num_outputs", Attribute::Int(groups))],
        )
    };
    let ends = split(&offs)?;
    let weights = split(&e.cast(&e.tensor(b_name)?, &b_meta.dtype, &compute)?)?;
    let biases = match e.arg("bias")? {
        Some(Argument::Tensor(_)) => Some(split(&e.operand("bias", &compute)?)?),
        _ => None,
    };
    // [0]: the axis every Slice/Squeeze works on, and where the first group starts
    let axis0 = e.const_ints(&[0])?;
    let mut start = axis0.clone();
    let mut blocks = Vec::with_capacity(groups as usize + 1);
    for g in 0..groups as usize {
        let rows = e.op("Slice", &[&a, &start, &ends[g], &axis0])?;
        let weight = e.op("Squeeze", &[&weights[g], &axis0])?;
        let mut block = e.op("MatMul", &[&rows, &weight])?;
        if let Some(biases) = &biases {
            block = e.op("Add", &[&block, &e.op("Squeeze", &[&biases[g], &axis0])?])?;
        }
        blocks.push(block);
        start = ends[g].clone();
    }
    // The rows no group claims, zeros: M rows of zeros appended and the first
    // M rows kept. A zeros block of M - offs[-1] rows (a size computed from
    // the routing, zero when every row is routed) makes OpenVINO 2026.3's CPU
    // plugin compute values upstream of it wrong (the router's softmax of a
    // tiny Qwen2-MoE); a block of M rows has a size the routing does not set.
    let rows = match a_meta.shape[0] {
        Dim::Fixed(n) => e.const_ints(&[n])?,
        Dim::Symbolic(_) => e.op_with(
            "Shape",
            &[&a],
            &[attr("start", Attribute::Int(0)), attr("end", Attribute::Int(1))],
        )?,
    };
    let columns = match b_meta.shape[2] {
        Dim::Fixed(n) => e.const_ints(&[n])?,
        Dim::Symbolic(_) => {
            let b = e.tensor(b_name)?;
            e.op_with(
                "Shape",
                &[&b],
                &[attr("start", Attribute::Int(2)), attr("end", Attribute::Int(3))],
            )?
        }
    };
    let zeros_shape =
        e.op_with("Concat", &[&rows, &columns], &[attr("axis", Attribute::Int(0))])?;
    let zero = e.scalar(0.0, &compute)?;
    blocks.push(e.op("Expand", &[&zero, &zeros_shape])?);
    let refs: Vec<&str> = blocks.iter().map(String::as_str).collect();
    let padded = e.op_with("Concat", &refs, &[attr("axis", Attribute::Int(0))])?;
    let result = e.op("Slice", &[&padded, &axis0, &rows, &axis0])?;
    e.cast(&result, &compute, &out)
}
