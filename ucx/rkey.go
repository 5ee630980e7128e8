package ucx

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
	"slices"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// Remote keys cross the network as opaque bytes, and ucp_ep_rkey_unpack takes a pointer
// but no length: it trusts the bytes to describe their own size. Fed a truncated or
// garbage key, UCX reads past the buffer (protocol v1) or crashes the consumer outright
// (protocol v2 on UCX 1.13 dereferences a memory-type byte of 0xff). So no bytes reach
// ucp_ep_rkey_unpack in this package before validateUCXKey has walked them against their
// real length.
//
// The engine goes one step further and seals every key it hands out in an envelope
// (SealedKey) that names the region it covers and the owner-side registration slot and
// token. The consumer checks the envelope's framing and checksum and the requested range;
// the owner checks slot, token and range again before it reads a byte (guarded GET).

// ucxKeyMaxLen bounds the UCX part of a key. Real keys are tens of bytes (tcp: 10;
// InfiniBand: a few dozen per memory domain).
const ucxKeyMaxLen = 4096

// ucxKeyMaxTrailer bounds bytes after the per-domain keys. UCX releases after 1.13 append
// the memory's system-device id and distances there; 1.13 appends nothing.
const ucxKeyMaxTrailer = 1024

// validateUCXKey walks a packed UCX remote key in the layout every UCX release since 1.10
// uses: a 64-bit little-endian bitmap of memory-domain indexes, one memory-type byte, then
// for each set bit a one-byte size followed by that many key bytes, then an optional
// trailer. memTypeLimit is the number of memory types the linked UCX knows; a key naming a
// type at or above it is refused (UCX indexes tables with that byte).
func validateUCXKey(b []byte, memTypeLimit int) error {
	if len(b) > ucxKeyMaxLen {
		return fmt.Errorf("%w: UCX key of %d bytes exceeds %d", ErrInvalidRemoteKey, len(b), ucxKeyMaxLen)
	}
	if len(b) < 9 {
		return fmt.Errorf("%w: UCX key of %d bytes is shorter than its 9-byte header", ErrInvalidRemoteKey, len(b))
	}
	mdMap := binary.LittleEndian.Uint64(b)
	memType := int(b[8])
	if memType >= memTypeLimit {
		return fmt.Errorf("%w: UCX key names memory type %d; this UCX knows %d", ErrInvalidRemoteKey, memType, memTypeLimit)
	}
	off := 9
	for n := bits.OnesCount64(mdMap); n > 0; n-- {
		if off >= len(b) {
			return fmt.Errorf("%w: UCX key truncated in memory-domain entries (map %#x, %d bytes)", ErrInvalidRemoteKey, mdMap, len(b))
		}
		size := int(b[off])
		off++
		if off+size > len(b) {
			return fmt.Errorf("%w: UCX key entry of %d bytes runs past the key's %d bytes", ErrInvalidRemoteKey, size, len(b))
		}
		off += size
	}
	if len(b)-off > ucxKeyMaxTrailer {
		return fmt.Errorf("%w: UCX key has %d unexplained trailing bytes", ErrInvalidRemoteKey, len(b)-off)
	}
	return nil
}

// SealedKey is the decoded form of the remote key an Engine registration hands out
// (Registration.RemoteKey). Its wire form, little-endian:
//
//	0  magic "VRK" and version 1
//	4  flags: bit 0 the region may be written, bit 1 it may not be read (a key of a
//	   plain read registration has 0 here, as before writes existed); other bits 0
//	5  reserved (3 bytes, 0)
//	8  owner guard slot (uint32)
//	12 length n of the UCX key (uint32)
//	16 token (uint64): random per registration; the owner refuses a mismatch
//	24 base address of the region (uint64)
//	32 length of the region (uint64)
//	40 the UCX packed key (n bytes)
//	40+n CRC-32C of everything before it
type SealedKey struct {
	Slot   uint32
	Token  uint64
	Base   uint64
	Length uint64
	// Access is what the owner's registration grants: the zero value means AccessRead, the
	// access of every key before writes existed.
	Access Access
	UCXKey []byte // aliases the input of ParseSealedKey
}

