package lanes

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
)

// ErrNotSupported: this kernel or this user cannot count lanes; the error's text says what is
// missing. It matches errors.ErrUnsupported.
var ErrNotSupported = fmt.Errorf("lane counting not supported here: %w", errors.ErrUnsupported)

// Direction of a flow as the cgroup's sockets see it.
type Direction uint8

// Directions.
const (
	Egress  Direction = 0 // sent by a socket of the cgroup
	Ingress Direction = 1 // received by a socket of the cgroup
)

func (d Direction) String() string {
	if d == Ingress {
		return "in"
	}
	return "out"
}

// IP protocol numbers of the flows most reports care about.
const (
	ProtoTCP uint8 = 6
	ProtoUDP uint8 = 17
)

// Flow is what the programs counted for one socket direction: every packet of a socket of the
// cgroup with these ports and protocol, in one direction.
type Flow struct {
	LocalPort, RemotePort uint16
	Protocol              uint8 // IP protocol: 6 TCP, 17 UDP, 0 when the header could not be read
	// IPv6 reports whether the packets were IPv6, read from the packets themselves: a
	// dual-stack socket (AF_INET6) talking to an IPv4 peer carries IPv4 packets, and its flows
	// say IPv6 false. Only a packet whose first byte cannot be read falls back to the socket's
	// family.
	IPv6 bool
	// LocalAddr is the socket's local address (an IPv4 address for a dual-stack socket talking
	// IPv4); it names the interface the flow used, so a host's rails, each with an address of its
	// own, are told apart by it. The zero Addr when the socket has no address family the
	// programs know.
	LocalAddr      netip.Addr
	Dir            Direction
	Bytes, Packets uint64
}

// ProtocolName is "tcp", "udp" or the number.
func (f Flow) ProtocolName() string {
	switch f.Protocol {
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	}
	return fmt.Sprintf("ip-proto-%d", f.Protocol)
}

// Touches reports whether the flow's local or remote port is port.
func (f Flow) Touches(port uint16) bool { return f.LocalPort == port || f.RemotePort == port }

// Lane is a named group of flows with their totals.
type Lane struct {
	Name                  string
	BytesOut, BytesIn     uint64
	PacketsOut, PacketsIn uint64
	Flows                 int
}

// Bytes is the lane's bytes both ways.
func (l Lane) Bytes() uint64 { return l.BytesOut + l.BytesIn }

// Classify groups flows into lanes: each flow goes to the first lane whose match accepts it, and
// flows no lane accepts go to a last lane named rest (left out when it is empty). The lanes come
// back in the order given.
func Classify(flows []Flow, rest string, lanes ...LaneMatch) []Lane {
	out := make([]Lane, len(lanes)+1)
	for i, l := range lanes {
		out[i].Name = l.Name
	}
	out[len(lanes)].Name = rest
	for _, f := range flows {
		i := len(lanes)
		for j, l := range lanes {
			if l.Match(f) {
				i = j
				break
			}
		}
		l := &out[i]
		l.Flows++
		if f.Dir == Egress {
			l.BytesOut += f.Bytes
			l.PacketsOut += f.Packets
		} else {
			l.BytesIn += f.Bytes
			l.PacketsIn += f.Packets
		}
	}
	if out[len(lanes)].Flows == 0 {
		out = out[:len(lanes)]
	}
	return out
}

// LaneMatch names a lane and says which flows belong to it.
type LaneMatch struct {
	Name  string
	Match func(Flow) bool
}

// PortsLane is the lane of every flow touching one of ports.
func PortsLane(name string, ports ...uint16) LaneMatch {
	return LaneMatch{Name: name, Match: func(f Flow) bool {
		for _, p := range ports {
			if f.Touches(p) {
				return true
			}
		}
		return false
	}}
}

// AddrLane is the lane of every flow whose local address lies in one of prefixes: the flows of
// one interface (one rail) when prefixes are its addresses.
func AddrLane(name string, prefixes ...netip.Prefix) LaneMatch {
	return LaneMatch{Name: name, Match: func(f Flow) bool {
		for _, p := range prefixes {
			if f.LocalAddr.IsValid() && p.Contains(f.LocalAddr) {
				return true
			}
		}
		return false
	}}
}

// ProtocolLane is the lane of every flow of one IP protocol.
func ProtocolLane(name string, proto uint8) LaneMatch {
	return LaneMatch{Name: name, Match: func(f Flow) bool { return f.Protocol == proto }}
}

// sortFlows orders flows by bytes, largest first, then by ports, for stable reports.
func sortFlows(flows []Flow) {
	sort.Slice(flows, func(i, j int) bool {
		a, b := flows[i], flows[j]
		if a.Bytes != b.Bytes {
			return a.Bytes > b.Bytes
		}
		if a.LocalPort != b.LocalPort {
			return a.LocalPort < b.LocalPort
		}
		if a.RemotePort != b.RemotePort {
			return a.RemotePort < b.RemotePort
		}
		return a.Dir < b.Dir
	})
}
