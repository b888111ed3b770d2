//! Shape, indexing and factory ATen ops → ONNX. Sizes that are symbolic
//! arrive as 0-d int64 values and are unsqueezed into the 1-D shape inputs
//! ONNX takes; `sym_size` answers such a value.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.view.default" => |e| reshape(e, "size"),
    "aten.reshape.default" => |e| reshape(e, "shape"),
    "aten._unsafe_view.default" => |e| reshape(e, "size"),
    "aten.unsqueeze.default" => unsqueeze,
    "aten.squeeze.dim" => squeeze,
    "aten.squeeze.dims" => squeeze,
    "aten.transpose.int" => transpose,
    "aten.permute.default" => permute,
    "aten.expand.default" => expand,
    "aten.slice.Tensor" => slice,
    "aten.select.int" => select,
    "aten.cat.default" => cat,
    "aten.index.Tensor" => index,
    "aten.embedding.default" => embedding,
    "aten.arange.default" => arange,
    "aten.arange.start" => arange,
    "aten.arange.start_step" => arange,
    "aten.zeros.default" => |e| factory(e, Fill::Zero),
    "aten.ones.default" => |e| factory(e, Fill::One),
    "aten.full.default" => |e| factory(e, Fill::Given),
    "aten.new_ones.default" => |e| factory(e, Fill::One),
    "aten.new_zeros.default" => |e| factory(e, Fill::Zero),
    "aten.zeros_like.default" => |e| factory_like(e, Fill::Zero),
    "aten.ones_like.default" => |e| factory_like(e, Fill::One),
    "aten.full_like.default" => |e| factory_like(e, Fill::Given),
    "aten.sym_size.int" => sym_size,
    "aten.flatten.using_ints" => flatten,
    "aten.repeat_interleave.self_int" => repeat_interleave,
    "aten.split.Tensor" => |e| split(e, Pieces::OfSize),
    "aten.split_with_sizes.default" => |e| split(e, Pieces::Sized),
    "aten.chunk.default" => |e| split(e, Pieces::Chunks),
    "aten.unbind.int" => |e| split(e, Pieces::Unbound),
    "aten.gather.default" => gather,
    // `empty*` content is unspecified; zeros are one valid choice.
    "aten.empty_like.default" => |e| factory_like(e, Fill::Zero),
    "aten.empty.memory_format" => |e| factory(e, Fill::Zero),
    "aten.new_empty.default" => |e| factory(e, Fill::Zero),
    "aten.scatter.src" => |e| scatter(e, "none"),
    "aten.scatter.value" => |e| scatter(e, "none"),
    "aten.scatter_add.default" => |e| scatter(e, "add"),
    "aten.index_put.default" => index_put,
    "aten.fill.Scalar" => |e| broadcast_into_self(e, "value"),
    "aten.copy.default" => |e| broadcast_into_self(e, "src"),
}

fn normalize(dim: i64, rank: i64) -> i64 {
    if dim < 0 { dim + rank } else { dim }
}

/// `Expand(value, shape)`: the output's shape when it is constant, else built
/// from the size list (where -1 keeps the input's size).
fn expand_shape(e: &Emit, size: &str, input: Option<&str>) -> Result<String> {
    if let Some(shape) = fixed_shape(&e.output_meta()?) {
        return e.const_ints(&shape);
    }
    let (Some(input), Some(Argument::SymInts(sizes))) = (input, e.arg(size)?) else { return e.shape(size) };
    let rank = e.rank(input)?;
    let x = e.tensor(input)?;
    let offset = sizes.len() as i64 - rank;
    let mut parts = Vec::new();
    for (i, s) in sizes.iter().enumerate() {
        parts.push(match s {
            SymInt::Constant(-1) => {
                let axis = i as i64 - offset;
                e.op_with("Shape", &[&x], &[attr("start", Attribute::Int(axis)), attr("end", Attribute::Int(axis + 1))])?
            }
            size => e.size_1d(size)?,
        });
    }
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    e.op_with("Concat", &refs, &[attr("axis", Attribute::Int(0))])
}

