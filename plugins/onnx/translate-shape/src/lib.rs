//! Shape, indexing and factory ATen ops → ONNX. Sizes that are symbolic
//! arrive as 0-d int64 values and are unsqueezed into the 1-D shape inputs
//! ONNX takes; `sym_size` answers such a value.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.tril.default" => |e| triangle(e, false),
    "aten.triu.default" => |e| triangle(e, true),
    "aten.view.default" => |e| reshape(e, "size"),
    "aten.reshape.default" => |e| reshape(e, "shape"),
    "aten._unsafe_view.default" => |e| reshape(e, "size"),
    "aten.unsqueeze.default" => unsqueeze,
    "aten.squeeze.dim" => squeeze,
    "aten.squeeze.dims" => squeeze,
    "aten.transpose.int" => transpose,
    "aten.permute.default" => permute,
    // `x.T` (Falcon's `self.weight.T`) and `x.mT` stay whole under torch.export;
    // with real values the adjoints are the same transposes
    "aten.numpy_T.default" => |e| reversed_axes(e, false),
    "aten.mT.default" => |e| reversed_axes(e, true),
    "aten.mH.default" => |e| reversed_axes(e, true),
    "aten.adjoint.default" => |e| reversed_axes(e, true),
    "aten.matrix_H.default" => |e| reversed_axes(e, true),
    "aten.expand.default" => expand,
    "aten.slice.Tensor" => slice,
    // not core, but what the patch-split/chunk/roll plugins emit
    "aten.narrow.default" => narrow,
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
    "aten.as_strided.default" => as_strided,
    "aten.as_strided_scatter.default" => as_strided_scatter,
    "aten.diagonal.default" => diagonal,
    "aten.flip.default" => flip,
    "aten.repeat.default" => repeat,
    "aten.index_select.default" => index_select,
    "aten.empty_strided.default" => |e| factory(e, Fill::Zero),
    // the physical layout only orders memory, which ONNX does not expose
    "aten.empty_permuted.default" => |e| factory(e, Fill::Zero),
    "aten.scalar_tensor.default" => |e| e.operand("s", &e.output_meta()?.dtype),
    "aten.nonzero.default" => nonzero,
    "aten.unfold.default" => unfold,
}

fn normalize(dim: i64, rank: i64) -> i64 {
    if dim < 0 {
        dim + rank
    } else {
        dim
    }
}

/// `Expand(value, shape)`: the output's shape when it is constant, else built
/// from the size list (where -1 keeps the input's size).
fn expand_shape(e: &Emit, size: &str, input: Option<&str>) -> Result<String> {
    if let Some(shape) = fixed_shape(&e.output_meta()?) {
        return e.const_ints(&shape);
    }
    // sizes may arrive as ints or sym-ints; -1 keeps the input's size either way
    let Some(input) = input else { return e.shape(size) };
    let sizes = sym_ints(e, size)?;
    let rank = e.rank(input)?;
    let x = e.tensor(input)?;
    let offset = sizes.len() as i64 - rank;
    let mut parts = Vec::new();
    for (i, s) in sizes.iter().enumerate() {
        parts.push(match s {
            SymInt::Constant(-1) => {
                let axis = i as i64 - offset;
                e.op_with(
                    "Shape",
                    &[&x],
                    &[attr("start", Attribute::Int(axis)), attr("end", Attribute::Int(axis + 1))],
                )?
            }
            size => e.size_1d(size)?,
        });
    }
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    e.op_with("Concat", &refs, &[attr("axis", Attribute::Int(0))])
}

/// A tensor of `shape` (ONNX name) filled with the factory's value in the
/// output's dtype.
fn filled(e: &Emit, fill: Fill, shape: &str) -> Result<String> {
    let dtype = e.output_meta()?.dtype;
    let scalar = match fill {
        Fill::Zero => e.scalar(0.0, &dtype)?,
        Fill::One => e.scalar(1.0, &dtype)?,
        Fill::Given => scalar_operand(e, "fill_value", &dtype)?,
    };
    e.op("Expand", &[&scalar, shape])
}

/// What a factory fills its tensor with.
#[derive(Clone, Copy)]
enum Fill {
    Zero,
    One,
    /// The node's `fill_value` (a number or a symbolic size).
    Given,
}

/// Operand `name` in `dtype`; a number becomes a bool as torch does (any
/// nonzero is True, where `Emit::scalar` would truncate 0.5 to False).
fn scalar_operand(e: &Emit, name: &str, dtype: &str) -> Result<String> {
    if dtype != "bool" {
        return e.operand(name, dtype);
    }
    match e.arg(name)? {
        Some(Argument::Tensor(_)) => e.operand(name, dtype),
        _ => e.cast(&e.operand(name, "float32")?, "float32", "bool"),
    }
}

/// The `indices` of `index` / `index_put`: one per leading axis, None for a `:`.
fn indices(e: &Emit) -> Result<Vec<Option<ValueId>>> {
    match e.arg("indices")? {
        Some(Argument::Tensors(v)) => Ok(v.into_iter().map(Some).collect()),
        Some(Argument::OptionalTensors(v)) => Ok(v),
        other => Err(e.fail(format!("indices {other:?}"))),
    }
}

/// Each index of `index` / `index_put` as int64 with its rank, per axis of
/// `self` it applies to (None for a `:`): a bool (or uint8) mask becomes one
/// index per axis it covers, the rows of its `NonZero`.
fn axis_indices(e: &Emit) -> Result<Vec<Option<(String, usize)>>> {
    let mut out = Vec::new();
    for entry in indices(e)? {
        let Some(v) = entry else {
            out.push(None);
            continue;
        };
        let meta = e.meta_of(v)?;
        let name = e.builder.value_name(v)?;
        if meta.dtype == "bool" || meta.dtype == "uint8" {
            if meta.shape.is_empty() {
                return Err(e.fail(
                    "indexing with a 0-d bool mask (a new axis of size 0 or 1) is not translated",
                ));
            }
            let found = e.op("NonZero", &[&e.cast(&name, &meta.dtype, "bool")?])?;
            for j in 0..meta.shape.len() {
                let row = e.op_with(
                    "Gather",
                    &[&found, &int_0d(e, j as i64)?],
                    &[attr("axis", Attribute::Int(0))],
                )?;
                out.push(Some((row, 1)));
            }
        } else {
            out.push(Some((e.cast(&name, &meta.dtype, "int64")?, meta.shape.len())));
        }
    }
    Ok(out)
}

