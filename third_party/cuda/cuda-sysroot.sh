#!/usr/bin/env bash
# cuda-sysroot.sh: the CUDA headers and libraries UCX's CUDA transports and velo's cuda build tag
# need, from Debian 12's non-free packages, into third_party/cuda/root (see README.md).
#
#   cuda-sysroot.sh build   fetch (by package name and pinned version, through apt with this
#                           folder's sources.list and private state), check each .deb's SHA-256
#                           against debs.sha256, extract what is needed; cached by a stamp
#   cuda-sysroot.sh key     prints the stamp key
#   cuda-sysroot.sh check   only the checks
#
# Variables: CUDA_DEB_DIR, a folder that already holds the pinned .debs (they are checked like
# downloaded ones, and nothing is downloaded); GOARCH (only amd64 is pinned).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root="$here/root"
work="$here/work"
stamp="$root/.velo-cuda-stamp"
pins="$here/debs.sha256"
sources="$here/sources.list"

note() { printf 'cuda-sysroot: %s\n' "$*" >&2; }
die() {
	printf 'cuda-sysroot: error: %s\n' "$1" >&2
	shift
	local l
	for l in "$@"; do printf '  %s\n' "$l" >&2; done
	exit 1
}

# pinned prints "sha256 package version file" for each pin.
pinned() {
	local sum spec pkg ver
	while read -r sum spec; do
		case "$sum" in '' | '#'*) continue ;; esac
		pkg=${spec%%=*}
		ver=${spec#*=}
		# apt names a downloaded .deb package_version_arch.deb, with ':' of an epoch as %3a.
		printf '%s %s %s %s_%s_amd64.deb\n' "$sum" "$pkg" "$ver" "$pkg" "${ver//:/%3a}"
	done <"$pins"
}

stamp_key() {
	{
		printf 'cuda-sysroot 1\n'
		sha256sum "${BASH_SOURCE[0]}" "$pins" "$sources" | cut -d' ' -f1
	} | sha256sum | cut -d' ' -f1
}

checks() {
	local arch=${GOARCH:-$(go env GOARCH 2>/dev/null || echo amd64)}
	[ "$arch" = amd64 ] || die "the pinned CUDA packages are amd64; GOARCH is $arch." \
		"Add the $arch packages' pins to $pins (Debian ships nvidia-cuda-dev for arm64 and ppc64el too)."
	local t
	for t in dpkg-deb tar sha256sum flock; do
		command -v "$t" >/dev/null || die "$t is missing." "Run 'make deps' (Debian packages dpkg, tar, coreutils, util-linux)."
	done
	if [ -z "${CUDA_DEB_DIR:-}" ]; then
		command -v apt-get >/dev/null || die "apt-get is needed to fetch the CUDA packages." \
			"Or set CUDA_DEB_DIR to a folder holding the pinned .debs ($pins)."
		[ -r /usr/share/keyrings/debian-archive-keyring.gpg ] || die "the Debian archive key is missing (/usr/share/keyrings/debian-archive-keyring.gpg)." \
			"apt-get install debian-archive-keyring"
	fi
}

