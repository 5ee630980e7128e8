//go:build linux

package shm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/velo/transport"
)

// Name is the transport's name in a PeerInfo, and the RMA backend name of its reads.
const Name = "shm"

// DirEnv names the directory of the owners' sockets when Config.Dir is empty.
const DirEnv = "VELO_SHM_DIR"

// HostIDEnv overrides the host identity when Config.HostID is empty: two instances whose values
// differ never take the same-host path, whatever else they share.
const HostIDEnv = "VELO_SHM_HOST_ID"

// Defaults.
const (
	DefaultChunkSize    = 1 << 20
	DefaultSlots        = 4
	DefaultConnsPerPeer = 4
	probeTimeout        = 5 * time.Second
)

// Config configures the same-host transport. The zero value is usable.
type Config struct {
	// Dir is the directory of this instance's socket. It is created with mode 0700 when missing,
	// and refused when it exists with a looser mode or another owner. Default: $VELO_SHM_DIR, else
	// $XDG_RUNTIME_DIR/velo, else <os.TempDir()>/velo-<uid>.
	Dir string
	// HostID names the host; only instances with the same HostID take the path to each other.
	// Default: $VELO_SHM_HOST_ID, else the kernel's boot_id (/proc/sys/kernel/random/boot_id),
	// which differs between two machines and between two boots of one.
	HostID string
	// AllowUIDs are user IDs besides this process's own whose processes may read through this
	// instance's socket (and serve this instance's reads). Leave it empty to allow only the
	// process's own uid.
	AllowUIDs []int
	// ChunkSize is the size of each ring buffer of a channel (default 1 MiB).
	ChunkSize int
	// Slots is the number of ring buffers of a channel (default 4, at least 2, at most 64): one
	// side fills a buffer while the other copies the ones before it out, so a large read or
	// write copies twice at once, not one after the other. A channel maps Slots*ChunkSize bytes
	// in both processes.
	Slots int
	// ConnsPerPeer bounds the channels this instance opens to one owner, so reads in flight to it
	// (default 4).
	ConnsPerPeer int
	// SingleCopyMin, when positive, is the size from which a payload staged in pinned memory
	// (StageDataPinned) lives in a sealed memfd of its own, which a consumer on this path reads
	// with one copy instead of two through the ring; 0 (the default) stages none. A read of such a
	// payload pays from about 1 MiB, but making the file costs more than an arena's slot (fresh
	// pages for every payload, where an arena's are reused): it pays for payloads read more than
	// once (docs/performance.md). A consumer reads such payloads whatever its own setting, and is
	// handed a read-only descriptor of that payload's file: see docs/architecture.md, "One copy
	// for a payload of its own".
	SingleCopyMin int
}

// Transport is one instance's same-host path: the owner's socket and registrations, and the
// consumer's channels to the owners of its host. All methods are safe for concurrent use.
type Transport struct {
	cfg    Config
	dir    string
	sock   string
	hostID string
	uid    int
	allow  map[int]bool

	host transport.Host
	gate transport.AuthGate
	log  *slog.Logger
	ln   *net.UnixListener

	mu      sync.Mutex
	started bool
	closed  bool
	peers   map[transport.InstanceID]*peer
	regs    map[uint32]*registration
	nextReg uint32
	inbound map[*serverConn]struct{}
	files   map[uintptr]*payloadFile // payloads of their own file, by address (payload.go)
	// hugeFiles counts the live payload files in huge pages (payload.go).
	hugeFiles int
	cuda      cudaState // device memory by CUDA IPC (cudaipc.go)
	stop      chan struct{}
	wg        sync.WaitGroup

	// Single-copy reads served to consumers as owner, and made as consumer (payload.go).
	fileServed, fileRead atomic.Uint64
	ringOnly             bool // the consumer asks for no file answers, as a release before them (tests)
	// Test seams of the consumer's file reads (fileReads): fileHook sees each descriptor a file
	// answer brought before it is read; copyByMap copies out of a mapping instead of by pread.
	fileHook  func(fd int)
	copyByMap bool
}

// peer is what the consumer side knows of an owner.
type peer struct {
	id      transport.InstanceID
	inc     uint64
	sock    string
	same    bool   // the owner's host identity is ours
	why     string // why the path is not taken (empty once a channel worked)
	ready   bool   // a channel was opened and proven
	probing bool   // a reprobe is under way
	idle    []*clientConn
	open    int
	waitCh  chan struct{} // closed and replaced when a channel goes idle or closes
}

var (
	_ transport.Transport      = (*Transport)(nil)
	_ transport.RMA            = (*Transport)(nil)
	_ transport.PeerRegisterer = (*Transport)(nil)
)

