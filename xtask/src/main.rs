//! `cargo xtask`: the overlay commands of `overlay-cli` plus this repository's MLX tasks
//! (`mlx-tasks`). Exit codes: 0 clean, 1 findings, 2 error.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "Keep a fork honest: pinned upstream + minimal overlays",
    version
)]
struct Cli {
    #[command(flatten)]
    global: overlay_cli::Global,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    #[command(flatten)]
    Overlay(overlay_cli::Command),
    #[command(flatten)]
    Mlx(mlx_tasks::Task),
}

fn main() -> ExitCode {
    let cli: Cli = overlay_cli::parse();
    let result = match &cli.cmd {
        Cmd::Overlay(c) => overlay_cli::run_with(&cli.global, c, &mlx_tasks::hooks(&cli.global)),
        Cmd::Mlx(t) => mlx_tasks::run(&cli.global, t),
    };
    overlay_cli::exit(&cli.global, result)
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
