//go:build cgo && linux

package velo_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// An owner stages a payload in pinned memory and a consumer reads it with one GET over UCX (here
// over UCX_TLS=tcp; the environment wins, so the same code runs on InfiniBand).
func ExampleVelo_StageDataPinned() {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func() *velo.Velo {
		ctl, err := tcp.New(tcp.Config{}) // the control plane, first: messages take it
		if err != nil {
			panic(err)
		}
		u, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp", EagerEndpoints: true, RMAOverSoftwareLanes: true, Logger: quiet})
		if err != nil {
			panic(err)
		}
		v, err := velo.New(ctx, velo.WithTransport(ctl), velo.WithUCXTransport(u), velo.WithLogger(quiet))
		if err != nil {
			panic(err)
		}
		return v
	}
	owner, consumer := start(), start()
	defer owner.Close()
	defer consumer.Close()
	if err := consumer.RegisterPeer(ctx, owner.PeerInfo()); err != nil {
		panic(err)
	}

	h, err := owner.StageDataPinned(ctx, bytes.Repeat([]byte("velo"), 1<<18)) // maps the first arena
	if err != nil {
		panic(err)
	}
	l, err := consumer.Get(ctx, h)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(l.Bytes()), "bytes on path", l.Path, "reason", l.Reason)
	if err := l.Release(ctx); err != nil { // revokes the lease's registration on the owner
		panic(err)
	}
	fmt.Println("owner registrations after release:", owner.RDMAStats().LeaseRegistrations)
	// Output:
	// 1048576 bytes on path rdma reason ok
	// owner registrations after release: 0
}
