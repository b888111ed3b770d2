//! A weight's bytes on their way into an artifact, never a copy of the map
//! they are read from: written as stored, converted, transposed or
//! quantized as they stream.

use super::cast::Cast;
use super::quantize::{Int4Part, Int4Weight, Int8Part, Int8Weight};
use super::transpose::write_transposed;

/// A weight's bytes on their way into an artifact: a slice of a memory map
/// (a `.pt2`'s, a checkpoint's), a value computed at export time (folded
/// constants, small), or a 2-D weight of a map stored transposed, transposed
/// block by block as it is written.
/// A slice stored in another dtype (a checkpoint's bfloat16 weight exported
/// as float32) is converted as it is written; `element` and `source` are then
/// the stored dtype's. A weight quantized to 4 bits (or int8) is one of the
/// tensors it becomes ([`Int4Part`], [`Int8Part`]), computed from the map's
/// slice as it is written.
pub enum Bytes<'a> {
    Mapped(&'a [u8]),
    Converted { source: &'a [u8], cast: Cast },
    Owned(Vec<u8>),
    Transposed { source: &'a [u8], rows: usize, cols: usize, element: usize, cast: Option<Cast> },
    Int4 { source: &'a [u8], weight: Int4Weight, part: Int4Part },
    Int8 { source: &'a [u8], weight: Int8Weight, part: Int8Part },
}

impl Bytes<'_> {
    pub fn len(&self) -> usize {
        match self {
            Bytes::Mapped(b) => b.len(),
            Bytes::Converted { source, cast } => cast.output_len(source.len()),
            Bytes::Owned(b) => b.len(),
            Bytes::Transposed { source, cast, .. } => {
                cast.map_or(source.len(), |c| c.output_len(source.len()))
            }
            Bytes::Int4 { weight, part, .. } => weight.len(*part),
            Bytes::Int8 { weight, part, .. } => weight.len(*part),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        self.write_to(&mut out).expect("writing to memory");
        out
    }

    /// The slice of a map these bytes are read from, if any.
    pub fn mapped(&self) -> Option<&[u8]> {
        match self {
            Bytes::Mapped(b)
            | Bytes::Converted { source: b, .. }
            | Bytes::Transposed { source: b, .. }
            | Bytes::Int4 { source: b, .. }
            | Bytes::Int8 { source: b, .. } => Some(b),
            Bytes::Owned(_) => None,
        }
    }

    /// Streams the bytes to `out`; a transposed weight goes through a buffer
    /// of [`TRANSPOSE_BLOCK`](super::transpose::TRANSPOSE_BLOCK) output rows at a time.
    pub fn write_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        self.write_releasing(out, &|_| {})
    }

    /// As [`Bytes::write_to`], and `release` is called with each part of a
    /// map's bytes once read, so a weight read through a map is never
    /// resident whole: converted, a [`RELEASED_PIECE`] at a time;
    /// transposed, a weight larger than that releases each tile of source
    /// rows once a block of output rows is done with it (the next block reads
    /// them again, from the page cache).
    pub fn write_releasing(
        &self,
        out: &mut impl std::io::Write,
        release: &dyn Fn(&[u8]),
    ) -> std::io::Result<()> {
        match self {
            Bytes::Mapped(b) => out.write_all(b),
            Bytes::Converted { source, cast } => {
                source.chunks(RELEASED_PIECE).try_for_each(|piece| {
                    cast.write(piece, out)?;
                    release(piece);
                    Ok(())
                })
            }
            Bytes::Owned(b) => out.write_all(b),
            &Bytes::Transposed { source, rows, cols, element, cast } => {
                let release = (source.len() > RELEASED_PIECE).then_some(release);
                write_transposed(out, source, rows, cols, element, cast, release)
            }
            Bytes::Int4 { source, weight, part } => {
                let release = (source.len() > RELEASED_PIECE).then_some(release);
                weight.write(source, *part, out, release)
            }
            Bytes::Int8 { source, weight, part } => {
                let release = (source.len() > RELEASED_PIECE).then_some(release);
                weight.write(source, *part, out, release)
            }
        }
    }
}

/// About the most bytes of a map a weight's writer keeps resident (whole
/// elements of every dtype).
const RELEASED_PIECE: usize = 16 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transposed_weight_streams_in_blocks_and_a_failed_write_is_an_error() {
        let (rows, cols) = (37usize, 200usize); // past three blocks of output rows and two tiles of source rows
        let source: Vec<u8> = (0..(rows * cols) as u16).flat_map(|v| v.to_le_bytes()).collect();
        let bytes = Bytes::Transposed { source: &source, rows, cols, element: 2, cast: None };
        let written = bytes.to_vec();
        let value = |k: usize| u16::from_le_bytes([written[2 * k], written[2 * k + 1]]) as usize;
        for j in 0..cols {
            for i in 0..rows {
                assert_eq!(value(j * rows + i), i * cols + j);
            }
        }
        struct FailsAfter(usize);
        impl std::io::Write for FailsAfter {
            fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
                if self.0 < data.len() {
                    return Err(std::io::Error::other("disk full"));
                }
                self.0 -= data.len();
                Ok(data.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let error = bytes.write_to(&mut FailsAfter(500)).unwrap_err();
        assert_eq!(error.to_string(), "disk full");
    }
}