// New creates the transport: it checks (and creates) the socket directory and reads the host
// identity, and listens once Start is called.
func New(cfg Config) (*Transport, error) {
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	if cfg.ChunkSize < 4096 || cfg.ChunkSize > 256<<20 || cfg.ChunkSize%4096 != 0 {
		return nil, fmt.Errorf("shm: ChunkSize %d: want a multiple of 4096 between 4 KiB and 256 MiB", cfg.ChunkSize)
	}
	if cfg.Slots == 0 {
		cfg.Slots = DefaultSlots
	}
	if cfg.Slots < 2 || cfg.Slots > maxSlots {
		return nil, fmt.Errorf("shm: Slots %d: want between 2 and %d", cfg.Slots, maxSlots)
	}
	if cfg.ConnsPerPeer == 0 {
		cfg.ConnsPerPeer = DefaultConnsPerPeer
	}
	if cfg.ConnsPerPeer < 0 {
		return nil, fmt.Errorf("shm: ConnsPerPeer %d is negative", cfg.ConnsPerPeer)
	}
	if cfg.SingleCopyMin < 0 {
		return nil, fmt.Errorf("shm: SingleCopyMin %d is negative: want a size in bytes, or 0 for no single-copy payloads", cfg.SingleCopyMin)
	}
	t := &Transport{cfg: cfg, uid: os.Getuid(), allow: map[int]bool{}, peers: map[transport.InstanceID]*peer{},
		regs: map[uint32]*registration{}, inbound: map[*serverConn]struct{}{}, files: map[uintptr]*payloadFile{}, stop: make(chan struct{})}
	t.allow[t.uid] = true
	for _, u := range cfg.AllowUIDs {
		if u < 0 {
			return nil, fmt.Errorf("shm: AllowUIDs: uid %d is negative", u)
		}
		t.allow[u] = true
	}
	dir, err := socketDir(cfg.Dir, t.uid)
	if err != nil {
		return nil, err
	}
	// A socket's path must fit sockaddr_un (108 bytes with its NUL); the name is 16 hex digits of
	// the instance, a dash, 16 of a nonce and ".sock".
	if n := len(dir) + len("/0123456789abcdef-0123456789abcdef.sock"); n > 107 {
		return nil, fmt.Errorf("shm: socket directory %s is too long for a Unix socket path (%d bytes with the socket's name, at most 107): set Config.Dir or %s to a shorter directory", dir, n, DirEnv)
	}
	t.dir = dir
	if t.hostID, err = hostID(cfg.HostID); err != nil {
		return nil, err
	}
	return t, nil
}

// socketDir is the directory of the socket, created 0700 when missing and refused when another
// user owns it or others may enter it (another user could then replace the socket).
func socketDir(dir string, uid int) (string, error) {
	if dir == "" {
		dir = os.Getenv(DirEnv)
	}
	if dir == "" {
		if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
			dir = filepath.Join(x, "velo")
		} else {
			dir = filepath.Join(os.TempDir(), "velo-"+strconv.Itoa(uid))
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("shm: socket directory %s: %w (set Config.Dir or %s to a directory this user may create)", dir, err, DirEnv)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("shm: socket directory %s: %w", dir, err)
	}
	if err := checkDirOwner(fi, uid); err != nil {
		return "", fmt.Errorf("shm: socket directory %s: %w", dir, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("shm: socket directory %s has mode %v: others could replace the socket; chmod 700 it, or set Config.Dir or %s to a private directory", dir, fi.Mode().Perm(), DirEnv)
	}
	return dir, nil
}

// hostID is the configured identity, or the kernel's boot_id.
func hostID(id string) (string, error) {
	if id == "" {
		id = os.Getenv(HostIDEnv)
	}
	if id != "" {
		if len(id) > 255 {
			return "", fmt.Errorf("shm: HostID of %d bytes: at most 255", len(id))
		}
		return id, nil
	}
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("shm: reading the host identity: %w (set Config.HostID or %s)", err, HostIDEnv)
	}
	return "boot:" + strings.TrimSpace(string(b)), nil
}

// Name implements transport.Transport: "shm".
func (t *Transport) Name() string { return Name }

// RMABackend implements transport.RMA: "shm".
func (t *Transport) RMABackend() string { return Name }

// MaxFrameSize implements transport.Transport: 0, no message goes this way.
func (t *Transport) MaxFrameSize() int { return 0 }

// Reaches implements transport.Transport: false, the transport carries no messages.
func (t *Transport) Reaches(transport.InstanceID) bool { return false }

