package pushfaults

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/test/internal/gobuild"
	"github.com/velo-go/velo/test/internal/linecmd/driver"

	"github.com/velo-go/velo/test/internal/netns"
)

// pushpeer is cmd/pushpeer, built once per test binary with the build tag and UCX flags of the
// environment (GOFLAGS, CGO_CPPFLAGS), so the program links the UCX the suite was built with.
var pushpeer = gobuild.New("github.com/velo-go/velo/test/pushfaults/cmd/pushpeer")

func TestMain(m *testing.M) {
	code := m.Run()
	pushpeer.Remove()
	os.Exit(code)
}

// peer is one pushpeer process (driver.Proc), failing its test on every error.
type peer struct {
	*driver.Proc
	t     *testing.T
	name  string
	ident string
	// sameHost: started with -same-host; link waits until two such peers' channels are proven.
	sameHost bool
}

// startPeer starts a pushpeer with flags and waits until it is ready; the test's cleanup ends it
// and prints its standard error when the test failed.
func startPeer(t *testing.T, name string, flags ...string) *peer {
	t.Helper()
	return startPeerOn(t, nil, name, flags...)
}

// startPeerOn is startPeer on host h (a network namespace: the peer's control plane listens on
// the host's address and its UCX uses the host's interface), or on this host when h is nil.
func startPeerOn(t *testing.T, h *netns.Host, name string, flags ...string) *peer {
	t.Helper()
	return launchPeer(t, h, pushpeer.Path(t), nil, name, flags...)
}

// launchPeer starts the pushpeer binary bin on host h (this host when nil) with env added to this
// process's environment.
func launchPeer(t *testing.T, h *netns.Host, bin string, env []string, name string, flags ...string) *peer {
	t.Helper()
	args := append([]string{"-log", "info"}, flags...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	if h != nil {
		cmd = h.Command(context.Background(), bin, append(args, "-listen", net.JoinHostPort(h.IP.String(), "0"))...)
		cmd.Env = append(append(os.Environ(), env...), "UCX_NET_DEVICES="+h.Dev)
	}
	p := &peer{Proc: driver.StartT(t, name, cmd), t: t, name: name, sameHost: slices.Contains(flags, "-same-host")}
	p.ident = p.ok("info")["id"].(string)
	return p
}

// read returns the next answer (a JSON object on its own line; any other line, which a library
// may print, goes to the peer's standard error record).
func (p *peer) read(timeout time.Duration) map[string]any {
	p.t.Helper()
	r, err := p.Read(timeout)
	require.NoError(p.t, err)
	return r
}

// send writes a command without waiting for its answer.
func (p *peer) send(format string, args ...any) {
	p.t.Helper()
	require.NoError(p.t, p.Send(fmt.Sprintf(format, args...)))
}

// do sends a command and returns its answer.
func (p *peer) do(format string, args ...any) map[string]any {
	p.t.Helper()
	r, err := p.Do(fmt.Sprintf(format, args...), 2*time.Minute)
	require.NoError(p.t, err)
	return r
}

// ok is do, failing the test on an error answer.
func (p *peer) ok(format string, args ...any) map[string]any {
	p.t.Helper()
	r := p.do(format, args...)
	require.Empty(p.t, r["error"], "%s: %s", p.name, fmt.Sprintf(format, args...))
	return r
}

func (p *peer) signal(s syscall.Signal) { p.Signal(s) }

// kill kills the process and waits for it.
func (p *peer) kill() { p.Kill() }

// link registers a and b with each other (the receiver must know a writer to grant it; the
// writer must know the receiver's UCX address to write into it).
func link(t *testing.T, a, b *peer) {
	t.Helper()
	for _, x := range [][2]*peer{{a, b}, {b, a}} {
		x[0].ok("peer %s", x[1].info())
	}
	if !a.sameHost || !b.sameHost {
		return
	}
	// Each side opens its channel to the other when it registers it: a put takes the same-host
	// path once the writer's channel to the receiver is proven.
	for _, x := range [][2]*peer{{a, b}, {b, a}} {
		var last map[string]any
		require.Eventually(t, func() bool {
			last = x[0].ok("samehost %s", x[1].ident)
			return last["same_host"] == true
		}, 30*time.Second, 20*time.Millisecond, "%s never took the same-host path to %s: %v", x[0].name, x[1].name, last)
	}
}

// info is the peer's PeerInfo as JSON, for another peer's peer command.
func (p *peer) info() string {
	p.t.Helper()
	b, err := json.Marshal(p.ok("info")["info"])
	require.NoError(p.t, err)
	return string(b)
}

// stats is what a receiver holds: registrations for grants, quarantined ones, and live grants.
type stats struct {
	LeaseRegistrations int `json:"lease_registrations"`
	Quarantined        int `json:"quarantined"`
	HeldSlots          int `json:"held_slots"`
	Grants             int `json:"grants"`
}

func (p *peer) stats() stats {
	p.t.Helper()
	r := p.ok("stats")
	b, err := json.Marshal(r)
	require.NoError(p.t, err)
	var st stats
	require.NoError(p.t, json.Unmarshal(b, &st))
	return st
}

// waitStats polls the peer's stats until cond holds.
func (p *peer) waitStats(what string, timeout time.Duration, cond func(stats) bool) stats {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := p.stats()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: %s: not within %v: %+v", p.name, what, timeout, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clean waits until the receiver holds no grant and no registration for one, quarantined or not.
func (p *peer) clean() {
	p.t.Helper()
	p.waitStats("nothing registered and no grant left", 30*time.Second, func(s stats) bool {
		return s.LeaseRegistrations == 0 && s.Quarantined == 0 && s.HeldSlots == 0 && s.Grants == 0
	})
}

// guards checks that every byte of the receiver's region outside [off, off+n) still holds the
// fill the region was given.
func (p *peer) guards(what string, off, n uint64) {
	p.t.Helper()
	r := p.ok("guards %d %d", off, n)
	require.Equal(p.t, true, r["ok"], "%s: the region outside the grant was written: first differing byte %v in %v", what, r["first"], r["range"])
}

// sum is the SHA-256 of the receiver's bytes [off, off+n).
func (p *peer) sum(off, n uint64) string {
	p.t.Helper()
	return p.ok("sum %d %d", off, n)["sha256"].(string)
}

// grant grants [off, off+n) of the receiver's region to writer; it returns the grant's ID and
// handle.
func (p *peer) grant(writer *peer, off, n uint64, ttl time.Duration) (uint64, string) {
	p.t.Helper()
	r := p.ok("grant %s %d %d %s", writer.ident, off, n, ttl)
	return uint64(r["grant"].(float64)), r["handle"].(string)
}

// done waits for the grant's Done; it returns how long that took and the grant's Err.
func (p *peer) done(id uint64, within time.Duration) (time.Duration, string) {
	p.t.Helper()
	r := p.ok("done %d %s", id, within)
	require.Equal(p.t, true, r["done"], "%s: grant %d: Done not closed within %v (err %q)", p.name, id, within, r["err"])
	return time.Duration(r["seconds"].(float64) * float64(time.Second)), r["err"].(string)
}
