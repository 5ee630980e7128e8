package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/ucx/benchkit"
	"github.com/velo-go/velo/velo"
)

// The receiver is the second process: two instances (one with the UCX transport and its RDMA
// registry, one with the TCP control plane only), a region on each, a write grant of each region
// to the writer's instance of the same kind, and a raw TCP sink for the chunked path's baseline.

// receiverHello is the receiver's announcement.
type receiverHello struct {
	RDMA, Plain velo.PeerInfo
	Raw         string // raw TCP sink: an 8-byte size, then that many bytes; answered with one byte
}

// writerHello is the parent's answer: its instances. Direct, when set, is a writer whose UCX
// transport writes with ucp_put_nbx and a flush (ucx.RMADirect) whatever its lanes.
type writerHello struct {
	RDMA, Plain velo.PeerInfo
	Direct      *velo.PeerInfo
	// TwoTrips is a writer that sends even a small notified put as a write and then its
	// notification (velo.WithPushInlineMax(0)).
	TwoTrips velo.PeerInfo
}

// grantsHello is the receiver's second line: the grants and how their regions are held.
type grantsHello struct {
	Pinned, Plain             velo.GrantHandle
	Direct                    velo.GrantHandle `json:",omitzero"`
	TwoTrips                  velo.GrantHandle
	PinnedReason, PlainReason string
}

// request is a line the parent writes on the receiver's stdin once the grants are out.
type request struct {
	Op     string // "sum": SHA-256 of Length bytes at Offset of a region; "notes": notifications so far
	Region string // "pinned", "plain" or "direct"
	Offset uint64
	Length uint64
}

type reply struct {
	Sum   [32]byte `json:",omitzero"`
	Notes int64
	Err   string `json:",omitempty"`
}

// grantTTL outlives any run: the bench's grants end when the receiver exits.
const grantTTL = 24 * time.Hour

func runReceiver() error {
	ctx := context.Background()
	rv, _, err := startRDMA(ctx, ucx.RMAAuto)
	if err != nil {
		return err
	}
	defer rv.Close()
	pv, err := startPlain(ctx)
	if err != nil {
		return err
	}
	defer pv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	if err := benchkit.Announce(receiverHello{RDMA: rv.PeerInfo(), Plain: pv.PeerInfo(), Raw: ln.Addr().String()}); err != nil {
		return err
	}
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("the writer's hello: %w", err)
	}
	var w writerHello
	if err := json.Unmarshal(line, &w); err != nil {
		return fmt.Errorf("the writer's hello: %w", err)
	}
	if err := rv.RegisterPeer(ctx, w.RDMA); err != nil {
		return err
	}
	if err := pv.RegisterPeer(ctx, w.Plain); err != nil {
		return err
	}
	if w.Direct != nil {
		if err := rv.RegisterPeer(ctx, *w.Direct); err != nil {
			return err
		}
	}
	if err := rv.RegisterPeer(ctx, w.TwoTrips); err != nil {
		return err
	}

	pinned, err := rv.NewRegion(regionSize)
	if err != nil {
		return err
	}
	defer pinned.Free()
	plain, err := pv.NewRegion(regionSize)
	if err != nil {
		return err
	}
	defer plain.Free()
	// Notifications are counted by a handler: "notified" is the moment it runs, and the writer's
	// Put returns once the receiver answered after it.
	var notes atomic.Int64
	onNotify := func(velo.Notification) { notes.Add(1) }
	gp, err := rv.GrantWrite(ctx, w.RDMA.ID, pinned, velo.GrantOptions{TTL: grantTTL, OnNotify: onNotify})
	if err != nil {
		return err
	}
	defer gp.Revoke(ctx)
	gq, err := pv.GrantWrite(ctx, w.Plain.ID, plain, velo.GrantOptions{TTL: grantTTL, OnNotify: onNotify})
	if err != nil {
		return err
	}
	defer gq.Revoke(ctx)
	hello := grantsHello{Pinned: gp.Handle(), Plain: gq.Handle(), PinnedReason: string(pinned.Reason()), PlainReason: string(plain.Reason())}
	// The direct writer gets a region of its own: a region's grants to different writers may not
	// overlap.
	direct := pinned
	if w.Direct != nil {
		if direct, err = rv.NewRegion(regionSize); err != nil {
			return err
		}
		defer direct.Free()
		gd, err := rv.GrantWrite(ctx, w.Direct.ID, direct, velo.GrantOptions{TTL: grantTTL, OnNotify: onNotify})
		if err != nil {
			return err
		}
		defer gd.Revoke(ctx)
		hello.Direct = gd.Handle()
	}
	small, err := rv.NewRegion(1 << 20)
	if err != nil {
		return err
	}
	defer small.Free()
	gu, err := rv.GrantWrite(ctx, w.TwoTrips.ID, small, velo.GrantOptions{TTL: grantTTL, OnNotify: onNotify})
	if err != nil {
		return err
	}
	defer gu.Revoke(ctx)
	hello.TwoTrips = gu.Handle()
	go serveRaw(ln, plain.Bytes())
	if err := benchkit.Announce(hello); err != nil {
		return err
	}

	out := json.NewEncoder(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var q request
		var r reply
		if err := json.Unmarshal(line, &q); err != nil {
			return err
		}
		switch q.Op {
		case "sum":
			mem := pinned.Bytes()
			switch q.Region {
			case "plain":
				mem = plain.Bytes()
			case "direct":
				mem = direct.Bytes()
			}
			if q.Offset+q.Length > uint64(len(mem)) {
				r.Err = fmt.Sprintf("[%d, +%d) is outside the %d-byte region", q.Offset, q.Length, len(mem))
			} else {
				r.Sum = sha256.Sum256(mem[q.Offset : q.Offset+q.Length])
			}
		case "notes":
			r.Notes = notes.Load()
		default:
			r.Err = fmt.Sprintf("unknown request %q", q.Op)
		}
		if err := out.Encode(r); err != nil {
			return err
		}
	}
}

// serveRaw is the chunked path's baseline on the receiving side: it reads each transfer whole into
// the plain region's memory, where the chunked puts land, and answers with one byte once the last
// byte is in, as a Put returns once its bytes are in the receiver's memory.
func serveRaw(ln net.Listener, dst []byte) {
	c, err := ln.Accept()
	if err != nil {
		return
	}
	defer c.Close()
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint64(hdr[:])
		if n > uint64(len(dst)) {
			return
		}
		if _, err := io.ReadFull(c, dst[:n]); err != nil {
			return
		}
		if _, err := c.Write(hdr[:1]); err != nil {
			return
		}
	}
}
