//! The IR's `.bin` ([`super`]): the ONNX model's data file with OpenVINO's
//! own constants appended, where the weights left as inputs read nearly all
//! of it (the file is renamed, not copied); else the byte ranges they read,
//! copied out of it in order, so the `.bin` keeps no weight the IR does not
//! read (OpenVINO made most of them anew: compressed to float16, unpacked).

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::Path;

use super::ir::WeightInput;
use crate::onnx::external::ALIGNMENT;

/// The data file becomes the `.bin` as it is while the bytes no weight
/// reads are at most this fraction of it (1/64): a few weights a
/// transformation folded into new constants.
const UNREAD_FRACTION: u64 = 64;

/// Writes the `.bin` at `bin` from the data file `data`, whose bytes
/// `weights` read (each moved to its offset in the `.bin`), and OpenVINO's
/// own `.bin` at `saved`, which follows at the offset returned. `data` is
/// renamed to `bin` or left for its caller to remove.
pub fn write(
    data: &Path,
    saved: &Path,
    weights: &mut [WeightInput],
    bin: &Path,
) -> io::Result<u64> {
    let length = std::fs::metadata(data)?.len();
    let spans = read_spans(weights);
    let read: u64 = spans.iter().map(|(start, end)| end - start).sum();
    if length - read.min(length) <= length / UNREAD_FRACTION {
        let base = append_aligned(data, saved)?;
        crate::atomic::move_into_place(data, bin)?;
        return Ok(base);
    }
    let mut staged = crate::atomic::Staged::create(bin)?;
    let mut source = File::open(data)?;
    let out = staged.file();
    let mut starts = Vec::with_capacity(spans.len());
    let mut position: u64 = 0;
    for &(start, end) in &spans {
        let at = position.next_multiple_of(ALIGNMENT);
        out.write_all(&vec![0; (at - position) as usize])?;
        source.seek(SeekFrom::Start(start))?;
        let copied = io::copy(&mut io::Read::take(&mut source, end - start), out)?;
        if copied != end - start {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "a weight past the data file's end",
            ));
        }
        starts.push(at);
        position = at + copied;
    }
    for weight in weights.iter_mut() {
        let span = spans.partition_point(|&(_, end)| end <= weight.offset);
        weight.offset = starts[span] + (weight.offset - spans[span].0);
    }
    let base = position.next_multiple_of(ALIGNMENT);
    out.write_all(&vec![0; (base - position) as usize])?;
    io::copy(&mut File::open(saved)?, out)?;
    staged.commit()?;
    Ok(base)
}

/// The byte ranges `weights` read, overlapping ones merged, in order.
fn read_spans(weights: &[WeightInput]) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> =
        weights.iter().map(|w| (w.offset, w.offset.saturating_add(w.size))).collect();
    ranges.sort_unstable();
    let mut spans: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match spans.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => spans.push((start, end)),
        }
    }
    spans
}

/// Appends the file `tail` to `head`, from the first offset past `head`'s end
/// aligned as ONNX external data is; that offset.
fn append_aligned(head: &Path, tail: &Path) -> io::Result<u64> {
    let mut out = std::fs::OpenOptions::new().append(true).open(head)?;
    let end = out.seek(SeekFrom::End(0))?;
    let base = end.next_multiple_of(ALIGNMENT);
    out.write_all(&vec![0; (base - end) as usize])?;
    io::copy(&mut File::open(tail)?, &mut out)?;
    out.sync_all()?;
    Ok(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weight(name: &'static str, offset: u64, size: u64) -> WeightInput<'static> {
        WeightInput { name, constant: name, offset, size }
    }

    fn files(data: &[u8]) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let (data_path, saved) = (dir.path().join("m.onnx.data"), dir.path().join("saved.bin"));
        std::fs::write(&data_path, data).unwrap();
        std::fs::write(&saved, b"own").unwrap();
        (dir, data_path, saved)
    }

    /// Weights that read the whole file: it is renamed, OpenVINO's
    /// constants after it, aligned.
    #[test]
    fn a_data_file_the_weights_read_becomes_the_bin() {
        let data: Vec<u8> = (0..200u8).collect();
        let (dir, data_path, saved) = files(&data);
        let mut weights = [weight("a", 0, 128), weight("b", 128, 72), weight("view", 130, 8)];
        let bin = dir.path().join("m.bin");
        let base = write(&data_path, &saved, &mut weights, &bin).unwrap();
        assert_eq!(base, 256);
        assert!(!data_path.exists());
        let written = std::fs::read(&bin).unwrap();
        assert_eq!((&written[..200], &written[256..]), (&data[..], &b"own"[..]));
        assert_eq!(weights.map(|w| w.offset), [0, 128, 130]);
    }

    /// Weights that read a part of the file: only that part is copied, each
    /// weight moved with its range, a view inside another with it.
    #[test]
    fn the_bytes_no_weight_reads_are_left_out() {
        let data: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        let (dir, data_path, saved) = files(&data);
        let mut weights =
            [weight("late", 3000, 100), weight("early", 64, 10), weight("inside", 3050, 20)];
        let bin = dir.path().join("m.bin");
        let base = write(&data_path, &saved, &mut weights, &bin).unwrap();
        let written = std::fs::read(&bin).unwrap();
        assert_eq!(weights.each_ref().map(|w| w.offset), [64, 0, 114]);
        for (w, original) in weights.iter().zip([3000usize, 64, 3050]) {
            let (at, size) = (w.offset as usize, w.size as usize);
            assert_eq!(written[at..at + size], data[original..original + size], "{}", w.name);
        }
        assert_eq!((base, &written[base as usize..]), (192, &b"own"[..]));
        assert!(data_path.exists(), "the data file is its caller's to remove");
    }
}
