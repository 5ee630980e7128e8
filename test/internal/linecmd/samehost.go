package linecmd

import (
	"fmt"
	"os"
	"strconv"
)

// SameHostEnv switches the same-host path on in every program a suite drives: with
// VELO_TEST_SAME_HOST=1 (or any true value of strconv.ParseBool) the fault suite's faultnode and
// the attack suite's victim turn on velo.WithSameHost unless a test pins it off with a reason,
// and a pair of them on this host moves its rendezvous bytes through shared memory. The
// launcher (driver.Start) hands the variable to the programs it starts, and the suites read the
// path they expect from SameHostOn and OKPath, so a suite runs either way unchanged.
const SameHostEnv = "VELO_TEST_SAME_HOST"

// SameHost reads SameHostEnv: whether it asks for the same-host path, and an error naming the
// variable when its value is not a boolean (a typo must not quietly run a suite with the path off).
func SameHost() (bool, error) {
	s := os.Getenv(SameHostEnv)
	if s == "" {
		return false, nil
	}
	on, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want 1 (the same-host path on) or 0 (off)", SameHostEnv, s)
	}
	return on, nil
}

// SameHostOn is SameHost without the error (a value that is not a boolean reads as off; the
// driven programs refuse to start under it, so a suite fails at its first program).
func SameHostOn() bool {
	on, _ := SameHost()
	return on
}

// Lane is the lane a rendezvous between two driven programs of this host takes when both have the
// path they default to: "shm" with SameHostEnv on, "rdma" without.
func Lane() string {
	if SameHostOn() {
		return "shm"
	}
	return "rdma"
}

// OKPath is the path label ("path/reason") of such a rendezvous: "shm/ok" or "rdma/ok".
func OKPath() string { return Lane() + "/ok" }
