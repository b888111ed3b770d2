//! What an artifact's written weight was written from.

use std::path::PathBuf;

use super::cast::Cast;

/// What an artifact's written weight was written from: two entries with the
/// same place are the same bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The checkpoint file (canonical), and the stored bytes' range in it.
    pub file: PathBuf,
    pub offset: u64,
    pub length: u64,
    pub cast: Option<Cast>,
    /// Written transposed: the stored tensor's rows and columns.
    pub transposed: Option<(usize, usize)>,
}
