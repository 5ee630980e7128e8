#!/usr/bin/env bash
# ucx-static.sh: builds the static UCX that `go build -tags ucx_static` links (see README.md).
#
#   ucx-static.sh build            checks, then fetch + patch + configure + make + install of the
#                                  libraries (cached by a stamp); no tools
#   ucx-static.sh tools            build, then ucx_info and ucx_perftest of that build into
#                                  build/bin (benchmarks and their tests need them; make demo not)
#   ucx-static.sh version          prints the UCX version the next build would make
#   ucx-static.sh check            only the checks (headers, UCX_EXTRA_CONFIGURE, cross compiler,
#                                  UCX_DIR, UCX_TARBALL pin, the patch set's files); prints the
#                                  configure arguments
#   ucx-static.sh key              prints the stamp key the next build compares against
#   ucx-static.sh patches          lists the patch set the next build applies
#   ucx-static.sh patch-check      unpacks the selected source into a scratch folder and applies the
#                                  patch set there, as a build would, and nothing else
#   ucx-static.sh deb-src-list DIR writes the deb-src lists derived from the system's apt sources
#
# The checks exist because UCX's own configure degrades silently: without the rdma-core headers it
# builds a UCX with only TCP and shared memory, with DEVX left at "check" it drops the mlx5 DEVX
# memory domain, and with a host compiler in a cross build it builds for the host. Each of those
# builds passes CI and then runs production traffic over the wrong transport, so this script stops
# instead and names the fix.
#
# Which source: UCX_TARBALL when set; else UCX 1.22.0 from ../shared/third_party beside the
# checkout when that archive is there (VELO_UCX_SHARED_SOURCE names another path); else Debian's
# UCX 1.13.1 source package, said in one line. UCX_SOURCE=debian picks Debian's whatever is there.
#
# Every build applies velo's patch set for its release, patches/<version>/NNNN-name.patch in name
# order, after unpacking and before autogen and configure (README.md, "Patch set"): it closes
# UCX's software RMA, tcp PUT and forged wire ids. A patch that does not apply cleanly stops the
# build, naming it; the patches' SHA-256 sums are part of the stamp key.
#
# Variables: UCX_TARBALL, UCX_SOURCE, UCX_DIR, UCX_EXTRA_CONFIGURE, VELO_UCX_IGNORE_MISSING_HEADERS, CC,
# CC_<target>, GOOS, GOARCH, CFLAGS, CPPFLAGS, LDFLAGS, CPATH, C_INCLUDE_PATH, LIBRARY_PATH,
# VELO_UCX_PATCHES (another folder of per-version patch sets, for tests), VELO_UCX_CUDA (the CUDA
# variant: the same source and patch set configured --with-cuda against that CUDA sysroot, made by
# make cuda-sysroot, into build-<version>-cuda with build-cuda pointing at it; README.md, "CUDA").
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Each UCX version installs into build-<version>/ (include/, lib/, the stamp); build/ is a link to
# the one built last, which is what `-tags ucx_static` links. All are ignored by git.
link_dir="$here/build"
build_dir="" # set by resolve_source
stamp=""
src_root="$here/src"      # unpacked UCX sources, src/ucx-<version> (ignored by git)
src_dir=""                # set by select_version
obj_dir=""                # set by select_version: work/obj-<version>, kept for `tools`
work_dir="$here/work"     # apt state, downloads, object tree, logs (ignored by git)
pins="$here/sources.sha256"
# velo's patch sets, one folder per UCX version (patches/1.13.1, patches/1.22.0).
patches_root=${VELO_UCX_PATCHES:-$here/patches}
patch_dir="" # set by select_version
# The CUDA variant (make ucx-static-cuda): the CUDA headers and libraries of make cuda-sysroot
# (third_party/cuda/root). Empty: the default build, without CUDA. The variant keeps its state
# (object tree, logs, lock) in work/cuda, so it never waits for a default build or overwrites its
# logs: make test builds both at once.
cuda_root=${VELO_UCX_CUDA:-}
[ -z "$cuda_root" ] || work_dir="$here/work/cuda"
# The UCX 1.22.0 source the workspace provides beside the checkout (a git archive of tag v1.22.0).
shared_source=${VELO_UCX_SHARED_SOURCE:-$here/../../../shared/third_party/ucx-1.22.0-git.tar.gz}

# The Debian source package version the recipe fetches by default; its files are pinned in
# sources.sha256.
UCX_DEBIAN_VERSION=${UCX_DEBIAN_VERSION:-1.13.1-1}

# Libraries, in dependency order (a library's dependencies first). The partial link keeps this
# order, so constructors run as they would with shared libraries: libucm's and libucs's before
# those of the transports that use them. See README.md, "Linking".
# UCX 1.22 builds the mlx5 transports as a module of their own (libuct_ib_mlx5); 1.13 has them in
# libuct_ib. select_version adds it.
ucx_archives=(lib/libucm.a lib/libucs.a lib/libuct.a lib/ucx/libuct_ib.a
	lib/ucx/libuct_rdmacm.a lib/ucx/libuct_cma.a lib/libucp.a)
# The source directories that hold those libraries; nothing else of UCX is built.
ucx_src_dirs=(src/ucm src/ucs src/uct src/ucp)

die() {
	printf 'ucx-static: error: %s\n' "$1" >&2
	shift
	local line
	for line in "$@"; do printf 'ucx-static:   %s\n' "$line" >&2; done
	exit 1
}
note() { printf 'ucx-static: %s\n' "$*" >&2; }

affirmative() {
	case "${1,,}" in
	'' | 0 | false | no | off) return 1 ;;
	*) return 0 ;;
	esac
}

# --- toolchain and cross-compilation -----------------------------------------------------------

# Normalises an architecture name (uname -m, GOARCH or the first field of -dumpmachine) to the
# GNU name; prints nothing for an architecture UCX does not support.
gnu_arch() {
	case "$1" in
	x86_64 | amd64) echo x86_64 ;;
	aarch64 | arm64) echo aarch64 ;;
	ppc64le | powerpc64le) echo powerpc64le ;;
	esac
}

# ELF e_machine of a compiled object, as a GNU architecture name.
object_arch() {
	local machine
	machine=$(od -An -tu2 -j18 -N2 "$1" | tr -d ' ')
	case "$machine" in
	62) echo x86_64 ;;
	183) echo aarch64 ;;
	21) echo powerpc64le ;;
	*) echo "unknown(e_machine=$machine)" ;;
	esac
}

