package rdma

import (
	"encoding/binary"
	"fmt"
)

// The offer blob and the descriptor are the registry's part of the acquire exchange; package wire
// frames them (backend name, length) and this file owns their insides. Both are binary and
// decoded byte for byte, because the remote key inside a descriptor goes to the RMA transport,
// whose unpacking must never see a truncated or padded key.

const (
	offerVersion      = 1
	descriptorVersion = 1
	// MaxRKeyLen bounds a packed remote key in a descriptor. UCX keys are a few hundred bytes.
	MaxRKeyLen = 4096
	// descriptorHeaderLen: version, address, length, key length.
	descriptorHeaderLen = 1 + 8 + 8 + 2
)

// offerBlob is what a consumer offers: the descriptor versions it reads.
func offerBlob() []byte { return []byte{offerVersion} }

// checkOffer accepts an offer this owner can answer.
func checkOffer(b []byte) error {
	if len(b) != 1 || b[0] != offerVersion {
		return fmt.Errorf("rdma: %w: offer %x (this build answers offer version %d)", ErrDescriptor, b, offerVersion)
	}
	return nil
}

// Descriptor names the bytes one lease may read: Length bytes at Addr in the owner's memory,
// readable with RKey until the lease ends.
type Descriptor struct {
	Addr   uint64
	Length uint64
	RKey   []byte
}

// AppendDescriptor appends d's encoding to b.
func AppendDescriptor(b []byte, d Descriptor) ([]byte, error) {
	if d.Length == 0 {
		return nil, fmt.Errorf("rdma: %w: zero-length descriptor", ErrDescriptor)
	}
	if len(d.RKey) == 0 || len(d.RKey) > MaxRKeyLen {
		return nil, fmt.Errorf("rdma: %w: remote key of %d bytes (1..%d)", ErrDescriptor, len(d.RKey), MaxRKeyLen)
	}
	b = append(b, descriptorVersion)
	b = binary.LittleEndian.AppendUint64(b, d.Addr)
	b = binary.LittleEndian.AppendUint64(b, d.Length)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(d.RKey)))
	return append(b, d.RKey...), nil
}

// DecodeDescriptor decodes a descriptor, refusing anything it cannot account for: another
// version, a zero length, a key length that disagrees with the bytes that follow, a trailing
// byte. The key is a copy.
func DecodeDescriptor(b []byte) (Descriptor, error) {
	if len(b) < descriptorHeaderLen {
		return Descriptor{}, fmt.Errorf("rdma: %w: %d bytes, the header alone is %d", ErrDescriptor, len(b), descriptorHeaderLen)
	}
	if b[0] != descriptorVersion {
		return Descriptor{}, fmt.Errorf("rdma: %w: version %d, this build reads %d", ErrDescriptor, b[0], descriptorVersion)
	}
	d := Descriptor{Addr: binary.LittleEndian.Uint64(b[1:]), Length: binary.LittleEndian.Uint64(b[9:])}
	klen := int(binary.LittleEndian.Uint16(b[17:]))
	rest := b[descriptorHeaderLen:]
	switch {
	case d.Length == 0:
		return Descriptor{}, fmt.Errorf("rdma: %w: zero length", ErrDescriptor)
	case klen == 0 || klen > MaxRKeyLen:
		return Descriptor{}, fmt.Errorf("rdma: %w: remote key of %d bytes (1..%d)", ErrDescriptor, klen, MaxRKeyLen)
	case len(rest) != klen:
		return Descriptor{}, fmt.Errorf("rdma: %w: key length %d with %d bytes after the header", ErrDescriptor, klen, len(rest))
	case d.Addr+d.Length < d.Addr:
		return Descriptor{}, fmt.Errorf("rdma: %w: range [%#x, +%d) wraps", ErrDescriptor, d.Addr, d.Length)
	}
	d.RKey = append([]byte(nil), rest...)
	return d, nil
}
