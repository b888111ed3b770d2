//! ATen pooling → ONNX: average (`AveragePool`), max with torch's per-plane indices (`MaxPool`), adaptive average.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.avg_pool1d.default" => |e| avg_pool(e, 1),
    "aten.avg_pool2d.default" => |e| avg_pool(e, 2),
    "aten.avg_pool3d.default" => |e| avg_pool(e, 3),
    "aten.max_pool2d_with_indices.default" => |e| max_pool(e, 2),
    "aten.max_pool3d_with_indices.default" => |e| max_pool(e, 3),
    "aten.adaptive_avg_pool1d.default" => |e| adaptive_avg_pool(e, 1),
    "aten._adaptive_avg_pool2d.default" => |e| adaptive_avg_pool(e, 2),
    "aten._adaptive_avg_pool3d.default" => |e| adaptive_avg_pool(e, 3),
    // torch's decomposition makes these a `mean` when pooling to 1: kept whole instead
    "aten.adaptive_avg_pool2d.default" => |e| adaptive_avg_pool(e, 2),
    "aten.adaptive_avg_pool3d.default" => |e| adaptive_avg_pool(e, 3),
}

/// A pooling window per spatial axis, from torch's arguments.
struct Window {
    kernel: Vec<i64>,
    stride: Vec<i64>,
    pad: Vec<i64>,
    dilation: Vec<i64>,
    ceil: bool,
}

impl Window {
    fn read(e: &Emit, spatial: usize) -> Result<Window> {
        let kernel = per_axis(e, "kernel_size", spatial, None)?;
        // an empty stride is the kernel
        let stride = per_axis(e, "stride", spatial, Some(&kernel))?;
        let pad = per_axis(e, "padding", spatial, Some(&vec![0; spatial]))?;
        let dilation = per_axis(e, "dilation", spatial, Some(&vec![1; spatial]))?;
        Ok(Window { kernel, stride, pad, dilation, ceil: e.boolean("ceil_mode", false)? })
    }

    fn extent(&self, i: usize) -> i64 {
        self.dilation[i] * (self.kernel[i] - 1) + 1
    }

    /// torch's output size of axis `i` for an input of `size`: with
    /// `ceil_mode`, a last window starting in the right padding is dropped.
    fn torch_size(&self, i: usize, size: i64) -> i64 {
        let (s, p) = (self.stride[i], self.pad[i]);
        let span = size + 2 * p - self.extent(i) + if self.ceil { s - 1 } else { 0 };
        let mut out = span.div_euclid(s) + 1;
        if self.ceil && (out - 1) * s >= size + p {
            out -= 1;
        }
        out
    }

    /// The window with a kernel larger than an axis' padded input (allowed
    /// by `ceil_mode`, one window there: EfficientNet's pooler) cut to that
    /// padded input, on static axes. torch's one window is already cut there,
    /// and it divides by what is left of it, so the averages are the same;
    /// OpenVINO's `AvgPool` refuses a kernel larger than the padded input.
    fn clamped(mut self, sizes: &[Option<i64>]) -> Window {
        for (i, size) in sizes.iter().enumerate() {
            let Some(n) = *size else { continue };
            let padded = n + 2 * self.pad[i];
            if self.dilation[i] == 1 && self.kernel[i] > padded && self.torch_size(i, n) == 1 {
                self.kernel[i] = padded;
            }
        }
        self
    }

