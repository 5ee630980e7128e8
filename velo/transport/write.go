package transport

import (
	"context"
	"errors"
)

// ErrKeyRevoked: a write (or read) through a key whose registration the peer no longer holds: it
// was revoked, or never issued. Nothing was written.
var ErrKeyRevoked = errors.New("remote key revoked")

// Write is one write of RMAWriter.WriteMany: Src to Offset of the region Key names.
type Write struct {
	Key    []byte
	Offset uint64
	Src    []byte
}

// PeerWriteRegisterer is an optional extension of RMAWriter whose write keys are bound to one
// writer: RegisterMemoryWritableFor is RegisterMemoryWritable, and the key writes only through
// that peer's own connections to this transport (the UCX transport's guarded PUT checks the
// endpoint a write arrives on). The rendezvous registry calls it, when the transport has it, with
// the writer a grant names.
type PeerWriteRegisterer interface {
	RegisterMemoryWritableFor(peer InstanceID, mem []byte) (Registration, error)
}

// RMAWriter is an RMA transport that also writes: the receiving side registers memory a peer may
// write (a write grant, package velo/push) and the writing side writes into it through the key.
// The UCX transport is one: ucp_put_nbx and a flush where the NIC checks keys, velo's guarded PUT
// elsewhere, where the receiver's engine checks the key, its write access and the range before it
// copies a byte.
type RMAWriter interface {
	// RegisterMemoryWritable is RegisterMemory for memory peers may write and not read: each call
	// is its own registration with its own key.
	RegisterMemoryWritable(mem []byte) (Registration, error)
	// WriteMany writes every entry into peer's memory with up to window writes in flight. done(i,
	// err) runs once per write, on the calling goroutine, once that write's bytes are in the
	// peer's memory (complete at the target, not only sent) or it failed; one write's failure
	// fails only that write. WriteMany returns once no Src is in the transport's hands; if ctx
	// ends first, the writes not yet done fail with its error (a write already under way may
	// still land).
	WriteMany(ctx context.Context, peer InstanceID, writes []Write, window int, done func(i int, err error))
}
