//! Atomic file writes: a temp file in the destination folder, synced, then
//! renamed over the destination. A failed write never leaves a half-written
//! file where a good one was.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `path` with what `fill` writes; either the whole new content lands or
/// the old file (if any) stays untouched.
pub fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    let mut staged = Staged::create(path)?;
    // On an error or a panic in `fill`, dropping `staged` removes the temp file.
    fill(staged.file())?;
    staged.commit()
}

/// A file being written beside its destination: [`Staged::commit`] syncs it
/// and renames it into place; dropped uncommitted, it is removed. Files that
/// must land together (a model and its external data) are staged first and
/// committed one after the other, so a failure while writing leaves neither.
#[derive(Debug)]
pub struct Staged {
    file: File,
    target: PathBuf,
    guard: TempGuard,
}

impl Staged {
    pub fn create(path: &Path) -> io::Result<Staged> {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        std::fs::create_dir_all(dir)?;
        let (tmp, file) = temp_file(dir, path)?;
        Ok(Staged { file, target: path.to_path_buf(), guard: TempGuard::new(tmp) })
    }

    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// The temp file's path.
    pub fn temp_path(&self) -> &Path {
        self.guard.path()
    }

    /// The path it is renamed to.
    pub fn target(&self) -> &Path {
        &self.target
    }

    pub fn commit(mut self) -> io::Result<()> {
        self.file.flush()?;
        self.file.sync_all()?;
        let Staged { file, target, guard } = self;
        drop(file);
        guard.rename_to(&target)
    }
}

/// A temp file that is removed when dropped, unless it was renamed into place.
#[derive(Debug)]
pub(crate) struct TempGuard(Option<PathBuf>);

impl TempGuard {
    pub(crate) fn new(path: PathBuf) -> TempGuard {
        TempGuard(Some(path))
    }

    pub(crate) fn path(&self) -> &Path {
        self.0.as_deref().unwrap_or(Path::new(""))
    }

    /// Renames the temp file over `to`; on failure it is removed.
    pub(crate) fn rename_to(mut self, to: &Path) -> io::Result<()> {
        let tmp = self.0.take().unwrap_or_default();
        std::fs::rename(&tmp, to).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }
}

impl Drop for TempGuard {
    fn drop(&mut self) {
        if let Some(tmp) = self.0.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Moves a finished file from a scratch folder on the same file system into
/// place: synced first, then renamed over the destination in one step.
pub fn move_into_place(from: &Path, to: &Path) -> io::Result<()> {
    crate::input::open_written(from).map_err(io::Error::from)?.sync_all()?;
    std::fs::rename(from, to)?;
    // The scratch folder may be the worker's, which could swap in a link after
    // the check above; the destination's folder is not, so what landed is
    // checked there, and a link is removed rather than left as the artifact.
    if !std::fs::symlink_metadata(to)?.is_file() {
        std::fs::remove_file(to)?;
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} was not a regular file when it was moved into place", from.display()),
        ));
    }
    Ok(())
}

/// Puts a finished file of a scratch folder in place while keeping it there
/// (another artifact of the same trace may need it too): hard-linked to a
/// temp name beside the destination (copied where links are refused), synced,
/// then renamed over the destination in one step.
pub fn link_into_place(from: &Path, to: &Path) -> io::Result<()> {
    let dir = to.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let (tmp, file) = temp_file(dir, to)?;
    drop(file);
    // The link needs the name free; the guard removes whatever stands there on the way out.
    let guard = TempGuard::new(tmp.clone());
    std::fs::remove_file(&tmp)?;
    // `from` is the worker's output: opened without following a link, and the
    // opened file itself linked or copied (a name swapped meanwhile changes nothing).
    let source = crate::input::open_written(from).map_err(io::Error::from)?;
    let opened =
        PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&source)));
    let linked = std::ffi::CString::new(opened.as_os_str().as_encoded_bytes())
        .ok()
        .zip(std::ffi::CString::new(tmp.as_os_str().as_encoded_bytes()).ok());
    // SAFETY: two NUL-terminated paths that outlive the call.
    let linked = linked.is_some_and(|(opened, tmp)| unsafe { libc::linkat(libc::AT_FDCWD, opened.as_ptr(), libc::AT_FDCWD, tmp.as_ptr(), libc::AT_SYMLINK_FOLLOW) } == 0);
    if !linked {
        let mut target = File::options().write(true).create_new(true).open(&tmp)?;
        io::copy(&mut &source, &mut target)?;
    }
    File::open(&tmp)?.sync_all()?;
    guard.rename_to(to)
}

