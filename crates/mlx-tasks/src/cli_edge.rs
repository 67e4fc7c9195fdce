//! Where the build driver meets `overlay-cli`, which names no build crate: the driver's
//! [`mlx_build::Progress`] drawn by the CLI's progress bar, and the driver's errors classified
//! into the CLI's error kinds ([`classify`]).

use overlay_cli::error::{Classified, Kind, cause_kind, std_chain};

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

/// A task's error with the build driver's error in its chain, as a [`Classified`] of the kind the
/// driver's error means (its text unchanged); any other error as it is. The first error in the
/// chain that has a kind decides, as the CLI decides.
pub fn classify(e: anyhow::Error) -> anyhow::Error {
    let kind = e.chain().find_map(|cause| {
        if let Some(b) = cause.downcast_ref::<mlx_build::Error>() {
            return Some(Some(build_kind(b)));
        }
        if cause.downcast_ref::<mlx_build::UserError>().is_some() {
            return Some(Some(Kind::Build));
        }
        cause_kind(cause).map(|_| None)
    });
    match kind {
        Some(Some(kind)) => Classified::wrap(kind, &e),
        _ => e,
    }
}

/// The build driver's error, down to what it wraps: the engine's errors keep their kind (a
/// refusal while `build-mlx` materializes is `refused`: the recipe's own error), and so do the
/// caller's (the `materialize` callback's chain).
fn build_kind(err: &mlx_build::Error) -> Kind {
    use mlx_build::Error as B;
    match err {
        B::User(_) => Kind::Build,
        B::Context { err, .. } => build_kind(err),
        B::Io(_) => Kind::Io,
        B::Recipe(inner) | B::Caller(inner) => std_chain(inner.as_ref())
            .find_map(cause_kind)
            .unwrap_or(Kind::Other),
        B::Json(_) | B::Message(_) => Kind::Other,
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
        }
    }

    fn kind(e: anyhow::Error) -> Kind {
        overlay_cli::CliError::from_anyhow(&global(), &classify(e)).kind
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
    fn build_failures_are_their_own_kind_and_keep_their_text() {
        let e =
            anyhow::Error::new(mlx_build::user_err("cmake configure failed")).context("building");
        let c = overlay_cli::CliError::from_anyhow(&global(), &classify(e));
        assert_eq!((c.kind, c.hint.as_deref()), (Kind::Build, None));
        assert_eq!(c.message, "building: cmake configure failed");
        assert_eq!(c.json()["kind"], "build");
        // An error without the driver's is left as it is.
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = classify(anyhow::Error::new(io).context("reading"));
        assert!(e.downcast_ref::<std::io::Error>().is_some());
    }
}