// Flags of the sealed key's byte 4.
const (
	sealedFlagWrite  = 1 << 0
	sealedFlagNoRead = 1 << 1
	sealedFlagsKnown = sealedFlagWrite | sealedFlagNoRead
)

// access is what k grants, with the zero value read.
func (k SealedKey) access() Access {
	if k.Access == 0 {
		return AccessRead
	}
	return k.Access
}

func (k SealedKey) flags() byte {
	var f byte
	a := k.access()
	if a&AccessWrite != 0 {
		f |= sealedFlagWrite
	}
	if a&AccessRead == 0 {
		f |= sealedFlagNoRead
	}
	return f
}

var sealedMagic = [4]byte{'V', 'R', 'K', 1}

const sealedHeaderLen = 40

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// AppendSealedKey appends k's wire form to dst.
func AppendSealedKey(dst []byte, k SealedKey) []byte {
	start := len(dst)
	dst = slices.Grow(dst, sealedHeaderLen+len(k.UCXKey)+4) // one allocation per key, not one per field
	dst = append(dst, sealedMagic[:]...)
	dst = append(dst, k.flags(), 0, 0, 0)
	dst = binary.LittleEndian.AppendUint32(dst, k.Slot)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(k.UCXKey)))
	dst = binary.LittleEndian.AppendUint64(dst, k.Token)
	dst = binary.LittleEndian.AppendUint64(dst, k.Base)
	dst = binary.LittleEndian.AppendUint64(dst, k.Length)
	dst = append(dst, k.UCXKey...)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], crc32c))
}

// ParseSealedKey checks b's framing (magic, version, lengths, checksum, the UCX key's own
// structure and the region's bounds) and decodes it. Every failure wraps
// ErrInvalidRemoteKey; nothing is read beyond len(b).
func ParseSealedKey(b []byte) (SealedKey, error) {
	return parseSealedKey(b, maxKnownMemTypes)
}

// maxKnownMemTypes is generous for the pure-Go parser; the engine passes the linked UCX's
// real count.
const maxKnownMemTypes = 16

func parseSealedKey(b []byte, memTypeLimit int) (SealedKey, error) {
	if len(b) < sealedHeaderLen+4 {
		return SealedKey{}, fmt.Errorf("%w: %d bytes is shorter than the %d-byte envelope", ErrInvalidRemoteKey, len(b), sealedHeaderLen+4)
	}
	if [4]byte(b[:4]) != sealedMagic {
		if b[0] == 'V' && b[1] == 'R' && b[2] == 'K' {
			return SealedKey{}, fmt.Errorf("%w: envelope version %d, this binding speaks %d", ErrInvalidRemoteKey, b[3], sealedMagic[3])
		}
		return SealedKey{}, fmt.Errorf("%w: not a sealed key (bad magic %x); pass the bytes Registration.RemoteKey returned", ErrInvalidRemoteKey, b[:4])
	}
	if b[4]&^sealedFlagsKnown != 0 || b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return SealedKey{}, fmt.Errorf("%w: reserved envelope bytes are set", ErrInvalidRemoteKey)
	}
	if b[4] == sealedFlagNoRead {
		return SealedKey{}, fmt.Errorf("%w: the key grants neither read nor write", ErrInvalidRemoteKey)
	}
	n := binary.LittleEndian.Uint32(b[12:])
	if uint64(n) != uint64(len(b))-sealedHeaderLen-4 {
		return SealedKey{}, fmt.Errorf("%w: envelope says %d UCX key bytes, carries %d", ErrInvalidRemoteKey, n, len(b)-sealedHeaderLen-4)
	}
	body := b[:len(b)-4]
	if got, want := crc32.Checksum(body, crc32c), binary.LittleEndian.Uint32(b[len(b)-4:]); got != want {
		return SealedKey{}, fmt.Errorf("%w: checksum mismatch (corrupted or forged key)", ErrInvalidRemoteKey)
	}
	k := SealedKey{
		Slot:   binary.LittleEndian.Uint32(b[8:]),
		Token:  binary.LittleEndian.Uint64(b[16:]),
		Base:   binary.LittleEndian.Uint64(b[24:]),
		Length: binary.LittleEndian.Uint64(b[32:]),
		Access: AccessRead,
		UCXKey: body[sealedHeaderLen:],
	}
	if b[4]&sealedFlagWrite != 0 {
		k.Access |= AccessWrite
	}
	if b[4]&sealedFlagNoRead != 0 {
		k.Access &^= AccessRead
	}
	if k.Base+k.Length < k.Base {
		return SealedKey{}, fmt.Errorf("%w: region %#x+%d wraps the address space", ErrInvalidRemoteKey, k.Base, k.Length)
	}
	if err := validateUCXKey(k.UCXKey, memTypeLimit); err != nil {
		return SealedKey{}, err
	}
	return k, nil
}

