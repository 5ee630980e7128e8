// Command railnode is one host of the rails suite (test/multirail) and of make bench-rails: a velo
// instance whose UCX transport is a rail set (velo.WithRails with Slice), one UCX transport per
// named network interface, driven one command at a time.
//
// It reads one command a line on standard input through test/internal/linecmd (which also answers
// its common peers and metric) and answers each with one JSON line on standard output; its log goes
// to standard error. Commands (a handle in its text form):
//
//	info                      -> {"peer": <velo.PeerInfo>}
//	peer <PeerInfo JSON>      -> {"ok": true}
//	stage <bytes> <seed>      -> {"handle": "<handle>", "sha256": "..."}   (owner)
//	get <handle>              -> {"sha256","seconds","path","reason"}     (consumer)
//	batch <handle>...         -> {"seconds","bytes","sha256s":[...]}      (consumer)
//	status                    -> {"rails":[...],"health":[...]}
//	quit                      -> {} and exits
//
// An answer with "error" set is a failed command. The first line it writes, before any command, is
// {"ready":true} once the instance is up.
//
// UCX_TLS defaults to tcp (the environment wins); the devices come from -devices, one rail each,
// and UCX_NET_DEVICES must not be set (it would win over every rail, leaving one).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/velo-go/velo/test/internal/linecmd"
	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/rails"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// RailStatus is one rail as the status command reports it, from the instance's metrics.
type RailStatus struct {
	Rail     int     `json:"rail"`
	Device   string  `json:"device"`
	Bytes    float64 `json:"bytes"`
	Reads    float64 `json:"reads"`
	Failures float64 `json:"failures"`
	Paused   bool    `json:"paused"`
}

type answer struct {
	Error   string         `json:"error,omitempty"`
	Peer    *velo.PeerInfo `json:"peer,omitempty"`
	Handle  string         `json:"handle,omitempty"`
	SHA256  string         `json:"sha256,omitempty"`
	SHA256s []string       `json:"sha256s,omitempty"`
	Seconds float64        `json:"seconds,omitempty"`
	Bytes   int            `json:"bytes,omitempty"`
	Path    string         `json:"path,omitempty"`
	Reason  string         `json:"reason,omitempty"`
	Rails   []RailStatus   `json:"rails,omitempty"`
	Health  []string       `json:"health,omitempty"`
}

