//! Where a weight's bytes come from: a model folder's checkpoint files,
//! opened only as regular files of that folder ([`open_checkpoint`]), and
//! the bytes a plan's weight names in them ([`Checkpoints`]).

use std::path::{Path, PathBuf};

use super::cast::Cast;
use super::files::WeightFiles;
use super::map::{offset_in, release_from};
use super::place::Place;
use super::plan::PlannedWeight;

/// The checkpoint files a plan may read: the model folder's, and no other
/// (the plan is a worker line, and the `.pt2`'s side weights' index may
/// name no other file either).
/// Each is admitted and opened by [`open_checkpoint`].
pub struct Checkpoints {
    allowed: Vec<PathBuf>,
    opened: Vec<Opened>,
}

/// A checkpoint file, opened and mapped read-only.
pub struct Opened {
    /// The path it was opened at ([`open_checkpoint`]'s).
    pub path: PathBuf,
    pub file: std::fs::File,
    pub map: memmap2::Mmap,
}

/// A planned weight's bytes: where they are, and the conversion they are
/// written through (None: written as stored).
pub struct PlannedBytes<'a> {
    pub from: &'a Opened,
    pub bytes: &'a [u8],
    pub offset: u64,
    pub cast: Option<Cast>,
}

impl Checkpoints {
    pub fn new(sources: &[PathBuf]) -> Checkpoints {
        Checkpoints { allowed: sources.to_vec(), opened: Vec::new() }
    }

    /// `planned`'s bytes; None if it names a file that is not allowed, does
    /// not open or is shorter, or a dtype pair hfx does not convert.
    pub fn get(&mut self, planned: &PlannedWeight) -> Option<PlannedBytes<'_>> {
        let named = lexical(&planned.file)?;
        let at = match self.opened.iter().position(|o| o.path == named) {
            Some(at) => at,
            None => {
                let (path, file) = open_checkpoint(&planned.file, &self.allowed).ok()?;
                if let Some(at) = self.opened.iter().position(|o| o.path == path) {
                    at
                } else {
                    // SAFETY: a read-only private mapping of a checkpoint nobody
                    // writes while hfx runs (as `Pt2` maps it to write the same bytes).
                    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
                    self.opened.push(Opened { path, file, map });
                    self.opened.len() - 1
                }
            }
        };
        let from = &self.opened[at];
        let start = usize::try_from(planned.offset).ok()?;
        let bytes =
            from.map.get(start..start.checked_add(usize::try_from(planned.length).ok()?)?)?;
        let cast = match planned.stored == planned.dtype {
            true => None,
            false => Cast::of_stored(&planned.stored, hfx_dtype::DType::from_name(&planned.dtype)?)
                .ok()?,
        };
        Some(PlannedBytes { from, bytes, offset: planned.offset, cast })
    }
}

/// `path` made absolute and rid of `.` parts without touching the file
/// system (no link is followed); None if it has a `..` part, whose meaning
/// depends on the links on the way.
pub fn lexical(path: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(path)
    };
    let mut out = PathBuf::new();
    for part in absolute.components() {
        match part {
            Component::RootDir | Component::Prefix(_) => out.push(part),
            Component::CurDir => {}
            Component::Normal(name) => out.push(name),
            Component::ParentDir => return None,
        }
    }
    Some(out)
}

/// Opens checkpoint file `named` for reading if it is one of `allowed` (a
/// model folder's files, compared as paths, links not resolved) and a
/// regular file there, never through a symbolic link (`O_NOFOLLOW`): a link
/// named `model.safetensors` could lead anywhere (a key, another user's
/// file), and its bytes would be written into the artifact. The one link
/// taken is the Hugging Face Hub cache's own ([`hub_blob`]): a snapshot's
/// file pointing into the same repository's `blobs/`. Returns the path
/// opened (the blob's, for such a link) and the file; a one-line reason
/// otherwise.
pub fn open_checkpoint(
    named: &Path,
    allowed: &[PathBuf],
) -> Result<(PathBuf, std::fs::File), String> {
    let path = lexical(named).ok_or_else(|| format!("`{}`, which has a `..` part (a checkpoint file is named plainly inside the model folder)", named.display()))?;
    if !allowed.iter().any(|a| lexical(a).as_ref() == Some(&path)) {
        return Err(format!(
            "`{}`, which is not a checkpoint file of the model folder",
            named.display()
        ));
    }
    let meta = std::fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let opened = if meta.file_type().is_symlink() { hub_blob(&path)? } else { path };
    let file = open_no_follow(&opened)?;
    Ok((opened, file))
}