/// A tensor of `shape` (ONNX name) filled with `value` in the output's dtype.
fn filled(e: &Emit, value: f64, shape: &str) -> Result<String> {
    let dtype = e.output_meta()?.dtype;
    let scalar = e.scalar(value, &dtype)?;
    e.op("Expand", &[&scalar, shape])
}

/// What a factory fills its tensor with.
#[derive(Clone, Copy)]
enum Fill {
    Zero,
    One,
    /// The node's `fill_value`.
    Given,
}

fn fill_value(e: &Emit, fill: Fill) -> Result<f64> {
    Ok(match fill {
        Fill::Zero => 0.0,
        Fill::One => 1.0,
        Fill::Given => match e.arg("fill_value")? {
            Some(Argument::Float(f)) => f,
            Some(Argument::Int(i)) => i as f64,
            Some(Argument::Boolean(b)) => b as i64 as f64,
            other => return Err(e.fail(format!("fill_value {other:?} is not translated"))),
        },
    })
}

/// The `indices` of `index` / `index_put`: one per leading axis, None for a `:`.
fn indices(e: &Emit) -> Result<Vec<Option<ValueId>>> {
    match e.arg("indices")? {
        Some(Argument::Tensors(v)) => Ok(v.into_iter().map(Some).collect()),
        Some(Argument::OptionalTensors(v)) => Ok(v),
        other => Err(e.fail(format!("indices {other:?}"))),
    }
}

fn index(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let indices = indices(e)?;
    let given: Vec<(usize, ValueId)> = indices.iter().enumerate().filter_map(|(i, v)| v.map(|v| (i, v))).collect();
    for &(_, v) in &given {
        if e.meta_of(v)?.dtype == "bool" {
            return Err(e.fail("boolean mask indexing is data-dependent; not translated"));
        }
    }
    match given[..] {
        [(axis, v)] => {
            let i = e.builder.value_name(v)?;
            e.op_with("Gather", &[&x, &i], &[attr("axis", Attribute::Int(axis as i64))])
        }
        _ if given.iter().enumerate().all(|(k, &(i, _))| k == i) => {
            // Leading advanced indices: broadcast them together, stack on a new last axis, GatherND.
            let names: Vec<String> = given.iter().map(|&(_, v)| e.builder.value_name(v)).collect::<Result<_, _>>()?;
            let zero = e.scalar(0.0, "int64")?;
            let mut sum = zero.clone();
            for n in &names {
                let as_i64 = e.op_with("Cast", &[n], &[attr("to", Attribute::Int(7))])?;
                let zeroed = e.op("Mul", &[&as_i64, &zero])?;
                sum = e.op("Add", &[&sum, &zeroed])?;
            }
            let last = e.const_ints(&[-1])?;
            let mut stacked = Vec::new();
            for n in &names {
                let as_i64 = e.op_with("Cast", &[n], &[attr("to", Attribute::Int(7))])?;
                let broadcast = e.op("Add", &[&as_i64, &sum])?;
                stacked.push(e.op("Unsqueeze", &[&broadcast, &last])?);
            }
            let refs: Vec<&str> = stacked.iter().map(String::as_str).collect();
            let index = e.op_with("Concat", &refs, &[attr("axis", Attribute::Int(-1))])?;
            e.op("GatherND", &[&x, &index])
        }
        _ => Err(e.fail("advanced indices that are not leading and consecutive are not translated yet")),
    }
}

