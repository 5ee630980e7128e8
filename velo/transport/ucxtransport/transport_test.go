//go:build cgo && linux

// The UCX transport suite. Every test pins UCX_TLS=tcp in code (Config.TLS), and the environment
// wins, so the same suite runs on InfiniBand unchanged:
//
//	cd velo && UCX_TLS=rc_mlx5,ud_mlx5,self UCX_NET_DEVICES=mlx5_2:1 \
//	  go test -count=1 ./transport/ucxtransport -skip TestUnusableRkeyIsRefusedOverTCP
//
// Skip TestUnusableRkeyIsRefusedOverTCP there (it also skips itself when the endpoint's RMA lanes
// are hardware-keyed): over InfiniBand a GET goes straight to the NIC, and a GET with a stale or
// unusable key makes UCX abort the reading process (rc_verbs_impl.h "receive completion with
// error"). Over tcp UCX checks no keys at all, which is why the engine guards GETs there and why
// the test exists.
//
// make test-ucx-transport runs the suite under -race and again under GOEXPERIMENT=cgocheck2.
package ucxtransport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// TestFramesBothWays: a registers b; a frame from a reaches b, b learns a from the hello and
// answers over UCX although it never registered a.
func TestFramesBothWays(t *testing.T) {
	a, b := newNode(t, nil), newNode(t, nil)
	if err := a.AddPeer(testCtx(t), b.addr()); err != nil {
		t.Fatal(err)
	}
	if b.Reaches(a.h.id) {
		t.Fatal("b reaches a before a said hello")
	}
	if err := a.Send(testCtx(t), b.h.id, []byte("hello "), []byte("b")); err != nil {
		t.Fatal(err)
	}
	if f := b.h.waitFrames(t, 1)[0]; f.from != a.h.id || string(f.frame) != "hello b" {
		t.Fatalf("b got %q from %016x", f.frame, uint64(f.from))
	}
	if !b.Reaches(a.h.id) {
		t.Fatal("b does not reach a after a's hello")
	}
	if b.CanGet(a.h.id) {
		t.Fatal("b may GET from a peer it never registered")
	}
	if err := b.Send(testCtx(t), a.h.id, []byte("hi a")); err != nil {
		t.Fatal(err)
	}
	if f := a.h.waitFrames(t, 1)[0]; f.from != b.h.id || string(f.frame) != "hi a" {
		t.Fatalf("a got %q from %016x", f.frame, uint64(f.from))
	}
	// An empty frame is a frame.
	if err := a.Send(testCtx(t), b.h.id); err != nil {
		t.Fatal(err)
	}
	if f := b.h.waitFrames(t, 2)[1]; len(f.frame) != 0 {
		t.Fatalf("empty frame arrived as %q", f.frame)
	}
	if err := a.Send(testCtx(t), transport.InstanceID(12345), []byte("x")); !errors.Is(err, transport.ErrUnknownPeer) {
		t.Fatalf("send to an unknown peer: %v", err)
	}
	// The introspection page's endpoint count: one endpoint each way.
	if n := a.Endpoints(b.h.id); n != 1 {
		t.Fatalf("a holds %d endpoints to b, want 1", n)
	}
	if n := a.Endpoints(transport.InstanceID(12345)); n != 0 {
		t.Fatalf("a holds %d endpoints to an unknown peer", n)
	}
}

