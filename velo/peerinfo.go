package velo

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/velo-go/velo/velo/internal/wire"
)

// PeerInfo is what another instance needs to reach this one: its identity and one address blob
// per transport, keyed by transport name. It marshals to JSON (IDs as 16 hex digits, blobs as
// base64) and to a compact binary form; both decoders refuse malformed input with an error
// wrapping ErrInvalidEndpoint.
type PeerInfo struct {
	ID          InstanceID
	Incarnation uint64
	Addresses   map[string][]byte
}

type peerInfoJSON struct {
	ID          string            `json:"id"`
	Incarnation string            `json:"incarnation"`
	Addresses   map[string][]byte `json:"addresses"`
}

// MarshalJSON encodes p as {"id":"…","incarnation":"…","addresses":{"tcp":"base64…"}}.
func (p PeerInfo) MarshalJSON() ([]byte, error) {
	return json.Marshal(peerInfoJSON{ID: fmt.Sprintf("%016x", uint64(p.ID)), Incarnation: fmt.Sprintf("%016x", p.Incarnation), Addresses: p.Addresses})
}

// UnmarshalJSON decodes what MarshalJSON produced and checks it.
func (p *PeerInfo) UnmarshalJSON(b []byte) error {
	var j peerInfoJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("velo: %w: peer info JSON: %v", ErrInvalidEndpoint, err)
	}
	id, err := strconv.ParseUint(j.ID, 16, 64)
	if err != nil {
		return fmt.Errorf("velo: %w: peer info id %q is not 16 hex digits", ErrInvalidEndpoint, j.ID)
	}
	inc, err := strconv.ParseUint(j.Incarnation, 16, 64)
	if err != nil {
		return fmt.Errorf("velo: %w: peer info incarnation %q is not hex", ErrInvalidEndpoint, j.Incarnation)
	}
	q := PeerInfo{ID: InstanceID(id), Incarnation: inc, Addresses: j.Addresses}
	if err := q.validate(); err != nil {
		return err
	}
	*p = q
	return nil
}

// MarshalBinary encodes p compactly (magic, version, IDs, then each transport's name and blob).
func (p PeerInfo) MarshalBinary() ([]byte, error) {
	w := wire.PeerInfo{ID: uint64(p.ID), Incarnation: p.Incarnation}
	for _, name := range p.transportNames() {
		w.Addrs = append(w.Addrs, wire.PeerAddr{Transport: name, Blob: p.Addresses[name]})
	}
	return wire.AppendPeerInfo(nil, w)
}

// UnmarshalBinary decodes what MarshalBinary produced and checks it.
func (p *PeerInfo) UnmarshalBinary(b []byte) error {
	w, err := wire.DecodePeerInfo(b)
	if err != nil {
		return fmt.Errorf("velo: %w: %w", ErrInvalidEndpoint, err)
	}
	q := PeerInfo{ID: InstanceID(w.ID), Incarnation: w.Incarnation, Addresses: map[string][]byte{}}
	for _, a := range w.Addrs {
		q.Addresses[a.Transport] = append([]byte(nil), a.Blob...)
	}
	if err := q.validate(); err != nil {
		return err
	}
	*p = q
	return nil
}

// validate checks what every PeerInfo needs; each transport checks its own blob in RegisterPeer
// (an empty one included), so one bad address never costs the peer its other transports.
func (p PeerInfo) validate() error {
	if p.ID == 0 {
		return fmt.Errorf("velo: %w: peer info without an instance id", ErrInvalidEndpoint)
	}
	if len(p.Addresses) == 0 {
		return fmt.Errorf("velo: %w: peer info %016x has no transport address", ErrInvalidEndpoint, uint64(p.ID))
	}
	if len(p.Addresses) > wire.MaxTransports {
		return fmt.Errorf("velo: %w: peer info with %d addresses (limit %d)", ErrInvalidEndpoint, len(p.Addresses), wire.MaxTransports)
	}
	for name, blob := range p.Addresses {
		if name == "" || len(name) > 255 {
			return fmt.Errorf("velo: %w: transport name %q", ErrInvalidEndpoint, name)
		}
		if len(blob) > 0xffff {
			return fmt.Errorf("velo: %w: %s address of %d bytes", ErrInvalidEndpoint, name, len(blob))
		}
	}
	return nil
}

func (p PeerInfo) transportNames() []string {
	names := make([]string, 0, len(p.Addresses))
	for n := range p.Addresses {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
