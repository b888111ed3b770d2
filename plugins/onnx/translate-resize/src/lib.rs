//! ATen upsampling, grid sampling and col2im → ONNX `Resize`, `GridSample` and
//! `Col2Im`; antialiased upsampling → two `MatMul`s by its weights.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.upsample_nearest1d.vec" => |e| upsample(e, Mode::Nearest, 1),
    "aten.upsample_nearest2d.vec" => |e| upsample(e, Mode::Nearest, 2),
    "aten.upsample_nearest3d.vec" => |e| upsample(e, Mode::Nearest, 3),
    "aten.upsample_nearest1d.default" => |e| upsample(e, Mode::Nearest, 1),
    "aten.upsample_nearest2d.default" => |e| upsample(e, Mode::Nearest, 2),
    "aten.upsample_nearest3d.default" => |e| upsample(e, Mode::Nearest, 3),
    "aten.upsample_linear1d.vec" => |e| upsample(e, Mode::Linear, 1),
    "aten.upsample_bilinear2d.vec" => |e| upsample(e, Mode::Linear, 2),
    "aten.upsample_trilinear3d.vec" => |e| upsample(e, Mode::Linear, 3),
    "aten.upsample_linear1d.default" => |e| upsample(e, Mode::Linear, 1),
    "aten.upsample_bilinear2d.default" => |e| upsample(e, Mode::Linear, 2),
    "aten.upsample_trilinear3d.default" => |e| upsample(e, Mode::Linear, 3),
    "aten.upsample_bicubic2d.vec" => |e| upsample(e, Mode::Cubic, 2),
    "aten.upsample_bicubic2d.default" => |e| upsample(e, Mode::Cubic, 2),
    "aten._upsample_bilinear2d_aa.default" => |e| upsample_antialiased(e, Mode::Linear),
    "aten._upsample_bicubic2d_aa.default" => |e| upsample_antialiased(e, Mode::Cubic),
    "aten.grid_sampler_2d.default" => grid_sampler,
    "aten.col2im.default" => col2im,
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

/// The dtype Resize runs in: ONNX Runtime's CPU kernel has float32,
/// float16, int32, int8 and uint8. Nearest only selects, so it keeps those
/// (int16 and bool widen exactly); interpolation computes in float32 as
/// torch's does for reduced precision.
fn resize_dtype(dtype: &str, mode: Mode) -> &'static str {
    match (mode, dtype) {
        (Mode::Nearest, "float16") => "float16",
        (Mode::Nearest, "int32" | "int16" | "uint16") => "int32",
        (Mode::Nearest, "int8") => "int8",
        (Mode::Nearest, "uint8" | "bool") => "uint8",
        _ => "float32",
    }
}