    /// How ONNX pools torch's windows. ONNX Runtime drops a last `ceil_mode`
    /// window that starts in the right padding as torch does, but ONNX shape
    /// inference keeps it, and a static size inferred wrong breaks ONNX
    /// Runtime's buffer reuse. So on static axes `ceil_mode` is used only
    /// where torch keeps the extra window; where another axis needs it and
    /// this one drops it, this axis' end padding is cut so that no extra
    /// window fits (it held only padding), and past the padding the input's
    /// unused end too.
    fn plan(&self, sizes: &[Option<i64>], dilations: bool) -> Plan {
        let spans: Vec<Option<(i64, i64)>> = sizes
            .iter()
            .enumerate()
            .map(|(i, size)| {
                size.map(|n| (n + 2 * self.pad[i] - self.extent(i), self.torch_size(i, n)))
            })
            .collect();
        let floor = |i: usize, span: i64| span.div_euclid(self.stride[i]) + 1;
        let ceil = self.ceil
            && spans.iter().enumerate().any(|(i, s)| match s {
                Some((span, torch)) => *torch != floor(i, *span),
                None => true,
            });
        let mut ends = self.pad.clone();
        let mut crops = vec![0; sizes.len()];
        if ceil {
            for (i, s) in spans.iter().enumerate() {
                let Some((span, torch)) = *s else { continue };
                let rest = span.rem_euclid(self.stride[i]);
                if torch == floor(i, span) && rest != 0 {
                    ends[i] -= rest;
                    if ends[i] < 0 {
                        crops[i] = -ends[i];
                        ends[i] = 0;
                    }
                }
            }
        }
        let mut attributes = vec![
            attr("kernel_shape", Attribute::Ints(self.kernel.clone())),
            attr("strides", Attribute::Ints(self.stride.clone())),
            attr("pads", Attribute::Ints(self.pad.iter().chain(&ends).copied().collect())),
            attr("ceil_mode", Attribute::Int(ceil as i64)),
        ];
        if dilations {
            attributes.push(attr("dilations", Attribute::Ints(self.dilation.clone())));
        }
        Plan { attributes, crops }
    }
}

/// A pool's attributes, and what to cut off the end of each spatial axis first.
struct Plan {
    attributes: Vec<NamedAttribute>,
    crops: Vec<i64>,
}

impl Plan {
    /// `x` (`N, C, spatial...`) without the ends the plan cuts.
    fn cropped(&self, e: &Emit, x: &str) -> Result<String> {
        let axes: Vec<i64> =
            (0..self.crops.len()).filter(|&i| self.crops[i] > 0).map(|i| i as i64 + 2).collect();
        if axes.is_empty() {
            return Ok(x.to_string());
        }
        let ends: Vec<i64> = self.crops.iter().filter(|&&c| c > 0).map(|c| -c).collect();
        e.op(
            "Slice",
            &[
                x,
                &e.const_ints(&vec![0; axes.len()])?,
                &e.const_ints(&ends)?,
                &e.const_ints(&axes)?,
            ],
        )
    }
}

/// A per-axis list argument: one value broadcasts, empty or absent is `default`.
fn per_axis(e: &Emit, name: &str, spatial: usize, default: Option<&Vec<i64>>) -> Result<Vec<i64>> {
    let values = match e.arg(name)? {
        None | Some(Argument::None) => vec![],
        _ => e.ints(name)?,
    };
    match (values.len(), default) {
        (0, Some(default)) => Ok(default.clone()),
        (1, _) => Ok(vec![values[0]; spatial]),
        (n, _) if n == spatial => Ok(values),
        (n, _) => Err(e.fail(format!("`{name}` has {n} values for {spatial} spatial axes"))),
    }
}

/// The input as ONNX pools take it (`N, C, spatial...`): an unbatched input
/// gets a leading axis, which `unbatch` removes again.
fn batched(e: &Emit, x: &str, spatial: usize) -> Result<(String, bool)> {
    if e.rank("self")? as usize == spatial + 1 {
        Ok((e.op("Unsqueeze", &[x, &e.const_ints(&[0])?])?, true))
    } else {
        Ok((x.to_string(), false))
    }
}

fn unbatch(e: &Emit, y: String, unbatched: bool) -> Result<String> {
    if unbatched {
        e.op("Squeeze", &[&y, &e.const_ints(&[0])?])
    } else {
        Ok(y)
    }
}

/// The spatial sizes of input `self`, None where symbolic.
fn spatial_sizes(e: &Emit, spatial: usize) -> Result<Vec<Option<i64>>> {
    let shape = e.input_meta("self")?.shape;
    Ok(shape[shape.len() - spatial..]
        .iter()
        .map(|d| if let Dim::Fixed(n) = d { Some(*n) } else { None })
        .collect())
}

