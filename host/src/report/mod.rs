//! `hfx run --report FILE`: one self-contained page (`.html`) or document
//! (`.json`) about a run, written from its [`RunSummary`] once the artifact
//! is in place. Both come from one serde value ([`schema::Report`], the JSON
//! schema `docs/report.md` describes), so they carry the same facts.
//!
//! The page needs nothing but itself: inline CSS and SVG, a few lines of
//! script (the node-change filter), no network (its content security policy
//! forbids every fetch), every text escaped.

mod html;
pub mod onnx_file;
pub mod schema;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::pipeline::RunSummary;
pub use schema::{Report, SCHEMA_VERSION};

/// What the report is written as, by the file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Html,
    Json,
}

/// Where a run's report goes, checked before the run starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportTarget {
    pub path: PathBuf,
    pub format: Format,
}

impl ReportTarget {
    /// The report of one backend's export when a run writes several:
    /// `report.html` → `report.onnx.html`.
    pub fn per_backend(&self, backend: crate::plugins::Backend) -> PathBuf {
        let stem =
            self.path.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
        let extension =
            self.path.extension().map(|e| e.to_string_lossy().to_string()).unwrap_or_default();
        self.path.with_file_name(format!("{stem}.{backend}.{extension}"))
    }

    /// Checks `path` as a report's file, so that a bad path fails in one line
    /// before an export, never after it: `.html` / `.htm` or `.json`, in a
    /// folder that exists, not a folder itself.
    pub fn new(path: &Path) -> Result<ReportTarget> {
        let extension = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        let format = match extension.as_deref() {
            Some("html" | "htm") => Format::Html,
            Some("json") => Format::Json,
            _ => bail!(
                "--report {}: the report is a .html page or a .json document (name the file so)",
                path.display()
            ),
        };
        if path.is_dir() {
            bail!("--report {}: a folder; name the report's file (.html or .json)", path.display());
        }
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !parent.is_dir() {
            bail!("--report {}: no folder {} to write it in", path.display(), parent.display());
        }
        Ok(ReportTarget { path: path.to_path_buf(), format })
    }
}

/// Writes the report of a run that failed with `error` to `target`, atomically.
pub fn write_failure(error: &anyhow::Error, target: &ReportTarget) -> Result<()> {
    let report = schema::FailureReport::of(error);
    write_as(target, &report, || html::render_failure(&report))
}

/// Writes the report of `summary` to `target`, atomically.
pub fn write(summary: &RunSummary, target: &ReportTarget) -> Result<()> {
    let report = Report::of(summary);
    write_as(target, &report, || html::render(&report))
}

/// `report` in `target`'s format (`page` renders it as HTML), atomically.
fn write_as(
    target: &ReportTarget,
    report: &impl serde::Serialize,
    page: impl FnOnce() -> String,
) -> Result<()> {
    let bytes = match target.format {
        Format::Json => {
            let mut text =
                serde_json::to_string_pretty(report).context("serializing the report")?;
            text.push('\n');
            text.into_bytes()
        }
        Format::Html => page().into_bytes(),
    };
    crate::atomic::write_bytes_atomically(&target.path, &bytes)
        .with_context(|| format!("writing the report {}", target.path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_run_reports_its_error_and_the_traceback_its_line_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let error = anyhow::Error::new(crate::trace::TraceError::User {
            method: "trace".into(),
            kind: crate::trace::protocol::UserErrorKind::UnknownArchitecture,
            line: "--model lama: no model type `lama` <here>".into(),
            traceback: "Traceback (most recent call last):\n  ...".into(),
        })
        .context("tracing");
        for (name, format) in [("r.json", Format::Json), ("r.html", Format::Html)] {
            let target = ReportTarget { path: dir.path().join(name), format };
            write_failure(&error, &target).unwrap();
            let text = std::fs::read_to_string(&target.path).unwrap();
            assert!(text.contains("Traceback (most recent call last)"), "{text}");
            if format == Format::Json {
                let value: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert_eq!(value["error"], "tracing: --model lama: no model type `lama` <here>");
                assert_eq!(value["schema_version"], SCHEMA_VERSION);
            } else {
                assert!(text.contains("no model type `lama` &lt;here&gt;"), "{text}");
            }
        }
    }

    #[test]
    fn a_report_path_is_checked_before_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let ok = ReportTarget::new(&dir.path().join("r.HTML")).unwrap();
        assert_eq!(ok.format, Format::Html);
        assert_eq!(ReportTarget::new(&dir.path().join("r.json")).unwrap().format, Format::Json);
        assert_eq!(
            ReportTarget::new(Path::new("r.json")).unwrap().format,
            Format::Json,
            "a bare name is in the current folder"
        );
        for (path, says) in [
            (dir.path().join("r.txt"), "a .html page or a .json document"),
            (dir.path().join("r"), "a .html page or a .json document"),
            (dir.path().join("missing/r.html"), "no folder"),
        ] {
            let error = ReportTarget::new(&path).unwrap_err().to_string();
            assert!(
                error.contains(says) && error.starts_with("--report ") && !error.contains('\n'),
                "{error}"
            );
        }
        let folder = dir.path().join("looks.html");
        std::fs::create_dir(&folder).unwrap();
        assert!(ReportTarget::new(&folder).unwrap_err().to_string().contains("a folder"));
    }
}
