//! Reading the files hfx is given: regular files only, and never more than a
//! limit. A FIFO, a device or a folder is refused before anything reads from
//! it (a FIFO would block the open itself, and then the read forever); a file
//! over its limit is refused before it is read, and a file that grows while it
//! is read stops at the limit.
//!
//! ```no_run
//! # use std::path::Path;
//! let text = hfx::input::read_to_string_bounded(Path::new("plugin.toml"), 1 << 20)?;
//! # Ok::<(), hfx::input::InputError>(())
//! ```

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// Why an input file was refused. Every message is one line naming the file.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: is {kind}, not a regular file; give the path of a regular file", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error(
        "{}: is {} ({size} bytes), over the {} limit for this kind of file; check that it is the right file",
        path.display(), human(*size), human(*limit)
    )]
    TooLarge { path: PathBuf, size: u64, limit: u64 },
}

impl InputError {
    pub fn path(&self) -> &Path {
        match self {
            InputError::Io { path, .. }
            | InputError::NotRegular { path, .. }
            | InputError::TooLarge { path, .. } => path,
        }
    }
}

impl From<InputError> for io::Error {
    /// For callers that speak `io::Result`: the message (path included) is kept.
    fn from(e: InputError) -> io::Error {
        let kind = match &e {
            InputError::Io { source, .. } => source.kind(),
            InputError::NotRegular { .. } | InputError::TooLarge { .. } => {
                io::ErrorKind::InvalidInput
            }
        };
        io::Error::new(kind, e.to_string())
    }
}

/// Bytes as people read them: `512 B`, `16 MiB`, `1.5 GiB`.
fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn kind_of(meta: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a folder"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

/// `O_NONBLOCK`: opening a FIFO with it returns at once instead of waiting for
/// a writer (no effect on regular files).
#[cfg(any(target_os = "linux", target_os = "android"))]
const O_NONBLOCK: i32 = 0o4000;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const O_NONBLOCK: i32 = 0x0004; // macOS and the BSDs

/// Opens `path` (symlinks followed) for reading if it is a regular file. The
/// type is checked before the open and again on the open file (`fstat`), and
/// the open itself does not block, so a FIFO swapped in between cannot hang.
pub fn open_regular(path: &Path) -> Result<File, InputError> {
    let io = |source| InputError::Io { path: path.to_path_buf(), source };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(InputError::NotRegular { path: path.to_path_buf(), kind: kind_of(&meta) });
    }
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new().read(true).custom_flags(O_NONBLOCK).open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(InputError::NotRegular { path: path.to_path_buf(), kind: kind_of(&meta) });
    }
    Ok(file)
}

/// [`open_regular`] for a file the trace worker wrote (its scratch output): a
/// symbolic link as the last part is refused, not followed, so the worker
/// cannot point hfx at a file it may not read itself.
pub fn open_written(path: &Path) -> Result<File, InputError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| {
            if source.raw_os_error() == Some(libc::ELOOP) {
                InputError::NotRegular { path: path.to_path_buf(), kind: "a symbolic link" }
            } else {
                InputError::Io { path: path.to_path_buf(), source }
            }
        })?;
    let meta =
        file.metadata().map_err(|source| InputError::Io { path: path.to_path_buf(), source })?;
    if !meta.is_file() {
        return Err(InputError::NotRegular { path: path.to_path_buf(), kind: kind_of(&meta) });
    }
    Ok(file)
}

/// Opens `path` as [`open_regular`] does and refuses it if it is over `limit`
/// bytes. Returns the file and its size.
pub fn open_bounded(path: &Path, limit: u64) -> Result<(File, u64), InputError> {
    let file = open_regular(path)?;
    let size = file
        .metadata()
        .map_err(|source| InputError::Io { path: path.to_path_buf(), source })?
        .len();
    if size > limit {
        return Err(InputError::TooLarge { path: path.to_path_buf(), size, limit });
    }
    Ok((file, size))
}

/// The whole of regular file `path`, at most `limit` bytes.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, InputError> {
    let (file, size) = open_bounded(path, limit)?;
    let mut bytes = Vec::with_capacity(size.min(limit) as usize);
    // One byte past the limit tells a file that grew while read from one that did not.
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| InputError::Io { path: path.to_path_buf(), source })?;
    if bytes.len() as u64 > limit {
        return Err(InputError::TooLarge {
            path: path.to_path_buf(),
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

/// The whole of regular file `path` as UTF-8 text, at most `limit` bytes.
pub fn read_to_string_bounded(path: &Path, limit: u64) -> Result<String, InputError> {
    let bytes = read_bounded(path, limit)?;
    String::from_utf8(bytes).map_err(|e| InputError::Io {
        path: path.to_path_buf(),
        source: io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
        assert!(status.success());
    }

    #[test]
    fn regular_files_under_the_limit_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.toml");
        std::fs::write(&path, "x = 1\n").unwrap();
        assert_eq!(read_to_string_bounded(&path, 6).unwrap(), "x = 1\n");
        assert_eq!(read_bounded(&path, 100).unwrap(), b"x = 1\n");
    }

    #[test]
    fn files_over_the_limit_are_refused_naming_file_size_and_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.toml");
        std::fs::write(&path, vec![b'#'; 3 << 20]).unwrap();
        let e = read_to_string_bounded(&path, 1 << 20).unwrap_err().to_string();
        assert!(
            e.contains("big.toml")
                && e.contains("3 MiB")
                && e.contains("1 MiB limit")
                && e.contains("3145728 bytes"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn fifos_folders_and_devices_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("in.pt2");
        mkfifo(&fifo);
        let e = read_bounded(&fifo, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("in.pt2") && e.contains("FIFO"), "{e}");
        let e = open_regular(dir.path()).unwrap_err().to_string();
        assert!(e.contains("a folder"), "{e}");
        let e = open_regular(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(e.contains("character device"), "{e}");
        // A symlink to a FIFO is a FIFO.
        let link = dir.path().join("link.pt2");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        assert!(matches!(open_regular(&link), Err(InputError::NotRegular { .. })));
    }

    #[test]
    fn missing_files_and_bad_text_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_to_string_bounded(&dir.path().join("nope.json"), 10).unwrap_err().to_string();
        assert!(e.contains("nope.json"), "{e}");
        let path = dir.path().join("bin.json");
        std::fs::write(&path, [b'a', 0xff]).unwrap();
        let e = read_to_string_bounded(&path, 10).unwrap_err().to_string();
        assert!(e.contains("bin.json") && e.contains("not UTF-8"), "{e}");
        let io: io::Error = read_bounded(&dir.path().join("nope.json"), 1).unwrap_err().into();
        assert_eq!(io.kind(), io::ErrorKind::NotFound);
        assert!(io.to_string().contains("nope.json"));
    }
}
