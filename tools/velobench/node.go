package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/discovery"
	"github.com/velo-go/velo/velo/discovery/etcd"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/push"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/rails"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// node is one side: a velo instance with a TCP control plane and the UCX transport, a member of
// the cluster in the discovery location, as a job's processes are.
type node struct {
	v     *velo.Velo
	u     *ucxtransport.Transport
	host  string // the host it advertised
	port  int    // its control plane's listening port
	where string // the discovery location, in words, for messages
	auth  string // how the control plane authenticates peers, in words
}

// where describes the discovery location so that an error can name it.
func (m meeting) where() string {
	if m.Etcd != "" {
		return fmt.Sprintf("etcd %s (cluster %q, keys /velo/clusters/%s/members/)", m.Etcd, m.Cluster, m.Cluster)
	}
	return fmt.Sprintf("directory %s (cluster %q, files in %s)", m.Dir, m.Cluster, filepath.Join(m.Dir, m.Cluster))
}

// budget is the registered-bytes budget of both sides: the staged blocks of a point and, on the
// consumer, its per-lease registrations, with room for the transfers' own.
func budget(memory int64) int64 {
	return max(2*memory+(256<<20), 1<<30)
}

// startNode brings up a member called name. log receives velo's warnings.
func startNode(ctx context.Context, m meeting, name string, memory int64, log *slog.Logger, opts ...velo.Option) (*node, error) {
	var d velo.Discovery
	var err error
	if m.Etcd != "" {
		d, err = etcd.New(etcd.Config{Endpoints: []string{m.Etcd}, Cluster: m.Cluster, TTL: 5 * time.Second, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("etcd discovery at %s: %w (check the URL and that etcd answers: etcdctl --endpoints %s endpoint health)", m.Etcd, err, m.Etcd)
		}
	} else {
		if err := os.MkdirAll(m.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("--dir %s: %w (give a directory both sides can write)", m.Dir, err)
		}
		d, err = discovery.NewFilesystem(discovery.FilesystemConfig{Dir: m.Dir, Cluster: m.Cluster, Poll: 200 * time.Millisecond, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("filesystem discovery in %s: %w", m.Dir, err)
		}
	}
	ln, err := net.Listen("tcp", m.Listen)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("--listen %s: %w", m.Listen, err)
	}
	host, port := m.Advertise, ln.Addr().(*net.TCPAddr).Port
	if h, p, err := net.SplitHostPort(m.Advertise); err == nil {
		host = h
		if n, err := strconv.Atoi(p); err == nil && n != 0 {
			port = n
		}
	}
	if host == "" {
		if ip := ln.Addr().(*net.TCPAddr).IP; ip.IsLoopback() {
			host = ip.String()
		} else {
			host = tcp.RoutableHost()
		}
	}
	// The credentials a job's processes get (a cluster secret or mutual TLS, from VELO_* variables),
	// so that the control plane and the UCX frames are authenticated and sealed as in the job.
	cred, err := auth.FromEnv()
	if err != nil {
		ln.Close()
		d.Close()
		return nil, fmt.Errorf("velo's credentials from the environment: %w", err)
	}
	ctl, err := tcp.New(tcp.Config{Listener: ln, Advertise: net.JoinHostPort(host, strconv.Itoa(port)), Auth: cred})
	if err != nil {
		ln.Close()
		d.Close()
		return nil, err
	}
	unguarded := func(err error) error {
		if errors.Is(err, ucxtransport.ErrUnguardedUCX) {
			return fmt.Errorf("velo's UCX transport: %w\nvelobench: build it with velo's static UCX (make velobench), or, on a network trusted with this process's memory, set VELO_UCX_TRUST_NETWORK=1", err)
		}
		return fmt.Errorf("velo's UCX transport: %w", err)
	}
	var u *ucxtransport.Transport
	var ucxOpt velo.Option
	if len(m.Rails) == 0 {
		// velobench measures the RDMA path, over tcp's software lanes too (RMAOverSoftwareLanes: on
		// hardware lanes it changes nothing).
		if u, err = ucxtransport.New(ucxtransport.Config{EagerEndpoints: true, RMAOverSoftwareLanes: true, Logger: log}); err != nil {
			ctl.Close()
			d.Close()
			return nil, unguarded(err)
		}
		ucxOpt = velo.WithUCXTransport(u)
	} else {
		// velo's rails: one UCX transport per device, joined into a rail set that slices large
		// reads over them (one device: a plain transport restricted to it). The first is the one
		// whose engine settings the report shows.
		ucxOpt = velo.WithRails(velo.RailPolicy{Devices: m.Rails, Slice: true}, func(dev string) (transport.Transport, error) {
			t, err := ucxtransport.New(ucxtransport.Config{EagerEndpoints: true, RMAOverSoftwareLanes: true, Logger: log, NetDevices: dev})
			if err != nil {
				return nil, unguarded(err)
			}
			if u == nil {
				u = t
			}
			return t, nil
		})
	}
	all := append([]velo.Option{
		velo.WithLogger(log), velo.WithTransport(ctl), ucxOpt, velo.WithDiscovery(d, name),
		velo.WithRDMA(velo.RDMAConfig{Pool: velo.RDMAPoolConfig{RegisteredBytesBudget: budget(memory)}}),
	}, opts...)
	if m.BatchInline >= 0 {
		all = append(all, velo.WithBatchInlineMax(m.BatchInline))
	}
	if m.SameHost {
		all = append(all, velo.WithSameHost(velo.SameHostConfig{}))
	}
	v, err := velo.New(ctx, all...)
	if err != nil {
		ctl.Close()
		if u != nil {
			u.Close()
		}
		d.Close()
		if len(m.Rails) > 0 && errors.Is(err, velo.ErrRails) {
			return nil, fmt.Errorf("--rails %s: %w", strings.Join(m.Rails, ","), err)
		}
		return nil, err
	}
	return &node{v: v, u: u, host: host, port: ln.Addr().(*net.TCPAddr).Port, where: m.where(), auth: cred.String()}, nil
}

// etcdPort is the port of the --etcd URL (its connections are discovery's, not the sweep's), 0
// without one.
func (m meeting) etcdPort() int {
	if m.Etcd == "" {
		return 0
	}
	u, err := url.Parse(m.Etcd)
	if err != nil {
		return 0
	}
	if p, err := strconv.Atoi(u.Port()); err == nil {
		return p
	}
	if u.Scheme == "https" {
		return 443
	}
	return 2379
}

// putPathPrefix marks velo_push_path_total's pairs among the path counts.
const putPathPrefix = "put:"

// counters is one gather of the instance's metrics, the counters a point compares before and after:
// the path counts ("path/reason" -> count; push's pairs prefixed putPathPrefix) and the bytes
// read over each rail ("index:device" -> bytes; empty without rails). One Gather serves both, so
// the two are of the same moment.
func counters(g prometheus.Gatherer) (paths, railBytes map[string]float64) {
	paths, railBytes = map[string]float64{}, map[string]float64{}
	if g == nil {
		return paths, railBytes
	}
	mfs, err := g.Gather()
	if err != nil {
		return paths, railBytes
	}
	for _, mf := range mfs {
		// Each family is summed by two of its labels, under prefix+<a>+sep+<b>.
		var out map[string]float64
		var prefix, a, sep, b string
		switch mf.GetName() {
		case metrics.RDMAPathTotal:
			out, a, sep, b = paths, "path", "/", "reason"
		case push.PathTotal:
			// Push's: "put:rdma/ok" counts puts on the writer, grants' paths on the receiver.
			out, prefix, a, sep, b = paths, putPathPrefix, "path", "/", "reason"
		case rails.MetricBytes:
			out, a, sep, b = railBytes, "rail", ":", "device"
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			var va, vb string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case a:
					va = l.GetValue()
				case b:
					vb = l.GetValue()
				}
			}
			out[prefix+va+sep+vb] += m.GetCounter().GetValue()
		}
	}
	return paths, railBytes
}

// railDelta is after minus before for every rail, zeros kept (a rail that carried nothing is the
// point of the figure); nil without rails.
func railDelta(before, after map[string]float64) map[string]float64 {
	if len(after) == 0 {
		return nil
	}
	out := map[string]float64{}
	for k, v := range after {
		out[k] = v - before[k]
	}
	return out
}

// pathDelta is after minus before, without the pairs that did not move.
func pathDelta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// cpuNanos is this process's user and system CPU time.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// quietLogger keeps velo's informational lines out of the benchmark's output; warnings and errors
// go to w.
func quietLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
