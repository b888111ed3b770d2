//! A `.pt2`'s weight entries written while the worker traces
//! ([`crate::prewrite`]).
//!
//! torch's archive starts with its weight entries: the worker's plan names
//! them in torch's order, and [`super::Pt2::write_continuing`] keeps them
//! only if the archive it writes starts with exactly those entries from
//! exactly those bytes, and otherwise writes the artifact from the start.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::archive::ArchiveWriter;
use super::cast::Cast;
use crate::prewrite::{Checkpoints, Place};
use crate::trace::protocol::PlannedWeight;

/// What the thread wrote: the archive's first entries, in its temp file.
pub struct Prewritten {
    pub(super) writer: ArchiveWriter,
    pub(super) entries: Vec<Written>,
}

/// One entry written: its name and the bytes it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Written {
    pub name: String,
    pub place: Place,
}

/// The entries of `plan` written in order into a temp file beside `path`,
/// up to the first whose bytes `checkpoints` does not give or until `stop`;
/// None if none was or a write failed.
pub fn write(path: &Path, plan: Vec<PlannedWeight>, mut checkpoints: Checkpoints, stop: &AtomicBool) -> Option<Prewritten> {
    let mut writer = match ArchiveWriter::create(path) {
        Ok(writer) => writer,
        Err(e) => {
            tracing::info!("weights are written at the emit step: {}: {e}", path.display());
            return None;
        }
    };
    let mut entries = Vec::new();
    for planned in plan {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        let Some(got) = checkpoints.get(&planned) else { break };
        if let Err(e) = add(&mut writer, &planned.name, got.bytes, got.cast, &got.from.map, CHUNK) {
            tracing::info!("weights are written at the emit step: {}: {e}", path.display());
            return None;
        }
        let place = Place { file: got.from.path.clone(), offset: got.offset, length: planned.length, cast: got.cast, transposed: None };
        entries.push(Written { name: planned.name, place });
    }
    // Idle until the emit step: its buffers are not held meanwhile.
    writer.park().ok()?;
    (!entries.is_empty()).then_some(Prewritten { writer, entries })
}

/// Bytes of a checkpoint range read at most this many at a time, each
/// chunk's pages released from the map once used: while the worker traces,
/// no entry is resident whole (a 3B Llama's bfloat16 embedding is 788 MB).
/// Whole elements of every dtype hfx converts.
const CHUNK: usize = 8 << 20;

/// Adds `bytes` (converted by `cast`) as entry `name`, `chunk` bytes at a
/// time: the bytes the emit step's own `add` / `add_streamed` of a side
/// entry write.
fn add(writer: &mut ArchiveWriter, name: &str, bytes: &[u8], cast: Option<Cast>, map: &memmap2::Mmap, chunk: usize) -> std::io::Result<()> {
    let mut crc = crc32fast::Hasher::new();
    for piece in bytes.chunks(chunk) {
        match cast {
            None => crc.update(piece),
            Some(cast) => {
                let converted: Result<(), std::convert::Infallible> = cast.each_chunk(piece, |out| {
                    crc.update(out);
                    Ok(())
                });
                let Ok(()) = converted;
            }
        }
        super::release_from(map, piece);
    }
    let len = cast.map_or(bytes.len(), |c| c.output_len(bytes.len()));
    writer.add_streamed(name, len as u64, crc.finalize(), |w| {
        for piece in bytes.chunks(chunk) {
            match cast {
                None => w.write_all(piece)?,
                Some(cast) => cast.write(piece, &mut &mut *w)?,
            }
            super::release_from(map, piece);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hfx_dtype::DType;

    /// Written a chunk at a time, an entry (plain or converted) has the bytes
    /// and CRC-32 the emit step's whole-entry writes give it.
    #[test]
    fn an_entry_written_in_chunks_is_the_entry_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("source");
        std::fs::write(&source, (0..40_000u32).flat_map(|i| (i as f32 * 0.37).to_le_bytes()).collect::<Vec<u8>>()).unwrap();
        // SAFETY: a file of this test's own.
        let map = unsafe { memmap2::Mmap::map(&std::fs::File::open(&source).unwrap()) }.unwrap();
        let bytes = &map[64..64 + 4 * 30_001];
        for cast in [None, Cast::new(DType::Float32, DType::Bfloat16), Cast::new(DType::Float32, DType::Float16)] {
            let (chunked, whole) = (dir.path().join("chunked.pt2"), dir.path().join("whole.pt2"));
            let mut w = ArchiveWriter::create(&chunked).unwrap();
            add(&mut w, "m/data/weights/weight_0", bytes, cast, &map, 4096 + 4).unwrap();
            w.finish().unwrap();
            let mut w = ArchiveWriter::create(&whole).unwrap();
            match cast {
                None => w.add("m/data/weights/weight_0", bytes).unwrap(),
                Some(c) => w.add_streamed("m/data/weights/weight_0", c.output_len(bytes.len()) as u64, c.crc32(bytes), |mut out| c.write(bytes, &mut out)).unwrap(),
            }
            w.finish().unwrap();
            assert!(std::fs::read(&chunked).unwrap() == std::fs::read(&whole).unwrap(), "{cast:?}");
        }
    }
}
