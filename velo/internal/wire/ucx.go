package wire

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// The UCX transport's layouts: the address blob a peer publishes (in its PeerInfo), the header
// of every active message, and the body of the hello that opens an endpoint.

// UCXBlobVersion is the UCX wire version: the first byte of the address blob. It also fixes the
// frame header layout (since version 2 every header starts with the sender's incarnation), so
// peers on different versions refuse each other's addresses rather than misread every frame.
// Version 3 added the checksum; version 4 the seal after the header (UCXFrameKey), which a
// version-3 receiver would read as a header of the wrong length; version 5 made the seal a GCM
// tag with its nonce counter (24 bytes, where version 4 sent a 16-byte HMAC); version 6 says
// which UCX build the peer runs (UCXBuild), so that two builds that cannot talk never connect.
const UCXBlobVersion = 6

// Address blob, version 6:
//
//	0     version (6)
//	1     flags: bit 0 = serves one-sided reads (RMA); bit 1 = answers vectored guarded GETs
//	      (many reads in one request); bit 2 = answers vectored guarded PUTs (many writes in
//	      one request); other bits are ignored, so a peer of an earlier release
//	      that does not know a bit still takes the address, and is not sent what it cannot answer
//	2     reserved (2 bytes, zero)
//	4     largest frame the instance reads over UCX (uint32)
//	8     incarnation (uint64)
//	16    the linked UCX release: major, minor, patch (one byte each)
//	19    length g of the guard patch set's version (0: a UCX without velo's guard)
//	20    the guard patch set's version ("velo-ucx-guard/2", g bytes of printable ASCII)
//	20+g  worker address length n (uint32)
//	24+g  the UCX worker address (n bytes)
//	24+g+n CRC-32C (Castagnoli) of every byte before it (uint32)
const (
	ucxBlobFixedLen = 24
	ucxBlobCRCLen   = 4
	ucxBlobFlagRMA  = 1 << 0
	ucxBlobFlagGetV = 1 << 1
	ucxBlobFlagPutV = 1 << 2
	// MaxUCXWorkerAddr bounds the worker address; real ones are a few hundred bytes at most.
	MaxUCXWorkerAddr = 64 << 10
	// MaxUCXGuardVersion bounds the guard's version string; today's is 16 bytes.
	MaxUCXGuardVersion = 64
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// UCXBuild names the UCX a peer links: its release and velo's guard patch set, if any. Two
// UCX builds speak each other's wire protocol only within one major.minor release, and the
// guard patch set refuses messages a stock UCX sends as a matter of course, so a pair whose
// builds differ in either never opens a UCX endpoint (UCXBuild.Meets).
type UCXBuild struct {
	Major, Minor, Patch uint8
	// Guard is the guard patch set's version ("velo-ucx-guard/2"); empty for a stock UCX.
	Guard string
}

// String is "1.22.0 with velo-ucx-guard/2" or "1.13.1 (stock)".
func (b UCXBuild) String() string {
	rel := fmt.Sprintf("%d.%d.%d", b.Major, b.Minor, b.Patch)
	if b.Guard == "" {
		return rel + " (stock)"
	}
	return rel + " with " + b.Guard
}

// Meets reports whether a UCX of build b can open an endpoint to one of build o: the same
// major.minor release (patch releases keep the wire protocol) and the same guard.
func (b UCXBuild) Meets(o UCXBuild) bool {
	return b.Major == o.Major && b.Minor == o.Minor && b.Guard == o.Guard
}

// UCXBlob is a decoded address blob.
type UCXBlob struct {
	Version byte
	RMA     bool
	// VectoredGet: the peer's engine answers vectored guarded GETs (ucx.ConnectOptions).
	VectoredGet bool
	// VectoredPut: the peer's engine answers vectored guarded PUTs (ucx.ConnectOptions).
	VectoredPut bool
	MaxFrame    int
	Incarnation uint64
	// Build is the UCX the peer links.
	Build  UCXBuild
	Worker []byte // aliases the input
}

// AppendUCXBlob appends b's encoding (version UCXBlobVersion) to dst. A guard version longer
// than MaxUCXGuardVersion is cut to it (no real one comes near).
func AppendUCXBlob(dst []byte, b UCXBlob) []byte {
	var flags byte
	if b.RMA {
		flags |= ucxBlobFlagRMA
	}
	if b.VectoredGet {
		flags |= ucxBlobFlagGetV
	}
	if b.VectoredPut {
		flags |= ucxBlobFlagPutV
	}
	guard := b.Build.Guard
	if len(guard) > MaxUCXGuardVersion {
		guard = guard[:MaxUCXGuardVersion]
	}
	start := len(dst)
	dst = append(dst, UCXBlobVersion, flags, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(b.MaxFrame))
	dst = binary.BigEndian.AppendUint64(dst, b.Incarnation)
	dst = append(dst, b.Build.Major, b.Build.Minor, b.Build.Patch, byte(len(guard)))
	dst = append(dst, guard...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b.Worker)))
	dst = append(dst, b.Worker...)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// DecodeUCXBlob checks and decodes an address blob. Every error wraps ErrMalformed; a blob of
