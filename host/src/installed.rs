//! Where an installed hfx keeps what it ships. `cargo xtask install
//! [--prefix P]` lays it out (default prefix `~/.local`):
//!
//! ```text
//! P/bin/hfx
//! P/share/hfx/plugins/<backend>/<name>/   plugin.toml, the built component, selftest/
//! P/share/hfx/venv/                       the worker's Python environment (`hfx setup`)
//! P/share/hfx/sdk/<version>/              hfx-sdk, hfx-sdk-macros, hfx-dtype, wit/ (for `hfx plugins new`)
//! ```
//!
//! The layout is found from the running binary (`P/bin/hfx` → `P/share/hfx`),
//! so a binary in cargo's target folder has none, and nothing here is read
//! from the current folder.

use std::path::{Path, PathBuf};

/// An installed hfx's data folder (`P/share/hfx`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    share: PathBuf,
}

impl Installed {
    /// The data folder beside the running binary, if hfx is installed.
    pub fn find() -> Option<Installed> {
        let exe = std::env::current_exe().ok()?.canonicalize().ok()?;
        Installed::beside(&exe)
    }

    /// The data folder of a binary at `exe` (`P/bin/hfx` → `P/share/hfx`), if it exists.
    pub fn beside(exe: &Path) -> Option<Installed> {
        let prefix = exe.parent()?.parent()?;
        let share = prefix.join("share").join("hfx");
        share.is_dir().then_some(Installed { share })
    }

    /// The data folder under `prefix`, whether or not it exists yet (what an install writes).
    pub fn at_prefix(prefix: &Path) -> Installed {
        Installed { share: prefix.join("share").join("hfx") }
    }

    pub fn share(&self) -> &Path {
        &self.share
    }

    /// The default plugin sets: every backend's, each plugin serving the
    /// backends its manifest names.
    pub fn plugins(&self) -> PathBuf {
        self.share.join("plugins")
    }

    /// The worker's Python environment.
    pub fn venv(&self) -> PathBuf {
        self.share.join("venv")
    }

    pub fn python(&self) -> PathBuf {
        self.venv().join("bin").join("python")
    }

    /// The plugin SDK and WIT contract of this hfx's version, for crates
    /// `hfx plugins new` scaffolds outside any checkout.
    pub fn sdk(&self) -> PathBuf {
        self.share.join("sdk").join(env!("CARGO_PKG_VERSION"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_found_from_the_binary_only() {
        let prefix = tempfile::tempdir().unwrap();
        let exe = prefix.path().join("bin/hfx");
        assert_eq!(Installed::beside(&exe), None, "no share/hfx yet");
        std::fs::create_dir_all(prefix.path().join("share/hfx")).unwrap();
        let installed = Installed::beside(&exe).unwrap();
        assert_eq!(installed, Installed::at_prefix(prefix.path()));
        assert_eq!(installed.python(), prefix.path().join("share/hfx/venv/bin/python"));
        assert!(installed.sdk().ends_with(format!("sdk/{}", env!("CARGO_PKG_VERSION"))));
    }
}
