//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/velo/transport"
)

// The channel speaks two phases on one Unix stream socket. The handshake exchanges frames of a
// 2-byte length and a body: the owner's greeting (its identity, incarnation, host identity and a
// nonce), the consumer's hello (its identity, both incarnations, both nonces and its proof), and
// the owner's answer (the size and number of the ring's buffers, its proof, and the ring's memfd
// as SCM_RIGHTS).
// Reads then exchange fixed frames of frameLen bytes, little-endian:
//
//	read   'R' _ flags _ | key [4:36] | offset [36:44] | length [44:52] | request [52:56]
//	chunk  'C' buffer flags _ | length [4:8] | offset in the buffer [8:12] | request [12:16]
//	error  'E' code _ _ | request [12:16]
//	free   'F' buffer
//	write  'W' buffer _ _ | key [4:36] | offset [36:44] | length [44:52] | request [52:56]
//	ack    'A' buffer code _ | request [12:16]
//	file   'M' version _ _ | request [12:16] | offset [16:24] | length [24:32] | file size [32:40]
//	done   'D' version _ _ | request [12:16]
//
// (The file and done frames of a single-copy read are wire.SHMFileFrame, payload.go.)
//
// A consumer sends a batch of read frames at once, the last flagged flagLast. The owner answers
// each request in order with its pieces (chunk frames) or one error frame, packing pieces of
// several requests into the buffer it fills; it hands a buffer over (flagHandOver on a chunk
// frame) when the buffer is full or the batch ends, and fills the next one (the buffers are used
// in turn) once the consumer gave it back with a free frame. With four buffers the owner runs up
// to three ahead of the consumer's copies.
//
// A write (push) goes the other way on a channel with no read under way: the writer copies a
// piece of at most one buffer into the start of a buffer and sends a write frame naming it; the
// owner checks the key (a live write registration made for this writer) and the range, copies
// the piece into the registration, and answers with an ack frame (code 0, or why it refused),
// which gives the buffer back. The writer fills the next buffers meanwhile, so the two copies
// overlap.

const (
	frameLen = 64
	keyLen   = 32
	maxSlots = 64 // ring buffers of a channel, at most

	frameRead  = 'R'
	frameChunk = 'C'
	frameFree  = 'F'
	frameError = 'E'
	frameWrite = 'W'
	frameAck   = 'A'

	// Flags (byte 2). flagLast marks a batch's last request: the owner hands the ring buffer
	// over after serving it. flagHandOver marks a chunk frame whose buffer the consumer gives
	// back (a free frame) once it copied the buffer's pieces out; a chunk frame of no bytes may
	// carry it alone.
	flagLast     = 1
	flagHandOver = 1
	// flagFile (byte 2 of a read frame) says the consumer takes a file answer (payload.go,
	// wire.SHMFileFrame of version 1) for this read. An owner without single-copy reads ignores
	// the bit and answers through the ring, so the two builds keep reading from each other; a
	// later version of the file frame takes a flag of its own, so an owner never sends a consumer
	// a version it did not ask for.
	flagFile = 2
)

var (
	keyMagic      = [4]byte{'V', 'S', 'H', 1}
	greetMagic    = [4]byte{'V', 'S', 'H', 'O'}
	helloMagic    = [4]byte{'V', 'S', 'H', 'C'}
	acceptMagic   = [4]byte{'V', 'S', 'H', 'A'}
	helloDomain   = []byte("velo-shm-hello\x00")
	acceptDomain  = []byte("velo-shm-accept\x00")
	errProtocol   = errors.New("shm: protocol error")
	errKeyRefused = errors.New("the owner refused the key")
)

// Error codes of an error frame.
const (
	codeRevoked  = 1 // no live registration has that slot and token
	codeRange    = 2 // the read is outside the key's range
	codeNotYours = 3 // the registration was made for another consumer
	codeClosing  = 4 // the owner is closing
	codeAccess   = 5 // a read through a write key, or a write through a read key
)

