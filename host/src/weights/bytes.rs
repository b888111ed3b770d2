//! A weight's bytes on their way into an artifact, never a copy of the map
//! they are read from: written as stored, converted, transposed or
//! quantized as they stream.

use super::cast::Cast;
use super::quantize::{Int4Part, Int4Weight, Int8Part, Int8Weight};
use super::transpose::{write_transposed, write_transposed_side_by_side};

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
    Converted {
        source: &'a [u8],
        cast: Cast,
    },
    Owned(Vec<u8>),
    Transposed {
        source: &'a [u8],
        rows: usize,
        cols: usize,
        element: usize,
        cast: Option<Cast>,
    },
    Int4 {
        source: &'a [u8],
        weight: Int4Weight,
        part: Int4Part,
    },
    Int8 {
        source: &'a [u8],
        weight: Int8Weight,
        part: Int8Part,
    },
    /// Tensors concatenated along one axis, each part streaming as it would
    /// alone: one after the other when no axis before the concatenated one
    /// has more than one index (`outer`, the product of their sizes, is 1),
    /// else a run of each part in turn per index of those axes. Built only
    /// by [`Bytes::concatenated`], which takes only parts that stream so.
    Concatenated {
        parts: Vec<Bytes<'a>>,
        outer: usize,
    },
}

impl<'a> Bytes<'a> {
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
            Bytes::Concatenated { parts, .. } => parts.iter().map(Bytes::len).sum(),
        }
    }

    /// `parts`, tensors of one dtype and rank whose dims differ only on the
    /// concatenated axis, concatenated along it; `outer` is the product of
    /// the dims before that axis. Any parts stream when `outer` is 1 (a
    /// quantized weight's tensors joined along N). Past 1, each part's run
    /// for an index must be at hand: parts as stored, converted or computed
    /// (read at any offset), or 2-D weights all stored transposed with the
    /// concatenated axis their stored rows (`outer` their stored columns),
    /// transposed side by side a block at a time. The parts come back when
    /// they do not stream so.
    pub fn concatenated(parts: Vec<Bytes<'a>>, outer: usize) -> Result<Bytes<'a>, Vec<Bytes<'a>>> {
        let whole_runs = |part: &Bytes| match part {
            Bytes::Mapped(b) => b.len().is_multiple_of(outer),
            Bytes::Owned(b) => b.len().is_multiple_of(outer),
            Bytes::Converted { source, cast } => {
                source.len().is_multiple_of(outer)
                    && (source.len() / outer).is_multiple_of(cast.from().size())
            }
            _ => false,
        };
        let first = parts.first();
        let side_by_side = |part: &Bytes| match (part, first) {
            (
                &Bytes::Transposed { cols, element, cast, .. },
                Some(&Bytes::Transposed { element: e, cast: c, .. }),
            ) => cols == outer && element == e && cast == c,
            _ => false,
        };
        let streams = parts.len() > 1
            && outer > 0
            && (outer == 1 || parts.iter().all(whole_runs) || parts.iter().all(side_by_side));
        if streams {
            Ok(Bytes::Concatenated { parts, outer })
        } else {
            Err(parts)
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
            Bytes::Owned(_) | Bytes::Concatenated { .. } => None,
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
            Bytes::Concatenated { parts, outer } => {
                Bytes::write_concatenated(parts, *outer, out, release)?;
                // Each part's map is done with once the whole is written.
                parts.iter().filter_map(Bytes::mapped).for_each(release);
                Ok(())
            }
        }
    }

    /// [`Bytes::Concatenated`]'s bytes, as [`Bytes::concatenated`] admits them.
    fn write_concatenated(
        parts: &[Bytes],
        outer: usize,
        out: &mut impl std::io::Write,
        release: &dyn Fn(&[u8]),
    ) -> std::io::Result<()> {
        if outer == 1 {
            return parts.iter().try_for_each(|part| part.write_releasing(out, release));
        }
        if let Some(&Bytes::Transposed { cols, element, cast, .. }) = parts.first() {
            let sources: Vec<(&[u8], usize)> = parts
                .iter()
                .filter_map(|part| match *part {
                    Bytes::Transposed { source, rows, .. } => Some((source, rows)),
                    _ => None,
                })
                .collect();
            let large = sources.iter().any(|(source, _)| source.len() > RELEASED_PIECE);
            let release = large.then_some(release);
            return write_transposed_side_by_side(out, &sources, cols, element, cast, release);
        }
        for index in 0..outer {
            for part in parts {
                let (bytes, cast) = match part {
                    Bytes::Mapped(b) => (*b, None),
                    Bytes::Owned(b) => (b.as_slice(), None),
                    Bytes::Converted { source, cast } => (*source, Some(cast)),
                    _ => {
                        let streamed = "a part streamed whole inside a concatenation's runs";
                        return Err(std::io::Error::other(streamed));
                    }
                };
                let run = &bytes[index * (bytes.len() / outer)..][..bytes.len() / outer];
                match cast {
                    Some(cast) => cast.write(run, out)?,
                    None => out.write_all(run)?,
                }
            }
        }
        Ok(())
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
