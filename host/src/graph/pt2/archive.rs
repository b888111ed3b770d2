//! The zip container of a `.pt2`: entries are stored (never compressed) and
//! their data 64-byte aligned, as PyTorch writes them, so weights can be used
//! straight from a memory map.
//!
//! Reading maps the file and lists entries with their byte ranges; nothing is
//! copied. Writing streams entries to an atomically renamed file, padding each
//! local header so the data lands on a 64-byte boundary (zip64 where needed).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};

use crate::atomic::DirectWriter;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use memmap2::Mmap;

/// Data alignment PyTorch uses (and mmap-friendly readers rely on).
pub const ALIGNMENT: u64 = 64;

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("{path}: {reason}")]
    Malformed { path: String, reason: String },
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
    #[error(transparent)]
    Input(#[from] crate::input::InputError),
}

/// One stored entry: where its bytes are in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub offset: u64,
    pub len: u64,
    pub crc32: u32,
}

/// A `.pt2` opened for reading: a memory map (or, for fuzzing and tests, a
/// buffer) and its entry table.
pub struct Archive {
    path: PathBuf,
    map: Backing,
    entries: Vec<Entry>,
    /// Entry index by name (names are unique: a duplicate is refused at open).
    index: HashMap<String, usize>,
    /// Per entry, once its CRC-32 was computed: whether it matched. Each entry
    /// is checked at most once, when its bytes are first used.
    verified: Vec<OnceLock<bool>>,
    /// The file behind the map, for kernel-side copies of whole entries.
    file: Option<File>,
}

enum Backing {
    Map(Mmap),
    Bytes(Vec<u8>),
}

impl Archive {
    /// Drops `bytes`, a slice of the archive's file map, from resident memory
    /// (see `Pt2::release`); an archive read into memory is left alone.
    pub fn release(&self, bytes: &[u8]) {
        if let Backing::Map(map) = &self.map {
            crate::weights::map::release_from(map, bytes);
        }
    }
}

impl std::ops::Deref for Backing {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Backing::Map(m) => m,
            Backing::Bytes(b) => b,
        }
    }
}

const EOCD_SIG: u32 = 0x0605_4b50;
const EOCD64_SIG: u32 = 0x0606_4b50;
const EOCD64_LOCATOR_SIG: u32 = 0x0706_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const LOCAL_SIG: u32 = 0x0403_4b50;

/// Sizes of the fixed parts of the records (without names and extra fields).
const CENTRAL_LEN: usize = 46;
const LOCAL_LEN: usize = 30;
const EOCD_LEN: usize = 22;
const EOCD64_LOCATOR_LEN: usize = 20;

fn field<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}
fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    field(b, at).map(u16::from_le_bytes)
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    field(b, at).map(u32::from_le_bytes)
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    field(b, at).map(u64::from_le_bytes)
}
/// `len` bytes at `at`, if the file holds them.
fn span(b: &[u8], at: usize, len: usize) -> Option<&[u8]> {
    b.get(at..at.checked_add(len)?)
}
/// A file offset read from the archive, as an index into the map if it is one.
fn offset(value: u64, what: &str, file_len: usize) -> Result<usize, String> {
    usize::try_from(value).ok().filter(|&v| v < file_len).ok_or_else(|| {
        format!("{what} at byte {value} is past the end of the file ({file_len} bytes)")
    })
}

impl Archive {
    /// Opens and maps `path`, which must be a regular file (a FIFO or device is
    /// refused at once instead of blocking).
    pub fn open(path: &Path) -> Result<Archive, ArchiveError> {
        let io = |source| ArchiveError::Io { path: path.display().to_string(), source };
        let file = crate::input::open_regular(path)?;
        // SAFETY: the map is read-only and private to this process; a file
        // changed underneath us while reading is outside what hfx defends against.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let mut archive = Self::over(path, Backing::Map(map))?;
        archive.file = Some(file);
        Ok(archive)
    }

    /// An archive held in memory; `name` stands in for the path in errors.
    pub fn from_bytes(name: &Path, bytes: Vec<u8>) -> Result<Archive, ArchiveError> {
        Self::over(name, Backing::Bytes(bytes))
    }

    fn over(path: &Path, map: Backing) -> Result<Archive, ArchiveError> {
        let entries = read_directory(&map).map_err(|reason| ArchiveError::Malformed {
            path: path.display().to_string(),
            reason: format!("not a readable .pt2 zip archive: {reason}"),
        })?;
        let index = entries.iter().enumerate().map(|(i, e)| (e.name.clone(), i)).collect();
        let verified = entries.iter().map(|_| OnceLock::new()).collect();
        Ok(Archive { path: path.to_path_buf(), map, entries, index, verified, file: None })
    }