/// Advanced indexing laid out for `GatherND` / `ScatterND`: `self` with the
/// indexed axes moved first, the indices broadcast together and stacked on a
/// last axis, and where torch puts the broadcast axes in its result (`at`:
/// in place of the indexed axes when they are consecutive, else first).
struct Advanced {
    moved: String,
    perm: Vec<i64>,
    stacked: String,
    /// The shape the indices broadcast to (1-D).
    broadcast: String,
    /// Its rank.
    index_rank: i64,
    /// How many axes are indexed.
    count: i64,
    at: i64,
}

fn advanced(
    e: &Emit,
    x: &str,
    rank: i64,
    axes: &[Option<(String, usize)>],
    wrap: bool,
) -> Result<Advanced> {
    let given: Vec<(i64, &String, usize)> = axes
        .iter()
        .enumerate()
        .filter_map(|(a, v)| v.as_ref().map(|(n, r)| (a as i64, n, *r)))
        .collect();
    let first = given[0].0;
    let consecutive = given.iter().enumerate().all(|(j, g)| g.0 == first + j as i64);
    let mut perm: Vec<i64> = given.iter().map(|g| g.0).collect();
    perm.extend((0..rank).filter(|a| !given.iter().any(|g| g.0 == *a)));
    let moved = transposed(e, x, &perm)?;
    // broadcast together: each index plus all of them times 0
    let zero = int_0d(e, 0)?;
    let mut sum = zero.clone();
    for (_, n, _) in &given {
        sum = e.op("Add", &[&sum, &e.op("Mul", &[n, &zero])?])?;
    }
    let last = e.const_ints(&[-1])?;
    let mut parts = Vec::new();
    for &(axis, n, _) in &given {
        let mut index = n.clone();
        if wrap {
            // negative indices count from the end, as torch's
            let wrapped = e.op("Add", &[&index, &dim_0d(e, x, axis)?])?;
            let negative = e.op("Less", &[&index, &zero])?;
            index = e.op("Where", &[&negative, &wrapped, &index])?;
        }
        parts.push(e.op("Unsqueeze", &[&e.op("Add", &[&index, &sum])?, &last])?);
    }
    Ok(Advanced {
        moved,
        perm,
        stacked: concat(e, &parts, -1)?,
        broadcast: e.op("Shape", &[&sum])?,
        index_rank: given.iter().map(|g| g.2 as i64).max().unwrap_or(0),
        count: given.len() as i64,
        at: if consecutive { first } else { 0 },
    })
}

/// `self[indices]`: one index is a `Gather` on its axis (torch's layout as
/// is); several, or a mask over several axes, a `GatherND` over the indexed
/// axes moved first, its index axes moved to where torch puts them.
fn index(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let rank = e.rank("self")?;
    let axes = axis_indices(e)?;
    let given: Vec<(usize, &String)> = axes
        .iter()
        .enumerate()
        .filter_map(|(a, v)| v.as_ref().map(|(index, _)| (a, index)))
        .collect();
    match given[..] {
        [] => e.op("Identity", &[&x]),
        [(axis, index)] => {
            e.op_with("Gather", &[&x, index], &[attr("axis", Attribute::Int(axis as i64))])
        }
        _ => {
            let adv = advanced(e, &x, rank, &axes, false)?;
            let gathered = e.op("GatherND", &[&adv.moved, &adv.stacked])?;
            let (b, at, rest) = (adv.index_rank, adv.at, rank - adv.count);
            let perm: Vec<i64> = (b..b + at).chain(0..b).chain(b + at..b + rest).collect();
            transposed(e, &gathered, &perm)
        }
    }
}

