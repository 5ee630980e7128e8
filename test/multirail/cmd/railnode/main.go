// Command railnode is one host of the rails suite (test/multirail) and of make bench-rails: a velo
// instance whose UCX transport is a rail set (velo.WithRails with Slice), one UCX transport per
// named network interface, driven one command at a time.
//
// It reads one JSON command per line on standard input and answers each with one JSON line on
// standard output; its log goes to standard error. Commands:
//
//	{"op":"info"}                       -> {"peer": <velo.PeerInfo>}
//	{"op":"register","peer":<PeerInfo>} -> {}
//	{"op":"stage","size":N,"seed":S}    -> {"handle": <velo.Handle>, "sha256": "..."}   (owner)
//	{"op":"get","handle":<Handle>}      -> {"sha256","seconds","path","reason"}         (consumer)
//	{"op":"batch","handles":[...]}      -> {"seconds","bytes","sha256s":[...]}          (consumer)
//	{"op":"status"}                     -> {"rails":[...],"health":[...]}
//	{"op":"quit"}                       -> {} and exits
//
// An answer with "error" set is a failed command. The first line it writes, before any command, is
// {"ready":true} once the instance is up.
//
// UCX_TLS defaults to tcp (the environment wins); the devices come from -devices, one rail each,
// and UCX_NET_DEVICES must not be set (it would win over every rail, leaving one).
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/rails"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

type command struct {
	Op      string        `json:"op"`
	Peer    velo.PeerInfo `json:"peer"`
	Size    int           `json:"size"`
	Seed    uint64        `json:"seed"`
	Handle  velo.Handle   `json:"handle"`
	Handles []velo.Handle `json:"handles"`
}

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
	Handle  *velo.Handle   `json:"handle,omitempty"`
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
	n := &node{v: v, devices: devices, staged: map[string][]byte{}}
	out := json.NewEncoder(os.Stdout)
	if err := out.Encode(map[string]bool{"ready": true}); err != nil {
		return err
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	for in.Scan() {
		var c command
		var a answer
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			a.Error = fmt.Sprintf("command %q: %v", in.Text(), err)
		} else if c.Op == "quit" {
			return out.Encode(answer{})
		} else if a, err = n.do(ctx, c); err != nil {
			a.Error = err.Error()
		}
		if err := out.Encode(a); err != nil {
			return err
		}
	}
	return in.Err()
}

type node struct {
	v       *velo.Velo
	devices []string
	staged  map[string][]byte // by handle, so the payload stays alive
}

func (n *node) do(ctx context.Context, c command) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	switch c.Op {
	case "info":
		p := n.v.PeerInfo()
		return answer{Peer: &p}, nil
	case "register":
		return answer{}, n.v.RegisterPeer(ctx, c.Peer)
	case "stage":
		if c.Size <= 0 {
			return answer{}, fmt.Errorf("stage: size %d", c.Size)
		}
		payload := make([]byte, c.Size)
		r := rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))
		for i := 0; i < len(payload); i += 8 {
			x := r.Uint64()
			for k := 0; k < 8 && i+k < len(payload); k++ {
				payload[i+k] = byte(x >> (8 * k))
			}
		}
		h, err := n.v.RegisterDataPinned(ctx, payload)
		if err != nil {
			return answer{}, err
		}
		sum := sha256.Sum256(payload)
		b, _ := json.Marshal(h)
		n.staged[string(b)] = payload
		return answer{Handle: &h, SHA256: hex.EncodeToString(sum[:])}, nil
	case "get":
		start := time.Now()
		l, err := n.v.Get(ctx, c.Handle)
		if err != nil {
			return answer{}, err
		}
		took := time.Since(start)
		sum := sha256.Sum256(l.Bytes())
		a := answer{SHA256: hex.EncodeToString(sum[:]), Seconds: took.Seconds(), Bytes: len(l.Bytes()), Path: string(l.Path), Reason: string(l.Reason)}
		return a, l.Release(ctx)
	case "batch":
		reqs := make([]velo.GetRequest, len(c.Handles))
		for i, h := range c.Handles {
			reqs[i] = velo.GetRequest{Handle: h}
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
	return answer{}, fmt.Errorf("unknown op %q", c.Op)
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
