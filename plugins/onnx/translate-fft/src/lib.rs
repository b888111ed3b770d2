//! ATen FFTs → ONNX `DFT`, one `DFT` per transformed dimension. Complex
//! values are real pairs (a trailing dimension of 2, plugins/onnx/
//! fix-complex-pairs makes them so), which is what `DFT` takes and returns;
//! a real input gets a trailing 1. An inverse transform is the conjugate of
//! the forward transform of the conjugate, unscaled (ONNX's inverse always
//! divides by n; torch's normalization is its own argument), then scaled as
//! the op's normalization asks. `_fft_c2r` (a Hermitian half spectrum back
//! to real values) rebuilds the full spectrum of its last dimension from the
//! half (the rest is the conjugate of the half, mirrored) and keeps the real
//! part of its inverse.
//!
//! OpenVINO's ONNX frontend converts every `DFT` as opset 17's (one
//! translator for all opsets): it reads the `axis` attribute, default 1, and
//! ignores opset 20's `axis` input, so an opset-20 `DFT` over any other
//! dimension computes the wrong one there. The form both runtimes read alike:
//! at opset 20 the dimension is moved to 1 (a transpose, or a leading 1 on a
//! 1-D signal) and the `axis` input is 1; below 20 the attribute names it.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten._fft_r2c.default" => r2c,
    "aten._fft_c2c.default" => c2c,
    "aten._fft_c2r.default" => c2r,
    "aten.fft_fft.default" => |e| fft(e, false, false),
    "aten.fft_ifft.default" => |e| fft(e, true, false),
    "aten.fft_fftn.default" => |e| fft(e, false, true),
    "aten.fft_ifftn.default" => |e| fft(e, true, true),
}

/// How a transform is scaled: by nothing, 1/√n or 1/n (n the number of
/// points transformed), torch's `normalization` 0, 1, 2.
#[derive(Clone, Copy, PartialEq)]
enum Scale {
    None,
    Sqrt,
    N,
}

/// The input as a pair (a real one with a trailing 1), the complex rank,
/// and whether the input is real.
fn signal(e: &Emit) -> Result<(String, usize, bool)> {
    let x = e.tensor("self")?;
    let input = e.input_meta("self")?;
    let out = e.output_meta()?;
    let rank = out.shape.len().checked_sub(1).ok_or_else(|| e.fail("an FFT of a 0-d value"))?;
    if input.shape.len() == out.shape.len() {
        return Ok((x, rank, false));
    }
    if !is_floating(&input.dtype) {
        return Err(e.fail(format!("an FFT of {} values: cast them to float first", input.dtype)));
    }
    let x = e.cast(&x, &input.dtype, &out.dtype)?;
    let last = e.const_ints(&[-1])?;
    Ok((e.op("Unsqueeze", &[&x, &last])?, rank, true))
}

fn normalized(e: &Emit, dims: &[i64], rank: usize) -> Result<Vec<i64>> {
    dims.iter()
        .map(|&d| {
            let d = if d < 0 { d + rank as i64 } else { d };
            if (0..rank as i64).contains(&d) {
                Ok(d)
            } else {
                Err(e.fail(format!("FFT dimension {d} out of range for rank {rank}")))
            }
        })
        .collect()
}

/// The conjugate of a pair: its imaginary part negated.
fn conj(e: &Emit, x: &str, dtype: &str) -> Result<String> {
    let one = e.scalar(1.0, dtype)?;
    let minus = e.scalar(-1.0, dtype)?;
    let axis = e.const_ints(&[0])?;
    let one = e.op("Unsqueeze", &[&one, &axis])?;
    let minus = e.op("Unsqueeze", &[&minus, &axis])?;
    let signs = e.op_with("Concat", &[&one, &minus], &[attr("axis", Attribute::Int(0))])?;
    e.op("Mul", &[x, &signs])
}