// ── average ──

fn avg_pool(e: &Emit, spatial: usize) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let window = Window::read(e, spatial)?;
    let include_pad = e.boolean("count_include_pad", true)?;
    let divisor = match e.arg("divisor_override")? {
        None | Some(Argument::None) => None,
        _ => Some(e.int("divisor_override", 1)?),
    };
    // ONNX Runtime's AveragePool runs in float32 and float16 only; torch
    // accumulates float16 in float32 too, and an integer mean truncates as Cast does.
    let x = e.cast(&e.tensor("self")?, &out, "float32")?;
    let (x, unbatched) = batched(e, &x, spatial)?;
    let sizes = spatial_sizes(e, spatial)?;
    let (y, dtype) = match divisor {
        None => {
            let window = window.clamped(&sizes);
            let plan = window.plan(&sizes, false);
            let mut attributes = plan.attributes.clone();
            attributes.push(attr("count_include_pad", Attribute::Int(include_pad as i64)));
            (e.op_with("AveragePool", &[&plan.cropped(e, &x)?], &attributes)?, "float32")
        }
        Some(divisor) if is_floating(&out) => (
            e.op(
                "Div",
                &[&window_sum(e, &x, &window, &sizes)?, &e.scalar(divisor as f64, "float32")?],
            )?,
            "float32",
        ),
        Some(divisor) => {
            // an integer sum is exact once rounded; torch divides it truncating, as Div does
            let sum = e.cast(
                &e.op("Round", &[&window_sum(e, &x, &window, &sizes)?])?,
                "float32",
                "int64",
            )?;
            (e.op("Div", &[&sum, &e.scalar(divisor as f64, "int64")?])?, "int64")
        }
    };
    let y = unbatch(e, y, unbatched)?;
    e.cast(&y, dtype, &out)
}

/// Each window's sum: `x` zero-padded by torch's padding plus what the last
/// `ceil_mode` window overhangs, so that every window lies inside and
/// AveragePool divides each by the whole kernel.
fn window_sum(e: &Emit, x: &str, window: &Window, sizes: &[Option<i64>]) -> Result<String> {
    let spatial = sizes.len();
    let axes = e.const_ints(&(0..spatial as i64).map(|i| i + 2).collect::<Vec<_>>())?;
    let pads = match sizes.iter().copied().collect::<Option<Vec<i64>>>() {
        Some(sizes) => {
            let ends: Vec<i64> = (0..spatial)
                .map(|i| {
                    let overhang = (window.torch_size(i, sizes[i]) - 1) * window.stride[i]
                        + window.extent(i)
                        - sizes[i]
                        - 2 * window.pad[i];
                    window.pad[i] + overhang.max(0)
                })
                .collect();
            e.const_ints(&window.pad.iter().chain(&ends).copied().collect::<Vec<_>>())?
        }
        None => runtime_pads(e, x, window)?,
    };
    let padded = e.op("Pad", &[x, &pads, "", &axes])?;
    let attributes = [
        attr("kernel_shape", Attribute::Ints(window.kernel.clone())),
        attr("strides", Attribute::Ints(window.stride.clone())),
    ];
    let mean = e.op_with("AveragePool", &[&padded], &attributes)?;
    let size = window.kernel.iter().product::<i64>() as f64;
    e.op("Mul", &[&mean, &e.scalar(size, "float32")?])
}