/// Writes a new file front to back through its own aligned buffer, with the
/// page cache bypassed (`O_DIRECT`) where the file system allows it.
///
/// Why: an artifact is mostly weights, written once and synced, and not read
/// back by hfx. Through the page cache, every page of it is first allocated
/// and filled in memory, and that first touch is most of what writing a
/// large artifact costs. Direct writes need the buffer, the file offset and
/// the length aligned to the device's block; the buffer is, every write but
/// the last is a whole buffer, and the last is padded to a block and the
/// file truncated back to its length in [`DirectWriter::finish`]. A file
/// system that refuses `O_DIRECT` (tmpfs, some network ones) gets the same
/// writes buffered.
///
/// A full buffer is written by a thread while the next one fills (two
/// buffers, one write in flight): the copying, converting and encoding of
/// the next block overlaps the device's write of the last one.
///
/// `flush` writes whole blocks only; nothing is complete before `finish`.
pub struct DirectWriter<F: std::borrow::Borrow<File>> {
    file: F,
    /// The block being filled.
    block: Block,
    /// Bytes of the block in use.
    used: usize,
    /// Bytes in the file or on their way there, the write in flight included
    /// (a multiple of [`DIRECT_ALIGNMENT`] while direct).
    written: u64,
    direct: bool,
    /// The write in flight.
    in_flight: Option<InFlight>,
    /// The other block, when no write holds it.
    spare: Option<Block>,
    /// The file's descriptor again, for the writing thread (same open file).
    for_thread: Option<std::sync::Arc<File>>,
    /// Bytes of a full block: [`DIRECT_BUFFER`], smaller in tests.
    block_size: usize,
}

/// A buffer of the writer's block size aligned to [`DIRECT_ALIGNMENT`].
struct Block {
    bytes: Vec<u8>,
    /// Where the aligned part of `bytes` starts.
    start: usize,
}

impl Block {
    fn new(size: usize) -> Block {
        let bytes = vec![0u8; size + DIRECT_ALIGNMENT];
        let start = bytes.as_ptr().align_offset(DIRECT_ALIGNMENT);
        Block { bytes, start }
    }

    fn get(&self, range: std::ops::Range<usize>) -> &[u8] {
        &self.bytes[self.start + range.start..self.start + range.end]
    }

    fn get_mut(&mut self, range: std::ops::Range<usize>) -> &mut [u8] {
        &mut self.bytes[self.start + range.start..self.start + range.end]
    }

    /// A block holding only `kept` (a parked writer's tail).
    fn holding(kept: &[u8]) -> Block {
        let bytes = vec![0u8; kept.len() + DIRECT_ALIGNMENT];
        let start = bytes.as_ptr().align_offset(DIRECT_ALIGNMENT);
        let mut block = Block { bytes, start };
        block.get_mut(0..kept.len()).copy_from_slice(kept);
        block
    }

    fn is_full_size(&self, size: usize) -> bool {
        self.bytes.len() == size + DIRECT_ALIGNMENT
    }
}

/// Writes `bytes` at `offset`; a file system that took `O_DIRECT` but
/// refuses the write (`EINVAL`) gets it buffered, from then on. Whether the
/// file is still written direct.
fn write_block_at(file: &File, bytes: &[u8], offset: u64, direct: bool) -> io::Result<bool> {
    use std::os::unix::fs::FileExt;
    match file.write_all_at(bytes, offset) {
        Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => {
            set_direct(file, false);
            file.write_all_at(bytes, offset).map(|()| false)
        }
        other => other.map(|()| direct),
    }
}

/// Block alignment for direct writes: 4096 covers 512-byte and 4K-sector devices.
const DIRECT_ALIGNMENT: usize = 4096;
/// The buffer: 8 MiB, large enough that each direct write keeps the device busy.
const DIRECT_BUFFER: usize = 8 << 20;

impl<F: std::borrow::Borrow<File>> DirectWriter<F> {
    /// Starts writing `file` (new and empty) at offset 0.
    pub fn new(file: F) -> DirectWriter<F> {
        let direct = set_direct(file.borrow(), true);
        DirectWriter::with(file, direct, DIRECT_BUFFER)
    }

    /// `block_size`: a multiple of [`DIRECT_ALIGNMENT`].
    fn with(file: F, direct: bool, block_size: usize) -> DirectWriter<F> {
        debug_assert!(block_size > 0 && block_size.is_multiple_of(DIRECT_ALIGNMENT));
        DirectWriter {
            file,
            block: Block::new(block_size),
            used: 0,
            written: 0,
            direct,
            in_flight: None,
            spare: None,
            for_thread: None,
            block_size,
        }
    }

