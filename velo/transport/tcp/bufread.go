package tcp

import (
	"io"
	"sync"
)

// Read buffers.
//
// A connection's reader spends most of its life waiting for the next frame, and an instance of a
// large cluster holds connections to many peers that are quiet most of the time. A 64 KiB buffer
// per connection, held for its whole life, was the largest part of what an idle peer cost. So a
// connection waits for the start of a frame with a small buffer of its own, and takes a large one
// from a pool shared by all connections only to read on once bytes flow: the large buffer goes back
// to the pool the next time the connection has read everything that arrived. A burst of small
// frames still costs one read system call per 64 KiB; a quiet connection holds smallReadBuffer
// bytes.

const (
	smallReadBuffer = 512
	largeReadBuffer = 64 << 10
)

var largeBuffers = sync.Pool{New: func() any { b := make([]byte, largeReadBuffer); return &b }}

// frameReader is a buffered reader of one connection: Peek(1), Buffered and Read, as bufio's, with
// the two buffers above. It is used by one goroutine at a time (the connection's reader).
type frameReader struct {
	rd    io.Reader
	buf   []byte // small[:] or *large
	r, w  int    // buf[r:w] is unread
	large *[]byte
	err   error // a read error not yet returned
	small [smallReadBuffer]byte
}

func newFrameReader(rd io.Reader) *frameReader {
	b := &frameReader{rd: rd}
	b.buf = b.small[:]
	return b
}

// Buffered is the number of bytes read from the connection and not yet from b.
func (b *frameReader) Buffered() int { return b.w - b.r }

// Peek waits until n bytes (n <= smallReadBuffer) are buffered and returns them. With nothing
// buffered it reads into the small buffer and gives the large one back: this is where a
// connection waits for its next frame.
func (b *frameReader) Peek(n int) ([]byte, error) {
	if b.r == b.w {
		b.r, b.w = 0, 0
		b.release()
	}
	for b.w-b.r < n {
		if b.w == len(b.buf) {
			b.w = copy(b.buf, b.buf[b.r:b.w])
			b.r = 0
		}
		if err := b.fill(); err != nil {
			return b.buf[b.r:b.w], err
		}
	}
	return b.buf[b.r : b.r+n], nil
}

// Read reads what is buffered into p, or, with nothing buffered, reads the connection: straight
// into p when p is at least as large as the large buffer, into the large buffer otherwise.
func (b *frameReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.r == b.w {
		if b.err != nil {
			err := b.err
			b.err = nil
			return 0, err
		}
		if len(p) >= largeReadBuffer {
			return b.rd.Read(p)
		}
		b.r, b.w = 0, 0
		if b.large == nil {
			b.large = largeBuffers.Get().(*[]byte)
			b.buf = *b.large
		}
		if err := b.fill(); err != nil && b.r == b.w {
			b.err = nil
			return 0, err
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	return n, nil
}

// fill reads once into buf[w:], retrying reads that return nothing; an error is kept in b.err
// and returned.
func (b *frameReader) fill() error {
	if b.err != nil {
		err := b.err
		b.err = nil
		return err
	}
	for range 100 {
		n, err := b.rd.Read(b.buf[b.w:])
		b.w += n
		if err != nil {
			if n > 0 {
				b.err = err // returned once the bytes read are consumed
				return nil
			}
			return err
		}
		if n > 0 {
			return nil
		}
	}
	return io.ErrNoProgress
}

// release moves b back to its small buffer; b holds no unread bytes.
func (b *frameReader) release() {
	if b.large != nil {
		largeBuffers.Put(b.large)
		b.large = nil
		b.buf = b.small[:]
	}
}
