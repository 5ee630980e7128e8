//go:build cgo && linux

package velo

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// Memory types over the real UCX transport (UCX_TLS=tcp: the guarded GET, whose owner replies
// from the registration with its memory type). Host memory described with HostMemory takes the
// code CUDA memory takes: typed registrations and descriptors, typed GETs, and (with the test's
// bounce flag) the host bounce buffers of the chunked path, counted as device_bounce. The suite
// links velo's static UCX (make test-rdma-registry; make test-cuda runs it again linked with CUDA).

func ucxMemNode(t *testing.T, opts ...Option) *Velo {
	t.Helper()
	ctl, err := tcp.New(tcp.Config{})
	require.NoError(t, err)
	u, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp", EagerEndpoints: true, RMAOverSoftwareLanes: true, Logger: quietLogger()})
	require.NoError(t, err)
	v, err := New(context.Background(), append([]Option{WithLogger(quietLogger()), WithTransport(ctl), WithUCXTransport(u)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() {
		v.Close()
		st := v.RDMAStats()
		assert.Zero(t, st.LeaseRegistrations, "registrations left")
		assert.Zero(t, st.QuarantinedRegistrations, "quarantined registrations left")
	})
	return v
}

func ucxMemPair(t *testing.T, ownerOpts ...Option) (owner, cons *Velo) {
	t.Helper()
	owner, cons = ucxMemNode(t, ownerOpts...), ucxMemNode(t)
	ctx := tctx(t)
	require.NoError(t, cons.RegisterPeer(ctx, owner.PeerInfo()))
	require.NoError(t, owner.RegisterPeer(ctx, cons.PeerInfo()))
	return owner, cons
}

func bounced(m Memory) Memory { m.bounce = true; return m }

// typedPaths are the two ways memory taking the device path moves: by typed RDMA, and, with the
// serving side's RDMA path switched off, through the bounce buffers.
var typedPaths = []struct {
	name   string
	opts   []Option
	path   metrics.Path
	reason metrics.Reason
}{
	{"rdma", nil, metrics.PathRDMA, metrics.ReasonOK},
	{"bounce", []Option{WithRDMA(RDMAConfig{Disabled: true})}, metrics.PathChunked, metrics.ReasonDeviceBounce},
}

// memCase reads a staged region of src with GetIntoMemory, GetBatch and ReadRanges into
// destinations made by dst, checks every byte, and returns what each read's lease said.
func memReads(t *testing.T, cons *Velo, h Handle, src []byte, dst func([]byte) Memory) {
	t.Helper()
	ctx := tctx(t)
	out := make([]byte, len(src))
	l, err := cons.GetIntoMemory(ctx, h, dst(out))
	require.NoError(t, err)
	require.Equal(t, src, out, "GetIntoMemory")
	require.NoError(t, l.Detach(ctx))

	outs := [][]byte{make([]byte, len(src)), make([]byte, len(src))}
	res := cons.GetBatch(ctx, []GetRequest{GetRequestInto(h, dst(outs[0]))}, nil)
	require.NoError(t, res[0].Err)
	require.Equal(t, src, outs[0], "GetBatch")
	require.Empty(t, cons.DetachLeases(ctx, []*Lease{res[0].Lease})[0])

	ranges := []Range{
		RangeInto(0, 4096, dst(outs[1][:4096])),
		RangeInto(uint64(len(src))-70000, 70000, dst(outs[1][4096:4096+70000])),
		RangeInto(12345, 1<<20, dst(outs[1][100000:100000+1<<20])),
	}
	require.NoError(t, cons.ReadRanges(ctx, h, ranges))
	require.Equal(t, src[:4096], outs[1][:4096])
	require.Equal(t, src[len(src)-70000:], outs[1][4096:4096+70000])
	require.Equal(t, src[12345:12345+1<<20], outs[1][100000:100000+1<<20])
}

// TestRDMAMemoryHostRegionOverUCX: a region of host memory described with HostMemory is staged
// zero-copy, each lease registers it with its memory type, and every read into described memory
// takes the RDMA path (rdma/ok on both sides), byte for byte; nothing stays registered.
func TestRDMAMemoryHostRegionOverUCX(t *testing.T) {
	owner, cons := ucxMemPair(t)
	ctx := tctx(t)
	src := payload(3<<20+5, 11)
	g, err := owner.WrapRegionMemory(HostMemory(src))
	require.NoError(t, err)
	require.True(t, g.Pinned())
	assert.Equal(t, MemoryHost, g.Memory().Type)
	h, err := owner.StageRegion(ctx, g)
	require.NoError(t, err)

	memReads(t, cons, h, src, HostMemory)
	assert.Equal(t, 3.0, pathCount(t, cons, metrics.PathRDMA, metrics.ReasonOK), "GetIntoMemory, GetBatch, ReadRanges")
	assert.Equal(t, 3.0, pathCount(t, owner, metrics.PathRDMA, metrics.ReasonOK))
	assert.Zero(t, pathCount(t, cons, metrics.PathChunked, metrics.ReasonDeviceBounce))

	// The device path with host memory: a region registered for each lease with its memory
	// type (transport.MemoryRMA), a version-3 descriptor naming it, typed GETs into the
	// destinations: what CUDA memory takes on the RDMA path.
	g2, err := owner.WrapRegionMemory(bounced(HostMemory(src)))
	require.NoError(t, err)
	require.True(t, g2.Pinned())
	h2, err := owner.StageRegion(ctx, g2)
	require.NoError(t, err)
	memReads(t, cons, h2, src, func(b []byte) Memory { return bounced(HostMemory(b)) })
	assert.Equal(t, 6.0, pathCount(t, cons, metrics.PathRDMA, metrics.ReasonOK))
	assert.Equal(t, 6.0, pathCount(t, owner, metrics.PathRDMA, metrics.ReasonOK))
	require.NoError(t, owner.Unref(ctx, h2))
	g2.Free()
	<-g2.Done()

	require.NoError(t, owner.Unref(ctx, h))
	g.Free()
	<-g.Done()
	eventually(t, "the registrations gone", func() bool { return owner.RDMAStats().LeaseRegistrations == 0 })
}

// TestRDMAMemoryBounceOverUCX: with the RDMA path off on the owner (its kill switch), a region
// taking the device path is served by chunks through the owner's bounce buffers and read into
// destinations through the consumer's: both sides count device_bounce, never the plain reason,
// and every byte arrives.
func TestRDMAMemoryBounceOverUCX(t *testing.T) {
	owner, cons := ucxMemPair(t, WithRDMA(RDMAConfig{Disabled: true}))
	ctx := tctx(t)
	src := payload(9<<20+3, 12) // more chunks than the owner has bounce buffers
	g, err := owner.WrapRegionMemory(bounced(HostMemory(src)))
	require.NoError(t, err)
	defer g.Free()
	assert.False(t, g.Pinned())
	h, err := owner.StageRegion(ctx, g)
	require.NoError(t, err)

	memReads(t, cons, h, src, func(b []byte) Memory { return bounced(HostMemory(b)) })
	assert.Equal(t, 3.0, pathCount(t, cons, metrics.PathChunked, metrics.ReasonDeviceBounce))
	assert.Equal(t, 3.0, pathCount(t, owner, metrics.PathChunked, metrics.ReasonDeviceBounce))
	assert.Zero(t, pathCount(t, owner, metrics.PathChunked, metrics.ReasonKillSwitch))

	// A plain destination reading the bounced region: the owner counts device_bounce and answers
	// it (this consumer's offer knows the reason), the consumer's own memory needs no bounce.
	out := make([]byte, len(src))
	l, err := cons.GetInto(ctx, h, out)
	require.NoError(t, err)
	require.Equal(t, src, out)
	assert.Equal(t, metrics.ReasonDeviceBounce, l.Reason)
	require.NoError(t, l.Detach(ctx))
	assert.Equal(t, 4.0, pathCount(t, owner, metrics.PathChunked, metrics.ReasonDeviceBounce))
}

// TestRDMAMemoryOlderConsumer: a consumer whose offer is version 2 (a release before memory
// types) still gets host memory by RDMA, and device memory by the owner's bounce path under the
// reason not_pinned, which its release knows; the owner counts device_bounce.
func TestRDMAMemoryOlderConsumer(t *testing.T) {
	owner, cons := ucxMemPair(t)
	ctx := tctx(t)
	cons.rdma.Consumer().OfferRefused(owner.ID()) // from now on this consumer offers version 2

	src := payload(2<<20+1, 13)
	plain, err := owner.WrapRegion(append([]byte(nil), src...))
	require.NoError(t, err)
	defer plain.Free()
	hp, err := owner.StageRegion(ctx, plain)
	require.NoError(t, err)
	out := make([]byte, len(src))
	l, err := cons.GetInto(ctx, hp, out)
	require.NoError(t, err)
	require.Equal(t, src, out)
	assert.Equal(t, metrics.PathRDMA, l.Path, "host memory: RDMA with a version-2 descriptor")
	require.NoError(t, l.Detach(ctx))

	dev, err := owner.WrapRegionMemory(bounced(HostMemory(src)))
	require.NoError(t, err)
	defer dev.Free()
	require.True(t, dev.Pinned())
	hd, err := owner.StageRegion(ctx, dev)
	require.NoError(t, err)
	clear(out)
	l, err = cons.GetInto(ctx, hd, out)
	require.NoError(t, err)
	require.Equal(t, src, out)
	assert.Equal(t, metrics.PathChunked, l.Path)
	assert.Equal(t, metrics.ReasonNotPinned, l.Reason, "the reason an older consumer knows")
	require.NoError(t, l.Detach(ctx))
	assert.Equal(t, 1.0, pathCount(t, owner, metrics.PathChunked, metrics.ReasonDeviceBounce))
	assert.Equal(t, 1.0, pathCount(t, cons, metrics.PathChunked, metrics.ReasonNotPinned))
	assert.Zero(t, owner.RDMAStats().LeaseRegistrations, "the refused lease registered nothing")
}

// TestRDMAMemoryPutOverUCX: puts from described memory (through the writer's host buffer) into a
// region taking the device path, byte for byte, with the notification after the bytes: by RDMA
// into a registration made for writing with the region's memory type, and, with the receiver's
// RDMA path switched off, by chunks that the receiver copies in (device_bounce on its side).
func TestRDMAMemoryPutOverUCX(t *testing.T) {
	for _, c := range typedPaths {
		t.Run(c.name, func(t *testing.T) {
			recv, writer := ucxMemPair(t, c.opts...)
			ctx := tctx(t)
			mem := make([]byte, 6<<20)
			g, err := recv.WrapRegionMemory(bounced(HostMemory(mem)))
			require.NoError(t, err)
			defer g.Free()
			gr, err := recv.GrantWrite(ctx, writer.ID(), g, GrantOptions{})
			require.NoError(t, err)
			defer func() { _ = gr.Revoke(context.Background()) }()

			src := payload(5<<20+9, 14) // two pieces through the writer's 4 MiB host buffer
			require.NoError(t, writer.PutMemory(ctx, gr.Handle(), 100, bounced(HostMemory(src)), &PutOptions{Notify: true, Payload: []byte("done")}))
			n := <-gr.Notifications()
			assert.Equal(t, []byte("done"), n.Payload)
			require.Equal(t, src, mem[100:100+len(src)])
			assert.Equal(t, make([]byte, 100), mem[:100], "bytes before the put untouched")
			assert.Equal(t, 1.0, pushPath(t, recv, "receiver", c.path, c.reason))

			// Plain host memory described with HostMemory is put as it is. (Past the bytes read
			// above: the race detector sees no order between this test's reads and the
			// receiver's writes.)
			src2 := payload(70000, 15)
			at := uint64(100 + len(src) + 100)
			require.NoError(t, writer.PutMemory(ctx, gr.Handle(), at, HostMemory(src2), &PutOptions{Notify: true}))
			<-gr.Notifications()
			require.Equal(t, src2, mem[at:at+uint64(len(src2))])
		})
	}
}

// TestRDMAMemoryCUDARefusedOverUCX: CUDA memory on an instance with the UCX transport. Built
// without the cuda tag, every call answers an error matching errors.ErrUnsupported that names
// the tags; built with it on a machine without a GPU (the CUDA stub library), the driver's error.
// Either way nothing is registered and no owner is asked.
func TestRDMAMemoryCUDARefusedOverUCX(t *testing.T) {
	owner, cons := ucxMemPair(t)
	ctx := tctx(t)
	h, err := owner.StageData(ctx, payload(4096, 16))
	require.NoError(t, err)
	host := make([]byte, 4096)
	for name, m := range map[string]Memory{
		"a host pointer passed as CUDA memory": CUDAMemory(HostMemory(host).Addr, len(host), 0),
		"a device that does not exist":         CUDAMemory(HostMemory(host).Addr, len(host), 4096),
	} {
		t.Run(name, func(t *testing.T) {
			errs := map[string]error{
				"CheckMemory":      cons.CheckMemory(m),
				"WrapRegionMemory": second(owner.WrapRegionMemory(m)),
				"GetIntoMemory":    second(cons.GetIntoMemory(ctx, h, m)),
				"GetBatch":         cons.GetBatch(ctx, []GetRequest{GetRequestInto(h, m)}, nil)[0].Err,
				"PutMemory":        cons.PutMemory(ctx, GrantHandle{}, 0, m, nil),
			}
			for what, err := range errs {
				require.Error(t, err, what)
				if !ucx.CUDAEnabled() {
					require.ErrorIs(t, err, errors.ErrUnsupported, what)
					assert.Contains(t, err.Error(), "-tags cuda,ucx_static", what)
				}
			}
			t.Log(errs["WrapRegionMemory"])
		})
	}
	md, err := owner.Metadata(ctx, h)
	require.NoError(t, err)
	assert.Zero(t, md.Leases)
	assert.Zero(t, owner.RDMAStats().LeaseRegistrations)
}

// TestRDMAMemoryAcrossProcesses: the consumer in a process of its own (the test binary run
// again) reads a region taking the device path into destinations taking it too, with
// GetIntoMemory, GetBatch and ReadRanges, over the real UCX transport: by typed RDMA from an
// owner that serves it, and through both sides' bounce buffers from an owner whose RDMA path is
// switched off. The child checks every byte against the SHA-256 the parent sent and prints its
// path counts.
func TestRDMAMemoryAcrossProcesses(t *testing.T) {
	for _, c := range typedPaths {
		t.Run(c.name, func(t *testing.T) {
			owner := ucxMemNode(t, c.opts...)
			ctx := tctx(t)
			src := payload(6<<20+7, 31)
			g, err := owner.WrapRegionMemory(bounced(HostMemory(src)))
			require.NoError(t, err)
			defer g.Free()
			h, err := owner.StageRegion(ctx, g)
			require.NoError(t, err)
			info, err := json.Marshal(owner.PeerInfo())
			require.NoError(t, err)
			ht, err := h.MarshalText()
			require.NoError(t, err)
			want := sum(src)
			cmd := exec.Command(os.Args[0], "-test.run=^TestRDMAMemoryHelperProcess$", "-test.v")
			cmd.Env = append(os.Environ(), "VELO_MEM_HELPER=1", "VELO_HELPER_PEER="+string(info),
				"VELO_HELPER_HANDLE="+string(ht), "VELO_HELPER_SUM="+hex.EncodeToString(want[:]))
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "consumer process:\n%s", out)
			line := fmt.Sprintf(`velo_rendezvous_rdma_path_total{path="%s",reason="%s"} 3`, c.path, c.reason)
			require.Contains(t, string(out), "READ 3 WAYS", "consumer process:\n%s", out)
			require.Contains(t, string(out), line, "consumer process:\n%s", out)
			assert.Equal(t, 3.0, pathCount(t, owner, c.path, c.reason))
			eventually(t, "the consumer's registrations gone", func() bool { return owner.RDMAStats().LeaseRegistrations == 0 })
		})
	}
}

// TestRDMAMemoryHelperProcess is the consumer of TestRDMAMemoryAcrossProcesses.
func TestRDMAMemoryHelperProcess(t *testing.T) {
	if os.Getenv("VELO_MEM_HELPER") == "" {
		t.Skip("runs only as the child of TestRDMAMemoryAcrossProcesses")
	}
	var owner PeerInfo
	require.NoError(t, json.Unmarshal([]byte(os.Getenv("VELO_HELPER_PEER")), &owner))
	var h Handle
	require.NoError(t, h.UnmarshalText([]byte(os.Getenv("VELO_HELPER_HANDLE"))))
	v := ucxMemNode(t)
	ctx := tctx(t)
	require.NoError(t, v.RegisterPeer(ctx, owner))
	check := func(what string, b []byte) {
		got := sum(b)
		require.Equal(t, os.Getenv("VELO_HELPER_SUM"), hex.EncodeToString(got[:]), what)
	}
	dev := func(b []byte) Memory { return bounced(HostMemory(b)) }

	out := make([]byte, h.Size)
	l, err := v.GetIntoMemory(ctx, h, dev(out))
	require.NoError(t, err)
	check("GetIntoMemory", out)
	require.NoError(t, l.Detach(ctx))

	clear(out)
	res := v.GetBatch(ctx, []GetRequest{GetRequestInto(h, dev(out))}, nil)
	require.NoError(t, res[0].Err)
	check("GetBatch", out)
	require.NoError(t, res[0].Lease.Detach(ctx))

	clear(out)
	half := h.Size / 2
	rg := []Range{RangeInto(0, half, dev(out[:half])), RangeInto(half, h.Size-half, dev(out[half:]))}
	require.NoError(t, v.ReadRanges(ctx, h, rg))
	check("ReadRanges", out)

	lines, err := metrics.Lines(v.Metrics(), metrics.RDMAPathTotal)
	require.NoError(t, err)
	fmt.Printf("READ 3 WAYS\n%s\n", strings.Join(lines, "\n"))
}
