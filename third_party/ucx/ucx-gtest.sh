#!/usr/bin/env bash
# ucx-gtest.sh: runs UCX's own gtest suite against velo's patched UCX (see README.md, "UCX's own
# tests"). Not part of `make test`: the build alone takes tens of minutes on two cores.
#
#   ucx-gtest.sh build          unpacks the pinned source into work/gtest-<version>/src, applies the
#                               patch set exactly as the static build does, and builds UCX's gtest
#                               there (shared libraries, tcp, shared memory and self only)
#   ucx-gtest.sh run [GROUP...] builds if needed, runs the groups (all by default) and classifies
#                               every result; exits 1 on any failure that is not an expected refusal
#   ucx-gtest.sh classify FILE  classifies a results file ("STATUS NAME" lines) as run does
#   ucx-gtest.sh refusals       prints the expected refusals the README lists
#   ucx-gtest.sh groups         prints the groups and their gtest filters
#
# The expected refusals are kept by name in README.md, between the lines
# "<!-- ucx-gtest refusals begin -->" and "<!-- ucx-gtest refusals end -->": one list item per
# test, "- `name`", under a line that says why. Nothing else lists them.
#
# Variables: VELO_UCX_GTEST_OBJ (an existing gtest build tree to run instead of building one),
# VELO_UCX_GTEST_TIMEOUT (seconds one test may take before UCX's watchdog aborts it; default 300),
# VELO_UCX_GTEST_OUT (where the logs and results go; default work/gtest-<version>/run-<time>),
# VELO_UCX_GTEST_README (the README to read the refusals from; the tests use it), JOBS (make -j),
# VELO_UCX_GTEST_REFUSALS=run (also run the listed refusals, to see that each still fails; by
# default they are left out), VELO_UCX_GTEST_ONLY=file (run only the tests of the groups that the
# file names, one full test name a line).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readme=${VELO_UCX_GTEST_README:-$here/README.md}
timeout_s=${VELO_UCX_GTEST_TIMEOUT:-300}
ucx_version=1.22.0
gtest_root="$here/work/gtest-$ucx_version"

die() {
	printf 'ucx-gtest: error: %s\n' "$1" >&2
	shift
	local line
	for line in "$@"; do printf '  %s\n' "$line" >&2; done
	exit 1
}
note() { printf 'ucx-gtest: %s\n' "$*" >&2; }

# The groups: name and gtest filter. Each group runs what its filter selects minus what the
# groups before it selected, so no test runs twice. UCX instantiates each ucp suite once per
# transport set (tcp/, self/, shm/, all/, ...); sets this build lacks (ib, rc, dc, ...) skip.
groups=(
	"am */test_ucp_am*"
	"tag */test_ucp_tag*"
	"keepalive *keepalive*"
	"wireup */test_ucp_wireup*"
	"peer-failure */test_ucp_peer_failure*"
	"sockaddr */test_ucp_sockaddr*"
	"stream */test_ucp_stream*"
	"uct-tcp tcp/*-*test_ucp*"
	"ptr-map test_datatype_ptr_map*"
)

