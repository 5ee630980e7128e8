package rdmapath_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
)

// TestKeyRevokedOnEveryLeaseEnding: however a lease ends — release, detach, TTL, the consumer's
// process killed, the owner's shutdown — its registration is revoked, and replaying its
// descriptor through real UCX fails without a byte of the owner's memory.
func TestKeyRevokedOnEveryLeaseEnding(t *testing.T) {
	data := randomBytes(4<<20, 4)
	for _, end := range []string{"release", "detach", "ttl", "consumer killed", "shutdown"} {
		t.Run(end, func(t *testing.T) {
			var opts []velo.Option
			if end == "ttl" {
				opts = append(opts, velo.WithLeaseTTL(2*time.Second))
			}
			owner := startNode(t, true, opts...)
			ctx := tctx(t)
			h, err := owner.StageDataPinned(ctx, data)
			if err != nil {
				t.Fatal(err)
			}
			reaped := func(cause string) float64 {
				x, _ := metrics.Value(owner.Metrics(), metrics.LeasesReapedTotal, map[string]string{"cause": cause})
				return x
			}
			if end == "consumer killed" {
				killConsumerMidLease(t, owner, h)
				eventually(t, "the owner to reap the dead consumer's lease", func() bool { return reaped("peer_down") == 1 })
				if st := owner.RDMAStats(); st.LeaseRegistrations != 0 {
					t.Fatalf("after the consumer died: %+v", st)
				}
				return
			}
			cons := startNode(t, true)
			link(t, owner, cons, true)
			l, err := cons.Get(ctx, h)
			if err != nil || l.Path != metrics.PathRDMA || !bytes.Equal(l.Bytes(), data) {
				t.Fatalf("get: %v", err)
			}
			if owner.RDMAStats().LeaseRegistrations != 1 {
				t.Fatal("no registration while the lease is open")
			}
			switch end {
			case "release":
				err = l.Release(ctx)
			case "detach":
				err = l.Detach(ctx)
			case "ttl":
				eventually(t, "the TTL reaper", func() bool { return reaped("ttl") == 1 })
			case "shutdown":
				owner.Close()
				if reaped("shutdown") != 1 {
					t.Error("the shutdown did not end the lease")
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if st := owner.RDMAStats(); st.LeaseRegistrations != 0 {
				t.Fatalf("after %s: %+v", end, st)
			}
			if end == "shutdown" {
				return // the owner's UCX is gone: nothing to read from
			}
			last := cons.ucx.lastGet()
			dst := make([]byte, last.n)
			if err := cons.ucx.rma.Get(ctx, last.peer, last.key, last.offset, dst); err == nil {
				t.Fatal("a revoked descriptor read again")
			} else {
				t.Logf("replayed descriptor: %v", err)
			}
			if !bytes.Equal(dst, make([]byte, len(dst))) {
				t.Fatal("a revoked descriptor yielded owner bytes")
			}
		})
	}
}

// TestLeaseExpiresBeforeTheGet: the owner's TTL reaper revokes the key before the consumer's GET
// runs; UCX refuses the GET and the get falls back to chunks once (get_failed).
func TestLeaseExpiresBeforeTheGet(t *testing.T) {
	owner := startNode(t, true, velo.WithLeaseTTL(time.Second))
	cons := startNode(t, true)
	link(t, owner, cons, true)
	ctx := tctx(t)
	data := randomBytes(2<<20, 5)
	h, _ := owner.StageDataPinned(ctx, data)
	cons.ucx.setBefore(func() {
		eventually(t, "the lease to expire", func() bool { return owner.RDMAStats().LeaseRegistrations == 0 })
	})
	l, err := cons.Get(ctx, h)
	if err != nil || !bytes.Equal(l.Bytes(), data) {
		t.Fatalf("get: %v", err)
	}
	rdmatest.ExpectPaths(t, "consumer", cons.Metrics(), map[rdmatest.Pair]float64{pr(metrics.PathChunked, metrics.ReasonGetFailed): 1})
	rdmatest.ExpectPaths(t, "owner", owner.Metrics(), map[rdmatest.Pair]float64{pr(metrics.PathRDMA, metrics.ReasonOK): 1, pr(metrics.PathChunked, metrics.ReasonNoOffer): 1})
	l.Release(ctx)
}

// killConsumerMidLease runs a consumer in a child process (this test binary again), lets it take
// an RDMA lease on h and never end it, and kills it with SIGKILL.
func killConsumerMidLease(t *testing.T, owner node, h velo.Handle) {
	t.Helper()
	info, _ := json.Marshal(owner.PeerInfo())
	ht, _ := h.MarshalText()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildConsumer$", "-test.v")
	cmd.Env = append(os.Environ(), "VELO_RDMA_CHILD_OWNER="+string(info), "VELO_RDMA_CHILD_HANDLE="+string(ht))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	var seen []string
	deadline := time.After(testWait)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the child consumer exited before its GET:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			if strings.HasPrefix(l, "HOLDING ") {
				if l != "HOLDING rdma/ok" {
					t.Fatalf("the child's get took %s", l)
				}
				if owner.RDMAStats().LeaseRegistrations != 1 {
					t.Fatal("no registration while the child holds its lease")
				}
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				go func() {
					for range lines {
					}
				}()
				return
			}
		case <-deadline:
			t.Fatalf("the child consumer did not get the payload:\n%s", strings.Join(seen, "\n"))
		}
	}
}

// TestChildConsumer is the child of killConsumerMidLease; it does nothing in a normal run.
func TestChildConsumer(t *testing.T) {
	ownerInfo := os.Getenv("VELO_RDMA_CHILD_OWNER")
	if ownerInfo == "" {
		t.Skip("runs only as the child of TestKeyRevokedOnEveryLeaseEnding")
	}
	var info velo.PeerInfo
	var h velo.Handle
	if err := json.Unmarshal([]byte(ownerInfo), &info); err != nil {
		t.Fatal(err)
	}
	if err := h.UnmarshalText([]byte(os.Getenv("VELO_RDMA_CHILD_HANDLE"))); err != nil {
		t.Fatal(err)
	}
	c := startNode(t, true)
	ctx := tctx(t)
	if err := c.RegisterPeer(ctx, info); err != nil {
		t.Fatal(err)
	}
	l, err := c.Get(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("HOLDING %s/%s\n", l.Path, l.Reason)
	<-ctx.Done() // the parent kills this process
}
