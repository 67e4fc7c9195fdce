#!/bin/sh
# The weekly bump of a fork on GitHub (examples/github-workflows/bump-pr.yml runs it; a test runs it too):
#   `cargo xtask bump-pr` bumps the pin on a branch to upstream's head, or to the newest commit where
#   the bump is clean, and writes target/bump-pr/PR.md: the branch is pushed and ONE pull request is
#   opened, or updated when one from that branch is open. When even the next upstream commit stops
#   the bump (exit 1), the forecast in target/bump-pr/ISSUE.md opens ONE issue, or updates the open
#   one with the same title. Already at upstream's head: nothing to do.
# Settings (environment): XTASK (default "cargo xtask"), BUMP_BRANCH (default bump/upstream: one
# branch, so one PR, force-pushed each week), REMOTE (default origin), ISSUE_TITLE.
# Run it from the project root (the folder holding pins.toml). Needs git and an authenticated gh.
set -eu
XTASK=${XTASK:-cargo xtask}
BRANCH=${BUMP_BRANCH:-bump/upstream}
REMOTE=${REMOTE:-origin}
ISSUE_TITLE=${ISSUE_TITLE:-"Overlay bump blocked: the next upstream commit needs a resolution"}
BODY_DIR=target/bump-pr
BASE=$(git rev-parse --abbrev-ref HEAD)

rm -rf "$BODY_DIR"
set +e
$XTASK bump-pr --branch "$BRANCH"
code=$?
set -e

case $code in
  0)
    if [ ! -f "$BODY_DIR/PR.md" ]; then
      echo "ci/bump-pr.sh: the pin is at upstream's head; nothing to do"
      exit 0
    fi
    title=$(head -n 1 "$BODY_DIR/PR.md" | sed 's/^#* *//; s/`//g')
    git push --force "$REMOTE" "$BRANCH"
    number=$(gh pr list --head "$BRANCH" --state open --json number --jq '.[0].number')
    if [ -n "$number" ]; then
      gh pr edit "$number" --title "$title" --body-file "$BODY_DIR/PR.md"
      echo "ci/bump-pr.sh: updated pull request #$number"
    else
      gh pr create --head "$BRANCH" --base "$BASE" --title "$title" --body-file "$BODY_DIR/PR.md"
      echo "ci/bump-pr.sh: opened a pull request from $BRANCH"
    fi
    ;;
  1)
    number=$(gh issue list --state open --search "in:title \"$ISSUE_TITLE\"" --json number --jq '.[0].number')
    if [ -n "$number" ]; then
      gh issue edit "$number" --body-file "$BODY_DIR/ISSUE.md"
      echo "ci/bump-pr.sh: updated issue #$number"
    else
      gh issue create --title "$ISSUE_TITLE" --body-file "$BODY_DIR/ISSUE.md"
      echo "ci/bump-pr.sh: opened an issue"
    fi
    ;;
  *)
    echo "ci/bump-pr.sh: bump-pr failed (exit $code); nothing was pushed" >&2
    exit "$code"
    ;;
esac
