#!/usr/bin/env bash
# make release VERSION=vX.Y.Z [DRY_RUN=0]: tags every released module of this repository at
# VERSION, on a release commit whose go.mod files require their siblings at VERSION.
#
# The release is always made first in a temporary clone of HEAD, so the working tree is untouched
# until it has passed: the release command (tools/devtools/release) writes the commit and the tags
# there, builds a file-system module proxy from the tags, builds and vets every released module
# from it without the workspace (GOWORK=off), and the file-proxy test (test/release) builds what a
# user builds. A dry run (the default) stops there and throws the clone away. DRY_RUN=0 also runs
# RELEASE_SUITE (make test) in the clone, then fast-forwards the current branch to the release
# commit and fetches the tags into this repository. Nothing is ever pushed.
#
# Environment: VERSION, DRY_RUN (1), RELEASE_TOOL (the built release command), RELEASE_SUITE
# ("make test"), RELEASE_KEEP=1 keeps the clone, GO (go).
set -euo pipefail

: "${VERSION:?make release needs VERSION=vX.Y.Z}"
: "${RELEASE_TOOL:?RELEASE_TOOL must name the release command (make devtools builds it)}"
DRY_RUN=${DRY_RUN:-1}
SUITE=${RELEASE_SUITE:-make test}
GO=${GO:-go}

root=$(git rev-parse --show-toplevel)
cd "$root"
say() { echo "release: $*"; }

# A malformed version, a dirty tree, an existing tag or a missing changelog entry stop it here.
"$RELEASE_TOOL" check -version "$VERSION"

head=$(git rev-parse HEAD)
branch=$(git symbolic-ref -q --short HEAD || true)
if [ "$DRY_RUN" = 0 ] && [ -z "$branch" ]; then
	say "HEAD is detached: check out the branch the release commit should go on" >&2
	exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/velo-release.XXXXXX")
cleanup() {
	if [ "${RELEASE_KEEP:-0}" = 1 ]; then
		say "kept $tmp (the clone is $tmp/repo, the proxy $tmp/proxy)"
	else
		chmod -R u+w "$tmp" 2>/dev/null || true
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT

start=$(date +%s)
say "a clone of HEAD ($head) in $tmp/repo"
git clone -q "$root" "$tmp/repo"
# The clone commits and tags as this repository would.
for key in user.name user.email user.signingkey commit.gpgsign tag.gpgsign; do
	if val=$(git config --get "$key"); then git -C "$tmp/repo" config "$key" "$val"; fi
done

"$RELEASE_TOOL" prepare -repo "$tmp/repo" -version "$VERSION"
"$RELEASE_TOOL" proxy -repo "$tmp/repo" -version "$VERSION" -out "$tmp/proxy"
say "every released module, built and vetted on its own (GOWORK=off) from the file proxy"
"$RELEASE_TOOL" verify -repo "$tmp/repo" -version "$VERSION" -proxy "$tmp/proxy"
say "what a user builds: velo's first example, a verbs-only program, go install of ibcheck"
(cd "$root/test" && RELEASE_REPO="$tmp/repo" RELEASE_PROXY="$tmp/proxy" RELEASE_VERSION="$VERSION" \
	"$GO" test -count=1 -timeout 1200s -run 'TestReleaseFromAFileProxy' ./release)

commit=$(git -C "$tmp/repo" rev-parse HEAD)
tags=$(git -C "$tmp/repo" tag --points-at "$commit" | tr '\n' ' ')
if [ "$DRY_RUN" != 0 ]; then
	git -C "$tmp/repo" --no-pager show --stat --format='release commit %H%n%n    %s%n' "$commit"
	say "dry run passed in $(( $(date +%s) - start ))s: it checked the release commit with go build and go vet of"
	say "each module without the workspace and with the file-proxy test, not with the whole suite;"
	say "the commit and the tags ($tags) were made in the clone only and are gone."
	say "make release VERSION=$VERSION DRY_RUN=0 runs '$SUITE' on it as well and makes them here."
	exit 0
fi

say "the whole suite on the release commit: $SUITE"
(cd "$tmp/repo" && eval "$SUITE")

# The tree may have changed while the suite ran.
if [ "$(git rev-parse HEAD)" != "$head" ]; then
	say "HEAD moved from $head while the release was tested: nothing was changed here; run it again" >&2
	exit 1
fi
"$RELEASE_TOOL" check -version "$VERSION"
refspecs=()
for t in $tags; do refspecs+=("refs/tags/$t:refs/tags/$t"); done
git fetch -q "$tmp/repo" "${refspecs[@]}"
if ! git merge -q --ff-only "$commit"; then
	for t in $tags; do git tag -d "$t" >/dev/null; done
	say "could not fast-forward $branch to the release commit; the tags were removed again" >&2
	exit 1
fi
say "released $VERSION in $(( $(date +%s) - start ))s: $branch is at the release commit $commit, tagged $tags"
say "nothing was pushed; to publish: git push origin $branch $tags"