/// The forward DFT of pair `x` (complex rank `rank`) over `dims`.
fn dft(e: &Emit, mut x: String, dims: &[i64], rank: usize) -> Result<String> {
    for &d in dims {
        x = if e.builder.opset() < 20 {
            e.op_with("DFT", &[&x], &[attr("axis", Attribute::Int(d))])?
        } else if rank == 1 {
            let front = e.const_ints(&[0])?;
            let x = e.op("Unsqueeze", &[&x, &front])?;
            let y = dft_axis_1(e, &x)?;
            e.op("Squeeze", &[&y, &front])?
        } else if d == 1 {
            dft_axis_1(e, &x)?
        } else {
            // Dimensions d and 1 swapped (the pair, last, stays): its own inverse.
            let mut perm: Vec<i64> = (0..=rank as i64).collect();
            perm.swap(d as usize, 1);
            let swap = [attr("perm", Attribute::Ints(perm))];
            let y = dft_axis_1(e, &e.op_with("Transpose", &[&x], &swap)?)?;
            e.op_with("Transpose", &[&y], &swap)?
        };
    }
    Ok(x)
}

/// An opset-20 `DFT` over dimension 1, the one OpenVINO reads too.
fn dft_axis_1(e: &Emit, x: &str) -> Result<String> {
    let axis = e.const_ints(&[1])?;
    let axis = e.op("Squeeze", &[&axis])?;
    e.op("DFT", &[x, "", &axis])
}

/// `y` divided as `scale` says by n, the product of its sizes over `dims`.
fn scaled(e: &Emit, y: String, dims: &[i64], scale: Scale, dtype: &str) -> Result<String> {
    if scale == Scale::None {
        return Ok(y);
    }
    let shape = e.op("Shape", &[&y])?;
    let sizes =
        e.op_with("Gather", &[&shape, &e.const_ints(dims)?], &[attr("axis", Attribute::Int(0))])?;
    let n = e.op_with("ReduceProd", &[&sizes], &[attr("keepdims", Attribute::Int(0))])?;
    let n = e.cast(&n, "int64", dtype)?;
    let n = if scale == Scale::Sqrt { e.op("Sqrt", &[&n])? } else { n };
    e.op("Div", &[&y, &n])
}

/// The transform of `x` (a pair, or a real input with a trailing 1, its own
/// conjugate; complex rank `rank`) over `dims`, inverse or not, scaled.
fn transform(
    e: &Emit,
    (x, real): (String, bool),
    (dims, rank): (&[i64], usize),
    inverse: bool,
    scale: Scale,
) -> Result<String> {
    let dtype = e.output_meta()?.dtype;
    let x = if inverse && !real { conj(e, &x, &dtype)? } else { x };
    let y = dft(e, x, dims, rank)?;
    let y = if inverse { conj(e, &y, &dtype)? } else { y };
    scaled(e, y, dims, scale, &dtype)
}

fn scale_of(e: &Emit, normalization: i64) -> Result<Scale> {
    match normalization {
        0 => Ok(Scale::None),
        1 => Ok(Scale::Sqrt),
        2 => Ok(Scale::N),
        other => Err(e.fail(format!("FFT normalization {other} (torch has 0, 1, 2)"))),
    }
}

/// `torch.fft.*`'s `norm`: "backward" scales the inverse by 1/n, "forward"
/// the forward, "ortho" both by 1/√n.
fn norm_scale(e: &Emit, inverse: bool) -> Result<Scale> {
    let norm = match e.arg("norm")? {
        None | Some(Argument::None) => "backward".to_string(),
        Some(Argument::Str(s)) => s,
        Some(other) => return Err(e.fail(format!("`norm`: expected a string, got {other:?}"))),
    };
    Ok(match (norm.as_str(), inverse) {
        ("backward", false) | ("forward", true) => Scale::None,
        ("backward", true) | ("forward", false) => Scale::N,
        ("ortho", _) => Scale::Sqrt,
        (other, _) => {
            return Err(e.fail(format!("FFT norm `{other}` (torch has backward, forward, ortho)")))
        }
    })
}

fn r2c(e: &Emit) -> Result<String> {
    let (x, rank, real) = signal(e)?;
    let dims = normalized(e, &e.ints("dim")?, rank)?;
    let y =
        transform(e, (x, real), (&dims, rank), false, scale_of(e, e.int("normalization", 0)?)?)?;
    if !e.boolean("onesided", true)? {
        return Ok(y);
    }
    // One side: the last transformed dimension's first n/2 + 1 entries.
    let &last = dims.last().ok_or_else(|| e.fail("an FFT over no dimension"))?;
    let shape = e.op("Shape", &[&y])?;
    let size = e.op_with(
        "Gather",
        &[&shape, &e.const_ints(&[last])?],
        &[attr("axis", Attribute::Int(0))],
    )?;
    let half =
        e.op("Add", &[&e.op("Div", &[&size, &e.const_ints(&[2])?])?, &e.const_ints(&[1])?])?;
    e.op("Slice", &[&y, &e.const_ints(&[0])?, &half, &e.const_ints(&[last])?])
}

