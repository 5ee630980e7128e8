// Command rendezvous_rdma_two_proc moves a payload between two OS processes on the rendezvous RDMA
// path — a TCP control plane, the UCX transport beside it, one GET for the bytes — and proves the
// lane it took.
//
// Owner and consumer find each other through velo's filesystem discovery backend in --dir (no
// RegisterPeer anywhere). The owner stages random bytes with StageDataPinned; the consumer asks
// it for its offer (the handle and the payload's SHA-256) with a join request (a member file left
// in --dir by an owner that was killed names one that no longer answers; the consumer then waits
// for the new one). The consumer fetches the payload, checks the SHA-256 and reports back over the messenger;
// both print their velo_rendezvous_rdma_path_total lines and what the kernel counted on velo's TCP
// control-plane sockets (TCP_INFO) beside every other TCP socket of the process (UCX's own, over
// UCX_TLS=tcp). Each side reads its counts while the other is still waiting on it, so both see a
// live connection. The consumer exits non-zero unless the transfer took the RDMA path, so a
// correct payload that came by chunks still fails.
//
// When UCX_TLS names shared-memory transports only (sm,self; posix, sysv, cma …), UCX has no lane
// for velo's endpoints (they need peer failure handling, which those transports lack: the UCX
// transport logs no_ucx_lane once per peer), and the honest one-sided path between two processes
// of one host is velo's own same-host path: both sides then turn on WithSameHost, the consumer
// waits for its channel to the owner, and the transfer must take path shm instead (--same-host
// on or off overrides the choice).
//
//	make ucx-static   # velo's UCX, with the software RMA guard the UCX transport requires
//	UCX_TLS=tcp go run -tags ucx_static ./velo/examples/rendezvous_rdma_two_proc     # both roles as child processes
//
//	# two nodes, a directory both can read and write
//	UCX_NET_DEVICES=mlx5_2:1 UCX_TLS=rc_mlx5,ud_mlx5,self rendezvous_rdma_two_proc --role owner --dir /shared/rv
//	UCX_NET_DEVICES=mlx5_2:1 UCX_TLS=rc_mlx5,ud_mlx5,self rendezvous_rdma_two_proc --role consumer --dir /shared/rv
//
// Each side listens on --listen (default all interfaces, a free port) and publishes --advertise
// (default: this host's address on its default route, else its first non-loopback address, else
// 127.0.0.1), so the files work across hosts. See docs/rendezvous-rdma.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/examples/internal/twoproc"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// offer is what the owner answers a join with.
type offer struct {
	TCP    string      `json:"tcp"` // the control-plane address, for the TCP_INFO split
	Handle velo.Handle `json:"handle"`
	Size   int         `json:"size"`
	SHA256 string      `json:"sha256"`
}