/// Opens `path` read-only, refusing a symbolic link as its last part
/// (`O_NOFOLLOW`) and anything but a regular file (a FIFO does not block:
/// `O_NONBLOCK`).
pub fn open_no_follow(path: &Path) -> Result<std::fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path).map_err(|e| {
        if e.raw_os_error() == Some(libc::ELOOP) {
            format!("{}, a symbolic link: checkpoint files are read only as regular files inside the model folder (copy the file there)", path.display())
        } else {
            format!("{}: {e}", path.display())
        }
    })?;
    let meta = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{}, which is not a regular file", path.display()));
    }
    Ok(file)
}

/// The blob a Hub cache snapshot's link `link` stands for: `link` is
/// `<repo>/snapshots/<commit>/<name>` (`<repo>` a `models--*` folder) and
/// points at `../../blobs/<blob>` (or that path written whole), `<repo>/blobs`
/// being a folder, not a link. Checked on the paths alone; the blob is then
/// opened with `O_NOFOLLOW`. Any other link is refused.
fn hub_blob(link: &Path) -> Result<PathBuf, String> {
    use std::path::Component;
    let refused = |why: &str| {
        format!(
            "{}, a symbolic link{why}: checkpoint files are read only as regular files inside the model folder, or through the Hub cache's own links into its blobs/ (copy the file into the folder)",
            link.display()
        )
    };
    let snapshot = link.parent().ok_or_else(|| refused(""))?;
    let snapshots = snapshot
        .parent()
        .filter(|s| s.file_name().is_some_and(|n| n == "snapshots"))
        .ok_or_else(|| refused(" outside a Hub cache snapshot"))?;
    let repo = snapshots
        .parent()
        .filter(|r| r.file_name().is_some_and(|n| n.to_string_lossy().starts_with("models--")))
        .ok_or_else(|| refused(" outside a Hub cache snapshot"))?;
    let target = std::fs::read_link(link).map_err(|e| format!("{}: {e}", link.display()))?;
    let blobs = repo.join("blobs");
    let blob = if target.is_absolute() {
        lexical(&target).and_then(|t| (t.parent() == Some(blobs.as_path())).then_some(t))
    } else {
        let parts: Vec<Component> = target.components().collect();
        match parts.as_slice() {
            [Component::ParentDir, Component::ParentDir, Component::Normal(b), Component::Normal(name)]
                if *b == "blobs" =>
            {
                Some(blobs.join(name))
            }
            _ => None,
        }
    };
    let blob = blob.ok_or_else(|| {
        refused(&format!(" to {}, not into its repository's blobs/", target.display()))
    })?;
    let folder =
        std::fs::symlink_metadata(&blobs).map_err(|e| format!("{}: {e}", blobs.display()))?;
    if !folder.is_dir() {
        return Err(refused(&format!(" into {}, which is not a folder", blobs.display())));
    }
    Ok(blob)
}

/// A checkpoint file being read: its weights are copied from the file and
/// their pages released once written, as the emit step does.
impl WeightFiles for Opened {
    fn origin(&self, bytes: &[u8]) -> Option<(&std::fs::File, u64)> {
        offset_in(&self.map, bytes).map(|offset| (&self.file, offset as u64))
    }

    fn release(&self, bytes: &[u8]) {
        release_from(&self.map, bytes);
    }

    fn place(&self, _: &[u8], _: Option<Cast>, _: Option<(usize, usize)>) -> Option<Place> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn refused(named: &Path, allowed: &[PathBuf]) -> String {
        let e = open_checkpoint(named, allowed).expect_err("refused");
        assert!(!e.contains('\n'), "{e}");
        e
    }