fn c2c(e: &Emit) -> Result<String> {
    let (x, rank, real) = signal(e)?;
    let dims = normalized(e, &e.ints("dim")?, rank)?;
    let inverse = !e.boolean("forward", true)?;
    transform(e, (x, real), (&dims, rank), inverse, scale_of(e, e.int("normalization", 0)?)?)
}

/// `torch.fft.fft/ifft` (one dimension, `dim`) and `fftn/ifftn` (`dim`, or
/// all); a size `n`/`s` other than the input's (padding or cropping) is not
/// translated.
fn fft(e: &Emit, inverse: bool, many: bool) -> Result<String> {
    let size = if many { "s" } else { "n" };
    if !matches!(e.arg(size)?, None | Some(Argument::None)) {
        return Err(e.fail(format!(
            "an FFT with `{size}` (padded or cropped): pad or slice the input instead"
        )));
    }
    let (x, rank, real) = signal(e)?;
    let dims = match e.arg("dim")? {
        None | Some(Argument::None) if many => (0..rank as i64).collect(),
        None | Some(Argument::None) => vec![-1],
        _ => e.ints("dim")?,
    };
    let dims = normalized(e, &dims, rank)?;
    transform(e, (x, real), (&dims, rank), inverse, norm_scale(e, inverse)?)
}

/// `_fft_c2r(self, dim, normalization, last_dim_size)`: the inverse over
/// `dim` of a spectrum whose last transformed dimension holds its first
/// n/2 + 1 entries (n = `last_dim_size`), real values out. Over the other
/// dimensions it is an inverse `c2c`; over the last the full spectrum is the
/// half and the conjugates of its entries 1 .. n - n/2 - 1, mirrored; the
/// imaginary parts torch's `c2r` ignores (entry 0's, and n/2's when n is
/// even) only reach the imaginary part, which is dropped.
fn c2r(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let out = e.output_meta()?;
    let rank = out.shape.len();
    let dims = normalized(e, &e.ints("dim")?, rank)?;
    let (&last, _) = dims.split_last().ok_or_else(|| e.fail("an FFT over no dimension"))?;
    let dtype = out.dtype;
    // The inverse is conj(DFT(conj(·))): conj(X) transformed forward over
    // the other dimensions, mirrored over the last (the conjugate of the full
    // spectrum is the mirror of the half's conjugate), and transformed
    // forward over the last; its real part is the inverse's.
    let y = dft(e, conj(e, &x, &dtype)?, &dims[..dims.len() - 1], rank)?;
    let n = e.int_1d("last_dim_size", 0)?;
    let two = e.const_ints(&[2])?;
    let one = e.const_ints(&[1])?;
    let half = e.op("Div", &[&n, &two])?;
    let axis = e.const_ints(&[last])?;
    let zero = e.const_ints(&[0])?;
    let y = e.op("Slice", &[&y, &zero, &e.op("Add", &[&half, &one])?, &axis])?;
    // Entries n - n/2 - 1 down to 1, conjugated.
    let start = e.op("Sub", &[&e.op("Sub", &[&n, &half])?, &one])?;
    let minus = e.const_ints(&[-1])?;
    let mirror = e.op("Slice", &[&y, &start, &zero, &axis, &minus])?;
    let full = e.op_with(
        "Concat",
        &[&y, &conj(e, &mirror, &dtype)?],
        &[attr("axis", Attribute::Int(last))],
    )?;
    let y = dft(e, full, &[last], rank)?;
    let real = e.op("Slice", &[&y, &zero, &one, &minus])?;
    let real = e.op("Squeeze", &[&real, &minus])?;
    scaled(e, real, &dims, scale_of(e, e.int("normalization", 0)?)?, &dtype)
}
