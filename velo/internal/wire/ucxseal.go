package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"
)

// Sealed UCX frames (wire version 4).
//
// UCX has no authentication of its own, and a UCX receiver cannot tell which remote endpoint a
// message came from: anything a frame header says (sender, incarnation, epoch, seq) is what the
// sender chose to write. With credentials configured, the hello that opens an endpoint is proven
// with the control plane's session key (UCXHelloProofMsg), and every later frame on that endpoint
// — data and fin — carries a seal: HMAC-SHA256, truncated to UCXSealLen bytes, under a key of
// that one endpoint and direction, over
//
//	"velo-ucx-seal-v1\x00"  domain label
//	receiver ID, receiver incarnation (uint64 each)
//	the header's fixed part (UCXHeaderLen bytes: sender, its incarnation, kind, flags, epoch, seq)
//	the payload
//
// The key is derived by the runtime from the session key that made the hello's proof, over the
// hello itself (auth.HelloKey), so only the two sides of that session know it, and it is a
// different key for each endpoint and each direction. The header's fields and the receiver's
// identity are in the MAC input as well, so a sealed frame cannot be moved to another seq,
// epoch, sender or receiver, nor reflected back to its sender, even under a key that was
// wrongly shared. A frame replayed verbatim is still a valid frame of its endpoint; the
// receiver's sequence state drops it as a duplicate.
//
// Why 16 bytes: a forger must guess the tag, and every guess is one message the receiver drops
// and counts; 2^-128 per guess is far beyond reach (the truncation RFC 4868 uses for
// HMAC-SHA256 in IPsec), and a frame carries 16 bytes less than with the full 32.

// UCXSealLen is the length of a frame's seal.
const UCXSealLen = 16

// MinUCXFrameKeyLen is the shortest key NewUCXFrameKey accepts.
const MinUCXFrameKeyLen = 32

// ErrUCXSeal is wrapped by UCXFrameKey.Open when a frame's seal does not prove it: missing,
// made under another key, or over other bytes than those that arrived.
var ErrUCXSeal = errors.New("ucx frame seal does not prove the sender")

// The seal's refusals, made once: a receiver under a flood of forged frames allocates nothing
// to refuse them.
var (
	errSealMissing  = fmt.Errorf("%w: the frame carries no seal (a peer without credentials, or a forgery)", ErrUCXSeal)
	errSealEndpoint = fmt.Errorf("%w: the header names another sender, incarnation or epoch than the key's endpoint", ErrUCXSeal)
	errSealMismatch = fmt.Errorf("%w: the seal does not match the frame (forged, damaged, or under another session's key)", ErrUCXSeal)
)

const ucxSealDomain = "velo-ucx-seal-v1\x00"

// UCXEndpoint names what one frame key seals: the frames one sender incarnation sends to one
// receiver incarnation on one of its endpoints (the epoch).
type UCXEndpoint struct {
	Sender, SenderInc     uint64
	Receiver, ReceiverInc uint64
	Epoch                 uint32
}

// UCXFrameKey seals (sender side) or opens (receiver side) the frames of one endpoint in one
// direction. It keeps its HMAC state and scratch space, so sealing and opening allocate
// nothing; it is safe for concurrent use (one at a time).
type UCXFrameKey struct {
	ep UCXEndpoint

	mu  sync.Mutex
	mac hash.Hash
	pre [len(ucxSealDomain) + 16]byte // domain, receiver, receiver incarnation
	hdr [UCXHeaderLen]byte
	sum [sha256.Size]byte
}

// NewUCXFrameKey returns the sealer of ep's frames under key (at least MinUCXFrameKeyLen
// bytes). The key is copied.
func NewUCXFrameKey(key []byte, ep UCXEndpoint) (*UCXFrameKey, error) {
	if len(key) < MinUCXFrameKeyLen {
		return nil, fmt.Errorf("wire: ucx frame key of %d bytes: it needs at least %d (derive it with auth.HelloKey)", len(key), MinUCXFrameKeyLen)
	}
	if ep.Sender == 0 || ep.Receiver == 0 || ep.Epoch == 0 {
		return nil, fmt.Errorf("wire: ucx frame key for %+v: sender, receiver and epoch must be nonzero", ep)
	}
	k := &UCXFrameKey{ep: ep, mac: hmac.New(sha256.New, key)}
	n := copy(k.pre[:], ucxSealDomain)
	binary.BigEndian.PutUint64(k.pre[n:], ep.Receiver)
	binary.BigEndian.PutUint64(k.pre[n+8:], ep.ReceiverInc)
	return k, nil
}

// Endpoint is what the key seals.
func (k *UCXFrameKey) Endpoint() UCXEndpoint { return k.ep }

// Seal appends a sealed header to dst: the key's sender, incarnation and epoch with kind, flags
// and seq, then the seal over it and the payload (the concatenation of parts). It appends
// UCXSealedHeaderLen bytes; with room for them in dst it allocates nothing.
func (k *UCXFrameKey) Seal(dst []byte, kind UCXKind, flags byte, seq uint64, payload ...[]byte) []byte {
	start := len(dst)
	dst = AppendUCXHeader(dst, UCXHeader{
		Incarnation: k.ep.SenderInc, Sender: k.ep.Sender, Kind: kind, Flags: flags,
		Sealed: true, Epoch: k.ep.Epoch, Seq: seq,
	})
	k.mu.Lock()
	defer k.mu.Unlock()
	copy(k.hdr[:], dst[start:])
	sum := k.sumLocked(payload...)
	return append(dst, sum[:UCXSealLen]...)
}

// Open checks a received frame: its header (a UCXSealedHeaderLen-byte header whose fixed part
// names the key's endpoint) and payload must be what the key's sender sealed. It returns the
// decoded header, or an error wrapping ErrMalformed (the header does not decode) or ErrUCXSeal.
// The comparison is in constant time. A frame whose header decodes is opened or refused
// without an allocation.
func (k *UCXFrameKey) Open(hdr, payload []byte) (UCXHeader, error) {
	h, err := DecodeUCXHeader(hdr)
	switch {
	case err != nil:
		return UCXHeader{}, err
	case !h.Sealed:
		return UCXHeader{}, errSealMissing
	case h.Sender != k.ep.Sender || h.Incarnation != k.ep.SenderInc || h.Epoch != k.ep.Epoch:
		return UCXHeader{}, errSealEndpoint
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	copy(k.hdr[:], hdr[:UCXHeaderLen])
	sum := k.sumLocked(payload)
	if subtle.ConstantTimeCompare(sum[:UCXSealLen], hdr[UCXHeaderLen:]) != 1 {
		return UCXHeader{}, errSealMismatch
	}
	return h, nil
}

// sumLocked is the HMAC of the label, the receiver, k.hdr and the payload, in k.sum. The
// caller holds k.mu.
func (k *UCXFrameKey) sumLocked(payload ...[]byte) *[sha256.Size]byte {
	k.mac.Reset()
	k.mac.Write(k.pre[:])
	k.mac.Write(k.hdr[:])
	for _, p := range payload {
		k.mac.Write(p)
	}
	k.mac.Sum(k.sum[:0])
	return &k.sum
}
