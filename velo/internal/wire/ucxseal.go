package wire

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

// Sealed UCX frames (since wire version 5).
//
// UCX has no authentication of its own, and a UCX receiver cannot tell which remote endpoint a
// message came from: anything a frame header says (sender, incarnation, epoch, seq) is what the
// sender chose to write. With credentials configured, the hello that opens an endpoint is proven
// with the control plane's session key (UCXHelloProofMsg), and every later frame on that endpoint
// — data and fin — carries a seal of UCXSealLen bytes: an 8-byte nonce counter, then a 16-byte
// AES-256-GCM tag under a key of that one endpoint and direction, computed with
//
//	nonce       four zero bytes, then the counter
//	plaintext   "velo-ucx-seal-v2\x00", the receiver ID and incarnation (uint64 each), and the
//	            header's fixed part (UCXHeaderLen bytes: sender, its incarnation, kind, flags,
//	            epoch, seq)
//	additional  the payload
//
// Only the tag is sent; the ciphertext of the small plaintext is thrown away, and the receiver
// recomputes the tag from what arrived and compares. That is GCM's authentication used as a MAC:
// a frame that verifies is one the key's sender sealed, header and payload, because any other
// would be a GCM forgery. The payload is passed to GCM as additional data, which it hashes with
// carry-less multiplication (GHASH) in one pass at several GB/s; the HMAC-SHA256 of version 4 cost
// about five times more per byte, and a round trip of a 64 KiB frame makes four such passes in
// series (seal and check, each way).
//
// GCM must never see one nonce twice under one key with different inputs. The sender's counter
// starts at a random 64-bit value when the key is made and goes up by one per frame, so no two
// frames of a key object share a nonce, and a key made again for the same endpoint (the same
// derived key) starts elsewhere: two runs of the counter overlap with probability about
// frames/2^64. Nothing about the nonce relies on seq, which a fin repeats.
//
// The key is derived by the runtime from the session key that made the hello's proof, over the
// hello itself (auth.HelloKey), so only the two sides of that session know it, and it is a
// different key for each endpoint and each direction; the AES key is an HMAC of it under a label
// of this use. The header's fields and the receiver's identity are under the tag as well, so a
// sealed frame cannot be moved to another seq, epoch, sender or receiver, nor reflected back to
// its sender, even under a key that was wrongly shared. A frame replayed verbatim is still a valid
// frame of its endpoint; the receiver's sequence state drops it as a duplicate.
//
// Why a 16-byte tag: a forger must guess it, and every guess is one message the receiver drops
// and counts; GCM's forgery bound for a 64 KiB frame is about 2^12/2^128 per guess.

// UCXSealNonceLen is the length of the nonce counter at the start of a seal.
const UCXSealNonceLen = 8

// UCXSealTagLen is the length of the GCM tag that follows the nonce counter.
const UCXSealTagLen = 16

// UCXSealLen is the length of a frame's seal: the nonce counter and the tag.
const UCXSealLen = UCXSealNonceLen + UCXSealTagLen

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

const ucxSealDomain = "velo-ucx-seal-v2\x00"

// ucxSealKeyLabel separates the AES key from any other use of the endpoint's frame key.
const ucxSealKeyLabel = "velo-ucx-seal-v2 aes-256-gcm key"

// UCXEndpoint names what one frame key seals: the frames one sender incarnation sends to one
// receiver incarnation on one of its endpoints (the epoch).
type UCXEndpoint struct {
	Sender, SenderInc     uint64
	Receiver, ReceiverInc uint64
	Epoch                 uint32
}

// UCXFrameKey seals (sender side) or opens (receiver side) the frames of one endpoint in one
// direction. It keeps its cipher state and scratch space, so sealing and opening allocate nothing
// (except when a frame given in several parts must be joined for GCM); it is safe for concurrent
// use (one at a time).
type UCXFrameKey struct {
	ep   UCXEndpoint
	aead cipher.AEAD

	mu    sync.Mutex
	next  uint64                                       // the sender's next nonce counter
	nonce [12]byte                                     // four zero bytes, then the counter
	plain [len(ucxSealDomain) + 16 + UCXHeaderLen]byte // domain, receiver, its incarnation, header
	out   [len(ucxSealDomain) + 16 + UCXHeaderLen + UCXSealTagLen]byte
	join  []byte // the parts of a multi-part payload, joined
}

