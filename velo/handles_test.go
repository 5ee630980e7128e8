package velo

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous"
)

func TestChunkedGetSizes(t *testing.T) {
	a, b := pair(t) // a consumes, b owns
	chunk := rendezvous.DefaultChunkSize
	for _, size := range []int{1, chunk, chunk + 1, 64 << 20} {
		data := payload(size, uint64(size))
		want := sum(data)
		h, err := b.StageData(tctx(t), data)
		if err != nil {
			t.Fatal(err)
		}
		l, err := a.Get(tctx(t), h)
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		if sum(l.Bytes()) != want {
			t.Fatalf("%d bytes: checksum differs", size)
		}
		if l.Path != metrics.PathChunked || l.Reason != metrics.ReasonNotConfigured {
			t.Fatalf("path %s/%s", l.Path, l.Reason)
		}
		// GetInto fills the caller's buffer; the lease is detached first so the slot stays.
		if err := l.Detach(tctx(t)); err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, size)
		l2, err := a.GetInto(tctx(t), h, dst)
		if err != nil || sum(dst) != want {
			t.Fatalf("GetInto %d bytes: %v", size, err)
		}
		if err := l2.Release(tctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "owner freed every slot", func() bool { s, l := b.StagedCounts(); return s == 0 && l == 0 })
	// Both sides counted every transfer on the chunked path, reason not_configured.
	for _, v := range []*Velo{a, b} {
		if n := metric(t, v, metrics.RDMAPathTotal, map[string]string{"path": "chunked", "reason": "not_configured"}); n != 8 {
			t.Fatalf("%v counted %v chunked/not_configured, want 8", v.ID(), n)
		}
	}
	if n := metric(t, b, metrics.StagedBytes, nil); n != 0 {
		t.Fatalf("staged bytes gauge %v after all releases", n)
	}
}

func TestConcurrentGets(t *testing.T) {
	a, b := pair(t)
	data := payload(3<<20+123, 7)
	h, err := b.StageData(tctx(t), data)
	if err != nil {
		t.Fatal(err)
	}
	const n = 32
	for i := 1; i < n; i++ {
		if err := b.Ref(tctx(t), h); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := a.Get(tctx(t), h)
			if err == nil && !bytes.Equal(l.Bytes(), data) {
				err = errors.New("payload differs")
			}
			if err == nil {
				err = l.Release(tctx(t))
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// 32 references, 32 releases: the payload is gone.
	if _, err := a.Get(tctx(t), h); !errors.Is(err, ErrReleased) {
		t.Fatalf("get after the last release: %v", err)
	}
	if s, l := b.StagedCounts(); s != 0 || l != 0 {
		t.Fatalf("owner holds %d slots, %d leases", s, l)
	}
}

func TestDetachVersusRelease(t *testing.T) {
	a, b := pair(t)
	data := payload(100_000, 9)
	h, _ := b.StageData(tctx(t), data)

	l, err := a.Get(tctx(t), h)
	if err != nil {
		t.Fatal(err)
	}
	md, err := a.Metadata(tctx(t), h)
	if err != nil || md.Leases != 1 || md.Refs != 1 || md.Size != uint64(len(data)) || md.Staging != metrics.ReasonNotPinned {
		t.Fatalf("metadata during the lease: %+v, %v", md, err)
	}
	if err := l.Detach(tctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(tctx(t)); !errors.Is(err, ErrBadLease) {
		t.Fatalf("ending a lease twice: %v", err)
	}
	// Detach kept the payload: it can be fetched again.
	md, err = a.Metadata(tctx(t), h)
	if err != nil || md.Leases != 0 || md.Refs != 1 {
		t.Fatalf("after detach: %+v, %v", md, err)
	}
	l, err = a.Get(tctx(t), h)
	if err != nil || !bytes.Equal(l.Bytes(), data) {
		t.Fatalf("get after detach: %v", err)
	}
	// Release spent the only reference: the payload is gone.
	if err := l.Release(tctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Metadata(tctx(t), h); !errors.Is(err, ErrReleased) {
		t.Fatalf("metadata after release: %v", err)
	}
	if _, err := a.Get(tctx(t), h); !errors.Is(err, ErrReleased) {
		t.Fatalf("get after release: %v", err)
	}
	if err := a.Unref(tctx(t), h); !errors.Is(err, ErrReleased) {
		t.Fatalf("release after release: %v", err)
	}
}

func TestLocalFastPath(t *testing.T) {
	v := newInstance(t)
	data := payload(5<<20, 11)
	h, _ := v.StageData(tctx(t), data)
	l, err := v.Get(tctx(t), h)
	if err != nil || !bytes.Equal(l.Bytes(), data) {
		t.Fatalf("local get: %v", err)
	}
	if n := metric(t, v, metrics.RendezvousBytesTotal, map[string]string{"direction": "received", "path": "local"}); n != float64(len(data)) {
		t.Fatalf("local bytes %v", n)
	}
	if n := metric(t, v, metrics.MessagesSentTotal, map[string]string{"kind": "request"}); n != 0 {
		t.Fatalf("the local path sent %v requests", n)
	}
	l.Detach(tctx(t))
	l, _ = v.Get(tctx(t), h)
	l.Release(tctx(t))
	if s, _ := v.StagedCounts(); s != 0 {
		t.Fatal("local release did not free the slot")
	}
}

func TestBadHandlesAndLeases(t *testing.T) {
	a, b := pair(t)
	c := newInstance(t)
	if err := c.RegisterPeer(tctx(t), b.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	data := payload(4096, 1)
	h, _ := b.StageData(tctx(t), data)

	forged := h
	forged.Nonce ^= 1
	if _, err := a.Get(tctx(t), forged); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("forged nonce: %v", err)
	}
	bogus := h
	bogus.Slot = 1 << 40
	if _, err := a.Get(tctx(t), bogus); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("bogus slot: %v", err)
	}
	wrongSize := h
	wrongSize.Size++
	if _, err := a.Get(tctx(t), wrongSize); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("wrong size: %v", err)
	}
	if _, err := a.GetInto(tctx(t), h, make([]byte, 10)); !errors.Is(err, ErrBufferSize) {
		t.Fatalf("short buffer: %v", err)
	}
	if _, err := a.Get(tctx(t), Handle{}); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("zero handle: %v", err)
	}
	unknownOwner := h
	unknownOwner.Owner = 0x1234
	if _, err := a.Get(tctx(t), unknownOwner); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("unknown owner: %v", err)
	}

	// A lease held by a cannot be used or ended by c.
	l, err := a.Get(tctx(t), h)
	if err != nil {
		t.Fatal(err)
	}
	_, leaseID := leaseOf(t, l)
	pull := wire.AppendPullRequest(nil, wire.PullRequest{Lease: leaseID, Offset: 0, Length: 16})
	if _, err := c.Request(tctx(t), b.ID(), "velo.rv.pull", pull); !errors.Is(err, ErrHandlerFailed) || !bytes.Contains([]byte(err.Error()), []byte("not held by")) {
		t.Fatalf("pull on another consumer's lease: %v", err)
	}
	// A pull outside the slot is refused, and the owner keeps serving.
	pull = wire.AppendPullRequest(nil, wire.PullRequest{Lease: leaseID, Offset: 4000, Length: 200})
	if _, err := a.Request(tctx(t), b.ID(), "velo.rv.pull", pull); err == nil {
		t.Fatal("out-of-range pull answered")
	}
	// Garbage to a protocol handler is an error, not a crash.
	if _, err := a.Request(tctx(t), b.ID(), "velo.rv.acquire", []byte{1, 2, 3}); !errors.Is(err, ErrHandlerFailed) {
		t.Fatalf("garbage acquire: %v", err)
	}
	if err := l.Release(tctx(t)); err != nil {
		t.Fatal(err)
	}
}