    /// Copies `entry` into `out` unchanged, after checking its CRC-32: from the
    /// file with a kernel-side copy where there is one (the weights never pass
    /// through this process's memory but for the check), else from the buffer.
    pub fn copy_entry(&self, entry: &Entry, out: &mut ArchiveWriter) -> Result<(), ArchiveError> {
        let bytes = self.checked_bytes(entry)?;
        let written = match &self.file {
            Some(file) => out.add_copy(&entry.name, file, entry.offset, entry.len, entry.crc32),
            None => out.add(&entry.name, bytes),
        };
        written.map_err(|source| ArchiveError::Io { path: out.path.display().to_string(), source })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file and offset of `bytes` when they are a slice of this archive's map.
    pub fn origin(&self, bytes: &[u8]) -> Option<(&File, u64)> {
        match (&self.map, &self.file) {
            (Backing::Map(map), Some(file)) => {
                crate::weights::map::offset_in(map, bytes).map(|offset| (file, offset as u64))
            }
            _ => None,
        }
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn entry(&self, name: &str) -> Option<&Entry> {
        self.index.get(name).map(|&i| &self.entries[i])
    }

    /// The bytes of an entry of this archive, straight from the map, unchecked.
    pub fn bytes(&self, entry: &Entry) -> &[u8] {
        // Entries of this archive were checked to lie inside the file at open.
        let start = usize::try_from(entry.offset).unwrap_or(usize::MAX);
        let end = usize::try_from(entry.len)
            .ok()
            .and_then(|len| start.checked_add(len))
            .unwrap_or(usize::MAX);
        &self.map[start..end]
    }

    /// Computes the CRC-32 of the named entries not checked yet, spread over
    /// the machine's cores (largest first); each result is remembered for
    /// [`Archive::checked_bytes`], which reports a mismatch.
    pub fn precheck<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let mut todo: Vec<usize> =
            names.into_iter().filter_map(|n| self.index.get(n).copied()).collect();
        todo.sort_unstable();
        todo.dedup();
        todo.retain(|&i| self.verified[i].get().is_none());
        todo.sort_by_key(|&i| std::cmp::Reverse(self.entries[i].len));
        let threads =
            std::thread::available_parallelism().map_or(1, |n| n.get()).min(8).min(todo.len());
        let next = std::sync::atomic::AtomicUsize::new(0);
        let work = || {
            while let Some(&i) = todo.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                let _ = self.checked_bytes(&self.entries[i]);
            }
        };
        if threads <= 1 {
            return work();
        }
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(work);
            }
        });
    }

    /// The bytes of an entry, checked against its CRC-32 (computed once per
    /// entry and remembered).
    pub fn checked_bytes(&self, entry: &Entry) -> Result<&[u8], ArchiveError> {
        let bytes = self.bytes(entry);
        let ours = self.index.get(&entry.name).copied().filter(|&i| self.entries[i] == *entry);
        let good = match ours {
            Some(i) => *self.verified[i].get_or_init(|| crc32fast::hash(bytes) == entry.crc32),
            None => crc32fast::hash(bytes) == entry.crc32,
        };
        // A fuzzer's mutations of an entry's bytes must reach the parsers behind
        // the CRC (the mismatch itself is unit-tested), as image decoders do.
        #[allow(unexpected_cfgs)]
        let good = good || cfg!(fuzzing);
        if !good {
            return Err(ArchiveError::Malformed {
                path: self.path.display().to_string(),
                reason: format!("entry `{}` is corrupt (CRC-32 mismatch)", entry.name),
            });
        }
        Ok(bytes)
    }
}