# Sets cc (the compiler command, possibly with arguments), target_triple, host_triple and
# configure_host (the --host argument, empty for a native build). Stops when a cross build has
# no working cross compiler: UCX's configure would otherwise build for the host without a word.
resolve_toolchain() {
	local host_arch target_arch goos=${GOOS:-linux}
	host_arch=$(gnu_arch "$(uname -m)")
	[ -n "$host_arch" ] || die "this machine's architecture $(uname -m) is not one UCX supports (x86_64, aarch64, ppc64le)."
	[ "$goos" = linux ] || die "GOOS=$goos: the static UCX is Linux only." \
		"Build for linux, or leave out -tags ucx_static (the ucx module then reports ErrUnsupported)."
	if [ -n "${GOARCH:-}" ]; then
		target_arch=$(gnu_arch "$GOARCH")
		[ -n "$target_arch" ] || die "GOARCH=$GOARCH is not an architecture UCX supports (amd64, arm64, ppc64le)."
	else
		target_arch=$host_arch
	fi
	host_triple="$host_arch-linux-gnu"
	target_triple="$target_arch-linux-gnu"

	local cc_var="CC_${target_triple//-/_}" from="" v
	cc=""
	for v in "$cc_var" "CC_$target_triple"; do
		if [ -n "$(printenv "$v" 2>/dev/null || true)" ]; then
			cc=$(printenv "$v")
			from=$v
			break
		fi
	done
	if [ -z "$cc" ] && [ -n "${CC:-}" ]; then
		cc=$CC
		from=CC
	fi
	if [ -z "$cc" ]; then
		if [ "$target_arch" != "$host_arch" ]; then
			die "cross build for $target_triple (GOARCH=${GOARCH}) on a $host_arch host, but no cross compiler is set." \
				"Set $cc_var (or CC) to a compiler for $target_arch, e.g. $cc_var=$target_triple-gcc" \
				"(Debian: apt-get install gcc-$target_triple, plus the :${GOARCH} rdma-core -dev packages)." \
				"Without one, UCX's configure would quietly build for the host instead."
		fi
		cc=gcc
		from=default
	fi

	local cc_words
	read -r -a cc_words <<<"$cc"
	if ! command -v "${cc_words[0]}" >/dev/null 2>&1; then
		if [ "$target_arch" != "$host_arch" ]; then
			die "$from=$cc: the cross compiler for $target_triple was not found." \
				"Install it (Debian: apt-get install gcc-$target_triple) or point $cc_var at it."
		fi
		die "$from=$cc: the C compiler was not found." \
			"Install build-essential, or set CC to a working compiler (a cross compiler needs GOARCH too)."
	fi

	# Ask the compiler what it really produces: a compiler named like a cross compiler that emits
	# host code (or the reverse) must not reach configure.
	local probe_dir obj arch
	probe_dir=$(mktemp -d)
	obj="$probe_dir/probe.o"
	if ! printf 'int velo_ucx_probe(void) { return 0; }\n' |
		"${cc_words[@]}" -xc -c -o "$obj" - >"$probe_dir/log" 2>&1; then
		local why
		why=$(head -3 "$probe_dir/log")
		rm -rf "$probe_dir"
		die "$from=$cc does not compile a trivial C file, so it is not a working compiler for $target_triple." \
			"${why:-no output}" \
			"Fix or replace it (Debian: apt-get install gcc-$target_triple for a cross build)."
	fi
	arch=$(object_arch "$obj")
	rm -rf "$probe_dir"
	if [ "$arch" != "$target_arch" ]; then
		if [ "$target_arch" = "$host_arch" ]; then
			die "$from=$cc builds for $arch, but the Go target is $target_arch (GOARCH=${GOARCH:-unset})." \
				"For a cross build set GOARCH to match that compiler; otherwise unset $from."
		fi
		die "$from=$cc produces $arch code, not $target_arch: it is not a working cross compiler for $target_triple." \
			"Without a real cross compiler UCX's configure would quietly build for the host." \
			"Set $cc_var to a $target_arch compiler (Debian: apt-get install gcc-$target_triple)."
	fi
	configure_host=""
	[ "$target_arch" = "$host_arch" ] || configure_host="--host=$target_triple"
}

# --- the rdma-core headers ---------------------------------------------------------------------

# The headers UCX needs for InfiniBand/RoCE, and the Debian package that ships each.
required_headers=(infiniband/verbs.h:libibverbs-dev infiniband/mlx5dv.h:libibverbs-dev
	rdma/rdma_cma.h:librdmacm-dev)

# Prints the compiler's <...> include search list: it already contains CPATH and C_INCLUDE_PATH,
# the compiler's own directories and, for a cross compiler, its sysroot's. This is the list
# configure will search, so the check cannot disagree with it.
compiler_include_dirs() {
	local cc_words
	read -r -a cc_words <<<"$cc"
	LC_ALL=C "${cc_words[@]}" $CPPFLAGS_WORDS -xc -E -v /dev/null 2>&1 >/dev/null |
		sed -n '/^#include <\.\.\.> search starts here:/,/^End of search list\./p' |
		sed -e '1d' -e '$d' -e 's/^ *//' -e 's/ (framework directory)$//'
}

check_headers() {
	if affirmative "${VELO_UCX_IGNORE_MISSING_HEADERS:-}"; then
		note "VELO_UCX_IGNORE_MISSING_HEADERS is set: skipping the rdma-core header check; configure must still find them."
		return
	fi
	local dirs=() dir entry header pkg found missing=() pkgs=()
	mapfile -t dirs < <(compiler_include_dirs)
	for entry in "${required_headers[@]}"; do
		header=${entry%%:*}
		pkg=${entry#*:}
		found=""
		for dir in "${dirs[@]}"; do
			if [ -f "$dir/$header" ]; then
				found=$dir
				break
			fi
		done
		if [ -z "$found" ]; then
			missing+=("<$header> (Debian package $pkg)")
			case " ${pkgs[*]:-} " in *" $pkg "*) ;; *) pkgs+=("$pkg") ;; esac
		fi
	done
	[ ${#missing[@]} -eq 0 ] && return
	local m lines=()
	for m in "${missing[@]}"; do lines+=("missing $m"); done
	die "the rdma-core headers UCX needs for InfiniBand/RoCE were not found; without them UCX's configure builds a TCP/shared-memory-only UCX, so the build stops." \
		"${lines[@]}" \
		"searched: ${dirs[*]:-(the compiler reported no include directories)}" \
		"fix: apt-get install ${pkgs[*]}, or add the directory that holds them to CPATH or C_INCLUDE_PATH;" \
		"if configure finds them by other means, set VELO_UCX_IGNORE_MISSING_HEADERS=1 to skip this check."
}

# --- configure arguments -----------------------------------------------------------------------

# UCX_EXTRA_CONFIGURE is split on whitespace and appended last, where the last option wins. Any
# option that would switch off an RDMA piece is refused for that reason: it would override the
# recipe's own flags.
check_extra_configure() {
	extra_args=()
	[ -n "${UCX_EXTRA_CONFIGURE:-}" ] || return 0
	read -r -a extra_args <<<"$UCX_EXTRA_CONFIGURE"
	local arg
	for arg in "${extra_args[@]}"; do
		case "$arg" in
		--without-devx | --with-devx=no | --with-devx=check)
			die "UCX_EXTRA_CONFIGURE carries $arg; it is appended last, so it would override --with-devx." \
				"With DEVX off (or left at 'check', which drops it silently when rdma-core lacks it) UCX loses the mlx5 DEVX memory domain" \
				"and the accelerated rc_mlx5/dc_mlx5 transports fall back. Remove $arg from UCX_EXTRA_CONFIGURE." ;;
		--without-verbs | --with-verbs=no | --without-mlx5-dv | --with-mlx5-dv=no | --without-rdmacm | --with-rdmacm=no)
			die "UCX_EXTRA_CONFIGURE carries $arg; it is appended last and would build a UCX without that RDMA transport," \
				"which then runs production traffic over TCP. Remove $arg from UCX_EXTRA_CONFIGURE." ;;
		--disable-static | --enable-static=no | --enable-shared | --enable-shared=*)
			die "UCX_EXTRA_CONFIGURE carries $arg; the recipe builds static libraries only (-tags ucx_static links them)." \
				"Remove it; for a shared UCX install one and point UCX_DIR at it." ;;
		--disable-logging | --enable-logging=no)
			note "warning: UCX_EXTRA_CONFIGURE carries $arg: UCX_LOG_LEVEL=debug will not show the 'md open by' line used to verify the lane." ;;
		esac
	done
}