func main() {
	devices := flag.String("devices", "", "the rails: network interfaces, comma-separated (one UCX transport each)")
	coolDown := flag.Duration("cooldown", 0, "a failed rail's first pause (0: the rails package's default, 30 s)")
	slice := flag.Int("slice", 0, "slice size in bytes (0: the default)")
	ctl := flag.String("ctl", "", "host:port of a TCP control plane to listen on and advertise (empty: messages go over the first rail)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := run(log, *ctl, strings.Split(*devices, ","), rails.Config{CoolDown: *coolDown, SliceSize: *slice}); err != nil {
		fmt.Fprintf(os.Stderr, "railnode: %v\n", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, ctl string, devices []string, cfg rails.Config) error {
	if v := os.Getenv(velo.NetDevicesEnv); v != "" {
		return fmt.Errorf("%s=%s is set: it would win over every rail; unset it", velo.NetDevicesEnv, v)
	}
	ctx := context.Background()
	newUCX := func(dev string) (transport.Transport, error) {
		return ucxtransport.New(ucxtransport.Config{TLS: "tcp", NetDevices: dev, EagerEndpoints: true, RMAOverSoftwareLanes: true})
	}
	policy := velo.RailPolicy{Devices: devices, Slice: true, Slicing: cfg}
	opts := []velo.Option{velo.WithLogger(log), velo.WithRails(policy, newUCX), velo.WithRDMA(velo.RDMAConfig{})}
	if ctl != "" {
		// Added first, the TCP transport carries the messages (the messenger takes the first
		// transport that reaches a peer); the rails carry the reads alone.
		ln, err := net.Listen("tcp", ctl)
		if err != nil {
			return err
		}
		tr, err := tcp.New(tcp.Config{Listener: ln, Advertise: ln.Addr().String()})
		if err != nil {
			ln.Close()
			return err
		}
		opts = append([]velo.Option{velo.WithTransport(tr)}, opts...)
	}
	v, err := velo.New(ctx, opts...)
	if err != nil {
		return err
	}
	defer v.Close()
	n := &node{Replier: linecmd.NewReplier(os.Stdout), v: v, devices: devices, staged: map[string][]byte{}}
	n.Reply(map[string]bool{"ready": true})
	if linecmd.Serve(os.Stdin, 2*time.Minute, n.run) {
		n.Reply(answer{})
	}
	return nil
}

type node struct {
	*linecmd.Replier
	v       *velo.Velo
	devices []string
	staged  map[string][]byte // by handle, so the payload stays alive
}

// run answers one command: linecmd.Common's, or one of do's.
func (n *node) run(ctx context.Context, cmd, arg string) {
	if linecmd.Common(ctx, n.Replier, n.v, cmd, arg) {
		return
	}
	a, err := n.do(ctx, cmd, arg)
	if err != nil {
		a.Error = err.Error()
	}
	n.Reply(a)
}

func (n *node) do(ctx context.Context, cmd, arg string) (answer, error) {
	switch cmd {
	case "info":
		p := n.v.PeerInfo()
		return answer{Peer: &p}, nil
	case "stage":
		size, seed, err := linecmd.SizeSeed(arg)
		if err != nil {
			return answer{}, err
		}
		payload := make([]byte, size)
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		for i := 0; i < len(payload); i += 8 {
			x := r.Uint64()
			for k := 0; k < 8 && i+k < len(payload); k++ {
				payload[i+k] = byte(x >> (8 * k))
			}
		}
		h, err := n.v.StageDataPinned(ctx, payload)
		if err != nil {
			return answer{}, err
		}
		sum := sha256.Sum256(payload)
		text, err := h.MarshalText()
		if err != nil {
			return answer{}, err
		}
		n.staged[string(text)] = payload
		return answer{Handle: string(text), SHA256: hex.EncodeToString(sum[:])}, nil
	case "get":
		h, err := linecmd.ParseHandle(arg)
		if err != nil {
			return answer{}, err
		}
		start := time.Now()
		l, err := n.v.Get(ctx, h)
		if err != nil {
			return answer{}, err
		}
		took := time.Since(start)
		sum := sha256.Sum256(l.Bytes())
		a := answer{SHA256: hex.EncodeToString(sum[:]), Seconds: took.Seconds(), Bytes: len(l.Bytes()), Path: string(l.Path), Reason: string(l.Reason)}
		return a, l.Release(ctx)
	case "batch":
		var reqs []velo.GetRequest
		for _, text := range strings.Fields(arg) {
			h, err := linecmd.ParseHandle(text)
			if err != nil {
				return answer{}, err
			}
			reqs = append(reqs, velo.GetRequest{Handle: h})
		}
		start := time.Now()
		res := n.v.GetBatch(ctx, reqs, nil)
		took := time.Since(start)
		a := answer{Seconds: took.Seconds()}
		var errs []error
		for i, r := range res {
			if r.Err != nil {
				errs = append(errs, fmt.Errorf("entry %d: %w", i, r.Err))
				continue
			}
			sum := sha256.Sum256(r.Lease.Bytes())
			a.SHA256s = append(a.SHA256s, hex.EncodeToString(sum[:]))
			a.Bytes += len(r.Lease.Bytes())
			if err := r.Lease.Release(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		return a, errors.Join(errs...)
	case "status":
		return n.status()
	}
	return answer{}, fmt.Errorf("unknown command %q", cmd)
}

// status reads each rail's series from the instance's metrics, as an operator's scrape would.
func (n *node) status() (answer, error) {
	var a answer
	for i, dev := range n.devices {
		l := metrics.Labels{"rail": strconv.Itoa(i), "device": dev}
		s := RailStatus{Rail: i, Device: dev}
		var paused float64
		for _, m := range []struct {
			name string
			dst  *float64
		}{{rails.MetricBytes, &s.Bytes}, {rails.MetricSlices, &s.Reads}, {rails.MetricFailures, &s.Failures}, {rails.MetricState, &paused}} {
			x, err := metrics.Value(n.v.Metrics(), m.name, l)
			if err != nil {
				return a, fmt.Errorf("%s %v: %w", m.name, l, err)
			}
			*m.dst = x
		}
		s.Paused = paused != 0
		a.Rails = append(a.Rails, s)
	}
	a.Health = n.v.Health().Reasons
	return a, nil
}
