package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/velo-go/velo/lanes"
	"github.com/velo-go/velo/tools/ibcheck/internal/check"
	"github.com/velo-go/velo/verbs"
)

const lanesUsage = `usage: ibcheck lanes [flags] -- command [args...]

Runs the command in a fresh cgroup, counts in the kernel (eBPF) the bytes of every socket its
processes open, and when it ends reports the bytes per lane — velo's TCP control plane (the ports
given with --control-port), the other TCP sockets (UCX's own, over UCX_TLS=tcp), the rest — beside
what each RDMA port's counters moved meanwhile. The command's exit status is passed through.

Flags:
`

// lanesReport is the JSON form (schema ibcheck-lanes/v1, docs/ibcheck.md).
type lanesReport struct {
	Schema     string         `json:"schema"`
	Command    []string       `json:"command"`
	ExitStatus int            `json:"exit_status"`
	Lanes      []laneJSON     `json:"lanes"`
	Flows      []flowJSON     `json:"flows"`
	Addresses  []addressJSON  `json:"local_addresses"`
	RDMAPorts  []rdmaPortJSON `json:"rdma_ports"`
	Note       string         `json:"note,omitempty"`
}

type laneJSON struct {
	Name       string `json:"name"`
	BytesOut   uint64 `json:"bytes_out"`
	BytesIn    uint64 `json:"bytes_in"`
	PacketsOut uint64 `json:"packets_out"`
	PacketsIn  uint64 `json:"packets_in"`
	Sockets    int    `json:"socket_directions"`
}

// addressJSON is the bytes of every flow with one local address: what one interface (one rail,
// where each NIC has an address of its own) carried for the command.
type addressJSON struct {
	Address   string `json:"address"`
	Interface string `json:"interface,omitempty"` // the interface holding it here, when one does
	BytesOut  uint64 `json:"bytes_out"`
	BytesIn   uint64 `json:"bytes_in"`
	Sockets   int    `json:"socket_directions"`
}

type flowJSON struct {
	Protocol   string `json:"protocol"`
	LocalAddr  string `json:"local_address,omitempty"`
	LocalPort  uint16 `json:"local_port"`
	RemotePort uint16 `json:"remote_port"`
	Direction  string `json:"direction"`
	Bytes      uint64 `json:"bytes"`
	Packets    uint64 `json:"packets"`
}

type rdmaPortJSON struct {
	Port        string            `json:"port"`
	XmitBytes   uint64            `json:"xmit_bytes"`
	RcvBytes    uint64            `json:"rcv_bytes"`
	XmitPackets uint64            `json:"xmit_packets"`
	RcvPackets  uint64            `json:"rcv_packets"`
	HW          map[string]uint64 `json:"hw_counters,omitempty"`
}

type portList []uint16

func (p *portList) String() string { return fmt.Sprint(*p) }
func (p *portList) Set(s string) error {
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil || n == 0 {
			return fmt.Errorf("%q is not a port", f)
		}
		*p = append(*p, uint16(n))
	}
	return nil
}

// runLanes is `ibcheck lanes`.
func runLanes(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ibcheck lanes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var control portList
	fs.Var(&control, "control-port", "a `port` of velo's TCP control plane (repeat, or a comma list): flows touching it form that lane")
	asJSON := fs.Bool("json", false, "write the report as JSON (schema ibcheck-lanes/v1)")
	report := fs.String("report", "", "write the report to this `file` instead of standard error")
	sysfs := fs.String("sysfs", "", "read the RDMA port counters from this sysfs `tree` instead of /sys")
	top := fs.Int("flows", 8, "list this many of the largest flows (0: none)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), lanesUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return check.ExitOK
		}
		return check.ExitUsage
	}
	command := fs.Args()
	if len(command) == 0 {
		fmt.Fprintln(stderr, "ibcheck lanes: no command to run: ibcheck lanes [flags] -- command [args...]")
		return check.ExitUsage
	}
	out := stderr
	if *report != "" {
		f, err := os.Create(*report)
		if err != nil {
			fmt.Fprintf(stderr, "ibcheck lanes: --report: %v\n", err)
			return check.ExitUsage
		}
		defer f.Close()
		out = f
	}

	c, err := lanes.New(lanes.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "ibcheck lanes: %v\n", err)
		return check.ExitFail
	}
	defer c.Close()
	paths := verbs.Paths{Sysfs: *sysfs}
	before, portErr := verbs.ReadAllPortCounters(paths)

	cmd := c.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "ibcheck lanes: %v\n", err)
		return check.ExitFail
	}
	// The command gets the signals that would stop ibcheck, and ibcheck reports once it ended.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	status := exitStatus(cmd.Wait())

	flows, readErr := c.Read()
	rep := lanesReport{Schema: "ibcheck-lanes/v1", Command: command, ExitStatus: status}
	matches := []lanes.LaneMatch{}
	if len(control) > 0 {
		matches = append(matches, lanes.PortsLane("velo control plane", control...))
	}
	matches = append(matches, lanes.ProtocolLane("other TCP sockets (UCX over tcp and the rest)", lanes.ProtoTCP))
	for _, l := range lanes.Classify(flows, "other (UDP, ...)", matches...) {
		rep.Lanes = append(rep.Lanes, laneJSON{Name: l.Name, BytesOut: l.BytesOut, BytesIn: l.BytesIn, PacketsOut: l.PacketsOut, PacketsIn: l.PacketsIn, Sockets: l.Flows})
	}
	for i, f := range flows {
		if i == *top {
			break
		}
		rep.Flows = append(rep.Flows, flowJSON{Protocol: f.ProtocolName(), LocalAddr: addrString(f.LocalAddr), LocalPort: f.LocalPort, RemotePort: f.RemotePort, Direction: f.Dir.String(), Bytes: f.Bytes, Packets: f.Packets})
	}
	rep.Addresses = byLocalAddress(flows, interfaceAddrs())
	var notes []string
	if readErr != nil {
		notes = append(notes, readErr.Error())
	}
	after, err := verbs.ReadAllPortCounters(paths)
	switch {
	case errors.Is(portErr, verbs.ErrNoDevice) || errors.Is(err, verbs.ErrNoDevice):
		notes = append(notes, "no RDMA device on this node: no port counters")
	case portErr != nil || err != nil:
		notes = append(notes, fmt.Sprintf("RDMA port counters: %v", errors.Join(portErr, err)))
	default:
		for i, a := range after {
			if i < len(before) && before[i].Port == a.Port {
				d := a.Sub(before[i])
				rep.RDMAPorts = append(rep.RDMAPorts, rdmaPortJSON{Port: d.Port, XmitBytes: d.XmitBytes, RcvBytes: d.RcvBytes, XmitPackets: d.XmitPackets, RcvPackets: d.RcvPackets, HW: d.HW})
			}
		}
	}
	rep.Note = strings.Join(notes, "; ")
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		writeLanes(out, rep)
	}
	return status
}

