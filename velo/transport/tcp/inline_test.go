package tcp

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/velo/transport"
)

// inlineHost adds transport.InlineHost to testHost, behaving like the runtime with a slow handler:
// a frame that starts with 'H' makes the reader hand reading off and then keeps the old goroutine
// until release is closed.
type inlineHost struct {
	*testHost
	release chan struct{}
	inline  atomic.Int32 // frames that came through DeliverInline
	held    atomic.Int32 // goroutines still held
}

// Answers counts every frame as one the peer sent of its own accord, so each connection keeps
// its reader.
func (h *inlineHost) Answers([]byte) bool { return false }

func (h *inlineHost) DeliverInline(from transport.InstanceID, frame []byte, handOff func()) bool {
	h.inline.Add(1)
	if len(frame) == 0 || frame[0] != 'H' {
		h.frames <- frameFrom{from, frame}
		return true
	}
	handOff()
	h.held.Add(1)
	defer h.held.Add(-1)
	h.frames <- frameFrom{from, frame}
	<-h.release
	return false
}

// A reader that hands off keeps its goroutine (the runtime's slow handler) while a new goroutine
// reads on from where it stopped: later frames arrive in order, the old goroutine's read deadline
// is not inherited (it stays out longer than IOTimeout), and Close does not wait for it.
func TestHandOffContinuesReadingInOrder(t *testing.T) {
	ha := newHost()
	hb := &inlineHost{testHost: newHost(), release: make(chan struct{})}
	defer close(hb.release)
	// Long enough for a 1 MiB frame to arrive on a loaded machine under -race; the held goroutine
	// then stays out for longer than that, counted from after the frame arrived.
	const ioTimeout = time.Second
	a := start(t, ha, Config{})
	b := start(t, hb, Config{IOTimeout: ioTimeout})
	addPeer(t, a, b, hb.testHost)

	// A large frame arrives in several reads, so the reader arms its read deadline for it.
	big := append([]byte{'H'}, bytes.Repeat([]byte("slow"), 1<<18)...)
	for _, f := range [][]byte{[]byte("1"), big} {
		if err := a.Send(ctx(t), hb.id, f); err != nil {
			t.Fatal(err)
		}
	}
	if f := hb.next(t); string(f.frame) != "1" {
		t.Fatalf("first frame %q", f.frame)
	}
	if f := hb.next(t); !bytes.Equal(f.frame, big) {
		t.Fatalf("second frame: %d bytes", len(f.frame))
	}
	// The held goroutine stays out past the I/O timeout: the connection must survive it.
	time.Sleep(ioTimeout + ioTimeout/2)
	for i := 2; i <= 50; i++ {
		if err := a.Send(ctx(t), hb.id, []byte{byte('0' + i/10), byte('0' + i%10)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 2; i <= 50; i++ {
		want := string([]byte{byte('0' + i/10), byte('0' + i%10)})
		if f := hb.next(t); string(f.frame) != want {
			t.Fatalf("frame %q, want %q", f.frame, want)
		}
	}
	select {
	case p := <-hb.downs:
		t.Fatalf("connection to %v lost while a handler held the old reader", p)
	default:
	}
	if n := hb.inline.Load(); n != 51 {
		t.Fatalf("%d frames came through DeliverInline, want 51", n)
	}
	if hb.held.Load() != 1 {
		t.Fatal("the handed-off goroutine is not held")
	}

	// Close waits for the connection's reader, not for a goroutine that handed reading off.
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("Close waits for a goroutine that handed its connection off")
	}
}
