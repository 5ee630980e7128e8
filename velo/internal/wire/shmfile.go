package wire

import (
	"encoding/binary"
	"fmt"
)

// The single-copy read of the same-host path (package transport/shm). On a ring channel, a
// consumer that can map a file flags its read frames so; when the key names a payload that lives
// in a sealed memfd of its own, the owner answers with a file frame in place of the ring's
// pieces, with a read-only descriptor of that memfd (SCM_RIGHTS) on the frame's first byte. The
// consumer maps the range, copies it out, closes the mapping and the descriptor, and says so
// with a done frame; until then the owner counts the read as in flight. Both frames are
// SHMFileFrameLen bytes, the size of every frame of the channel, little-endian as the others:
//
//	0    kind (1 byte), version (1 byte), 2 bytes zero
//	4    8 bytes zero
//	12   request (4 bytes): the read's index in its batch, where the ring's frames carry it
//	16   offset of the read's first byte in the file (8 bytes)
//	24   length of the read (8 bytes)
//	32   size of the file (8 bytes)
//	40   24 bytes zero
//
// A done frame carries its request alone. A frame of another version, or with a byte its kind
// does not carry, is refused: the consumer falls back to the ring on another channel, and the
// owner closes the channel.

// SHMFileFrameLen is the size of a file frame (the ring channel's frame size).
const SHMFileFrameLen = 64

// SHMFileVersion is the version of the file frames this build speaks.
const SHMFileVersion = 1

// Kinds of file frames.
const (
	// SHMFileRead (owner): request Req is answered by the file that comes with the frame: Length
	// bytes at Offset of a file of Size bytes.
	SHMFileRead = 'M'
	// SHMFileDone (consumer): the copy of request Req is done and its mapping and descriptor closed.
	SHMFileDone = 'D'
)

// ErrSHMFileFrame is wrapped by every refusal of a file frame (and wraps ErrMalformed).
var ErrSHMFileFrame = fmt.Errorf("%w: same-host file frame", ErrMalformed)

// SHMFileFrame is one file frame.
type SHMFileFrame struct {
	Kind   byte
	Req    uint32
	Offset uint64
	Length uint64
	Size   uint64
}

func (f SHMFileFrame) check() error {
	switch f.Kind {
	case SHMFileRead:
		if f.Length == 0 || f.Offset > f.Size || f.Length > f.Size-f.Offset {
			return fmt.Errorf("%w: a read of %d bytes at %d of a file of %d", ErrSHMFileFrame, f.Length, f.Offset, f.Size)
		}
	case SHMFileDone:
		if f.Offset|f.Length|f.Size != 0 {
			return fmt.Errorf("%w: a done frame with a range", ErrSHMFileFrame)
		}
	default:
		return fmt.Errorf("%w: kind %q", ErrSHMFileFrame, f.Kind)
	}
	return nil
}

// AppendSHMFileFrame encodes f; a frame that is not one of its kind's is refused.
func AppendSHMFileFrame(b []byte, f SHMFileFrame) ([]byte, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	b = append(b, f.Kind, SHMFileVersion, 0, 0)
	b = append(b, make([]byte, 8)...)
	b = binary.LittleEndian.AppendUint32(b, f.Req)
	b = binary.LittleEndian.AppendUint64(b, f.Offset)
	b = binary.LittleEndian.AppendUint64(b, f.Length)
	b = binary.LittleEndian.AppendUint64(b, f.Size)
	return append(b, make([]byte, 24)...), nil
}

// DecodeSHMFileFrame decodes one frame of exactly SHMFileFrameLen bytes.
func DecodeSHMFileFrame(b []byte) (SHMFileFrame, error) {
	if len(b) != SHMFileFrameLen {
		return SHMFileFrame{}, fmt.Errorf("%w: %d bytes, want %d", ErrSHMFileFrame, len(b), SHMFileFrameLen)
	}
	if b[1] != SHMFileVersion {
		return SHMFileFrame{}, fmt.Errorf("%w: %w: version %d, this build speaks %d", ErrSHMFileFrame, ErrVersion, b[1], SHMFileVersion)
	}
	if !zero(b[2:12]) || !zero(b[40:]) {
		return SHMFileFrame{}, fmt.Errorf("%w: reserved bytes not zero", ErrSHMFileFrame)
	}
	f := SHMFileFrame{Kind: b[0], Req: binary.LittleEndian.Uint32(b[12:]), Offset: binary.LittleEndian.Uint64(b[16:]),
		Length: binary.LittleEndian.Uint64(b[24:]), Size: binary.LittleEndian.Uint64(b[32:])}
	if err := f.check(); err != nil {
		return SHMFileFrame{}, err
	}
	return f, nil
}

func zero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