// exitStatus turns Wait's error into the status to pass on: the command's own, or 128 plus the
// signal that killed it, as a shell does.
func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return check.ExitFail
}

// byLocalAddress sums the flows by their local address, largest first; names maps an address to
// the interface that holds it on this host. Flows without an address (a listener's wildcard
// included) are left out: they carry handshakes, not transfers.
func byLocalAddress(flows []lanes.Flow, names map[netip.Addr]string) []addressJSON {
	idx := map[netip.Addr]int{}
	var out []addressJSON
	for _, f := range flows {
		if !f.LocalAddr.IsValid() || f.LocalAddr.IsUnspecified() {
			continue
		}
		i, ok := idx[f.LocalAddr]
		if !ok {
			i = len(out)
			idx[f.LocalAddr] = i
			out = append(out, addressJSON{Address: f.LocalAddr.String(), Interface: names[f.LocalAddr]})
		}
		out[i].Sockets++
		if f.Dir == lanes.Egress {
			out[i].BytesOut += f.Bytes
		} else {
			out[i].BytesIn += f.Bytes
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return out[i].BytesOut+out[i].BytesIn > out[j].BytesOut+out[j].BytesIn
	})
	return out
}

// interfaceAddrs maps each address of this host's interfaces (in ibcheck's network namespace) to
// the interface's name.
func interfaceAddrs() map[netip.Addr]string {
	out := map[netip.Addr]string{}
	ifs, err := net.Interfaces()
	if err != nil {
		return out
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				out[p.Addr().Unmap()] = ifc.Name
			}
		}
	}
	return out
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

func writeLanes(w io.Writer, rep lanesReport) {
	fmt.Fprintf(w, "ibcheck lanes: %s exited with status %d\n", strings.Join(rep.Command, " "), rep.ExitStatus)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "lane\tbytes out\tbytes in\tpackets out\tpackets in\tsockets")
	for _, l := range rep.Lanes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\n", l.Name, verbs.FormatBytes(l.BytesOut), verbs.FormatBytes(l.BytesIn), l.PacketsOut, l.PacketsIn, l.Sockets)
	}
	for _, p := range rep.RDMAPorts {
		fmt.Fprintf(tw, "RDMA port %s (port counters)\t%s\t%s\t%d\t%d\t\n", p.Port, verbs.FormatBytes(p.XmitBytes), verbs.FormatBytes(p.RcvBytes), p.XmitPackets, p.RcvPackets)
	}
	tw.Flush()
	for _, p := range rep.RDMAPorts {
		var hw []string
		for _, k := range (verbs.PortCounters{HW: p.HW}).HWNames() {
			if v := p.HW[k]; v != 0 {
				hw = append(hw, fmt.Sprintf("%s +%d", k, v))
			}
		}
		if len(hw) > 0 {
			fmt.Fprintf(w, "  %s hw_counters: %s\n", p.Port, strings.Join(hw, ", "))
		}
	}
	if len(rep.Addresses) > 0 {
		fmt.Fprintln(w, "by local address (one per interface, one per rail where each NIC has its own):")
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		for _, a := range rep.Addresses {
			name := a.Interface
			if name == "" {
				name = "-"
			}
			fmt.Fprintf(tw, "  %s\t%s\tout %s\tin %s\t%d sockets\n", a.Address, name, verbs.FormatBytes(a.BytesOut), verbs.FormatBytes(a.BytesIn), a.Sockets)
		}
		tw.Flush()
	}
	if len(rep.Flows) > 0 {
		fmt.Fprintln(w, "largest flows:")
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		for _, f := range rep.Flows {
			fmt.Fprintf(tw, "  %s\t%s:%d -> %d\t%s\t%s\t%d packets\n", f.Protocol, f.LocalAddr, f.LocalPort, f.RemotePort, f.Direction, verbs.FormatBytes(f.Bytes), f.Packets)
		}
		tw.Flush()
	}
	if rep.Note != "" {
		fmt.Fprintf(w, "note: %s\n", rep.Note)
	}
}
