package main

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// observer reads every packet on the loopback interface with a packet socket (root, or
// CAP_NET_RAW): what a process that can watch the fabric sees. It learns the frames an
// authenticated peer sends to the victim (their epochs and sequence numbers, which the frame
// header carries in the clear) and counts packets that carry the victim's secret marker, so a
// read that succeeded is seen on the wire whoever received it.
type observer struct {
	mu     sync.Mutex
	pids   []int  // the processes whose listening ports the kernel filter passes
	needle []byte // incarnation and instance ID of the watched peer, as a frame header starts
	marker []byte // the secret bytes to watch for
	// epochs are the watched peer's frames by the TCP port that sent them: the attacker's own
	// forgeries cross the same wire, and observed leaves out the ports that are its own.
	epochs map[uint16]map[uint32]*epochSeen
	// sniffed are the guarded GET reads (slot, token, address, length: a live key and its
	// range) seen in requests on the wire, by the TCP port that sent them.
	sniffed map[uint16]map[guardRead]bool
	leaks   int
	sample  string
	packets int
	drops   uint64 // packets the kernel dropped for want of room in the socket's buffer
	fd      int
	err     error
	stop    chan struct{}
	done    chan struct{}
}

type epochSeen struct {
	MaxSeq uint64 `json:"max_seq"` // the highest data seq seen on the epoch
	Frames int    `json:"frames"`  // frames seen (each packet on lo is seen going out and coming in)
	Hello  bool   `json:"hello"`
	Fin    bool   `json:"fin"`
}

// observeStart starts the packet socket; it watches for the bytes c.Marker until the process
// ends, and for a peer's frames once watch names the peer.
func (a *attacker) observeStart(c cmd) (map[string]any, error) {
	if a.obs != nil {
		return nil, errors.New("observe_start: already observing")
	}
	marker, err := hex.DecodeString(c.Marker)
	if err != nil || len(marker) == 0 {
		return nil, errors.New("observe_start: marker: want hex bytes")
	}
	lo, err := loopback()
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return map[string]any{"observing": false, "why": fmt.Sprintf("a packet socket needs root or CAP_NET_RAW: %v", err)}, nil
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: lo.Index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("observe_start: binding the packet socket to %s: %w", lo.Name, err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 16<<20)
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	o := &observer{marker: []byte(hex.EncodeToString(marker)), epochs: map[uint16]map[uint32]*epochSeen{}, sniffed: map[uint16]map[guardRead]bool{},
		stop: make(chan struct{}), done: make(chan struct{})}
	o.fd = fd
	go o.run(fd)
	a.obs = o
	return map[string]any{"observing": true, "interface": lo.Name}, nil
}

// watch names the peer whose frames the observer follows (its instance ID and incarnation, the
// first 16 bytes of every frame header it sends) and the processes whose traffic it watches
// (c.Pids, and this one): from then on the kernel hands it only packets to or from their
// listening ports (filter.go).
func (a *attacker) watch(c cmd) (map[string]any, error) {
	inc, err1 := strconv.ParseUint(c.Inc, 16, 64)
	sender, err2 := strconv.ParseUint(c.Sender, 16, 64)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("watch: sender and inc in hex: %w", err)
	}
	if a.obs == nil {
		return nil, errors.New("watch: observe_start first")
	}
	needle := binary.BigEndian.AppendUint64(nil, inc)
	needle = binary.BigEndian.AppendUint64(needle, sender)
	a.obs.mu.Lock()
	a.obs.needle, a.obs.epochs, a.obs.pids = needle, map[uint16]map[uint32]*epochSeen{}, c.Pids
	a.obs.mu.Unlock()
	ports, err := a.obs.filter()
	if err != nil {
		return nil, err
	}
	return map[string]any{"ok": true, "ports": ports}, nil
}

