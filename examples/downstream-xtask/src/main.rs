//! A fork's `xtask/src/main.rs`: the overlay commands (status, apply, check, refresh,
//! new-overlay, drift, bump-pin, export-upstream, ...) from `overlay-cli`, next to the fork's own
//! tasks. Run it as `cargo xtask <command>` with the usual `.cargo/config.toml` alias
//! (`xtask = "run --package xtask --"`). It finds `pins.toml` from the current directory upward.
//! README's "Use it in your fork" shows this file from its first `use` on (a test
//! keeps the two the same).
//!
//! A fork with no tasks of its own needs only `fn main() -> ExitCode { overlay_cli::main() }`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Our fork's tasks")]
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
    /// The fork's own task (here: print the pinned upstream commit of pins.toml)
    Pin,
}

fn main() -> ExitCode {
    // Help under `cargo xtask` (the name above), usage errors as JSON under --json, and a closed
    // pipe (`| head`) ends the process quietly.
    let cli: Cli = overlay_cli::parse();
    let result = match &cli.cmd {
        Cmd::Overlay(c) => overlay_cli::run(&cli.global, c),
        Cmd::Pin => pin(&cli.global),
    };
    // Exit 0/1/2; an error in the one JSON shape under --json.
    overlay_cli::exit(&cli.global, result)
}

/// The fork's own task, using the same project loading as the overlay commands.
fn pin(g: &overlay_cli::Global) -> overlay_cli::Result<ExitCode> {
    let ctx = overlay_cli::commands::Ctx::load(g, overlay_cli::LockMode::Shared, "pin")?;
    println!("{}", ctx.upstream().rev);
    Ok(ExitCode::SUCCESS)
}
