package tcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

func TestOneConnectionServesBothDirections(t *testing.T) {
	ha, hb := newHost(), newHost()
	a, b := start(t, ha, Config{}), start(t, hb, Config{})
	addPeer(t, a, b, hb) // only a knows b

	if b.Reaches(ha.id) {
		t.Fatal("b reaches a before a connected")
	}
	if err := a.Send(ctx(t), hb.id, []byte("hello "), []byte("b")); err != nil {
		t.Fatal(err)
	}
	if f := hb.next(t); f.from != ha.id || string(f.frame) != "hello b" {
		t.Fatalf("b got %q from %v", f.frame, f.from)
	}
	// b never registered a, yet answers over the connection a opened.
	if !b.Reaches(ha.id) {
		t.Fatal("b does not reach a over the inbound connection")
	}
	if err := b.Send(ctx(t), ha.id, []byte("hi a")); err != nil {
		t.Fatal(err)
	}
	if f := ha.next(t); string(f.frame) != "hi a" {
		t.Fatalf("a got %q", f.frame)
	}
	b.mu.Lock()
	n := len(b.peers[ha.id].conns)
	b.mu.Unlock()
	if n != 1 {
		t.Fatalf("b has %d connections to a, want 1", n)
	}
}

func TestPerPeerOrderUnderConcurrentSenders(t *testing.T) {
	ha, hb := newHost(), newHost()
	a, b := start(t, ha, Config{}), start(t, hb, Config{})
	addPeer(t, a, b, hb)
	const senders, each = 4, 500
	errs := make(chan error, senders)
	for s := 0; s < senders; s++ {
		go func() {
			for i := 0; i < each; i++ {
				var f [8]byte
				binary.BigEndian.PutUint32(f[:4], uint32(s))
				binary.BigEndian.PutUint32(f[4:], uint32(i))
				if err := a.Send(ctx(t), hb.id, f[:4], f[4:]); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for s := 0; s < senders; s++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	last := map[uint32]int{}
	for i := 0; i < senders*each; i++ {
		f := hb.next(t).frame
		s, n := binary.BigEndian.Uint32(f[:4]), int(binary.BigEndian.Uint32(f[4:]))
		if prev, ok := last[s]; ok && n != prev+1 {
			t.Fatalf("sender %d: frame %d after %d", s, n, prev)
		}
		last[s] = n
	}
}

func TestFrameSizeLimits(t *testing.T) {
	ha, hb := newHost(), newHost()
	a, b := start(t, ha, Config{MaxFrameSize: 64 << 10}), start(t, hb, Config{MaxFrameSize: 64 << 10})
	addPeer(t, a, b, hb)
	err := a.Send(ctx(t), hb.id, make([]byte, 64<<10), []byte{1})
	if !errors.Is(err, transport.ErrFrameTooLarge) {
		t.Fatalf("oversized send: %v", err)
	}
	if err := a.Send(ctx(t), hb.id, make([]byte, 64<<10)); err != nil {
		t.Fatalf("send at the limit: %v", err)
	}
	if f := hb.next(t); len(f.frame) != 64<<10 {
		t.Fatalf("got %d bytes", len(f.frame))
	}
}

// rawPeer speaks the hello by hand so tests can then send bytes no transport would.
func rawPeer(t *testing.T, to *Transport) (net.Conn, transport.InstanceID) {
	t.Helper()
	nc, id, _ := rawPeerAs(t, to, 0x5eed, wire.HelloVersion)
	return nc, id
}

// rawPeerAs is rawPeer as instance id speaking the given wire version; it returns the hello
// the transport answered with.
func rawPeerAs(t *testing.T, to *Transport, id transport.InstanceID, version uint8) (net.Conn, transport.InstanceID, wire.Hello) {
	t.Helper()
	nc, err := net.Dial("tcp", to.Advertised())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	b, _ := wire.AppendHello(nil, wire.Hello{Version: version, ID: uint64(id), Incarnation: 1, MaxFrame: 1 << 20})
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(wait))
	h, err := readHelloFrom(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, id, h
}

func readHelloFrom(nc net.Conn) (wire.Hello, error) {
	buf := make([]byte, wire.HelloMaxSize)
	n, err := nc.Read(buf)
	if err != nil {
		return wire.Hello{}, err
	}
	return wire.DecodeHello(buf[:n])
}

func TestOversizedAnnouncedFrameDropsOnlyThatConnection(t *testing.T) {
	ha, hb := newHost(), newHost()
	a, b := start(t, ha, Config{MaxFrameSize: 64 << 10}), start(t, hb, Config{})
	addPeer(t, b, a, ha)

	nc, evil := rawPeer(t, a)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 1<<30) // a 1 GiB frame: never allocated
	nc.Write(hdr[:])
	ha.waitDown(t, evil)
	nc.SetReadDeadline(time.Now().Add(wait))
	if _, err := nc.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection still open after an oversized frame")
	}
	// Other peers are untouched.
	if err := b.Send(ctx(t), ha.id, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	if f := ha.next(t); string(f.frame) != "still here" {
		t.Fatalf("got %q", f.frame)
	}
}

func TestTruncatedFrameIsNotDelivered(t *testing.T) {
	ha := newHost()
	a := start(t, ha, Config{})
	nc, evil := rawPeer(t, a)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 100)
	nc.Write(hdr[:])
	nc.Write(make([]byte, 10))
	nc.Close()
	ha.waitDown(t, evil)
	select {
	case f := <-ha.frames:
		t.Fatalf("delivered a truncated frame of %d bytes", len(f.frame))
	default:
	}
}

func TestBadHellosAreRefused(t *testing.T) {
	ha := newHost()
	a := start(t, ha, Config{})
	for name, payload := range map[string][]byte{
		"http":      []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"version 9": func() []byte { b, _ := wire.AppendHello(nil, wire.Hello{Version: 9, ID: 1}); return b }(),
		"version 1": func() []byte { b, _ := wire.AppendHello(nil, wire.Hello{Version: 1, ID: 1}); return b }(),
		"own id": func() []byte {
			b, _ := wire.AppendHello(nil, wire.Hello{Version: wire.HelloVersion, ID: uint64(ha.id)})
			return b
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			nc, err := net.Dial("tcp", a.Advertised())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.Write(payload)
			nc.SetReadDeadline(time.Now().Add(wait))
			if n, err := nc.Read(make([]byte, 64)); err == nil {
				t.Fatalf("got %d bytes of reply, want the connection closed", n)
			}
		})
	}
	// The transport still works. The acceptor answers the hello before it registers the
	// connection, so the peer becomes reachable a moment after its hello is answered.
	_, id := rawPeer(t, a)
	for deadline := time.Now().Add(wait); !a.Reaches(id); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a valid peer is not reachable after bad hellos")
		}
	}
}