# The shell configure, make's recipes and libtool run under: dash where the machine has it. Under
# bash, which configure otherwise picks up from the environment, configure takes about 70% more
# CPU and the compile about 30% more (libtool is a shell script run once per object, and most of
# that time is bash starting); the objects are the same. Empty: configure's own choice.
config_shell=""
if [ -x /bin/dash ]; then
	config_shell=/bin/dash
fi

# The configure arguments. Each is explained in README.md.
configure_args() {
	local cuda_args=(--without-cuda)
	[ -z "$cuda_root" ] || cuda_args=(--with-cuda="$cuda_root")
	args=(
		--prefix="$build_dir"
		--enable-option-checking=fatal
		--enable-static --disable-shared --with-pic
		--enable-mt
		--with-verbs --with-rdmacm "${version_args[@]}" --with-devx
		--with-rc --with-ud --with-dc
		--enable-cma
		--enable-logging
		--disable-optimizations
		--without-bfd --without-valgrind
		"${cuda_args[@]}" --without-rocm --without-gdrcopy --without-knem --without-xpmem --without-ugni
		--without-fuse3 --without-java --without-go
		--disable-doxygen-doc
		--disable-dependency-tracking
	)
	[ -z "$configure_host" ] || args+=("$configure_host")
	args+=("CC=$cc")
	# UCX compiles with -O3 -g; debug info doubles the archives and the compile and link time
	# for a library users do not step through. CFLAGS, when set, replaces this default.
	args+=("CFLAGS=${CFLAGS--g0}")
	args+=("${extra_args[@]}")
}

# --- UCX_DIR: a preinstalled, shared UCX -------------------------------------------------------

check_ucx_dir() {
	local dir=$1 libdir="" d so="" static=""
	[ -d "$dir" ] || die "UCX_DIR=$dir does not exist." "Point UCX_DIR at a UCX install prefix (the directory that holds include/ and lib/), or unset it."
	for d in "$dir/lib" "$dir/lib64" "$dir/lib/${host_triple:-x86_64-linux-gnu}"; do
		if [ -e "$d/libucp.so" ]; then
			libdir=$d
			so="$d/libucp.so"
			break
		fi
		[ -n "$static" ] || [ ! -e "$d/libucp.a" ] || static="$d/libucp.a"
	done
	if [ -z "$so" ]; then
		if [ -n "$static" ]; then
			die "UCX_DIR=$dir has $static but no shared libucp.so." \
				"UCX_DIR links a shared UCX whose transports load as its own plugins; a static one belongs to this recipe:" \
				"unset UCX_DIR and run 'make ucx-static', then build with -tags ucx_static."
		fi
		die "UCX_DIR=$dir has no shared libucp.so in lib/, lib64/ or lib/${host_triple:-<multiarch>}/." \
			"Point UCX_DIR at a UCX install prefix (a UCX built with --enable-shared), or unset it."
	fi
	local hdr="$dir/include/ucp/api/ucp_version.h" major minor version=""
	[ -f "$hdr" ] || die "UCX_DIR=$dir has $so but no include/ucp/api/ucp_version.h." "Install UCX's headers (Debian: libucx-dev) or fix UCX_DIR."
	major=$(sed -n 's/^#define UCP_API_MAJOR[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$hdr")
	minor=$(sed -n 's/^#define UCP_API_MINOR[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$hdr")
	[ -n "$major" ] && [ -n "$minor" ] || die "UCX_DIR=$dir: could not read UCP_API_MAJOR/UCP_API_MINOR from $hdr."
	local pc
	for pc in "$libdir/pkgconfig/ucx.pc" "$dir/lib/pkgconfig/ucx.pc"; do
		if [ -f "$pc" ]; then
			version=$(sed -n 's/^Version:[[:space:]]*//p' "$pc" | head -1)
			break
		fi
	done
	[ -n "$version" ] || version="$major.$minor"
	if [ "$major" -lt 1 ] || { [ "$major" -eq 1 ] && [ "$minor" -lt 13 ]; }; then
		die "UCX_DIR=$dir holds UCX $version (from $hdr); velo needs UCX 1.13 or later." \
			"Install a newer UCX, or unset UCX_DIR and run 'make ucx-static'."
	fi
	local plugin
	plugin=$(ls "$libdir"/ucx/libuct_ib.so* 2>/dev/null | head -1 || true)
	if [ -z "$plugin" ]; then
		die "UCX_DIR=$dir holds UCX $version but no InfiniBand plugin ($libdir/ucx/libuct_ib.so): that UCX would run over TCP only." \
			"Install a UCX built with verbs (Debian: libucx0), or unset UCX_DIR and run 'make ucx-static'."
	fi
	note "UCX_DIR=$dir: found UCX $version (shared $so, IB plugin $plugin); the static build is skipped."
	note "link it without -tags ucx_static, e.g. PKG_CONFIG_PATH=$libdir/pkgconfig go build ./..."
}

# --- source ------------------------------------------------------------------------------------

pinned_entry() { # prints "version origin" for a pinned sha256 and file name, or nothing
	awk -v sum="$1" -v file="$2" '!/^#/ && $1 == sum && (file == "" || $2 == file) { print $3, $4; exit }' "$pins"
}

# Sets source_id (what the stamp records about the source).
resolve_source() {
	if [ -z "${UCX_TARBALL:-}" ] && [ "${UCX_SOURCE:-}" != debian ] && [ -f "$shared_source" ]; then
		UCX_TARBALL=$shared_source
		note "UCX source: $(cd "$(dirname "$shared_source")" && pwd)/$(basename "$shared_source") (UCX_SOURCE=debian builds Debian's 1.13.1 instead)"
	elif [ -z "${UCX_TARBALL:-}" ] && [ "${UCX_SOURCE:-}" != debian ]; then
		note "UCX source: Debian's ucx ${UCX_DEBIAN_VERSION} (no UCX_TARBALL, and no UCX 1.22 source at $shared_source)"
	fi
	case "${UCX_SOURCE:-}" in
	'' | debian) ;;
	*) die "UCX_SOURCE=$UCX_SOURCE: the only value is debian (Debian's source package); give other sources with UCX_TARBALL=path." ;;
	esac
	if [ -n "${UCX_TARBALL:-}" ]; then
		[ -f "$UCX_TARBALL" ] || die "UCX_TARBALL=$UCX_TARBALL does not exist." "Give the path of a UCX release tarball, or unset UCX_TARBALL to use the Debian source package."
		local sum entry
		sum=$(sha256sum "$UCX_TARBALL" | cut -d' ' -f1)
		entry=$(pinned_entry "$sum" "")
		[ -n "$entry" ] || die "UCX_TARBALL=$UCX_TARBALL has SHA-256 $sum, which is not pinned in third_party/ucx/sources.sha256." \
			"Use a pinned tarball (see that file), or check this one against its upstream release and add its sum there."
		source_id="tarball $(basename "$UCX_TARBALL") sha256=$sum (${entry})"
		ucx_version=${entry%% *}
		[ "${entry#* }" != git-archive ] || needs_autogen=1
	else
		needs_autogen=1 # Debian's orig tarball ships no configure
		local dsc="ucx_${UCX_DEBIAN_VERSION}.dsc" sum
		sum=$(awk -v file="$dsc" '!/^#/ && $2 == file { print $1; exit }' "$pins")
		[ -n "$sum" ] || die "UCX_DEBIAN_VERSION=$UCX_DEBIAN_VERSION has no pinned .dsc in third_party/ucx/sources.sha256." \
			"Pin that version's files there, or unset UCX_DEBIAN_VERSION (default 1.13.1-1)."
		source_id="debian ucx=$UCX_DEBIAN_VERSION dsc-sha256=$sum"
		ucx_version=${UCX_DEBIAN_VERSION%-*}
	fi
}

