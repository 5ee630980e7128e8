package wire

import "fmt"

// The RDMA path's two blobs. A consumer's Offer carries, for its backend, the descriptor
// versions it reads; the owner answers with a descriptor inside AcquireResponse. The
// descriptor holds nothing but the backend's key (for UCX the sealed remote key, which
// itself names the region's address and length): the payload's size travels once, in
// AcquireResponse.Size, and the address once, inside the key.

// RDMAOfferVersion is the only descriptor version this build reads or writes. Version 1 (velo
// before the key became opaque) carried the address and the length beside the key; an owner
// of this build answers a version-1 offer by chunks (decode_error), and so does an older owner
// asked with version 2, so mixed releases keep moving bytes during a rolling upgrade.
const RDMAOfferVersion = 2

// RDMADescriptorVersion is the version byte of an encoded descriptor.
const RDMADescriptorVersion = 2

// MaxRDMAKeyLen bounds a backend key in a descriptor. UCX keys are a few hundred bytes.
const MaxRDMAKeyLen = 4096

// AppendRDMAOffer appends the offer blob of this build to b.
func AppendRDMAOffer(b []byte) []byte { return append(b, RDMAOfferVersion) }

// CheckRDMAOffer accepts an offer blob this build can answer.
func CheckRDMAOffer(b []byte) error {
	if len(b) != 1 || b[0] != RDMAOfferVersion {
		return fmt.Errorf("%w: %w: rdma offer %x (this build answers offer version %d)", ErrMalformed, ErrVersion, b, RDMAOfferVersion)
	}
	return nil
}

// RDMADescriptor is what a consumer needs to read one lease's bytes with one GET.
type RDMADescriptor struct {
	// Key is the backend's key for the lease's region, opaque here.
	Key []byte
}

// AppendRDMADescriptor appends d's encoding to b.
func AppendRDMADescriptor(b []byte, d RDMADescriptor) ([]byte, error) {
	if len(d.Key) == 0 || len(d.Key) > MaxRDMAKeyLen {
		return nil, fmt.Errorf("%w: rdma descriptor with a key of %d bytes (1..%d)", ErrMalformed, len(d.Key), MaxRDMAKeyLen)
	}
	w := writer{b: b}
	w.u8(RDMADescriptorVersion)
	w.bytes16("key", d.Key)
	return w.b, w.err
}

// DecodeRDMADescriptor decodes a descriptor. The key aliases b.
func DecodeRDMADescriptor(b []byte) (RDMADescriptor, error) {
	r := newReader("rdma descriptor", b)
	v := r.u8("version")
	if r.err == nil && v != RDMADescriptorVersion {
		return RDMADescriptor{}, fmt.Errorf("%w: %w: rdma descriptor version %d, this build reads %d", ErrMalformed, ErrVersion, v, RDMADescriptorVersion)
	}
	d := RDMADescriptor{Key: r.bytes16("key")}
	if err := r.done(); err != nil {
		return RDMADescriptor{}, err
	}
	if len(d.Key) == 0 || len(d.Key) > MaxRDMAKeyLen {
		return RDMADescriptor{}, fmt.Errorf("%w: rdma descriptor with a key of %d bytes (1..%d)", ErrMalformed, len(d.Key), MaxRDMAKeyLen)
	}
	return d, nil
}
