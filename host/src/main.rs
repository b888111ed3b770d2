use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = hfx::cli::Cli::parse();
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("HFX_LOG").unwrap_or_else(|_| level.into()))
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal: piped stderr is read by people's tools.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .init();
    // SIGINT / SIGTERM stop the trace worker and remove scratch folders before hfx exits.
    if let Err(e) = hfx::trace::interrupt::install() {
        tracing::warn!("cannot install the SIGINT / SIGTERM handler: {e}");
    }
    let cli_verbose = cli.verbose;
    match hfx::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", if cli_verbose > 0 { whole(&e) } else { one_line(&e) });
            std::process::ExitCode::FAILURE
        }
    }
}

/// The longest line an error prints without `-v`: a message built from
/// hostile input (a recursion's repr, a 22 KB path) is cut to this.
const LINE_LIMIT: usize = 1000;

/// The error and its causes in one bounded line, each message once: an error
/// that already quotes its source (`cannot start ...: No such file or
/// directory`) is not followed by the source again. What a message carries
/// after its first line (a Python traceback, the worker's last output) is
/// left to `-v`, except that a first line ending in `:` is completed by the
/// last line after it, which says what went wrong.
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    let mut dropped = false;
    for cause in error.chain() {
        let message = cause.to_string();
        let (head, rest) = message.split_once('\n').unwrap_or((&message, ""));
        let last = rest.lines().rev().map(str::trim).find(|l| !l.is_empty());
        let head = match last {
            Some(last) if head.trim_end().ends_with(':') => format!("{} {last}", head.trim_end()),
            _ => head.to_string(),
        };
        dropped |= last.is_some();
        let head = head.chars().map(|c| if c.is_control() { ' ' } else { c }).collect::<String>();
        if line.contains(&head) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&head);
    }
    if line.chars().count() > LINE_LIMIT {
        let total = line.chars().count();
        line = format!("{}… ({} more characters)", line.chars().take(LINE_LIMIT).collect::<String>(), total - LINE_LIMIT);
        dropped = true;
    }
    if dropped {
        line.push_str(" (-v shows all of it)");
    }
    line
}

/// `-v`: the error and its causes whole, each message once.
fn whole(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let message = cause.to_string();
        if text.contains(&message) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&message);
    }
    text
}