/// `self[indices] = values` (or `+=` with `accumulate`). One integer index on
/// the first axis is a `ScatterND` (its rows broadcast from `values`); a bool
/// mask over the leading axes writes `values` where it is set, either
/// broadcast (a scalar, or values shaped like `self`) or consumed in order
/// (`x[mask] = flat_values`) through the mask's running count, as the
/// reference's `_aten_index_put` does.
fn index_put(e: &Emit) -> Result<String> {
    let dtype = e.output_meta()?.dtype;
    let x = e.tensor("self")?;
    let values = e.operand("values", &dtype)?;
    let accumulate = e.boolean("accumulate", false)?;
    let indices = indices(e)?;
    let [Some(index)] = indices[..] else {
        return Err(e.fail("index_put with more than one index (or a None index) is not translated yet"));
    };
    let index_meta = e.meta_of(index)?;
    let index_name = e.builder.value_name(index)?;
    if index_meta.dtype == "bool" {
        if accumulate {
            return Err(e.fail("index_put with a bool mask and accumulate=True is not translated"));
        }
        let shape = e.op("Shape", &[&x])?;
        let mut mask = index_name;
        for _ in index_meta.shape.len()..e.rank("self")? as usize {
            mask = e.op("Unsqueeze", &[&mask, &e.const_ints(&[-1])?])?;
        }
        let mask = e.op("Expand", &[&mask, &shape])?;
        let values_meta = e.input_meta("values")?;
        let self_meta = e.input_meta("self")?;
        let broadcasts = values_meta.shape.iter().all(|d| *d == Dim::Fixed(1))
            || values_meta.shape == self_meta.shape;
        if broadcasts {
            let expanded = e.op("Expand", &[&values, &shape])?;
            return e.op("Where", &[&mask, &expanded, &x]);
        }
        let flat = e.const_ints(&[-1])?;
        let flat_mask = e.op("Reshape", &[&mask, &flat])?;
        let count = e.op("CumSum", &[&e.cast(&flat_mask, "bool", "int64")?, &e.scalar(0.0, "int64")?])?;
        let position = e.op("Sub", &[&count, &e.scalar(1.0, "int64")?])?;
        let position = e.op("Clip", &[&position, &e.scalar(0.0, "int64")?])?;
        let gathered = e.op("Gather", &[&e.op("Reshape", &[&values, &flat])?, &position])?;
        let written = e.op("Where", &[&flat_mask, &gathered, &e.op("Reshape", &[&x, &flat])?])?;
        return e.op("Reshape", &[&written, &shape]);
    }
    // integer index on axis 0: ScatterND with index[..., None]; values broadcast to index.shape + self.shape[1:]
    let index = e.cast(&index_name, &index_meta.dtype, "int64")?;
    let rank = e.rank("self")?;
    let rows = e.op("Shape", &[&index])?;
    let target = if rank > 1 {
        let rest = e.op_with("Shape", &[&x], &[attr("start", Attribute::Int(1))])?;
        e.op_with("Concat", &[&rows, &rest], &[attr("axis", Attribute::Int(0))])?
    } else {
        rows
    };
    // negative indices count from the end, as torch's
    let size = e.op_with("Shape", &[&x], &[attr("start", Attribute::Int(0)), attr("end", Attribute::Int(1))])?;
    let wrapped = e.op("Add", &[&index, &size])?;
    let negative = e.op("Less", &[&index, &e.scalar(0.0, "int64")?])?;
    let index = e.op("Where", &[&negative, &wrapped, &index])?;
    let index = e.op("Unsqueeze", &[&index, &e.const_ints(&[-1])?])?;
    let updates = e.op("Expand", &[&values, &target])?;
    let reduction = if accumulate { "add" } else { "none" };
    e.op_with("ScatterND", &[&x, &index, &updates], &[attr("reduction", Attribute::Str(reduction.into()))])
}

/// How `split`, `split_with_sizes`, `chunk` and `unbind` cut the axis.
#[derive(Clone, Copy, PartialEq)]
enum Pieces {
    /// `split`: pieces of `split_size` (the last one shorter).
    OfSize,
    /// `split_with_sizes`: the sizes given.
    Sized,
    /// `chunk`: `chunks` pieces of equal size (the last one shorter).
    Chunks,
    /// `unbind`: every index, the axis squeezed away.
    Unbound,
}