// Send implements transport.Transport: it always fails; the runtime never picks this transport
// for a message since it reaches no peer.
func (t *Transport) Send(context.Context, transport.InstanceID, ...[]byte) error {
	return fmt.Errorf("shm: %w: the same-host transport carries no messages", transport.ErrUnknownPeer)
}

// SocketPath is the path of this instance's socket (empty before Start).
func (t *Transport) SocketPath() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sock
}

// HostID is the host identity this instance publishes.
func (t *Transport) HostID() string { return t.hostID }

// Start implements transport.Transport: it listens on a socket of its own in the directory.
func (t *Transport) Start(h transport.Host) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.started {
		return errors.New("shm: Start called twice")
	}
	t.host, t.log = h, h.Logger()
	if g, ok := h.(transport.AuthGate); ok {
		t.gate = g
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	t.sock = filepath.Join(t.dir, fmt.Sprintf("%016x-%x.sock", uint64(h.LocalID()), nonce))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: t.sock, Net: "unix"})
	if err != nil {
		return fmt.Errorf("shm: listening on %s: %w", t.sock, err)
	}
	// The directory keeps other users out; the mode is a second fence on file systems that
	// honour it on sockets.
	if err := os.Chmod(t.sock, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("shm: chmod %s: %w", t.sock, err)
	}
	ln.SetUnlinkOnClose(true)
	t.ln, t.started = ln, true
	t.wg.Add(1)
	go t.accept()
	return nil
}

// address blob: version 1, then the host identity and the socket path, each with a 2-byte length.
const addrVersion = 1

// Address implements transport.Transport.
func (t *Transport) Address() []byte {
	b := []byte{addrVersion}
	b = binary.BigEndian.AppendUint16(b, uint16(len(t.hostID)))
	b = append(b, t.hostID...)
	s := t.SocketPath()
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func parseAddress(b []byte) (host, sock string, err error) {
	if len(b) < 1 || b[0] != addrVersion {
		return "", "", fmt.Errorf("%w: shm address version %v, this build speaks %d", transport.ErrInvalidEndpoint, firstByte(b), addrVersion)
	}
	b = b[1:]
	field := func() (string, bool) {
		if len(b) < 2 {
			return "", false
		}
		n := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+n {
			return "", false
		}
		s := string(b[2 : 2+n])
		b = b[2+n:]
		return s, true
	}
	host, ok1 := field()
	sock, ok2 := field()
	if !ok1 || !ok2 || len(b) != 0 || host == "" || sock == "" {
		return "", "", fmt.Errorf("%w: truncated or malformed shm address", transport.ErrInvalidEndpoint)
	}
	return host, sock, nil
}

func firstByte(b []byte) any {
	if len(b) == 0 {
		return "none"
	}
	return b[0]
}

// AddPeer implements transport.Transport. An owner on another host is recorded and never read
// from (no error: the peer keeps its other transports and its PeerInfo is not at fault); one on
// this host is probed at once, on a goroutine, by opening a channel to it.
func (t *Transport) AddPeer(ctx context.Context, pa transport.PeerAddress) error {
	host, sock, err := parseAddress(pa.Blob)
	if err != nil {
		return fmt.Errorf("shm: peer %016x: %w", uint64(pa.ID), err)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return fmt.Errorf("shm: AddPeer: %w", transport.ErrClosed)
	}
	old := t.peers[pa.ID]
	if old != nil && old.inc == pa.Incarnation && old.sock == sock && old.same == (host == t.hostID) {
		t.mu.Unlock()
		return nil
	}
	p := &peer{id: pa.ID, inc: pa.Incarnation, sock: sock, same: host == t.hostID, waitCh: make(chan struct{})}
	if !p.same {
		p.why = "another host (host identity " + host + ")"
	} else {
		p.why = "probing"
	}
	t.peers[pa.ID] = p
	t.mu.Unlock()
	if old != nil {
		t.dropPeer(old)
	}
	if p.same {
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
			defer cancel()
			c, err := t.take(ctx, p)
			if err != nil {
				t.log.Info("shm: the same-host path to a peer is not taken", "peer", pa.ID, "err", err)
				return
			}
			t.put(p, c, true)
			t.openCUDAChannel(ctx, p)
		}()
	}
	return nil
}

// RemovePeer implements transport.Transport: the peer's channels close.
func (t *Transport) RemovePeer(id transport.InstanceID) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	t.mu.Unlock()
	if p != nil {
		t.dropPeer(p)
	}
}

