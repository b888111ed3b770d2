//! The zip container of a `.pt2`: entries are stored (never compressed) and
//! their data 64-byte aligned, as PyTorch writes them, so weights can be used
//! straight from a memory map.
//!
//! Reading maps the file and lists entries with their byte ranges; nothing is
//! copied. Writing streams entries to an atomically renamed file, padding each
//! local header so the data lands on a 64-byte boundary (zip64 where needed).

use std::fs::File;
use std::io::{self, BufWriter, Seek, Write};
use std::path::{Path, PathBuf};

use memmap2::Mmap;

/// Data alignment PyTorch uses (and mmap-friendly readers rely on).
pub const ALIGNMENT: u64 = 64;

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("{path}: {reason}")]
    Malformed { path: String, reason: String },
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
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
    /// The file behind the map, for kernel-side copies of whole entries.
    file: Option<File>,
}

enum Backing {
    Map(Mmap),
    Bytes(Vec<u8>),
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

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

impl Archive {
    pub fn open(path: &Path) -> Result<Archive, ArchiveError> {
        let io = |source| ArchiveError::Io { path: path.display().to_string(), source };
        let file = File::open(path).map_err(io)?;
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
        Ok(Archive { path: path.to_path_buf(), map, entries, file: None })
    }

    /// Copies `entry` into `out` unchanged: from the file with a kernel-side
    /// copy where there is one (the weights never pass through this process's
    /// memory), else from the buffer.
    pub fn copy_entry(&self, entry: &Entry, out: &mut ArchiveWriter) -> io::Result<()> {
        match &self.file {
            Some(file) => out.add_copy(&entry.name, file, entry.offset, entry.len, entry.crc32),
            None => out.add(&entry.name, self.bytes(entry)),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn entry(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// The bytes of an entry, straight from the map.
    pub fn bytes(&self, entry: &Entry) -> &[u8] {
        &self.map[entry.offset as usize..(entry.offset + entry.len) as usize]
    }

    /// The bytes of an entry, checked against its CRC-32.
    pub fn checked_bytes(&self, entry: &Entry) -> Result<&[u8], ArchiveError> {
        let bytes = self.bytes(entry);
        if crc32fast::hash(bytes) != entry.crc32 {
            return Err(ArchiveError::Malformed {
                path: self.path.display().to_string(),
                reason: format!("entry `{}` is corrupt (CRC-32 mismatch)", entry.name),
            });
        }
        Ok(bytes)
    }
}

fn read_directory(b: &[u8]) -> Result<Vec<Entry>, String> {
    // The end-of-central-directory record is in the last 64 KiB + 22 bytes.
    let search_from = b.len().saturating_sub(22 + 65_535);
    let eocd = (search_from..b.len().saturating_sub(21))
        .rev()
        .find(|&i| u32_at(b, i) == Some(EOCD_SIG))
        .ok_or("no end of central directory (truncated file?)")?;
    let mut count = u16_at(b, eocd + 10).ok_or("short EOCD")? as u64;
    let mut dir_offset = u32_at(b, eocd + 16).ok_or("short EOCD")? as u64;
    if eocd >= 20 && u32_at(b, eocd - 20) == Some(EOCD64_LOCATOR_SIG) {
        let eocd64 = u64_at(b, eocd - 20 + 8).ok_or("short zip64 locator")? as usize;
        if u32_at(b, eocd64) != Some(EOCD64_SIG) {
            return Err("bad zip64 end of central directory".into());
        }
        count = u64_at(b, eocd64 + 32).ok_or("short zip64 EOCD")?;
        dir_offset = u64_at(b, eocd64 + 48).ok_or("short zip64 EOCD")?;
    }
    let mut entries = Vec::with_capacity(count.min(1 << 20) as usize);
    let mut at = dir_offset as usize;
    for _ in 0..count {
        if u32_at(b, at) != Some(CENTRAL_SIG) {
            return Err(format!("bad central directory entry at byte {at}"));
        }
        let method = u16_at(b, at + 10).ok_or("short entry")?;
        let crc32 = u32_at(b, at + 16).ok_or("short entry")?;
        let mut len = u32_at(b, at + 20).ok_or("short entry")? as u64;
        let mut uncompressed = u32_at(b, at + 24).ok_or("short entry")? as u64;
        let name_len = u16_at(b, at + 28).ok_or("short entry")? as usize;
        let extra_len = u16_at(b, at + 30).ok_or("short entry")? as usize;
        let comment_len = u16_at(b, at + 32).ok_or("short entry")? as usize;
        let mut local = u32_at(b, at + 42).ok_or("short entry")? as u64;
        let name = b.get(at + 46..at + 46 + name_len).ok_or("short entry name")?;
        let name = String::from_utf8(name.to_vec()).map_err(|_| "entry name is not UTF-8")?;
        let extra = b.get(at + 46 + name_len..at + 46 + name_len + extra_len).ok_or("short extra field")?;
        read_zip64_extra(extra, &mut uncompressed, &mut len, &mut local);
        if method != 0 {
            return Err(format!("entry `{name}` is compressed (method {method}); .pt2 entries are stored"));
        }
        if uncompressed != len {
            return Err(format!("entry `{name}` has inconsistent sizes"));
        }
        let local = local as usize;
        if u32_at(b, local) != Some(LOCAL_SIG) {
            return Err(format!("entry `{name}`: bad local header"));
        }
        let data = local as u64 + 30 + u16_at(b, local + 26).ok_or("short local header")? as u64
            + u16_at(b, local + 28).ok_or("short local header")? as u64;
        if data.checked_add(len).is_none_or(|end| end > b.len() as u64) {
            return Err(format!("entry `{name}` runs past the end of the file (truncated?)"));
        }
        entries.push(Entry { name, offset: data, len, crc32 });
        at += 46 + name_len + extra_len + comment_len;
    }
    Ok(entries)
}

/// Zip64 extended information: fields present only where the 32-bit ones are saturated.
fn read_zip64_extra(extra: &[u8], uncompressed: &mut u64, compressed: &mut u64, local: &mut u64) {
    let mut at = 0;
    while at + 4 <= extra.len() {
        let (id, size) = (u16_at(extra, at).unwrap_or(0), u16_at(extra, at + 2).unwrap_or(0) as usize);
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

/// Writes a `.pt2` zip: stored entries, 64-byte aligned data, atomically.
pub struct ArchiveWriter {
    path: PathBuf,
    out: BufWriter<File>,
    tmp: PathBuf,
    written: Vec<(String, u64, u64, u32)>,
    position: u64,
}

impl ArchiveWriter {
    /// Starts writing to a temp file beside `path`; `finish` renames it into place.
    pub fn create(path: &Path) -> io::Result<ArchiveWriter> {
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let tmp = dir.join(format!(".{}.{}.tmp", path.file_name().and_then(|n| n.to_str()).unwrap_or("out"), std::process::id()));
        let file = File::create(&tmp)?;
        Ok(ArchiveWriter { path: path.to_path_buf(), out: BufWriter::with_capacity(1 << 20, file), tmp, written: Vec::new(), position: 0 })
    }

    /// Appends a stored entry.
    pub fn add(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        self.header(name, data.len() as u64, crc32fast::hash(data))?;
        self.out.write_all(data)?;
        self.position += data.len() as u64;
        Ok(())
    }

    /// Appends a stored entry whose bytes are `len` bytes of `source` at
    /// `offset`, with their known CRC-32 (copied by the kernel where it can).
    pub fn add_copy(&mut self, name: &str, source: &File, offset: u64, len: u64, crc: u32) -> io::Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        self.header(name, len, crc)?;
        self.out.flush()?;
        let mut reader = source.try_clone()?;
        reader.seek(SeekFrom::Start(offset))?;
        let copied = io::copy(&mut Read::take(reader, len), self.out.get_mut())?;
        if copied != len {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("entry `{name}`: source ended early")));
        }
        self.position += len;
        Ok(())
    }

    /// Writes the local header of an entry of `len` bytes, padded so its data is aligned.
    fn header(&mut self, name: &str, len: u64, crc: u32) -> io::Result<()> {
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
        let result = self.write_directory();
        if result.is_err() {
            let _ = std::fs::remove_file(&self.tmp);
            return result;
        }
        std::fs::rename(&self.tmp, &self.path).inspect_err(|_| {
            let _ = std::fs::remove_file(&self.tmp);
        })
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
            let (size32, offset32) = if large { (u32::MAX, u32::MAX) } else { (*len as u32, *offset as u32) };
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
        self.out.flush()?;
        let file = self.out.get_mut();
        file.sync_all()?;
        let _ = file.stream_position();
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