/// `upsample_*`: the `.vec` overloads take `output_size` or `scale_factors`,
/// the others `output_size` and optional `scales_*`. Given scales are what
/// torch maps coordinates with (`1/scale`), so they go to Resize as scales;
/// else the output size does.
fn upsample(e: &Emit, mode: Mode, spatial: usize) -> Result<String> {
    let target = e.target()?;
    let out = e.output_meta()?;
    let input = if e.arg("input")?.is_some() { "input" } else { "self" };
    let in_meta = e.input_meta(input)?;
    let rank = in_meta.shape.len();
    if rank != spatial + 2 {
        return Err(e.fail(format!("{target} of a rank-{rank} input")));
    }
    let compute = resize_dtype(&out.dtype, mode);
    if mode != Mode::Nearest && out.dtype == "uint8" {
        // torch interpolates uint8 in fixed point, rounding after each axis
        return Err(e.fail(format!("{target} of uint8: torch's fixed-point interpolation (rounded per axis) has no ONNX counterpart")));
    }
    let align_corners = e.boolean("align_corners", false)?;
    let scales = given_scales(e, spatial)?;
    let axes: Vec<i64> = (2..rank as i64).collect();
    let x = e.cast(&e.tensor(input)?, &in_meta.dtype, compute)?;
    let mut attributes = vec![attr("axes", Attribute::Ints(axes))];
    attributes.extend(match mode {
        Mode::Nearest => vec![
            attr("mode", Attribute::Str("nearest".into())),
            attr("coordinate_transformation_mode", Attribute::Str("asymmetric".into())),
            attr("nearest_mode", Attribute::Str("floor".into())),
        ],
        Mode::Linear | Mode::Cubic => {
            // torch's source coordinate is (dst + 0.5) / scale - 0.5 for every
            // size, one pixel outputs included: ONNX's half_pixel (not pytorch_half_pixel)
            let transformation = if align_corners { "align_corners" } else { "half_pixel" };
            let mut a = vec![
                attr(
                    "mode",
                    Attribute::Str(if mode == Mode::Linear { "linear" } else { "cubic" }.into()),
                ),
                attr("coordinate_transformation_mode", Attribute::Str(transformation.into())),
            ];
            if mode == Mode::Cubic {
                a.push(attr("cubic_coeff_a", Attribute::Float(-0.75)));
            }
            a
        }
    });
    // align_corners maps by the sizes alone, whatever scales were given
    let use_scales = scales.is_some() && !(align_corners && mode != Mode::Nearest);
    let y = if let (true, Some(scales)) = (use_scales, &scales) {
        check_scaled_sizes(e, &in_meta, &out, scales, mode)?;
        let scales = e.op_with(
            "Constant",
            &[],
            &[attr("value_floats", Attribute::Floats(scales.iter().map(|&s| s as f32).collect()))],
        )?;
        e.op_with("Resize", &[&x, "", &scales], &attributes)?
    } else {
        let sizes = output_sizes(e, &x, &out, spatial, scales.as_deref())?;
        e.op_with("Resize", &[&x, "", "", &sizes], &attributes)?
    };
    e.cast(&y, compute, &out.dtype)
}

/// The scale factors given, one per spatial axis, or None.
fn given_scales(e: &Emit, spatial: usize) -> Result<Option<Vec<f64>>> {
    if let Some(argument) = e.arg("scale_factors")? {
        return Ok(match argument {
            Argument::Floats(v) if v.len() == spatial => Some(v),
            Argument::Floats(v) if v.len() == 1 => Some(vec![v[0]; spatial]),
            Argument::None => None,
            other => {
                return Err(
                    e.fail(format!("`scale_factors`: expected {spatial} floats, got {other:?}"))
                )
            }
        });
    }
    let names: &[&str] = match spatial {
        1 => &["scales"],
        2 => &["scales_h", "scales_w"],
        _ => &["scales_d", "scales_h", "scales_w"],
    };
    let mut scales = Vec::new();
    for name in names {
        match e.arg(name)? {
            None | Some(Argument::None) => return Ok(None),
            _ => scales.push(e.float(name, 1.0)?),
        }
    }
    Ok(Some(scales))
}

/// Resize's output size from scales is `floor(size * scale)` in float32,
/// torch's in float64 (or, for the non-`.vec` overloads, the size given,
/// which a symbolic input size need not scale to); and ONNX Runtime's cubic
/// leaves an axis whose size a scale keeps unchanged, which torch resamples.
fn check_scaled_sizes(
    e: &Emit,
    input: &TensorMeta,
    out: &TensorMeta,
    scales: &[f64],
    mode: Mode,
) -> Result<()> {
    for (i, &scale) in scales.iter().enumerate() {
        let (n, m) = match (&input.shape[2 + i], &out.shape[2 + i]) {
            (Dim::Fixed(n), Dim::Fixed(m)) => (n, m),
            (Dim::Symbolic(_), Dim::Fixed(m)) => {
                return Err(e.fail(format!(
                    "output size {m} with scale {scale} on a symbolic input size: ONNX's Resize takes either the size or the scale"
                )))
            }
            _ => continue,
        };
        if ((*n as f32) * (scale as f32)).floor() as i64 != *m {
            return Err(e.fail(format!(
                "scale {scale} of an axis of {n}: ONNX's float32 size is not torch's {m}"
            )));
        }
        if mode == Mode::Cubic && n == m && scale != 1.0 {
            return Err(e.fail(format!(
                "bicubic scale {scale} keeps axis {} of {n} its size: ONNX Runtime's cubic Resize copies such an axis, torch resamples it",
                i + 2
            )));
        }
    }
    Ok(())
}

