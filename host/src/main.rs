use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = match hfx::cli::Cli::try_parse() {
        Ok(cli) => cli,
        // `--help` and `--version` print to stdout, whole.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            eprintln!("{}", usage_error_line(&e.render().to_string()));
            std::process::exit(e.exit_code())
        }
    };
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HFX_LOG").unwrap_or_else(|_| level.into()),
        )
        .with_writer(hfx::pipeline::progress::stderr_writer)
        // Colour codes only on a terminal: piped stderr is read by people's tools.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .init();
    // SIGINT / SIGTERM stop the trace worker and remove scratch folders before hfx exits.
    if let Err(e) = hfx::trace::interrupt::install() {
        tracing::warn!("cannot install the SIGINT / SIGTERM handler: {e}");
    }
    let cli_verbose = cli.verbose;
    quiet_on_a_closed_stdout();
    // `println!` panics when stdout's reader has gone (`hfx plugins list | head`):
    // what was wanted was read, so hfx stops there, its destructors run, silently.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hfx::cli::run(cli)));
    match result {
        Ok(Ok(())) => std::process::ExitCode::SUCCESS,
        Ok(Err(e)) => {
            hfx::pipeline::progress::finish();
            if cli_verbose > 0 {
                eprintln!("error: {}", whole(&e));
                if let Some(detail) = hfx::report::schema::detail(&e) {
                    eprintln!("{}", detail.trim_end());
                }
            } else {
                eprintln!("error: {}", one_line(&e));
            }
            std::process::ExitCode::FAILURE
        }
        Err(panic) if stdout_closed(panic.as_ref()) => std::process::ExitCode::SUCCESS,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// A command-line error in one line: clap's message, then its tips and
/// suggestions in parentheses; its usage lines are left to `--help`.
fn usage_error_line(rendered: &str) -> String {
    let mut lines = rendered.lines().map(str::trim).filter(|l| {
        !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information")
    });
    let mut line = lines.next().unwrap_or("error: invalid arguments").to_string();
    for more in lines {
        line.push_str(&format!(" ({more})"));
    }
    line.push_str(" (--help lists the options)");
    line
}

/// Whether a panic is `println!`'s on a stdout whose reader has gone.
fn stdout_closed(payload: &(dyn std::any::Any + Send)) -> bool {
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("");
    message.starts_with("failed printing to stdout") && message.contains("Broken pipe")
}

/// The panic message of a closed stdout is not printed; any other goes to the default hook.
fn quiet_on_a_closed_stdout() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !stdout_closed(info.payload()) {
            report(info);
        }
    }));
}

/// The longest line an error prints without `-v`: a message built from
/// hostile input (a recursion's repr, a 22 KB path) is cut to this.
const LINE_LIMIT: usize = 1000;

/// The error and its causes in one bounded line, each message once: an error
/// that already quotes its source (`cannot start ...: No such file or
/// directory`) is not followed by the source again. A Python traceback is
/// left to `-v`; so is a process's output quoted after a line ending in `:`,
/// except its last line, which says what went wrong. What is left of a
/// message is joined into the line.
fn one_line(error: &anyhow::Error) -> String {
    let mut dropped = false;
    let mut line = joined(error, |message| {
        let (said, more) = summary(&message);
        dropped |= more;
        said
    });
    if line.chars().count() > LINE_LIMIT {
        let total = line.chars().count();
        line = format!(
            "{}… ({} more characters)",
            line.chars().take(LINE_LIMIT).collect::<String>(),
            total - LINE_LIMIT
        );
        dropped = true;
    }
    if dropped {
        line.push_str(" (-v shows all of it)");
    }
    line
}

/// The error's causes as `each` renders them, joined by `: `, each text once.
fn joined(error: &anyhow::Error, mut each: impl FnMut(String) -> String) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let said = each(cause.to_string());
        if text.contains(&said) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&said);
    }
    text
}

/// What one message says on the error line, and whether anything was left out.
fn summary(message: &str) -> (String, bool) {
    let (said, more) = match message.find("\nTraceback (most recent call last):") {
        // An exception without a message (a failed `assert`) is named by the line that raised it.
        Some(at) if message[..at].trim_end().ends_with(':') => {
            let raised = message[at..]
                .lines()
                .rev()
                .filter(|l| l.starts_with("    "))
                .map(str::trim)
                .find(|l| !l.chars().all(|c| matches!(c, '^' | '~')));
            (format!("{} {}", message[..at].trim_end(), raised.unwrap_or("")), true)
        }
        Some(at) => (message[..at].to_string(), true),
        None => match message.split_once('\n') {
            Some((head, rest)) if head.trim_end().ends_with(':') => {
                match rest.lines().rev().map(str::trim).find(|l| !l.is_empty()) {
                    Some(last) => (format!("{} {last}", head.trim_end()), true),
                    None => (head.to_string(), false),
                }
            }
            _ => (message.to_string(), false),
        },
    };
    let said: String = said.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    (said.split_whitespace().collect::<Vec<_>>().join(" "), more)
}

/// `-v`: the error and its causes whole, each message once.
fn whole(error: &anyhow::Error) -> String {
    joined(error, |message| message)
}
