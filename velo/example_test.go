package velo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport/tcp"
)

var quiet = velo.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))

// Two instances in one process; in a deployment each runs in its own process and they exchange
// PeerInfo through a file, a key-value store or a message.
func Example() {
	ctx := context.Background()
	server, _ := velo.New(ctx, quiet)
	defer server.Close()
	client, _ := velo.New(ctx, quiet)
	defer client.Close()

	server.RegisterHandler("greet", func(ctx context.Context, m *velo.Message) ([]byte, error) {
		return []byte("hello, " + string(m.Payload)), nil
	})
	if err := client.RegisterPeer(ctx, server.PeerInfo()); err != nil {
		panic(err)
	}
	resp, err := client.Request(ctx, server.ID(), "greet", []byte("world"))
	fmt.Println(string(resp), err)
	// Output: hello, world <nil>
}

func ExampleNew() {
	ctx := context.Background()
	tr, err := tcp.New(tcp.Config{ListenAddress: "127.0.0.1:0"})
	if err != nil {
		panic(err)
	}
	v, err := velo.New(ctx, velo.WithTransport(tr), quiet)
	if err != nil {
		panic(err)
	}
	defer v.Close()
	fmt.Println(len(v.PeerInfo().Addresses["tcp"]) > 0)
	// Output: true
}

func ExamplePeerInfo() {
	ctx := context.Background()
	a, _ := velo.New(ctx, quiet)
	defer a.Close()
	b, _ := velo.New(ctx, quiet)
	defer b.Close()

	// What a would write to a file for b to read.
	published, _ := json.Marshal(a.PeerInfo())

	var info velo.PeerInfo
	if err := json.Unmarshal(published, &info); err != nil {
		panic(err)
	}
	fmt.Println(info.ID == a.ID(), b.RegisterPeer(ctx, info))
	// Output: true <nil>
}

func ExampleVelo_StageData() {
	ctx := context.Background()
	owner, _ := velo.New(ctx, quiet)
	defer owner.Close()
	consumer, _ := velo.New(ctx, quiet)
	defer consumer.Close()
	consumer.RegisterPeer(ctx, owner.PeerInfo())

	h, _ := owner.StageData(ctx, []byte("a large tensor, in real life"))

	// The handle travels to the consumer (in a message, usually); the consumer pulls the bytes.
	lease, err := consumer.Get(ctx, h)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s via %s/%s\n", lease.Bytes(), lease.Path, lease.Reason)
	lease.Release(ctx) // the handle's only reference: the owner frees the payload

	lines, _ := metrics.Lines(consumer.Metrics(), metrics.RDMAPathTotal)
	for _, l := range lines {
		if l[len(l)-1] != '0' {
			fmt.Println(l)
		}
	}
	// Output:
	// a large tensor, in real life via chunked/not_configured
	// velo_rendezvous_rdma_path_total{path="chunked",reason="not_configured"} 1
}

func ExampleVelo_GetInto() {
	ctx := context.Background()
	owner, _ := velo.New(ctx, quiet)
	defer owner.Close()
	consumer, _ := velo.New(ctx, quiet)
	defer consumer.Close()
	consumer.RegisterPeer(ctx, owner.PeerInfo())

	h, _ := owner.StageData(ctx, []byte("0123456789"))
	dst := make([]byte, h.Size) // exactly the payload's size
	lease, err := consumer.GetInto(ctx, h, dst)
	if err != nil {
		panic(err)
	}
	lease.Detach(ctx) // the payload stays staged for another consumer
	md, _ := consumer.Metadata(ctx, h)
	fmt.Println(string(dst), md.Refs, md.Leases)
	// Output: 0123456789 1 0
}

func ExampleRegisterJSONHandler() {
	ctx := context.Background()
	a, _ := velo.New(ctx, quiet)
	defer a.Close()
	b, _ := velo.New(ctx, quiet)
	defer b.Close()
	a.RegisterPeer(ctx, b.PeerInfo())

	type sum struct{ X, Y int }
	velo.RegisterJSONHandler(b, "sum", func(ctx context.Context, from velo.InstanceID, s sum) (int, error) {
		return s.X + s.Y, nil
	})
	n, err := velo.RequestJSON[int](ctx, a, b.ID(), "sum", sum{X: 2, Y: 40})
	fmt.Println(n, err)
	// Output: 42 <nil>
}
