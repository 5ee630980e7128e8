package ucxtransport

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Where the UCX worker listens.
//
// UCX 1.22's tcp transport opens an interface for every active network device (lo included,
// bridges left out) and each one listens on its device's address, on a port the kernel picks (or
// one of UCX_TCP_PORT_RANGE): see uct_tcp_query_devices and uct_tcp_iface_listener_init in
// src/uct/tcp/tcp_iface.c. A worker whose transports leave tcp out (UCX_TLS without tcp) opens no
// tcp listener at all. Which devices UCX takes is UCX_NET_DEVICES, one list for every network
// transport, InfiniBand ports included. So Config.TCPInterfaces, the interfaces UCX's tcp may
// use, becomes UCX_NET_DEVICES naming those interfaces and every InfiniBand port of the node
// (which keep their RDMA lanes), where neither the environment nor Config.NetDevices sets it.
// Where none of the three names devices, the worker waits for velo.New's ScopeListen, which sets
// UCX_NET_DEVICES the same way from the interface of the control plane's address (transport.go).
// After start the transport reads which addresses its worker really listens on (its own sockets
// in LISTEN state that appeared with the worker) and logs them; Describe shows them.

// sysInfiniband lists the InfiniBand devices, whose ports UCX names "mlx5_0:1".
const sysInfiniband = "/sys/class/infiniband"

// tcpNetDevices is UCX_NET_DEVICES for tcp on ifaces only: the interfaces, each checked, and every
// InfiniBand port under root.
func tcpNetDevices(ifaces []string, root string) (string, error) {
	var devs []string
	for _, name := range ifaces {
		name = strings.TrimSpace(name)
		if _, err := net.InterfaceByName(name); err != nil {
			return "", fmt.Errorf("ucx: Config.TCPInterfaces: %q is not a network interface of this host (%v): name one that `ip link` lists", name, err)
		}
		devs = append(devs, name)
	}
	ports, _ := filepath.Glob(filepath.Join(root, "*", "ports", "*"))
	for _, p := range ports {
		devs = append(devs, filepath.Base(filepath.Dir(filepath.Dir(p)))+":"+filepath.Base(p))
	}
	return strings.Join(devs, ","), nil
}

// TCPListeners are this process's TCP sockets in LISTEN state, by socket inode, each as
// "addr:port" (read from /proc/self/fd and /proc/self/net/tcp and tcp6; empty off Linux). New
// takes those that appeared with its worker; ibcheck's probe reads a worker's the same way.
func TCPListeners() map[uint64]string {
	own := map[uint64]bool{}
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err != nil || !strings.HasPrefix(l, "socket:[") {
			continue
		}
		if ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]"), 10, 64); err == nil {
			own[ino] = true
		}
	}
	out := map[uint64]string{}
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // 0A: TCP_LISTEN
				continue
			}
			ino, err := strconv.ParseUint(fields[9], 10, 64)
			if err != nil || !own[ino] {
				continue
			}
			if ap, ok := procAddr(fields[1]); ok {
				out[ino] = ap.String()
			}
		}
		fh.Close()
	}
	return out
}

// newListeners are the addresses of the listeners in after that before lacks, sorted.
func newListeners(before, after map[uint64]string) []string {
	var out []string
	for ino, a := range after {
		if _, ok := before[ino]; !ok {
			out = append(out, a)
		}
	}
	sort.Strings(out)
	return out
}

// procAddr decodes a /proc/net/tcp address ("0100007F:1F90": the IP's 32-bit words as the
// kernel prints them, in host order, little-endian on the machines velo runs on; then the port).
func procAddr(s string) (netip.AddrPort, bool) {
	ipHex, portHex, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, false
	}
	raw, err := hex.DecodeString(ipHex)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, false
	}
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	ip, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), true
}

// describeListen is the listeners' line on the introspection page.
func describeListen(addrs []string) string {
	if len(addrs) == 0 {
		return "none"
	}
	return strings.Join(addrs, ", ")
}

// InterfacesOf names the network interface that holds ip, for Config.TCPInterfaces: a program
// whose control plane listens on one address ("127.0.0.1", a node's cluster address) keeps UCX's
// tcp listener on that interface with TCPInterfaces: InterfacesOf(addr). An unspecified address
// (0.0.0.0, ::) listens everywhere, and so gets nil: UCX's default, every active interface. An
// address no interface of this host holds is an error naming it.
func InterfacesOf(ip netip.Addr) ([]string, error) {
	ip = ip.Unmap()
	if ip.IsUnspecified() {
		return nil, nil
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("ucx: listing the network interfaces: %w", err)
	}
	for _, ifc := range ifaces {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if have, ok := netip.AddrFromSlice(n.IP); ok && have.Unmap() == ip {
					return []string{ifc.Name}, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("ucx: no network interface of this host has the address %s", ip)
}