/// `self[indices] = values` (`+=` with `accumulate`): a `ScatterND` over the
/// indexed axes moved first, `values` broadcast to torch's `self[indices]`
/// and laid out the same way; a bool mask with a single value is a `Where`
/// (no data-dependent shape). ORT has no float16 `add` kernel: accumulated
/// in float32.
fn index_put(e: &Emit) -> Result<String> {
    let dtype = e.output_meta()?.dtype;
    let x = e.tensor("self")?;
    let rank = e.rank("self")?;
    let values_meta = e.input_meta("values")?;
    let accumulate = e.boolean("accumulate", false)?;
    let raw = indices(e)?;
    if let [Some(mask)] = raw[..] {
        let mask_meta = e.meta_of(mask)?;
        let single = values_meta.shape.iter().all(|d| *d == Dim::Fixed(1));
        if mask_meta.dtype == "bool" && single && !accumulate && !mask_meta.shape.is_empty() {
            let mut mask = e.builder.value_name(mask)?;
            let trailing: Vec<i64> = (mask_meta.shape.len() as i64..rank).collect();
            if !trailing.is_empty() {
                mask = e.op("Unsqueeze", &[&mask, &e.const_ints(&trailing)?])?;
            }
            let shape = e.op("Shape", &[&x])?;
            let mask = e.op("Expand", &[&mask, &shape])?;
            let values = e.op("Expand", &[&e.operand("values", &dtype)?, &shape])?;
            return e.where_any(&mask, &values, &x, &dtype);
        }
    }
    let compute = if accumulate && matches!(dtype.as_str(), "float16" | "bfloat16") {
        "float32"
    } else {
        dtype.as_str()
    };
    let x = e.cast(&x, &dtype, compute)?;
    let values = e.operand("values", compute)?;
    let axes = axis_indices(e)?;
    if axes.iter().all(Option::is_none) {
        return Err(e.fail("index_put without an index"));
    }
    let adv = advanced(e, &x, rank, &axes, true)?;
    let (k, b, at) = (adv.count, adv.index_rank, adv.at);
    // torch's `self[indices]` shape: the index axes at `at` among the others
    let mut target = Vec::new();
    if at > 0 {
        target.push(dims_1d(e, &adv.moved, k, Some(k + at))?);
    }
    target.push(adv.broadcast.clone());
    if k + at < rank {
        target.push(dims_1d(e, &adv.moved, k + at, None)?);
    }
    let updates = e.op("Expand", &[&values, &concat(e, &target, 0)?])?;
    let rest = rank - k;
    let perm: Vec<i64> = (at..at + b).chain(0..at).chain(at + b..b + rest).collect();
    let updates = transposed(e, &updates, &perm)?;
    let reduction = if accumulate { "add" } else { "none" };
    let written = e.op_with(
        "ScatterND",
        &[&adv.moved, &adv.stacked, &updates],
        &[attr("reduction", Attribute::Str(reduction.into()))],
    )?;
    let mut inverse = vec![0; rank as usize];
    for (i, &p) in adv.perm.iter().enumerate() {
        inverse[p as usize] = i as i64;
    }
    let result = transposed(e, &written, &inverse)?;
    e.cast(&result, compute, &dtype)
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

/// One `Split` with the piece sizes: `split_with_sizes`' own, constant or
/// symbolic (JetMoE's experts take `tolist()` counts of their tokens: sizes
/// known only at run time), the others computed from the axis' constant size.
fn split(e: &Emit, pieces: Pieces) -> Result<Vec<String>> {
    let x = e.tensor("self")?;
    let meta = e.input_meta("self")?;
    let rank = meta.shape.len() as i64;
    let dim = normalize(e.int("dim", 0)?, rank);
    let target = e.target()?;
    let declared = e.graph.output_values(e.node)?.len();
    if pieces == Pieces::Sized {
        let count = match e.arg("split_sizes")? {
            Some(Argument::SymInts(v)) => v.len(),
            Some(Argument::Ints(v)) => v.len(),
            Some(Argument::Int(_)) => 1,
            other => return Err(e.fail(format!("`split_sizes`: expected sizes, got {other:?}"))),
        };
        if count != declared {
            return Err(e.fail(format!("{target}: {count} pieces, the node declares {declared}")));
        }
        if count == 0 {
            return Ok(vec![]);
        }
        let split = e.shape("split_sizes")?;
        return e.op_n("Split", &[&x, &split], count as u32, &[attr("axis", Attribute::Int(dim))]);
    }
    let Some(Dim::Fixed(total)) = meta.shape.get(dim as usize).cloned() else {
        return Err(e.fail(format!("{target} of a symbolic axis (the patch-split/chunk plugins rewrite those into narrows)")));
    };
    let sizes: Vec<i64> = match pieces {
        Pieces::Sized => e.ints("split_sizes")?,
        // torch cuts an empty axis into as many empty pieces as it declares
        Pieces::OfSize | Pieces::Chunks if total == 0 => vec![0; declared],
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
    if sizes.is_empty() && declared == 0 {
        return Ok(vec![]);
    }
    let split = e.const_ints(&sizes)?;
    let mut outputs =
        e.op_n("Split", &[&x, &split], sizes.len() as u32, &[attr("axis", Attribute::Int(dim))])?;
    if pieces == Pieces::Unbound {
        let axes = e.const_ints(&[dim])?;
        outputs = outputs.iter().map(|o| e.op("Squeeze", &[o, &axes])).collect::<Result<_, _>>()?;
    }
    if declared != outputs.len() {
        return Err(
            e.fail(format!("{target}: {} pieces, the node declares {declared}", outputs.len()))
        );
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
            let tiles =
                e.op_with("Concat", &[&one, &repeats], &[attr("axis", Attribute::Int(0))])?;
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
            let head = e.op_with(
                "Shape",
                &[&x],
                &[attr("start", Attribute::Int(0)), attr("end", Attribute::Int(dim))],
            )?;
            let tail = e.op_with("Shape", &[&x], &[attr("start", Attribute::Int(dim + 1))])?;
            let shape = e.op_with(
                "Concat",
                &[&head, &minus_one, &tail],
                &[attr("axis", Attribute::Int(0))],
            )?;
            e.op("Reshape", &[&tiled, &shape])
        }
    }
}

fn flatten(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let rank = e.rank("self")?.max(1);
    let (start, end) =
        (normalize(e.int("start_dim", 0)?, rank), normalize(e.int("end_dim", -1)?, rank));
    let shape = match fixed_shape(&e.output_meta()?) {
        Some(shape) => e.const_ints(&shape)?,
        None => {
            // shape[:start] + [-1] + shape[end+1:]
            let full = e.op("Shape", &[&x])?;
            let head = e.op("Slice", &[&full, &e.const_ints(&[0])?, &e.const_ints(&[start])?])?;
            let tail =
                e.op("Slice", &[&full, &e.const_ints(&[end + 1])?, &e.const_ints(&[rank])?])?;
            let merged = e.const_ints(&[-1])?;
            e.op_with("Concat", &[&head, &merged, &tail], &[attr("axis", Attribute::Int(0))])?
        }
    };
    e.op("Reshape", &[&x, &shape])
}

/// `gather`: `GatherElements`. 0-d operands are gathered as one element.
/// torch and ONNX allow an index smaller than `self` on the other axes;
/// OpenVINO's `GatherElements` wants them equal (it refuses the model, and
/// its transformations fold away a `Slice` of `self` in front of it), so the
/// index is padded with zeros to `self`'s extent there and the result cut
/// back to the index's.
fn gather(e: &Emit) -> Result<String> {
    let mut x = e.tensor("self")?;
    let mut index = int_index(e, "index")?;
    let rank = e.rank("self")?;
    let axis = normalize(e.int("dim", 0)?, rank.max(1));
    if rank == 0 {
        let one = e.const_ints(&[1])?;
        x = e.op("Reshape", &[&x, &one])?;
        if e.rank("index")? == 0 {
            index = e.op("Reshape", &[&index, &one])?;
            let picked =
                e.op_with("GatherElements", &[&x, &index], &[attr("axis", Attribute::Int(0))])?;
            return e.op("Reshape", &[&picked, &e.const_ints(&[])?]);
        }
    }
    let (data, extent) = (e.input_meta("self")?.shape, e.input_meta("index")?.shape);
    let narrower: Vec<i64> = (0..data.len().min(extent.len()))
        .filter(|&d| d as i64 != axis && data[d] != extent[d])
        .map(|d| d as i64)
        .collect();
    if narrower.is_empty() || data.len() != extent.len() {
        return e.op_with("GatherElements", &[&x, &index], &[attr("axis", Attribute::Int(axis))]);
    }
    let fixed = |shape: &[Dim]| -> Option<Vec<i64>> {
        shape
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => Some(*n),
                Dim::Symbolic(_) => None,
            })
            .collect()
    };
    let in_narrower = |d: usize| narrower.contains(&(d as i64));
    let (pads, ends) = match (fixed(&data), fixed(&extent)) {
        (Some(data), Some(extent)) => {
            let after: Vec<i64> = (0..data.len())
                .map(|d| if in_narrower(d) { data[d] - extent[d] } else { 0 })
                .collect();
            let pads: Vec<i64> = vec![0; data.len()].into_iter().chain(after).collect();
            let ends: Vec<i64> = narrower.iter().map(|&d| extent[d as usize]).collect();
            (e.const_ints(&pads)?, e.const_ints(&ends)?)
        }
        _ => {
            let index_shape = e.op("Shape", &[&index])?;
            let missing = e.op("Sub", &[&e.op("Shape", &[&x])?, &index_shape])?;
            let mask: Vec<i64> = (0..data.len()).map(|d| in_narrower(d) as i64).collect();
            let after = e.op("Mul", &[&missing, &e.const_ints(&mask)?])?;
            let before = e.const_ints(&vec![0; data.len()])?;
            let pads =
                e.op_with("Concat", &[&before, &after], &[attr("axis", Attribute::Int(0))])?;
            let ends = e.op_with(
                "Gather",
                &[&index_shape, &e.const_ints(&narrower)?],
                &[attr("axis", Attribute::Int(0))],
            )?;
            (pads, ends)
        }
    };
    let padded = e.op("Pad", &[&index, &pads])?;
    let gathered =
        e.op_with("GatherElements", &[&x, &padded], &[attr("axis", Attribute::Int(axis))])?;
    let starts = e.const_ints(&vec![0; narrower.len()])?;
    e.op("Slice", &[&gathered, &starts, &ends, &e.const_ints(&narrower)?])
}