// another version also wraps ErrVersion, and the returned blob then carries that version.
func DecodeUCXBlob(b []byte) (UCXBlob, error) {
	bad := func(format string, args ...any) (UCXBlob, error) {
		return UCXBlob{}, fmt.Errorf("%w: ucx address blob: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	if len(b) == 0 {
		return bad("empty (the peer published no UCX address)")
	}
	if b[0] != UCXBlobVersion {
		return UCXBlob{Version: b[0]}, fmt.Errorf("%w: %w: ucx blob version %d (expected %d): upgrade all UCX peers together",
			ErrMalformed, ErrVersion, b[0], UCXBlobVersion)
	}
	if len(b) < ucxBlobFixedLen+ucxBlobCRCLen {
		return bad("%d bytes is shorter than the %d-byte fixed part and checksum", len(b), ucxBlobFixedLen+ucxBlobCRCLen)
	}
	g := int(b[19])
	if g > MaxUCXGuardVersion {
		return bad("guard version of %d bytes is longer than %d", g, MaxUCXGuardVersion)
	}
	if len(b) < ucxBlobFixedLen+g+ucxBlobCRCLen {
		return bad("%d bytes is shorter than the fixed part, a %d-byte guard version and the checksum", len(b), g)
	}
	guard := b[20 : 20+g]
	for _, c := range guard {
		if c < 0x21 || c > 0x7e {
			return bad("guard version %q is not printable ASCII", guard)
		}
	}
	n := binary.BigEndian.Uint32(b[20+g:])
	if n == 0 || n > MaxUCXWorkerAddr {
		return bad("worker address length %d is outside 1..%d", n, MaxUCXWorkerAddr)
	}
	if uint64(len(b)-ucxBlobFixedLen-g-ucxBlobCRCLen) != uint64(n) {
		return bad("worker address length %d, but %d bytes follow (truncated, or extended on its way)", n, len(b)-ucxBlobFixedLen-g-ucxBlobCRCLen)
	}
	body, sum := b[:len(b)-ucxBlobCRCLen], binary.BigEndian.Uint32(b[len(b)-ucxBlobCRCLen:])
	if crc32.Checksum(body, castagnoli) != sum {
		return bad("checksum mismatch: the address was damaged on its way (fetch the peer's PeerInfo again)")
	}
	if b[2] != 0 || b[3] != 0 {
		return bad("reserved bytes are set")
	}
	return UCXBlob{
		Version:     b[0],
		RMA:         b[1]&ucxBlobFlagRMA != 0,
		VectoredGet: b[1]&ucxBlobFlagGetV != 0,
		VectoredPut: b[1]&ucxBlobFlagPutV != 0,
		MaxFrame:    int(binary.BigEndian.Uint32(b[4:])),
		Incarnation: binary.BigEndian.Uint64(b[8:]),
		Build:       UCXBuild{Major: b[16], Minor: b[17], Patch: b[18], Guard: string(guard)},
		Worker:      body[ucxBlobFixedLen+g:],
	}, nil
}

// UCX frame header (wire version 6, the same as 5), the header of every active message the UCX transport
// sends; the runtime's frame is the message's payload, untouched.
//
//	0  sender's incarnation (uint64): first, so a receiver (and its idle reaper) can tell
//	   which incarnation of a peer sent the frame before it reads anything else
//	8  sender's instance ID (uint64)
//	16 kind: 0 data, 1 hello, 2 fin
//	17 flags: on a fin, UCXFinAsk and UCXFinBye; zero otherwise
//	18 header flags: bit 0 (UCXHeaderSealed) says a seal follows; other bits zero
//	19 reserved (zero)
//	20 epoch (uint32): the sender's endpoint the frame travels on, unique per sender
//	24 seq (uint64): data frames count 1, 2, 3 … per epoch; a fin carries the last data seq
//	   of its epoch; a hello carries the last data seq of the previous epoch
//	32 seal (UCXSealLen bytes: nonce counter, tag), on a sealed data frame or fin only (see
//	   UCXFrameKey)
//
// A transport whose runtime has no credentials sends the 32 bytes alone, as in version 3.
const UCXHeaderLen = 32

// UCXSealedHeaderLen is the length of a sealed frame's header: the fixed part and the seal.
const UCXSealedHeaderLen = UCXHeaderLen + UCXSealLen

// UCXHeaderSealed is the header-flags bit of a sealed frame.
const UCXHeaderSealed = 1 << 0

// Fin flags. UCXFinAsk marks a retirement the sender started itself (idle reaper, RemovePeer),
// which the receiver answers with its own fin; an answer does not carry it, so two busy peers do
// not retire each other's fresh endpoints back and forth. UCXFinBye marks the fin a closing
// transport sends to each peer: the end of its endpoints is a departure, not a failure.
const (
	UCXFinAsk = 1 << 0
	UCXFinBye = 1 << 1
)

// UCXKind is a frame's kind.
type UCXKind uint8

// The frame kinds.
const (
	UCXData  UCXKind = 0
	UCXHello UCXKind = 1
	UCXFin   UCXKind = 2
)

func (k UCXKind) String() string {
	switch k {
	case UCXData:
		return "data"
	case UCXHello:
		return "hello"
	case UCXFin:
		return "fin"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// UCXHeader is a decoded frame header.
type UCXHeader struct {
	Incarnation uint64
	Sender      uint64
	Kind        UCXKind
	Flags       byte
	// Sealed: a seal follows the fixed part. Decoding says whether one is there; it does not
	// check it (UCXFrameKey.Open does).
	Sealed bool
	Epoch  uint32
	Seq    uint64
}

// AppendUCXHeader appends the fixed part of h's encoding to dst: all of an unsealed header;
// a sealed one is written by UCXFrameKey.Seal, which appends the seal behind it.
func AppendUCXHeader(dst []byte, h UCXHeader) []byte {
	var hflags byte
	if h.Sealed {
		hflags = UCXHeaderSealed
	}
	dst = binary.BigEndian.AppendUint64(dst, h.Incarnation)
	dst = binary.BigEndian.AppendUint64(dst, h.Sender)
	dst = append(dst, byte(h.Kind), h.Flags, hflags, 0)
	dst = binary.BigEndian.AppendUint32(dst, h.Epoch)
	return binary.BigEndian.AppendUint64(dst, h.Seq)
}

// DecodeUCXHeader checks and decodes a frame header, sealed (UCXSealedHeaderLen bytes, the
// seal not checked) or not (UCXHeaderLen bytes); every error wraps ErrMalformed.
func DecodeUCXHeader(b []byte) (UCXHeader, error) {
	if len(b) < UCXHeaderLen {
		return UCXHeader{}, fmt.Errorf("%w: ucx header of %d bytes, want %d or %d (a peer on another wire version?)", ErrMalformed, len(b), UCXHeaderLen, UCXSealedHeaderLen)
	}
	h := UCXHeader{
		Incarnation: binary.BigEndian.Uint64(b),
		Sender:      binary.BigEndian.Uint64(b[8:]),
		Kind:        UCXKind(b[16]),
		Flags:       b[17],
		Sealed:      b[18]&UCXHeaderSealed != 0,
		Epoch:       binary.BigEndian.Uint32(b[20:]),
		Seq:         binary.BigEndian.Uint64(b[24:]),
	}
	bad := func(format string, args ...any) (UCXHeader, error) {
		return UCXHeader{}, fmt.Errorf("%w: ucx header: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	want, what := UCXHeaderLen, "without"
	if h.Sealed {
		want, what = UCXSealedHeaderLen, "with"
	}
	switch {
	case len(b) != want:
		return bad("%d bytes, want %d for a header %s a seal (a peer on another wire version?)", len(b), want, what)
	case h.Kind > UCXFin:
		return bad("unknown kind %d", b[16])
	case b[18]&^UCXHeaderSealed != 0 || b[19] != 0:
		return bad("reserved header bytes are set")
	case h.Sealed && h.Kind == UCXHello:
		return bad("a sealed hello (a hello is proven by its body, not sealed)")
	case h.Flags&^(UCXFinAsk|UCXFinBye) != 0 || (h.Flags != 0 && h.Kind != UCXFin):
		return bad("flags %#x on a %s frame", h.Flags, h.Kind)
	case h.Sender == 0:
		return bad("sender instance ID 0")
	case h.Epoch == 0:
		return bad("epoch 0")
	case h.Kind == UCXData && h.Seq == 0:
		return bad("data frame with seq 0")
	}
	return h, nil
}

// A hello is the first message on every endpoint. Its body is the previous epoch (uint32, 0 for
// none) and then the sender's address blob, so a receiver learns the sender's limits and how to
// answer it, and which epoch must finish before this one may be delivered. On a transport whose
// runtime authenticates its peers, a proof of UCXHelloProofLen bytes sits between the two: an
// HMAC under the session key of the control plane's handshake with the receiver, over
// UCXHelloProofMsg, so a hello cannot be sent in another peer's name nor replayed to another
// receiver or another incarnation of this one.
const UCXHelloProofLen = 32

// AppendUCXHelloBody appends a hello body without proof.
func AppendUCXHelloBody(dst []byte, prevEpoch uint32, blob []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, prevEpoch)
	return append(dst, blob...)
}

// DecodeUCXHelloBody decodes a hello body without proof; errors wrap ErrMalformed (and
// ErrVersion for a blob of another version).
func DecodeUCXHelloBody(b []byte) (prevEpoch uint32, blob UCXBlob, err error) {
	if len(b) < 4 {
		return 0, UCXBlob{}, fmt.Errorf("%w: ucx hello of %d bytes", ErrMalformed, len(b))
	}
	blob, err = DecodeUCXBlob(b[4:])
	return binary.BigEndian.Uint32(b), blob, err
}

// UCXHelloProofMsg is what a hello's proof signs: the frame header, the body without the proof,
// and the receiver's instance ID and incarnation.
func UCXHelloProofMsg(hdr, body []byte, receiver, receiverInc uint64) []byte {
	msg := make([]byte, 0, len(hdr)+len(body)+16)
	msg = append(append(msg, hdr...), body...)
	msg = binary.BigEndian.AppendUint64(msg, receiver)
	return binary.BigEndian.AppendUint64(msg, receiverInc)
}

// InsertUCXHelloProof puts proof after the body's previous epoch.
func InsertUCXHelloProof(body, proof []byte) []byte {
	out := make([]byte, 0, len(body)+len(proof))
	return append(append(append(out, body[:4]...), proof...), body[4:]...)
}

// SplitUCXHelloProof takes the proof out of a hello body; the body returned is a copy.
func SplitUCXHelloProof(b []byte) (body, proof []byte, err error) {
	if len(b) < 4+UCXHelloProofLen {
		return nil, nil, fmt.Errorf("%w: ucx hello of %d bytes has no room for its proof", ErrMalformed, len(b))
	}
	body = append(append(make([]byte, 0, len(b)-UCXHelloProofLen), b[:4]...), b[4+UCXHelloProofLen:]...)
	return body, b[4 : 4+UCXHelloProofLen], nil
}
