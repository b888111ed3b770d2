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
        .without_time()
        .init();
    match hfx::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line: the error and its causes.
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
