// Command cluster runs N members (default 4) that find each other through discovery — the
// filesystem backend, or etcd with -etcd — with no RegisterPeer anywhere, and move payloads
// all-to-all on the rendezvous
// RDMA path: every member stages one payload in pinned memory, asks every other member for its
// handle, fetches it, checks its SHA-256 and that it took the RDMA path, and shuts down
// gracefully once every other member fetched its own. It exits non-zero unless every pair moved
// on rdma/ok.
//
//	make ucx-static   # velo's UCX, with the software RMA guard the UCX transport requires
//	UCX_TLS=tcp go run -tags ucx_static ./velo/examples/cluster            # 4 members as child processes
//	UCX_TLS=tcp go run -tags ucx_static ./velo/examples/cluster -n 8
//	UCX_TLS=tcp go run -tags ucx_static ./velo/examples/cluster -etcd http://127.0.0.1:2379
//
//	# members on several nodes, a directory all of them share
//	cluster --role member --dir /shared/velo --name "$(hostname)" -n 16
//	cluster --role member --etcd http://etcd-0:2379,http://etcd-1:2379 --name "$(hostname)" -n 16
//
// The example is a module of its own because it imports the etcd backend's module.
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/discovery"
	"github.com/velo-go/velo/velo/discovery/etcd"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

func main() {
	role := flag.String("role", "", "member; empty starts -n members as child processes")
	dir := flag.String("dir", "", "the directory the members share (default: a new temporary one)")
	etcdURLs := flag.String("etcd", "", "find members through etcd at these comma-separated client URLs instead of a directory")
	name := flag.String("name", "", "this member's name (member role)")
	n := flag.Int("n", 4, "how many members the cluster has")
	size := flag.Int("size", 8<<20, "payload size in bytes")
	timeout := flag.Duration("timeout", 3*time.Minute, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var err error
	if *role == "member" {
		err = member(ctx, *dir, *etcdURLs, *name, *n, *size)
	} else {
		err = launch(ctx, *dir, *etcdURLs, *n, *size, *timeout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func launch(ctx context.Context, dir, etcdURLs string, n, size int, timeout time.Duration) error {
	if n < 2 {
		return errors.New("-n must be at least 2")
	}
	if dir == "" && etcdURLs == "" {
		d, err := os.MkdirTemp("", "velo-cluster-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, self, "--role", "member", "--dir", dir, "--etcd", etcdURLs, "--name", "member-"+strconv.Itoa(i),
				"-n", strconv.Itoa(n), "--size", strconv.Itoa(size), "--timeout", timeout.String())
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			if err := cmd.Run(); err != nil {
				errs[i] = fmt.Errorf("member-%d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	backend := "the filesystem"
	if etcdURLs != "" {
		backend = "etcd"
	}
	fmt.Printf("cluster: %d members found through %s, %d transfers, every one on the RDMA path\n", n, backend, n*(n-1))
	return nil
}

func member(ctx context.Context, dir, etcdURLs, name string, n, size int) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var d velo.Discovery
	var err error
	if etcdURLs != "" {
		d, err = etcd.New(etcd.Config{Endpoints: strings.Split(etcdURLs, ","), Cluster: "example", Logger: log})
	} else {
		d, err = discovery.NewFilesystem(discovery.FilesystemConfig{Dir: dir, Cluster: "example", Logger: log, Poll: 100 * time.Millisecond})
	}
	if err != nil {
		return err
	}
	ctl, err := tcp.New(tcp.Config{})
	if err != nil {
		return err
	}
	u, err := ucxtransport.New(ucxtransport.Config{EagerEndpoints: true})
	if err != nil {
		return err
	}
	// Peers may ask for the handle as soon as discovery shows this member, which is before the
	// payload is staged: the handler is there from the start (WithHandler) and waits for it.
	var answer []byte
	staged := make(chan struct{})
	handleOf := func(hctx context.Context, _ *velo.Message) ([]byte, error) {
		select {
		case <-staged:
			return answer, nil
		case <-hctx.Done():
			return nil, hctx.Err()
		}
	}
	v, err := velo.New(ctx, velo.WithLogger(log), velo.WithHandler("handle", handleOf), velo.WithDiscovery(d, name),
		velo.WithTransport(ctl), velo.WithUCXTransport(u))
	if err != nil {
		return err
	}
	defer v.Close()
	events := v.WatchPeers(ctx)

	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	h, err := v.StageDataPinned(ctx, data)
	if err != nil {
		return err
	}
	for range n - 2 { // one reference for each of the n-1 other members
		if err := v.Ref(ctx, h); err != nil {
			return err
		}
	}
	handle, _ := h.MarshalBinary()
	answer = append(append([]byte(nil), sum[:]...), handle...)
	close(staged)

	// Wait until every other member is up: those already found (Peers), then those to come.
	up := map[velo.InstanceID]bool{}
	for _, p := range v.Peers() {
		if p.State == velo.StateUp {
			up[p.ID] = true
		}
	}
	for len(up) < n-1 {
		select {
		case ev := <-events:
			if ev.Kind == velo.PeerUp {
				up[ev.Peer.ID] = true
			}
		case <-ctx.Done():
			return fmt.Errorf("%s: only %d of %d members appeared: %w", name, len(up), n-1, ctx.Err())
		}
	}
	for peer := range up {
		answer, err := v.Request(ctx, peer, "handle", nil)
		if err != nil {
			return fmt.Errorf("%s: asking %016x for its handle: %w", name, uint64(peer), err)
		}
		var ph velo.Handle
		if len(answer) < 32 {
			return fmt.Errorf("%s: %016x answered %d bytes", name, uint64(peer), len(answer))
		}
		if err := ph.UnmarshalBinary(answer[32:]); err != nil {
			return err
		}
		l, err := v.Get(ctx, ph)
		if err != nil {
			return fmt.Errorf("%s: get from %016x: %w", name, uint64(peer), err)
		}
		got := sha256.Sum256(l.Bytes())
		path, reason := l.Path, l.Reason
		if err := l.Release(ctx); err != nil {
			return err
		}
		if string(got[:]) != string(answer[:32]) {
			return fmt.Errorf("%s: the payload of %016x differs", name, uint64(peer))
		}
		if path != metrics.PathRDMA {
			return fmt.Errorf("%s: the payload of %016x took %s/%s, not the RDMA path", name, uint64(peer), path, reason)
		}
	}
	// Stay until every other member fetched this one's payload, then leave gracefully.
	for {
		if slots, _ := v.StagedCounts(); slots == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not every member fetched this one's payload: %w", name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	fmt.Printf("%s: fetched %d payloads on rdma/ok; all %d others fetched its own\n", name, n-1, n-1)
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	return v.Shutdown(sctx)
}
