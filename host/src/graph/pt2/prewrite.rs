//! A `.pt2`'s weight entries written while the worker traces
//! ([`crate::weights`]).
//!
//! torch's archive starts with its weight entries: the worker's plan names
//! them in torch's order, and [`super::Pt2::write_continuing`] keeps them
//! only if the archive it writes starts with exactly those entries from
//! exactly those bytes, and otherwise writes the artifact from the start.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::archive::ArchiveWriter;
use crate::weights::checkpoint::Checkpoints;
use crate::weights::map::release_from;
use crate::weights::place::Place;
use crate::weights::plan::PlannedWeight;

/// What the thread wrote: the archive's first entries, in its temp file.
pub struct PrewrittenEntries {
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
pub fn write(
    path: &Path,
    plan: Vec<PlannedWeight>,
    mut checkpoints: Checkpoints,
    stop: &AtomicBool,
) -> Option<PrewrittenEntries> {
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
        if let Err(e) =
            super::add_weight(&mut writer, &planned.name, got.bytes, got.cast, |piece| {
                release_from(&got.from.map, piece)
            })
        {
            tracing::info!("weights are written at the emit step: {}: {e}", path.display());
            return None;
        }
        let place = Place {
            file: got.from.path.clone(),
            offset: got.offset,
            length: planned.length,
            cast: got.cast,
            transposed: None,
        };
        entries.push(Written { name: planned.name, place });
    }
    // Idle until the emit step: its buffers are not held meanwhile.
    writer.park().ok()?;
    (!entries.is_empty()).then_some(PrewrittenEntries { writer, entries })
}
