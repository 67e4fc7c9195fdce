//! Commit-ish names a user types (`--to main`, `bump-pin v0.30.0`), resolved in the upstream cache:
//! fetched once when unknown, never fetched for an ambiguous abbreviation (more history cannot
//! make it less ambiguous). The caller does the fetch (`refetch`: fetch, then a fresh handle that
//! sees what it brought), so progress stays the caller's to show.

use crate::manifest::Upstream;
use crate::upstream::UpstreamRepo;
use crate::{Error, Result};

/// Resolves `rev` in `repo`; when it is unknown, calls `refetch` once and resolves in the fresh
/// handle it returns.
pub fn resolve_rev(
    repo: &UpstreamRepo,
    rev: &str,
    refetch: &mut dyn FnMut() -> Result<UpstreamRepo>,
) -> Result<git2::Oid> {
    match repo.resolve(rev) {
        Ok(id) => return Ok(id),
        // More history cannot make an abbreviation less ambiguous.
        Err(e) if e.to_string().contains("is ambiguous") => return Err(e),
        Err(_) => {}
    }
    refetch()?.resolve(rev)
}

/// The head of the upstream's `branch` (pins.toml) after `refetch`: what `drift` and the CI canary
/// compare against. An upstream without a branch is an input error.
pub fn branch_head(
    up: &Upstream,
    refetch: &mut dyn FnMut() -> Result<UpstreamRepo>,
) -> Result<git2::Oid> {
    let Some(branch) = &up.branch else {
        return Err(Error::input(
            crate::manifest::PINS_FILE,
            None,
            format!(
                "upstream.{} has no `branch`, so there is no upstream head to compare with; pass --to REV",
                up.name
            ),
        ));
    };
    refetch()?.resolve(&format!("refs/heads/{branch}"))
}
