package ucx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/velo-go/velo/velo/transport"
)

// BlobVersion is the UCX wire version this build speaks. It is the first byte of the address
// blob, and it also fixes the frame header layout (since version 2 every frame header starts with
// the sender's 8-byte incarnation). A peer on another version would misread every frame, so the
// two refuse each other at AddPeer instead. Version 3 added the checksum: a blob damaged on its
// way (a file, a key-value store, a message) is refused rather than half used.
const BlobVersion = 3

// Address blob, version 3 (big-endian, like every velo wire layout):
//
//	0     version (3)
//	1     flags: bit 0 = serves one-sided reads (RMA); other bits are ignored
//	2     reserved (2 bytes, zero)
//	4     largest frame the instance reads over UCX (uint32)
//	8     incarnation (uint64)
//	16    worker address length n (uint32)
//	20    the UCX worker address (n bytes)
//	20+n  CRC-32C (Castagnoli) of bytes [0, 20+n) (uint32)
const (
	blobFixedLen  = 20
	blobCRCLen    = 4
	blobFlagRMA   = 1 << 0
	maxWorkerAddr = 64 << 10 // real worker addresses are a few hundred bytes at most
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errBlobVersion is wrapped by decodeBlob when the version byte is not BlobVersion; AddPeer
// logs the rejection line for it.
var errBlobVersion = errors.New("unsupported ucx blob version")

// peerBlob is a decoded address blob.
type peerBlob struct {
	Version     byte
	RMA         bool
	MaxFrame    int
	Incarnation uint64
	Worker      []byte // aliases the input
}

func appendBlob(dst []byte, b peerBlob) []byte {
	var flags byte
	if b.RMA {
		flags |= blobFlagRMA
	}
	start := len(dst)
	dst = append(dst, BlobVersion, flags, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(b.MaxFrame))
	dst = binary.BigEndian.AppendUint64(dst, b.Incarnation)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b.Worker)))
	dst = append(dst, b.Worker...)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// decodeBlob checks and decodes an address blob. Every error wraps transport.ErrInvalidEndpoint;
// a blob of another version also wraps errBlobVersion and says which version it carries.
func decodeBlob(b []byte) (peerBlob, error) {
	bad := func(format string, args ...any) (peerBlob, error) {
		return peerBlob{}, fmt.Errorf("ucx: %w: address blob: %s", transport.ErrInvalidEndpoint, fmt.Sprintf(format, args...))
	}
	if len(b) == 0 {
		return bad("empty (the peer published no UCX address)")
	}
	if b[0] != BlobVersion {
		return peerBlob{Version: b[0]}, fmt.Errorf("ucx: %w: %w %d (expected %d): upgrade all UCX peers together",
			transport.ErrInvalidEndpoint, errBlobVersion, b[0], BlobVersion)
	}
	if len(b) < blobFixedLen+blobCRCLen {
		return bad("%d bytes is shorter than the %d-byte fixed part and checksum", len(b), blobFixedLen+blobCRCLen)
	}
	n := binary.BigEndian.Uint32(b[16:])
	if n == 0 || n > maxWorkerAddr {
		return bad("worker address length %d is outside 1..%d", n, maxWorkerAddr)
	}
	if uint64(len(b)-blobFixedLen-blobCRCLen) != uint64(n) {
		return bad("worker address length %d, but %d bytes follow (truncated, or extended on its way)", n, len(b)-blobFixedLen-blobCRCLen)
	}
	body, sum := b[:len(b)-blobCRCLen], binary.BigEndian.Uint32(b[len(b)-blobCRCLen:])
	if crc32.Checksum(body, castagnoli) != sum {
		return bad("checksum mismatch: the address was damaged on its way (fetch the peer's PeerInfo again)")
	}
	if b[2] != 0 || b[3] != 0 {
		return bad("reserved bytes are set")
	}
	p := peerBlob{
		Version:     b[0],
		RMA:         b[1]&blobFlagRMA != 0,
		MaxFrame:    int(binary.BigEndian.Uint32(b[4:])),
		Incarnation: binary.BigEndian.Uint64(b[8:]),
		Worker:      body[blobFixedLen:],
	}
	if p.MaxFrame < MinEagerMax {
		return bad("largest frame %d is below the minimum of %d", p.MaxFrame, MinEagerMax)
	}
	return p, nil
}

// Frame header (wire version 2 and later): the header of every active message this transport sends
// (big-endian). The runtime's frame is the message's payload, untouched.
//
//	0  sender's incarnation (uint64): first, so a receiver (and its idle reaper) can tell
//	   which incarnation of a peer sent the frame before it reads anything else
//	8  sender's instance ID (uint64)
//	16 kind: 0 data, 1 hello, 2 fin
//	17 flags: on a fin, bit 0 (finAsk) asks the receiver to retire its endpoint to the sender
//	   too, and bit 1 (finBye) says the sender's transport is closing; zero otherwise
//	18 reserved (2 bytes, zero)
//	20 epoch (uint32): the sender's endpoint the frame travels on, unique per sender
//	24 seq (uint64): data frames count 1, 2, 3 … per epoch; a fin carries the last data seq
//	   of its epoch; a hello carries the last data seq of the previous epoch
//
// A hello is the first message on every endpoint: its payload is the previous epoch (uint32,
// 0 for none) followed by the sender's address blob, so a receiver learns the sender's limits
// and how to answer it, and knows which epoch must finish before this one may be delivered. A
// fin is the last message on an endpoint the sender retires; it has no payload.
const frameHeaderLen = 32

