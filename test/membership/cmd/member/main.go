// Command member is one cluster member for the membership benchmark: a velo instance with a TCP
// control plane that finds the others through discovery (a directory or etcd) and prints, once it
// has seen every other member up, how long that took from the moment the benchmark launched the
// cluster. It stays a member until its standard input closes.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/discovery"
	"github.com/velo-go/velo/velo/discovery/etcd"
	"github.com/velo-go/velo/velo/transport/tcp"
)

func main() {
	dir := flag.String("dir", "", "filesystem backend directory")
	etcdURLs := flag.String("etcd", "", "etcd client URLs, comma-separated")
	name := flag.String("name", "", "member name")
	n := flag.Int("n", 0, "cluster size")
	epoch := flag.Int64("epoch", 0, "when the benchmark launched the cluster, Unix nanoseconds")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var d velo.Discovery
	var err error
	if *etcdURLs != "" {
		d, err = etcd.New(etcd.Config{Endpoints: strings.Split(*etcdURLs, ","), Cluster: "bench", Logger: log})
	} else {
		d, err = discovery.NewFilesystem(discovery.FilesystemConfig{Dir: *dir, Cluster: "bench", Poll: 100 * time.Millisecond, Logger: log})
	}
	if err != nil {
		fail(err)
	}
	ctl, err := tcp.New(tcp.Config{})
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	v, err := velo.New(ctx, velo.WithLogger(log), velo.WithTransport(ctl), velo.WithDiscovery(d, *name))
	if err != nil {
		fail(err)
	}
	events := v.WatchPeers(ctx)
	up := map[velo.InstanceID]bool{}
	for _, p := range v.Peers() {
		if p.State == velo.StateUp {
			up[p.ID] = true
		}
	}
	for len(up) < *n-1 {
		ev := <-events
		if ev.Kind == velo.PeerUp {
			up[ev.Peer.ID] = true
		}
	}
	fmt.Printf("seen %d\n", time.Since(time.Unix(0, *epoch)).Nanoseconds())
	_, _ = io.Copy(io.Discard, os.Stdin)
	v.Close()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "member:", err)
	os.Exit(1)
}
