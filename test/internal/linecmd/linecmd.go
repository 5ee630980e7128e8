// Package linecmd is the command loop of the programs a suite drives from its standard input:
// one command a line ("name argument..."), each answered with one JSON line on standard output.
// The suites' velo instances (test/attack/cmd/victim, test/faults/cmd/faultnode,
// test/pushfaults/cmd/pushpeer, test/multirail/cmd/railnode) read their commands through Serve,
// answer through a Replier, and share the commands every such instance has (Common: peer, peers,
// metric, samehost) and the parsing of the arguments they have in common; each program keeps its own
// commands. The suites' side of the protocol (start a program, write a command, read its answer)
// is test/internal/linecmd/driver.
package linecmd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
)

// maxLine bounds one command line (a PeerInfo in JSON is the longest the suites send).
const maxLine = 1 << 20

// Serve reads commands from in, one a line, and hands each to run, in order, with a context
// that ends after timeout (a command that waits longer fails rather than hanging its suite). It
// returns true when the line "quit" came (the caller ends the program and answers it) and false
// when in ended (the suite went away).
func Serve(in io.Reader, timeout time.Duration, run func(ctx context.Context, cmd, arg string)) (quit bool) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if cmd == "quit" {
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		run(ctx, cmd, arg)
		cancel()
	}
	return false
}

// Replier writes the answers, one JSON object a line. It is safe for concurrent use.
type Replier struct {
	mu  sync.Mutex
	out *json.Encoder
}

// NewReplier answers on w.
func NewReplier(w io.Writer) *Replier { return &Replier{out: json.NewEncoder(w)} }

// Reply writes m (a map, or a struct with JSON tags) as one line. A program that cannot answer any
// more exits 3: its suite is gone.
func (r *Replier) Reply(m any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.out.Encode(m); err != nil {
		os.Exit(3)
	}
}

// Fail answers {"error": err}.
func (r *Replier) Fail(err error) { r.Reply(map[string]any{"error": err.Error()}) }

// Common runs the commands every driven velo instance has and reports whether cmd was one:
//
//	peer <PeerInfo JSON>  RegisterPeer
//	peers                 Peers(): id → state
//	metric <family>       that family's series, "label=value,..." → value (counters and gauges)
//	samehost <peer>       whether reads from peer (hex ID) take the same-host path, and why not
func Common(ctx context.Context, r *Replier, v *velo.Velo, cmd, arg string) bool {
	switch cmd {
	case "peer":
		var p velo.PeerInfo
		if err := json.Unmarshal([]byte(arg), &p); err != nil {
			r.Fail(err)
			return true
		}
		if err := v.RegisterPeer(ctx, p); err != nil {
			r.Fail(err)
			return true
		}
		r.Reply(map[string]any{"ok": true})
	case "peers":
		peers := map[string]string{}
		for _, p := range v.Peers() {
			peers[fmt.Sprintf("%016x", uint64(p.ID))] = string(p.State)
		}
		r.Reply(map[string]any{"peers": peers})
	case "metric":
		r.Reply(map[string]any{"series": Series(v, arg)})
	case "samehost":
		var peer uint64
		if _, err := fmt.Sscanf(arg, "%x", &peer); err != nil {
			r.Fail(fmt.Errorf("samehost: %q: %w", arg, err))
			return true
		}
		ok, why := v.SameHost(velo.InstanceID(peer))
		r.Reply(map[string]any{"same_host": ok, "why": why})
	default:
		return false
	}
	return true
}

// Series reads every series of the metric family name, as "label=value,..." → value (a counter's
// or a gauge's).
func Series(v *velo.Velo, name string) map[string]float64 {
	out := map[string]float64{}
	mfs, err := v.Metrics().Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[strings.Join(labels, ",")] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return out
}

// Paths reads the transfer path counter as "path/reason" → count.
func Paths(v *velo.Velo) map[string]float64 {
	out := map[string]float64{}
	for labels, val := range Series(v, metrics.RDMAPathTotal) {
		var path, reason string
		for _, kv := range strings.Split(labels, ",") {
			k, x, _ := strings.Cut(kv, "=")
			switch k {
			case "path":
				path = x
			case "reason":
				reason = x
			}
		}
		out[path+"/"+reason] = val
	}
	return out
}

// Grew names the series of after that grew since before, comma-separated ("" when none did): the
// path a transfer took, read from Paths around it.
func Grew(before, after map[string]float64) string {
	var grew []string
	for k, v := range after {
		if v > before[k] {
			grew = append(grew, k)
		}
	}
	sort.Strings(grew)
	return strings.Join(grew, ",")
}

// ParseHandle reads a handle in its text form.
func ParseHandle(s string) (velo.Handle, error) {
	var h velo.Handle
	err := h.UnmarshalText([]byte(strings.TrimSpace(s)))
	return h, err
}

// SizeSeed reads the "<bytes> <seed>" of a stage command.
func SizeSeed(arg string) (int, uint64, error) {
	a, b, _ := strings.Cut(arg, " ")
	size, err := strconv.Atoi(a)
	if err != nil || size <= 0 {
		return 0, 0, fmt.Errorf("stage: size %q: want a positive number of bytes", a)
	}
	seed, err := strconv.ParseUint(strings.TrimSpace(b), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("stage: seed %q: %w", b, err)
	}
	return size, seed, nil
}

// ErrString is err's text, "" for nil (answers carry errors as strings).
func ErrString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Fatal ends the program prog on a start-up error: exit 1 with the error on standard error, or 0
// when it is the end of standard input (the suite went away first).
func Fatal(prog string, err error) {
	if errors.Is(err, io.EOF) {
		os.Exit(0)
	}
	fmt.Fprintln(os.Stderr, prog+":", err)
	os.Exit(1)
}