    /// Bytes written so far, buffered ones included.
    pub fn position(&self) -> u64 {
        self.written + self.used as u64
    }

    /// Writes the whole blocks buffered and frees the buffers, keeping only
    /// the tail that is less than a block: a writer left idle while other
    /// work runs (a data file written while the worker traces) holds no
    /// buffer meanwhile. The next write allocates them again.
    pub fn park(&mut self) -> io::Result<()> {
        self.flush()?;
        self.land()?;
        self.spare = None;
        self.block = Block::holding(self.block.get(0..self.used));
        Ok(())
    }

    /// A parked writer's buffer, full size again.
    fn unpark(&mut self) {
        if !self.block.is_full_size(self.block_size) {
            let mut block = Block::new(self.block_size);
            block.get_mut(0..self.used).copy_from_slice(self.block.get(0..self.used));
            self.block = block;
        }
    }

    /// Cuts what was written back to its first `to` bytes (no more than
    /// [`DirectWriter::position`]); the next write goes there. `reader`
    /// reads the same file: direct writes are whole blocks, so the block `to`
    /// falls in is read back and filled on from `to`.
    pub fn rewind(&mut self, to: u64, reader: &File) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.land()?;
        self.unpark();
        if to > self.position() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("rewinding to {to}, past the {} bytes written", self.position()),
            ));
        }
        if to >= self.written {
            self.used = (to - self.written) as usize;
            return Ok(());
        }
        let start = if self.direct { to - to % DIRECT_ALIGNMENT as u64 } else { to };
        let kept = (to - start) as usize;
        reader.read_exact_at(self.block.get_mut(0..kept), start)?;
        self.file.borrow().set_len(start)?;
        (self.written, self.used) = (start, kept);
        Ok(())
    }

    /// Appends `bytes`; where they are a slice of a file (`origin`: the file
    /// and their offset in it, a weight stored unchanged in a checkpoint or a
    /// side file), they are read from that file instead of from the map, so
    /// its pages never become hfx's resident memory.
    pub fn write_or_copy(&mut self, bytes: &[u8], origin: Option<(&File, u64)>) -> io::Result<()> {
        match origin {
            Some((source, offset)) => self.copy_from(source, offset, bytes.len() as u64),
            None => self.write_all(bytes),
        }
    }

    /// Appends `len` bytes of `source` at `offset`. A source shorter than
    /// that is an `UnexpectedEof`.
    pub fn copy_from(&mut self, source: &File, mut offset: u64, len: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.unpark();
        let end = offset + len;
        while offset < end {
            if self.used == self.block_size {
                self.write_block(self.block_size)?;
            }
            let room = (self.block_size - self.used).min((end - offset) as usize);
            let n = match source.read_at(self.block.get_mut(self.used..self.used + room), offset) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("the source ended {} bytes early", end - offset),
                    ))
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.used += n;
            offset += n as u64;
        }
        Ok(())
    }

    /// Writes what is buffered (the last block padded, then the file cut back
    /// to its length) and gives the file back, with its length.
    pub fn finish(mut self) -> io::Result<(F, u64)> {
        let length = self.position();
        self.land()?;
        self.unpark();
        if self.used > 0 {
            let padded =
                if self.direct { self.used.next_multiple_of(DIRECT_ALIGNMENT) } else { self.used };
            let used = self.used;
            self.block.get_mut(used..padded).fill(0);
            self.write_block(padded)?;
            if padded != self.used {
                self.file.borrow().set_len(length)?;
            }
        }
        if self.direct {
            set_direct(self.file.borrow(), false);
        }
        Ok((self.file, length))
    }

    /// Waits for the write in flight, if any: its error is this writer's.
    fn land(&mut self) -> io::Result<()> {
        if let Some(write) = self.in_flight.take() {
            let (block, result) = write.wait()?;
            self.spare = Some(block);
            self.direct = result?;
        }
        Ok(())
    }

    /// Writes the first `n` bytes of the block at the file's end and empties
    /// it. A full block goes to a thread while the other block fills; a
    /// partial one (`flush`, `finish`) is written here, after the one in flight.
    fn write_block(&mut self, n: usize) -> io::Result<()> {
        self.land()?;
        if n == self.block_size && self.used == self.block_size {
            let file = match &self.for_thread {
                Some(file) => file.clone(),
                None => self
                    .for_thread
                    .insert(std::sync::Arc::new(self.file.borrow().try_clone()?))
                    .clone(),
            };
            let full = std::mem::replace(
                &mut self.block,
                self.spare.take().unwrap_or_else(|| Block::new(self.block_size)),
            );
            let (offset, direct) = (self.written, self.direct);
            self.in_flight = Some(InFlight(Some(std::thread::spawn(move || {
                let result = write_block_at(&file, full.get(0..n), offset, direct);
                (full, result)
            }))));
            self.written += n as u64;
            self.used = 0;
            return Ok(());
        }
        self.direct =
            write_block_at(self.file.borrow(), self.block.get(0..n), self.written, self.direct)?;
        self.written += n as u64;
        // The kept tail of a partial block moves to the front (only `flush` leaves one);
        // `finish`'s padded last block is past `used`, and leaves nothing.
        if n < self.used {
            let start = self.block.start;
            self.block.bytes.copy_within(start + n..start + self.used, start);
        }
        self.used = self.used.saturating_sub(n);
        Ok(())
    }
}

