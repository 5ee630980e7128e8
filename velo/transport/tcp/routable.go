package tcp

import "net"

// RoutableHost returns the address other hosts most likely reach this one at, for
// Config.Advertise when the transport listens on every interface: the source address this host's
// routing table picks for a destination outside it, else the first global IPv4 address of an
// interface that is up and not loopback, else 127.0.0.1 (a host with no network, where a
// single-host run is all there is). It is a guess a program makes when nobody told it its address;
// a deployment that knows it sets Advertise itself.
func RoutableHost() string {
	// Connecting a UDP socket sends nothing; it only asks the kernel which source address its
	// routing table picks for a destination outside this host (192.0.2.1 is TEST-NET-1).
	if c, err := net.Dial("udp4", "192.0.2.1:9"); err == nil {
		ip := c.LocalAddr().(*net.UDPAddr).IP
		c.Close()
		if !ip.IsLoopback() && !ip.IsUnspecified() {
			return ip.String()
		}
	}
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}