// Covers reports whether [addr, addr+n) lies inside the key's region.
func (k SealedKey) Covers(addr uint64, n uint64) bool {
	return addr >= k.Base && n <= k.Length && addr-k.Base <= k.Length-n
}

func crc32Castagnoli(b []byte) uint32 { return crc32.Checksum(b, crc32c) }

// RegionKey is a sealed key that passed every check a consumer can make: its framing and
// checksum, the region's bounds, and the UCX key's structure against the memory types the
// linked UCX knows. It is what a GET carries from the moment the key bytes arrive until UCX
// unpacks them, so one GET checks the key once (ParseRegionKey) and its range once
// (Conn.GetKeyAsync). The zero value is no key.
type RegionKey struct {
	k   SealedKey
	raw []byte // a private copy of the wire bytes; k.UCXKey aliases it
}

// ParseRegionKey validates b, the bytes a peer's Registration.RemoteKey produced, and keeps a
// copy (the caller may reuse b). Every failure wraps ErrInvalidRemoteKey.
func ParseRegionKey(b []byte) (*RegionKey, error) {
	limit := maxKnownMemTypes
	if capi.Compiled {
		limit = capi.MemoryTypeLimit
	}
	raw := append([]byte(nil), b...)
	k, err := parseSealedKey(raw, limit)
	if err != nil {
		return nil, err
	}
	return &RegionKey{k: k, raw: raw}, nil
}

// Base is the address of the region's first byte in the owner's memory.
func (k *RegionKey) Base() uint64 { return k.k.Base }

// Len is the region's length in bytes.
func (k *RegionKey) Len() uint64 { return k.k.Length }

// Access is what the key says the owner's registration grants (the owner checks it again).
func (k *RegionKey) Access() Access { return k.k.access() }

// MemoryType is the owner's memory type as UCX packed it into the key (its memory-type byte):
// MemoryHost or MemoryCUDA for a registration of this package. The owner's UCX wrote it; the
// sealed envelope around it is checksummed, not signed.
func (k *RegionKey) MemoryType() MemoryType {
	if k == nil || len(k.k.UCXKey) < 9 {
		return MemoryHost
	}
	return MemoryType(k.k.UCXKey[8])
}

// readErr refuses a read of [offset, offset+n) through a key without read access or outside
// the region.
func (k *RegionKey) readErr(offset, n uint64) error {
	if !k.Access().Has(AccessRead) {
		return fmt.Errorf("%w: the key's registration grants %v, a read needs read access", ErrAccessDenied, k.Access())
	}
	return k.rangeErr(offset, n)
}

// rangeErr refuses [offset, offset+n) unless it lies inside the region.
func (k *RegionKey) rangeErr(offset, n uint64) error {
	if n > k.k.Length || offset > k.k.Length-n {
		return fmt.Errorf("%w: [%d, +%d) is outside the key's %d-byte region at %#x", ErrOutOfRange, offset, n, k.k.Length, k.k.Base)
	}
	return nil
}
