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
//! The wheel (`cargo xtask wheel`, `pip install hfx-*.whl`) lays out the same
//! `P/bin/hfx` and `P/share/hfx/plugins/` in the Python environment `P` it is
//! installed into, with the marker `P/share/hfx/pip-installed`: the worker's
//! environment is then `P` itself (its `bin/python`), not a venv of hfx's own.
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

/// The file whose presence in `P/share/hfx` says pip installed hfx into `P`.
pub const PIP_MARKER: &str = "pip-installed";

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

    /// Whether pip installed hfx (its wheel) into the environment `P`.
    pub fn pip_installed(&self) -> bool {
        self.share.join(PIP_MARKER).is_file()
    }

    /// The worker's Python environment: `P/share/hfx/venv`, or the
    /// environment `P` pip installed hfx into.
    pub fn venv(&self) -> PathBuf {
        match self.share.parent().and_then(Path::parent) {
            Some(prefix) if self.pip_installed() => prefix.to_path_buf(),
            _ => self.share.join("venv"),
        }
    }

    /// The worker's Python: the environment's `bin/python` (a system-wide
    /// pip install may have only `bin/python3`).
    pub fn python(&self) -> PathBuf {
        let bin = self.venv().join("bin");
        let python = bin.join("python");
        if self.pip_installed() && !python.exists() && bin.join("python3").exists() {
            return bin.join("python3");
        }
        python
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

    #[test]
    fn a_pip_installed_hfx_runs_its_worker_in_the_environment_it_was_installed_into() {
        let prefix = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(prefix.path().join("share/hfx")).unwrap();
        std::fs::write(prefix.path().join("share/hfx").join(PIP_MARKER), "").unwrap();
        let installed = Installed::beside(&prefix.path().join("bin/hfx")).unwrap();
        assert!(installed.pip_installed());
        assert_eq!(installed.venv(), prefix.path());
        assert_eq!(installed.python(), prefix.path().join("bin/python"));
        assert_eq!(installed.plugins(), prefix.path().join("share/hfx/plugins"));
    }
}
