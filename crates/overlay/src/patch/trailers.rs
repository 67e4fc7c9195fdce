//! The trailer keys an overlay may carry: the fork's own, which the engine reads, and the usual
//! git trailers, which it keeps as they are. Any other key in the trailer paragraph is refused: a
//! misspelt `Depend-On:` would otherwise silently stop drift from watching that dependency.

/// The fork's trailers, spelt as the docs write them (`docs/overlay-format.md`). They describe the
/// overlay to the fork, not the change to upstream, so `export-upstream` strips them.
pub const FORK_TRAILERS: [&str; 6] = [
    "Overlay-Kind",
    "Upstream-Status",
    "Depends-On",
    "Base",
    "Reverts-Upstream",
    "Reverts-Overlay",
];

/// The git trailers people write in commit messages (`git interpret-trailers`, the Linux and git
/// projects' conventions, GitHub's and Gerrit's): kept as they are, and exported.
pub const GIT_TRAILERS: [&str; 22] = [
    "Signed-off-by",
    "Co-authored-by",
    "Co-developed-by",
    "Reviewed-by",
    "Acked-by",
    "Tested-by",
    "Reported-by",
    "Suggested-by",
    "Helped-by",
    "Mentored-by",
    "Requested-by",
    "Original-patch-by",
    "Based-on-patch-by",
    "Cc",
    "Fixes",
    "Link",
    "Closes",
    "Bug",
    "Refs",
    "See-also",
    "Change-Id",
    "Reviewed-on",
];

/// Whether `key` (any case) is one of the fork's trailers.
pub fn is_fork_trailer(key: &str) -> bool {
    FORK_TRAILERS.iter().any(|k| k.eq_ignore_ascii_case(key))
}

/// Whether `key` (any case, as git compares trailer keys) is a trailer the engine accepts.
pub fn is_known(key: &str) -> bool {
    is_fork_trailer(key) || GIT_TRAILERS.iter().any(|k| k.eq_ignore_ascii_case(key))
}

/// The known trailer key closest to `key` (see [`crate::help::did_you_mean`]).
pub fn did_you_mean(key: &str) -> Option<&'static str> {
    crate::help::did_you_mean(
        key,
        FORK_TRAILERS.iter().chain(GIT_TRAILERS.iter()).copied(),
    )
}

/// The `help:` text for an unknown key.
pub fn unknown_help(key: &str) -> String {
    let fix = match did_you_mean(key) {
        Some(k) => format!("did you mean `{k}:`? fix the spelling; "),
        None => String::new(),
    };
    format!(
        "{fix}the trailer paragraph (the message's last) takes the fork's trailers ({}) and the usual git ones (Signed-off-by, Reviewed-by, Fixes, ...); \
         a note of your own belongs in the message above it, separated by a blank line",
        FORK_TRAILERS.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspellings_name_the_closest_key() {
        assert_eq!(did_you_mean("Depend-On"), Some("Depends-On"));
        assert_eq!(did_you_mean("depends-om"), Some("Depends-On"));
        assert_eq!(did_you_mean("Overlay-Knd"), Some("Overlay-Kind"));
        assert_eq!(did_you_mean("Upstream-Stats"), Some("Upstream-Status"));
        assert_eq!(did_you_mean("Revert-Upstream"), Some("Reverts-Upstream"));
        assert_eq!(did_you_mean("Reverts-Overlays"), Some("Reverts-Overlay"));
        assert_eq!(did_you_mean("Signed-of-by"), Some("Signed-off-by"));
        assert_eq!(did_you_mean("Bases"), Some("Base"));
        // Nothing close: no guess.
        assert_eq!(did_you_mean("Why"), None);
        assert_eq!(did_you_mean("Performance-Notes"), None);
    }

    #[test]
    fn keys_are_compared_in_any_case() {
        for k in [
            "overlay-kind",
            "SIGNED-OFF-BY",
            "Reverts-Overlay",
            "change-id",
            "Cc",
        ] {
            assert!(is_known(k), "{k}");
        }
        assert!(!is_known("Depend-On"));
        assert!(is_fork_trailer("base") && !is_fork_trailer("Signed-off-by"));
        use crate::help::edit_distance;
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "ab"), 2);
    }
}