// dropPeer closes the idle channels of a peer that is no longer in the table; channels in use
// close when their read returns.
func (t *Transport) dropPeer(p *peer) {
	t.mu.Lock()
	idle := p.idle
	p.idle = nil
	t.mu.Unlock()
	for _, c := range idle {
		c.close()
	}
	t.dropCUDAClient(p)
}

// CanGet implements transport.RMA: a channel to the owner was opened and proven.
func (t *Transport) CanGet(id transport.InstanceID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peers[id]
	return !t.closed && p != nil && p.ready
}

// Serves reports whether consumer has an open, proven channel to this instance: the owner then
// registers the consumer's leases here (Route).
func (t *Transport) Serves(consumer transport.InstanceID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	for c := range t.inbound {
		if c.peer == consumer {
			return true
		}
	}
	return false
}

// PathTo says whether reads from owner take this path, and why not.
func (t *Transport) PathTo(owner transport.InstanceID) (bool, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peers[owner]
	if p == nil {
		return false, "the peer published no shm address"
	}
	return p.ready, p.why
}

// Endpoints is the number of channels to and from peer (the introspection page's endpoints column).
func (t *Transport) Endpoints(id transport.InstanceID) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	if p := t.peers[id]; p != nil {
		n += p.open
	}
	for c := range t.inbound {
		if c.peer == id {
			n++
		}
	}
	return n
}

// Describe is the transport's settings for the introspection page.
func (t *Transport) Describe() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var same, ready []string
	for id, p := range t.peers {
		if p.ready {
			ready = append(ready, id.String())
		} else if p.same {
			same = append(same, id.String()+" ("+p.why+")")
		}
	}
	sort.Strings(ready)
	sort.Strings(same)
	d := map[string]string{
		"socket": t.sock, "host": t.hostID, "chunk": strconv.Itoa(t.cfg.ChunkSize), "slots": strconv.Itoa(t.cfg.Slots),
		"peers": strings.Join(ready, ","), "not_taken": strings.Join(same, ","),
		"single_copy_min": strconv.Itoa(t.cfg.SingleCopyMin), "payload_files": strconv.Itoa(len(t.files)), "payload_files_huge": strconv.Itoa(t.hugeFiles),
		"single_copy_served": strconv.FormatUint(t.fileServed.Load(), 10), "single_copy_reads": strconv.FormatUint(t.fileRead.Load(), 10),
	}
	t.describeCUDA(d)
	return d
}

// HealthReasons names the peers on this host that publish the path but could not be probed:
// their reads go through the network stack.
func (t *Transport) HealthReasons() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, why := 0, ""
	for _, p := range t.peers {
		if p.same && !p.ready && p.why != "probing" {
			n, why = n+1, p.why
		}
	}
	if n == 0 {
		return nil
	}
	return []string{fmt.Sprintf("no same-host path to %d peers on this host (e.g. %s): their reads go over UCX", n, why)}
}

// ForceClosePeer implements transport.RMA: every channel from and to peer closes, which ends a
// read the owner is serving to it at once (its registration's Dead follows).
func (t *Transport) ForceClosePeer(id transport.InstanceID) error {
	t.mu.Lock()
	var in []*serverConn
	for c := range t.inbound {
		if c.peer == id {
			in = append(in, c)
		}
	}
	var idle []*clientConn
	if p := t.peers[id]; p != nil {
		idle, p.idle = p.idle, nil
		p.open -= len(idle)
		t.signal(p)
	}
	t.mu.Unlock()
	for _, c := range in {
		c.close()
	}
	for _, c := range idle {
		c.close()
	}
	if len(in) > 0 {
		t.log.Warn("shm: closed every channel of an unresponsive consumer", "peer", id, "channels", len(in))
	}
	return nil
}

// Close implements transport.Transport: the socket is removed, every channel closes, and every
// registration is dead once its reads returned.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.stop)
	ln := t.ln
	var in []*serverConn
	for c := range t.inbound {
		in = append(in, c)
	}
	var idle []*clientConn
	for _, p := range t.peers {
		idle = append(idle, p.idle...)
		p.idle = nil
		close(p.waitCh)
		p.waitCh = make(chan struct{})
	}
	regs := make([]*registration, 0, len(t.regs))
	for _, r := range t.regs {
		regs = append(regs, r)
	}
	t.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, c := range in {
		c.close()
	}
	for _, c := range idle {
		c.close()
	}
	t.closeCUDA()
	t.wg.Wait()
	for _, r := range regs {
		r.revokeNow()
	}
	return nil
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// equalHost is the consumer's check of the owner's identity in its greeting.
func (t *Transport) equalHost(h []byte) bool { return bytes.Equal(h, []byte(t.hostID)) }