/// Tensor input `name` as ONNX index values: int32 and int64 as they are,
/// any other integer type cast to int64.
fn int_index(e: &Emit, name: &str) -> Result<String> {
    let dtype = e.input_meta(name)?.dtype;
    let index = e.tensor(name)?;
    if dtype == "int32" || dtype == "int64" {
        Ok(index)
    } else {
        e.cast(&index, &dtype, "int64")
    }
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
    let dims: Vec<i64> = dims
        .into_iter()
        .map(|d| normalize(d, rank))
        .filter(|&d| matches!(meta.shape.get(d as usize), Some(Dim::Fixed(1))))
        .collect();
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
    if rank < 2 {
        // a 0-d or 1-D tensor's transpose (dims 0/-1) is itself
        return e.op("Identity", &[&x]);
    }
    let (a, b) = (normalize(e.int("dim0", 0)?, rank), normalize(e.int("dim1", 1)?, rank));
    let mut perm: Vec<i64> = (0..rank).collect();
    perm.swap(a as usize, b as usize);
    e.op_with("Transpose", &[&x], &[attr("perm", Attribute::Ints(perm))])
}

fn permute(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let rank = e.rank("self")?;
    if rank == 0 {
        return e.op("Identity", &[&x]);
    }
    let perm: Vec<i64> = e.ints("dims")?.into_iter().map(|d| normalize(d, rank)).collect();
    e.op_with("Transpose", &[&x], &[attr("perm", Attribute::Ints(perm))])
}