func codeErr(code byte) error {
	switch code {
	case codeRevoked:
		return fmt.Errorf("%w: %w: the registration was revoked or never issued", errKeyRefused, transport.ErrKeyRevoked)
	case codeRange:
		return fmt.Errorf("%w: the read is outside the key's range", errKeyRefused)
	case codeNotYours:
		return fmt.Errorf("%w: the key was issued to another consumer", errKeyRefused)
	case codeClosing:
		return fmt.Errorf("shm: %w: the owner is closing", transport.ErrPeerUnreachable)
	case codeAccess:
		return fmt.Errorf("%w: the key does not allow this access (a read through a write grant's key, or a write through a lease's)", errKeyRefused)
	}
	return fmt.Errorf("%w: error code %d", errProtocol, code)
}

// key is a registration's key: slot and token name the registration, base and length the part
// of it the key reaches.
type key struct {
	slot   uint32
	token  uint64
	base   uint64
	length uint64
}

func (k key) append(b []byte) []byte {
	b = append(b, keyMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, k.slot)
	b = binary.LittleEndian.AppendUint64(b, k.token)
	b = binary.LittleEndian.AppendUint64(b, k.base)
	return binary.LittleEndian.AppendUint64(b, k.length)
}

// IsKey reports whether b has the form of this transport's keys (Route sends those reads here).
// A UCX key starts with another magic, so the two never meet.
func IsKey(b []byte) bool { return len(b) == keyLen && [4]byte(b[:4]) == keyMagic }

func parseKey(b []byte) (key, error) {
	if !IsKey(b) {
		return key{}, fmt.Errorf("shm: a key of %d bytes that is not a same-host key", len(b))
	}
	k := key{slot: binary.LittleEndian.Uint32(b[4:]), token: binary.LittleEndian.Uint64(b[8:]),
		base: binary.LittleEndian.Uint64(b[16:]), length: binary.LittleEndian.Uint64(b[24:])}
	if k.base+k.length < k.base {
		return key{}, fmt.Errorf("shm: a key whose range wraps")
	}
	return k, nil
}

// writeMsg writes one handshake frame, with fd as SCM_RIGHTS when fd >= 0.
func writeMsg(c *net.UnixConn, body []byte, fd int) error {
	b := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(body)), uint16(len(body)))
	b = append(b, body...)
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	n, _, err := c.WriteMsgUnix(b, oob, nil)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	return err
}

// readMsg reads one handshake frame of at most max bytes, and the fd that came with it (-1 when
// none). Any other descriptor that came along is closed.
func readMsg(c *net.UnixConn, max int) ([]byte, int, error) {
	var hdr [2]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.ReadMsgUnix(hdr[:], oob)
	fd := -1
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr == nil {
			for _, m := range msgs {
				fds, ferr := unix.ParseUnixRights(&m)
				if ferr != nil {
					continue
				}
				for _, f := range fds {
					if fd < 0 {
						fd = f
					} else {
						unix.Close(f)
					}
				}
			}
		}
	}
	closeFD := func() {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	if err != nil {
		closeFD()
		return nil, -1, err
	}
	if n < 2 {
		if _, err := io.ReadFull(c, hdr[n:]); err != nil {
			closeFD()
			return nil, -1, err
		}
	}
	size := int(binary.BigEndian.Uint16(hdr[:]))
	if size > max {
		closeFD()
		return nil, -1, fmt.Errorf("%w: a handshake frame of %d bytes (at most %d)", errProtocol, size, max)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c, body); err != nil {
		closeFD()
		return nil, -1, err
	}
	return body, fd, nil
}

// peerUID is the uid of the process at the other end of c (SO_PEERCRED: what it was when it
// connected or listened).
func peerUID(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, cerr
	}
	return int(cred.Uid), nil
}

// mapRing maps size bytes of the memfd fd shared.
func mapRing(fd, size, prot int) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size != int64(size) {
		return nil, fmt.Errorf("%w: a ring of %d bytes, want %d", errProtocol, st.Size, size)
	}
	return unix.Mmap(fd, 0, size, prot, unix.MAP_SHARED)
}
