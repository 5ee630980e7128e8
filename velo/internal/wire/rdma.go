package wire

import "fmt"

// The RDMA path's two blobs. A consumer's Offer carries, for its backend, the descriptor
// versions it reads; the owner answers with a descriptor inside AcquireResponse. The
// descriptor holds the backend's key (for UCX the sealed remote key, which itself names the
// region's address and length) and, from version 3, the memory type of the region: the
// payload's size travels once, in AcquireResponse.Size, and the address once, inside the key.

// RDMAOfferVersion is the offer this build sends: version 3, "I read descriptors of version 2
// and 3, and know the reason device_bounce". Version 2 (velo before memory types) read version-2
// descriptors only; an owner of this build answers it as before for host memory, and serves
// device memory to it by chunks through a host bounce buffer, answering the reason not_pinned,
// which a version-2 consumer knows. Version 1 (velo before the key became opaque) carried the
// address and the length beside the key; an owner of this build answers a version-1 offer by
// chunks (decode_error), and so does an older owner asked with a version it does not know
// (version 2 owners answer a version-3 offer so), so mixed releases keep moving bytes during a
// rolling upgrade. The consumer of this build then offers version 2 to that owner.
const RDMAOfferVersion = 3

// RDMALegacyOfferVersion is the offer of velo before memory types, which this build still
// answers and sends to an owner that refused version 3.
const RDMALegacyOfferVersion = 2

// RDMADescriptorVersion is the version byte of a descriptor of host memory for a version-2
// offer: the key alone.
const RDMADescriptorVersion = 2

// RDMADescriptorMemoryVersion is the version byte of a descriptor for a version-3 offer: the
// memory type, then the key.
const RDMADescriptorMemoryVersion = 3

// MaxRDMAKeyLen bounds a backend key in a descriptor. UCX keys are a few hundred bytes.
const MaxRDMAKeyLen = 4096

// Memory types a version-3 descriptor names (the values of transport.MemoryType).
const (
	RDMAMemoryHost uint8 = 0
	RDMAMemoryCUDA uint8 = 1
)

// AppendRDMAOffer appends the offer blob of this build to b.
func AppendRDMAOffer(b []byte) []byte { return append(b, RDMAOfferVersion) }

// AppendRDMAOfferVersion appends an offer of version v (RDMAOfferVersion or
// RDMALegacyOfferVersion) to b.
func AppendRDMAOfferVersion(b []byte, v uint8) []byte { return append(b, v) }

// CheckRDMAOffer accepts an offer blob this build can answer.
func CheckRDMAOffer(b []byte) error {
	_, err := RDMAOfferVersionOf(b)
	return err
}

// RDMAOfferVersionOf returns the version of an offer blob this build can answer (2 or 3).
func RDMAOfferVersionOf(b []byte) (uint8, error) {
	if len(b) != 1 || (b[0] != RDMAOfferVersion && b[0] != RDMALegacyOfferVersion) {
		return 0, fmt.Errorf("%w: %w: rdma offer %x (this build answers offer versions %d and %d)", ErrMalformed, ErrVersion, b, RDMALegacyOfferVersion, RDMAOfferVersion)
	}
	return b[0], nil
}

// RDMADescriptor is what a consumer needs to read one lease's bytes with one GET.
type RDMADescriptor struct {
	// Version is the encoding: RDMADescriptorVersion (also for 0) or
	// RDMADescriptorMemoryVersion. Decode sets it.
	Version uint8
	// Memory is the memory type of the region (RDMAMemoryHost, RDMAMemoryCUDA); a version-2
	// descriptor can only say host memory.
	Memory uint8
	// Key is the backend's key for the lease's region, opaque here.
	Key []byte
}

// DescriptorVersionFor is the descriptor version that answers an offer of version v.
func DescriptorVersionFor(offer uint8) uint8 {
	if offer >= RDMAOfferVersion {
		return RDMADescriptorMemoryVersion
	}
	return RDMADescriptorVersion
}

// AppendRDMADescriptor appends d's encoding to b.
func AppendRDMADescriptor(b []byte, d RDMADescriptor) ([]byte, error) {
	if len(d.Key) == 0 || len(d.Key) > MaxRDMAKeyLen {
		return nil, fmt.Errorf("%w: rdma descriptor with a key of %d bytes (1..%d)", ErrMalformed, len(d.Key), MaxRDMAKeyLen)
	}
	if d.Memory > RDMAMemoryCUDA {
		return nil, fmt.Errorf("%w: rdma descriptor of memory type %d (0 host, 1 cuda)", ErrMalformed, d.Memory)
	}
	w := writer{b: b}
	switch d.Version {
	case 0, RDMADescriptorVersion:
		if d.Memory != RDMAMemoryHost {
			return nil, fmt.Errorf("%w: a version-%d rdma descriptor cannot name memory type %d: the consumer reads host memory only", ErrMalformed, RDMADescriptorVersion, d.Memory)
		}
		w.u8(RDMADescriptorVersion)
	case RDMADescriptorMemoryVersion:
		w.u8(RDMADescriptorMemoryVersion)
		w.u8(d.Memory)
	default:
		return nil, fmt.Errorf("%w: %w: rdma descriptor version %d", ErrMalformed, ErrVersion, d.Version)
	}
	w.bytes16("key", d.Key)
	return w.b, w.err
}

// DecodeRDMADescriptor decodes a descriptor of version 2 or 3. The key aliases b.
func DecodeRDMADescriptor(b []byte) (RDMADescriptor, error) {
	r := newReader("rdma descriptor", b)
	v := r.u8("version")
	if r.err == nil && v != RDMADescriptorVersion && v != RDMADescriptorMemoryVersion {
		return RDMADescriptor{}, fmt.Errorf("%w: %w: rdma descriptor version %d, this build reads %d and %d", ErrMalformed, ErrVersion, v, RDMADescriptorVersion, RDMADescriptorMemoryVersion)
	}
	d := RDMADescriptor{Version: v}
	if v == RDMADescriptorMemoryVersion {
		d.Memory = r.u8("memory type")
	}
	d.Key = r.bytes16("key")
	if err := r.done(); err != nil {
		return RDMADescriptor{}, err
	}
	if d.Memory > RDMAMemoryCUDA {
		return RDMADescriptor{}, fmt.Errorf("%w: rdma descriptor of memory type %d, this build knows 0 (host) and 1 (cuda)", ErrMalformed, d.Memory)
	}
	if len(d.Key) == 0 || len(d.Key) > MaxRDMAKeyLen {
		return RDMADescriptor{}, fmt.Errorf("%w: rdma descriptor with a key of %d bytes (1..%d)", ErrMalformed, len(d.Key), MaxRDMAKeyLen)
	}
	return d, nil
}
