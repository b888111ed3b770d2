//! A 2-D weight transposed as it streams: a block of output rows at a time,
//! read in tiles of source rows that stay in cache.

use super::cast::Cast;

/// Called with each part of a map a writer is done with (its pages can go).
pub type Release<'a> = Option<&'a dyn Fn(&[u8])>;

/// Writes the transpose of `source` (`rows` x `cols` elements of `element`
/// bytes) through a buffer of [`TRANSPOSE_BLOCK`] output rows, each block
/// converted by `cast` if given; `release`, if given, is called with each
/// tile of source rows a block is done with.
#[allow(clippy::too_many_arguments)] // the transposition's shape, and what to do with what it read
pub fn write_transposed(
    out: &mut impl std::io::Write,
    source: &[u8],
    rows: usize,
    cols: usize,
    element: usize,
    cast: Option<Cast>,
    release: Release<'_>,
) -> std::io::Result<()> {
    let mut buffer = vec![0u8; TRANSPOSE_BLOCK.min(cols) * rows * element];
    for first in (0..cols).step_by(TRANSPOSE_BLOCK) {
        let block = TRANSPOSE_BLOCK.min(cols - first);
        let into = Columns { buffer: &mut buffer, stride: rows, offset: 0 };
        transpose_block_of(element, source, into, rows, cols, first, block, release);
        let block = &buffer[..block * rows * element];
        match cast {
            Some(cast) => cast.write(block, out)?,
            None => out.write_all(block)?,
        }
    }
    Ok(())
}

/// Writes the concatenation along their last axis of the transposes of
/// `sources` (each its rows, all `cols` columns of `element` bytes): each
/// output row holds the sources' columns side by side, a block of
/// [`TRANSPOSE_BLOCK`] output rows at a time, converted by `cast` if
/// given; `release`, if given, is called with each tile of source rows a
/// block is done with.
pub fn write_transposed_side_by_side(
    out: &mut impl std::io::Write,
    sources: &[(&[u8], usize)],
    cols: usize,
    element: usize,
    cast: Option<Cast>,
    release: Release<'_>,
) -> std::io::Result<()> {
    let width: usize = sources.iter().map(|&(_, rows)| rows).sum();
    let mut buffer = vec![0u8; TRANSPOSE_BLOCK.min(cols) * width * element];
    for first in (0..cols).step_by(TRANSPOSE_BLOCK) {
        let block = TRANSPOSE_BLOCK.min(cols - first);
        let mut offset = 0;
        for &(source, rows) in sources {
            let into = Columns { buffer: &mut buffer, stride: width, offset };
            transpose_block_of(element, source, into, rows, cols, first, block, release);
            offset += rows;
        }
        let block = &buffer[..block * width * element];
        match cast {
            Some(cast) => cast.write(block, out)?,
            None => out.write_all(block)?,
        }
    }
    Ok(())
}

/// Where a transposed block goes: output rows of `stride` elements, the
/// block's columns from element `offset` of each.
struct Columns<'b> {
    buffer: &'b mut [u8],
    stride: usize,
    offset: usize,
}

/// [`transpose_block`] for elements of `element` bytes.
#[allow(clippy::too_many_arguments)] // as transpose_block's
fn transpose_block_of(
    element: usize,
    source: &[u8],
    into: Columns<'_>,
    rows: usize,
    cols: usize,
    first: usize,
    block: usize,
    release: Release<'_>,
) {
    match element {
        4 => transpose_block::<4>(source, into, rows, cols, first, block, release),
        2 => transpose_block::<2>(source, into, rows, cols, first, block, release),
        8 => transpose_block::<8>(source, into, rows, cols, first, block, release),
        _ => transpose_block::<1>(source, into, rows, cols, first, block, release),
    }
}

/// Output rows `first..first + block` of the transpose of `source` (`rows` x
/// `cols` elements of `E` bytes) into `into`'s columns. Tiles of [`TRANSPOSE_TILE`]
/// source rows keep both sides in cache: each output row gets a contiguous
/// run per tile, and the tile's source rows stay in L1 across the block's
/// columns.
#[allow(clippy::too_many_arguments)] // the block's place in the transposition, and what to do with what it read
fn transpose_block<const E: usize>(
    source: &[u8],
    into: Columns<'_>,
    rows: usize,
    cols: usize,
    first: usize,
    block: usize,
    release: Release<'_>,
) {
    let Columns { buffer, stride, offset } = into;
    for tile in (0..rows).step_by(TRANSPOSE_TILE) {
        let end = (tile + TRANSPOSE_TILE).min(rows);
        for j in 0..block {
            let row = j * stride + offset;
            let out = &mut buffer[(row + tile) * E..(row + end) * E];
            for (k, i) in (tile..end).enumerate() {
                let at = (i * cols + first + j) * E;
                out[k * E..(k + 1) * E].copy_from_slice(&source[at..at + E]);
            }
        }
        if let Some(release) = release {
            release(&source[tile * cols * E..end * cols * E]);
        }
    }
}

/// Source rows per tile of a transposition.
pub const TRANSPOSE_TILE: usize = 16;

/// Output rows of a transposed weight produced per pass over its source.
pub const TRANSPOSE_BLOCK: usize = 64;