/// The output's spatial sizes as a 1-D int64 value: constants, the
/// `output_size` argument where a size is symbolic, or torch's
/// `floor(size * scale)` in float64 at run time.
fn output_sizes(
    e: &Emit,
    x: &str,
    out: &TensorMeta,
    spatial: usize,
    scales: Option<&[f64]>,
) -> Result<String> {
    let dims = &out.shape[out.shape.len() - spatial..];
    let constant: Option<Vec<i64>> =
        dims.iter().map(|d| if let Dim::Fixed(n) = d { Some(*n) } else { None }).collect();
    if let Some(sizes) = constant {
        return e.const_ints(&sizes);
    }
    match (e.arg("output_size")?, scales) {
        (Some(Argument::SymInts(_)) | Some(Argument::Ints(_)), _) => e.shape("output_size"),
        (_, Some(scales)) => {
            let sizes = e.op_with("Shape", &[x], &[attr("start", Attribute::Int(2))])?;
            let product =
                e.op("Mul", &[&e.cast(&sizes, "int64", "float64")?, &float64s(e, scales)?])?;
            e.cast(&e.op("Floor", &[&product])?, "float64", "int64")
        }
        _ => Err(e.fail("neither an output size nor scale factors")),
    }
}

/// A 1-D float64 constant, exactly: attributes hold float32s, so each value is
/// the sum of three float32 parts (24 bits each cover float64's 53).
fn float64s(e: &Emit, values: &[f64]) -> Result<String> {
    let mut rest = values.to_vec();
    let mut sum: Option<String> = None;
    for _ in 0..3 {
        let part: Vec<f32> = rest.iter().map(|&v| v as f32).collect();
        rest = rest.iter().zip(&part).map(|(&v, &p)| v - p as f64).collect();
        let constant = e.cast(
            &e.op_with("Constant", &[], &[attr("value_floats", Attribute::Floats(part))])?,
            "float32",
            "float64",
        )?;
        sum = Some(match sum {
            None => constant,
            Some(before) => e.op("Add", &[&before, &constant])?,
        });
    }
    sum.ok_or_else(|| e.fail("no values"))
}

// ── antialiased resampling ──

/// `_upsample_{bilinear,bicubic}2d_aa(self, output_size, align_corners,
/// scales_h, scales_w)`: torch's antialiased resampling is separable and
/// linear, so it is the input multiplied by one weight matrix per spatial
/// axis, [out, in] on the left for the height and [in, out] on the right for
/// the width (`axis_weights`). Not ONNX's `Resize` with `antialias=1`, which
/// ONNX Runtime computes as torch does (within 5e-5, given
/// `exclude_outside=1` and bicubic's `cubic_coeff_a=-0.5`) but OpenVINO's
/// `Interpolate` ignores: it returns the plain resampling. The weights depend
/// on the sizes alone: constants the optimizer folds when those are static.
fn upsample_antialiased(e: &Emit, mode: Mode) -> Result<String> {
    let target = e.target()?;
    let out = e.output_meta()?;
    let meta = e.input_meta("self")?;
    if meta.shape.len() != 4 {
        return Err(e.fail(format!("{target} of a rank-{} input", meta.shape.len())));
    }
    let work = match out.dtype.as_str() {
        "float64" => "float64",
        "uint8" => {
            return Err(e.fail(format!("{target} of uint8: torch's fixed-point interpolation (rounded per axis) has no ONNX counterpart")));
        }
        _ => "float32",
    };
    let x = e.cast(&e.tensor("self")?, &meta.dtype, work)?;
    let align_corners = e.boolean("align_corners", false)?;
    let mut weights = Vec::new();
    for (i, scale) in ["scales_h", "scales_w"].into_iter().enumerate() {
        let axis = 2 + i;
        let given = match e.arg(scale)? {
            None | Some(Argument::None) => None,
            _ => Some(e.float(scale, 0.0)?),
        };
        let sizes = AxisSizes {
            input: extent(e, &x, &meta.shape[axis], axis, None)?,
            output: extent(e, &x, &out.shape[axis], axis, Some(i))?,
            align_corners,
            given,
        };
        weights.push(axis_weights(e, mode, &sizes, work)?);
    }
    let rows = e.op("MatMul", &[&weights[0], &x])?;
    let columns =
        e.op_with("Transpose", &[&weights[1]], &[attr("perm", Attribute::Ints(vec![1, 0]))])?;
    let y = e.op("MatMul", &[&rows, &columns])?;
    e.cast(&y, work, &out.dtype)
}