# group_filter NAME prints the group's filter with the earlier groups' patterns excluded.
group_filter() {
	local want=$1 g name pat before=()
	for g in "${groups[@]}"; do
		name=${g%% *}
		pat=${g#* }
		if [ "$name" = "$want" ]; then
			local pos=${pat%%-*} neg=""
			[ "$pos" = "$pat" ] || neg=${pat#*-}
			if [ ${#before[@]} -gt 0 ]; then
				neg="${neg:+$neg:}$(IFS=:; echo "${before[*]}")"
			fi
			printf '%s%s\n' "$pos" "${neg:+-$neg}"
			return 0
		fi
		before+=("${pat%%-*}")
	done
	die "unknown group '$want'." "The groups: $(for g in "${groups[@]}"; do printf '%s ' "${g%% *}"; done)"
}

# refusals prints the expected refusals, one test name per line, from the README.
refusals() {
	[ -f "$readme" ] || die "$readme is missing; the expected refusals are kept there."
	awk '
		/<!-- ucx-gtest refusals begin -->/ { on = 1; n++; next }
		/<!-- ucx-gtest refusals end -->/ { on = 0; next }
		on && /^- `[^`]+`/ { s = $0; sub(/^- `/, "", s); sub(/`.*/, "", s); print s }
		END { if (n != 1) exit 3 }
	' "$readme" || die "$readme must hold exactly one '<!-- ucx-gtest refusals begin -->' ... 'end' block."
}

# may_pass prints the listed refusals marked "(may pass)": a test whose only failure is the
# guard's warning line, which UCX prints at most once per 10 s, so whether it fails depends on
# what ran just before it in the same process.
may_pass() {
	awk '
		/<!-- ucx-gtest refusals begin -->/ { on = 1; next }
		/<!-- ucx-gtest refusals end -->/ { on = 0; next }
		on && /^- `[^`]+` \(may pass/ { s = $0; sub(/^- `/, "", s); sub(/`.*/, "", s); print s }
	' "$readme"
}

# classify FILE reads "STATUS NAME" lines (OK, FAILED, SKIPPED, CRASHED, MISSING, and LEFTOUT for
# a listed refusal the run left out) and prints the counts. Every FAILED, CRASHED or MISSING test
# that is not an expected refusal is breakage, and so is an expected refusal that passed (the
# list must say what happens) unless it is marked "(may pass)". Returns 1 on breakage.
classify() {
	local results=$1
	[ -f "$results" ] || die "no results file $results."
	awk -v list=<(refusals) -v maypass=<(may_pass) '
		BEGIN {
			while ((getline name < list) > 0) expected[name] = 1
			while ((getline name < maypass) > 0) may[name] = 1
		}
		$1 == "LEFTOUT" { left++; next }
		{ status = $1; name = $2; run++; count[status]++
		  if (status == "OK" || status == "SKIPPED") {
			if ((name in expected) && !(name in may)) { unexpected_pass[++np] = name }
			next
		  }
		  if (name in expected) { refused++; seen[name] = 1; next }
		  broken[++nb] = status " " name
		}
		END {
			printf "run %d: passed %d, skipped %d, expected refusals %d, other failures %d\n",
				run, count["OK"], count["SKIPPED"], refused, nb
			if (left > 0) printf "left out: %d expected refusals (VELO_UCX_GTEST_REFUSALS=run runs them)\n", left
			for (i = 1; i <= nb; i++) printf "breakage: %s\n", broken[i]
			for (i = 1; i <= np; i++) printf "breakage: an expected refusal passed: %s (remove it from the README list)\n", unexpected_pass[i]
			exit (nb + np > 0) ? 1 : 0
		}
	' "$results"
}

# list_tests GTEST FILTER prints the full names of the tests the filter selects.
list_tests() {
	"$1" --gtest_list_tests --gtest_filter="$2" 2>/dev/null | awk '
		/^\[/ { next }
		/^[^ ]/ { suite = $1; next }
		/^  [^ ]/ { print suite $1 }
	'
}

# parse_log LOG prints "STATUS NAME" for every test the gtest log reports as finished, and
# "RUNNING NAME" for the last test it started without finishing (a crash or a watchdog abort).
parse_log() {
	awk '
		/^\[ RUN      \] / { running = $4; skip = 0; next }
		/^\[     SKIP \]/ { skip = 1; next }
		/^\[       OK \] / { print (skip ? "SKIPPED" : "OK"), $4; if ($4 == running) running = ""; skip = 0; next }
		/^\[  SKIPPED \] / && / \([0-9]+ ms\)$/ { n = $4; sub(/,$/, "", n); print "SKIPPED", n; if (n == running) running = ""; next }
		/^\[  FAILED  \] / && / \([0-9]+ ms\)$/ { n = $4; sub(/,$/, "", n); print "FAILED", n; if (n == running) running = ""; next }
		END { if (running != "") print "RUNNING", running }
	' "$1"
}

# run_group GTEST NAME OUT runs one group and appends "STATUS NAME" lines to OUT/results. The
# tests go to gtest by name, in chunks (one argument may not exceed 128 KiB); when gtest stops in
# a test (a crash, or the watchdog's abort after VELO_UCX_GTEST_TIMEOUT), that test is recorded
# as CRASHED and the chunk resumes after it.
run_group() {
	local gtest=$1 name=$2 out=$3 filter attempt=0 log rc
	filter=$(group_filter "$name")
	list_tests "$gtest" "$filter" >"$out/$name.list"
	if [ -n "${VELO_UCX_GTEST_ONLY:-}" ]; then
		# Only the tests the file names (one full name a line), e.g. to run some failures again.
		awk -v only="$VELO_UCX_GTEST_ONLY" '
			BEGIN { while ((getline n < only) > 0) keep[n] = 1 }
			$1 in keep' "$out/$name.list" >"$out/$name.only"
		mv "$out/$name.only" "$out/$name.list"
	fi
	if [ "${VELO_UCX_GTEST_REFUSALS:-}" = run ]; then
		cp "$out/$name.list" "$out/$name.todo"
	else
		# The listed refusals are left out: they fail by design, and several of them wait for
		# data that never comes until the watchdog ends them.
		awk -v list=<(refusals) -v left="$out/$name.left" '
			BEGIN { while ((getline n < list) > 0) refused[n] = 1 }
			$1 in refused { print "LEFTOUT", $1 > left; next }
			{ print }' "$out/$name.list" >"$out/$name.todo"
		[ ! -f "$out/$name.left" ] || cat "$out/$name.left" >>"$out/results"
	fi
	note "group $name: $(wc -l <"$out/$name.list") tests, $(wc -l <"$out/$name.todo") to run (filter $filter)"
	while [ -s "$out/$name.todo" ]; do
		attempt=$((attempt + 1))
		log="$out/$name.$attempt.log"
		awk '{ n += length($0) + 1; if (n > 60000 && NR > 1) exit; print }' "$out/$name.todo" >"$out/$name.chunk"
		set +e
		UCX_HANDLE_ERRORS=${UCX_HANDLE_ERRORS:-bt} "$gtest" -t "$timeout_s" --gtest_filter="$(paste -sd: "$out/$name.chunk")" >"$log" 2>&1
		rc=$?
		set -e
		parse_log "$log" >"$out/$name.$attempt.parsed"
		grep -v '^RUNNING ' "$out/$name.$attempt.parsed" >>"$out/results" || true
		if grep -q '^RUNNING ' "$out/$name.$attempt.parsed"; then
			sed -n 's/^RUNNING /CRASHED /p' "$out/$name.$attempt.parsed" >>"$out/results"
			note "group $name: gtest stopped (exit $rc) in $(sed -n 's/^RUNNING //p' "$out/$name.$attempt.parsed"); resuming after it"
		elif [ "$rc" -gt 1 ]; then
			note "group $name: gtest exited $rc; see $log"
		fi
		# What is left: listed, neither reported nor the test gtest stopped in.
		awk -v done="$out/$name.$attempt.parsed" '
			BEGIN { while ((getline l < done) > 0) { split(l, f, " "); gone[f[2]] = 1 } }
			!($1 in gone)' "$out/$name.todo" >"$out/$name.todo.new"
		if ! grep -q '^RUNNING ' "$out/$name.$attempt.parsed" &&
			[ "$(wc -l <"$out/$name.todo.new")" -gt $(($(wc -l <"$out/$name.todo") - $(wc -l <"$out/$name.chunk"))) ]; then
			# gtest finished, but part of the chunk did not run: record it rather than loop.
			awk -v left="$out/$name.todo.new" '
				BEGIN { while ((getline l < left) > 0) still[l] = 1 }
				$1 in still { print "MISSING", $1 }' "$out/$name.chunk" >"$out/$name.missing"
			cat "$out/$name.missing" >>"$out/results"
			note "group $name: $(wc -l <"$out/$name.missing") tests of a chunk did not run; see $log"
			awk -v m="$out/$name.missing" '
				BEGIN { while ((getline l < m) > 0) { split(l, f, " "); gone[f[2]] = 1 } }
				!($1 in gone)' "$out/$name.todo.new" >"$out/$name.todo"
		else
			mv "$out/$name.todo.new" "$out/$name.todo"
		fi
	done
	rm -f "$out/$name.todo" "$out/$name.todo.new" "$out/$name.chunk"
}

# build_gtest unpacks the pinned source, applies the patch set and builds UCX's gtest.
build_gtest() {
	local src="$gtest_root/src" obj="$gtest_root/obj" archive
	archive=${UCX_TARBALL:-${VELO_UCX_SHARED_SOURCE:-$here/../../../shared/third_party/ucx-1.22.0-git.tar.gz}}
	[ -f "$archive" ] || die "no UCX $ucx_version source at $archive." "Give the git archive of tag v1.22.0 with UCX_TARBALL=path (pinned in sources.sha256)."
	local sum
	sum=$(sha256sum "$archive" | cut -d' ' -f1)
	grep -q "^$sum .* $ucx_version " "$here/sources.sha256" ||
		die "$archive (SHA-256 $sum) is not a pinned UCX $ucx_version source (sources.sha256)."
	rm -rf "$gtest_root/src" "$gtest_root/obj" "$gtest_root/logs" "$gtest_root/.patch-set"
	mkdir -p "$gtest_root/logs"
	local tmp top
	tmp=$(mktemp -d "$gtest_root/.unpack.XXXXXX")
	tar -xf "$archive" -C "$tmp"
	top=$(find "$tmp" -mindepth 1 -maxdepth 1 -type d | head -1)
	mv "$top" "$src"
	rm -rf "$tmp"
	local f
	for f in "$here/patches/$ucx_version"/*.patch; do
		(cd "$src" && LC_ALL=C patch -p1 -N -F0 --no-backup-if-mismatch <"$f") >>"$gtest_root/logs/patches.log" 2>&1 ||
			die "patch $(basename "$f") does not apply cleanly; see $gtest_root/logs/patches.log."
	done
	note "applied $(ls "$here/patches/$ucx_version"/*.patch | wc -l) patches; autogen, configure and make (logs in $gtest_root/logs)"
	# The git archive ships no configure; a release tarball does.
	if [ ! -x "$src/configure" ]; then
		(cd "$src" && ./autogen.sh) >"$gtest_root/logs/autogen.log" 2>&1 || die "autogen failed; see $gtest_root/logs/autogen.log."
	fi
	mkdir -p "$obj"
	# Only what the groups use: tcp, shared memory and self. -O1 for the C++ keeps the gtest
	# compile within reach of a small machine; the library is -O2 as in a release.
	(cd "$obj" && "$src/configure" --enable-gtest --enable-mt --disable-doxygen-doc --disable-dependency-tracking \
		--without-cuda --without-rocm --without-gdrcopy --without-knem --without-xpmem --without-ze \
		--without-gaudi --without-efa --without-mad --without-java --without-go --without-verbs \
		--without-rdmacm --without-fuse3 --without-valgrind CFLAGS="-O2 -g0" CXXFLAGS="-O1 -g0") \
		>"$gtest_root/logs/configure.log" 2>&1 || die "configure failed; see $gtest_root/logs/configure.log."
	local jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
	make -C "$obj" -j"$jobs" >"$gtest_root/logs/make.log" 2>&1 || die "make failed; see $gtest_root/logs/make.log."
	make -C "$obj/test/gtest" -j"$jobs" gtest >"$gtest_root/logs/gtest.log" 2>&1 || die "the gtest build failed; see $gtest_root/logs/gtest.log."
	# The build is for this patch set: a changed patch rebuilds.
	cat "$here/patches/$ucx_version"/*.patch | sha256sum | cut -d' ' -f1 >"$gtest_root/.patch-set"
}

patch_set_sum() { cat "$here/patches/$ucx_version"/*.patch | sha256sum | cut -d' ' -f1; }

cmd=${1:-run}
[ $# -eq 0 ] || shift
case "$cmd" in
refusals) refusals; exit 0 ;;
groups)
	for g in "${groups[@]}"; do printf '%-13s %s\n' "${g%% *}" "$(group_filter "${g%% *}")"; done
	exit 0
	;;
classify)
	[ $# -eq 1 ] || die "usage: ucx-gtest.sh classify RESULTS"
	classify "$1"
	exit $?
	;;
build)
	build_gtest
	exit 0
	;;
run) ;;
*) die "unknown command '$cmd'." "usage: ucx-gtest.sh [build|run [GROUP...]|classify RESULTS|refusals|groups]" ;;
esac

refusals >/dev/null
[ -z "${VELO_UCX_GTEST_ONLY:-}" ] || [ -f "$VELO_UCX_GTEST_ONLY" ] ||
	die "VELO_UCX_GTEST_ONLY=$VELO_UCX_GTEST_ONLY is not a file." "Give a file with one full test name a line."
sel=("$@")
if [ ${#sel[@]} -eq 0 ]; then
	for g in "${groups[@]}"; do sel+=("${g%% *}"); done
fi
for g in "${sel[@]}"; do group_filter "$g" >/dev/null; done
obj=${VELO_UCX_GTEST_OBJ:-}
if [ -z "$obj" ]; then
	obj="$gtest_root/obj"
	if [ ! -x "$obj/test/gtest/gtest" ] || [ "$(cat "$gtest_root/.patch-set" 2>/dev/null)" != "$(patch_set_sum)" ]; then
		note "no gtest build for this patch set in $gtest_root: building it (tens of minutes)"
		build_gtest
	fi
fi
gtest="$obj/test/gtest/gtest"
[ -x "$gtest" ] || die "no gtest binary at $gtest."
out=${VELO_UCX_GTEST_OUT:-$gtest_root/run-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
: >"$out/results"
note "running groups ${sel[*]} with $gtest (watchdog ${timeout_s} s per test); logs in $out"
for g in "${sel[@]}"; do
	run_group "$gtest" "$g" "$out"
done
classify "$out/results" | tee "$out/summary"