/// The entry table, every record checked against the file: offsets and sizes
/// inside it (checked arithmetic throughout), local headers agreeing with the
/// central directory, names unique, data ranges not overlapping.
fn read_directory(b: &[u8]) -> Result<Vec<Entry>, String> {
    // The end-of-central-directory record is in the last 64 KiB + 22 bytes.
    let search_from = b.len().saturating_sub(EOCD_LEN + 65_535);
    let eocd = (search_from..b.len().saturating_sub(EOCD_LEN - 1))
        .rev()
        .find(|&i| u32_at(b, i) == Some(EOCD_SIG))
        .ok_or("no end of central directory (truncated file?)")?;
    let mut count = u16_at(b, eocd + 10).ok_or("short EOCD")? as u64;
    let mut dir_offset = u32_at(b, eocd + 16).ok_or("short EOCD")? as u64;
    if let Some(locator) =
        eocd.checked_sub(EOCD64_LOCATOR_LEN).filter(|&l| u32_at(b, l) == Some(EOCD64_LOCATOR_SIG))
    {
        let eocd64 = u64_at(b, locator + 8).ok_or("short zip64 locator")?;
        let eocd64 = offset(eocd64, "the zip64 end of central directory", b.len())?;
        if u32_at(b, eocd64) != Some(EOCD64_SIG) {
            return Err("bad zip64 end of central directory".into());
        }
        count = u64_at(b, eocd64 + 32).ok_or("short zip64 EOCD")?;
        dir_offset = u64_at(b, eocd64 + 48).ok_or("short zip64 EOCD")?;
    }
    // Each central record takes at least 46 bytes: a count past that is a lie.
    if count > (b.len() / CENTRAL_LEN) as u64 {
        return Err(format!("the directory claims {count} entries, more than the file can hold"));
    }
    let mut at = if count == 0 { 0 } else { offset(dir_offset, "the central directory", b.len())? };
    let mut entries: Vec<Entry> = Vec::with_capacity(count as usize);
    let mut names = std::collections::HashSet::new();
    // (start of local header, end of data, name) per entry, to refuse overlaps.
    let mut extents: Vec<(u64, u64, usize)> = Vec::with_capacity(count as usize);
    for _ in 0..count {
        if u32_at(b, at) != Some(CENTRAL_SIG) {
            return Err(format!("bad central directory entry at byte {at}"));
        }
        let short = || format!("short central directory entry at byte {at}");
        let method = u16_at(b, at + 10).ok_or_else(short)?;
        let crc32 = u32_at(b, at + 16).ok_or_else(short)?;
        let mut len = u32_at(b, at + 20).ok_or_else(short)? as u64;
        let mut uncompressed = u32_at(b, at + 24).ok_or_else(short)? as u64;
        let name_len = u16_at(b, at + 28).ok_or_else(short)? as usize;
        let extra_len = u16_at(b, at + 30).ok_or_else(short)? as usize;
        let comment_len = u16_at(b, at + 32).ok_or_else(short)? as usize;
        let mut local = u32_at(b, at + 42).ok_or_else(short)? as u64;
        let name_bytes = span(b, at + CENTRAL_LEN, name_len).ok_or("short entry name")?;
        let name = String::from_utf8(name_bytes.to_vec()).map_err(|_| "entry name is not UTF-8")?;
        let extra = span(b, at + CENTRAL_LEN + name_len, extra_len)
            .ok_or_else(|| format!("entry `{name}`: short extra field"))?;
        read_zip64_extra(extra, &mut uncompressed, &mut len, &mut local);
        if method != 0 {
            return Err(format!(
                "entry `{name}` is compressed (method {method}); .pt2 entries are stored"
            ));
        }
        if uncompressed != len {
            return Err(format!("entry `{name}` has inconsistent sizes"));
        }
        if !names.insert(name.clone()) {
            return Err(format!("entry `{name}` appears twice"));
        }
        let local_at = offset(local, &format!("entry `{name}`: the local header"), b.len())?;
        let data = check_local_header(b, local_at, name_bytes, crc32, len).map_err(|r| {
            format!("entry `{name}`: local header{}{r}", if r.starts_with('\'') { "" } else { " " })
        })?;
        let end = data.checked_add(len).filter(|&end| end <= b.len() as u64);
        let end = end
            .ok_or_else(|| format!("entry `{name}` runs past the end of the file (truncated?)"))?;
        extents.push((local, end, entries.len()));
        entries.push(Entry { name, offset: data, len, crc32 });
        at = (at + CENTRAL_LEN + name_len + extra_len)
            .checked_add(comment_len)
            .ok_or("central directory past the end")?;
    }
    extents.sort_unstable();
    if let Some(w) = extents.windows(2).find(|w| w[1].0 < w[0].1) {
        return Err(format!(
            "entries `{}` and `{}` overlap",
            entries[w[0].2].name, entries[w[1].2].name
        ));
    }
    Ok(entries)
}

