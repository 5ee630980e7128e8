package tcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// A member of the previous release speaks TCP wire version 2: the same hello, no control frames.
// These tests play it by hand on a raw socket, so that what the transport sends it is read byte
// for byte.

func writeRawFrame(t *testing.T, nc net.Conn, payload string) {
	t.Helper()
	_, err := nc.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...))
	require.NoError(t, err)
}

// readRawFrame reads one frame and requires it to be a data frame, not a control frame.
func readRawFrame(t *testing.T, r io.Reader, nc net.Conn) string {
	t.Helper()
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(wait)))
	var word [4]byte
	_, err := io.ReadFull(r, word[:])
	require.NoError(t, err)
	n := binary.BigEndian.Uint32(word[:])
	require.Zero(t, n&wire.TCPControlBit, "a control frame sent to a version 2 peer")
	b := make([]byte, n)
	_, err = io.ReadFull(r, b)
	require.NoError(t, err)
	return string(b)
}

// requireSilence requires that nothing arrives on nc for d: no goodbye, no close.
func requireSilence(t *testing.T, nc net.Conn, d time.Duration) {
	t.Helper()
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(d)))
	n, err := nc.Read(make([]byte, 64))
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "read %d bytes (%v) from a quiet version 2 connection, want nothing", n, err)
}

// TestPreviousReleaseDialsIn: a version 2 dialer is answered in version 2, frames go both ways,
// and with an idle timeout of 20 ms it is sent no goodbye and its connection stays open: it is
// the one it keeps using.
func TestPreviousReleaseDialsIn(t *testing.T) {
	hb := newHost()
	b := start(t, hb, Config{IdleTimeout: 20 * time.Millisecond})
	nc, id, h := rawPeerAs(t, b, 0x01d, wire.HelloVersionMin)
	assert.Equal(t, uint8(wire.HelloVersionMin), h.Version, "the answer speaks the dialer's version")

	writeRawFrame(t, nc, "from the old release")
	f := hb.next(t)
	assert.Equal(t, id, f.from)
	assert.Equal(t, "from the old release", string(f.frame))
	require.NoError(t, b.Send(ctx(t), id, []byte("to the old release")))
	assert.Equal(t, "to the old release", readRawFrame(t, nc, nc))

	requireSilence(t, nc, 500*time.Millisecond) // 25 idle timeouts
	require.NoError(t, b.Send(ctx(t), id, []byte("still here")))
	assert.Equal(t, "still here", readRawFrame(t, nc, nc))
	writeRawFrame(t, nc, "and back")
	assert.Equal(t, "and back", string(hb.next(t).frame))

	assert.Equal(t, 1, openConns(b))
	assert.Zero(t, closes(b, closeIdle)+closes(b, closeBudget)+closes(b, closeLost))
	assert.Empty(t, hb.downs)
}

// oldAcceptor listens as a member of the previous release: it refuses a hello of any version but
// 2 by closing the connection (what that release does), and answers a version 2 one with its own.
type oldAcceptor struct {
	ln      net.Listener
	id      transport.InstanceID
	conns   chan *bufio.Reader
	ncs     chan net.Conn
	refused chan uint8 // the versions it hung up on
}

func startOldAcceptor(t *testing.T) *oldAcceptor {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	o := &oldAcceptor{ln: ln, id: 0x01d, conns: make(chan *bufio.Reader, 4), ncs: make(chan net.Conn, 4), refused: make(chan uint8, 4)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { nc.Close() })
			br := bufio.NewReader(nc)
			head := make([]byte, 5)
			if _, err := io.ReadFull(br, head); err != nil || head[4] != wire.HelloVersionMin {
				o.refused <- head[4]
				nc.Close()
				continue
			}
			if _, _, err := readHello(io.MultiReader(bytes.NewReader(head), br)); err != nil {
				nc.Close()
				continue
			}
			b, _ := wire.AppendHello(nil, wire.Hello{Version: wire.HelloVersionMin, ID: uint64(o.id), Incarnation: 1, MaxFrame: 1 << 20})
			nc.Write(b)
			o.conns <- br
			o.ncs <- nc
		}
	}()
	return o
}

