package wire

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// A rail-set key is what a multi-rail registration (package transport/rails) hands out: one
// backend key per rail the owner registered the region on, each tagged with its rail's index. It
// travels as a descriptor's opaque key. Its layout (big-endian):
//
//	0  magic "VRR" and version 1
//	4  count of keys (1..MaxRails)
//	5  per key: rail index (1 byte, < MaxRails, strictly increasing), length (2 bytes, 1..MaxRailKeyLen), the key
//	.. CRC-32C of everything before it (4 bytes)
//
// A backend key of the UCX transport starts with "VRK", so the two cannot be mistaken for each
// other: a key without this magic is a plain key of the first rail, which is what an owner of an
// earlier release, or one that shares only the first rail with the consumer, sends.

var railKeyMagic = [4]byte{'V', 'R', 'R', 1}

// MaxRails bounds the rails of one multi-rail transport, and so the keys of a rail-set key.
const MaxRails = 8

// MaxRailKeyLen bounds one rail's key inside a rail-set key.
const MaxRailKeyLen = 2048

// ErrRailKey is wrapped by every refusal of a rail-set key (and wraps ErrMalformed).
var ErrRailKey = fmt.Errorf("%w: rail-set key", ErrMalformed)

// IsRailKey reports whether b claims to be a rail-set key (its magic, any version).
func IsRailKey(b []byte) bool { return len(b) >= 3 && b[0] == 'V' && b[1] == 'R' && b[2] == 'R' }

// AppendRailKey encodes keys (indexed by rail; nil entries are rails without a key).
func AppendRailKey(dst []byte, keys [][]byte) ([]byte, error) {
	n := 0
	for i, k := range keys {
		if k == nil {
			continue
		}
		if i >= MaxRails || len(k) == 0 || len(k) > MaxRailKeyLen {
			return nil, fmt.Errorf("%w: rail %d key of %d bytes (1..%d, rails below %d)", ErrRailKey, i, len(k), MaxRailKeyLen, MaxRails)
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: no key", ErrRailKey)
	}
	start := len(dst)
	dst = append(dst, railKeyMagic[:]...)
	dst = append(dst, byte(n))
	for i, k := range keys {
		if k == nil {
			continue
		}
		dst = append(dst, byte(i))
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(k)))
		dst = append(dst, k...)
	}
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli)), nil
}

// DecodeRailKey decodes a rail-set key into keys indexed by rail (nil where a rail has none),
// up to the last rail that has one. The keys alias b.
func DecodeRailKey(b []byte) ([][]byte, error) {
	if len(b) < 4+1+4 {
		return nil, fmt.Errorf("%w: %d bytes", ErrRailKey, len(b))
	}
	if [4]byte(b[:4]) != railKeyMagic {
		return nil, fmt.Errorf("%w: magic or version %x (this build reads version %d): upgrade both sides together", ErrRailKey, b[:4], railKeyMagic[3])
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrRailKey)
	}
	n := int(body[4])
	if n < 1 || n > MaxRails {
		return nil, fmt.Errorf("%w: %d keys (1..%d)", ErrRailKey, n, MaxRails)
	}
	keys := make([][]byte, MaxRails)
	p, last := body[5:], -1
	for range n {
		if len(p) < 3 {
			return nil, fmt.Errorf("%w: truncated", ErrRailKey)
		}
		idx, l := int(p[0]), int(binary.BigEndian.Uint16(p[1:3]))
		if idx >= MaxRails || idx <= last {
			return nil, fmt.Errorf("%w: rail index %d out of order or above %d", ErrRailKey, idx, MaxRails-1)
		}
		if l == 0 || l > MaxRailKeyLen || len(p) < 3+l {
			return nil, fmt.Errorf("%w: rail %d key of %d bytes", ErrRailKey, idx, l)
		}
		keys[idx], last, p = p[3:3+l], idx, p[3+l:]
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last key", ErrRailKey, len(p))
	}
	return keys[:last+1], nil
}