/// Checks the local header at `at` against the central directory's record of
/// the same entry (signature, method, name; CRC and sizes unless they follow
/// the data); returns where the data starts.
fn check_local_header(
    b: &[u8],
    at: usize,
    name: &[u8],
    crc32: u32,
    len: u64,
) -> Result<u64, String> {
    if u32_at(b, at) != Some(LOCAL_SIG) {
        return Err("is missing (bad signature)".into());
    }
    let short = || "is cut short".to_string();
    let flags = u16_at(b, at + 6).ok_or_else(short)?;
    let method = u16_at(b, at + 8).ok_or_else(short)?;
    let local_crc = u32_at(b, at + 14).ok_or_else(short)?;
    let mut local_compressed = u32_at(b, at + 18).ok_or_else(short)? as u64;
    let mut local_len = u32_at(b, at + 22).ok_or_else(short)? as u64;
    let name_len = u16_at(b, at + 26).ok_or_else(short)? as usize;
    let extra_len = u16_at(b, at + 28).ok_or_else(short)? as usize;
    if method != 0 {
        return Err(format!("says method {method}, the directory says stored"));
    }
    if span(b, at + LOCAL_LEN, name_len) != Some(name) {
        return Err(format!(
            "names another entry (name length {name_len}, the directory says {})",
            name.len()
        ));
    }
    let extra = span(b, at + LOCAL_LEN + name_len, extra_len).ok_or_else(short)?;
    let data = at + LOCAL_LEN + name_len + extra_len;
    // Bit 3: CRC and sizes are in a data descriptor after the data (zero here),
    // as torch's writer does it: the descriptor must agree with the directory.
    if flags & 0x0008 != 0 {
        let mut descriptor = usize::try_from(len)
            .ok()
            .and_then(|len| data.checked_add(len))
            .ok_or("data past the end")?;
        if u32_at(b, descriptor) == Some(0x0807_4b50) {
            descriptor += 4;
        }
        if u32_at(b, descriptor) != Some(crc32) {
            return Err(format!(
                "'s data descriptor disagrees with the directory's CRC-32 {crc32:08x}"
            ));
        }
        let sizes32 =
            (u32_at(b, descriptor + 4).map(u64::from), u32_at(b, descriptor + 8).map(u64::from));
        let sizes64 = (u64_at(b, descriptor + 4), u64_at(b, descriptor + 12));
        if sizes32 != (Some(len), Some(len)) && sizes64 != (Some(len), Some(len)) {
            return Err(format!("'s data descriptor disagrees with the directory's size {len}"));
        }
    } else {
        let mut unused = 0;
        read_zip64_extra(extra, &mut local_len, &mut local_compressed, &mut unused);
        if local_crc != crc32 {
            return Err(format!("has CRC-32 {local_crc:08x}, the directory {crc32:08x}"));
        }
        if local_len != len || local_compressed != len {
            return Err(format!("says {local_len} bytes, the directory {len}"));
        }
    }
    Ok(data as u64)
}

/// Zip64 extended information: fields present only where the 32-bit ones are saturated.
fn read_zip64_extra(extra: &[u8], uncompressed: &mut u64, compressed: &mut u64, local: &mut u64) {
    let mut at = 0;
    while at + 4 <= extra.len() {
        let (id, size) =
            (u16_at(extra, at).unwrap_or(0), u16_at(extra, at + 2).unwrap_or(0) as usize);
        if id == 0x0001 {
            let mut field = at + 4;
            for value in [uncompressed, compressed, local] {
                if *value == u32::MAX as u64 {
                    if let Some(v) = u64_at(extra, field) {
                        *value = v;
                    }
                    field += 8;
                }
            }
            return;
        }
        at += 4 + size;
    }
}

/// A writer that counts what passes through it.
struct Counting<W> {
    inner: W,
    count: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Writes a `.pt2` zip: stored entries, 64-byte aligned data, atomically.
/// Its temp file is removed on every way out but `finish` succeeding: a
/// failed `add`, a failed `finish`, or the writer dropped unfinished.
pub struct ArchiveWriter {
    path: PathBuf,
    out: DirectWriter<File>,
    tmp: crate::atomic::TempGuard,
    written: Vec<(String, u64, u64, u32)>,
    position: u64,
    /// Set when a write failed part-way: the file is unusable from then on.
    failed: bool,
}

impl ArchiveWriter {
    /// Starts writing to a temp file beside `path`; `finish` renames it into place.
    pub fn create(path: &Path) -> io::Result<ArchiveWriter> {
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let (tmp, file) = crate::atomic::temp_file(dir, path)?;
        let tmp = crate::atomic::TempGuard::new(tmp);
        Ok(ArchiveWriter {
            path: path.to_path_buf(),
            out: DirectWriter::new(file),
            tmp,
            written: Vec::new(),
            position: 0,
            failed: false,
        })
    }

    /// Where `finish` puts the archive.
    pub fn target(&self) -> &Path {
        &self.path
    }

    /// Frees the writer's buffers until the next entry ([`DirectWriter::park`]).
    pub fn park(&mut self) -> std::io::Result<()> {
        self.out.park()
    }

    /// The temp file being written (removed unless `finish` succeeds).
    pub fn temp_path(&self) -> &Path {
        self.tmp.path()
    }

