//! Where the bytes of the weights an artifact's writer writes are stored:
//! read from their file rather than through the map where they are written
//! as stored, their pages released once written, and what they were
//! written from.

use std::fs::File;

use super::bytes::Bytes;
use super::cast::Cast;
use super::place::Place;
use crate::atomic::DirectWriter;

/// Where the weights' bytes are stored: asked where a mapped weight lives
/// (it is then read from that file, [`DirectWriter::write_or_copy`]) and
/// told once it is written (its pages can leave resident memory); and what
/// a weight's bytes are written from (a file written while the worker
/// traced is kept where its weights are the same bytes).
pub trait WeightFiles {
    fn origin(&self, bytes: &[u8]) -> Option<(&File, u64)>;
    fn release(&self, bytes: &[u8]);
    fn place(
        &self,
        bytes: &[u8],
        cast: Option<Cast>,
        transposed: Option<(usize, usize)>,
    ) -> Option<Place>;
}

/// Weights in hfx's own memory (a self-test's model): no file, nothing to release.
pub struct InMemory;

impl WeightFiles for InMemory {
    fn origin(&self, _: &[u8]) -> Option<(&File, u64)> {
        None
    }
    fn release(&self, _: &[u8]) {}
    fn place(&self, _: &[u8], _: Option<Cast>, _: Option<(usize, usize)>) -> Option<Place> {
        None
    }
}

/// Writes `bytes` to `out`: a weight stored unchanged in a file is read from
/// that file, any other is written from memory; their pages are released
/// once written.
pub fn write_weight<F: std::borrow::Borrow<File>>(
    out: &mut DirectWriter<F>,
    bytes: &Bytes<'_>,
    files: &dyn WeightFiles,
) -> std::io::Result<()> {
    match bytes {
        Bytes::Mapped(mapped) => out.write_or_copy(mapped, files.origin(mapped)),
        other => other.write_releasing(out, &|read| files.release(read)),
    }?;
    if let Some(mapped) = bytes.mapped() {
        files.release(mapped);
    }
    Ok(())
}

/// What an artifact's weight's bytes are written from; None for bytes of
/// no file (folded values).
pub fn place_of(bytes: &Bytes, files: &dyn WeightFiles) -> Option<Place> {
    match *bytes {
        Bytes::Mapped(source) => files.place(source, None, None),
        Bytes::Converted { source, cast } => files.place(source, Some(cast), None),
        Bytes::Transposed { source, rows, cols, cast, .. } => {
            files.place(source, cast, Some((rows, cols)))
        }
        // Bytes no plan's weight is written as.
        Bytes::Owned(_) | Bytes::Int4 { .. } | Bytes::Int8 { .. } | Bytes::Concatenated { .. } => {
            None
        }
    }
}