# A source without a generated configure needs autogen.sh, and so the autotools; checked before
# anything is unpacked or removed when the pin says so (Debian's and git-archive sources).
needs_autogen=""
check_autotools() {
	local tool
	for tool in autoreconf automake libtoolize; do
		command -v "$tool" >/dev/null || die "$tool is missing; this UCX source ships no configure, so autogen.sh needs it." "Run 'make deps' (Debian packages autoconf automake libtool)."
	done
}

# Sets what differs between the UCX releases the recipe knows: configure's option names, the
# config.h defines that prove the RDMA pieces are in, the extra module archive, the build folder.
select_version() {
	case "$ucx_version" in
	1.13.*)
		version_args=(--with-mlx5-dv --disable-numa)
		version_defs=(HAVE_MLX5_HW)
		;;
	1.22.*)
		# 1.22 renamed --with-mlx5-dv to --with-mlx5 and dropped --disable-numa (NUMA is read
		# from sysfs); the modules it would otherwise guess at are switched off as before.
		version_args=(--with-mlx5 --without-ze --without-gaudi --without-efa --without-mad)
		version_defs=()
		ucx_archives=("${ucx_archives[@]:0:4}" lib/ucx/libuct_ib_mlx5.a "${ucx_archives[@]:4}")
		;;
	*) die "UCX $ucx_version: the recipe knows UCX 1.13 and 1.22 (sources.sha256 pins them)." \
		"Add what the new release changed to select_version in ucx-static.sh before pinning it." ;;
	esac
	build_dir="$here/build-$ucx_version"
	src_dir="$src_root/ucx-$ucx_version"
	obj_dir="$work_dir/obj-$ucx_version"
	if [ -n "$cuda_root" ]; then
		# The CUDA variant has trees of its own beside the default's, which it never touches,
		# and its own link, build-cuda (what -tags cuda,ucx_static links).
		build_dir+=-cuda
		src_dir+=-cuda
		obj_dir+=-cuda
		link_dir="$here/build-cuda"
		# libuct_cuda (cuda_copy, cuda_ipc) goes in before libucp, after the other transports.
		ucx_archives=("${ucx_archives[@]:0:${#ucx_archives[@]}-1}" lib/ucx/libuct_cuda.a lib/libucp.a)
		case "$ucx_version" in
		# GPU-initiated IB (GDA-KI) needs device code compiled with nvcc; velo has none.
		1.22.*) version_args+=(--without-gda) ;;
		esac
	fi
	stamp="$build_dir/.velo-ucx-stamp"
	patch_dir="$patches_root/$ucx_version"
}

# The CUDA variant needs the sysroot of make cuda-sysroot, complete (its stamp is written last).
check_cuda_root() {
	[ -n "$cuda_root" ] || return 0
	[ -f "$cuda_root/.velo-cuda-stamp" ] && [ -f "$cuda_root/include/cuda.h" ] && [ -f "$cuda_root/lib/stubs/libcuda.so" ] ||
		die "VELO_UCX_CUDA=$cuda_root is not a complete CUDA sysroot (include/cuda.h, lib/stubs/libcuda.so, .velo-cuda-stamp)." 			"Run 'make cuda-sysroot' (third_party/cuda/README.md), or use 'make ucx-static-cuda', which does."
	cuda_root=$(cd "$cuda_root" && pwd)
}

# --- the patch set -----------------------------------------------------------------------------

