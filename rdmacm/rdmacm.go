package rdmacm

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/velo-go/velo/verbs"
)

// Source says how a Location was found.
type Source string

// Sources.
const (
	SourceLibrdmacm Source = "librdmacm" // rdma_bind_addr
	SourceSysfs     Source = "sysfs"     // GID tables and netdevs
)

// Location is the RDMA port that carries an IP address.
type Location struct {
	IP     netip.Addr
	Device string // e.g. "mlx5_0"
	Port   int    // 1-based
	Netdev string // the interface that holds the address, when known
	// GIDIndex is the index of the address's GID in the port's table (RoCE; the RoCE v2 entry
	// when there is one), or -1 when the address is not a GID (InfiniBand: IPoIB addresses are not).
	GIDIndex int
	Source   Source
}

// Spec returns "<device>:<port>", the form of UCX_NET_DEVICES.
func (l Location) Spec() string { return l.Device + ":" + strconv.Itoa(l.Port) }

// Interface is a network interface and its addresses.
type Interface struct {
	Name  string
	Addrs []netip.Prefix
}

// SystemInterfaces lists the interfaces of the calling thread's network namespace and their
// addresses.
func SystemInterfaces() ([]Interface, error) {
	ifcs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("rdmacm: listing interfaces: %w", err)
	}
	out := make([]Interface, 0, len(ifcs))
	for _, ifc := range ifcs {
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("rdmacm: addresses of %s: %w", ifc.Name, err)
		}
		i := Interface{Name: ifc.Name}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if p, err := netip.ParsePrefix(ipn.String()); err == nil {
					i.Addrs = append(i.Addrs, netip.PrefixFrom(p.Addr().Unmap(), p.Bits()))
				}
			}
		}
		out = append(out, i)
	}
	return out, nil
}

// Options configures Resolve and ResolveSysfs. The zero value resolves on the live system.
type Options struct {
	// Paths is where the sysfs fallback reads; zero means /sys and /dev. Resolve asks librdmacm
	// only when Paths is the live system.
	Paths verbs.Paths
	// Interfaces lists the node's interfaces and addresses; nil means SystemInterfaces.
	Interfaces func() ([]Interface, error)
}

func (o Options) interfaces() ([]Interface, error) {
	if o.Interfaces != nil {
		return o.Interfaces()
	}
	return SystemInterfaces()
}

func checkIP(ip netip.Addr) (netip.Addr, error) {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsUnspecified() {
		return ip, fmt.Errorf("rdmacm: %w: %q is not a usable address (want the node's own unicast address, e.g. 192.168.60.11)", verbs.ErrInvalid, ip)
	}
	return ip, nil
}

// Resolve finds the device and port that carry ip: through librdmacm when this binary has it and
// Options.Paths is the live system, and through sysfs otherwise or when librdmacm cannot answer.
func Resolve(ip netip.Addr, opts Options) (Location, error) {
	ip, err := checkIP(ip)
	if err != nil {
		return Location{}, err
	}
	var cmErr error
	if opts.Paths.Live() {
		loc, err := ResolveLibrdmacm(ip)
		if err == nil {
			enrich(&loc, opts)
			return loc, nil
		}
		cmErr = err
	}
	loc, sysErr := ResolveSysfs(ip, opts)
	if sysErr == nil {
		return loc, nil
	}
	if cmErr == nil {
		return Location{}, sysErr
	}
	// Both failed. The answer is definite if either way was.
	cmText, sysText := strings.TrimPrefix(cmErr.Error(), "rdmacm: "), strings.TrimPrefix(sysErr.Error(), "rdmacm: ")
	if errors.Is(sysErr, verbs.ErrNoDevice) || errors.Is(cmErr, verbs.ErrNoDevice) {
		return Location{}, fmt.Errorf("rdmacm: %w carries %s (librdmacm: %s; sysfs: %s)", verbs.ErrNoDevice, ip, cmText, sysText)
	}
	return Location{}, &bothFailed{ip: ip, cm: cmErr, sys: sysErr}
}

