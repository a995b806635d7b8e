//! The `agent` binary: PID 1 of the ramdisk when started as `/init`;
//! otherwise parse the command line, set up logging, run.

use clap::Parser;

fn main() -> std::process::ExitCode {
    if agent::init::is_init() {
        agent::init::main();
    }
    let cli = agent::cli::Cli::parse();
    if matches!(cli.command, agent::cli::Command::Ramdisk(_)) {
        agent::cli::init_ramdisk_tracing(cli.debug);
    } else {
        agent::cli::init_tracing(cli.debug);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(agent::cli::run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
