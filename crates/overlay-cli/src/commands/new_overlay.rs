//! `new-overlay`: start an overlay from the edits no overlay owns.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};
use overlay::lock::Mode as LockMode;

use crate::Global;

use super::refresh::run_refresh;
use super::*;

#[derive(clap::Args)]
pub struct NewOverlayArgs {
    /// File name of the new overlay, e.g. 0003-fix-foo.patch (".patch" is added if missing)
    pub name: String,
    /// The materialized tree holding the edits [default: target/apply/<upstream>]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// upstreamable or local-only
    #[arg(long, value_parser = ["upstreamable", "local-only"])]
    pub kind: String,
    /// Subject line; repeat for body paragraphs (the first -m is the subject, as with git commit)
    #[arg(short = 'm', long = "message", required = true)]
    pub message: Vec<String>,
    /// Print every edit and the overlay it went to (default: one line per overlay written)
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

pub fn new_overlay(g: &Global, a: &NewOverlayArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Exclusive, "new-overlay")?;
    refuse_during_bump(&ctx, g, "new-overlay")?;
    let dir = a.dir.clone().unwrap_or_else(|| ctx.default_dir());
    let file_name = if a.name.ends_with(".patch") {
        a.name.clone()
    } else {
        format!("{}.patch", a.name)
    };
    // The series parser's own rule, so the series never lists a name it then rejects.
    if let Some(why) = overlay::series::name_problem(&file_name).or_else(|| {
        file_name
            .starts_with('.')
            .then_some("not a hidden file (starting with `.`)")
    }) {
        return Err(crate::error::HintedError::error(
            format!(
                "{file_name:?}: not a valid overlay name: expected a plain file name, {why}; nothing was written"
            ),
            "use letters, digits, `-`, `_` and `.`, like 0003-fix-foo.patch",
        ));
    }
    let series = ctx.series()?;
    if series.dir.join(&file_name).exists() {
        bail!(
            "{}: already exists; pick another name or use `refresh --into`",
            series.dir.join(&file_name).display()
        );
    }
    let subject = a.message[0].trim();
    if subject.is_empty() || subject.contains('\n') {
        bail!("-m: the first message is the one-line subject");
    }
    let body = a.message[1..].join("\n\n");
    let trailers = vec![
        ("Overlay-Kind".to_string(), a.kind.clone()),
        ("Upstream-Status".to_string(), "not-submitted".to_string()),
    ];
    let prelude =
        overlay::render::new_prelude(&identity()?, &author_date()?, subject, &body, &trailers);
    let signature = series
        .overlays
        .last()
        .and_then(|o| o.signature.clone())
        .unwrap_or_else(|| format!("cargo-xtask {}", env!("CARGO_PKG_VERSION")));
    run_refresh(
        &ctx,
        &dir,
        Some(overlay::refresh::Target::New {
            file_name,
            prelude,
            signature,
        }),
        (a.verbose, false),
    )
}