// bothFailed is the inconclusive answer: neither way could tell. It wraps both causes.
type bothFailed struct {
	ip      netip.Addr
	cm, sys error
}

func (e *bothFailed) Error() string {
	return fmt.Sprintf("rdmacm: cannot tell which RDMA device carries %s: librdmacm: %s; sysfs: %s", e.ip,
		strings.TrimPrefix(e.cm.Error(), "rdmacm: "), strings.TrimPrefix(e.sys.Error(), "rdmacm: "))
}

func (e *bothFailed) Unwrap() []error { return []error{e.cm, e.sys} }

// enrich fills the netdev and GID index of a librdmacm answer from sysfs, as far as it can.
func enrich(loc *Location, opts Options) {
	loc.GIDIndex = -1
	pt, err := verbs.LookupPort(opts.Paths, loc.Device, loc.Port)
	if err != nil {
		return
	}
	if idx, netdev, ok := gidOf(pt, loc.IP); ok {
		loc.GIDIndex, loc.Netdev = idx, netdev
		return
	}
	if ifcs, err := opts.interfaces(); err == nil {
		if ifc, ok := holder(ifcs, loc.IP); ok {
			loc.Netdev = ifc.Name
		}
	}
}

// gidOf finds ip among a port's RoCE GIDs, preferring the RoCE v2 entry.
func gidOf(pt verbs.Port, ip netip.Addr) (index int, netdev string, ok bool) {
	want := verbs.GIDFromAddr(ip)
	index = -1
	for _, e := range pt.GIDs {
		if e.GID != want || e.Type == verbs.GIDTypeIB {
			continue
		}
		if index < 0 || e.Type == verbs.GIDTypeRoCEv2 {
			index, netdev = e.Index, e.Netdev
		}
		if e.Type == verbs.GIDTypeRoCEv2 {
			break
		}
	}
	return index, netdev, index >= 0
}

// holder returns the interface that has ip as one of its addresses.
func holder(ifcs []Interface, ip netip.Addr) (Interface, bool) {
	for _, ifc := range ifcs {
		for _, p := range ifc.Addrs {
			if p.Addr().Unmap() == ip {
				return ifc, true
			}
		}
	}
	return Interface{}, false
}

// ResolveSysfs finds the port that carries ip from sysfs alone: first a RoCE GID equal to the
// address, then the port of the interface that holds it.
func ResolveSysfs(ip netip.Addr, opts Options) (Location, error) {
	ip, err := checkIP(ip)
	if err != nil {
		return Location{}, err
	}
	devs, err := verbs.Devices(opts.Paths)
	if err != nil {
		return Location{}, fmt.Errorf("rdmacm: %s: %w", ip, err)
	}
	for _, d := range devs {
		for _, pt := range d.Ports {
			if idx, netdev, ok := gidOf(pt, ip); ok {
				return Location{IP: ip, Device: d.Name, Port: pt.Number, Netdev: netdev, GIDIndex: idx, Source: SourceSysfs}, nil
			}
		}
	}
	ifcs, err := opts.interfaces()
	if err != nil {
		return Location{}, fmt.Errorf("rdmacm: %s is in no RoCE GID table, and the interfaces could not be listed: %w", ip, err)
	}
	ifc, ok := holder(ifcs, ip)
	if !ok {
		return Location{}, fmt.Errorf("rdmacm: %w: %s is not assigned to any interface of this node (see `ip addr`)", verbs.ErrNoDevice, ip)
	}
	pt, ok := verbs.NetdevPort(devs, ifc.Name)
	if !ok {
		return Location{}, fmt.Errorf("rdmacm: %w: %s is on %s, which no RDMA port carries (not an IPoIB or RoCE interface)", verbs.ErrNoDevice, ip, ifc.Name)
	}
	loc := Location{IP: ip, Device: pt.Device, Port: pt.Number, Netdev: ifc.Name, GIDIndex: -1, Source: SourceSysfs}
	return loc, nil
}
