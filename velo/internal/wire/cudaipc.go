package wire

import (
	"encoding/binary"
	"fmt"
)

// The CUDA IPC channel of the same-host path (package transport/shm): a Unix stream socket
// between a consumer and an owner of one host, opened with the same handshake as the path's
// ring channels (credentials and, with a cluster secret, a proof each way), over which the
// consumer asks for the CUDA IPC export behind a device-memory key, says when its copy is done,
// and acknowledges the owner's notice that a key ended. Every frame is CUDAIPCFrameLen bytes,
// little-endian:
//
//	0    magic "VCI" and the kind (1 byte)
//	4    code (1 byte; an export's refusal, else 0), 3 bytes zero
//	8    request (4 bytes)
//	12   slot (4 bytes)
//	16   token (8 bytes)
//	24   allocation ID (8), allocation size (8), offset of the key's range in it (8), its length (8)
//	56   device UUID (16 bytes)
//	72   CUDA IPC memory handle (64 bytes)
//	136  key (32 bytes)
//	168  8 bytes zero
//
// A kind carries only its own fields; every other byte is zero, and a frame with anything else
// is refused (a peer of another version or a damaged stream closes the channel).

// CUDAIPCFrameLen is the size of every frame of the CUDA IPC channel.
const CUDAIPCFrameLen = 176

// Kinds of CUDA IPC frames.
const (
	// CUDAIPCOpen (consumer): the export behind Key, for request Req.
	CUDAIPCOpen = 'O'
	// CUDAIPCDone (consumer): the copy of request Req finished; the owner stops counting it.
	CUDAIPCDone = 'D'
	// CUDAIPCDropped (consumer): the consumer no longer uses the key of Slot and Token (it closed
	// the mapping, or other live keys still hold it).
	CUDAIPCDropped = 'K'
	// CUDAIPCExport (owner): the answer to request Req: Code 0 with the export (Slot, Token,
	// AllocID, AllocSize, Offset, Length, Device, Handle), or a refusal code alone.
	CUDAIPCExport = 'X'
	// CUDAIPCRevoked (owner): the key of Slot and Token ended and no read of it is under way;
	// the consumer answers CUDAIPCDropped once it no longer uses it.
	CUDAIPCRevoked = 'R'
)

var cudaIPCMagic = [3]byte{'V', 'C', 'I'}

// ErrCUDAIPCFrame is wrapped by every refusal of a CUDA IPC frame (and wraps ErrMalformed).
var ErrCUDAIPCFrame = fmt.Errorf("%w: CUDA IPC frame", ErrMalformed)

// CUDAIPCFrame is one frame of the CUDA IPC channel.
type CUDAIPCFrame struct {
	Kind      byte
	Code      byte
	Req       uint32
	Slot      uint32
	Token     uint64
	AllocID   uint64
	AllocSize uint64
	Offset    uint64
	Length    uint64
	Device    [16]byte
	Handle    [64]byte
	Key       [32]byte
}

// payload is f with the fields its kind carries zeroed: what must be zero.
func (f CUDAIPCFrame) payload() (CUDAIPCFrame, error) {
	rest := f
	rest.Kind = 0
	switch f.Kind {
	case CUDAIPCOpen:
		rest.Req, rest.Key = 0, [32]byte{}
	case CUDAIPCDone:
		rest.Req = 0
	case CUDAIPCDropped, CUDAIPCRevoked:
		rest.Slot, rest.Token = 0, 0
	case CUDAIPCExport:
		rest.Req, rest.Code = 0, 0
		if f.Code == 0 {
			if f.AllocSize == 0 || f.Length == 0 || f.Offset > f.AllocSize || f.Length > f.AllocSize-f.Offset {
				return rest, fmt.Errorf("%w: an export of %d bytes at %d of an allocation of %d", ErrCUDAIPCFrame, f.Length, f.Offset, f.AllocSize)
			}
			rest.Slot, rest.Token, rest.AllocID, rest.AllocSize, rest.Offset, rest.Length = 0, 0, 0, 0, 0, 0
			rest.Device, rest.Handle = [16]byte{}, [64]byte{}
		}
	default:
		return rest, fmt.Errorf("%w: kind %q", ErrCUDAIPCFrame, f.Kind)
	}
	return rest, nil
}

func (f CUDAIPCFrame) check() error {
	rest, err := f.payload()
	if err != nil {
		return err
	}
	if rest != (CUDAIPCFrame{}) {
		return fmt.Errorf("%w: a %q frame with fields its kind does not carry", ErrCUDAIPCFrame, f.Kind)
	}
	return nil
}

// AppendCUDAIPCFrame encodes f; a frame whose kind does not carry one of its fields is refused.
func AppendCUDAIPCFrame(b []byte, f CUDAIPCFrame) ([]byte, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	b = append(b, cudaIPCMagic[:]...)
	b = append(b, f.Kind, f.Code, 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, f.Req)
	b = binary.LittleEndian.AppendUint32(b, f.Slot)
	b = binary.LittleEndian.AppendUint64(b, f.Token)
	b = binary.LittleEndian.AppendUint64(b, f.AllocID)
	b = binary.LittleEndian.AppendUint64(b, f.AllocSize)
	b = binary.LittleEndian.AppendUint64(b, f.Offset)
	b = binary.LittleEndian.AppendUint64(b, f.Length)
	b = append(b, f.Device[:]...)
	b = append(b, f.Handle[:]...)
	b = append(b, f.Key[:]...)
	return append(b, make([]byte, 8)...), nil
}

// DecodeCUDAIPCFrame decodes one frame of exactly CUDAIPCFrameLen bytes.
func DecodeCUDAIPCFrame(b []byte) (CUDAIPCFrame, error) {
	if len(b) != CUDAIPCFrameLen {
		return CUDAIPCFrame{}, fmt.Errorf("%w: %d bytes, want %d", ErrCUDAIPCFrame, len(b), CUDAIPCFrameLen)
	}
	if [3]byte(b[:3]) != cudaIPCMagic {
		return CUDAIPCFrame{}, fmt.Errorf("%w: magic %x", ErrCUDAIPCFrame, b[:3])
	}
	if b[5]|b[6]|b[7] != 0 || binary.LittleEndian.Uint64(b[168:]) != 0 {
		return CUDAIPCFrame{}, fmt.Errorf("%w: reserved bytes not zero", ErrCUDAIPCFrame)
	}
	f := CUDAIPCFrame{Kind: b[3], Code: b[4], Req: binary.LittleEndian.Uint32(b[8:]), Slot: binary.LittleEndian.Uint32(b[12:]),
		Token: binary.LittleEndian.Uint64(b[16:]), AllocID: binary.LittleEndian.Uint64(b[24:]), AllocSize: binary.LittleEndian.Uint64(b[32:]),
		Offset: binary.LittleEndian.Uint64(b[40:]), Length: binary.LittleEndian.Uint64(b[48:])}
	copy(f.Device[:], b[56:72])
	copy(f.Handle[:], b[72:136])
	copy(f.Key[:], b[136:168])
	if err := f.check(); err != nil {
		return CUDAIPCFrame{}, err
	}
	return f, nil
}