// report is what the consumer tells the owner once it has the bytes.
type report struct {
	SHA256 string `json:"sha256"`
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

type flags struct {
	role, dir, listen, advertise string
	size                         int
	timeout                      time.Duration
	sameHost                     string
}

func main() {
	var f flags
	flag.StringVar(&f.role, "role", "", "owner or consumer; empty starts both as child processes")
	flag.StringVar(&f.dir, "dir", "", "directory both processes read and write (default: a new temporary one)")
	flag.IntVar(&f.size, "size", 8<<20, "payload size in bytes")
	flag.StringVar(&f.listen, "listen", "0.0.0.0:0", "TCP control-plane listen address")
	flag.StringVar(&f.advertise, "advertise", "", "host (or host:port) other nodes reach this one at (default: the address of the default route)")
	flag.DurationVar(&f.timeout, "timeout", 2*time.Minute, "give up after this long")
	flag.StringVar(&f.sameHost, "same-host", "auto", "on, off, or auto: on when UCX_TLS names shared-memory transports only")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	var err error
	switch f.role {
	case "":
		err = runBoth(f)
	case "owner", "consumer":
		err = runRole(ctx, f)
	default:
		err = fmt.Errorf("--role %q: use owner or consumer", f.role)
	}
	if err != nil {
		who := f.role
		if who == "" {
			who = "rendezvous_rdma_two_proc"
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", who, err)
		os.Exit(1)
	}
}

func runRole(ctx context.Context, f flags) error {
	if f.dir == "" {
		return errors.New("--dir is required with --role")
	}
	if f.size <= 0 {
		return fmt.Errorf("--size %d: must be positive", f.size)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d, err := twoproc.Discovery(f.dir, log)
	if err != nil {
		return err
	}
	same, err := sameHostOn(f.sameHost, os.Getenv("UCX_TLS"))
	if err != nil {
		return err
	}
	joins := twoproc.NewJoins()
	opts := []velo.Option{velo.WithDiscovery(d, twoproc.Consumer)}
	if f.role == "owner" {
		opts = joins.Options(d)
	}
	if same {
		opts = append(opts, velo.WithSameHost(velo.SameHostConfig{}))
	}
	n, err := start(ctx, log, f.listen, f.advertise, opts...)
	if err != nil {
		return err
	}
	defer n.v.Close()
	if f.role == "owner" {
		return runOwner(ctx, n, joins, f.size)
	}
	return runConsumer(ctx, n, same)
}

// sameHostOn decides --same-host: auto is on when tls (UCX_TLS) names shared-memory transports
// only, where UCX has no lane for velo's endpoints.
func sameHostOn(flag, tls string) (bool, error) {
	switch flag {
	case "on":
		return true, nil
	case "off":
		return false, nil
	case "auto":
	default:
		return false, fmt.Errorf("--same-host %q: use on, off or auto", flag)
	}
	if tls == "" {
		return false, nil
	}
	for _, t := range strings.Split(tls, ",") {
		switch strings.TrimPrefix(strings.TrimSpace(t), "^") {
		case "sm", "shm", "posix", "sysv", "cma", "knem", "xpmem", "self":
		default:
			return false, nil
		}
	}
	return true, nil
}

// node is one side: the instance, its TCP control plane and the address it publishes.
type node struct {
	v    *velo.Velo
	ctl  *tcp.Transport
	addr *net.TCPAddr
}

// start brings up a TCP control plane and the UCX transport beside it, with the RDMA registry.
func start(ctx context.Context, log *slog.Logger, listen, advertise string, opts ...velo.Option) (node, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return node{}, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	host := advertise
	if h, p, err := net.SplitHostPort(advertise); err == nil {
		host = h
		if p != "0" && p != "" {
			port, _ = strconv.Atoi(p)
		}
	}
	if host == "" {
		host = tcp.RoutableHost()
	}
	adv := net.JoinHostPort(host, strconv.Itoa(port))
	addr, err := net.ResolveTCPAddr("tcp", adv)
	if err != nil {
		ln.Close()
		return node{}, fmt.Errorf("--advertise %q: %w", advertise, err)
	}
	tr, err := tcp.New(tcp.Config{Listener: ln, Advertise: adv})
	if err != nil {
		ln.Close()
		return node{}, err
	}
	// Eager endpoints move UCX wireup from the first GET to RegisterPeer.
	u, err := ucxtransport.New(ucxtransport.Config{EagerEndpoints: true}) // logs through velo.WithLogger below
	if err != nil {
		tr.Close()
		return node{}, fmt.Errorf("UCX transport: %w", err)
	}
	v, err := velo.New(ctx, append(opts, velo.WithTransport(tr), velo.WithUCXTransport(u), velo.WithRDMA(velo.RDMAConfig{}), velo.WithLogger(log))...)
	if err != nil {
		tr.Close()
		u.Close()
		return node{}, err
	}
	return node{v: v, ctl: tr, addr: addr}, nil
}

func runOwner(ctx context.Context, n node, joins *twoproc.Joins, size int) error {
	v, addr := n.v, n.addr
	payload, sum, err := twoproc.RandomPayload(size)
	if err != nil {
		return err
	}
	type verified struct {
		r      report
		counts string
	}
	reports := make(chan verified, 1)
	if err := v.RegisterHandler("demo.verified", func(ctx context.Context, m *velo.Message) ([]byte, error) {
		var r report
		if err := json.Unmarshal(m.Payload, &r); err != nil {
			return nil, err
		}
		c, err := joins.Wait(ctx) // a consumer reports after it joined
		if err != nil {
			return nil, err
		}
		// Read the kernel's counts now: the consumer waits for this answer, so its connection is
		// still up. Once answered it may exit and close it.
		select {
		case reports <- verified{r, kernelCounts("owner", n, c.Peer, c.TCP)}:
		default:
		}
		return []byte("ok"), nil
	}); err != nil {
		return err
	}
	h, err := v.StageDataPinned(ctx, payload)
	if err != nil {
		return err
	}
	where := "pinned memory"
	if md, err := v.Metadata(ctx, h); err == nil && !md.Pinned {
		where = fmt.Sprintf("plain memory (reason %s: it will move by chunks)", md.Staging)
	}
	if err := joins.Offer(offer{TCP: addr.String(), Handle: h, Size: size, SHA256: sum}); err != nil {
		return err
	}
	fmt.Printf("owner: staged %d bytes in %s, SHA-256 %s; control plane %s; waiting for the consumer\n", size, where, sum, addr)
	if _, err := joins.Wait(ctx); err != nil {
		return err
	}
	var got verified
	select {
	case got = <-reports:
	case <-ctx.Done():
		return fmt.Errorf("the consumer never reported: %w", ctx.Err())
	}
	if got.r.SHA256 != sum {
		return fmt.Errorf("the consumer reports SHA-256 %s, the owner staged %s", got.r.SHA256, sum)
	}
	fmt.Printf("owner: the consumer verified SHA-256 %s on path %s/%s\n", sum, got.r.Path, got.r.Reason)
	fmt.Print(got.counts)
	twoproc.PrintPathLines("owner", v)
	return nil
}

func runConsumer(ctx context.Context, n node, sameHost bool) error {
	v, addr := n.v, n.addr
	// Join the owner before the first get: discovery registered it with every transport, UCX
	// included, before it came up (a get to an owner this instance does not know over UCX
	// offers nothing and takes the chunked path, reason no_offer).
	var o offer
	owner, err := twoproc.JoinOwner(ctx, "consumer", v, addr.String(), &o)
	if err != nil {
		return err
	}
	want := metrics.PathRDMA
	if sameHost {
		// The same-host path is taken once this side's channel to the owner is proven; the get
		// waits for it rather than move by chunks.
		want = metrics.PathSameHost
		for ok, why := v.SameHost(owner); !ok; ok, why = v.SameHost(owner) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("the same-host path to the owner was never taken: %s", why)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	l, err := twoproc.FetchVerified(ctx, v, o.Handle, o.SHA256)
	if err != nil {
		return err
	}
	got := o.SHA256
	// Read the kernel's counts before the report: the owner waits for it, so its connection is
	// still up; once it has answered it may exit.
	counts := kernelCounts("consumer", n, owner, o.TCP)
	rb, _ := json.Marshal(report{SHA256: got, Path: string(l.Path), Reason: string(l.Reason)})
	if _, err := v.Request(ctx, owner, "demo.verified", rb); err != nil {
		return fmt.Errorf("reporting to the owner: %w", err)
	}
	fmt.Print(counts)
	twoproc.PrintPathLines("consumer", v)
	if l.Path != want {
		return fmt.Errorf("the bytes are right but took the %s path (reason %s), not %s: see the common failures in docs/rendezvous-rdma.md", l.Path, l.Reason, want)
	}
	fmt.Printf("consumer: the payload took path %s\n", l.Path)
	return nil
}

// kernelCounts reports what the kernel counted (TCP_INFO) on velo's TCP control-plane connection
// to the peer — asked of the TCP transport, which knows its connections — and on every other TCP
// socket of this process (over UCX_TLS=tcp, UCX's own), as lines to print. After an RDMA-path
// transfer the former holds only control messages and the payload shows up in the latter.
func kernelCounts(who string, n node, peer velo.InstanceID, peerTCP string) string {
	ctl, err := n.ctl.KernelCounts(peer)
	if err != nil {
		return fmt.Sprintf("%s: kernel TCP counts unavailable: %v\n", who, err)
	}
	peerPort := -1
	if _, p, err := net.SplitHostPort(peerTCP); err == nil {
		peerPort, _ = strconv.Atoi(p)
	}
	_, other, err := twoproc.KernelTCPCounts(n.addr.Port, peerPort)
	if err != nil {
		return fmt.Sprintf("%s: kernel TCP counts unavailable: %v\n", who, err)
	}
	return fmt.Sprintf("%s: kernel TCP_INFO: velo TCP control plane: %v\n%s: kernel TCP_INFO: other TCP sockets (UCX): %v\n",
		who, twoproc.TCPCounts{Conns: ctl.Conns, BytesOut: ctl.BytesAcked, BytesIn: ctl.BytesReceived}, who, other)
}

// runBoth starts the owner and the consumer as child processes of this binary.
func runBoth(f flags) error {
	dir := f.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "velo-rv-rdma-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	err := twoproc.RunBoth([]string{"owner", "consumer"}, func(role string) []string {
		a := []string{"--role", role, "--dir", dir, "--size", strconv.Itoa(f.size), "--timeout", f.timeout.String(), "--listen", f.listen}
		if f.advertise != "" {
			a = append(a, "--advertise", f.advertise)
		}
		return append(a, "--same-host", f.sameHost)
	})
	if err != nil {
		return err
	}
	fmt.Println("rendezvous_rdma_two_proc: both processes succeeded; the payload took the one-sided path the pair has (see the consumer's line)")
	return nil
}
