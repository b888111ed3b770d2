//! Atomic file writes: a temp file in the destination folder, synced, then
//! renamed over the destination. A failed write never leaves a half-written
//! file where a good one was.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `path` with what `fill` writes; either the whole new content lands or
/// the old file (if any) stays untouched.
pub fn write_atomically(path: &Path, fill: impl FnOnce(&mut File) -> io::Result<()>) -> io::Result<()> {
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
    File::open(from)?.sync_all()?;
    std::fs::rename(from, to)
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
    if std::fs::hard_link(from, &tmp).is_err() {
        std::fs::copy(from, &tmp)?;
    }
    File::open(&tmp)?.sync_all()?;
    guard.rename_to(to)
}

/// Writes `bytes` to `out`; where they are a slice of a file (`origin`: the
/// file and their offset in it, a weight stored unchanged in a checkpoint or
/// a side file), the kernel copies them instead ([`copy_range`]).
pub fn write_or_copy(out: &mut io::BufWriter<&mut File>, bytes: &[u8], origin: Option<(&File, u64)>) -> io::Result<()> {
    let Some((source, offset)) = origin else { return out.write_all(bytes) };
    out.flush()?;
    copy_range(source, offset, bytes.len() as u64, out.get_mut())
}

/// Appends `len` bytes of `source` at `offset` to `out` at its position,
/// copied by the kernel (`copy_file_range`, which std's `io::copy` uses
/// between files: a shared extent where the file system has them, else a
/// copy that never passes through hfx's memory). On this project's machine
/// either way is bound by the page cache's write rate; the copy spares hfx
/// the reads of a map. A source shorter than that is an `UnexpectedEof`.
pub fn copy_range(source: &File, offset: u64, len: u64, out: &mut File) -> io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut reader = source.try_clone()?;
    reader.seek(SeekFrom::Start(offset))?;
    let copied = io::copy(&mut Read::take(reader, len), out)?;
    if copied != len {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("the source ended {} bytes early", len - copied)));
    }
    Ok(())
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
