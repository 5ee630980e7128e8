package tcp

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/velo/transport"
)

// testHost is the runtime side of the seam for these tests: it records frames and peer-down
// reports and can claim bodies like the messenger does.
type testHost struct {
	id     transport.InstanceID
	inc    uint64
	frames chan frameFrom
	downs  chan transport.InstanceID

	mu     sync.Mutex
	claims map[byte][]byte // first prefix byte -> buffer to claim into
	done   chan error
}

type frameFrom struct {
	from  transport.InstanceID
	frame []byte
}

func newHost() *testHost {
	return &testHost{
		id:     transport.InstanceID(rand.Uint64() | 1),
		inc:    rand.Uint64(),
		frames: make(chan frameFrom, 4096),
		downs:  make(chan transport.InstanceID, 16),
		done:   make(chan error, 16),
	}
}

func (h *testHost) LocalID() transport.InstanceID { return h.id }
func (h *testHost) Incarnation() uint64           { return h.inc }
func (h *testHost) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
func (h *testHost) Deliver(from transport.InstanceID, frame []byte) {
	h.frames <- frameFrom{from, frame}
}
func (h *testHost) PeerDown(p transport.InstanceID, err error) { h.downs <- p }

// claimingHost adds transport.Claimer to testHost.
type claimingHost struct{ *testHost }

func (h claimingHost) ClaimPrefix() int { return 1 }
func (h claimingHost) Claim(from transport.InstanceID, prefix []byte, size int) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	dst := h.claims[prefix[0]]
	if dst == nil || len(dst) != size-1 {
		return nil
	}
	delete(h.claims, prefix[0])
	return dst
}
func (h claimingHost) Claimed(from transport.InstanceID, prefix []byte, err error) { h.done <- err }

const wait = 20 * time.Second // generous: a loaded 2-core machine

func (h *testHost) next(t *testing.T) frameFrom {
	t.Helper()
	select {
	case f := <-h.frames:
		return f
	case <-time.After(wait):
		t.Fatal("no frame delivered")
	}
	return frameFrom{}
}

func (h *testHost) waitDown(t *testing.T, want transport.InstanceID) {
	t.Helper()
	select {
	case got := <-h.downs:
		if got != want {
			t.Fatalf("PeerDown(%v), want %v", got, want)
		}
	case <-time.After(wait):
		t.Fatal("no PeerDown")
	}
}

func start(t *testing.T, h transport.Host, cfg Config) *Transport {
	t.Helper()
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(h); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func addPeer(t *testing.T, from *Transport, to *Transport, h *testHost) {
	t.Helper()
	if err := from.AddPeer(context.Background(), transport.PeerAddress{ID: h.id, Incarnation: h.inc, Blob: to.Address()}); err != nil {
		t.Fatal(err)
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return c
}