/// A full block being written on its thread (it gives back the block, and
/// whether the file is still written direct). Dropped unwaited (a writer
/// dropped on an error), it still waits, so no thread writes into a file
/// its owner is removing.
struct InFlight(Option<std::thread::JoinHandle<(Block, io::Result<bool>)>>);

impl InFlight {
    fn wait(mut self) -> io::Result<(Block, io::Result<bool>)> {
        let thread = self.0.take().expect("waited for once: `wait` takes it, `drop` finds none");
        thread.join().map_err(|_| io::Error::other("the thread writing a block panicked"))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(thread) = self.0.take() {
            let _ = thread.join();
        }
    }
}

impl<F: std::borrow::Borrow<File>> Write for DirectWriter<F> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.unpark();
        if self.used == self.block_size {
            self.write_block(self.block_size)?;
        }
        let n = bytes.len().min(self.block_size - self.used);
        self.block.get_mut(self.used..self.used + n).copy_from_slice(&bytes[..n]);
        self.used += n;
        Ok(n)
    }

    /// Writes the whole blocks buffered; a partial one waits for more or for `finish`.
    fn flush(&mut self) -> io::Result<()> {
        let whole = if self.direct { self.used - self.used % DIRECT_ALIGNMENT } else { self.used };
        if whole > 0 {
            self.write_block(whole)?;
        }
        Ok(())
    }
}

/// Turns `O_DIRECT` on or off for `file`; whether it is now on.
fn set_direct(file: &File, on: bool) -> bool {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor this `File` owns, with integer arguments only.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            return false;
        }
        let wanted = if on { flags | libc::O_DIRECT } else { flags & !libc::O_DIRECT };
        let set = libc::fcntl(fd, libc::F_SETFL, wanted) == 0;
        on && set
    }
}

/// Convenience for whole buffers.
pub fn write_bytes_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomically(path, |f| f.write_all(bytes))
}