/// One `Split` with the piece sizes, computed from the axis' constant size.
fn split(e: &Emit, pieces: Pieces) -> Result<Vec<String>> {
    let x = e.tensor("self")?;
    let meta = e.input_meta("self")?;
    let rank = meta.shape.len() as i64;
    let dim = normalize(e.int("dim", 0)?, rank);
    let target = e.target()?;
    let Some(Dim::Fixed(total)) = meta.shape.get(dim as usize).cloned() else {
        return Err(e.fail(format!("{target} of a symbolic axis (the patch-split/chunk plugins rewrite those into narrows)")));
    };
    let sizes: Vec<i64> = match pieces {
        Pieces::Sized => e.ints("split_sizes")?,
        Pieces::Unbound => vec![1; total as usize],
        Pieces::OfSize | Pieces::Chunks => {
            let size = if pieces == Pieces::Chunks {
                let chunks = e.int("chunks", 1)?.max(1);
                (total + chunks - 1) / chunks
            } else {
                e.int("split_size", total)?
            };
            let size = size.max(1);
            (0..total).step_by(size as usize).map(|start| size.min(total - start)).collect()
        }
    };
    let split = e.const_ints(&sizes)?;
    let mut outputs = e.op_n("Split", &[&x, &split], sizes.len() as u32, &[attr("axis", Attribute::Int(dim))])?;
    if pieces == Pieces::Unbound {
        let axes = e.const_ints(&[dim])?;
        outputs = outputs.iter().map(|o| e.op("Squeeze", &[o, &axes])).collect::<Result<_, _>>()?;
    }
    let declared = e.graph.output_values(e.node)?.len();
    if declared != outputs.len() {
        return Err(e.fail(format!("{target}: {} pieces, the node declares {declared}", outputs.len())));
    }
    Ok(outputs)
}

/// `repeat_interleave(self, repeats: int, dim)`: Unsqueeze after the axis, Tile
/// there, Reshape back (flattened first when `dim` is None), as the reference's
/// `_aten_repeat_interleave_self_int` (torchlib's raises on `dim=None`).
fn repeat_interleave(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let repeats = e.int_1d("repeats", 1)?;
    let one = e.const_ints(&[1])?;
    let minus_one = e.const_ints(&[-1])?;
    match e.arg("dim")? {
        None | Some(Argument::None) => {
            let flat = e.op("Reshape", &[&x, &minus_one])?;
            let column = e.op("Unsqueeze", &[&flat, &one])?;
            let tiles = e.op_with("Concat", &[&one, &repeats], &[attr("axis", Attribute::Int(0))])?;
            let tiled = e.op("Tile", &[&column, &tiles])?;
            e.op("Reshape", &[&tiled, &minus_one])
        }
        _ => {
            let rank = e.rank("self")?;
            let dim = normalize(e.int("dim", 0)?, rank);
            let after = e.const_ints(&[dim + 1])?;
            let expanded = e.op("Unsqueeze", &[&x, &after])?;
            let mut parts = Vec::new();
            if dim + 1 > 0 {
                parts.push(e.const_ints(&vec![1; (dim + 1) as usize])?);
            }
            parts.push(repeats);
            if rank - dim - 1 > 0 {
                parts.push(e.const_ints(&vec![1; (rank - dim - 1) as usize])?);
            }
            let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
            let tiles = e.op_with("Concat", &refs, &[attr("axis", Attribute::Int(0))])?;
            let tiled = e.op("Tile", &[&expanded, &tiles])?;
            let head = e.op_with("Shape", &[&x], &[attr("start", Attribute::Int(0)), attr("end", Attribute::Int(dim))])?;
            let tail = e.op_with("Shape", &[&x], &[attr("start", Attribute::Int(dim + 1))])?;
            let shape = e.op_with("Concat", &[&head, &minus_one, &tail], &[attr("axis", Attribute::Int(0))])?;
            e.op("Reshape", &[&tiled, &shape])
        }
    }
}

