package wire

import "fmt"

// PeerInfoMagic opens the binary form of a peer info.
var PeerInfoMagic = [3]byte{'V', 'P', 'I'}

// PeerInfoVersion is the version of the binary peer info layout.
const PeerInfoVersion = 1

// MaxTransports bounds how many transport addresses one peer info carries.
const MaxTransports = 16

// PeerAddr is one transport's address in a peer info.
type PeerAddr struct {
	Transport string
	Blob      []byte
}

// PeerInfo is the binary form of velo.PeerInfo.
type PeerInfo struct {
	ID          uint64
	Incarnation uint64
	Addrs       []PeerAddr
}

// AppendPeerInfo appends p's encoding to b.
func AppendPeerInfo(b []byte, p PeerInfo) ([]byte, error) {
	if len(p.Addrs) > MaxTransports {
		return nil, fmt.Errorf("wire: peer info with %d addresses (limit %d)", len(p.Addrs), MaxTransports)
	}
	w := writer{b: append(b, PeerInfoMagic[:]...)}
	w.u8(PeerInfoVersion)
	w.u64(p.ID)
	w.u64(p.Incarnation)
	w.u8(uint8(len(p.Addrs)))
	for _, a := range p.Addrs {
		w.bytes8("transport name", []byte(a.Transport))
		w.bytes16("address blob", a.Blob)
	}
	return w.b, w.err
}

// DecodePeerInfo decodes a binary peer info. It checks the framing only (non-empty, unique
// transport names); each transport validates its own blob.
func DecodePeerInfo(b []byte) (PeerInfo, error) {
	r := newReader("peer info", b)
	magic := r.take(3, "magic")
	if r.err == nil && string(magic) != string(PeerInfoMagic[:]) {
		return PeerInfo{}, fmt.Errorf("%w: peer info: bad magic %q", ErrMalformed, magic)
	}
	v := r.u8("version")
	if r.err == nil && v != PeerInfoVersion {
		return PeerInfo{}, fmt.Errorf("%w: %w: peer info version %d, this build reads %d", ErrMalformed, ErrVersion, v, PeerInfoVersion)
	}
	p := PeerInfo{ID: r.u64("instance id"), Incarnation: r.u64("incarnation")}
	n := int(r.u8("address count"))
	if n > MaxTransports {
		r.fail("%d addresses (limit %d)", n, MaxTransports)
	}
	seen := map[string]bool{}
	for i := 0; i < n && r.err == nil; i++ {
		name := string(r.bytes8("transport name"))
		blob := r.bytes16("address blob")
		if r.err != nil {
			break
		}
		if name == "" {
			r.fail("address %d has an empty transport name", i)
		}
		if seen[name] {
			r.fail("transport %q listed twice", name)
		}
		seen[name] = true
		p.Addrs = append(p.Addrs, PeerAddr{Transport: name, Blob: blob})
	}
	if err := r.done(); err != nil {
		return PeerInfo{}, err
	}
	return p, nil
}
