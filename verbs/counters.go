package verbs

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// PortCounters are a port's traffic counters as sysfs shows them: the standard PortCounters
// (counters/) and, where the driver has them, the extended hardware counters (hw_counters/). They
// are what tells an operator that bytes really crossed the NIC, independently of what any
// library says about its own transfers.
type PortCounters struct {
	Port string // "<device>:<port>"
	// XmitBytes and RcvBytes are port_xmit_data and port_rcv_data, which the kernel reports in
	// units of 4 bytes (octets divided by 4), converted to bytes.
	XmitBytes, RcvBytes uint64
	// XmitPackets and RcvPackets are port_xmit_packets and port_rcv_packets.
	XmitPackets, RcvPackets uint64
	// HW holds every hw_counters/ file that reads as a number (rx_read_requests,
	// rx_write_requests, out_of_sequence, ...), by file name; nil when the driver has none.
	HW map[string]uint64
}

// Sub returns c minus before: what the port counted between two readings. A counter that went
// backwards (reset, or the 32-bit counters of old drivers wrapping) reads as 0.
func (c PortCounters) Sub(before PortCounters) PortCounters {
	d := PortCounters{Port: c.Port,
		XmitBytes: sub(c.XmitBytes, before.XmitBytes), RcvBytes: sub(c.RcvBytes, before.RcvBytes),
		XmitPackets: sub(c.XmitPackets, before.XmitPackets), RcvPackets: sub(c.RcvPackets, before.RcvPackets)}
	if c.HW != nil {
		d.HW = map[string]uint64{}
		for k, v := range c.HW {
			d.HW[k] = sub(v, before.HW[k])
		}
	}
	return d
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// HWNames returns the hardware counter names, sorted.
func (c PortCounters) HWNames() []string {
	names := make([]string, 0, len(c.HW))
	for k := range c.HW {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// ReadPortCounters reads the counters of one port under p.
func ReadPortCounters(p Paths, device string, port int) (PortCounters, error) {
	dir := p.sys("class", "infiniband", device, "ports", strconv.Itoa(port))
	if _, err := os.Stat(dir); err != nil {
		return PortCounters{}, fmt.Errorf("verbs: port counters of %s:%d: %w (no such port under %s)", device, port, err, p.SysfsRoot())
	}
	c := PortCounters{Port: device + ":" + strconv.Itoa(port)}
	for _, f := range []struct {
		name  string
		dst   *uint64
		scale uint64
	}{
		{"port_xmit_data", &c.XmitBytes, 4},
		{"port_rcv_data", &c.RcvBytes, 4},
		{"port_xmit_packets", &c.XmitPackets, 1},
		{"port_rcv_packets", &c.RcvPackets, 1},
	} {
		v, ok, err := readCounter(filepath.Join(dir, "counters", f.name))
		if err != nil {
			return PortCounters{}, err
		}
		if ok {
			*f.dst = v * f.scale
		}
	}
	entries, err := readDirIfAny(filepath.Join(dir, "hw_counters"))
	if err != nil {
		return PortCounters{}, err
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		v, ok, err := readCounter(filepath.Join(dir, "hw_counters", e.Name()))
		if err != nil || !ok {
			continue // a file that is not a counter (lifespan takes writes, for one)
		}
		if c.HW == nil {
			c.HW = map[string]uint64{}
		}
		c.HW[e.Name()] = v
	}
	return c, nil
}

// ReadAllPortCounters reads the counters of every port of every device under p.
func ReadAllPortCounters(p Paths) ([]PortCounters, error) {
	devs, err := Devices(p)
	if err != nil {
		return nil, err
	}
	var out []PortCounters
	for _, d := range devs {
		for _, port := range d.Ports {
			c, err := ReadPortCounters(p, d.Name, port.Number)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// readCounter reads a decimal counter; ok is false when the file is absent.
func readCounter(path string) (uint64, bool, error) {
	s, ok, err := readAttr(path)
	if err != nil || !ok {
		return 0, false, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("verbs: %s: %q is not a counter: %w", path, s, err)
	}
	return v, true, nil
}