// NewUCXFrameKey returns the sealer of ep's frames under key (at least MinUCXFrameKeyLen
// bytes). The key is not kept.
func NewUCXFrameKey(key []byte, ep UCXEndpoint) (*UCXFrameKey, error) {
	if len(key) < MinUCXFrameKeyLen {
		return nil, fmt.Errorf("wire: ucx frame key of %d bytes: it needs at least %d (derive it with auth.HelloKey)", len(key), MinUCXFrameKeyLen)
	}
	if ep.Sender == 0 || ep.Receiver == 0 || ep.Epoch == 0 {
		return nil, fmt.Errorf("wire: ucx frame key for %+v: sender, receiver and epoch must be nonzero", ep)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(ucxSealKeyLabel))
	block, err := aes.NewCipher(mac.Sum(nil))
	if err != nil {
		return nil, fmt.Errorf("wire: ucx frame key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("wire: ucx frame key: %w", err)
	}
	var start [8]byte
	if _, err := rand.Read(start[:]); err != nil {
		return nil, fmt.Errorf("wire: ucx frame key: drawing the nonce counter's start: %w", err)
	}
	k := &UCXFrameKey{ep: ep, aead: aead, next: binary.BigEndian.Uint64(start[:])}
	n := copy(k.plain[:], ucxSealDomain)
	binary.BigEndian.PutUint64(k.plain[n:], ep.Receiver)
	binary.BigEndian.PutUint64(k.plain[n+8:], ep.ReceiverInc)
	return k, nil
}

// Endpoint is what the key seals.
func (k *UCXFrameKey) Endpoint() UCXEndpoint { return k.ep }

// Seal appends a sealed header to dst: the key's sender, incarnation and epoch with kind, flags
// and seq, then the seal over it and the payload (the concatenation of parts). It appends
// UCXSealedHeaderLen bytes; with room for them in dst and the payload in one part it allocates
// nothing.
func (k *UCXFrameKey) Seal(dst []byte, kind UCXKind, flags byte, seq uint64, payload ...[]byte) []byte {
	start := len(dst)
	dst = AppendUCXHeader(dst, UCXHeader{
		Incarnation: k.ep.SenderInc, Sender: k.ep.Sender, Kind: kind, Flags: flags,
		Sealed: true, Epoch: k.ep.Epoch, Seq: seq,
	})
	k.mu.Lock()
	defer k.mu.Unlock()
	var ad []byte
	switch len(payload) {
	case 0:
	case 1:
		ad = payload[0]
	default:
		k.join = k.join[:0]
		for _, p := range payload {
			k.join = append(k.join, p...)
		}
		ad = k.join
	}
	counter := k.next
	k.next++
	dst = binary.BigEndian.AppendUint64(dst, counter)
	tag := k.tagLocked(dst[start:start+UCXHeaderLen], counter, ad)
	dst = append(dst, tag...)
	if cap(k.join) > 1<<20 {
		k.join = nil // a rare huge frame does not stay pinned to the key
	}
	return dst
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
	seal := hdr[UCXHeaderLen:]
	counter := binary.BigEndian.Uint64(seal[:UCXSealNonceLen])
	k.mu.Lock()
	defer k.mu.Unlock()
	tag := k.tagLocked(hdr[:UCXHeaderLen], counter, payload)
	if subtle.ConstantTimeCompare(tag, seal[UCXSealNonceLen:]) != 1 {
		return UCXHeader{}, errSealMismatch
	}
	return h, nil
}

// tagLocked is the GCM tag of the label, the receiver and header (plaintext) and ad (additional
// data) under the counter's nonce, in k.out. The caller holds k.mu.
func (k *UCXFrameKey) tagLocked(header []byte, counter uint64, ad []byte) []byte {
	copy(k.plain[len(k.plain)-UCXHeaderLen:], header)
	binary.BigEndian.PutUint64(k.nonce[4:], counter)
	out := k.aead.Seal(k.out[:0], k.nonce[:], k.plain[:], ad)
	return out[len(out)-UCXSealTagLen:]
}
