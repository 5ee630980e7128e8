package tcp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/velo-go/velo/velo/internal/wire"
)

// FuzzReadHello feeds arbitrary bytes to the hello reader: it must never panic, never read past
// one hello, and fail with a wire error or an I/O error.
func FuzzReadHello(f *testing.F) {
	addr, _ := wire.EncodeTCPAddr("127.0.0.1:9")
	good, _ := wire.AppendHello(nil, wire.Hello{Version: wire.HelloVersion, ID: 3, Incarnation: 4, MaxFrame: 1 << 20, Addr: addr})
	f.Add(good)
	f.Add(good[:10])
	f.Add(append(append([]byte(nil), good[:wire.HelloFixedLen-2]...), 0xff, 0xff))
	f.Add([]byte("SSH-2.0-OpenSSH_9.2\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, _, err := readHello(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			if !errors.Is(err, wire.ErrMalformed) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if h.ID == 0 || h.Version != wire.HelloVersion {
			t.Fatalf("accepted %+v", h)
		}
	})
}

// FuzzReadFrames feeds an arbitrary byte stream to a connection's frame reader over a real
// (in-memory) net.Conn: it must never panic, never deliver a frame above the limit, and deliver
// exactly the complete frames the stream holds, in order.
func FuzzReadFrames(f *testing.F) {
	frame := func(body string) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	f.Add(frame("hello"))
	f.Add(append(frame(""), frame("x")...))
	f.Add(frame(string(make([]byte, 5000)))) // above the fuzz limit
	f.Add([]byte{0, 0, 0, 9, 1, 2})          // truncated
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	const limit = 4096
	f.Fuzz(func(t *testing.T, stream []byte) {
		h := newHost()
		tr := &Transport{cfg: Config{MaxFrameSize: limit, IOTimeout: 5 * time.Second}, host: h,
			log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		p1, p2 := net.Pipe()
		defer p1.Close()
		go func() { p2.Write(stream); p2.Close() }()
		c := &conn{t: tr, nc: p1, peer: 1, br: newFrameReader(p1)}
		err := c.readFrames(nil)
		if err == nil {
			t.Fatal("readFrames returned nil at end of stream")
		}
		// Recompute the expected frames.
		var want [][]byte
		for rest := stream; len(rest) >= 4; {
			n := int(binary.BigEndian.Uint32(rest))
			if n > limit || len(rest)-4 < n {
				break
			}
			want = append(want, rest[4:4+n])
			rest = rest[4+n:]
		}
		if len(h.frames) != len(want) {
			t.Fatalf("delivered %d frames, want %d (err %v)", len(h.frames), len(want), err)
		}
		for _, w := range want {
			got := (<-h.frames).frame
			if !bytes.Equal(got, w) {
				t.Fatalf("frame %q, want %q", got, w)
			}
		}
	})
}