# Sets patch_files to the selected version's patches, in the order they apply, after checking the
# folder: every file in it must be a patch named NNNN-name.patch that opens with its header
# comment (what it closes and why). A stray file (an editor's backup, a .rej, a patch without a
# number) stops the build rather than being skipped or applied in some order.
check_patch_set() {
	patch_files=()
	[ -d "$patch_dir" ] || die "there is no patch set for UCX $ucx_version at $patch_dir." \
		"Every UCX the recipe builds carries velo's patches (README.md, \"Patch set\"); port them to this release first."
	local f name
	while IFS= read -r -d '' f; do
		name=$(basename "$f")
		[[ "$name" =~ ^[0-9]{4}-[a-z0-9][a-z0-9.-]*\.patch$ ]] && [ -f "$f" ] ||
			die "$patch_dir holds $name, which is not a patch of the set (NNNN-name.patch)." \
				"Remove it, or rename it NNNN-name.patch if it belongs to the set."
		[ "$(head -c1 "$f")" = "#" ] ||
			die "patch $name does not open with its header comment ('# ...' lines: what it closes and why)." \
				"Add the header; see the other patches in $patch_dir."
		patch_files+=("$f")
	done < <(find "$patch_dir" -mindepth 1 -maxdepth 1 -print0 | LC_ALL=C sort -z)
	[ ${#patch_files[@]} -gt 0 ] || die "the patch set for UCX $ucx_version ($patch_dir) is empty."
	command -v patch >/dev/null || die "patch is missing; the recipe applies velo's UCX patch set with it." \
		"Run 'make deps', or apt-get install patch."
}

# The patches with their SHA-256 sums, one per line: what the stamp key and the build record hold.
patch_lines() {
	local f
	for f in "${patch_files[@]}"; do
		printf '%s sha256=%s\n' "$(basename "$f")" "$(sha256sum "$f" | cut -d' ' -f1)"
	done
}

# apply_patches DIR LOG applies the patch set to the source tree DIR, patch's output going to LOG.
# Each patch is first tried with --dry-run and no fuzz, so a patch that does not apply cleanly
# stops the build with its name and patch's own words, before the tree is touched by it.
apply_patches() {
	local tree=$1 log=$2 f name out
	for f in "${patch_files[@]}"; do
		name=$(basename "$f")
		if ! out=$(cd "$tree" && LC_ALL=C patch -p1 -N -F0 --dry-run <"$f" 2>&1); then
			die "patch $name does not apply cleanly to UCX $ucx_version; the build stops." \
				"$(grep -v '^checking file' <<<"$out" | head -6)" \
				"The patch set is made for the pinned source (sources.sha256); regenerate $name against it."
		fi
		(cd "$tree" && LC_ALL=C patch -p1 -N -F0 --no-backup-if-mismatch <"$f") >>"$log" 2>&1 ||
			die "patch $name failed after its dry run passed; see $log."
	done
}

# The source tree's own version (configure.ac), which must be the one its pin names: a tarball of
# another release under a pinned name stops here.
check_tree_version() {
	local ac="${1:-$src_dir}/configure.ac" v
	v=$(sed -n -e 's/^define(\[ucx_ver_major\], \([0-9]*\)).*/\1/p' -e 's/^define(\[ucx_ver_minor\], \([0-9]*\)).*/.\1/p' -e 's/^define(\[ucx_ver_patch\], \([0-9]*\)).*/.\1/p' "$ac" | tr -d '\n')
	[ "$v" = "$ucx_version" ] || die "the unpacked source is UCX ${v:-of no version} (configure.ac), but its pin says $ucx_version." \
		"Check which tarball this is; a half-extracted or mislabelled source is never built."
}

# Points build/ at the build of this version (replacing a plain folder left by an older recipe).
link_build() {
	if [ -e "$link_dir" ] && [ ! -L "$link_dir" ]; then
		rm -rf "$link_dir"
	fi
	ln -sfn "$(basename "$build_dir")" "$link_dir"
}

# Writes deb-src entries for every deb entry of the system's apt sources (deb822 *.sources and
# one-line *.list files) into $1/velo-deb-src.sources and $1/velo-deb-src.list. The system's apt
# configuration is only read. VELO_UCX_APT_ETC (default /etc/apt) lets tests use a fixture tree.
deb_src_list() {
	local out=$1 etc=${VELO_UCX_APT_ETC:-/etc/apt} f
	mkdir -p "$out"
	: >"$out/velo-deb-src.sources"
	: >"$out/velo-deb-src.list"
	for f in "$etc"/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk '
			/^[Tt]ypes:/ {
				n = split(substr($0, index($0, ":") + 1), t, /[ \t]+/); keep = 0
				for (i = 1; i <= n; i++) if (t[i] == "deb" || t[i] == "deb-src") keep = 1
				if (keep) { print "Types: deb-src"; next }
			}
			{ print }
			END { print "" }
		' "$f" >>"$out/velo-deb-src.sources"
	done
	for f in "$etc/sources.list" "$etc"/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		sed -n -e 's/^[[:space:]]*deb[[:space:]]\{1,\}/deb-src /p' "$f" >>"$out/velo-deb-src.list"
	done
	if [ ! -s "$out/velo-deb-src.sources" ] && [ ! -s "$out/velo-deb-src.list" ]; then
		die "found no Debian package sources under $etc to derive a deb-src entry from." \
			"Configure apt sources, or pass a pinned tarball with UCX_TARBALL=path."
	fi
}

# Downloads the Debian source package with a private apt state (lists, cache, sources) under
# work/apt, so the system's apt configuration and lists are left as they are.
fetch_debian_source() {
	local dl="$work_dir/debian" apt="$work_dir/apt" f sum want
	mkdir -p "$dl"
	local files=("ucx_${UCX_DEBIAN_VERSION}.dsc" "ucx_${UCX_DEBIAN_VERSION%-*}.orig.tar.xz" "ucx_${UCX_DEBIAN_VERSION}.debian.tar.xz")
	local have=1
	for f in "${files[@]}"; do [ -f "$dl/$f" ] || have=0; done
	if [ "$have" = 0 ]; then
		command -v apt-get >/dev/null || die "apt-get is not available to fetch the Debian source package." "Pass a pinned tarball with UCX_TARBALL=path."
		rm -rf "$apt"
		mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/preferences.d"
		deb_src_list "$apt/sources.list.d"
		local opts=(-q -o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt/sources.list.d"
			-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
			-o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=$apt/preferences.d"
			-o "Dir::State::status=/dev/null" -o "APT::Sandbox::User=$(id -un)")
		note "fetching the Debian source package ucx=$UCX_DEBIAN_VERSION (private apt state in $apt)"
		apt-get "${opts[@]}" update >"$work_dir/logs/apt.log" 2>&1 ||
			die "apt-get update (deb-src, private state) failed; see $work_dir/logs/apt.log." "$(tail -3 "$work_dir/logs/apt.log")" \
				"Without network access, pass a pinned tarball with UCX_TARBALL=path."
		(cd "$dl" && apt-get "${opts[@]}" source --download-only "ucx=$UCX_DEBIAN_VERSION") >>"$work_dir/logs/apt.log" 2>&1 ||
			die "apt-get source ucx=$UCX_DEBIAN_VERSION failed; see $work_dir/logs/apt.log." "$(tail -3 "$work_dir/logs/apt.log")"
	fi
	for f in "${files[@]}"; do
		[ -f "$dl/$f" ] || die "apt-get source did not produce $f; see $work_dir/logs/apt.log."
		sum=$(sha256sum "$dl/$f" | cut -d' ' -f1)
		want=$(awk -v file="$f" '!/^#/ && $2 == file { print $1; exit }' "$pins")
		if [ "$sum" != "$want" ]; then
			rm -f "$dl/$f"
			die "$f has SHA-256 $sum but sources.sha256 pins ${want:-nothing}; the download was removed." \
				"If Debian republished the package, check it and update third_party/ucx/sources.sha256."
		fi
	done
}

# unpack_debian_source DIR unpacks the fetched source package, with Debian's patches, into DIR.
unpack_debian_source() {
	local dest=$1 dl="$work_dir/debian"
	command -v dpkg-source >/dev/null || die "dpkg-source is missing (Debian package dpkg-dev)." "Run 'make deps', or apt-get install dpkg-dev."
	mkdir -p "$(dirname "$dest")"
	(cd "$(dirname "$dest")" && dpkg-source -x "$dl/ucx_${UCX_DEBIAN_VERSION}.dsc" "$(basename "$dest")") >"$work_dir/logs/unpack.log" 2>&1 ||
		die "dpkg-source -x failed; see $work_dir/logs/unpack.log." "$(tail -3 "$work_dir/logs/unpack.log")"
}

# unpack_tarball DIR unpacks UCX_TARBALL into DIR.
unpack_tarball() {
	local dest=$1 tmp
	mkdir -p "$(dirname "$dest")"
	tmp=$(mktemp -d "$(dirname "$dest")/.unpack.XXXXXX")
	tar -xf "$UCX_TARBALL" -C "$tmp" || { rm -rf "$tmp"; die "could not unpack UCX_TARBALL=$UCX_TARBALL."; }
	local top
	top=$(find "$tmp" -mindepth 1 -maxdepth 1 -type d | head -1)
	[ -n "$top" ] && [ -f "$top/configure.ac" ] || { rm -rf "$tmp"; die "UCX_TARBALL=$UCX_TARBALL does not unpack to a UCX source tree (no configure.ac)."; }
	mv "$top" "$dest"
	rm -rf "$tmp"
	# Debian's orig tarball renames upstream's debian/ to debian.upstream; configure links files
	# from debian/, so give it back the upstream copy.
	if [ ! -d "$dest/debian" ] && [ -d "$dest/debian.upstream" ]; then
		cp -r "$dest/debian.upstream" "$dest/debian"
	fi
}

# UCX's configure adds -DUCX_SHARED_LIB to every position-independent compile, taking "PIC" to
# mean "shared library". In this static, PIC build that define would switch on the plugin loader
# (dlopen of <exe dir>/ucx/libuct_*.so and of the build prefix) and make libucm dlopen the
# executable itself ("cannot dynamically load position-independent executable"). The recipe
# builds static libraries only, so it removes the define from the generated configure.
patch_configure() {
	local conf="$src_dir/configure" n
	n=$(grep -c 'lt_prog_compiler_pic="$lt_prog_compiler_pic -DUCX_SHARED_LIB"' "$conf" || true)
	[ "$n" = 1 ] || die "expected one UCX_SHARED_LIB line in UCX's configure, found $n." \
		"This UCX release differs from the ones the recipe knows (sources.sha256); update patch_configure in ucx-static.sh."
	sed -i 's/lt_prog_compiler_pic="$lt_prog_compiler_pic -DUCX_SHARED_LIB"/lt_prog_compiler_pic="$lt_prog_compiler_pic"/' "$conf"
}

# --- the stamp key -----------------------------------------------------------------------------

stamp_key() {
	local cc_version cc_words
	read -r -a cc_words <<<"$cc"
	cc_version=$("${cc_words[@]}" --version 2>/dev/null | head -1 || true)
	printf 'recipe %s\n' "$(cat "${BASH_SOURCE[0]}" "$pins" | sha256sum | cut -d' ' -f1)"
	printf 'source %s\n' "$source_id"
	patch_lines | sed 's/^/patch /'
	printf 'target %s\n' "$target_triple"
	printf 'cc %s (%s)\n' "$cc" "$cc_version"
	printf 'shell %s\n' "${config_shell:-configure default}"
	[ -z "$cuda_root" ] || printf 'cuda %s\n' "$(cat "$cuda_root/.velo-cuda-stamp")"
	local v
	for v in CFLAGS CPPFLAGS LDFLAGS CPATH C_INCLUDE_PATH LIBRARY_PATH; do
		printf '%s %s\n' "$v" "${!v:-}"
	done
	printf 'configure'
	printf ' %q' "${args[@]}"
	printf '\n'
}

# --- build -------------------------------------------------------------------------------------

# Each long step runs in its own session, so that a stopped build (Ctrl-C, a test deadline, make
# being killed) takes the whole step down with it instead of leaving configure or make running.
current_step=""
stop_step() {
	[ -z "$current_step" ] || kill -TERM -- "-$current_step" 2>/dev/null || true
	exit 143
}
trap stop_step TERM INT HUP

run_logged() { # name, then the command; stops with the log's tail on failure
	local name=$1
	shift
	local log="$work_dir/logs/$name.log"
	setsid "$@" >"$log" 2>&1 </dev/null &
	current_step=$!
	if ! wait "$current_step"; then
		current_step=""
		tail -25 "$log" >&2
		die "$name failed; the full log is $log."
	fi
	current_step=""
}

# After configure, confirm from config.h that the RDMA pieces really made it in. This catches
# whatever the early checks cannot see (an unusual rdma-core, an extra option we do not know).
check_config_h() {
	local h="$obj_dir/config.h" def missing=()
	for def in HAVE_IB HAVE_MLX5_DV HAVE_DEVX HAVE_TL_RC HAVE_TL_UD HAVE_TL_DC ENABLE_MT "${version_defs[@]}"; do
		grep -q "^#define $def 1" "$h" || missing+=("$def")
	done
	[ ${#missing[@]} -eq 0 ] || die "configure finished without ${missing[*]} (see $obj_dir/config.h); that UCX would lack RDMA transports, so the build stops." \
		"Check $work_dir/logs/configure.log for why rdma-core was not usable (an old rdma-core lacks DEVX: install a newer one)."
	grep -q '^#define HAVE_RDMACM 1' "$h" || [ -f "$obj_dir/src/uct/ib/rdmacm/Makefile" ] ||
		die "configure did not enable the rdmacm transport; see $work_dir/logs/configure.log."
	if [ -n "$cuda_root" ]; then
		grep -q '^#define HAVE_CUDA 1' "$h" ||
			die "configure finished without HAVE_CUDA although --with-cuda=$cuda_root was given; see $work_dir/logs/configure.log."
	fi
}

# step_done NAME records how long the step since the previous mark took, for the build summary,
# and prints it: one line per step, so a cold build shows its progress (each step's own output is
# in work/logs).
step_times=""
step_mark=0
step_start=0
step_done() {
	local now
	now=$(date +%s)
	step_times="${step_times:+$step_times, }$1 $((now - step_mark))s"
	note "[$(printf '%4d' $((now - step_start)))s] $1 done in $((now - step_mark)) s"
	step_mark=$now
}

build() {
	mkdir -p "$work_dir/logs" "$src_root"
	local t0 t1 cpu0 cpu1
	t0=$(date +%s)
	cpu_seconds
	cpu0=$cpu
	step_mark=$t0
	step_start=$t0
	# The recipe once kept one source and object tree for all versions (src/ucx, work/obj).
	rm -rf "$src_dir" "$obj_dir" "$build_dir" "$src_root/ucx" "$work_dir/obj" "$work_dir/logs/patches.log"
	note "building UCX $ucx_version (library only; 'ucx-static.sh tools' adds ucx_info and ucx_perftest); logs in $work_dir/logs"
	if [ -n "${UCX_TARBALL:-}" ]; then
		unpack_tarball "$src_dir"
	else
		fetch_debian_source
		unpack_debian_source "$src_dir"
	fi
	check_tree_version
	step_done source
	apply_patches "$src_dir" "$work_dir/logs/patches.log"
	step_done "patches (${#patch_files[@]})"
	if [ ! -x "$src_dir/configure" ]; then
		check_autotools
		# autoconf records `git rev-parse HEAD` as UCX's revision; the tree sits inside this
		# checkout, whose revision it would otherwise take.
		run_logged autogen env GIT_CEILING_DIRECTORIES="$src_root" bash -c "cd '$src_dir' && ./autogen.sh"
		step_done autogen
	fi
	patch_configure
	mkdir -p "$obj_dir"
	note "configure: ${args[*]}"
	if [ -n "$config_shell" ]; then
		# configure writes its shell into the Makefiles and the libtool script, so make's
		# recipes and every libtool call of the build run under it too.
		run_logged configure env CONFIG_SHELL="$config_shell" SHELL="$config_shell" \
			"$config_shell" -c 'cd "$1" && shift && exec "$@"' _ "$obj_dir" "$config_shell" "$src_dir/configure" "${args[@]}"
	else
		run_logged configure bash -c 'cd "$1" && shift && "$@"' _ "$obj_dir" "$src_dir/configure" "${args[@]}"
	fi
	check_config_h
	step_done configure
	local d
	jobs=$(nproc 2>/dev/null || echo 2)
	for d in "${ucx_src_dirs[@]}"; do
		run_logged "make-${d##*/}" make -C "$obj_dir/$d" -j"$jobs"
		step_done "make ${d#src/} (-j$jobs)"
	done
	for d in "${ucx_src_dirs[@]}"; do
		run_logged "install-${d##*/}" make -C "$obj_dir/$d" install
	done
	step_done install

	# One relocatable object holding every UCX object, wrapped in a one-member archive. See
	# README.md, "Linking": it is how every constructor reaches a Go binary without
	# -Wl,--whole-archive, which cgo's flag allowlist refuses.
	local cc_words a inputs=() ar nm
	read -r -a cc_words <<<"$cc"
	for a in "${ucx_archives[@]}"; do
		[ -f "$build_dir/$a" ] || die "the build did not install $a; see $work_dir/logs."
		inputs+=("$build_dir/$a")
	done
	if [ -n "$cuda_root" ]; then
		# UCX's loadable modules each define ucs_module_global_init, the hook its module
		# loader looks up with dlsym after dlopen; the mlx5 and cuda modules both have one (each
		# only loads its own sub-modules: GDA-KI, gdrcopy, neither built here). Linked into one
		# object, the two definitions collide; nothing calls them in a static build, so the
		# cuda module's is made local.
		run_logged localize-cuda-module-init "$("${cc_words[@]}" -print-prog-name=objcopy)" \
			--localize-symbol=ucs_module_global_init "$build_dir/lib/ucx/libuct_cuda.a"
	fi
	run_logged partial-link "${cc_words[@]}" -nostdlib -r -o "$work_dir/velo_ucx.o" \
		-Wl,--whole-archive "${inputs[@]}" -Wl,--no-whole-archive
	ar=$("${cc_words[@]}" -print-prog-name=ar)
	nm=$("${cc_words[@]}" -print-prog-name=nm)
	rm -f "$build_dir/lib/libvelo_ucx.a"
	run_logged archive "$ar" rcs "$build_dir/lib/libvelo_ucx.a" "$work_dir/velo_ucx.o"
	rm -f "$work_dir/velo_ucx.o"
	# ucp_init is an inline wrapper of ucp_init_version. The symbol list is read once: grep -q
	# on a pipe would stop nm early, and pipefail would report that as a failure.
	local sym syms
	syms=$("$nm" "$build_dir/lib/libvelo_ucx.a" 2>/dev/null) || die "$nm could not read libvelo_ucx.a."
	local want_syms=(ucp_init_version uct_ib_init uct_ib_md_ops_devx_entry uct_rdmacm_init uct_cma_init uct_tcp_init)
	# The CUDA variant: the cuda_copy and cuda_ipc transports' constructors.
	[ -z "$cuda_root" ] || want_syms+=(uct_cuda_copy_component uct_cuda_ipc_component)
	for sym in "${want_syms[@]}"; do
		grep -q " [TtDd] $sym\$" <<<"$syms" ||
			die "libvelo_ucx.a lacks $sym; the partial link or the configure result is wrong (logs in $work_dir/logs)."
	done
	# The patch set's marker: velo reads it at run time to know that this UCX refuses software
	# RMA (README.md, "Patch set").
	for sym in velo_ucx_guard_version velo_ucx_guard_counters; do
		grep -q " T $sym\$" <<<"$syms" ||
			die "libvelo_ucx.a does not define $sym, the mark of velo's patch set; the patches did not make it into the build." \
				"Check $work_dir/logs/patches.log and $patch_dir."
	done
	step_done link
	t1=$(date +%s)
	cpu_seconds
	cpu1=$cpu
	{
		printf 'UCX static build for velo\n'
		printf 'built %s in %ss (CPU %ss) on %s cores (%s; load average %s)\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
			"$((t1 - t0))" "$((cpu1 - cpu0))" "$jobs" "$step_times" "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
		printf 'applied patches (%s):\n' "$patch_dir"
		patch_lines | sed 's/^/  /'
		stamp_key
	} >"$build_dir/velo-ucx-build.txt"
	stamp_key >"$stamp"
	link_build
	note "built UCX $ucx_version into $build_dir in $((t1 - t0)) s, CPU $((cpu1 - cpu0)) s ($step_times)"
}

# Sets cpu to the CPU seconds (user + system) of this script's finished children, from the
# shell's own `times`. Call it directly: in a command substitution `times` would report a fresh
# subshell's.
cpu=0
cpu_seconds() {
	times >"$work_dir/.times"
	cpu=$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); n += a[1] * 60 + a[2] } printf "%d\n", n }' "$work_dir/.times")
}

# The tools benchmarks and checks compare velo with, ucx_info and ucx_perftest, linked against
# libvelo_ucx.a exactly as a velo binary is: UCX's own static link of them would miss the modules
# (see README.md, "Linking") and its ucx_perftest crashes at start. Their objects come from UCX's
# makefiles; only the final link is ours. A baseline from another UCX than the one velo links
# would compare two libraries, so the benchmarks use these (README.md, "The tools").
build_tools() {
	local info="$obj_dir/src/tools/info" perf="$obj_dir/src/tools/perf" objs lib
	local cc_words link_libs=(-libverbs -lmlx5 -lrdmacm -lpthread -ldl -lrt -lm)
	# The CUDA variant links the driver API and NVML as the cuda-tagged Go binaries do: against
	# the stubs at link time, the driver's libcuda.so.1 and libnvidia-ml.so.1 at run time.
	[ -z "$cuda_root" ] || link_libs=(-L"$cuda_root/lib/stubs" -lcuda -lnvidia-ml "${link_libs[@]}")
	read -r -a cc_words <<<"$cc"
	mkdir -p "$build_dir/bin"
	run_logged tools-info-objects make -C "$info" build_config.h
	objs=$(tool_objects "$info" ucx_info) || die "could not list ucx_info's objects from $info/Makefile."
	run_logged tools-info-compile make -C "$info" -j"$jobs" $objs
	run_logged tools-info-link bash -c 'cd "$1" && shift && "$@"' _ "$info" "${cc_words[@]}" -o "$build_dir/bin/ucx_info" \
		$objs "$build_dir/lib/libvelo_ucx.a" "${link_libs[@]}"
	run_logged tools-perf-lib make -C "$perf/lib" -j"$jobs"
	lib=$(ls "$perf"/lib/.libs/libucxperf.a 2>/dev/null) || die "the perftest library was not built ($perf/lib/.libs/libucxperf.a); see $work_dir/logs/tools-perf-lib.log."
	objs=$(tool_objects "$perf" ucx_perftest) || die "could not list ucx_perftest's objects from $perf/Makefile."
	run_logged tools-perf-compile make -C "$perf" -j"$jobs" $objs
	# libucxperf has C++ parts and the perftest uses OpenMP when configure found it.
	run_logged tools-perf-link bash -c 'cd "$1" && shift && "$@"' _ "$perf" "${cc_words[@]}" -fopenmp -o "$build_dir/bin/ucx_perftest" \
		$objs "$lib" "$build_dir/lib/libvelo_ucx.a" "${link_libs[@]}" -lstdc++
	[ -n "$configure_host" ] && return 0 # a cross build cannot run its tools here
	local v run=()
	# The CUDA variant's tools need libcuda.so.1 to start: on a machine without the NVIDIA
	# driver the sysroot's run/ folder supplies the stub (every CUDA call then fails cleanly).
	if [ -n "$cuda_root" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
		run=(env LD_LIBRARY_PATH="$cuda_root/run${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
	fi
	# 1.13 prints "# Version 1.13.1", later releases "# Library version: 1.22.0".
	v=$("${run[@]}" "$build_dir/bin/ucx_info" -v 2>&1 | sed -n -E 's/^# (Library version:|Version) //p')
	[ "$v" = "$ucx_version" ] || die "the ucx_info just built reports library version '${v:-none}', not $ucx_version; the tools link picked up another UCX." \
		"Look for a UCX on LIBRARY_PATH or in $work_dir/logs/tools-info-link.log."
	# Read whole before grep: grep -q stops early, and pipefail would call that a failure.
	local out
	out=$(UCX_TLS=tcp "${run[@]}" "$build_dir/bin/ucx_info" -d 2>&1) || true
	grep -q 'Transport: tcp' <<<"$out" ||
		die "the ucx_info just built lists no tcp transport; the static link lost UCX's modules (logs in $work_dir/logs)."
	out=$("${run[@]}" "$build_dir/bin/ucx_info" -b 2>&1) || true
	grep -q '^#define uct_MODULES .*:ib:rdmacm' <<<"$out" ||
		die "the ucx_info just built does not list the ib and rdmacm modules as compiled in; see $obj_dir/config.h."
	if [ -n "$cuda_root" ]; then
		grep -q '^#define uct_MODULES .*:cuda' <<<"$out" ||
			die "the CUDA variant's ucx_info does not list the cuda module as compiled in; see $obj_dir/config.h."
	fi
}

# tool_objects DIR PROGRAM: the object files automake's Makefile in DIR lists for PROGRAM.
tool_objects() {
	make -s -C "$1" -f Makefile -f - velo-print-objects <<<"$(printf 'velo-print-objects:\n\t@echo $(%s_OBJECTS)\n' "$2")"
}

# --- main --------------------------------------------------------------------------------------

# patch_check unpacks the selected source into a scratch folder under work/ and applies the patch
# set there, as a build would; the build tree is not touched.
patch_check() {
	local tmp
	mkdir -p "$work_dir/logs" "$work_dir/scratch"
	tmp=$(mktemp -d "$work_dir/scratch/patch-check.XXXXXX")
	# shellcheck disable=SC2064 # expand now: tmp is local
	trap "rm -rf '$tmp'" EXIT
	if [ -n "${UCX_TARBALL:-}" ]; then
		unpack_tarball "$tmp/ucx"
	else
		fetch_debian_source
		unpack_debian_source "$tmp/ucx"
	fi
	check_tree_version "$tmp/ucx"
	apply_patches "$tmp/ucx" "$tmp/patches.log"
	note "the patch set for UCX $ucx_version applies cleanly (${#patch_files[@]} patches from $patch_dir)"
}

# Builds the tools of the current build unless they are there for it already (their stamp is the
# library's). They are linked from the build's object tree, which a build keeps in work/.
tools() {
	local tools_stamp="$build_dir/bin/.velo-tools-stamp"
	if [ -f "$tools_stamp" ] && cmp -s "$tools_stamp" "$stamp" &&
		[ -x "$build_dir/bin/ucx_info" ] && [ -x "$build_dir/bin/ucx_perftest" ]; then
		note "tools up to date: $build_dir/bin (ucx_info, ucx_perftest)"
		return 0
	fi
	local t0 cpu0
	t0=$(date +%s)
	cpu_seconds
	cpu0=$cpu
	step_mark=$t0
	step_start=$t0
	jobs=$(nproc 2>/dev/null || echo 2)
	note "building ucx_info and ucx_perftest of UCX $ucx_version; logs in $work_dir/logs"
	rm -rf "$build_dir/bin"
	build_tools
	step_done tools
	cmp -s "$stamp" <(stamp_key) || die "the build changed while its tools were built; run the command again."
	cp "$stamp" "$tools_stamp"
	cpu_seconds
	note "built the tools into $build_dir/bin in $(($(date +%s) - t0)) s, CPU $((cpu - cpu0)) s"
}

CPPFLAGS_WORDS=${CPPFLAGS:-}
cmd=${1:-build}
case "$cmd" in
deb-src-list)
	[ $# -eq 2 ] || die "usage: ucx-static.sh deb-src-list DIR"
	deb_src_list "$2"
	exit 0
	;;
build | tools | check | key | version | patches | patch-check) ;;
*) die "unknown command '$cmd'." "usage: ucx-static.sh [build|tools|check|key|version|patches|patch-check|deb-src-list DIR]" ;;
esac

resolve_toolchain
if [ -n "${UCX_DIR:-}" ]; then
	check_ucx_dir "$UCX_DIR"
	exit 0
fi
check_extra_configure
check_headers
check_cuda_root
resolve_source
[ -z "$needs_autogen" ] || [ "$cmd" = patches ] || [ "$cmd" = patch-check ] || check_autotools
select_version
configure_args

case "$cmd" in
version)
	printf '%s\n' "$ucx_version"
	exit 0
	;;