    /// Runs one write step; a failure makes the writer refuse everything after.
    fn step(&mut self, write: impl FnOnce(&mut Self) -> io::Result<()>) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::other(format!(
                "{}: an earlier write failed",
                self.path.display()
            )));
        }
        write(self).inspect_err(|_| self.failed = true)
    }

    /// Appends a stored entry.
    pub fn add(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        self.step(|w| {
            w.header(name, data.len() as u64, crc32fast::hash(data))?;
            w.out.write_all(data)?;
            w.position += data.len() as u64;
            Ok(())
        })
    }

    /// Appends a stored entry of `len` bytes with CRC-32 `crc`, which `fill`
    /// writes (bytes made as they are written: a weight converted on its way).
    pub fn add_streamed(
        &mut self,
        name: &str,
        len: u64,
        crc: u32,
        fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        self.step(|w| {
            w.header(name, len, crc)?;
            let mut counting = Counting { inner: &mut w.out, count: 0 };
            fill(&mut counting)?;
            if counting.count != len {
                return Err(io::Error::other(format!(
                    "entry `{name}`: {} bytes written, {len} announced",
                    counting.count
                )));
            }
            w.position += len;
            Ok(())
        })
    }

    /// Appends a stored entry whose bytes are `len` bytes of `source` at
    /// `offset`, with their known CRC-32 (read from that file, not from a map).
    pub fn add_copy(
        &mut self,
        name: &str,
        source: &File,
        offset: u64,
        len: u64,
        crc: u32,
    ) -> io::Result<()> {
        self.step(|w| {
            w.header(name, len, crc)?;
            w.out.copy_from(source, offset, len).map_err(|e| match e.kind() {
                io::ErrorKind::UnexpectedEof => {
                    io::Error::new(e.kind(), format!("entry `{name}`: source ended early"))
                }
                _ => e,
            })?;
            w.position += len;
            Ok(())
        })
    }

    /// Writes the local header of an entry of `len` bytes, padded so its data is aligned.
    fn header(&mut self, name: &str, len: u64, crc: u32) -> io::Result<()> {
        if name.len() > u16::MAX as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("entry name of {} bytes is over the zip limit of 65535", name.len()),
            ));
        }
        let offset = self.position;
        let large = len >= u32::MAX as u64 || offset >= u32::MAX as u64;
        let zip64_len = if large { 20 } else { 0 };
        // Pad with an extra field (id 0x4246, "FB", as PyTorch does) up to the alignment.
        let header = 30 + name.len() as u64 + zip64_len + 4;
        let padding = (ALIGNMENT - (offset + header) % ALIGNMENT) % ALIGNMENT;
        let mut h = Vec::with_capacity(header as usize + padding as usize);
        h.extend_from_slice(&LOCAL_SIG.to_le_bytes());
        h.extend_from_slice(&(if large { 45u16 } else { 20 }).to_le_bytes()); // version needed
        h.extend_from_slice(&0u16.to_le_bytes()); // flags
        h.extend_from_slice(&0u16.to_le_bytes()); // stored
        h.extend_from_slice(&0u16.to_le_bytes()); // time
        h.extend_from_slice(&0x21u16.to_le_bytes()); // date 1980-01-01
        h.extend_from_slice(&crc.to_le_bytes());
        let size32 = if large { u32::MAX } else { len as u32 };
        h.extend_from_slice(&size32.to_le_bytes());
        h.extend_from_slice(&size32.to_le_bytes());
        h.extend_from_slice(&(name.len() as u16).to_le_bytes());
        h.extend_from_slice(&((zip64_len + 4 + padding) as u16).to_le_bytes());
        h.extend_from_slice(name.as_bytes());
        if large {
            h.extend_from_slice(&1u16.to_le_bytes());
            h.extend_from_slice(&16u16.to_le_bytes());
            h.extend_from_slice(&len.to_le_bytes());
            h.extend_from_slice(&len.to_le_bytes());
        }
        h.extend_from_slice(&0x4246u16.to_le_bytes());
        h.extend_from_slice(&(padding as u16).to_le_bytes());
        h.resize(h.len() + padding as usize, 0);
        self.out.write_all(&h)?;
        self.position += h.len() as u64;
        self.written.push((name.to_string(), offset, len, crc));
        Ok(())
    }

    /// Writes the central directory, syncs, and renames into place.
    pub fn finish(mut self) -> io::Result<()> {
        // On an error `self` is dropped, and with it the temp file.
        self.step(Self::write_directory)?;
        let ArchiveWriter { path, out, tmp, .. } = self;
        let (file, _) = out.finish()?;
        file.sync_all()?;
        drop(file);
        tmp.rename_to(&path)
    }

    fn write_directory(&mut self) -> io::Result<()> {
        let start = self.position;
        let mut dir = Vec::new();
        for (name, offset, len, crc) in &self.written {
            let large = *len >= u32::MAX as u64 || *offset >= u32::MAX as u64;
            dir.extend_from_slice(&CENTRAL_SIG.to_le_bytes());
            dir.extend_from_slice(&(if large { 45u16 } else { 20 }).to_le_bytes()); // made by
            dir.extend_from_slice(&(if large { 45u16 } else { 20 }).to_le_bytes()); // needed
            dir.extend_from_slice(&[0, 0, 0, 0, 0, 0]); // flags, method, time
            dir.extend_from_slice(&0x21u16.to_le_bytes());
            dir.extend_from_slice(&crc.to_le_bytes());
            let (size32, offset32) =
                if large { (u32::MAX, u32::MAX) } else { (*len as u32, *offset as u32) };
            dir.extend_from_slice(&size32.to_le_bytes());
            dir.extend_from_slice(&size32.to_le_bytes());
            dir.extend_from_slice(&(name.len() as u16).to_le_bytes());
            dir.extend_from_slice(&(if large { 28u16 } else { 0 }).to_le_bytes());
            dir.extend_from_slice(&[0; 6]); // comment length, disk, internal attributes
            dir.extend_from_slice(&0u32.to_le_bytes()); // external attributes
            dir.extend_from_slice(&offset32.to_le_bytes());
            dir.extend_from_slice(name.as_bytes());
            if large {
                dir.extend_from_slice(&1u16.to_le_bytes());
                dir.extend_from_slice(&24u16.to_le_bytes());
                dir.extend_from_slice(&len.to_le_bytes());
                dir.extend_from_slice(&len.to_le_bytes());
                dir.extend_from_slice(&offset.to_le_bytes());
            }
        }
        self.out.write_all(&dir)?;
        let end = start + dir.len() as u64;
        let count = self.written.len() as u64;
        let zip64 = count >= u16::MAX as u64 || start >= u32::MAX as u64 || end >= u32::MAX as u64;
        let mut tail = Vec::new();
        if zip64 {
            tail.extend_from_slice(&EOCD64_SIG.to_le_bytes());
            tail.extend_from_slice(&44u64.to_le_bytes());
            tail.extend_from_slice(&45u16.to_le_bytes());
            tail.extend_from_slice(&45u16.to_le_bytes());
            tail.extend_from_slice(&[0; 8]);
            tail.extend_from_slice(&count.to_le_bytes());
            tail.extend_from_slice(&count.to_le_bytes());
            tail.extend_from_slice(&(dir.len() as u64).to_le_bytes());
            tail.extend_from_slice(&start.to_le_bytes());
            tail.extend_from_slice(&EOCD64_LOCATOR_SIG.to_le_bytes());
            tail.extend_from_slice(&0u32.to_le_bytes());
            tail.extend_from_slice(&end.to_le_bytes());
            tail.extend_from_slice(&1u32.to_le_bytes());
        }
        tail.extend_from_slice(&EOCD_SIG.to_le_bytes());
        tail.extend_from_slice(&[0; 4]);
        let count16 = count.min(u16::MAX as u64) as u16;
        tail.extend_from_slice(&count16.to_le_bytes());
        tail.extend_from_slice(&count16.to_le_bytes());
        tail.extend_from_slice(&(dir.len().min(u32::MAX as usize) as u32).to_le_bytes());
        tail.extend_from_slice(&(start.min(u32::MAX as u64) as u32).to_le_bytes());
        tail.extend_from_slice(&0u16.to_le_bytes());
        self.out.write_all(&tail)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_archives_read_back_aligned() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.pt2");
        let mut w = ArchiveWriter::create(&path).unwrap();
        w.add("a/archive_format", b"pt2").unwrap();
        let weights: Vec<u8> = (0..1000u32).flat_map(|i| i.to_le_bytes()).collect();
        w.add("a/data/weights/weight_0", &weights).unwrap();
        w.finish().unwrap();
        let a = Archive::open(&path).unwrap();
        assert_eq!(a.entries().len(), 2);
        for e in a.entries() {
            assert_eq!(e.offset % ALIGNMENT, 0, "{} not aligned", e.name);
            a.checked_bytes(e).unwrap();
        }
        assert_eq!(a.bytes(a.entry("a/data/weights/weight_0").unwrap()), &weights[..]);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "temp file left");
    }

    /// A small archive's bytes: a JSON entry and a weight.
    fn small_archive() -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.pt2");
        let mut w = ArchiveWriter::create(&path).unwrap();
        w.add("a/archive_format", b"pt2").unwrap();
        w.add("a/data/weights/weight_0", &[7; 256]).unwrap();
        w.finish().unwrap();
        std::fs::read(&path).unwrap()
    }

    fn eocd_of(bytes: &[u8]) -> usize {
        (0..bytes.len() - 21).rev().find(|&i| u32_at(bytes, i) == Some(EOCD_SIG)).unwrap()
    }

    fn open_error(bytes: Vec<u8>) -> String {
        let e = Archive::from_bytes(Path::new("x.pt2"), bytes)
            .err()
            .expect("must be refused")
            .to_string();
        assert!(
            e.starts_with("x.pt2: not a readable .pt2 zip archive: ") && !e.contains('\n'),
            "{e}"
        );
        e
    }

    /// `bytes` with `record` inserted before the end-of-central-directory record.
    fn before_eocd(bytes: &[u8], record: &[u8]) -> Vec<u8> {
        let eocd = eocd_of(bytes);
        [&bytes[..eocd], record, &bytes[eocd..]].concat()
    }

    fn locator(eocd64_at: u64) -> Vec<u8> {
        [
            &EOCD64_LOCATOR_SIG.to_le_bytes()[..],
            &0u32.to_le_bytes(),
            &eocd64_at.to_le_bytes(),
            &1u32.to_le_bytes(),
        ]
        .concat()
    }

    #[test]
    fn zip64_pointers_past_the_file_are_errors_not_panics() {
        let bytes = small_archive();
        // The zip64 locator's pointer at 2^64 - 1 (and other values past the end).
        for pointer in [u64::MAX, u64::MAX - 3, 1 << 63, bytes.len() as u64 + 100] {
            let e = open_error(before_eocd(&bytes, &locator(pointer)));
            assert!(
                e.contains("zip64 end of central directory at byte") && e.contains("past the end"),
                "{e}"
            );
        }
        // A real zip64 record whose central-directory offset is 2^64 - 1, then just past the end.
        let eocd = eocd_of(&bytes);
        for dir_offset in [u64::MAX, u64::MAX - 20, bytes.len() as u64 + 1000] {
            let mut record = EOCD64_SIG.to_le_bytes().to_vec();
            record.extend_from_slice(&44u64.to_le_bytes());
            record.extend_from_slice(&[45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            record.extend_from_slice(&2u64.to_le_bytes());
            record.extend_from_slice(&2u64.to_le_bytes());
            record.extend_from_slice(&100u64.to_le_bytes());
            record.extend_from_slice(&dir_offset.to_le_bytes());
            let with = before_eocd(&bytes, &[record, locator(eocd as u64)].concat());
            let e = open_error(with);
            assert!(
                e.contains("the central directory at byte") && e.contains("past the end"),
                "{e}"
            );
        }
        // An entry count no file could hold.
        let mut record = EOCD64_SIG.to_le_bytes().to_vec();
        record.extend_from_slice(&44u64.to_le_bytes());
        record.extend_from_slice(&[45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        record.extend_from_slice(&u64::MAX.to_le_bytes());
        record.extend_from_slice(&u64::MAX.to_le_bytes());
        record.extend_from_slice(&100u64.to_le_bytes());
        record.extend_from_slice(&0u64.to_le_bytes());
        let e = open_error(before_eocd(&bytes, &[record, locator(eocd as u64)].concat()));
        assert!(e.contains("claims 18446744073709551615 entries"), "{e}");
    }

    /// Offset of the central record of entry `name` and of its local header.
    fn records(bytes: &[u8], name: &str) -> (usize, usize) {
        let eocd = eocd_of(bytes);
        let mut at = u32_at(bytes, eocd + 16).unwrap() as usize;
        loop {
            let name_len = u16_at(bytes, at + 28).unwrap() as usize;
            if &bytes[at + 46..at + 46 + name_len] == name.as_bytes() {
                return (at, u32_at(bytes, at + 42).unwrap() as usize);
            }
            at += 46
                + name_len
                + u16_at(bytes, at + 30).unwrap() as usize
                + u16_at(bytes, at + 32).unwrap() as usize;
        }
    }

    #[test]
    fn local_headers_must_agree_with_the_central_directory() {
        let bytes = small_archive();
        let (_, local) = records(&bytes, "a/data/weights/weight_0");
        let edit = |at: usize, value: &[u8]| {
            let mut b = bytes.clone();
            b[at..at + value.len()].copy_from_slice(value);
            open_error(b)
        };
        // Local name length one short / long: the data would start elsewhere.
        let e = edit(local + 26, &(("a/data/weights/weight_0".len() - 1) as u16).to_le_bytes());
        assert!(
            e.contains("entry `a/data/weights/weight_0`: local header names another entry"),
            "{e}"
        );
        let e = edit(local + 30, b"b");
        assert!(e.contains("local header names another entry"), "{e}");
        // Sizes and CRC that disagree with the directory.
        let e = edit(local + 22, &255u32.to_le_bytes());
        assert!(e.contains("local header says 255 bytes, the directory 256"), "{e}");
        let e = edit(local + 18, &0u32.to_le_bytes());
        assert!(e.contains("the directory 256"), "{e}");
        let e = edit(local + 14, &0u32.to_le_bytes());
        assert!(e.contains("local header has CRC-32 00000000"), "{e}");
        // An extra-field length that runs the data off its place (and past the end).
        let e = edit(local + 28, &u16::MAX.to_le_bytes());
        assert!(e.contains("weight_0"), "{e}");
        let e = edit(local + 8, &8u16.to_le_bytes());
        assert!(e.contains("local header says method 8"), "{e}");
    }

    #[test]
    fn duplicate_and_overlapping_entries_are_refused() {
        let bytes = small_archive();
        let (central, _) = records(&bytes, "a/data/weights/weight_0");
        // Rename the weight to the other entry's name (same length: `a/archive_format` is shorter, so pad).
        let mut b = bytes.clone();
        let (first_central, first_local) = records(&bytes, "a/archive_format");
        // Point the weight's central record at the first entry's local header: overlap, and a name mismatch.
        b[central + 42..central + 46].copy_from_slice(&(first_local as u32).to_le_bytes());
        let e = open_error(b);
        assert!(e.contains("local header names another entry"), "{e}");
        // Two central records for one entry.
        let eocd = eocd_of(&bytes);
        let record_len = central - first_central;
        let mut b = bytes[..eocd].to_vec();
        b.extend_from_slice(&bytes[first_central..first_central + record_len]);
        let dir_start = u32_at(&bytes, eocd + 16).unwrap();
        let mut tail = bytes[eocd..].to_vec();
        tail[8..10].copy_from_slice(&3u16.to_le_bytes());
        tail[10..12].copy_from_slice(&3u16.to_le_bytes());
        tail[16..20].copy_from_slice(&dir_start.to_le_bytes());
        b.extend_from_slice(&tail);
        let e = open_error(b);
        assert!(e.contains("entry `a/archive_format` appears twice"), "{e}");
    }

    #[test]
    fn crc_is_checked_once_per_entry() {
        let mut bytes = small_archive();
        let a = Archive::from_bytes(Path::new("x.pt2"), bytes.clone()).unwrap();
        let weight = a.entry("a/data/weights/weight_0").unwrap().clone();
        assert!(a.checked_bytes(&weight).is_ok());
        assert_eq!(a.verified[1].get(), Some(&true));
        bytes[weight.offset as usize + 100] ^= 1;
        let a = Archive::from_bytes(Path::new("x.pt2"), bytes).unwrap();
        let e = a.checked_bytes(&weight).unwrap_err().to_string();
        assert_eq!(e, "x.pt2: entry `a/data/weights/weight_0` is corrupt (CRC-32 mismatch)");
        assert_eq!(a.verified[1].get(), Some(&false));
        assert!(a.checked_bytes(&weight).is_err(), "remembered");
        // Checked ahead on all cores: the results are what `checked_bytes` reports.
        let mut bytes = small_archive();
        bytes[weight.offset as usize] ^= 1;
        let a = Archive::from_bytes(Path::new("x.pt2"), bytes).unwrap();
        a.precheck(["a/archive_format", "a/data/weights/weight_0", "a/absent"]);
        assert_eq!((a.verified[0].get(), a.verified[1].get()), (Some(&true), Some(&false)));
        // Copying a corrupt entry into a new archive is refused too.
        let dir = tempfile::tempdir().unwrap();
        let mut out = ArchiveWriter::create(&dir.path().join("o.pt2")).unwrap();
        assert!(a
            .copy_entry(&weight, &mut out)
            .unwrap_err()
            .to_string()
            .contains("CRC-32 mismatch"));
    }

    #[test]
    fn failed_or_abandoned_writes_leave_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("o.pt2");
        let listing = || {
            std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect::<Vec<_>>()
        };
        // Adding an entry fails (its source is shorter than it says): the temp file goes with the writer.
        let source_path = dir.path().join("source.bin");
        std::fs::write(&source_path, [1u8; 100]).unwrap();
        let source = File::open(&source_path).unwrap();
        let mut w = ArchiveWriter::create(&path).unwrap();
        assert!(w.temp_path().exists());
        w.add("a/archive_format", b"pt2").unwrap();
        let e = w.add_copy("a/data/weights/weight_0", &source, 0, 1000, 0).unwrap_err();
        assert!(e.to_string().contains("source ended early"), "{e}");
        // The writer refuses to go on with a broken file.
        assert!(w.add("a/more", b"x").unwrap_err().to_string().contains("an earlier write failed"));
        assert!(w.finish().is_err());
        assert_eq!(listing(), ["source.bin"]);
        // A name too long for a zip, then dropped.
        let mut w = ArchiveWriter::create(&path).unwrap();
        assert!(w
            .add(&"n".repeat(70_000), b"x")
            .unwrap_err()
            .to_string()
            .contains("over the zip limit"));
        drop(w);
        assert_eq!(listing(), ["source.bin"]);
        // Dropped without `finish` after good writes.
        let mut w = ArchiveWriter::create(&path).unwrap();
        w.add("a/archive_format", b"pt2").unwrap();
        drop(w);
        assert_eq!(listing(), ["source.bin"]);
        // A failing rename (the target is a non-empty folder) removes the temp file too.
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), b"").unwrap();
        let mut w = ArchiveWriter::create(&path).unwrap();
        w.add("a/archive_format", b"pt2").unwrap();
        assert!(w.finish().is_err());
        let mut names = listing();
        names.sort();
        assert_eq!(names, ["o.pt2", "source.bin"]);
    }

    #[test]
    fn truncated_archives_are_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.pt2");
        let mut w = ArchiveWriter::create(&path).unwrap();
        w.add("a/x", &[7; 300]).unwrap();
        w.finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        for cut in [10, bytes.len() / 2, bytes.len() - 5] {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            let e = Archive::open(&path).err().unwrap().to_string();
            assert!(e.contains("not a readable .pt2 zip archive"), "{e}");
        }
    }
}
