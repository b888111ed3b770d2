//! Scratch folders beside the output: `.hfx-<what>-<pid>`, on the output's
//! file system so their files rename into place; removed on drop and by the
//! SIGINT / SIGTERM handler (`trace::interrupt`) when hfx is stopped.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

pub struct Scratch(PathBuf);

impl Scratch {
    fn parent(output: &Path) -> &Path {
        output.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
    }

    /// A fresh folder beside `output`: `.hfx-<what>-<pid>`, or where one
    /// of that name is in use (components traced while others are emitted)
    /// `.hfx-<what>-<pid>.<n>`.
    pub fn beside(output: &Path, what: &str) -> Result<Scratch> {
        let base = format!(".hfx-{what}-{}", std::process::id());
        let mut n = 0u32;
        loop {
            let name = if n == 0 { base.clone() } else { format!("{base}.{n}") };
            let dir = Self::parent(output).join(name);
            match crate::trace::interrupt::create_scratch(&dir) {
                Ok(()) => return Ok(Scratch(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
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