/// `window_sum`'s pads when a spatial size is symbolic: torch's output
/// size computed at run time, on the vector of spatial sizes.
fn runtime_pads(e: &Emit, x: &str, window: &Window) -> Result<String> {
    let spatial = window.kernel.len() as i64;
    let size = e.op_with("Shape", &[x], &[attr("start", Attribute::Int(-spatial))])?;
    let stride = e.const_ints(&window.stride)?;
    let pad = e.const_ints(&window.pad)?;
    let extent =
        e.const_ints(&(0..spatial as usize).map(|i| window.extent(i)).collect::<Vec<_>>())?;
    let ceil_extra: Vec<i64> =
        window.stride.iter().map(|s| if window.ceil { s - 1 } else { 0 }).collect();
    let padded = e.op("Add", &[&size, &e.op("Add", &[&pad, &pad])?])?;
    let span = e.op("Add", &[&e.op("Sub", &[&padded, &extent])?, &e.const_ints(&ceil_extra)?])?;
    // span >= 0 for every input torch accepts, so Div's truncation is a floor
    let mut last_start = e.op("Mul", &[&e.op("Div", &[&span, &stride])?, &stride])?;
    if window.ceil {
        let in_padding = e.op("GreaterOrEqual", &[&last_start, &e.op("Add", &[&size, &pad])?])?;
        let dropped = e.op("Mul", &[&e.cast(&in_padding, "bool", "int64")?, &stride])?;
        last_start = e.op("Sub", &[&last_start, &dropped])?;
    }
    let overhang = e.op("Sub", &[&e.op("Add", &[&last_start, &extent])?, &padded])?;
    let overhang = e.op("Max", &[&overhang, &e.const_ints(&vec![0; spatial as usize])?])?;
    let end = e.op("Add", &[&pad, &overhang])?;
    e.op_with("Concat", &[&pad, &end], &[attr("axis", Attribute::Int(0))])
}

// ── max ──

/// The dtype MaxPool runs in: ONNX Runtime's CPU kernel has float32,
/// float64, int8 and uint8 (and float16, whose ties pick another index than
/// torch's first); the others widen exactly (int64 up to 2^53).
fn max_dtype(dtype: &str) -> &'static str {
    match dtype {
        "float32" | "float16" | "bfloat16" | "int16" | "uint16" => "float32",
        "int8" => "int8",
        "uint8" => "uint8",
        _ => "float64",
    }
}

fn max_pool(e: &Emit, spatial: usize) -> Result<Vec<String>> {
    let out = e.output_meta()?.dtype;
    let compute = max_dtype(&out);
    let window = Window::read(e, spatial)?;
    let x = e.cast(&e.tensor("self")?, &out, compute)?;
    let (x, unbatched) = batched(e, &x, spatial)?;
    let sizes = spatial_sizes(e, spatial)?;
    let plan = window.plan(&sizes, true);
    let cropped = plan.cropped(e, &x)?;
    let mut pooled = e.op_n("MaxPool", &[&cropped], 2, &plan.attributes)?;
    let flat = pooled.pop().unwrap_or_default();
    let values = pooled.pop().unwrap_or_default();
    // ONNX's indices count over the whole N*C*spatial tensor, torch's within
    // each (n, c) plane: the remainder by the plane's size.
    // the size of spatial axis `i`, less what the plan cuts off it
    let size = |i: usize, crop: i64| -> Result<String> {
        match sizes[i] {
            Some(n) => e.const_ints(&[n - crop]),
            None => e.op_with(
                "Shape",
                &[&x],
                &[
                    attr("start", Attribute::Int(i as i64 + 2)),
                    attr("end", Attribute::Int(i as i64 + 3)),
                ],
            ),
        }
    };
    let mut plane = size(0, plan.crops[0])?;
    for i in 1..spatial {
        plane = e.op("Mul", &[&plane, &size(i, plan.crops[i])?])?;
    }
    let mut indices = e.op("Mod", &[&flat, &plane])?;
    if plan.crops[1..].iter().any(|&c| c > 0) {
        // a cut after the first spatial axis changes the strides: the
        // position in the cut plane, counted again in the whole one
        let mut rest = indices;
        let mut coordinates = vec![String::new(); spatial];
        for i in (1..spatial).rev() {
            let cut = size(i, plan.crops[i])?;
            coordinates[i] = e.op("Mod", &[&rest, &cut])?;
            rest = e.op("Div", &[&rest, &cut])?;
        }
        indices = rest;
        for (i, coordinate) in coordinates.iter().enumerate().skip(1) {
            indices = e.op("Add", &[&e.op("Mul", &[&indices, &size(i, 0)?])?, coordinate])?;
        }
    }
    let values = e.cast(&unbatch(e, values, unbatched)?, compute, &out)?;
    Ok(vec![values, unbatch(e, indices, unbatched)?])
}

