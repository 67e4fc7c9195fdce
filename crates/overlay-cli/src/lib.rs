//! The overlay commands as a library: the clap definitions ([`Global`], [`Command`]) and one module
//! per command under [`commands`]. A fork's own `xtask` depends on this crate and either runs
//! [`main`] as it is, or flattens [`Command`] into its own subcommands next to its own tasks and
//! calls [`run`] and [`exit`] (as this repository's `xtask` does), or [`run_with`] to hand the
//! commands its [`Hooks`] (the build `export-upstream --build` runs: this crate builds nothing).
//! Exit codes: 0 clean, 1 findings, 2 error.

pub mod commands;
pub mod error;
pub mod progress;
pub mod steps;

pub use anyhow::Result;
pub use error::CliError;
pub use overlay::lock::Mode as LockMode;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The options every command takes (listed under their own heading in each command's help).
#[derive(clap::Args, Clone)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// Folder holding pins.toml and the overlays [default: the nearest folder holding pins.toml,
    /// from the current directory upward]
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Which upstream of pins.toml [default: pins.toml's `default`, or its only upstream]
    #[arg(long, global = true, value_name = "NAME")]
    pub upstream: Option<String>,
    /// Machine-readable output on stdout
    #[arg(long, global = true)]
    pub json: bool,
    /// Not an option: the fork's pins.toml extensions ([`Hooks::extensions`]), which
    /// [`run_with`] (or a fork's own task, with [`Global::with_extensions`]) puts here so that
    /// every load of pins.toml checks their keys.
    #[arg(skip)]
    pub extensions: Extensions,
}

/// The [`overlay::manifest::Extension`]s that claim keys of pins.toml's `[upstream.<name>]`
/// tables beyond the engine's own (a fork's build settings, say).
#[derive(Clone, Default)]
pub struct Extensions(pub Vec<std::sync::Arc<dyn overlay::manifest::Extension>>);

impl Extensions {
    /// For [`overlay::manifest::Pins::load`]: each key they claim is checked by its extension,
    /// any other is refused.
    pub fn with<T>(&self, f: impl FnOnce(&overlay::manifest::Extras<'_>) -> T) -> T {
        let exts: Vec<&dyn overlay::manifest::Extension> = self.0.iter().map(|e| &**e).collect();
        f(&overlay::manifest::Extras::Checked(&exts))
    }
}

impl Global {
    /// These options with `extensions` for pins.toml.
    pub fn with_extensions(&self, extensions: &Extensions) -> Global {
        Global {
            extensions: extensions.clone(),
            ..self.clone()
        }
    }
}

/// The overlay commands (flatten them into a bigger CLI with `#[command(flatten)]`).
#[derive(Subcommand)]
pub enum Command {
    /// Show the pin and the overlays in order
    Status,
    /// Materialize the pinned upstream plus the overlays into a directory
    Apply(commands::ApplyArgs),
    /// Verify every overlay applies exactly at the pin and is canonical (`canonicalize` fixes OFFSET and NONCANON)
    Check,
    /// Rewrite overlays that apply off their recorded lines or are not canonical, in place (same tree, verified)
    Canonicalize(commands::CanonicalizeArgs),
    /// Turn edits in a materialized tree back into overlays
    Refresh(commands::RefreshArgs),
    /// Start a new overlay from the edits in a materialized tree that no overlay owns
    NewOverlay(commands::NewOverlayArgs),
    /// Move the pin to another upstream commit, carrying every overlay with a 3-way merge (all or nothing)
    BumpPin(commands::BumpArgs),
    /// Turn upstreamable overlays into a clean git format-patch series (and PR.md) for upstream
    ExportUpstream(commands::ExportArgs),
    /// Classify every overlay against another upstream commit (clean, moved, context-drift, upstreamed, conflict)
    Drift(commands::DriftArgs),
    /// Turn a folder of whole-file copies into overlays against the pin (finds each copy's base,
    /// refuses to silently revert upstream work)
    Import(commands::ImportArgs),
    /// Compare the series at two commits of the fork (or a commit and the working tree), overlay by
    /// overlay: context-only changes against content changes
    Interdiff(commands::InterdiffArgs),
    /// Bump the pin on a new branch (to upstream's head, or the newest commit where the bump is
    /// clean), commit it, and write the pull request's body (target/bump-pr/PR.md)
    BumpPr(commands::BumpPrArgs),
}

/// What the fork's own xtask supplies to the commands: this crate names no build system.
#[derive(Default)]
pub struct Hooks {
    /// Configures and builds the tree `export-upstream --build` verified; none: `--build` is an
    /// error saying so.
    pub export_build: Option<ExportBuildHook>,
    /// What claims the keys of pins.toml's upstream tables beyond the engine's; none: such a key
    /// is an error at its line.
    pub extensions: Extensions,
}

/// The build `export-upstream --build` runs on the exported tree.
pub type ExportBuildHook = Box<dyn Fn(&ExportBuild<'_>) -> anyhow::Result<()>>;

/// The tree `export-upstream --build` hands to [`Hooks::export_build`]: the series `git am`ed onto
/// `onto` in the scratch clone `clone` (its HEAD is `head`), for `upstream`.
pub struct ExportBuild<'a> {
    /// The fork's pins.toml (the fork's own keys in it are the hook's to read).
    pub pins: &'a overlay::manifest::Pins,
    pub upstream: &'a overlay::manifest::Upstream,
    /// The commit the series was re-based onto (the pin unless `--onto`).
    pub onto: git2::Oid,
    /// The clone's HEAD after `git am`: the exported tree.
    pub head: git2::Oid,
    /// The scratch clone `git am` ran in.
    pub clone: &'a std::path::Path,
    /// A scratch folder that is removed after the command (a build's `target/`, say).
    pub scratch: &'a std::path::Path,
}

/// Runs one overlay command, with no hooks.
pub fn run(g: &Global, cmd: &Command) -> anyhow::Result<ExitCode> {
    run_with(g, cmd, &Hooks::default())
}

/// Runs one overlay command with the fork's [`Hooks`].
pub fn run_with(g: &Global, cmd: &Command, hooks: &Hooks) -> anyhow::Result<ExitCode> {
    // A report piped into `head` ends the process quietly, as a command-line tool's should, also
    // in a fork's own xtask that flattens these commands and never called `default_sigpipe`.
    default_sigpipe();
    let g = &g.with_extensions(&hooks.extensions);
    match cmd {
        Command::Status => commands::status(g),
        Command::Apply(a) => commands::apply(g, a),
        Command::Check => commands::check(g),
        Command::Canonicalize(a) => commands::canonicalize(g, a),
        Command::Refresh(a) => commands::refresh(g, a),
        Command::NewOverlay(a) => commands::new_overlay(g, a),
        Command::Drift(a) => commands::drift(g, a),
        Command::BumpPin(a) => commands::bump_pin(g, a),
        Command::ExportUpstream(a) => commands::export_upstream(g, a, hooks),
        Command::Import(a) => commands::import(g, a),
        Command::Interdiff(a) => commands::interdiff(g, a),
        Command::BumpPr(a) => commands::bump_pr(g, a),
    }
}

/// The exit code for a command's result; an error becomes a [`CliError`], printed on stderr
/// (and in the one JSON error shape on stdout under `--json`), and decides the code (2).
pub fn exit(g: &Global, result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            let err = CliError::from_anyhow(g, &e);
            if g.json {
                println!("{}", commands::versioned(err.json()));
            }
            eprintln!(
                "{} {}",
                commands::colour_stderr("error:", "31;1"),
                err.message
            );
            err.exit_code()
        }
    }
}

