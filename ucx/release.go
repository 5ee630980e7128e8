package ucx

import "fmt"

// The oldest UCX release the binding runs on. Older releases lack calls it makes
// (ucp_am_send_nbx with its parameter struct, ucp_worker_set_am_recv_handler) or have
// faults it cannot avoid; docs/ucx.md lists the tested releases.
const (
	minUCXMajor = 1
	minUCXMinor = 13
)

// releaseTraits are the differences between UCX releases that change what the binding does.
// They are decided from the library linked at run time (ucp_get_version), not from the
// headers, because a program built against one UCX can load another. Each was measured
// by this module's suite; docs/ucx.md ("What differs between releases") has the table.
type releaseTraits struct {
	// v2Experimental: protocol v2 exists but is experimental. An AM sent with the reply
	// flag aborts the process, and an RMA operation on an endpoint whose peer died trips an
	// assertion inside UCX. So with v2 enabled the binding refuses reply-flagged sends,
	// which makes the guarded GET unavailable. UCX 1.13.
	v2Experimental bool
	// zcopyDoubleCompletion: the tcp transport can complete a zero-copy AM fragment twice
	// when its endpoint fails with the send in flight (an assertion aborts the process); the
	// engine then defaults UCX_ZCOPY_THRESH to inf. UCX 1.13.
	zcopyDoubleCompletion bool
	// sharedProcessWireup: destroying one worker while another worker of the same process
	// still sends it large eager messages trips a wireup assertion, so one engine per
	// process is the supported shape and a second one is warned about. UCX 1.13.
	sharedProcessWireup bool
}

// traitsOf returns the traits of release v.
func traitsOf(v VersionInfo) releaseTraits {
	old := v.Major == 1 && v.Minor <= 13
	return releaseTraits{
		v2Experimental:        old,
		zcopyDoubleCompletion: old,
		sharedProcessWireup:   old,
	}
}

// checkVersion is the start-up check of the linked UCX: an error for a release older than
// the binding supports, and a warning (non-empty) when the library differs in major or
// minor version from the headers the binding was compiled with. UCX's own ucp_init refuses
// a different major version; a newer minor loads but may change behaviour the binding
// relies on, and an older one may lack symbols a newer header inlines.
func checkVersion(v VersionInfo) (warning string, err error) {
	if v.Major < minUCXMajor || (v.Major == minUCXMajor && v.Minor < minUCXMinor) {
		return "", fmt.Errorf("ucx: the linked UCX is %s, older than %d.%d, the oldest this binding supports: %w "+
			"(install UCX %d.%d or newer, point UCX_DIR at one, or build the static one with 'make ucx-static')",
			v.releaseString(), minUCXMajor, minUCXMinor, StatusUnsupported, minUCXMajor, minUCXMinor)
	}
	if v.APIMajor != 0 && (v.APIMajor != v.Major || v.APIMinor != v.Minor) {
		return fmt.Sprintf("ucx: WARNING: compiled against UCX %d.%d headers but running with libucp %s; "+
			"rebuild against the UCX you run (PKG_CONFIG_PATH or UCX_DIR), or run the one you built against "+
			"(check LD_LIBRARY_PATH and the binary's rpath with ldd)", v.APIMajor, v.APIMinor, v.releaseString()), nil
	}
	return "", nil
}

// releaseString is "1.22.0", whether or not String is set.
func (v VersionInfo) releaseString() string {
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Release)
}