// TestOrderUnderLoad: several goroutines on each side send concurrently in both directions; every
// frame arrives once, and each goroutine's frames arrive in the order it sent them.
func TestOrderUnderLoad(t *testing.T) {
	a, b := newNode(t, nil), newNode(t, nil)
	link(t, a, b)
	const senders, each = 4, 400
	var wg sync.WaitGroup
	errs := make(chan error, 2*senders)
	for _, dir := range []struct{ from, to node }{{a, b}, {b, a}} {
		for s := 0; s < senders; s++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := make([]byte, 64+s*1000) // mixed sizes: one fragment and several
				for i := 0; i < each; i++ {
					var hdr [8]byte
					binary.BigEndian.PutUint32(hdr[:4], uint32(s))
					binary.BigEndian.PutUint32(hdr[4:], uint32(i))
					if err := dir.from.Send(testCtx(t), dir.to.h.id, hdr[:], body); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, h := range []*testHost{a.h, b.h} {
		got := h.waitFrames(t, senders*each)
		if len(got) != senders*each {
			t.Fatalf("%d frames, want %d", len(got), senders*each)
		}
		next := map[uint32]uint32{}
		for _, f := range got {
			s, i := binary.BigEndian.Uint32(f.frame[:4]), binary.BigEndian.Uint32(f.frame[4:8])
			if i != next[s] {
				t.Fatalf("sender %d: frame %d arrived when %d was due", s, i, next[s])
			}
			if len(f.frame) != 8+64+int(s)*1000 {
				t.Fatalf("sender %d frame %d: %d bytes", s, i, len(f.frame))
			}
			next[s]++
		}
	}
}

// TestFrameLimits: MaxFrameSize is the eager limit; a frame at it goes, one byte more is refused
// with ErrFrameTooLarge before anything is sent; a peer that advertises a smaller limit gets
// frames up to its own limit only.
func TestFrameLimits(t *testing.T) {
	a := newNode(t, func(c *Config) { c.EagerMax = 64 << 10 })
	b := newNode(t, func(c *Config) { c.EagerMax = 16 << 10 })
	link(t, a, b)
	if a.MaxFrameSize() != 64<<10 {
		t.Fatalf("MaxFrameSize %d", a.MaxFrameSize())
	}
	frame := bytes.Repeat([]byte{7}, 16<<10)
	if err := a.Send(testCtx(t), b.h.id, frame); err != nil {
		t.Fatalf("frame at the peer's limit: %v", err)
	}
	if err := a.Send(testCtx(t), b.h.id, frame, []byte{1}); !errors.Is(err, transport.ErrFrameTooLarge) {
		t.Fatalf("frame above the peer's limit: %v", err)
	}
	big := make([]byte, 64<<10)
	if err := b.Send(testCtx(t), a.h.id, big); !errors.Is(err, transport.ErrFrameTooLarge) {
		t.Fatalf("frame above the sender's own limit: %v", err)
	}
	if err := b.Send(testCtx(t), a.h.id, big[:16<<10]); err != nil {
		t.Fatal(err)
	}
	if got := b.h.waitFrames(t, 1)[0].frame; !bytes.Equal(got, frame) {
		t.Fatal("frame at the limit arrived changed")
	}
	if got := a.h.waitFrames(t, 1)[0].frame; len(got) != 16<<10 {
		t.Fatalf("a got %d bytes", len(got))
	}
	for _, bad := range []int{MinEagerMax - 1, MaxEagerMax + 1, -1} {
		if _, err := New(Config{EagerMax: bad}); err == nil {
			t.Errorf("EagerMax %d accepted", bad)
		}
	}
}

// TestBlobVersionRefused: a version-1 blob (a peer on an old wire) is refused with
// ErrInvalidEndpoint and the exact warning of the guide; so are blobs that are not blobs.
func TestBlobVersionRefused(t *testing.T) {
	a, b := newNode(t, nil), newNode(t, nil)
	v1 := b.Address()
	v1[0] = 1
	err := a.AddPeer(testCtx(t), transport.PeerAddress{ID: b.h.id, Incarnation: b.h.inc, Blob: v1})
	if !errors.Is(err, transport.ErrInvalidEndpoint) {
		t.Fatalf("version-1 blob: %v", err)
	}
	line := fmt.Sprintf("ucx: rejecting peer blob: unsupported ucx blob version 1 (expected %d)", BlobVersion)
	log := a.h.logBuf.String()
	if !strings.Contains(log, "level=WARN msg=\""+line+"\"") {
		t.Fatalf("no warning %q at warn level; log:\n%s", line, log)
	}
	if a.Reaches(b.h.id) {
		t.Fatal("a refused peer is reachable")
	}
	good := b.Address()
	for name, blob := range map[string][]byte{
		"empty":             nil,
		"truncated":         good[:blobFixedLen-1],
		"address overrun":   good[:len(good)-1],
		"trailing bytes":    append(append([]byte(nil), good...), 0),
		"next version":      append([]byte{BlobVersion + 1}, good[1:]...),
		"version 5":         append([]byte{5}, good[1:]...), // the layout before the UCX build
		"version 4":         append([]byte{4}, good[1:]...), // the HMAC seal before GCM
		"version 3":         append([]byte{3}, good[1:]...), // the layout before frames were sealed
		"damaged":           append(append([]byte(nil), good[:len(good)-5]...), good[len(good)-5]^1, 0, 0, 0, 0),
		"other incarnation": appendBlob(nil, peerBlob{MaxFrame: MinEagerMax, Incarnation: b.h.inc + 1, Build: a.build, Worker: []byte{1}}),
	} {
		if err := a.AddPeer(testCtx(t), transport.PeerAddress{ID: b.h.id, Incarnation: b.h.inc, Blob: blob}); !errors.Is(err, transport.ErrInvalidEndpoint) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if next := fmt.Sprintf("unsupported ucx blob version %d (expected %d)", BlobVersion+1, BlobVersion); !strings.Contains(a.h.logBuf.String(), next) {
		t.Errorf("the next version refused without the warning %q", next)
	}
	if err := a.AddPeer(testCtx(t), b.addr()); err != nil {
		t.Fatalf("the real blob after the refusals: %v", err)
	}
}

// TestBuildMismatchRefused: an address naming a UCX build this one cannot talk to (another minor
// release, or the same release without the guard) is refused with ErrUCXBuildMismatch, no
// endpoint can be opened to the peer, PathRefusal says release_mismatch, and the warning names
// both builds once however often the address comes; the peer's real address clears it all.
func TestBuildMismatchRefused(t *testing.T) {
	a, b := newNode(t, nil), newNode(t, nil)
	real, err := decodeBlob(b.Address())
	require.NoError(t, err)
	others := []wire.UCXBuild{
		{Major: a.build.Major, Minor: a.build.Minor + 1, Guard: a.build.Guard},
		{Major: a.build.Major, Minor: a.build.Minor, Patch: a.build.Patch, Guard: a.build.Guard + "x"},
	}
	for _, other := range others {
		blob := real
		blob.Build = other
		for range 3 {
			err := a.AddPeer(testCtx(t), transport.PeerAddress{ID: b.h.id, Incarnation: b.h.inc, Blob: appendBlob(nil, blob)})
			require.ErrorIs(t, err, ErrUCXBuildMismatch)
			require.ErrorIs(t, err, transport.ErrInvalidEndpoint)
			assert.Contains(t, err.Error(), other.String())
			assert.Contains(t, err.Error(), a.build.String())
		}
		assert.False(t, a.CanGet(b.h.id))
		assert.False(t, a.Reaches(b.h.id))
		assert.Equal(t, ReasonReleaseMismatch, a.PathRefusal(b.h.id))
		require.ErrorIs(t, a.Send(testCtx(t), b.h.id, []byte("x")), transport.ErrUnknownPeer, "a send must not open an endpoint to the peer")
		assert.Equal(t, 1, strings.Count(a.h.logBuf.String(), "peer_ucx=\""+other.String()+"\""),
			"one warning per peer and build:\n%s", a.h.logBuf.String())
	}
	require.NoError(t, a.AddPeer(testCtx(t), b.addr()))
	assert.NotEqual(t, ReasonReleaseMismatch, a.PathRefusal(b.h.id))
	assert.True(t, a.CanGet(b.h.id))
}

// TestEagerEndpoints: with EagerEndpoints, AddPeer opens the endpoint and finishes its wireup (the
// peer learns us from the hello before any frame is sent); without, nothing is opened until the
// first send.
func TestEagerEndpoints(t *testing.T) {
	regA := prometheus.NewRegistry()
	a := newNode(t, func(c *Config) { c.EagerEndpoints = true; c.Metrics = regA })
	b := newNode(t, nil)
	if err := a.AddPeer(testCtx(t), b.addr()); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(a.m.endpoints.WithLabelValues("opened")); got != 1 {
		t.Fatalf("endpoints opened after an eager AddPeer: %v", got)
	}
	eventually(t, "b learns a from the eager hello", func() bool { return b.Reaches(a.h.id) })
	lazy := newNode(t, nil)
	if err := lazy.AddPeer(testCtx(t), b.addr()); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(lazy.m.endpoints.WithLabelValues("opened")); got != 0 {
		t.Fatalf("a lazy AddPeer opened %v endpoints", got)
	}
	if err := lazy.Send(testCtx(t), b.h.id, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(lazy.m.endpoints.WithLabelValues("opened")); got != 1 {
		t.Fatalf("endpoints opened after the first send: %v", got)
	}
	if n := testutil.CollectAndCount(regA, "velo_ucx_transport_endpoint_events_total"); n != len(endpointEvents) {
		t.Fatalf("%d endpoint event series on the Registerer, want %d", n, len(endpointEvents))
	}
}

// TestEnvironmentWinsOverConfig: Config.TLS and NetDevices apply only when UCX_TLS and
// UCX_NET_DEVICES are unset, and New logs which applied.
func TestEnvironmentWinsOverConfig(t *testing.T) {
	setting := func(n node, name string) ucx.Setting {
		for _, s := range n.Settings() {
			if s.Name == name {
				return s
			}
		}
		t.Fatalf("no setting %s", name)
		return ucx.Setting{}
	}
	unsetenv(t, "UCX_TLS")
	unsetenv(t, "UCX_NET_DEVICES")
	n := newNode(t, func(c *Config) { c.TLS = "tcp"; c.NetDevices = "lo" })
	if s := setting(n, "TLS"); s.Value != "tcp" || s.Source != ucx.SourceProgram {
		t.Errorf("UCX_TLS unset: %+v, want tcp from the program", s)
	}
	if s := setting(n, "NET_DEVICES"); s.Value != "lo" || s.Source != ucx.SourceProgram {
		t.Errorf("UCX_NET_DEVICES unset: %+v, want lo from the program", s)
	}
	if log := n.h.logBuf.String(); !strings.Contains(log, "UCX_TLS from Config.TLS") || !strings.Contains(log, "UCX_NET_DEVICES from Config.NetDevices") {
		t.Errorf("New did not log that the config applied:\n%s", log)
	}

	t.Setenv("UCX_TLS", "tcp")
	t.Setenv("UCX_NET_DEVICES", "all")
	n = newNode(t, func(c *Config) { c.TLS = "tcp,self"; c.NetDevices = "lo" })
	if s := setting(n, "TLS"); s.Value != "tcp" || s.Source != ucx.SourceEnvironment {
		t.Errorf("UCX_TLS=tcp: %+v, want the environment's tcp", s)
	}
	if s := setting(n, "NET_DEVICES"); s.Value != "all" || s.Source != ucx.SourceEnvironment {
		t.Errorf("UCX_NET_DEVICES=all: %+v, want the environment's all", s)
	}
	if log := n.h.logBuf.String(); !strings.Contains(log, "UCX_TLS from the environment overrides Config.TLS") {
		t.Errorf("New did not log that the environment overrode the config:\n%s", log)
	}
	// The transport still works with what the environment chose.
	m := newNode(t, nil)
	link(t, n, m)
	if err := n.Send(testCtx(t), m.h.id, []byte("env")); err != nil {
		t.Fatal(err)
	}
	m.h.waitFrames(t, 1)
}

// TestProtoEnableWarned: UCX_PROTO_ENABLE=n (it disables all RMA on current UCX releases) is
// warned about in the transport's log.
func TestProtoEnableWarned(t *testing.T) {
	t.Setenv("UCX_PROTO_ENABLE", "n")
	n := newNode(t, nil)
	log := n.h.logBuf.String()
	if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "UCX_PROTO_ENABLE=n") {
		t.Fatalf("no warning about UCX_PROTO_ENABLE=n:\n%s", log)
	}
}

func unsetenv(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "") // registers the restore
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}

// TestSendAfterClose: a closed transport refuses everything with ErrClosed and Close is idempotent.
func TestSendAfterClose(t *testing.T) {
	a, b := newNode(t, nil), newNode(t, nil)
	link(t, a, b)
	if err := a.Send(testCtx(t), b.h.id, []byte("x")); err != nil {
		t.Fatal(err)
	}
	// b joins a's slot on its hello; close a only once b's endpoint is up (its hello arrived),
	// because UCX 1.13 aborts when one engine of a process connects to another that is closing
	// (docs/ucx.md, "UCX 1.13 faults").
	eventually(t, "b's hello at a", func() bool { return a.peerView(b.h.id).started })
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(testCtx(t), b.h.id, []byte("x")); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
	if _, err := a.RegisterMemory(make([]byte, 4096)); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("register after close: %v", err)
	}
	if a.Reaches(b.h.id) || a.CanGet(b.h.id) {
		t.Fatal("a closed transport reaches its peer")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.AddPeer(testCtx(t), b.addr()); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("AddPeer after close: %v", err)
	}
}