// ── adaptive average ──

/// torch's adaptive windows: output `i` of `m` averages input `[floor(i*n/m), ceil((i+1)*n/m))`.
fn adaptive_avg_pool(e: &Emit, spatial: usize) -> Result<String> {
    let out = e.output_meta()?.dtype;
    // float64 keeps its precision through ReduceMean and MatMul; the rest run
    // in float32 (ONNX Runtime has no float16 AveragePool accumulating in float32).
    let compute = if out == "float64" { "float64" } else { "float32" };
    let x = e.cast(&e.tensor("self")?, &out, compute)?;
    let rank = e.rank("self")? as usize;
    let sizes = spatial_sizes(e, spatial)?;
    let targets = match e.arg("output_size")? {
        Some(Argument::SymInts(v)) => v,
        Some(Argument::Ints(v)) => v.into_iter().map(SymInt::Constant).collect(),
        Some(Argument::Int(i)) => vec![SymInt::Constant(i)],
        other => return Err(e.fail(format!("`output_size`: expected sizes, got {other:?}"))),
    };
    let targets =
        if targets.len() == 1 && spatial > 1 { vec![targets[0].clone(); spatial] } else { targets };
    if targets.len() != spatial {
        return Err(e.fail(format!(
            "`output_size` has {} values for {spatial} spatial axes",
            targets.len()
        )));
    }
    let axes: Vec<i64> = (0..spatial).map(|i| (rank - spatial + i) as i64).collect();
    if targets.iter().all(|t| *t == SymInt::Constant(1)) {
        let y = e.op_with(
            "ReduceMean",
            &[&x, &e.const_ints(&axes)?],
            &[attr("keepdims", Attribute::Int(1))],
        )?;
        return e.cast(&y, compute, &out);
    }
    // Windows that tile every pooled axis: one AveragePool (float32 only).
    let tiled: Option<Vec<i64>> = (0..spatial)
        .map(|i| match (sizes[i], &targets[i]) {
            (Some(n), SymInt::Constant(m)) if *m > 0 && n % m == 0 && compute == "float32" => {
                Some(n / m)
            }
            _ => None,
        })
        .collect();
    if let Some(kernel) = tiled {
        let (batched_x, unbatched) = if rank == spatial + 1 {
            (e.op("Unsqueeze", &[&x, &e.const_ints(&[0])?])?, true)
        } else {
            (x, false)
        };
        let attributes = [
            attr("kernel_shape", Attribute::Ints(kernel.clone())),
            attr("strides", Attribute::Ints(kernel)),
        ];
        let y = unbatch(e, e.op_with("AveragePool", &[&batched_x], &attributes)?, unbatched)?;
        return e.cast(&y, compute, &out);
    }
    // Else each window's sum, axis by axis (a 0/1 matrix), divided once by
    // its size: torch's order, so a float16 or bfloat16 result rounds as torch's.
    let mut y = x;
    let mut counts: Option<String> = None;
    for i in 0..spatial {
        if sizes[i].is_some() && sizes[i] == fixed(&targets[i]) {
            continue;
        }
        let (window, count) = windows(e, &y, axes[i], sizes[i], &targets[i], compute)?;
        y = along_axis(e, &y, &window, axes[i] as usize, rank)?;
        // the count along the axis, shaped to broadcast over the axes after it
        let trailing = (spatial - 1 - i) as i64;
        let count = if trailing > 0 {
            e.op("Unsqueeze", &[&count, &e.const_ints(&(1..=trailing).collect::<Vec<_>>())?])?
        } else {
            count
        };
        counts = Some(match counts {
            None => count,
            Some(before) => e.op("Mul", &[&before, &count])?,
        });
    }
    if let Some(counts) = counts {
        y = e.op("Div", &[&y, &counts])?;
    }
    e.cast(&y, compute, &out)
}

fn fixed(size: &SymInt) -> Option<i64> {
    if let SymInt::Constant(c) = size {
        Some(*c)
    } else {
        None
    }
}

