//go:build linux

package tcp

import (
	"bytes"
	"testing"
	"time"
)

// TestKernelCounts: the kernel's counts on the connection to a peer grow by at least the frames
// sent and received over it, and a peer with no connection counts nothing.
func TestKernelCounts(t *testing.T) {
	ha, hb := newHost(), newHost()
	a, b := start(t, ha, Config{}), start(t, hb, Config{})
	if k, err := a.KernelCounts(hb.id); err != nil || k != (KernelCounts{}) {
		t.Fatalf("before any connection: %+v, %v", k, err)
	}
	addPeer(t, a, b, hb)
	if err := a.Send(ctx(t), hb.id, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	hb.next(t)
	before, err := a.KernelCounts(hb.id)
	if err != nil {
		t.Fatal(err)
	}
	if before.Conns != 1 {
		t.Fatalf("%d connections", before.Conns)
	}
	const n = 1 << 20
	if err := a.Send(ctx(t), hb.id, bytes.Repeat([]byte{1}, n)); err != nil {
		t.Fatal(err)
	}
	hb.next(t)
	if err := b.Send(ctx(t), ha.id, bytes.Repeat([]byte{2}, n/2)); err != nil {
		t.Fatal(err)
	}
	ha.next(t)
	// The last ACK can trail the frame that the peer already delivered: poll, bounded.
	deadline := time.Now().Add(wait)
	for {
		after, err := a.KernelCounts(hb.id)
		if err != nil {
			t.Fatal(err)
		}
		sent, recv := after.BytesAcked-before.BytesAcked, after.BytesReceived-before.BytesReceived
		if sent >= n && recv >= n/2 {
			if sent > n+4096 || recv > n/2+4096 {
				t.Fatalf("counted %d out and %d in for a %d-byte and a %d-byte frame", sent, recv, n, n/2)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kernel counted %d bytes out, %d in; want at least %d and %d", sent, recv, n, n/2)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