/// A new file `.<target name>.<pid>.<n>.tmp` in `dir`, never one that exists.
pub(crate) fn temp_file(dir: &Path, target: &Path) -> io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let stem = target.file_name().and_then(|n| n.to_str()).unwrap_or("out");
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{stem}.{}.{n}.tmp", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The block of the writers under test: every path of the 8 MiB writer,
    /// at a 512th of the disk and memory.
    const BLOCK: usize = 4 * DIRECT_ALIGNMENT;

    /// A writer of `BLOCK`-byte blocks, direct where asked and the file system takes it.
    fn writer(file: File, direct: bool) -> DirectWriter<File> {
        let direct = direct && set_direct(&file, true);
        DirectWriter::with(file, direct, BLOCK)
    }

    /// A worker's file swapped for a link to a secret is neither followed nor
    /// moved into place as a link.
    #[test]
    fn a_link_in_the_scratch_folder_never_becomes_an_artifact() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "the victim's secret").unwrap();
        let planted = dir.path().join("reference.pt");
        std::os::unix::fs::symlink(&secret, &planted).unwrap();
        for place in [link_into_place as fn(&Path, &Path) -> io::Result<()>, move_into_place] {
            let to = dir.path().join("out.pt");
            assert!(place(&planted, &to).is_err());
            assert!(std::fs::symlink_metadata(&to).is_err(), "nothing lands");
        }
        let written = dir.path().join("written.pt");
        std::fs::write(&written, "tensor bytes").unwrap();
        link_into_place(&written, &dir.path().join("linked.pt")).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("linked.pt")).unwrap(), "tensor bytes");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 4, "no temp file is left");
    }

    #[test]
    fn a_failed_write_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("artifact.bin");
        write_bytes_atomically(&path, b"good").unwrap();
        let failed = write_atomically(&path, |f| {
            f.write_all(b"half")?;
            Err(io::Error::other("disk on fire"))
        });
        assert!(failed.is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"good");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "temp file left behind");
    }

    #[test]
    fn staged_files_land_on_commit_and_vanish_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("sub/a.onnx"), dir.path().join("sub/a.onnx.data"));
        let mut first = Staged::create(&b).unwrap();
        first.file().write_all(b"data").unwrap();
        let second = Staged::create(&a).unwrap();
        assert!(first.temp_path().exists() && second.temp_path().exists());
        drop(second); // the second failed: neither lands
        drop(first);
        assert_eq!(std::fs::read_dir(dir.path().join("sub")).unwrap().count(), 0);
        let mut first = Staged::create(&b).unwrap();
        first.file().write_all(b"data").unwrap();
        first.commit().unwrap();
        assert_eq!(std::fs::read(&b).unwrap(), b"data");
        assert_eq!(std::fs::read_dir(dir.path().join("sub")).unwrap().count(), 1);
    }

    /// Every path of the writer (small writes, writes across the buffer, a
    /// flush with a partial block, copies from a file, a last block padded
    /// and cut back, a length of whole blocks) gives exactly the bytes
    /// written, direct (where the file system takes it) and buffered.
    #[test]
    fn direct_writes_give_exactly_the_bytes_written() {
        let source_dir = tempfile::tempdir().unwrap();
        let source_path = source_dir.path().join("source.bin");
        let source_bytes: Vec<u8> =
            (0..(3 * BLOCK as u32 / 2)).map(|i| (i * 7 + i / 251) as u8).collect();
        std::fs::write(&source_path, &source_bytes).unwrap();
        let source = File::open(&source_path).unwrap();
        let dir = tempfile::tempdir().unwrap();
        for direct in [true, false] {
            for tail in [0usize, 1, 4095, 4097] {
                let path = dir.path().join(format!("out{tail}.bin"));
                let mut expected = Vec::new();
                let file = File::create(&path).unwrap();
                let mut out = writer(file, direct);
                out.write_all(b"header").unwrap();
                expected.extend_from_slice(b"header");
                out.flush().unwrap();
                let big: Vec<u8> = (0..BLOCK + 12_345).map(|i| (i % 253) as u8).collect();
                out.write_all(&big).unwrap();
                expected.extend_from_slice(&big);
                out.copy_from(&source, 17, source_bytes.len() as u64 - 17).unwrap();
                expected.extend_from_slice(&source_bytes[17..]);
                out.write_or_copy(&source_bytes[5..9000], Some((&source, 5))).unwrap();
                expected.extend_from_slice(&source_bytes[5..9000]);
                out.write_or_copy(b"in memory", None).unwrap();
                expected.extend_from_slice(b"in memory");
                // Pad to a whole number of blocks, then add `tail` bytes.
                let pad = vec![
                    9u8;
                    expected.len().next_multiple_of(DIRECT_ALIGNMENT) - expected.len()
                        + tail
                ];
                out.write_all(&pad).unwrap();
                expected.extend_from_slice(&pad);
                assert_eq!(out.position(), expected.len() as u64);
                let (_, length) = out.finish().unwrap();
                assert_eq!(length, expected.len() as u64);
                assert!(
                    std::fs::read(&path).unwrap() == expected,
                    "direct {direct}, tail {tail}: the file differs"
                );
            }
        }
    }

    /// Rewound to any point (in the block being filled, in blocks written
    /// already, unaligned, to the start; parked or not) and written on, or
    /// parked and written on, the file is exactly
    /// the bytes before that point and the bytes written after, direct and
    /// buffered.
    #[test]
    fn a_rewound_writer_writes_on_from_where_it_was_rewound_to() {
        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> =
            (0..(5 * BLOCK / 2) as u32).map(|i| (i * 11 + i / 509) as u8).collect();
        let big = 2 * BLOCK as u64;
        for direct in [true, false] {
            for to in
                [0, 1, 4096, 12_345, BLOCK as u64 + 777, big + 5, big + 4096, bytes.len() as u64]
            {
                let path = dir.path().join(format!("out-{direct}-{to}.bin"));
                let file = File::create(&path).unwrap();
                let reader = File::open(&path).unwrap();
                let mut out = writer(file, direct);
                out.write_all(&bytes).unwrap();
                // Parked (its buffers freed) where `to` is odd: the rewind finds what it needs in the file.
                if to % 2 == 1 {
                    out.park().unwrap();
                    assert!(out.spare.is_none() && !out.block.is_full_size(BLOCK));
                }
                out.rewind(to, &reader).unwrap();
                assert_eq!(out.position(), to);
                out.write_all(b"and on").unwrap();
                out.park().unwrap();
                out.write_all(b", parked").unwrap();
                let (_, length) = out.finish().unwrap();
                let mut expected = bytes[..to as usize].to_vec();
                expected.extend_from_slice(b"and on, parked");
                assert_eq!(length, expected.len() as u64);
                assert!(
                    std::fs::read(&path).unwrap() == expected,
                    "direct {direct}, rewound to {to}: the file differs"
                );
            }
            let file = File::create(dir.path().join("past.bin")).unwrap();
            let mut out = writer(file, direct);
            out.write_all(b"four").unwrap();
            assert!(out.rewind(5, &File::open(dir.path().join("past.bin")).unwrap()).is_err());
        }
    }

    /// Blocks written on the writing thread while the next fills: many full
    /// blocks in a row, from writes and from a file, land in order; a write
    /// that fails on the thread is the error of the writer's next call.
    #[test]
    fn blocks_written_in_flight_land_in_order_and_their_errors_surface() {
        let dir = tempfile::tempdir().unwrap();
        let source_path = dir.path().join("source.bin");
        let source_bytes: Vec<u8> =
            (0..(5 * BLOCK as u32 / 2)).map(|i| (i * 13 + i / 4093) as u8).collect();
        std::fs::write(&source_path, &source_bytes).unwrap();
        let source = File::open(&source_path).unwrap();
        for direct in [true, false] {
            let path = dir.path().join(format!("out-{direct}.bin"));
            let file = File::create(&path).unwrap();
            let mut out = writer(file, direct);
            let mut expected = Vec::new();
            for round in 0..3u8 {
                let chunk: Vec<u8> =
                    (0..BLOCK + 777).map(|i| (i as u8).wrapping_mul(round + 3)).collect();
                out.write_all(&chunk).unwrap();
                expected.extend_from_slice(&chunk);
                out.copy_from(&source, 3, source_bytes.len() as u64 - 3).unwrap();
                expected.extend_from_slice(&source_bytes[3..]);
            }
            assert_eq!(out.position(), expected.len() as u64);
            let (_, length) = out.finish().unwrap();
            assert_eq!(length, expected.len() as u64);
            assert!(std::fs::read(&path).unwrap() == expected, "direct {direct}: the file differs");
        }
        // A descriptor open for reading only: the first full block fails on the thread.
        let path = dir.path().join("read-only.bin");
        std::fs::write(&path, b"").unwrap();
        let mut out = writer(File::open(&path).unwrap(), false);
        out.write_all(&vec![1u8; BLOCK]).unwrap();
        out.write_all(&[2u8]).unwrap(); // the full block goes to the thread
        let failed = out.write_all(&vec![3u8; BLOCK]).and_then(|()| out.finish().map(|_| ()));
        assert!(failed.is_err(), "a block that failed on the thread must fail the writer");
        // Dropped with a block in flight: it waits for it, and nothing is left running.
        let mut out = writer(File::create(dir.path().join("dropped.bin")).unwrap(), false);
        out.write_all(&vec![4u8; BLOCK + 1]).unwrap();
        drop(out);
        assert_eq!(std::fs::metadata(dir.path().join("dropped.bin")).unwrap().len(), BLOCK as u64);
    }

    #[test]
    fn a_short_source_is_an_error_not_a_short_file() {
        let dir = tempfile::tempdir().unwrap();
        let source_path = dir.path().join("source.bin");
        std::fs::write(&source_path, [1u8; 100]).unwrap();
        let mut out = DirectWriter::new(File::create(dir.path().join("out.bin")).unwrap());
        let err = out.copy_from(&File::open(&source_path).unwrap(), 50, 51).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_panicking_fill_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("artifact.bin");
        let result = std::panic::catch_unwind(|| {
            let _ = write_atomically(&path, |f| {
                f.write_all(b"half")?;
                panic!("writer bug")
            });
        });
        assert!(result.is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "temp file left behind");
    }
}
