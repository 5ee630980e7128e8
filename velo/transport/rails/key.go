package rails

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// A rail-set key is what a multi-rail registration hands out: one backend key per rail the owner
// registered the region on, each tagged with its rail's index. Its layout (big-endian):
//
//	0  magic "VRR" and version 1
//	4  count of keys (1..MaxRails)
//	5  per key: rail index (1 byte, < MaxRails, strictly increasing), length (2 bytes, 1..MaxKeyLen), the key
//	.. CRC-32C of everything before it (4 bytes)
//
// A backend key of the UCX transport starts with "VRK", so the two cannot be mistaken for each
// other: a key without this magic is a plain key of the first rail, which is what an owner of an
// earlier release, or one that shares only the first rail with the consumer, sends.

var railKeyMagic = [4]byte{'V', 'R', 'R', 1}

// MaxKeyLen bounds one rail's key inside a rail-set key.
const MaxKeyLen = 2048

// errKey is wrapped by every refusal of a rail-set key.
var errKey = errors.New("rails: malformed rail-set key")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// isRailKey reports whether b claims to be a rail-set key (its magic, any version).
func isRailKey(b []byte) bool { return len(b) >= 3 && b[0] == 'V' && b[1] == 'R' && b[2] == 'R' }

// appendRailKey encodes keys (indexed by rail; nil entries are rails without a key).
func appendRailKey(dst []byte, keys [][]byte) ([]byte, error) {
	n := 0
	for i, k := range keys {
		if k == nil {
			continue
		}
		if i >= MaxRails || len(k) == 0 || len(k) > MaxKeyLen {
			return nil, fmt.Errorf("%w: rail %d key of %d bytes (1..%d, rails below %d)", errKey, i, len(k), MaxKeyLen, MaxRails)
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: no key", errKey)
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

// parseRailKey decodes a rail-set key into keys indexed by rail (nil where a rail has none). The
// keys alias b.
func parseRailKey(b []byte) ([][]byte, error) {
	if len(b) < 4+1+4 {
		return nil, fmt.Errorf("%w: %d bytes", errKey, len(b))
	}
	if [4]byte(b[:4]) != railKeyMagic {
		return nil, fmt.Errorf("%w: magic or version %x (this build reads version %d): upgrade both sides together", errKey, b[:4], railKeyMagic[3])
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", errKey)
	}
	n := int(body[4])
	if n < 1 || n > MaxRails {
		return nil, fmt.Errorf("%w: %d keys (1..%d)", errKey, n, MaxRails)
	}
	keys := make([][]byte, MaxRails)
	p, last := body[5:], -1
	for range n {
		if len(p) < 3 {
			return nil, fmt.Errorf("%w: truncated", errKey)
		}
		idx, l := int(p[0]), int(binary.BigEndian.Uint16(p[1:3]))
		if idx >= MaxRails || idx <= last {
			return nil, fmt.Errorf("%w: rail index %d out of order or above %d", errKey, idx, MaxRails-1)
		}
		if l == 0 || l > MaxKeyLen || len(p) < 3+l {
			return nil, fmt.Errorf("%w: rail %d key of %d bytes", errKey, idx, l)
		}
		keys[idx], last, p = p[3:3+l], idx, p[3+l:]
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last key", errKey, len(p))
	}
	return keys[:last+1], nil
}