# fetch puts every pinned .deb into $work/debs, downloaded unless CUDA_DEB_DIR has it, and checks
# its SHA-256.
fetch() {
	local debs="$work/debs" sum pkg ver file want=()
	mkdir -p "$debs" "$work/logs"
	while read -r sum pkg ver file; do
		if [ -n "${CUDA_DEB_DIR:-}" ]; then
			[ -f "$CUDA_DEB_DIR/$file" ] || die "CUDA_DEB_DIR=$CUDA_DEB_DIR has no $file."
			ln -sf "$(cd "$CUDA_DEB_DIR" && pwd)/$file" "$debs/$file"
		elif ! [ -f "$debs/$file" ] || ! echo "$sum  $debs/$file" | sha256sum -c --status; then
			rm -f "$debs/$file"
			want+=("$pkg=$ver")
		fi
	done < <(pinned)
	if [ ${#want[@]} -gt 0 ]; then
		local apt="$work/apt"
		mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/preferences.d"
		# Private lists, cache, preferences and status: the machine's apt configuration and
		# package lists stay exactly as they were. apt checks the Release file's signature with
		# the key sources.list names, and each .deb against the signed index.
		local opts=(-q -o "Dir::Etc::SourceList=$sources" -o "Dir::Etc::SourceParts=-"
			-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
			-o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=$apt/preferences.d"
			-o "Dir::State::status=/dev/null" -o "APT::Sandbox::User=$(id -un)")
		note "apt-get update (bookworm non-free, private state)"
		apt-get "${opts[@]}" update >"$work/logs/apt.log" 2>&1 ||
			die "apt-get update failed; see $work/logs/apt.log." "$(tail -3 "$work/logs/apt.log")"
		note "apt-get download ${want[*]}"
		(cd "$debs" && apt-get "${opts[@]}" download "${want[@]}") >>"$work/logs/apt.log" 2>&1 ||
			die "apt-get download failed; see $work/logs/apt.log." "$(tail -3 "$work/logs/apt.log")"
	fi
	while read -r sum pkg ver file; do
		[ -f "$debs/$file" ] || die "$file was not downloaded; see $work/logs/apt.log."
		echo "$sum  $debs/$file" | sha256sum -c --status ||
			die "$file does not have the SHA-256 pinned in $pins ($sum); it is $(sha256sum "$debs/$file" | cut -d' ' -f1)." \
				"A package was rebuilt under the same version, or the file is damaged. Check it, then update the pin."
	done < <(pinned)
}

# extract unpacks from the .debs only what UCX's configure and the link need into a fresh tree,
# then moves it into place.
extract() {
	local tmp="$work/extract" new="$work/root.new" lib=./usr/lib/x86_64-linux-gnu
	rm -rf "$tmp" "$new"
	mkdir -p "$tmp" "$new/include" "$new/lib/stubs" "$new/run"
	local sum pkg ver file
	while read -r sum pkg ver file; do
		case "$pkg" in
		nvidia-cuda-dev)
			dpkg-deb --fsys-tarfile "$work/debs/$file" | tar -x -C "$tmp" --wildcards \
				'./usr/include/*' "$lib/libcudart_static.a" "$lib/libcudart.so" \
				"$lib/stubs/libcuda.so" "$lib/stubs/libnvidia-ml.so" "./usr/share/doc/$pkg/copyright"
			;;
		libcudart11.0)
			dpkg-deb --fsys-tarfile "$work/debs/$file" | tar -x -C "$tmp" --wildcards "$lib/libcudart.so.*" "./usr/share/doc/$pkg/copyright"
			;;
		libnvidia-ml-dev)
			dpkg-deb --fsys-tarfile "$work/debs/$file" | tar -x -C "$tmp" ./usr/include/nvml.h "./usr/share/doc/$pkg/copyright"
			;;
		*) die "no extraction rule for $pkg (pinned in $pins)." ;;
		esac
	done < <(pinned)
	# The headers UCX and cgo include: every top-level header and crt/ (what cuda_runtime.h
	# pulls in). The rest of the toolkit's include tree (thrust, cub, ...) is not needed.
	cp -a "$tmp"/usr/include/*.h "$tmp"/usr/include/*.hpp "$new/include/" 2>/dev/null || cp -a "$tmp"/usr/include/*.h "$new/include/"
	cp -a "$tmp/usr/include/crt" "$new/include/"
	cp -a "$tmp/$lib/libcudart_static.a" "$tmp/$lib"/libcudart.so* "$new/lib/"
	cp -a "$tmp/$lib/stubs/libcuda.so" "$tmp/$lib/stubs/libnvidia-ml.so" "$new/lib/stubs/"
	# run/: sonames pointing at the stubs, for running a cuda-tagged binary on a machine without
	# the NVIDIA driver (LD_LIBRARY_PATH=.../run): every CUDA call then fails with
	# CUDA_ERROR_STUB_LIBRARY. Never ship it; a GPU node has the driver's own libraries.
	ln -s ../lib/stubs/libcuda.so "$new/run/libcuda.so.1"
	ln -s ../lib/stubs/libnvidia-ml.so "$new/run/libnvidia-ml.so.1"
	mkdir -p "$new/share/doc"
	cp -a "$tmp/usr/share/doc/"* "$new/share/doc/"
	local need
	for need in include/cuda.h include/cuda_runtime.h include/nvml.h lib/libcudart_static.a lib/libcudart.so lib/stubs/libcuda.so lib/stubs/libnvidia-ml.so; do
		[ -e "$new/$need" ] || die "the packages did not provide $need."
	done
	grep -q '^#define CUDA_VERSION 11080$' "$new/include/cuda.h" || die "include/cuda.h is not CUDA 11.8 (CUDA_VERSION 11080)."
	rm -rf "$tmp" "$root"
	mv "$new" "$root"
}

build() {
	local t0
	t0=$(date +%s)
	fetch
	local t1
	t1=$(date +%s)
	extract
	local t2
	t2=$(date +%s)
	{
		printf 'CUDA for velo from Debian 12 non-free (third_party/cuda/README.md)\n'
		printf 'built %s: fetch %ss, extract %ss\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$((t1 - t0))" "$((t2 - t1))"
		printf 'packages (sha256, package=version):\n'
		pinned | while read -r sum pkg ver file; do printf '  %s  %s=%s\n' "$sum" "$pkg" "$ver"; done
	} >"$root/velo-cuda.txt"
	stamp_key >"$stamp"
	# The .debs (nvidia-cuda-dev is 774 MB) are not kept: the stamp says the root is complete.
	[ -n "${CUDA_DEB_DIR:-}" ] || rm -rf "$work/debs" "$work/apt/cache"
	note "CUDA 11.8 sysroot in $root in $((t2 - t0)) s (fetch $((t1 - t0)) s, extract $((t2 - t1)) s)"
}

cmd=${1:-build}
case "$cmd" in
key)
	stamp_key
	exit 0
	;;
check)
	checks
	note "checks passed"
	exit 0
	;;
build) ;;
*) die "unknown command '$cmd'." "usage: cuda-sysroot.sh [build|key|check]" ;;
esac
checks
mkdir -p "$work"
exec 9>"$work/.lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(stamp_key)" ] && [ -f "$root/lib/libcudart_static.a" ]; then
	note "up to date: $root ($(sed -n 2p "$root/velo-cuda.txt" 2>/dev/null))"
	exit 0
fi
build