esac

check_patch_set

case "$cmd" in
check)
	note "checks passed for $target_triple with CC=$cc (patch set: ${#patch_files[@]} patches in $patch_dir)"
	printf '%s\n' "${args[@]}"
	exit 0
	;;
key)
	stamp_key
	exit 0
	;;
patches)
	note "the patch set for UCX $ucx_version ($patch_dir), in the order it applies:"
	for f in "${patch_files[@]}"; do
		printf '%s  %s  %s\n' "$(basename "$f")" "$(sha256sum "$f" | cut -d' ' -f1)" \
			"$(sed -n '1s/^#[[:space:]]*//p' "$f")"
	done
	exit 0
	;;
esac

mkdir -p "$work_dir/logs"
if [ "$cmd" = patch-check ]; then
	# No lock: it works in its own scratch folder, and a test must not wait for a build.
	patch_check
	exit 0
fi
exec 9>"$work_dir/.lock"
flock 9
if [ -f "$stamp" ] && [ "$(stamp_key)" = "$(cat "$stamp")" ] && [ -f "$build_dir/lib/libvelo_ucx.a" ]; then
	link_build
	note "up to date: UCX $ucx_version ($build_dir; $(sed -n 2p "$build_dir/velo-ucx-build.txt" 2>/dev/null || echo 'stamp matches'))"
else
	[ ! -f "$stamp" ] || note "the stamp differs from this build's key: rebuilding"
	build
fi
if [ "$cmd" = tools ]; then
	if [ ! -f "$obj_dir/config.h" ]; then
		note "the object tree of this build ($obj_dir) is gone, and the tools are linked from it: rebuilding"
		rm -f "$stamp"
		build
	fi
	tools
fi
