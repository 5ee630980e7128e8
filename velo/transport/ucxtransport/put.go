package ucxtransport

import (
	"context"
	"errors"
	"fmt"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/transport"
)

var (
	_ transport.RMAWriter           = (*Transport)(nil)
	_ transport.PeerRegisterer      = (*Transport)(nil)
	_ transport.PeerWriteRegisterer = (*Transport)(nil)
)

// RegisterMemoryWritable implements transport.RMAWriter: an engine registration with write access
// only. Its sealed key says so, and the engine refuses a guarded GET through it and a guarded PUT
// outside it (package ucx).
func (t *Transport) RegisterMemoryWritable(mem []byte) (transport.Registration, error) {
	return t.register("RegisterMemoryWritable", mem, ucx.RegisterOptions{Access: ucx.AccessWrite}, " for writing")
}

// RegisterMemoryWritableFor implements transport.PeerWriteRegisterer: RegisterMemoryWritable
// with the key bound to peer (ucx.RegisterOptions.Holder). The engine's guarded PUT writes
// through it only when the request arrives on one of this transport's endpoints to peer.
// As for RegisterMemoryFor, this side's endpoint to peer is opened first when there is none.
func (t *Transport) RegisterMemoryWritableFor(peer transport.InstanceID, mem []byte) (transport.Registration, error) {
	reg, err := t.register("RegisterMemoryWritable", mem, ucx.RegisterOptions{Access: ucx.AccessWrite, Holder: uint64(peer)}, " for writing")
	if err == nil {
		t.holderEndpoint(peer)
	}
	return reg, err
}

// WriteMany implements transport.RMAWriter through the engine's PutMany on the peer's endpoint:
// ucp_put_nbx and a flush where the lanes are hardware-keyed, the guarded PUT elsewhere, each write
// reported once its bytes are in the peer's memory. Each distinct key is parsed and checked once;
// a write with a key the check refuses, without write access or outside the key's region fails
// alone, before anything is sent. The endpoint counts the batch as one operation in flight (a fin
// waits for it, as for a GET).
func (t *Transport) WriteMany(ctx context.Context, id transport.InstanceID, writes []transport.Write, window int, done func(i int, err error)) {
	if len(writes) == 0 {
		return
	}
	report := func(i int, err error) {
		switch {
		case errors.Is(err, ucx.ErrRemoteKeyRevoked):
			err = fmt.Errorf("ucx: PUT of %d bytes to %016x: %w: %w", len(writes[i].Src), uint64(id), transport.ErrKeyRevoked, err)
		case err != nil:
			err = fmt.Errorf("ucx: PUT of %d bytes to %016x: %w", len(writes[i].Src), uint64(id), err)
		}
		if done != nil {
			done(i, err)
		}
	}
	p, err := t.oneSidedPeer(id, "PUT to", "operations")
	if err != nil {
		failAll(len(writes), err, done)
		return
	}
	keys := keyCache{}
	kw := make([]ucx.KeyWrite, 0, len(writes))
	index := make([]int, 0, len(writes)) // kw[j] is writes[index[j]]
	for i, w := range writes {
		k, err := keys.parse(w.Key)
		if err != nil {
			report(i, err)
			continue
		}
		kw = append(kw, ucx.KeyWrite{Key: k, Offset: w.Offset, Src: w.Src})
		index = append(index, i)
	}
	t.untilBound(ctx, p, index, func(c *ucx.Conn, sel []int, done func(j int, err error)) {
		c.PutMany(ctx, pick(kw, sel), window, done)
	}, report)
}