/// One spatial axis of an antialiased resampling: its sizes (0-d int64
/// values), `align_corners`, and the scale given for it, if any.
struct AxisSizes {
    input: String,
    output: String,
    align_corners: bool,
    given: Option<f64>,
}

/// The 0-d int64 size of `axis`: a constant, or for a symbolic size the
/// output size the node names (`output_size[index]`) or the input's own.
fn extent(e: &Emit, x: &str, dim: &Dim, axis: usize, index: Option<usize>) -> Result<String> {
    if let Dim::Fixed(n) = dim {
        return e.op_with("Constant", &[], &[attr("value_int", Attribute::Int(*n))]);
    }
    if let (Some(i), Some(Argument::SymInts(sizes))) = (index, e.arg("output_size")?) {
        match sizes.get(i) {
            Some(SymInt::Value(v)) => return e.builder.value_name(*v),
            Some(SymInt::Constant(n)) => {
                return e.op_with("Constant", &[], &[attr("value_int", Attribute::Int(*n))])
            }
            None => {}
        }
    }
    let axis = axis as i64;
    let size = e.op_with(
        "Shape",
        &[x],
        &[attr("start", Attribute::Int(axis)), attr("end", Attribute::Int(axis + 1))],
    )?;
    e.op("Squeeze", &[&size, &e.const_ints(&[0])?])
}

/// The [out, in] weights of one axis, as torch's antialiased kernels compute
/// them (`_compute_index_ranges_weights` with `aa_filter`): output position
/// `o` centred at `scale * (o + 0.5)` in the input, each input position `j`
/// weighted `filter((j + 0.5 - centre) / support)`, the weights of a row
/// normalized to sum to 1. `scale` is torch's `area_pixel_compute_scale`
/// (`(in - 1) / (out - 1)` with `align_corners`, else 1 / the scale given,
/// else in / out); `support` stretches the filter by the scale when it
/// shrinks (`max(scale, 1)`). torch sums over the window where the filter is
/// non-zero, which this sums over the whole axis to the same.
fn axis_weights(e: &Emit, mode: Mode, sizes: &AxisSizes, work: &str) -> Result<String> {
    let input = e.cast(&sizes.input, "int64", work)?;
    let output = e.cast(&sizes.output, "int64", work)?;
    let one = e.scalar(1.0, work)?;
    let scale = if sizes.align_corners {
        // torch's scale is 0 for a single output position.
        let spans =
            e.op("Div", &[&e.op("Sub", &[&input, &one])?, &e.op("Sub", &[&output, &one])?])?;
        let single = e.op("Equal", &[&output, &one])?;
        e.op("Where", &[&single, &e.scalar(0.0, work)?, &spans])?
    } else if let Some(given) = sizes.given.filter(|&s| s > 0.0) {
        e.scalar(1.0 / given, work)?
    } else {
        e.op("Div", &[&input, &output])?
    };
    let support = e.op("Max", &[&scale, &one])?;
    let half = e.scalar(0.5, work)?;
    let positions = |n: &str| e.op("Range", &[&e.scalar(0.0, work)?, n, &one]);
    let centres = e.op("Mul", &[&e.op("Add", &[&positions(&output)?, &half])?, &scale])?;
    let centres = e.op("Unsqueeze", &[&centres, &e.const_ints(&[1])?])?;
    let offsets = e.op("Sub", &[&e.op("Add", &[&positions(&input)?, &half])?, &centres])?;
    let distance = e.op("Abs", &[&e.op("Div", &[&offsets, &support])?])?;
    let filtered = match mode {
        Mode::Linear => e.op("Max", &[&e.op("Sub", &[&one, &distance])?, &e.scalar(0.0, work)?])?,
        Mode::Cubic => cubic_filter(e, &distance, work)?,
        Mode::Nearest => return Err(e.fail("antialiased nearest resampling")),
    };
    let totals = e.op_with(
        "ReduceSum",
        &[&filtered, &e.const_ints(&[1])?],
        &[attr("keepdims", Attribute::Int(1))],
    )?;
    e.op("Div", &[&filtered, &totals])
}