// TestPreviousReleaseIsDialedInVersion2: dialing a member of the previous release, the transport
// is refused in version 3 and dials again in version 2, counting no handshake failure; the
// connection carries frames both ways and is sent no goodbye with an idle timeout of 20 ms.
func TestPreviousReleaseIsDialedInVersion2(t *testing.T) {
	old := startOldAcceptor(t)
	ha := newHost()
	a := start(t, ha, Config{IdleTimeout: 20 * time.Millisecond})
	blob, err := wire.EncodeTCPAddr(old.ln.Addr().String())
	require.NoError(t, err)
	require.NoError(t, a.AddPeer(context.Background(), transport.PeerAddress{ID: old.id, Incarnation: 1, Blob: blob}))

	require.NoError(t, a.Send(ctx(t), old.id, []byte("hi")))
	assert.Equal(t, uint8(wire.HelloVersion), <-old.refused, "the first hello was in the newest version")
	br, nc := <-old.conns, <-old.ncs
	assert.Equal(t, "hi", readRawFrame(t, br, nc))
	writeRawFrame(t, nc, "hello from the old release")
	f := ha.next(t)
	assert.Equal(t, old.id, f.from)
	assert.Equal(t, "hello from the old release", string(f.frame))

	requireSilence(t, nc, 500*time.Millisecond)
	require.NoError(t, a.Send(ctx(t), old.id, []byte("again")))
	assert.Equal(t, "again", readRawFrame(t, br, nc))
	assert.Empty(t, old.refused, "the transport dialed again while its version 2 connection was up")
	assert.Empty(t, allFailures(a))
	assert.Empty(t, ha.downs)
}

// TestBudgetSkipsPreviousRelease: with a budget of one connection, a version 2 connection used
// longest ago counts toward the budget but is skipped: the version 3 one is asked the goodbye
// and closed when its peer agrees, and the version 2 peer is sent nothing and still reached.
func TestBudgetSkipsPreviousRelease(t *testing.T) {
	hb := newHost()
	b := start(t, hb, Config{MaxConnections: 1, IdleTimeout: -1})
	oldNC, oldID, _ := rawPeerAs(t, b, 0x01d, wire.HelloVersionMin)
	writeRawFrame(t, oldNC, "old")
	hb.next(t)
	time.Sleep(3 * inUse) // the old connection is the least recently used
	newNC, _, _ := rawPeerAs(t, b, 0x3e3, wire.HelloVersion)
	writeRawFrame(t, newNC, "new")
	hb.next(t)

	got := make([]byte, 4+9)
	require.NoError(t, newNC.SetReadDeadline(time.Now().Add(wait)))
	_, err := io.ReadFull(newNC, got)
	require.NoError(t, err)
	require.NotZero(t, binary.BigEndian.Uint32(got)&wire.TCPControlBit, "not a control frame: %x", got)
	ctl, err := wire.DecodeTCPControl(got[4:])
	require.NoError(t, err)
	assert.Equal(t, wire.TCPControl{Kind: wire.TCPGoodbye, Frames: 1}, ctl)
	_, err = newNC.Write(wire.AppendTCPControl(nil, wire.TCPControl{Kind: wire.TCPGoodbyeAck}))
	require.NoError(t, err)
	eventuallyTrue(t, "the version 3 connection closed by the budget", func() bool { return closes(b, closeBudget) == 1 && openConns(b) == 1 })

	requireSilence(t, oldNC, 300*time.Millisecond)
	require.NoError(t, b.Send(ctx(t), oldID, []byte("still reached")))
	assert.Equal(t, "still reached", readRawFrame(t, oldNC, oldNC))
	assert.Empty(t, hb.downs)
}

// TestHelloVersionsOutsideTheRangeAreRefused: a hello of version 1 (two releases back) or of a
// version newer than this build's is refused and counted as a version failure.
func TestHelloVersionsOutsideTheRangeAreRefused(t *testing.T) {
	hb := newHost()
	b := start(t, hb, Config{})
	for i, v := range []uint8{wire.HelloVersionMin - 1, wire.HelloVersion + 1} {
		nc, err := net.Dial("tcp", b.Advertised())
		require.NoError(t, err)
		hello, _ := wire.AppendHello(nil, wire.Hello{Version: v, ID: 0x77, Incarnation: 1, MaxFrame: 1 << 20})
		_, err = nc.Write(hello)
		require.NoError(t, err)
		require.NoError(t, nc.SetReadDeadline(time.Now().Add(wait)))
		n, err := nc.Read(make([]byte, 64))
		assert.Error(t, err, "version %d: got %d bytes of answer, want the connection closed", v, n)
		nc.Close()
		waitFailure(t, b, reasonVersion, float64(i+1))
	}
	assert.False(t, b.Reaches(0x77))
}
