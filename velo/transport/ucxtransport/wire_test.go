package ucxtransport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/velo-go/velo/velo/transport"
)

// Where the blob layout (velo/internal/wire/ucx.go) puts what these tests damage on purpose.
const (
	blobFixedLen = 24 // the fixed part of a blob whose guard version is empty
	blobCRCLen   = 4
	blobFlagRMA  = 1 << 0
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func TestBlobRoundTrip(t *testing.T) {
	in := peerBlob{RMA: true, MaxFrame: 1 << 20, Incarnation: 0x0102030405060708, Worker: []byte("worker-address")}
	b := appendBlob(nil, in)
	if b[0] != BlobVersion {
		t.Fatalf("version byte %d", b[0])
	}
	out, err := decodeBlob(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Version != BlobVersion || !out.RMA || out.MaxFrame != in.MaxFrame || out.Incarnation != in.Incarnation || !bytes.Equal(out.Worker, in.Worker) {
		t.Fatalf("decoded %+v from %+v", out, in)
	}
	// Unknown flag bits are ignored (room for later capabilities), the RMA bit is read.
	b = appendBlob(nil, peerBlob{MaxFrame: in.MaxFrame, Incarnation: in.Incarnation, Worker: in.Worker})
	b[1] = 0xfe
	fixCRC(b)
	if out, err := decodeBlob(b); err != nil || out.RMA {
		t.Fatalf("flags 0xfe: %+v %v", out, err)
	}
}

// fixCRC rewrites a blob's checksum after a test changed its bytes on purpose.
func fixCRC(b []byte) {
	binary.BigEndian.PutUint32(b[len(b)-blobCRCLen:], crc32.Checksum(b[:len(b)-blobCRCLen], castagnoli))
}

func TestBlobRefusals(t *testing.T) {
	good := appendBlob(nil, peerBlob{MaxFrame: MinEagerMax, Incarnation: 9, Worker: []byte{1, 2, 3}})
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for name, c := range map[string]struct {
		blob    []byte
		version bool
	}{
		"empty":            {nil, false},
		"version 1":        {mut(func(b []byte) []byte { b[0] = 1; return b }), true},
		"version 0 short":  {[]byte{0}, true},
		"current, short":   {good[:blobFixedLen-1], false},
		"version 2":        {mut(func(b []byte) []byte { b[0] = 2; return b }), true},
		"checksum":         {mut(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), false},
		"worker byte":      {mut(func(b []byte) []byte { b[blobFixedLen] ^= 0x40; return b }), false},
		"flags flipped":    {mut(func(b []byte) []byte { b[1] ^= blobFlagRMA; return b }), false},
		"incarnation":      {mut(func(b []byte) []byte { b[9] ^= 1; return b }), false},
		"reserved set":     {mut(func(b []byte) []byte { b[3] = 1; fixCRC(b); return b }), false},
		"frame too small":  {mut(func(b []byte) []byte { b[4], b[5], b[6], b[7] = 0, 0, 0, 1; fixCRC(b); return b }), false},
		"zero address":     {appendBlob(nil, peerBlob{MaxFrame: MinEagerMax, Incarnation: 9}), false},
		"address overrun":  {good[:len(good)-1], false},
		"trailing garbage": {append(append([]byte(nil), good...), 0), false},
	} {
		_, err := decodeBlob(c.blob)
		if !errors.Is(err, transport.ErrInvalidEndpoint) {
			t.Errorf("%s: %v does not wrap ErrInvalidEndpoint", name, err)
		}
		if errors.Is(err, errBlobVersion) != c.version {
			t.Errorf("%s: version error %t, want %t (%v)", name, !c.version, c.version, err)
		}
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []frameHeader{
		{Incarnation: 1, Sender: 2, Kind: kindData, Epoch: 3, Seq: 4},
		{Incarnation: ^uint64(0), Sender: ^transport.InstanceID(0), Kind: kindHello, Epoch: ^uint32(0), Seq: 0},
		{Incarnation: 5, Sender: 6, Kind: kindFin, Epoch: 7, Seq: 0},
	} {
		b := appendHeader(nil, h)
		if len(b) != frameHeaderLen {
			t.Fatalf("header of %d bytes", len(b))
		}
		got, err := decodeHeader(b)
		if err != nil || got != h {
			t.Fatalf("%+v -> %+v, %v", h, got, err)
		}
	}
	// The incarnation leads, as wire version 2 promises.
	b := appendHeader(nil, frameHeader{Incarnation: 0x1122334455667788, Sender: 1, Epoch: 1, Seq: 1})
	if !bytes.Equal(b[:8], []byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}) {
		t.Fatalf("header does not start with the incarnation: %x", b[:8])
	}
}

func TestHeaderRefusals(t *testing.T) {
	good := appendHeader(nil, frameHeader{Incarnation: 1, Sender: 2, Kind: kindData, Epoch: 3, Seq: 4})
	mut := func(i int, v byte) []byte { b := append([]byte(nil), good...); b[i] = v; return b }
	for name, b := range map[string][]byte{
		"short":        good[:frameHeaderLen-1],
		"long":         append(append([]byte(nil), good...), 0),
		"unknown kind": mut(16, 3),
		"flags":        mut(17, 1),
		"fin flag 2":   appendHeader(nil, frameHeader{Incarnation: 1, Sender: 2, Kind: kindFin, Flags: 1 << 2, Epoch: 3}),
		"reserved":     mut(19, 1),
		"header flag":  mut(18, 2),
		"no seal":      mut(18, 1), // says sealed, 32 bytes
		"sender 0":     appendHeader(nil, frameHeader{Incarnation: 1, Kind: kindData, Epoch: 3, Seq: 4}),
		"epoch 0":      appendHeader(nil, frameHeader{Incarnation: 1, Sender: 2, Kind: kindData, Seq: 4}),
		"data seq 0":   appendHeader(nil, frameHeader{Incarnation: 1, Sender: 2, Kind: kindData, Epoch: 3}),
	} {
		if _, err := decodeHeader(b); !errors.Is(err, errMalformedFrame) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A goodbye fin carries both flags.
	bye := frameHeader{Incarnation: 1, Sender: 2, Kind: kindFin, Flags: finAsk | finBye, Epoch: 3, Seq: 9}
	if h, err := decodeHeader(appendHeader(nil, bye)); err != nil || h != bye {
		t.Errorf("goodbye fin: %+v %v", h, err)
	}
}

func TestHelloBody(t *testing.T) {
	blob := appendBlob(nil, peerBlob{RMA: true, MaxFrame: MinEagerMax, Incarnation: 3, Worker: []byte{9}})
	prev, b, err := decodeHelloBody(appendHelloBody(nil, 77, blob))
	if err != nil || prev != 77 || b.Incarnation != 3 {
		t.Fatalf("prev %d blob %+v err %v", prev, b, err)
	}
	if _, _, err := decodeHelloBody([]byte{0, 0, 1}); !errors.Is(err, errMalformedFrame) {
		t.Fatalf("short hello: %v", err)
	}
	if _, _, err := decodeHelloBody([]byte{0, 0, 0, 1, 1}); !errors.Is(err, errBlobVersion) {
		t.Fatalf("hello with a version-1 blob: %v", err)
	}
}
