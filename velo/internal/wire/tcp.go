package wire

import (
	"fmt"
	"net"
	"strconv"
)

// HelloMagic opens every TCP connection, so a stray client (an HTTP probe, a port scanner) is
// recognised at once and dropped instead of being read as a frame length.
var HelloMagic = [4]byte{'V', 'E', 'L', 'O'}

// HelloVersion is the TCP transport's wire version. A peer that speaks another one is refused
// during the hello with an error naming both versions. Version 2 added the authentication mode
// and the nonce, version 3 the control frames of the idle close (TCPControl).
const HelloVersion = 3

// HelloNonceLen is the length of the hello's nonce, fresh random bytes per connection: the
// challenge the other side's proof must cover, so a recorded proof never answers a new hello.
const HelloNonceLen = 16

// Hello is the first thing each side of a TCP connection writes. It names the sender so that a
// connection opened by either side can carry frames both ways, and carries the sender's own
// listening address so that the accepting side can reconnect after a loss.
type Hello struct {
	Version uint8
	// Auth is the sender's authentication mode (auth.Mode: 0 none, 1 cluster secret, 2 mutual
	// TLS); two sides that differ refuse each other.
	Auth        uint8
	Nonce       [HelloNonceLen]byte
	ID          uint64
	Incarnation uint64
	// MaxFrame is the largest frame the sender will read; the other side never sends more.
	MaxFrame uint32
	// Addr is the sender's TCP address blob (EncodeTCPAddr), empty when it does not listen.
	Addr []byte
}

// HelloFixedLen is the length of a hello up to and including the address length field; the
// reader reads this much, then the address.
const HelloFixedLen = 4 + 1 + 1 + HelloNonceLen + 8 + 8 + 4 + 2

// HelloMaxSize bounds a hello on the wire; a reader never reads more than this before it knows the
// peer.
const HelloMaxSize = HelloFixedLen + TCPAddrMaxLen

// HelloAuthMax is the largest authentication mode a hello may name.
const HelloAuthMax = 2

// AppendHello appends h's encoding (including the magic) to b.
func AppendHello(b []byte, h Hello) ([]byte, error) {
	w := writer{b: append(b, HelloMagic[:]...)}
	w.u8(h.Version)
	w.u8(h.Auth)
	w.b = append(w.b, h.Nonce[:]...)
	w.u64(h.ID)
	w.u64(h.Incarnation)
	w.u32(h.MaxFrame)
	w.bytes16("hello address", h.Addr)
	return w.b, w.err
}

// DecodeHello decodes one complete hello. It refuses a wrong magic or version.
func DecodeHello(b []byte) (Hello, error) {
	r := newReader("tcp hello", b)
	magic := r.take(4, "magic")
	if r.err == nil && string(magic) != string(HelloMagic[:]) {
		return Hello{}, fmt.Errorf("%w: tcp hello: bad magic %q: the peer is not a velo TCP transport", ErrMalformed, magic)
	}
	var h Hello
	h.Version = r.u8("version")
	if r.err == nil && h.Version != HelloVersion {
		return Hello{}, fmt.Errorf("%w: %w: tcp hello version %d, this build speaks %d: run the same velo release on both sides",
			ErrMalformed, ErrVersion, h.Version, HelloVersion)
	}
	h.Auth = r.u8("authentication mode")
	copy(h.Nonce[:], r.take(HelloNonceLen, "nonce"))
	h.ID = r.u64("instance id")
	h.Incarnation = r.u64("incarnation")
	h.MaxFrame = r.u32("max frame")
	h.Addr = r.bytes16("address")
	if err := r.done(); err != nil {
		return Hello{}, err
	}
	if h.ID == 0 {
		return Hello{}, fmt.Errorf("%w: tcp hello: instance id 0 is reserved", ErrMalformed)
	}
	if h.Auth > HelloAuthMax {
		return Hello{}, fmt.Errorf("%w: tcp hello: unknown authentication mode %d", ErrMalformed, h.Auth)
	}
	if len(h.Addr) > TCPAddrMaxLen {
		return Hello{}, fmt.Errorf("%w: tcp hello: address of %d bytes (limit %d)", ErrMalformed, len(h.Addr), TCPAddrMaxLen)
	}
	return h, nil
}

// AuthAccepted is the byte an acceptor writes after it verified the dialer's proof (cluster-secret
// mode): the dialer sends frames only after it, so a refused dialer learns it at once instead of
// at its first lost frame.
const AuthAccepted = 0xA5