fn flatten(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let rank = e.rank("self")?.max(1);
    let (start, end) = (normalize(e.int("start_dim", 0)?, rank), normalize(e.int("end_dim", -1)?, rank));
    let shape = match fixed_shape(&e.output_meta()?) {
        Some(shape) => e.const_ints(&shape)?,
        None => {
            // shape[:start] + [-1] + shape[end+1:]
            let full = e.op("Shape", &[&x])?;
            let head = e.op("Slice", &[&full, &e.const_ints(&[0])?, &e.const_ints(&[start])?])?;
            let tail = e.op("Slice", &[&full, &e.const_ints(&[end + 1])?, &e.const_ints(&[rank])?])?;
            let merged = e.const_ints(&[-1])?;
            e.op_with("Concat", &[&head, &merged, &tail], &[attr("axis", Attribute::Int(0))])?
        }
    };
    e.op("Reshape", &[&x, &shape])
}

fn gather(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let index = e.tensor("index")?;
    let axis = normalize(e.int("dim", 0)?, e.rank("self")?);
    e.op_with("GatherElements", &[&x, &index], &[attr("axis", Attribute::Int(axis))])
}

/// `view` / `reshape` / `_unsafe_view` to the sizes in argument `sizes`.
fn reshape(e: &Emit, sizes: &str) -> Result<String> {
    let x = e.tensor("self")?;
    let shape = match fixed_shape(&e.output_meta()?) {
        Some(shape) => e.const_ints(&shape)?,
        None => e.shape(sizes)?,
    };
    e.op("Reshape", &[&x, &shape])
}

fn unsqueeze(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let axes = e.const_ints(&[e.int("dim", 0)?])?;
    e.op("Unsqueeze", &[&x, &axes])
}

fn squeeze(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let rank = e.rank("self")?;
    let meta = e.input_meta("self")?;
    let dims = match e.arg("dim")? {
        Some(Argument::Ints(_)) => e.ints("dim")?,
        _ => vec![e.int("dim", 0)?],
    };
    // torch's squeeze skips dims that are not 1; ONNX's refuses them.
    let dims: Vec<i64> =
        dims.into_iter().map(|d| normalize(d, rank)).filter(|&d| matches!(meta.shape.get(d as usize), Some(Dim::Fixed(1)))).collect();
    if dims.is_empty() {
        e.op("Identity", &[&x])
    } else {
        let axes = e.const_ints(&dims)?;
        e.op("Squeeze", &[&x, &axes])
    }
}

fn transpose(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let rank = e.rank("self")?;
    let (a, b) = (normalize(e.int("dim0", 0)?, rank), normalize(e.int("dim1", 1)?, rank));
    let mut perm: Vec<i64> = (0..rank).collect();
    perm.swap(a as usize, b as usize);
    e.op_with("Transpose", &[&x], &[attr("perm", Attribute::Ints(perm))])
}

fn permute(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let rank = e.rank("self")?;
    let perm: Vec<i64> = e.ints("dims")?.into_iter().map(|d| normalize(d, rank)).collect();
    e.op_with("Transpose", &[&x], &[attr("perm", Attribute::Ints(perm))])
}

fn expand(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let shape = expand_shape(e, "size", Some("self"))?;
    e.op("Expand", &[&x, &shape])
}

fn slice(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let starts = e.int_1d("start", 0)?;
    let ends = e.int_1d("end", i64::MAX)?;
    let axes = e.const_ints(&[e.int("dim", 0)?])?;
    let steps = e.const_ints(&[e.int("step", 1)?])?;
    e.op("Slice", &[&x, &starts, &ends, &axes, &steps])
}