func TestReconnectAfterLoss(t *testing.T) {
	ha, hb := newHost(), newHost()
	a, b := start(t, ha, Config{}), start(t, hb, Config{})
	addPeer(t, a, b, hb)
	if err := a.Send(ctx(t), hb.id, []byte("1")); err != nil {
		t.Fatal(err)
	}
	hb.next(t)
	b.RemovePeer(ha.id) // b drops the connection
	ha.waitDown(t, hb.id)
	if err := a.Send(ctx(t), hb.id, []byte("2")); err != nil {
		t.Fatalf("send after loss: %v", err)
	}
	if f := hb.next(t); string(f.frame) != "2" {
		t.Fatalf("got %q", f.frame)
	}
}

func TestRestartedPeerIsDetected(t *testing.T) {
	ha, hb := newHost(), newHost()
	a, b := start(t, ha, Config{}), start(t, hb, Config{})
	addPeer(t, a, b, hb)
	addr := b.Advertised()
	b.Close()
	// A new instance takes the old address.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot rebind %s: %v", addr, err)
	}
	start(t, newHost(), Config{Listener: ln})
	err = a.Send(ctx(t), hb.id, []byte("x"))
	if !errors.Is(err, transport.ErrPeerUnreachable) || !bytes.Contains([]byte(err.Error()), []byte("restarted")) {
		t.Fatalf("send to a restarted peer: %v", err)
	}
}

func TestAddPeerValidates(t *testing.T) {
	ha := newHost()
	a := start(t, ha, Config{})
	good, _ := wire.EncodeTCPAddr("127.0.0.1:1")
	for name, pa := range map[string]transport.PeerAddress{
		"empty blob": {ID: 7},
		"garbage":    {ID: 7, Blob: []byte{1, 200, 'x'}},
		"version 2":  {ID: 7, Blob: append([]byte{2}, good[1:]...)},
		"id zero":    {ID: 0, Blob: good},
		"self":       {ID: ha.id, Blob: good},
		"no port":    {ID: 7, Blob: append([]byte{1, 9}, "127.0.0.1"...)},
	} {
		if err := a.AddPeer(ctx(t), pa); !errors.Is(err, transport.ErrInvalidEndpoint) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := a.Send(ctx(t), 7, []byte("x")); !errors.Is(err, transport.ErrUnknownPeer) {
		t.Fatalf("send to unregistered peer: %v", err)
	}
}

func TestUnreachablePeer(t *testing.T) {
	ha := newHost()
	a := start(t, ha, Config{})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	blob, _ := wire.EncodeTCPAddr(addr)
	if err := a.AddPeer(ctx(t), transport.PeerAddress{ID: 9, Blob: blob}); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx(t), 9, []byte("x")); !errors.Is(err, transport.ErrPeerUnreachable) {
		t.Fatalf("got %v", err)
	}
}

func TestClaimReadsBodyIntoCallerBuffer(t *testing.T) {
	ha, hb := newHost(), newHost()
	hb.claims = map[byte][]byte{}
	dst := make([]byte, 1<<20)
	hb.claims[7] = dst
	a, b := start(t, ha, Config{}), start(t, claimingHost{hb}, Config{})
	addPeer(t, a, b, hb)
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	if err := a.Send(ctx(t), hb.id, []byte{7}, body); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-hb.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("claim never completed")
	}
	if !bytes.Equal(dst, body) {
		t.Fatal("claimed body differs")
	}
	// An unclaimed frame (prefix 8) is delivered whole.
	if err := a.Send(ctx(t), hb.id, []byte{8}, []byte("rest")); err != nil {
		t.Fatal(err)
	}
	if f := hb.next(t); string(f.frame) != "\x08rest" {
		t.Fatalf("got %q", f.frame)
	}
}

func TestCloseIsPromptWithSilentClient(t *testing.T) {
	ha := newHost()
	a, err := New(Config{DialTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a.Start(ha)
	nc, err := net.Dial("tcp", a.Advertised())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	done := make(chan struct{})
	go func() { a.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("Close waits for a client that never says hello")
	}
}

func TestAdvertiseUnspecified(t *testing.T) {
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := New(Config{Listener: ln})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	want := fmt.Sprintf("127.0.0.1:%d", ln.Addr().(*net.TCPAddr).Port)
	if tr.Advertised() != want {
		t.Fatalf("advertised %s, want %s", tr.Advertised(), want)
	}
	if _, err := New(Config{Advertise: "nohostport"}); err == nil {
		t.Fatal("a bad Advertise was accepted")
	}
}