// filter attaches the port filter for the watched processes' listening ports and this
// process's own (its UCX interfaces exist once it connected: connect calls it again).
func (o *observer) filter() ([]uint16, error) {
	o.mu.Lock()
	pids := append([]int{os.Getpid()}, o.pids...)
	o.mu.Unlock()
	seen := map[uint16]bool{}
	var ports []uint16
	for _, pid := range pids {
		for _, s := range sockets(pid) {
			if s.listening && !seen[uint16(s.port)] {
				seen[uint16(s.port)] = true
				ports = append(ports, uint16(s.port))
			}
		}
	}
	if len(o.pids) == 0 || len(ports) == 0 || len(ports) > 48 {
		ports = nil // nothing to go by, or more than the filter's jumps reach: every packet
	}
	prog := portFilter(ports)
	if err := unix.SetsockoptSockFprog(o.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}); err != nil {
		return nil, fmt.Errorf("observer: attaching the port filter: %w", err)
	}
	// Drops before the filter were of anyone's traffic: from here on they are of the watched
	// processes' (reading the statistics resets them).
	_, _ = unix.GetsockoptTpacketStats(o.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	return ports, nil
}

// ownPorts are the local ports of this process's TCP sockets (its UCX connections among them).
func ownPorts() map[uint16]bool {
	out := map[uint16]bool{}
	for _, s := range sockets(os.Getpid()) {
		out[uint16(s.port)] = true
	}
	return out
}

func loopback() (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for i := range ifs {
		if ifs[i].Flags&net.FlagLoopback != 0 {
			return &ifs[i], nil
		}
	}
	return nil, errors.New("no loopback interface")
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (o *observer) run(fd int) {
	defer close(o.done)
	defer unix.Close(fd)
	buf := make([]byte, 1<<17)
	for {
		select {
		case <-o.stop:
			return
		default:
		}
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			o.mu.Lock()
			o.err = err
			o.mu.Unlock()
			return
		}
		if p, src := tcpPayload(buf[:n]); len(p) > 0 {
			o.look(p, src)
		}
	}
}

// tcpPayload is the TCP payload of an IPv4 or IPv6 packet (without extension headers) and its
// source port, or nil.
func tcpPayload(b []byte) ([]byte, uint16) {
	if len(b) < 20 {
		return nil, 0
	}
	var tcp []byte
	switch b[0] >> 4 {
	case 4:
		ihl := int(b[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(b[2:]))
		if b[9] != unix.IPPROTO_TCP || ihl < 20 || total > len(b) || total < ihl {
			return nil, 0
		}
		tcp = b[ihl:total]
	case 6:
		if len(b) < 40 || b[6] != unix.IPPROTO_TCP {
			return nil, 0
		}
		tcp = b[40:min(len(b), 40+int(binary.BigEndian.Uint16(b[4:])))]
	default:
		return nil, 0
	}
	if len(tcp) < 20 {
		return nil, 0
	}
	off := int(tcp[12]>>4) * 4
	if off < 20 || off > len(tcp) {
		return nil, 0
	}
	return tcp[off:], binary.BigEndian.Uint16(tcp)
}

func (o *observer) look(p []byte, src uint16) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.packets++
	if i := bytes.Index(p, o.marker); i >= 0 {
		o.leaks++
		if o.sample == "" {
			o.sample = fmt.Sprintf("%q", p[max(0, i-16):min(len(p), i+len(o.marker)+16)])
		}
	}
	o.sniff(p, src)
	for rest := p; o.needle != nil; {
		i := bytes.Index(rest, o.needle)
		if i < 0 {
			return
		}
		h := rest[i:]
		rest = rest[i+1:]
		if len(h) < frameHeaderLen {
			continue
		}
		kind, flags := h[16], h[17]
		epoch, seq := binary.BigEndian.Uint32(h[20:]), binary.BigEndian.Uint64(h[24:])
		if kind > kindFin || h[18]&^headerSealed != 0 || h[19] != 0 || epoch == 0 || epoch > 1<<20 || (kind != kindFin && flags != 0) {
			continue // the same bytes elsewhere (an address blob names the incarnation too)
		}
		byEpoch := o.epochs[src]
		if byEpoch == nil {
			byEpoch = map[uint32]*epochSeen{}
			o.epochs[src] = byEpoch
		}
		e := byEpoch[epoch]
		if e == nil {
			e = &epochSeen{}
			byEpoch[epoch] = e
		}
		e.Frames++
		switch kind {
		case kindData:
			e.MaxSeq = max(e.MaxSeq, seq)
		case kindHello:
			e.Hello = true
		case kindFin:
			e.Fin = true
		}
	}
}