/// Keys' cubic convolution kernel with `a = -0.5` at distances `t` >= 0, the
/// one torch's antialiased bicubic uses (its plain bicubic uses -0.75):
/// `(1.5t - 2.5)t^2 + 1` below 1, `((-0.5t + 2.5)t - 4)t + 2` below 2, else 0.
fn cubic_filter(e: &Emit, t: &str, work: &str) -> Result<String> {
    let c = |v: f64| e.scalar(v, work);
    let near = e.op("Mul", &[&e.op("Sub", &[&e.op("Mul", &[t, &c(1.5)?])?, &c(2.5)?])?, t])?;
    let near = e.op("Add", &[&e.op("Mul", &[&near, t])?, &c(1.0)?])?;
    let far = e.op("Add", &[&e.op("Mul", &[t, &c(-0.5)?])?, &c(2.5)?])?;
    let far = e.op("Sub", &[&e.op("Mul", &[&far, t])?, &c(4.0)?])?;
    let far = e.op("Add", &[&e.op("Mul", &[&far, t])?, &c(2.0)?])?;
    let within_two = e.op("Where", &[&e.op("Less", &[t, &c(2.0)?])?, &far, &c(0.0)?])?;
    e.op("Where", &[&e.op("Less", &[t, &c(1.0)?])?, &near, &within_two])
}

// ── grid sampling ──

/// `grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners)`.
fn grid_sampler(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let opset = e.builder.opset();
    // ONNX Runtime's GridSample has float32 and float16; float16 sampled in
    // float32, as torch's CPU kernel computes it
    let x = e.cast(&e.tensor("input")?, &out, "float32")?;
    let grid_dtype = e.input_meta("grid")?.dtype;
    let grid = e.cast(&e.tensor("grid")?, &grid_dtype, "float32")?;
    // opset 20 renamed the modes
    let mode = match (e.int("interpolation_mode", 0)?, opset >= 20) {
        (0, false) => "bilinear",
        (0, true) => "linear",
        (1, _) => "nearest",
        (2, false) => "bicubic",
        (2, true) => "cubic",
        (other, _) => return Err(e.fail(format!("interpolation_mode {other}"))),
    };
    let padding = match e.int("padding_mode", 0)? {
        0 => "zeros",
        1 => "border",
        2 => "reflection",
        other => return Err(e.fail(format!("padding_mode {other}"))),
    };
    let attributes = [
        attr("mode", Attribute::Str(mode.into())),
        attr("padding_mode", Attribute::Str(padding.into())),
        attr("align_corners", Attribute::Int(e.boolean("align_corners", false)? as i64)),
    ];
    let y = e.op_with("GridSample", &[&x, &grid], &attributes)?;
    e.cast(&y, "float32", &out)
}

// ── col2im ──

/// `col2im(self, output_size, kernel_size, dilation, padding, stride)`:
/// ONNX's Col2Im, on a batch of one for an unbatched input.
fn col2im(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    // ONNX Runtime's Col2Im has float32 (and float16, summed in float16)
    let x = e.cast(&e.tensor("self")?, &out, "float32")?;
    let unbatched = e.rank("self")? == 2;
    let x = if unbatched { e.op("Unsqueeze", &[&x, &e.const_ints(&[0])?])? } else { x };
    let pair = |name: &str| -> Result<Vec<i64>> {
        let v = e.ints(name)?;
        Ok(if v.len() == 1 { vec![v[0]; 2] } else { v })
    };
    let padding = pair("padding")?;
    let attributes = [
        attr("dilations", Attribute::Ints(pair("dilation")?)),
        attr("pads", Attribute::Ints(padding.iter().chain(&padding).copied().collect())),
        attr("strides", Attribute::Ints(pair("stride")?)),
    ];
    let image = e.shape("output_size")?;
    let block = e.const_ints(&pair("kernel_size")?)?;
    let y = e.op_with("Col2Im", &[&x, &image, &block], &attributes)?;
    let y = if unbatched { e.op("Squeeze", &[&y, &e.const_ints(&[0])?])? } else { y };
    e.cast(&y, "float32", &out)
}