/// For an axis of `n` pooled into `m`: the `[m, n]` 0/1 matrix of torch's
/// windows and the `[m]` window sizes, both in `dtype`; constant when `n` and
/// `m` are, else built at run time.
fn windows(
    e: &Emit,
    x: &str,
    axis: i64,
    size: Option<i64>,
    target: &SymInt,
    dtype: &str,
) -> Result<(String, String)> {
    if let (Some(n), Some(m)) = (size, fixed(target)) {
        let (mut matrix, mut counts) =
            (Vec::with_capacity((n * m) as usize), Vec::with_capacity(m as usize));
        for i in 0..m {
            let (start, end) = ((i * n).div_euclid(m), ((i + 1) * n + m - 1).div_euclid(m));
            matrix.extend((0..n).map(|j| if j >= start && j < end { 1.0 } else { 0.0 }));
            counts.push((end - start) as f32);
        }
        let flat =
            e.op_with("Constant", &[], &[attr("value_floats", Attribute::Floats(matrix))])?;
        let matrix =
            e.cast(&e.op("Reshape", &[&flat, &e.const_ints(&[m, n])?])?, "float32", dtype)?;
        let counts = e.cast(
            &e.op_with("Constant", &[], &[attr("value_floats", Attribute::Floats(counts))])?,
            "float32",
            dtype,
        )?;
        return Ok((matrix, counts));
    }
    let n = e.op(
        "Squeeze",
        &[&e.op_with(
            "Shape",
            &[x],
            &[attr("start", Attribute::Int(axis)), attr("end", Attribute::Int(axis + 1))],
        )?],
    )?;
    let m = match target {
        SymInt::Constant(m) => e.scalar(*m as f64, "int64")?,
        SymInt::Value(v) => e.builder.value_name(*v)?,
    };
    let zero = e.scalar(0.0, "int64")?;
    let one = e.scalar(1.0, "int64")?;
    let rows = e.op("Range", &[&zero, &m, &one])?;
    // non-negative operands: Div's truncation is the floor
    let start = e.op("Div", &[&e.op("Mul", &[&rows, &n])?, &m])?;
    let next = e.op("Mul", &[&e.op("Add", &[&rows, &one])?, &n])?;
    let end = e.op("Div", &[&e.op("Sub", &[&e.op("Add", &[&next, &m])?, &one])?, &m])?;
    let columns = e.op("Range", &[&zero, &n, &one])?;
    let column = e.op("Unsqueeze", &[&columns, &e.const_ints(&[0])?])?;
    let last = e.const_ints(&[1])?;
    let inside = e.op(
        "And",
        &[
            &e.op("GreaterOrEqual", &[&column, &e.op("Unsqueeze", &[&start, &last])?])?,
            &e.op("Less", &[&column, &e.op("Unsqueeze", &[&end, &last])?])?,
        ],
    )?;
    let counts = e.cast(&e.op("Sub", &[&end, &start])?, "int64", dtype)?;
    Ok((e.cast(&inside, "bool", dtype)?, counts))
}

/// `weights @ x` along `axis`: `[m, n]` weights turn that axis of `n` into `m`.
fn along_axis(e: &Emit, x: &str, weights: &str, axis: usize, rank: usize) -> Result<String> {
    if axis + 2 == rank {
        return e.op("MatMul", &[weights, x]);
    }
    let transposed =
        e.op_with("Transpose", &[weights], &[attr("perm", Attribute::Ints(vec![1, 0]))])?;
    if axis + 1 == rank {
        return e.op("MatMul", &[x, &transposed]);
    }
    let mut perm: Vec<i64> = (0..rank as i64).collect();
    perm.swap(axis, rank - 1);
    let moved = e.op_with("Transpose", &[x], &[attr("perm", Attribute::Ints(perm.clone()))])?;
    let pooled = e.op("MatMul", &[&moved, &transposed])?;
    e.op_with("Transpose", &[&pooled], &[attr("perm", Attribute::Ints(perm))])
}
