package rdmapath_test

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/lanes"
	"github.com/velo-go/velo/test/internal/netns"
)

// The kernel as the witness of the lane (package lanes): these tests run the two-process example
// inside a cgroup whose every socket eBPF counts, and check the claims of the path metric against
// those counts rather than against anything velo says about itself.

// laneCounter makes a counter, or skips where the kernel or the rights for one are missing.
func laneCounter(t *testing.T) *lanes.Counter {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the lane counter needs root here (cgroups and BPF programs); skipped")
	}
	c, err := lanes.New(lanes.Options{})
	if errors.Is(err, lanes.ErrNotSupported) {
		t.Skipf("skipped: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// controlPort is the owner's control-plane port, from the example's output.
func controlPort(t *testing.T, out string) uint16 {
	t.Helper()
	m := ownerControlPlane.FindStringSubmatch(out)
	require.NotNil(t, m, "the owner did not print its control plane:\n%s", out)
	_, port, err := net.SplitHostPort(m[1])
	require.NoError(t, err)
	p, err := strconv.ParseUint(port, 10, 16)
	require.NoError(t, err)
	return uint16(p)
}

// lanesOf splits what the counter saw into velo's control plane and the other TCP sockets.
func lanesOf(t *testing.T, c *lanes.Counter, control uint16) (ctl, other lanes.Lane) {
	t.Helper()
	flows, err := c.Read()
	require.NoError(t, err)
	ls := lanes.Classify(flows, "rest", lanes.PortsLane("control", control), lanes.ProtocolLane("tcp", lanes.ProtoTCP))
	require.GreaterOrEqual(t, len(ls), 2)
	t.Logf("kernel counts: control plane %d out / %d in, other TCP %d out / %d in", ls[0].BytesOut, ls[0].BytesIn, ls[1].BytesOut, ls[1].BytesIn)
	return ls[0], ls[1]
}

// TestLanesWitnessTheRDMAPath: a 64 MiB transfer on rdma/ok carries less than 1 % of its bytes on
// velo's control-plane connection, and over UCX_TLS=tcp about the payload on UCX's own sockets
// (the owner's sending socket and the consumer's receiving one are both in the cgroup).
func TestLanesWitnessTheRDMAPath(t *testing.T) {
	c := laneCounter(t)
	const size = 64 << 20
	cmd := exec.CommandContext(tctx(t), example.Path(t), "--size", strconv.Itoa(size))
	cmd.Env = exampleEnv("UCX_TLS=tcp")
	c.Place(cmd)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the example failed:\n%s", out)
	require.Equal(t, 1, pathCounts(string(out))["consumer"]["rdma/ok"])
	ctl, other := lanesOf(t, c, controlPort(t, string(out)))
	assert.Less(t, ctl.Bytes(), uint64(size)/100, "velo's control plane carried %d bytes of a %d-byte rdma/ok transfer", ctl.Bytes(), size)
	assert.Positive(t, ctl.Bytes(), "the counter saw no control plane at all")
	// Both processes are in the cgroup, so each direction holds the payload's segments and the
	// other side's ACKs with their headers; how many ACKs depends on scheduling, so the upper
	// bound only catches a payload counted twice.
	for what, n := range map[string]uint64{"out": other.BytesOut, "in": other.BytesIn} {
		assert.GreaterOrEqual(t, n, uint64(size), "UCX's sockets moved %d bytes %s for a %d-byte payload", n, what, size)
		assert.Less(t, n, uint64(size)*5/4, "UCX's sockets moved %d bytes %s for a %d-byte payload", n, what, size)
	}
}

// TestLanesWitnessTheChunkedPath: with the kill switch the same transfer moves by chunks, and the
// kernel sees at least the payload on velo's control plane.
func TestLanesWitnessTheChunkedPath(t *testing.T) {
	c := laneCounter(t)
	const size = 64 << 20
	cmd := exec.CommandContext(tctx(t), example.Path(t), "--size", strconv.Itoa(size))
	cmd.Env = exampleEnv("UCX_TLS=tcp", "VELO_RDMA_RENDEZVOUS_DISABLE=1")
	c.Place(cmd)
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the example exits non-zero off the RDMA path")
	require.Equal(t, 1, pathCounts(string(out))["consumer"]["chunked/kill_switch"], "%s", out)
	ctl, _ := lanesOf(t, c, controlPort(t, string(out)))
	assert.GreaterOrEqual(t, ctl.BytesOut, uint64(size))
	assert.GreaterOrEqual(t, ctl.BytesIn, uint64(size))
}

// TestLanesAcrossNamespaces: the same proof with the owner and the consumer on two "hosts"
// (network namespaces joined by a veth pair, UCX_NET_DEVICES pinned to it).
func TestLanesAcrossNamespaces(t *testing.T) {
	c := laneCounter(t)
	bin := example.Path(t)
	p := netns.New(t)
	dir := t.TempDir()
	ctx := tctx(t)
	const size = 64 << 20
	start := func(h netns.Host, role string, out *bytes.Buffer) *exec.Cmd {
		cmd := h.Command(ctx, bin, "--role", role, "--dir", dir, "--size", strconv.Itoa(size))
		cmd.Env = exampleEnv("UCX_TLS=tcp", "UCX_NET_DEVICES="+h.Dev)
		cmd.Stdout, cmd.Stderr = out, out
		c.Place(cmd)
		require.NoError(t, cmd.Start())
		return cmd
	}
	var ownerOut, consOut bytes.Buffer
	owner := start(p.A, "owner", &ownerOut)
	cons := start(p.B, "consumer", &consOut)
	cerr, oerr := cons.Wait(), owner.Wait()
	require.NoError(t, oerr, "owner:\n%s", ownerOut.String())
	require.NoError(t, cerr, "consumer:\n%s", consOut.String())
	all := ownerOut.String() + consOut.String()
	require.Equal(t, 1, pathCounts(all)["consumer"]["rdma/ok"])
	ctl, other := lanesOf(t, c, controlPort(t, all))
	assert.Less(t, ctl.Bytes(), uint64(size)/100)
	assert.GreaterOrEqual(t, other.BytesOut, uint64(size))
	assert.GreaterOrEqual(t, other.BytesIn, uint64(size))
}