fn select(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let i = match e.arg("index")? {
        Some(Argument::SymInt(SymInt::Value(v))) => e.builder.value_name(v)?,
        _ => e.scalar(e.int("index", 0)? as f64, "int64")?,
    };
    e.op_with("Gather", &[&x, &i], &[attr("axis", Attribute::Int(e.int("dim", 0)?))])
}

fn cat(e: &Emit) -> Result<String> {
    let Some(Argument::Tensors(values)) = e.arg("tensors")? else { return Err(e.fail("cat without tensors")) };
    // torch skips 1-D empty tensors in cat (an empty cache's `torch.tensor([])`); ONNX cannot.
    let mut names = Vec::new();
    for &v in &values {
        if e.meta_of(v)?.shape != [Dim::Fixed(0)] || values.len() == 1 {
            names.push(e.builder.value_name(v)?);
        }
    }
    if names.len() == 1 {
        return e.op("Identity", &[&names[0]]);
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    e.op_with("Concat", &refs, &[attr("axis", Attribute::Int(e.int("dim", 0)?))])
}

/// `fill` / `copy`: `self`'s shape and dtype, the argument `value` broadcast into it.
fn broadcast_into_self(e: &Emit, value: &str) -> Result<String> {
    let dtype = e.output_meta()?.dtype;
    let value = e.operand(value, &dtype)?;
    let shape = e.op("Shape", &[&e.tensor("self")?])?;
    e.op("Expand", &[&value, &shape])
}

/// `scatter` (`src` or a scalar `value`) / `scatter_add`: `ScatterElements`
/// with ONNX's `reduction`.
fn scatter(e: &Emit, reduction: &str) -> Result<String> {
    let dtype = e.output_meta()?.dtype;
    let x = e.tensor("self")?;
    let index = e.tensor("index")?;
    let axis = normalize(e.int("dim", 0)?, e.rank("self")?);
    let updates = match e.arg("src")? {
        Some(Argument::Tensor(_)) => e.operand("src", &dtype)?,
        _ => {
            // a scalar `value`, one per index
            let value = e.operand("value", &dtype)?;
            e.op("Expand", &[&value, &e.op("Shape", &[&index])?])?
        }
    };
    e.op_with("ScatterElements", &[&x, &index, &updates], &[attr("axis", Attribute::Int(axis)), attr("reduction", Attribute::Str(reduction.into()))])
}

fn embedding(e: &Emit) -> Result<String> {
    let weight = e.tensor("weight")?;
    let indices = e.tensor("indices")?;
    e.op_with("Gather", &[&weight, &indices], &[attr("axis", Attribute::Int(0))])
}

fn arange(e: &Emit) -> Result<String> {
    let dtype = e.output_meta()?.dtype;
    let start = if e.arg("start")?.is_some() { e.operand("start", &dtype)? } else { e.scalar(0.0, &dtype)? };
    let end = e.operand("end", &dtype)?;
    let step = if e.arg("step")?.is_some() { e.operand("step", &dtype)? } else { e.scalar(1.0, &dtype)? };
    e.op("Range", &[&start, &end, &step])
}

/// `zeros`, `ones`, `full`, `new_*`, `empty`: a tensor of the `size` given.
fn factory(e: &Emit, fill: Fill) -> Result<String> {
    let shape = expand_shape(e, "size", None)?;
    filled(e, fill_value(e, fill)?, &shape)
}

/// `*_like`: a tensor of `self`'s shape.
fn factory_like(e: &Emit, fill: Fill) -> Result<String> {
    let x = e.tensor("self")?;
    let shape = e.op("Shape", &[&x])?;
    filled(e, fill_value(e, fill)?, &shape)
}

fn sym_size(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let dim = normalize(e.int("dim", 0)?, e.rank("self")?);
    let one = e.op_with("Shape", &[&x], &[attr("start", Attribute::Int(dim)), attr("end", Attribute::Int(dim + 1))])?;
    let axes = e.const_ints(&[0])?;
    e.op("Squeeze", &[&one, &axes])
}
