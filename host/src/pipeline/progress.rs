//! A run's progress on stderr (stdout carries the summary). On a terminal,
//! the current step is a spinner with the step's own elapsed time, and each
//! finished step stays as one line; elsewhere, plain timed lines with `-v`
//! (logs and pipes stay clean by default); nothing with `-q`.
//!
//! The live spinner is process-global because the terminal is: the tracing
//! writer ([`stderr_writer`]) and the error line in `main` hide it while
//! they print, so no line is drawn over.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressState, ProgressStyle};

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Display {
    Hidden,
    /// `[  12.3 s] stage: what` per step.
    Lines,
    /// A spinner per step, redrawn in place (a terminal only).
    Live,
}

/// The progress of one run: when it started and how it is shown.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub started: Instant,
    pub display: Display,
}

/// The step being shown live, if any.
static LIVE: Mutex<Option<ProgressBar>> = Mutex::new(None);

impl Progress {
    /// What a command shows: live on a terminal, lines with `-v` elsewhere,
    /// nothing with `-q`.
    pub fn for_stderr(verbose: u8, quiet: bool) -> Self {
        let display = if quiet {
            Display::Hidden
        } else if std::io::stderr().is_terminal() {
            Display::Live
        } else if verbose > 0 {
            Display::Lines
        } else {
            Display::Hidden
        };
        Progress { started: Instant::now(), display }
    }

    pub fn hidden() -> Self {
        Progress { started: Instant::now(), display: Display::Hidden }
    }

    /// A new step begins; the one before it is done.
    pub fn step(&self, stage: &str, what: &str) {
        let at = format!("[{:>6.1} s]", self.started.elapsed().as_secs_f64());
        match self.display {
            Display::Hidden => {}
            Display::Lines => eprintln!("{at} {stage}: {what}"),
            Display::Live => {
                let mut live = LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let step = format!("{stage}: {what}");
                match live.as_ref() {
                    Some(bar) => {
                        bar.println(done_line(bar));
                        bar.set_prefix(at);
                        bar.set_message(step);
                        bar.reset_elapsed();
                    }
                    None => {
                        let bar = ProgressBar::new_spinner()
                            .with_style(style())
                            .with_prefix(at)
                            .with_message(step);
                        bar.enable_steady_tick(Duration::from_millis(120));
                        *live = Some(bar);
                    }
                }
            }
        }
    }

    /// How far the live step has got (`stage: what`), redrawn in place on a
    /// terminal; nothing elsewhere, where each step is one line.
    pub fn status(&self, what: &str) {
        if self.display == Display::Live {
            let live = LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some(bar) = live.as_ref() {
                bar.set_message(what.to_string());
            }
        }
    }
}

/// `⠋ [  12.3 s] stage: what  (4.2 s)`: the run's time when the step
/// began, then the step's own.
fn style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {prefix} {wide_msg}  ({step})")
        .expect("a valid template")
        .tick_chars("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏ ")
        .with_key("step", |state: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{:.1} s", state.elapsed().as_secs_f64());
        })
}

/// The line a finished step leaves: the spinner's line without the spinner.
fn done_line(bar: &ProgressBar) -> String {
    format!("  {} {}  ({:.1} s)", bar.prefix(), bar.message(), bar.elapsed().as_secs_f64())
}

/// Ends the live step, leaving its line: the run is over (or failed), and
/// what follows is the summary or the error.
pub fn finish() {
    let mut live = LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(bar) = live.take() {
        bar.println(done_line(&bar));
        bar.finish_and_clear();
    }
}

/// Stderr for tracing's lines: the live step is hidden while one is written.
pub fn stderr_writer() -> SuspendingStderr {
    SuspendingStderr
}

pub struct SuspendingStderr;

impl Write for SuspendingStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let live = LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match live.as_ref() {
            Some(bar) => bar.suspend(|| std::io::stderr().write_all(buf)).map(|()| buf.len()),
            None => std::io::stderr().write_all(buf).map(|()| buf.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_hides_and_a_pipe_shows_lines_only_when_asked() {
        assert_eq!(Progress::for_stderr(3, true).display, Display::Hidden);
        // Test processes' stderr is captured: not a terminal.
        if !std::io::stderr().is_terminal() {
            assert_eq!(Progress::for_stderr(0, false).display, Display::Hidden);
            assert_eq!(Progress::for_stderr(1, false).display, Display::Lines);
        }
    }

    #[test]
    fn a_finished_step_leaves_its_time_and_what_it_did() {
        // `style` panics on a template indicatif cannot render.
        let bar = ProgressBar::hidden().with_style(style()).with_prefix("[   1.0 s]");
        bar.set_message("trace: importing torch");
        let line = done_line(&bar);
        assert!(line.starts_with("  [   1.0 s] trace: importing torch  ("), "{line}");
        assert!(line.ends_with(" s)"), "{line}");
    }
}