/// Every axis reversed (`numpy_T`), or only the last two (`mT`: a batch of matrices).
fn reversed_axes(e: &Emit, last_two: bool) -> Result<String> {
    let x = e.tensor("self")?;
    let rank = e.rank("self")?;
    let perm: Vec<i64> = if last_two {
        if rank < 2 {
            return Err(e.fail(format!(
                "a matrix transpose of a {rank}-d tensor (torch wants at least 2 dims)"
            )));
        }
        (0..rank - 2).chain([rank - 1, rank - 2]).collect()
    } else {
        (0..rank).rev().collect()
    };
    transposed(e, &x, &perm)
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

/// `narrow(self, dim, start, length)`: `Slice(start, start + length)`, a
/// negative `start` counted from the end first.
fn narrow(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let dim = normalize(e.int("dim", 0)?, e.rank("self")?);
    let start = match e.arg("start")? {
        Some(Argument::SymInt(SymInt::Value(v))) => e.builder.value_name(v)?,
        _ => int_0d(e, e.int("start", 0)?)?,
    };
    let start = match e.arg("start")? {
        Some(Argument::Int(s)) | Some(Argument::SymInt(SymInt::Constant(s))) if s >= 0 => start,
        _ => {
            let wrapped = e.op("Add", &[&start, &dim_0d(e, &x, dim)?])?;
            let negative = e.op("Less", &[&start, &int_0d(e, 0)?])?;
            e.op("Where", &[&negative, &wrapped, &start])?
        }
    };
    let length = match e.arg("length")? {
        Some(Argument::SymInt(SymInt::Value(v))) => e.builder.value_name(v)?,
        _ => int_0d(e, e.int("length", 0)?)?,
    };
    let first = e.const_ints(&[0])?;
    let starts = e.op("Unsqueeze", &[&start, &first])?;
    let ends = e.op("Unsqueeze", &[&e.op("Add", &[&start, &length])?, &first])?;
    e.op("Slice", &[&x, &starts, &ends, &e.const_ints(&[dim])?])
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
    let Some(Argument::Tensors(values)) = e.arg("tensors")? else {
        return Err(e.fail("cat without tensors"));
    };
    let dtype = e.output_meta()?.dtype;
    // torch skips 1-D empty tensors in cat (an empty cache's `torch.tensor([])`); ONNX cannot.
    // Inputs of other dtypes are promoted, as torch's cat does.
    let mut names = Vec::new();
    for (i, &v) in values.iter().enumerate() {
        let meta = e.meta_of(v)?;
        let last = i + 1 == values.len() && names.is_empty();
        if meta.shape != [Dim::Fixed(0)] || last {
            names.push(e.cast(&e.builder.value_name(v)?, &meta.dtype, &dtype)?);
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
    let value = scalar_operand(e, value, &dtype)?;
    let shape = e.op("Shape", &[&e.tensor("self")?])?;
    e.op("Expand", &[&value, &shape])
}

/// `scatter` (`src` or a scalar `value`) / `scatter_add`: `ScatterElements`
/// with ONNX's `reduction`, on the part of `src` the index covers (torch
/// allows a larger `src`; ONNX wants them alike). 0-d operands are one
/// element; ORT has no float16 `add` kernel, computed in float32.
fn scatter(e: &Emit, reduction: &str) -> Result<String> {
    let dtype = e.output_meta()?.dtype;
    let compute = if reduction != "none" && matches!(dtype.as_str(), "float16" | "bfloat16") {
        "float32"
    } else {
        dtype.as_str()
    };
    let mut x = e.cast(&e.tensor("self")?, &dtype, compute)?;
    let mut index = int_index(e, "index")?;
    let rank = e.rank("self")?;
    let axis = normalize(e.int("dim", 0)?, rank.max(1));
    let mut updates = match e.arg("src")? {
        Some(Argument::Tensor(_)) => {
            let src = e.operand("src", compute)?;
            if rank > 0 && e.input_meta("src")?.shape != e.input_meta("index")?.shape {
                let starts = e.const_ints(&vec![0; rank as usize])?;
                e.op("Slice", &[&src, &starts, &e.op("Shape", &[&index])?])?
            } else {
                src
            }
        }
        _ => {
            // a scalar `value`, one per index
            let value = e.operand("value", compute)?;
            e.op("Expand", &[&value, &e.op("Shape", &[&index])?])?
        }
    };
    if rank == 0 {
        let one = e.const_ints(&[1])?;
        x = e.op("Reshape", &[&x, &one])?;
        index = e.op("Reshape", &[&index, &one])?;
        updates = e.op("Reshape", &[&updates, &one])?;
    }
    let attributes =
        [attr("axis", Attribute::Int(axis)), attr("reduction", Attribute::Str(reduction.into()))];
    let mut result = e.op_with("ScatterElements", &[&x, &index, &updates], &attributes)?;
    if rank == 0 {
        result = e.op("Reshape", &[&result, &e.const_ints(&[])?])?;
    }
    e.cast(&result, compute, &dtype)
}

fn embedding(e: &Emit) -> Result<String> {
    let weight = e.tensor("weight")?;
    let indices = e.tensor("indices")?;
    e.op_with("Gather", &[&weight, &indices], &[attr("axis", Attribute::Int(0))])
}

/// `arange`: `start + i * step`, in float64 (torch sizes and steps floats
/// in double) or int64 (an integer result takes truncated bounds, as torch),
/// cast to the output's dtype (ORT's `Range` has no float16 or int8 kernel).
/// The length is the output's when known: ONNX's own count from constants
/// that arrive as float32 can be one off (`arange(0.1, 1.1)`).
fn arange(e: &Emit) -> Result<String> {
    let meta = e.output_meta()?;
    let compute = if is_floating(&meta.dtype) { "float64" } else { "int64" };
    let start = if e.arg("start")?.is_some() {
        e.operand("start", compute)?
    } else {
        e.scalar(0.0, compute)?
    };
    let step = if e.arg("step")?.is_some() {
        e.operand("step", compute)?
    } else {
        e.scalar(1.0, compute)?
    };
    let values = match fixed_shape(&meta).as_deref() {
        Some(&[n]) => {
            let i = e.op("Range", &[&int_0d(e, 0)?, &int_0d(e, n)?, &int_0d(e, 1)?])?;
            let i = e.cast(&i, "int64", compute)?;
            e.op("Add", &[&start, &e.op("Mul", &[&i, &step])?])?
        }
        _ => e.op("Range", &[&start, &e.operand("end", compute)?, &step])?,
    };
    e.cast(&values, compute, &meta.dtype)
}

/// `zeros`, `ones`, `full`, `new_*`, `empty`: a tensor of the `size` given.
fn factory(e: &Emit, fill: Fill) -> Result<String> {
    let shape = expand_shape(e, "size", None)?;
    filled(e, fill, &shape)
}

/// `*_like`: a tensor of `self`'s shape.
fn factory_like(e: &Emit, fill: Fill) -> Result<String> {
    let x = e.tensor("self")?;
    let shape = e.op("Shape", &[&x])?;
    filled(e, fill, &shape)
}

fn sym_size(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let dim = normalize(e.int("dim", 0)?, e.rank("self")?);
    let one = e.op_with(
        "Shape",
        &[&x],
        &[attr("start", Attribute::Int(dim)), attr("end", Attribute::Int(dim + 1))],
    )?;
    let axes = e.const_ints(&[0])?;
    e.op("Squeeze", &[&one, &axes])
}

/// A 0-d int64 constant (exact, where `Emit::scalar` goes through f64).
fn int_0d(e: &Emit, value: i64) -> Result<String> {
    e.op_with("Constant", &[], &[attr("value_int", Attribute::Int(value))])
}

/// A size as a 0-d int64: a constant, or the symbolic size's own value.
fn size_0d(e: &Emit, size: &SymInt) -> Result<String> {
    match size {
        SymInt::Constant(i) => int_0d(e, *i),
        SymInt::Value(v) => e.builder.value_name(*v),
    }
}

/// `Shape(x)[axis]` as a 0-d int64.
fn dim_0d(e: &Emit, x: &str, axis: i64) -> Result<String> {
    let shape = e.op("Shape", &[x])?;
    e.op_with("Gather", &[&shape, &int_0d(e, axis)?], &[attr("axis", Attribute::Int(0))])
}

/// `Shape(x)[start..end]` (to the last axis when `end` is None).
fn dims_1d(e: &Emit, x: &str, start: i64, end: Option<i64>) -> Result<String> {
    let mut attributes = vec![attr("start", Attribute::Int(start))];
    if let Some(end) = end {
        attributes.push(attr("end", Attribute::Int(end)));
    }
    e.op_with("Shape", &[x], &attributes)
}

fn concat(e: &Emit, parts: &[String], axis: i64) -> Result<String> {
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    e.op_with("Concat", &refs, &[attr("axis", Attribute::Int(axis))])
}

fn transposed(e: &Emit, x: &str, perm: &[i64]) -> Result<String> {
    if perm.iter().copied().eq(0..perm.len() as i64) {
        return Ok(x.to_string());
    }
    e.op_with("Transpose", &[x], &[attr("perm", Attribute::Ints(perm.to_vec()))])
}

/// A size list (`SymInt[]`), however the node spells it.
fn sym_ints(e: &Emit, name: &str) -> Result<Vec<SymInt>> {
    match e.arg(name)? {
        Some(Argument::SymInts(v)) => Ok(v),
        Some(Argument::Ints(v)) => Ok(v.into_iter().map(SymInt::Constant).collect()),
        Some(Argument::Int(i)) => Ok(vec![SymInt::Constant(i)]),
        other => Err(e.fail(format!("`{name}`: expected sizes, got {other:?}"))),
    }
}

/// `as_strided`: element `storage_offset + sum(i_k * stride_k)` of `self`'s
/// storage at each position `i`, gathered from `self` flattened in memory
/// order, as the reference's `_aten_as_strided_onnx` (one broadcast `Add` of
/// a `Range * stride` per axis, so symbolic sizes work too).
fn as_strided(e: &Emit) -> Result<String> {
    let meta = e.input_meta("self")?;
    let index = storage_positions(e, &meta, "as_strided")?;
    let (storage, _) = storage_order(e, &meta)?;
    e.op_with("Gather", &[&storage, &index], &[attr("axis", Attribute::Int(0))])
}

/// `as_strided_scatter`: `self` with the storage elements `as_strided` reads
/// replaced by `src`'s (torch's functionalization writes `fill_diagonal_` so):
/// scattered into `self` flattened in memory order, then laid out in `self`'s
/// shape again.
fn as_strided_scatter(e: &Emit) -> Result<String> {
    let meta = e.input_meta("self")?;
    let index = storage_positions(e, &meta, "as_strided_scatter")?;
    let (storage, order) = storage_order(e, &meta)?;
    let flat = e.const_ints(&[-1])?;
    let index = e.op("Reshape", &[&index, &flat])?;
    let src = e.op("Reshape", &[&e.tensor("src")?, &flat])?;
    let scattered = e.op_with(
        "ScatterElements",
        &[&storage, &index, &src],
        &[attr("axis", Attribute::Int(0))],
    )?;
    // Back from memory order: the shape of `self` in that axis order, then `self`'s own.
    let ordered_shape = e.op("Shape", &[&transposed(e, &e.tensor("self")?, &order)?])?;
    let ordered = e.op("Reshape", &[&scattered, &ordered_shape])?;
    let mut inverse = vec![0; order.len()];
    for (at, &axis) in order.iter().enumerate() {
        inverse[axis as usize] = at as i64;
    }
    transposed(e, &ordered, &inverse)
}

/// The storage position `storage_offset + sum(i_k * stride_k)` of each
/// element of `self`'s strided view (`op` names it in errors): an int64
/// tensor of the view's size.
fn storage_positions(e: &Emit, meta: &TensorMeta, op: &str) -> Result<String> {
    let sizes = sym_ints(e, "size")?;
    let strides = sym_ints(e, "stride")?;
    if sizes.len() != strides.len() {
        return Err(e.fail(format!("{op}: {} sizes, {} strides", sizes.len(), strides.len())));
    }
    let offset = match e.arg("storage_offset")? {
        None | Some(Argument::None) => SymInt::Constant(0),
        Some(Argument::SymInt(s)) => s,
        Some(Argument::Int(i)) => SymInt::Constant(i),
        other => return Err(e.fail(format!("`storage_offset`: {other:?}"))),
    };
    let constant = |s: &SymInt| match s {
        SymInt::Constant(c) => Some(*c),
        SymInt::Value(_) => None,
    };
    let all = |v: &[SymInt]| v.iter().map(constant).collect::<Option<Vec<i64>>>();
    if let (Some(shape), Some(sizes), Some(strides), Some(offset)) =
        (fixed_shape(meta), all(&sizes), all(&strides), constant(&offset))
    {
        // Only `self`'s own elements are in the graph; a view reaching past them
        // (into a larger base's storage) has nothing to read.
        let numel: i64 = shape.iter().product();
        let last = offset + sizes.iter().zip(&strides).map(|(n, s)| (n - 1) * s).sum::<i64>();
        if !sizes.contains(&0) && (offset < 0 || last >= numel) {
            return Err(e.fail(format!(
                "{op} reaches storage element {last} of an input with {numel} elements: its base's storage is not in the graph"
            )));
        }
    }
    let rank = sizes.len();
    let mut index = size_0d(e, &offset)?;
    for (axis, (n, s)) in sizes.iter().zip(&strides).enumerate() {
        let positions = match (n, s) {
            (SymInt::Constant(n), SymInt::Constant(s)) => {
                let values: Vec<i64> = (0..*n).map(|i| i * s).collect();
                let mut shape = vec![1; rank];
                shape[axis] = *n;
                e.op("Reshape", &[&e.const_ints(&values)?, &e.const_ints(&shape)?])?
            }
            _ => {
                let range = e.op("Range", &[&int_0d(e, 0)?, &size_0d(e, n)?, &int_0d(e, 1)?])?;
                let scaled = e.op("Mul", &[&range, &size_0d(e, s)?])?;
                let others: Vec<i64> = (0..rank as i64).filter(|&a| a != axis as i64).collect();
                if others.is_empty() {
                    scaled
                } else {
                    e.op("Unsqueeze", &[&scaled, &e.const_ints(&others)?])?
                }
            }
        };
        index = e.op("Add", &[&index, &positions])?;
    }
    Ok(index)
}

/// `self` flattened in the order its elements sit in memory: transposed
/// first when its strides are those of a dense layout in another axis order
/// (sizes and strides compared as products of factors, so symbolic ones too),
/// and that axis order (outermost first).
fn storage_order(e: &Emit, meta: &TensorMeta) -> Result<(String, Vec<i64>)> {
    let x = e.tensor("self")?;
    let flat = e.const_ints(&[-1])?;
    let rank = meta.shape.len();
    if meta.strides.len() != rank || meta.shape.iter().any(|d| *d == Dim::Fixed(0)) {
        return Ok((e.op("Reshape", &[&x, &flat])?, (0..rank as i64).collect()));
    }
    let unknown = || {
        e.fail("as_strided of a tensor whose strides are not a dense layout: its storage holds more than its elements")
    };
    let sizes: Vec<Product> =
        meta.shape.iter().map(product).collect::<Option<_>>().ok_or_else(unknown)?;
    let strides: Vec<Product> =
        meta.strides.iter().map(product).collect::<Option<_>>().ok_or_else(unknown)?;
    // innermost first: the axis whose stride is the product of the sizes inside it
    let mut inner: Vec<i64> = Vec::new();
    let mut within = Product::one();
    let mut left: Vec<usize> = (0..rank).filter(|&a| meta.shape[a] != Dim::Fixed(1)).collect();
    while !left.is_empty() {
        let at = left.iter().position(|&a| strides[a] == within).ok_or_else(unknown)?;
        let axis = left.remove(at);
        within = within.times(&sizes[axis]);
        inner.push(axis as i64);
    }
    // size-1 axes hold index 0 only: anywhere will do, outermost here
    let mut perm: Vec<i64> =
        (0..rank as i64).filter(|&a| meta.shape[a as usize] == Dim::Fixed(1)).collect();
    perm.extend(inner.into_iter().rev());
    let ordered = transposed(e, &x, &perm)?;
    Ok((e.op("Reshape", &[&ordered, &flat])?, perm))
}

/// A size or stride as a constant times symbolic factors (sorted), as torch
/// prints them (`2*s0*s1`, `s0**2`, `s1*(s0 + 1)`); a sum is one factor.
#[derive(PartialEq, Clone)]
struct Product {
    constant: i64,
    factors: Vec<String>,
}

impl Product {
    fn one() -> Self {
        Product { constant: 1, factors: vec![] }
    }

    fn times(&self, other: &Product) -> Product {
        let mut factors = [self.factors.clone(), other.factors.clone()].concat();
        factors.sort();
        Product { constant: self.constant * other.constant, factors }
    }
}

fn product(dim: &Dim) -> Option<Product> {
    let text = match dim {
        Dim::Fixed(n) => return Some(Product { constant: *n, factors: vec![] }),
        Dim::Symbolic(s) => s.replace(' ', ""),
    };
    let mut result = Product::one();
    let (mut depth, mut start) = (0, 0);
    let bytes = text.as_bytes();
    let mut pieces = Vec::new();
    for i in 0..=bytes.len() {
        match bytes.get(i) {
            Some(b'(') => depth += 1,
            Some(b')') => depth -= 1,
            // `**` is a power, not two products
            Some(b'*')
                if depth == 0
                    && bytes.get(i + 1) != Some(&b'*')
                    && (i == 0 || bytes[i - 1] != b'*') =>
            {
                pieces.push(&text[start..i]);
                start = i + 1;
            }
            None => pieces.push(&text[start..i]),
            _ => {}
        }
    }
    for piece in pieces {
        let (base, power) = match piece.rsplit_once("**") {
            Some((base, power)) if !base.contains('(') || base.ends_with(')') => {
                (base, power.parse::<usize>().ok()?)
            }
            _ => (piece, 1),
        };
        let base = base.strip_prefix('(').and_then(|b| b.strip_suffix(')')).unwrap_or(base);
        if let Ok(n) = base.parse::<i64>() {
            result.constant *= n.pow(power as u32);
        } else {
            result.factors.extend(std::iter::repeat_n(base.to_string(), power));
        }
    }
    result.factors.sort();
    Some(result)
}

/// `diagonal`: `dim1` and `dim2` moved last and merged into one axis, the
/// diagonal's positions there gathered. (The reference multiplies by an
/// `EyeLike` mask and sums, which turns an inf off the diagonal into NaN.)
fn diagonal(e: &Emit) -> Result<String> {
    let meta = e.input_meta("self")?;
    let rank = meta.shape.len() as i64;
    let offset = e.int("offset", 0)?;
    let (d1, d2) = (normalize(e.int("dim1", 0)?, rank), normalize(e.int("dim2", 1)?, rank));
    let x = e.tensor("self")?;
    let mut perm: Vec<i64> = (0..rank).filter(|&a| a != d1 && a != d2).collect();
    perm.extend([d1, d2]);
    let moved = transposed(e, &x, &perm)?;
    let lead = rank - 2;
    let (positions, merged) = match (&meta.shape[d1 as usize], &meta.shape[d2 as usize]) {
        (Dim::Fixed(n1), Dim::Fixed(n2)) => {
            let (n1, n2) = (*n1, *n2);
            let len = if offset >= 0 { n1.min(n2 - offset) } else { (n1 + offset).min(n2) }.max(0);
            let start = if offset >= 0 { offset } else { -offset * n2 };
            let positions: Vec<i64> = (0..len).map(|i| start + i * (n2 + 1)).collect();
            (e.const_ints(&positions)?, e.const_ints(&[n1 * n2])?)
        }
        _ => {
            let (n1, n2) = (dim_0d(e, &x, d1)?, dim_0d(e, &x, d2)?);
            let shift = int_0d(e, offset.abs())?;
            let len = if offset >= 0 {
                e.op("Min", &[&n1, &e.op("Sub", &[&n2, &shift])?])?
            } else {
                e.op("Min", &[&e.op("Sub", &[&n1, &shift])?, &n2])?
            };
            let len = e.op("Max", &[&len, &int_0d(e, 0)?])?;
            let start = if offset >= 0 { shift } else { e.op("Mul", &[&n2, &shift])? };
            let step = e.op("Add", &[&n2, &int_0d(e, 1)?])?;
            let range = e.op("Range", &[&int_0d(e, 0)?, &len, &int_0d(e, 1)?])?;
            let positions = e.op("Add", &[&e.op("Mul", &[&range, &step])?, &start])?;
            let merged = e.op("Unsqueeze", &[&e.op("Mul", &[&n1, &n2])?, &e.const_ints(&[0])?])?;
            (positions, merged)
        }
    };
    let shape = if lead == 0 {
        merged
    } else {
        concat(e, &[dims_1d(e, &moved, 0, Some(lead))?, merged], 0)?
    };
    let flat = e.op("Reshape", &[&moved, &shape])?;
    e.op_with("Gather", &[&flat, &positions], &[attr("axis", Attribute::Int(lead))])
}

/// `flip`: a `Slice` from the end backwards over each axis, as the reference.
fn flip(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let rank = e.rank("self")?;
    let mut dims: Vec<i64> =
        e.ints("dims")?.into_iter().map(|d| normalize(d, rank.max(1))).collect();
    dims.sort();
    dims.dedup();
    if dims.is_empty() || rank == 0 {
        return e.op("Identity", &[&x]);
    }
    let k = dims.len();
    let back = e.const_ints(&vec![-1; k])?;
    let ends = e.const_ints(&vec![i64::MIN; k])?;
    e.op("Slice", &[&x, &back, &ends, &e.const_ints(&dims)?, &back])
}

/// `repeat`: `self` given leading 1-axes up to `len(repeats)`, then `Tile`.
fn repeat(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let count = sym_ints(e, "repeats")?.len();
    if count == 0 {
        return e.op("Identity", &[&x]);
    }
    let expanded = e.op("Expand", &[&x, &e.const_ints(&vec![1; count])?])?;
    e.op("Tile", &[&expanded, &e.shape("repeats")?])
}

/// `index_select`: `Gather` with the index flattened (a 0-d index keeps its
/// axis, as torch's); a 0-d `self` is gathered as one element.
fn index_select(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let rank = e.rank("self")?;
    let dim = normalize(e.int("dim", 0)?, rank.max(1));
    let index = e.op("Reshape", &[&e.tensor("index")?, &e.const_ints(&[-1])?])?;
    if rank == 0 {
        let one = e.op("Reshape", &[&x, &e.const_ints(&[1])?])?;
        let picked = e.op_with("Gather", &[&one, &index], &[attr("axis", Attribute::Int(0))])?;
        return e.op("Reshape", &[&picked, &e.const_ints(&[])?]);
    }
    e.op_with("Gather", &[&x, &index], &[attr("axis", Attribute::Int(dim))])
}

/// `unfold(self, dimension, size, step)`: the windows `size` long starting
/// every `step` along `dimension`, each a new last axis: a `Gather` of the
/// [windows, size] positions `start + offset` (the starts a `Range` to
/// `n - size + 1`, read at run time where `n` is symbolic), the window axis
/// then moved last. A 0-d tensor unfolds into `size` (0 or 1) copies of itself.
fn unfold(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let meta = e.input_meta("self")?;
    let size = e.int("size", 1)?;
    let step = e.int("step", 1)?;
    let rank = meta.shape.len() as i64;
    if rank == 0 {
        return e.op("Expand", &[&x, &e.const_ints(&[size])?]);
    }
    let dim = normalize(e.int("dimension", 0)?, rank);
    let end = match &meta.shape[dim as usize] {
        Dim::Fixed(n) => int_0d(e, n - size + 1)?,
        Dim::Symbolic(_) => {
            let n = e.op_with(
                "Shape",
                &[&x],
                &[attr("start", Attribute::Int(dim)), attr("end", Attribute::Int(dim + 1))],
            )?;
            let n = e.op("Squeeze", &[&n, &e.const_ints(&[0])?])?;
            e.op("Sub", &[&n, &int_0d(e, size - 1)?])?
        }
    };
    let starts = e.op("Range", &[&int_0d(e, 0)?, &end, &int_0d(e, step)?])?;
    let starts = e.op("Unsqueeze", &[&starts, &e.const_ints(&[1])?])?;
    let offsets: Vec<i64> = (0..size).collect();
    let positions = e.op("Add", &[&starts, &e.const_ints(&offsets)?])?;
    let windows = e.op_with("Gather", &[&x, &positions], &[attr("axis", Attribute::Int(dim))])?;
    if dim == rank - 1 {
        return Ok(windows);
    }
    // Gather left [.., windows, size, ..]: the size axis (dim + 1) goes last.
    let mut perm: Vec<i64> = (0..=rank).filter(|&a| a != dim + 1).collect();
    perm.push(dim + 1);
    e.op_with("Transpose", &[&windows], &[attr("perm", Attribute::Ints(perm))])
}

/// `nonzero`: ONNX's `NonZero` is [rank, n], torch's [n, rank]. ORT has no
/// `NonZero` for float64 or int8 (among others): those go through bool,
/// which keeps exactly the nonzero elements. A 0-d input is one element of
/// rank 0 ([n, 0]).
fn nonzero(e: &Emit) -> Result<String> {
    let meta = e.input_meta("self")?;
    let mut x = e.tensor("self")?;
    if !matches!(meta.dtype.as_str(), "bool" | "float32" | "int32" | "int64" | "uint8") {
        x = e.cast(&x, &meta.dtype, "bool")?;
    }
    if meta.shape.is_empty() {
        let one = e.op("Reshape", &[&x, &e.const_ints(&[1])?])?;
        let rows = e.op_with(
            "Transpose",
            &[&e.op("NonZero", &[&one])?],
            &[attr("perm", Attribute::Ints(vec![1, 0]))],
        )?;
        let none = e.const_ints(&[0])?;
        return e.op("Slice", &[&rows, &none, &none, &e.const_ints(&[1])?]);
    }
    let found = e.op("NonZero", &[&x])?;
    e.op_with("Transpose", &[&found], &[attr("perm", Attribute::Ints(vec![1, 0]))])
}

/// `tril` / `triu` → ONNX `Trilu` (opset 14) with the diagonal offset `k`,
/// one node where torch's decomposition writes an index grid and a select
/// (chunked scans mask every chunk with one). ONNX Runtime's CPU `Trilu`
/// has no 8/16-bit integer kernels: those run through int32 and back.
fn triangle(e: &Emit, upper: bool) -> Result<String> {
    let x = e.tensor("self")?;
    let dtype = e.input_meta("self")?.dtype;
    let via = match dtype.as_str() {
        "uint8" | "int8" | "int16" | "uint16" => "int32",
        other => other,
    }
    .to_string();
    let diagonal = e.int("diagonal", 0)?;
    let k = e.scalar(diagonal as f64, "int64")?;
    let input = e.cast(&x, &dtype, &via)?;
    let masked =
        e.op_with("Trilu", &[&input, &k], &[attr("upper", Attribute::Int(upper as i64))])?;
    e.cast(&masked, &via, &dtype)
}
