//! Where the build driver meets `overlay-cli`, which names no build crate: the driver's
//! [`mlx_build::Progress`] drawn by the CLI's progress bar, and the driver's errors classified
//! into the CLI's error kinds ([`classify`]).

use overlay_cli::error::{Classified, Kind, Link, std_chain};
use overlay_cli::steps::Steps;

/// The CLI's progress bar (`overlay_cli::progress::BuildProgress`) as the build driver's
/// [`mlx_build::Progress`].
#[derive(Default)]
pub struct BuildProgress(overlay_cli::progress::BuildProgress);

impl mlx_build::Progress for BuildProgress {
    fn message(&mut self, msg: &str) {
        self.0.message(msg);
    }

    fn ninja(&mut self, n: u64, m: u64, desc: &str) {
        self.0.step(n, m, desc);
    }

    fn ninja_done(&mut self) {
        self.0.steps_done();
    }
}

/// A task's error with the build driver's error in its chain, as a [`Classified`]: the chain's
/// text as `{:#}` joins it, with the next steps of an engine error inside the driver's written by
/// `steps` (this run's program and flags), and the kind of the first link that has one (the
/// driver's errors' kind is `build`; an engine error inside keeps its own). Any other error as it
/// is: the CLI types it.
pub fn classify(steps: &Steps, e: anyhow::Error) -> anyhow::Error {
    let driver = |c: &(dyn std::error::Error + 'static)| {
        c.is::<mlx_build::Error>() || c.is::<mlx_build::UserError>()
    };
    if !e.chain().any(driver) {
        return e;
    }
    Classified::wrap(Link::join(e.chain().map(|c| link(c, steps))))
}

/// One link of a chain: the build driver's typed here, every other by the CLI.
fn link(cause: &(dyn std::error::Error + 'static), steps: &Steps) -> Link {
    if let Some(b) = cause.downcast_ref::<mlx_build::Error>() {
        return build_link(b, steps);
    }
    if cause.is::<mlx_build::UserError>() {
        return Link::text(cause.to_string(), Some(Kind::Build));
    }
    Link::of(cause, steps)
}

/// The build driver's error, down to what it wraps: the engine's errors keep their kind and their
/// next steps (a refusal while `build-mlx` materializes is `refused`: the recipe's own error), and
/// so do the caller's (the `materialize` callback's chain).
fn build_link(err: &mlx_build::Error, steps: &Steps) -> Link {
    use mlx_build::Error as B;
    match err {
        B::User(_) => Link::text(err.to_string(), Some(Kind::Build)),
        B::Context { context, err } => {
            let inner = build_link(err, steps);
            Link {
                text: format!("{context}: {}", inner.text),
                ..inner
            }
        }
        B::Io(_) => Link::text(err.to_string(), Some(Kind::Io)),
        B::Recipe(inner) | B::Caller(inner) => {
            let l = Link::join(std_chain(inner.as_ref()).map(|c| link(c, steps)));
            Link {
                kind: Some(l.kind.unwrap_or(Kind::Other)),
                ..l
            }
        }
        B::Json(_) | B::Message(_) => Link::text(err.to_string(), Some(Kind::Other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn global() -> overlay_cli::Global {
        overlay_cli::Global {
            root: None,
            upstream: None,
            json: true,
            extensions: Default::default(),
        }
    }

    fn kind(e: anyhow::Error) -> Kind {
        let steps = Steps::new(&global());
        overlay_cli::CliError::from_anyhow(&global(), &classify(&steps, e)).kind
    }

    #[test]
    fn engine_errors_keep_their_kind_through_the_build_driver() {
        let refused = || overlay::Error::refused("tree", None, overlay::Refusal::NotRecovered);
        // Wrapped by the driver, under its context.
        let e = mlx_build::Error::Context {
            context: "materializing".into(),
            err: Box::new(mlx_build::Error::recipe(refused())),
        };
        assert_eq!(kind(anyhow::Error::new(e)), Kind::Refused);
        // Returned by the caller's materialize callback, with the caller's context.
        let caller = anyhow::Error::new(refused()).context("writing the tree");
        let e = anyhow::Error::new(mlx_build::Error::caller(caller)).context("build-mlx");
        assert_eq!(kind(e), Kind::Refused);
        let apply = mlx_build::Error::recipe(overlay::Error::Apply {
            overlay: "0001-x.patch".into(),
            file: "a.c".into(),
            hunk: 1,
            patch_line: 9,
            reason: "no match".into(),
        });
        assert_eq!(kind(anyhow::Error::new(apply)), Kind::Apply);
        let plain = mlx_build::Error::caller(anyhow::anyhow!("plain"));
        assert_eq!(kind(anyhow::Error::new(plain)), Kind::Other);
    }

    #[test]
    fn next_steps_inside_the_build_driver_carry_this_runs_globals() {
        let g = overlay_cli::Global {
            root: Some("/p".into()),
            upstream: None,
            json: false,
            extensions: Default::default(),
        };
        let help = overlay::Help::new("run ").step(overlay::NextStep::new("apply", ["--force"]));
        let refused =
            overlay::Error::refused("tree", None, overlay::Refusal::NotRecovered).with_help(help);
        let e = mlx_build::Error::Context {
            context: "materializing".into(),
            err: Box::new(mlx_build::Error::recipe(refused)),
        };
        let e = classify(&Steps::new(&g), anyhow::Error::new(e).context("build-mlx"));
        let c = overlay_cli::CliError::from_anyhow(&g, &e);
        let step = format!(
            "`{} --root /p apply --force`",
            overlay_cli::steps::program()
        );
        assert_eq!(c.kind, Kind::Refused);
        assert_eq!(
            c.message,
            format!(
                "build-mlx: materializing: tree: an interrupted write was not recovered\n  help: run {step}"
            )
        );
        assert_eq!(c.hint, Some(format!("run {step}")));
    }

    #[test]
    fn build_failures_are_their_own_kind_and_keep_their_text() {
        let e =
            anyhow::Error::new(mlx_build::user_err("cmake configure failed")).context("building");
        let steps = Steps::new(&global());
        let c = overlay_cli::CliError::from_anyhow(&global(), &classify(&steps, e));
        assert_eq!((c.kind, c.hint.as_deref()), (Kind::Build, None));
        assert_eq!(c.message, "building: cmake configure failed");
        assert_eq!(c.json()["kind"], "build");
        // An error without the driver's is left as it is.
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = classify(&steps, anyhow::Error::new(io).context("reading"));
        assert!(e.downcast_ref::<std::io::Error>().is_some());
    }
}
