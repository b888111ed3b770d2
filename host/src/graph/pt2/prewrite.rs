//! A `.pt2`'s weight entries written while the worker traces.
//!
//! Streamed from a model folder, a `.pt2`'s weights are the checkpoint's
//! bytes, and torch's archive starts with them. Before torch.export runs,
//! the worker says which entries its save will write first and where each
//! one's bytes are ([`PlannedWeight`], the worker's
//! `checkpoint.weights_plan`); a thread writes them into the artifact's temp
//! file meanwhile, on the core the trace leaves idle. The emit step
//! ([`super::Pt2::write_continuing`]) keeps them only if the archive it
//! writes starts with exactly those entries from exactly those bytes, and
//! otherwise writes the artifact from the start: the bytes are the same
//! either way. Measured on a 125M Llama from a model folder (536 MB of
//! weights, 111 entries): the `.pt2` emit step 0.50-0.57 s -> 31-33 ms.
//! Only into an export folder's scratch folder, which goes on every way out
//! (Ctrl-C included); a `--verify` run writes its artifact elsewhere first.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::archive::ArchiveWriter;
use super::cast::Cast;
use crate::trace::protocol::PlannedWeight;

/// The thread writing a plan's entries; stopped and its temp file removed
/// when dropped unfinished.
pub struct Prewriting {
    thread: Option<JoinHandle<Option<Prewritten>>>,
    stop: Arc<AtomicBool>,
}

/// What the thread wrote: the archive's first entries, in its temp file.
pub struct Prewritten {
    pub(super) writer: ArchiveWriter,
    pub(super) entries: Vec<Written>,
}

/// One entry written: its name and the bytes it holds (the file canonical).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Written {
    pub name: String,
    pub file: PathBuf,
    pub offset: u64,
    pub length: u64,
    pub cast: Option<Cast>,
}

impl Prewriting {
    /// Starts writing `plan`'s entries into a temp file beside `path`, which
    /// the emit step finishes (or removes). Only bytes of `sources` (the
    /// model folder's checkpoint files) are read: the plan comes from the
    /// worker, and an entry naming any other file ends it, as the side
    /// weights' index may name no other ([`super::Pt2::attach_side_weights`]).
    pub fn start(path: &Path, plan: Vec<PlannedWeight>, sources: &[PathBuf]) -> Prewriting {
        let stop = Arc::new(AtomicBool::new(false));
        let allowed: Vec<PathBuf> = sources.iter().filter_map(|s| s.canonicalize().ok()).collect();
        let (path, flag) = (path.to_path_buf(), stop.clone());
        let thread = std::thread::Builder::new().name("hfx-prewrite".into()).spawn(move || write(&path, plan, &allowed, &flag));
        match thread {
            Ok(thread) => Prewriting { thread: Some(thread), stop },
            Err(e) => {
                tracing::info!("weights are written at the emit step: no thread to write them earlier ({e})");
                Prewriting { thread: None, stop }
            }
        }
    }

    /// What was written, once the thread is done; None if nothing was.
    pub fn finish(mut self) -> Option<Prewritten> {
        self.thread.take()?.join().ok().flatten()
    }
}

impl Drop for Prewriting {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join(); // its writer, dropped unfinished, removes the temp file
        }
    }
}

/// The entries of `plan` written in order, up to the first that cannot be
/// (a file not `allowed`, one that does not open or is shorter, a dtype pair hfx does not
/// convert) or until `stop`; None if none was or a write failed.
fn write(path: &Path, plan: Vec<PlannedWeight>, allowed: &[PathBuf], stop: &AtomicBool) -> Option<Prewritten> {
    let mut writer = match ArchiveWriter::create(path) {
        Ok(writer) => writer,
        Err(e) => {
            tracing::info!("weights are written at the emit step: {}: {e}", path.display());
            return None;
        }
    };
    let mut maps: Vec<(PathBuf, memmap2::Mmap)> = Vec::new();
    let mut entries = Vec::new();
    for planned in plan {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        let Some(file) = planned.file.canonicalize().ok().filter(|f| allowed.contains(f)) else { break };
        let at = match maps.iter().position(|(f, _)| *f == file) {
            Some(at) => at,
            None => {
                let Ok(opened) = std::fs::File::open(&file) else { break };
                // SAFETY: a read-only private mapping of a checkpoint nobody
                // writes while hfx runs (as `Pt2` maps it to write the same bytes).
                let Ok(map) = (unsafe { memmap2::Mmap::map(&opened) }) else { break };
                maps.push((file.clone(), map));
                maps.len() - 1
            }
        };
        let map = &maps[at].1;
        let Some(bytes) = usize::try_from(planned.offset)
            .ok()
            .zip(usize::try_from(planned.length).ok())
            .and_then(|(offset, length)| map.get(offset..offset.checked_add(length)?))
        else {
            break;
        };
        let cast = if planned.stored == planned.dtype {
            None
        } else {
            let pair = hfx_dtype::DType::from_name(&planned.stored).zip(hfx_dtype::DType::from_name(&planned.dtype));
            match pair.and_then(|(from, to)| Cast::new(from, to)) {
                Some(cast) => Some(cast),
                None => break,
            }
        };
        if let Err(e) = add(&mut writer, &planned.name, bytes, cast, map, CHUNK) {
            tracing::info!("weights are written at the emit step: {}: {e}", path.display());
            return None;
        }
        entries.push(Written { name: planned.name, file, offset: planned.offset, length: planned.length, cast });
    }
    (!entries.is_empty()).then_some(Prewritten { writer, entries })
}

/// Bytes of a checkpoint range read at most this many at a time, each
/// chunk's pages released from the map once used: while the worker traces,
/// no entry is resident whole (a 3B Llama's bfloat16 embedding is 788 MB).
/// Whole elements of every dtype hfx converts.
const CHUNK: usize = 32 << 20;

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
