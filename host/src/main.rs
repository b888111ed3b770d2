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
    match hfx::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error and its causes, each message once: an error that already quotes
/// its source (`cannot start ...: No such file or directory`) is not followed
/// by the source again.
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let message = cause.to_string();
        if line.contains(&message) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&message);
    }
    line
}