// sniff takes the reads of every guarded GET request in p, single or vectored: what the request
// carries in the clear, a live key's slot and token and the range it reads.
func (o *observer) sniff(p []byte, src uint16) {
	add := func(r guardRead) {
		if r.Len == 0 || r.Len > 1<<30 {
			return // the magic's bytes elsewhere
		}
		m := o.sniffed[src]
		if m == nil {
			m = map[guardRead]bool{}
			o.sniffed[src] = m
		}
		m[r] = true
	}
	single := binary.LittleEndian.AppendUint32(nil, guardMagic)
	for rest := p; ; {
		i := bytes.Index(rest, single)
		if i < 0 || len(rest[i:]) < guardReqLen {
			break
		}
		h := rest[i:]
		add(guardRead{Slot: binary.LittleEndian.Uint32(h[4:]), Token: binary.LittleEndian.Uint64(h[8:]),
			Addr: binary.LittleEndian.Uint64(h[16:]), Len: binary.LittleEndian.Uint64(h[24:])})
		rest = rest[i+1:]
	}
	vec := binary.LittleEndian.AppendUint32(nil, guardVMagic)
	for rest := p; ; {
		i := bytes.Index(rest, vec)
		if i < 0 || len(rest[i:]) < guardVHdrLen {
			break
		}
		h := rest[i:]
		rest = rest[i+1:]
		n := int(binary.LittleEndian.Uint32(h[4:]))
		if n == 0 || n > 1024 || len(h) < guardVHdrLen+n*guardVEntLen {
			continue
		}
		for j := range n {
			e := h[guardVHdrLen+j*guardVEntLen:]
			add(guardRead{Slot: binary.LittleEndian.Uint32(e), Token: binary.LittleEndian.Uint64(e[8:]),
				Addr: binary.LittleEndian.Uint64(e[16:]), Len: binary.LittleEndian.Uint64(e[24:])})
		}
	}
}

// observed reports what the observer has seen so far.
func (a *attacker) observed(cmd) (map[string]any, error) {
	o := a.obs
	if o == nil {
		return map[string]any{"observing": false}, nil
	}
	own := ownPorts()
	o.mu.Lock()
	defer o.mu.Unlock()
	if st, err := unix.GetsockoptTpacketStats(o.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
		o.drops += uint64(st.Drops) // the kernel resets its counts at each read
	}
	epochs := map[string]epochSeen{}
	for src, byEpoch := range o.epochs {
		if own[src] {
			continue // the attacker's own forgeries
		}
		for e, s := range byEpoch {
			k := strconv.FormatUint(uint64(e), 10)
			m := epochs[k]
			m.MaxSeq, m.Frames = max(m.MaxSeq, s.MaxSeq), m.Frames+s.Frames
			m.Hello, m.Fin = m.Hello || s.Hello, m.Fin || s.Fin
			epochs[k] = m
		}
	}
	// Tokens go out as decimal strings: JSON numbers lose a uint64's low bits in most readers.
	var sniffed []map[string]any
	seen := map[guardRead]bool{}
	for src, reads := range o.sniffed {
		if own[src] {
			continue // the attacker's own requests
		}
		for r := range reads {
			if !seen[r] {
				seen[r] = true
				sniffed = append(sniffed, map[string]any{"slot": r.Slot, "token": strconv.FormatUint(r.Token, 10), "addr": r.Addr, "len": r.Len})
			}
		}
	}
	m := map[string]any{"observing": o.err == nil, "epochs": epochs, "leaks": o.leaks, "leak_sample": o.sample,
		"packets": o.packets, "drops": o.drops, "sniffed_reads": sniffed}
	if o.err != nil {
		m["why"] = o.err.Error()
	}
	return m, nil
}
