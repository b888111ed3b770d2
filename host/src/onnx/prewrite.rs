//! An ONNX model's external data written while the worker traces
//! ([`crate::weights`]).
//!
//! The data file holds the initializers of [`THRESHOLD`] bytes or more, in
//! the model's order, each at an offset aligned to [`ALIGNMENT`]
//! ([`super::emit::write`]). Lowering gives the
//! initializers in the order of the program's signature: its parameters,
//! then its buffers, which is the order the worker's plan lists them in.
//! Each is written as the emit step would write it: as stored, converted to
//! the traced dtype, and transposed where it is a `torch.nn.Linear`'s weight
//! and the optimizer stores those transposed. The emit step keeps the file
//! up to the first initializer that is not what was written, and writes on
//! from there ([`PrewrittenData::kept`]).

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::external::{ALIGNMENT, THRESHOLD};
use super::weights::Initializer;
use crate::atomic::{DirectWriter, Staged};
use crate::weights::bytes::Bytes;
use crate::weights::checkpoint::Checkpoints;
use crate::weights::files::{place_of, write_weight, WeightFiles};
use crate::weights::place::Place;
use crate::weights::plan::PlannedWeight;

/// What the thread wrote: the data file's first initializers, in its temp file.
pub struct PrewrittenData {
    staged: Staged,
    out: DirectWriter<File>,
    entries: Vec<DataEntry>,
}

/// One initializer's bytes in the data file: what they were written from,
/// and where they start and end.
#[derive(Debug)]
struct DataEntry {
    place: Place,
    start: u64,
    end: u64,
}

/// The data file as far as the model's initializers match it: its temp
/// file, the writer positioned after the last kept initializer, and where
/// each kept one starts.
pub struct Kept {
    pub staged: Staged,
    pub out: DirectWriter<File>,
    pub starts: Vec<u64>,
}

/// The initializers of `plan` written in order into a temp file beside the
/// data file `data`, up to the first whose bytes `checkpoints` does not give
/// or until `stop`; None if none was or a write failed.
pub fn write(
    data: &Path,
    plan: Vec<PlannedWeight>,
    mut checkpoints: Checkpoints,
    transposed_linear: bool,
    stop: &AtomicBool,
) -> Option<PrewrittenData> {
    let failed = |e: std::io::Error| {
        tracing::info!("weights are written at the emit step: {}: {e}", data.display())
    };
    let mut staged = Staged::create(data).map_err(failed).ok()?;
    let mut out = DirectWriter::new(staged.file().try_clone().map_err(failed).ok()?);
    let mut entries = Vec::new();
    for planned in plan {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        let Some(got) = checkpoints.get(&planned) else { break };
        // Transposed as the optimizer transposes a weight ([`super::fold`]):
        // a 2-D Linear weight of whole elements of a size it moves.
        let transposed = match planned.shape[..] {
            [rows, cols] if transposed_linear && planned.linear_weight => usize::try_from(rows)
                .ok()
                .zip(usize::try_from(cols).ok())
                .filter(|&(rows, cols)| {
                    let count = rows.checked_mul(cols).filter(|&n| n > 0);
                    count.is_some_and(|n| {
                        [1, 2, 4, 8]
                            .iter()
                            .any(|&element| n.checked_mul(element) == Some(got.bytes.len()))
                    })
                }),
            _ => None,
        };
        let bytes = match (transposed, got.cast) {
            (Some((rows, cols)), cast) => Bytes::Transposed {
                source: got.bytes,
                rows,
                cols,
                element: got.bytes.len() / (rows * cols),
                cast,
            },
            (None, Some(cast)) => Bytes::Converted { source: got.bytes, cast },
            (None, None) => Bytes::Mapped(got.bytes),
        };
        if (bytes.len() as u64) < THRESHOLD {
            continue; // stored in the model, not in the data file
        }
        let start = out.position().next_multiple_of(ALIGNMENT);
        let padding = vec![0u8; (start - out.position()) as usize];
        let written = std::io::Write::write_all(&mut out, &padding)
            .and_then(|()| write_weight(&mut out, &bytes, got.from));
        if let Err(e) = written {
            failed(e);
            return None;
        }
        let place = Place {
            file: got.from.path.clone(),
            offset: got.offset,
            length: planned.length,
            cast: got.cast,
            transposed,
        };
        entries.push(DataEntry { place, start, end: start + bytes.len() as u64 });
    }
    // Idle until the emit step: its buffers are not held meanwhile.
    out.park().map_err(failed).ok()?;
    (!entries.is_empty()).then_some(PrewrittenData { staged, out, entries })
}

impl PrewrittenData {
    /// The data file it is written for.
    pub fn data_file(&self) -> &Path {
        self.staged.target()
    }

    /// The file as far as it is the data file of `initializers` at `data`
    /// (their bytes' places given by `files`), the rest cut off; None if
    /// no initializer matches (the temp file is then removed).
    pub fn kept(
        self,
        data: &Path,
        initializers: &[Initializer],
        files: &dyn WeightFiles,
    ) -> Option<Kept> {
        let PrewrittenData { staged, mut out, entries } = self;
        if staged.target() != data {
            return None;
        }
        let external = initializers.iter().filter(|i| i.bytes.len() as u64 >= THRESHOLD);
        let matched = entries
            .iter()
            .zip(external)
            .take_while(|(entry, init)| place_of(&init.bytes, files).as_ref() == Some(&entry.place))
            .count();
        let last = entries.get(matched.checked_sub(1)?)?;
        let reader = File::open(staged.temp_path()).ok()?;
        out.rewind(last.end, &reader).ok()?;
        Some(Kept { staged, out, starts: entries[..matched].iter().map(|e| e.start).collect() })
    }
}