/// A reader that stops early (`| head`) ends us quietly, as it ends git or grep: Rust ignores
/// SIGPIPE, so the next write would fail and `println!` would panic (exit 101).
pub fn default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: restoring the default action of one signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The overlay commands alone, as a whole CLI.
#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "Keep a fork honest: pinned upstream + minimal overlays",
    version
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub cmd: Command,
}

/// Parses the arguments of a CLI holding these commands (this crate's [`Cli`] or a fork's own, with
/// [`Global`] flattened in). Help and usage name the command as the binary named it
/// (`#[command(name = "cargo xtask")]`), not as the file the alias runs (`xtask`); under `--json`,
/// wherever it stands, a usage error is also the one JSON error shape on stdout (exit 2);
/// `--help` and `--version` print and exit 0 as usual.
/// It also restores SIGPIPE's default ([`default_sigpipe`]), so the fork's own tasks end quietly
/// in `| head` too.
pub fn parse<C: Parser>() -> C {
    default_sigpipe();
    parse_from(std::env::args_os())
}

/// [`parse`] on the given arguments (the first is the program).
pub fn parse_from<C: Parser>(args: impl IntoIterator<Item = impl Into<OsString>>) -> C {
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let mut cmd = C::command();
    if cmd.get_bin_name().is_none() {
        let name = cmd.get_name().to_string();
        cmd = cmd.bin_name(name);
    }
    steps::set_program(cmd.get_bin_name().unwrap_or(cmd.get_name()));
    let parsed = cmd
        .try_get_matches_from_mut(&args)
        .and_then(|mut m| C::from_arg_matches_mut(&mut m).map_err(|e| e.format(&mut cmd)));
    parsed.unwrap_or_else(|e| usage_error(&e, wants_json(&args)))
}

/// `--json` among the options (before a `--`).
fn wants_json(args: &[OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

/// Prints clap's error (help and version are not errors) and exits with its code.
fn usage_error(e: &clap::Error, json: bool) -> ! {
    if json && e.use_stderr() {
        println!("{}", commands::versioned(CliError::usage(e).json()));
    }
    e.exit()
}

/// A whole `cargo xtask` of overlay commands: parse the arguments, run, exit 0/1/2.
pub fn main() -> ExitCode {
    let cli: Cli = parse();
    let result = run(&cli.global, &cli.cmd);
    exit(&cli.global, result)
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }

    #[test]
    fn export_build_without_a_hook_is_an_error_before_any_work() {
        let cli: super::Cli = super::parse_from([
            "xtask",
            "--root",
            "/nonexistent/project",
            "export-upstream",
            "--build",
        ]);
        let e = super::run(&cli.global, &cli.cmd).unwrap_err();
        let c = super::CliError::from_anyhow(&cli.global, &e);
        assert!(
            c.message
                .starts_with("export-upstream --build: this xtask supplies no build"),
            "{}",
            c.message
        );
        assert_eq!(c.exit_code(), std::process::ExitCode::from(2));
        assert!(c.hint.is_some_and(|h| h.contains("overlay_cli::Hooks")));
    }
}
