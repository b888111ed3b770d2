//! `adaptive_avg_pool2d` as ops the XNNPACK delegate takes, as the
//! reference's `_patch_adaptive_avg_pool2d` writes it: when the output's
//! height and width divide the input's, a plain `avg_pool2d` (kernel
//! `size / cells`); otherwise each output cell is the mean of its own window
//! (rows `i*H // oh` to `ceil((i+1)*H / oh)`, columns alike; windows overlap
//! where the sizes do not divide), sliced out with `narrow` and put back
//! together with `cat`. A symbolic height or width leaves the original: the
//! windows are not known while tracing.
//!
//! The reference's reason is that the portable runtime has no adaptive-pool
//! kernel, and it registers the patch for every ExecuTorch program.
//! executorch 1.4.1's portable runtime has one (`aten::_adaptive_avg_pool2d.out`),
//! which runs the pool in one kernel call where the rewrite takes about three
//! per output cell, so this serves the XNNPACK program only: its partitioner
//! does not take `_adaptive_avg_pool2d`, which then runs as a portable kernel
//! between delegates, and does take the rewrite (`avg_pool2d`, `slice`,
//! `mean`, `cat`) whole.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.nn.functional.adaptive_avg_pool2d"])]
fn patch_adaptive_avg_pool2d(call: PatchedCall) -> Result<Program> {
    let (Some(input), Some(output_size)) = (call.param(0, "input"), call.param(1, "output_size"))
    else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    let Some(tensor) = call.tensor(input) else { return Ok(ProgramBuilder::passthrough(&call)) };
    let (Some(height), Some(width)) = (tensor.fixed_dim(-2), tensor.fixed_dim(-1)) else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    let Some((rows, columns)) = output_cells(&call, output_size, height, width) else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    if rows <= 0 || columns <= 0 || height <= 0 || width <= 0 {
        // The original says what is wrong with such a size.
        return Ok(ProgramBuilder::passthrough(&call));
    }

    let mut p = ProgramBuilder::new(&call);
    if height % rows == 0 && width % columns == 0 {
        let kernel_height = p.int(height / rows);
        let kernel_width = p.int(width / columns);
        let kernel = p.pack(&[kernel_height, kernel_width]);
        // The stride (the kernel, its default) and that padding does not count
        // (there is none) change nothing, but XNNPACK takes an average pool
        // only when both are said.
        let padding_uncounted = p.boolean(false);
        let kwargs =
            [("kernel_size", kernel), ("stride", kernel), ("count_include_pad", padding_uncounted)];
        let out = p.call_kw("torch.nn.functional.avg_pool2d", &[input], &kwargs);
        return Ok(p.finish(out));
    }
    let (row_axis, column_axis) = (p.int(-2), p.int(-1));
    let spatial = p.pack(&[row_axis, column_axis]);
    let keepdim = p.boolean(true);
    let mut row_slots = Vec::new();
    for (top, bottom) in windows(height, rows) {
        let (start, length) = (p.int(top), p.int(bottom - top));
        let band = p.narrow(input, row_axis, start, length);
        let mut cells = Vec::new();
        for (left, right) in windows(width, columns) {
            let (start, length) = (p.int(left), p.int(right - left));
            let window = p.narrow(band, column_axis, start, length);
            cells.push(p.call_kw("torch.Tensor.mean", &[window, spatial], &[("keepdim", keepdim)]));
        }
        let cells = p.pack(&cells);
        row_slots.push(p.call("torch.cat", &[cells, column_axis]));
    }
    let row_slots = p.pack(&row_slots);
    let out = p.call("torch.cat", &[row_slots, row_axis]);
    Ok(p.finish(out))
}

/// The output's (rows, columns): `output_size` as an int (square) or a pair
/// whose `None` keeps the input's size; `None` for anything else (a symbolic size).
fn output_cells(
    call: &PatchedCall,
    output_size: Slot,
    height: i64,
    width: i64,
) -> Option<(i64, i64)> {
    if let Some(n) = call.int(output_size) {
        return Some((n, n));
    }
    let CallValue::Sequence(items) = call.value(output_size)? else { return None };
    let [rows, columns] = items[..] else { return None };
    let cells =
        |slot: Slot, own: i64| if call.is_none(Some(slot)) { Some(own) } else { call.int(slot) };
    Some((cells(rows, height)?, cells(columns, width)?))
}

/// The windows (start, end) of an axis of `size` pooled into `cells`: cell i
/// starts at `i*size / cells` rounded down and ends at `(i+1)*size / cells`
/// rounded up, as the adaptive kernel's.
fn windows(size: i64, cells: i64) -> impl Iterator<Item = (i64, i64)> {
    (0..cells).map(move |i| (i * size / cells, ((i + 1) * size + cells - 1) / cells))
}
