//! Scratch folders beside the output: `.hfx-<what>-<pid>`, on the output's
//! file system so their files rename into place; removed on drop and by the
//! SIGINT / SIGTERM handler (`trace::interrupt`) when hfx is stopped.
//!
//! While a run's [`Staging`] holds, the scratch folders beside an output are
//! made inside its staging folder (`.hfx-work-<pid>`) rather than in the
//! output's folder itself: the trace worker may write below the staging
//! folders only (`trace::confine`), never the output's whole folder, which
//! may be a home folder with its caches and shell start-up files.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

pub struct Scratch(PathBuf);

/// The staging folder of each output folder, while a [`Staging`] holds it:
/// (output folder, staging folder, how many stagings hold it).
static STAGED: Mutex<Vec<(PathBuf, Arc<Scratch>, usize)>> = Mutex::new(Vec::new());

/// The staging folders of a run's outputs, made before its worker starts.
pub struct Staging(Vec<PathBuf>);

impl Staging {
    /// A staging folder beside each of `outputs` (one per output folder).
    pub fn beside<'a>(outputs: impl IntoIterator<Item = &'a Path>) -> Result<Staging> {
        let mut held = Vec::new();
        for output in outputs {
            let parent = Scratch::parent(output).to_path_buf();
            if held.contains(&parent) {
                continue;
            }
            let mut staged = STAGED.lock().unwrap_or_else(|e| e.into_inner());
            match staged.iter_mut().find(|(p, _, _)| *p == parent) {
                Some((_, _, users)) => *users += 1,
                None => {
                    let folder = Scratch::made_in(&parent, "work")?;
                    staged.push((parent.clone(), Arc::new(folder), 1));
                }
            }
            held.push(parent);
        }
        Ok(Staging(held))
    }

    /// The staging folder of `output`'s folder, while a staging holds it.
    pub fn folder_of(output: &Path) -> Option<PathBuf> {
        let parent = Scratch::parent(output);
        let staged = STAGED.lock().unwrap_or_else(|e| e.into_inner());
        staged
            .iter()
            .find(|(p, _, _)| p == parent)
            .map(|(_, folder, _)| folder.path().to_path_buf())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let mut staged = STAGED.lock().unwrap_or_else(|e| e.into_inner());
        for parent in &self.0 {
            if let Some((_, _, users)) = staged.iter_mut().find(|(p, _, _)| p == parent) {
                *users -= 1;
            }
        }
        staged.retain(|(_, _, users)| *users > 0);
    }
}

impl Scratch {
    fn parent(output: &Path) -> &Path {
        output.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
    }

    /// Where the scratch folders beside `output` are made: its staging folder, else its folder.
    fn home(output: &Path) -> PathBuf {
        Staging::folder_of(output).unwrap_or_else(|| Self::parent(output).to_path_buf())
    }

    /// A fresh folder beside `output`: `.hfx-<what>-<pid>`, or where one
    /// of that name is in use (components traced while others are emitted)
    /// `.hfx-<what>-<pid>.<n>`.
    pub fn beside(output: &Path, what: &str) -> Result<Scratch> {
        Self::made_in(&Self::home(output), what)
    }

    /// A fresh folder `.hfx-<what>-<pid>[.<n>]` in `folder`.
    fn made_in(folder: &Path, what: &str) -> Result<Scratch> {
        let base = format!(".hfx-{what}-{}", std::process::id());
        let mut n = 0u32;
        loop {
            let name = if n == 0 { base.clone() } else { format!("{base}.{n}") };
            let dir = folder.join(name);
            match crate::trace::interrupt::create_scratch(&dir) {
                Ok(()) => return Ok(Scratch(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                // Named by the user's folder: the scratch folder's name is hfx's own.
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot write in {}", folder.display()))
                }
            }
        }
    }

    /// A fresh folder in the system's temp folder, for work with no output
    /// file (`hfx plugins test-ops`); stale ones of dead runs are removed first.
    pub fn temp(what: &str) -> Result<Scratch> {
        let temp = std::env::temp_dir();
        crate::trace::interrupt::remove_stale_scratch(&temp);
        Self::beside(&temp.join("output"), what)
    }

    /// Removes the scratch folders beside `output` whose hfx is no longer
    /// running (SIGKILL, power loss).
    pub fn remove_stale_beside(output: &Path) -> Vec<PathBuf> {
        crate::trace::interrupt::remove_stale_scratch(Self::parent(output))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        crate::trace::interrupt::remove_scratch(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_folder_that_cannot_be_made_is_named_by_the_users_folder() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.onnx");
        std::fs::write(&file, "").unwrap();
        let Err(error) = Scratch::beside(&file.join("y.onnx"), "trace") else {
            panic!("a scratch folder under a file")
        };
        let said = format!("{error:#}");
        assert!(said.starts_with(&format!("cannot write in {}: ", file.display())), "{said}");
        assert!(!said.contains(".hfx-"), "{said}");
    }

    #[test]
    fn scratch_folders_are_named_by_process_made_fresh_and_removed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("model.onnx");
        let first = Scratch::beside(&output, "verify").unwrap();
        let second = Scratch::beside(&output, "verify").unwrap();
        let base = format!(".hfx-verify-{}", std::process::id());
        assert_eq!(first.path(), dir.path().join(&base));
        assert_eq!(second.path(), dir.path().join(format!("{base}.1")));
        let (first_path, second_path) = (first.path().to_path_buf(), second.path().to_path_buf());
        std::fs::write(first.path().join("model.onnx"), "staged").unwrap();
        drop(first);
        assert!(!first_path.exists());
        assert!(second_path.is_dir());
    }

    #[test]
    fn while_a_staging_holds_scratch_folders_are_made_inside_it() {
        let dir = tempfile::tempdir().unwrap();
        let outputs = [dir.path().join("a.onnx"), dir.path().join("b.pt2")];
        let staging = Staging::beside(outputs.iter().map(PathBuf::as_path)).unwrap();
        let folder = Staging::folder_of(&outputs[0]).unwrap();
        assert_eq!(folder, dir.path().join(format!(".hfx-work-{}", std::process::id())));
        // One staging folder per output folder.
        assert_eq!(Staging::folder_of(&outputs[1]), Some(folder.clone()));
        let scratch = Scratch::beside(&outputs[0], "lower").unwrap();
        assert_eq!(scratch.path().parent(), Some(folder.as_path()));
        // Held twice (two runs in one process), it stays until both let go.
        let again = Staging::beside([outputs[1].as_path()]).unwrap();
        drop(staging);
        assert_eq!(Staging::folder_of(&outputs[0]), Some(folder.clone()));
        drop(again);
        assert_eq!(Staging::folder_of(&outputs[0]), None);
        drop(scratch);
        assert!(!folder.exists());
        let outside = Scratch::beside(&outputs[0], "lower").unwrap();
        assert_eq!(outside.path().parent(), Some(dir.path()));
    }
}