// finAsk is the fin flag of a retirement the sender started itself (idle reaper, RemovePeer), as
// opposed to one that answers the peer's fin; only the former is answered, so two busy peers do
// not retire each other's fresh endpoints back and forth.
const finAsk = 1 << 0

// finBye marks the fin a closing transport sends on its current endpoint to each peer (with
// finAsk). The receiver learns that the end of the sender's endpoints which follows is a departure,
// not a failure: it reports the peer down at once, without a warning, and sends to it fail fast.
const finBye = 1 << 1

type frameKind uint8

const (
	kindData  frameKind = 0
	kindHello frameKind = 1
	kindFin   frameKind = 2
)

func (k frameKind) String() string {
	switch k {
	case kindData:
		return "data"
	case kindHello:
		return "hello"
	case kindFin:
		return "fin"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

type frameHeader struct {
	Incarnation uint64
	Sender      transport.InstanceID
	Kind        frameKind
	Flags       byte
	Epoch       uint32
	Seq         uint64
}

var errMalformedFrame = errors.New("malformed ucx frame")

func appendHeader(dst []byte, h frameHeader) []byte {
	dst = binary.BigEndian.AppendUint64(dst, h.Incarnation)
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.Sender))
	dst = append(dst, byte(h.Kind), h.Flags, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, h.Epoch)
	return binary.BigEndian.AppendUint64(dst, h.Seq)
}

func decodeHeader(b []byte) (frameHeader, error) {
	if len(b) != frameHeaderLen {
		return frameHeader{}, fmt.Errorf("%w: header of %d bytes, want %d (a peer on another wire version?)", errMalformedFrame, len(b), frameHeaderLen)
	}
	h := frameHeader{
		Incarnation: binary.BigEndian.Uint64(b),
		Sender:      transport.InstanceID(binary.BigEndian.Uint64(b[8:])),
		Kind:        frameKind(b[16]),
		Flags:       b[17],
		Epoch:       binary.BigEndian.Uint32(b[20:]),
		Seq:         binary.BigEndian.Uint64(b[24:]),
	}
	switch {
	case h.Kind > kindFin:
		return frameHeader{}, fmt.Errorf("%w: unknown kind %d", errMalformedFrame, b[16])
	case b[18] != 0 || b[19] != 0:
		return frameHeader{}, fmt.Errorf("%w: reserved header bytes are set", errMalformedFrame)
	case h.Flags&^(finAsk|finBye) != 0 || (h.Flags != 0 && h.Kind != kindFin):
		return frameHeader{}, fmt.Errorf("%w: flags %#x on a %s frame", errMalformedFrame, h.Flags, h.Kind)
	case h.Sender == 0:
		return frameHeader{}, fmt.Errorf("%w: sender instance ID 0", errMalformedFrame)
	case h.Epoch == 0:
		return frameHeader{}, fmt.Errorf("%w: epoch 0", errMalformedFrame)
	case h.Kind == kindData && h.Seq == 0:
		return frameHeader{}, fmt.Errorf("%w: data frame with seq 0", errMalformedFrame)
	}
	return h, nil
}

// appendHelloBody is a hello's payload: the previous epoch and the sender's address blob.
func appendHelloBody(dst []byte, prevEpoch uint32, blob []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, prevEpoch)
	return append(dst, blob...)
}

func decodeHelloBody(b []byte) (prevEpoch uint32, blob peerBlob, err error) {
	if len(b) < 4 {
		return 0, peerBlob{}, fmt.Errorf("%w: hello of %d bytes", errMalformedFrame, len(b))
	}
	blob, err = decodeBlob(b[4:])
	return binary.BigEndian.Uint32(b), blob, err
}

// A hello on a transport whose runtime authenticates its peers carries a proof after the previous
// epoch: prevEpoch (4) | proof (helloProofLen) | blob. The proof is an HMAC, under the session key
// of the control plane's handshake with the receiver, over helloProofMsg: the frame header, the
// body without the proof, and the receiver's instance ID and incarnation, so a hello cannot be
// sent in another peer's name, nor replayed to another receiver or another incarnation of this
// one.
const helloProofLen = 32

func helloProofMsg(hdr, body []byte, receiver transport.InstanceID, receiverInc uint64) []byte {
	msg := make([]byte, 0, len(hdr)+len(body)+16)
	msg = append(append(msg, hdr...), body...)
	msg = binary.BigEndian.AppendUint64(msg, uint64(receiver))
	return binary.BigEndian.AppendUint64(msg, receiverInc)
}

// insertHelloProof puts proof after the body's previous epoch.
func insertHelloProof(body, proof []byte) []byte {
	out := make([]byte, 0, len(body)+len(proof))
	out = append(append(append(out, body[:4]...), proof...), body[4:]...)
	return out
}

// splitHelloProof takes the proof out of a hello body.
func splitHelloProof(b []byte) (body, proof []byte, err error) {
	if len(b) < 4+helloProofLen {
		return nil, nil, fmt.Errorf("%w: hello of %d bytes has no room for its proof", errMalformedFrame, len(b))
	}
	body = append(append(make([]byte, 0, len(b)-helloProofLen), b[:4]...), b[4+helloProofLen:]...)
	return body, b[4 : 4+helloProofLen], nil
}