// TCPAddrVersion is the version byte of the TCP transport's address blob.
const TCPAddrVersion = 1

// TCPAddrMaxLen bounds an encoded TCP address blob.
const TCPAddrMaxLen = 1 + 1 + 255

// EncodeTCPAddr encodes a host:port as the TCP transport's address blob.
func EncodeTCPAddr(hostPort string) ([]byte, error) {
	if _, _, err := SplitTCPAddr(hostPort); err != nil {
		return nil, err
	}
	w := writer{}
	w.u8(TCPAddrVersion)
	w.bytes8("tcp address", []byte(hostPort))
	return w.b, w.err
}

// DecodeTCPAddr decodes and validates a TCP address blob and returns its host:port.
func DecodeTCPAddr(b []byte) (string, error) {
	r := newReader("tcp address blob", b)
	v := r.u8("version")
	if r.err == nil && v != TCPAddrVersion {
		return "", fmt.Errorf("%w: %w: tcp address blob version %d, this build reads %d", ErrMalformed, ErrVersion, v, TCPAddrVersion)
	}
	hp := string(r.bytes8("host:port"))
	if err := r.done(); err != nil {
		return "", err
	}
	if _, _, err := SplitTCPAddr(hp); err != nil {
		return "", err
	}
	return hp, nil
}

// SplitTCPAddr checks that s is host:port with a non-empty host and a port in 1..65535.
func SplitTCPAddr(s string) (host string, port int, err error) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("%w: tcp address %q: %v", ErrMalformed, s, err)
	}
	if host == "" {
		return "", 0, fmt.Errorf("%w: tcp address %q has no host", ErrMalformed, s)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return "", 0, fmt.Errorf("%w: tcp address %q: port must be 1..65535", ErrMalformed, s)
	}
	return host, n, nil
}

// Control frames of the TCP transport.
//
// A frame's 4-byte length word never has its top bit set (a frame is at most 1 GiB), so a word
// with that bit set opens a control frame of the transport itself instead: the low bits are the
// length of its body, which TCPControl encodes. The runtime never sees one.
//
// They carry the idle close. A side that wants to close a connection nothing uses sends
// TCPGoodbye with the number of frames it has read from the other side on that connection, and
// sends nothing more on it until it is answered. The other side answers TCPGoodbyeAck when it
// sent exactly that many (nothing crossed the goodbye) and waits for nothing on the connection;
// from then on neither sends on it, and the side that asked closes it. Otherwise it answers
// TCPGoodbyeKeep, and both go on using the connection as before. A goodbye answered with an ack
// is an idle close, never a lost peer: the next frame either way opens a new connection.

// TCPControlBit marks a length word that opens a control frame.
const TCPControlBit = 1 << 31

// TCPControlMaxLen bounds a control frame's body; a reader refuses a longer one before reading it.
const TCPControlMaxLen = 64

// The kinds of control frame.
const (
	TCPGoodbye     = 1 // close this idle connection? Frames: the frames read from the other side
	TCPGoodbyeAck  = 2 // yes: nothing crossed, and neither side sends on it again
	TCPGoodbyeKeep = 3 // no: keep using it (a frame crossed the goodbye, or a call waits on it)
)

// TCPControl is a control frame's body.
type TCPControl struct {
	Kind uint8
	// Frames is, in a goodbye, how many frames its sender has read from the other side on the
	// connection; zero in the answers.
	Frames uint64
}

// AppendTCPControl appends c as a whole control frame, length word included, to b.
func AppendTCPControl(b []byte, c TCPControl) []byte {
	w := writer{b: b}
	w.u32(TCPControlBit | 9)
	w.u8(c.Kind)
	w.u64(c.Frames)
	return w.b
}

// DecodeTCPControl decodes a control frame's body (the bytes after its length word).
func DecodeTCPControl(b []byte) (TCPControl, error) {
	r := newReader("tcp control frame", b)
	c := TCPControl{Kind: r.u8("kind"), Frames: r.u64("frames")}
	if err := r.done(); err != nil {
		return TCPControl{}, err
	}
	if c.Kind < TCPGoodbye || c.Kind > TCPGoodbyeKeep {
		return TCPControl{}, fmt.Errorf("%w: tcp control frame of unknown kind %d", ErrMalformed, c.Kind)
	}
	return c, nil
}