    /// A checkpoint file is opened only at a path given, as a regular file:
    /// a link in the model folder leads nowhere (the secret it names is never
    /// opened), nor does a path that reaches the file another way.
    #[test]
    fn checkpoint_files_are_opened_only_as_regular_files_of_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("model");
        std::fs::create_dir(&folder).unwrap();
        let checkpoint = folder.join("model.safetensors");
        std::fs::write(&checkpoint, b"weights").unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"secret").unwrap();
        let link = folder.join("other.safetensors");
        symlink(&secret, &link).unwrap();
        let allowed = [checkpoint.clone(), link.clone()];

        let (path, file) =
            open_checkpoint(&folder.join(".").join("model.safetensors"), &allowed).unwrap();
        assert_eq!(path, checkpoint);
        assert_eq!(file.metadata().unwrap().len(), 7);
        let e = refused(&link, &allowed);
        assert!(
            e.contains("other.safetensors, a symbolic link outside a Hub cache snapshot"),
            "{e}"
        );
        let e = refused(&secret, &allowed);
        assert!(e.contains("which is not a checkpoint file of the model folder"), "{e}");
        let e = refused(&folder.join("..").join("model").join("model.safetensors"), &allowed);
        assert!(e.contains("has a `..` part"), "{e}");
        // The folder itself reached through a link is another path: not admitted.
        let through = dir.path().join("through");
        symlink(&folder, &through).unwrap();
        let e = refused(&through.join("model.safetensors"), &allowed);
        assert!(e.contains("not a checkpoint file"), "{e}");
        // Checkpoints (the prewrite's reader) refuses the same.
        let planned = |file: &Path| PlannedWeight {
            name: "w".into(),
            file: file.to_path_buf(),
            offset: 0,
            length: 6,
            stored: "float32".into(),
            dtype: "float32".into(),
            shape: vec![],
            linear_weight: false,
        };
        let mut checkpoints = Checkpoints::new(&allowed);
        assert!(checkpoints.get(&planned(&link)).is_none());
        assert!(checkpoints.get(&planned(&secret)).is_none());
        assert_eq!(checkpoints.get(&planned(&checkpoint)).unwrap().bytes, b"weight");
    }

    /// The Hugging Face Hub cache's own links are taken: a snapshot's file
    /// pointing into the same repository's `blobs/` (relative, as
    /// huggingface_hub makes them, or absolute). Any other link there is not.
    #[test]
    fn hub_cache_links_into_their_blobs_are_taken() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("models--org--name");
        let snapshot = repo.join("snapshots").join("0123456789abcdef0123456789abcdef01234567");
        std::fs::create_dir_all(&snapshot).unwrap();
        std::fs::create_dir_all(repo.join("blobs")).unwrap();
        std::fs::write(repo.join("blobs").join("abc"), b"weights").unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"secret").unwrap();
        let relative = snapshot.join("model.safetensors");
        symlink("../../blobs/abc", &relative).unwrap();
        let absolute = snapshot.join("model-00001.safetensors");
        symlink(repo.join("blobs").join("abc"), &absolute).unwrap();
        let outside = snapshot.join("model-00002.safetensors");
        symlink("../../../secret", &outside).unwrap();
        let absolute_outside = snapshot.join("model-00003.safetensors");
        symlink(&secret, &absolute_outside).unwrap();
        let allowed =
            [relative.clone(), absolute.clone(), outside.clone(), absolute_outside.clone()];
        for link in [&relative, &absolute] {
            let (path, file) = open_checkpoint(link, &allowed).unwrap();
            assert_eq!(path, repo.join("blobs").join("abc"));
            assert_eq!(file.metadata().unwrap().len(), 7);
        }
        for link in [&outside, &absolute_outside] {
            let e = refused(link, &allowed);
            assert!(e.contains("not into its repository's blobs/"), "{e}");
        }
        // A blob that is itself a link is not followed.
        std::fs::remove_file(repo.join("blobs").join("abc")).unwrap();
        symlink(&secret, repo.join("blobs").join("abc")).unwrap();
        let e = refused(&relative, &allowed);
        assert!(
            e.contains("a symbolic link: checkpoint files are read only as regular files"),
            "{e}"
        );
    }
}
