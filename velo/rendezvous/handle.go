package rendezvous

import (
	"encoding/hex"
	"fmt"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// Handle names one staged payload. It is small, safe to copy, and meaningless without the owner:
// the nonce is 64 random bits drawn per slot, so a handle cannot be guessed from another one (slot
// IDs alone are a counter).
type Handle struct {
	Owner transport.InstanceID
	Slot  uint64
	Nonce uint64
	Size  uint64
}

// IsZero reports whether h is the zero Handle.
func (h Handle) IsZero() bool { return h == Handle{} }

func (h Handle) wire() wire.Handle {
	return wire.Handle{Owner: uint64(h.Owner), Slot: h.Slot, Nonce: h.Nonce, Size: h.Size}
}

func fromWire(w wire.Handle) Handle {
	return Handle{Owner: transport.InstanceID(w.Owner), Slot: w.Slot, Nonce: w.Nonce, Size: w.Size}
}

// MarshalBinary encodes h in 33 bytes (a version byte and four big-endian 64-bit fields).
func (h Handle) MarshalBinary() ([]byte, error) { return wire.AppendHandle(nil, h.wire()), nil }

// UnmarshalBinary decodes what MarshalBinary produced; other input wraps ErrBadHandle.
func (h *Handle) UnmarshalBinary(b []byte) error {
	w, err := wire.DecodeHandle(b)
	if err != nil {
		return fmt.Errorf("rendezvous: %w: %w", ErrBadHandle, err)
	}
	*h = fromWire(w)
	return nil
}

// MarshalText encodes h as hex, so handles travel in JSON and on command lines.
func (h Handle) MarshalText() ([]byte, error) {
	b, _ := h.MarshalBinary()
	return []byte(hex.EncodeToString(b)), nil
}

// UnmarshalText decodes what MarshalText produced.
func (h *Handle) UnmarshalText(s []byte) error {
	b, err := hex.DecodeString(string(s))
	if err != nil {
		return fmt.Errorf("rendezvous: %w: not hex: %v", ErrBadHandle, err)
	}
	return h.UnmarshalBinary(b)
}

// String is a short human-readable form (not parseable; use MarshalText for that).
func (h Handle) String() string {
	return fmt.Sprintf("handle{owner %016x, slot %d, %d bytes}", uint64(h.Owner), h.Slot, h.Size)
}