// leaseOf exposes the lease ID for the tests that speak the protocol by hand.
func leaseOf(t *testing.T, l *Lease) (Handle, uint64) {
	t.Helper()
	id := rendezvous.LeaseID(l)
	if id == 0 {
		t.Fatal("lease without an ID")
	}
	return l.Handle(), id
}

func TestOwnerVanishesMidTransfer(t *testing.T) {
	a, b := pair(t, WithPullWindow(1), WithChunkSize(4<<10))
	data := payload(64<<20, 5)
	h, _ := b.StageData(tctx(t), data)
	errc := make(chan error, 1)
	go func() {
		_, err := a.Get(tctx(t), h)
		errc <- err
	}()
	eventually(t, "the owner serving chunks", func() bool {
		return metric(t, b, metrics.RendezvousBytesTotal, map[string]string{"direction": "sent", "path": "chunked"}) > 0
	})
	b.Close()
	err := <-errc
	if err == nil {
		t.Fatal("get succeeded although the owner closed mid-transfer")
	}
	t.Logf("get from a vanished owner: %v", err)
	if !errors.Is(err, ErrPeerUnreachable) && !errors.Is(err, ErrUnavailable) {
		t.Fatalf("unexpected error: %v", err)
	}
	// The consumer is fine: it can still talk to others.
	c := newInstance(t)
	a.RegisterPeer(tctx(t), c.PeerInfo())
	h2, _ := c.StageData(tctx(t), []byte("after"))
	if l, err := a.Get(tctx(t), h2); err != nil || string(l.Bytes()) != "after" {
		t.Fatalf("after the owner vanished: %v", err)
	}
}

func TestCloseFreesEverything(t *testing.T) {
	a, b := pair(t)
	h, _ := b.StageData(tctx(t), payload(1<<20, 1))
	if _, err := a.Get(tctx(t), h); err != nil { // lease left open on purpose
		t.Fatal(err)
	}
	b.Close()
	if s, l := b.StagedCounts(); s != 0 || l != 0 {
		t.Fatalf("after Close: %d slots, %d leases", s, l)
	}
	if n := metric(t, b, metrics.LeasesReapedTotal, map[string]string{"cause": "shutdown"}); n != 1 {
		t.Fatalf("shutdown reaped %v leases", n)
	}
	if _, err := b.Request(tctx(t), a.ID(), "x", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("request after close: %v", err)
	}
	if _, err := b.StageData(tctx(t), []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("register after close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestBeginDrainKeepsServing(t *testing.T) {
	a, b := pair(t)
	h, _ := b.StageData(tctx(t), []byte("drain"))
	b.BeginDrain()
	l, err := a.Get(tctx(t), h)
	if err != nil || string(l.Bytes()) != "drain" {
		t.Fatalf("get while draining: %v", err)
	}
	// Without an RDMA registry the first check of the decision (not configured) answers.
	if n := metric(t, b, metrics.RDMAPathTotal, map[string]string{"path": "chunked", "reason": "not_configured"}); n != 1 {
		t.Fatalf("owner counted %v", n)
	}
	if n := metric(t, b, metrics.RDMAPathTotal, map[string]string{"path": "chunked", "reason": "draining"}); n != 0 {
		t.Fatalf("draining counted without a registry: %v", n)
	}
}
