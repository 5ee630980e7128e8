package main

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// The connection flood: plain TCP connections to the victim's UCX tcp port, opened until the
// victim stops taking them (its descriptor table is full and the kernel's backlog with it) and
// held, then closed. Each connection the victim accepts costs it a descriptor; none of them
// sends a byte. After the flood, a fresh connection with a connection request shows whether the
// victim's listener still accepts.

// flood opens up to c.Count connections to the victim's first UCX port and holds them. It stops
// early at the first connection that is not established within 500 ms: the victim no longer
// accepts and its backlog is full. With c.From (a loopback address such as 127.0.0.2) the
// connections come from that address, to the victim's loopback port.
func (a *attacker) flood(c cmd) (map[string]any, error) {
	targets, skip, err := rawTargets(c)
	if err != nil || skip != "" {
		return map[string]any{"skipped": skip}, err
	}
	if c.Count <= 0 {
		return nil, errors.New("flood: count: want the number of connections to open")
	}
	t := targets[0]
	d := net.Dialer{Timeout: 500 * time.Millisecond}
	if c.From != "" {
		from := net.ParseIP(c.From)
		if from == nil || !from.IsLoopback() {
			return nil, fmt.Errorf("flood: from %q: want a loopback address", c.From)
		}
		d.LocalAddr = &net.TCPAddr{IP: from}
		found := false
		for _, x := range targets {
			if h, _, err := net.SplitHostPort(x.Addr); err == nil && net.ParseIP(h).IsLoopback() && x.Family == 4 {
				t, found = x, true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("flood: from %s: the victim has no IPv4 loopback UCX port (%v)", c.From, targets)
		}
	}
	start := time.Now()
	var stopped string
	for len(a.flooded) < c.Count {
		conn, err := d.Dial("tcp", t.Addr)
		if err != nil {
			stopped = err.Error()
			break
		}
		a.flooded = append(a.flooded, conn)
	}
	return map[string]any{"addr": t.Addr, "open": len(a.flooded), "stopped": stopped,
		"took": time.Since(start).String()}, nil
}

// floodRelease closes every connection of the flood.
func (a *attacker) floodRelease() map[string]any {
	n := len(a.flooded)
	for _, c := range a.flooded {
		c.Close()
	}
	a.flooded = nil
	return map[string]any{"closed": n}
}

// acceptProbe dials every UCX port of the victim with a connection request, again and again
// until each answers it with a CONN_ACK or timeout passes, and says how long that took.
func acceptProbe(c cmd, timeout time.Duration) (map[string]any, error) {
	targets, skip, err := rawTargets(c)
	if err != nil || skip != "" {
		return map[string]any{"skipped": skip}, err
	}
	start := time.Now()
	deadline := start.Add(timeout)
	var results []map[string]any
	for _, t := range targets {
		var last string
		for {
			r, err := rawDial(t, min(time.Until(deadline), 2*time.Second))
			if err == nil {
				acked := r.acked
				r.c.Close()
				if acked {
					results = append(results, map[string]any{"addr": t.Addr, "accepted": true,
						"after": time.Since(start).Seconds()})
					break
				}
				last = fmt.Sprintf("no CONN_ACK (closed: %q)", r.closed)
			} else {
				last = err.Error()
			}
			if time.Now().After(deadline) {
				results = append(results, map[string]any{"addr": t.Addr, "accepted": false, "last": last})
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return map[string]any{"results": results}, nil
}
