package velo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
)

// pair starts two instances in one process that know each other; in a deployment each runs in its
// own process and they find each other through discovery (WithDiscovery) or RegisterPeer.
func pair(ctx context.Context) (a, b *velo.Velo) {
	a, err := velo.New(ctx, quiet)
	if err != nil {
		panic(err)
	}
	b, err = velo.New(ctx, quiet)
	if err != nil {
		panic(err)
	}
	if err := a.RegisterPeer(ctx, b.PeerInfo()); err != nil {
		panic(err)
	}
	if err := b.RegisterPeer(ctx, a.PeerInfo()); err != nil {
		panic(err)
	}
	return a, b
}

// counted prints the series of a metric that counted something.
func counted(v *velo.Velo, name string) {
	lines, err := metrics.Lines(v.Metrics(), name)
	if err != nil {
		panic(err)
	}
	for _, l := range lines {
		if !strings.HasSuffix(l, " 0") {
			fmt.Println(l)
		}
	}
}

func ExampleVelo_Request() {
	ctx := context.Background()
	client, server := pair(ctx)
	defer client.Close()
	defer server.Close()

	server.RegisterHandler("upper", func(ctx context.Context, m *velo.Message) ([]byte, error) {
		if len(m.Payload) == 0 {
			return nil, errors.New("nothing to upper-case")
		}
		return bytes.ToUpper(m.Payload), nil
	})
	resp, err := client.Request(ctx, server.ID(), "upper", []byte("prefill done"))
	fmt.Printf("%s %v\n", resp, err)

	// A handler's error comes back as a *RemoteError matching ErrHandlerFailed.
	_, err = client.Request(ctx, server.ID(), "upper", nil)
	var re *velo.RemoteError
	fmt.Println(errors.Is(err, velo.ErrHandlerFailed), errors.As(err, &re) && re.Text == "nothing to upper-case")

	// A name nobody registered is ErrUnknownHandler.
	_, err = client.Request(ctx, server.ID(), "lower", []byte("x"))
	fmt.Println(errors.Is(err, velo.ErrUnknownHandler))
	// Output:
	// PREFILL DONE <nil>
	// true true
	// true
}

func ExampleVelo_GetBatch() {
	ctx := context.Background()
	owner, consumer := pair(ctx)
	defer owner.Close()
	defer consumer.Close()

	// The owner stages three blocks; their handles travel to the consumer (in a message, usually).
	var reqs []velo.GetRequest
	for i := range 3 {
		h, err := owner.StageData(ctx, bytes.Repeat([]byte{'a' + byte(i)}, 4<<10))
		if err != nil {
			panic(err)
		}
		reqs = append(reqs, velo.GetRequest{Handle: h})
	}
	// The second block goes into a buffer of the consumer's; the others into new ones.
	into := make([]byte, 4<<10)
	reqs[1].Into = into

	results := consumer.GetBatch(ctx, reqs, nil)
	var leases []*velo.Lease
	for _, r := range results {
		if r.Err != nil {
			panic(r.Err)
		}
		fmt.Printf("%d: %d bytes of %q via %s\n", r.Index, len(r.Lease.Bytes()), r.Lease.Bytes()[0], r.Lease.Path)
		leases = append(leases, r.Lease)
	}
	fmt.Println(into[0] == 'b')
	// Ending the leases together spends each handle's reference: the owner frees the blocks.
	fmt.Println(errors.Join(consumer.ReleaseLeases(ctx, leases)...))
	counted(consumer, metrics.RDMAPathTotal)
	// Output:
	// 0: 4096 bytes of 'a' via inline
	// 1: 4096 bytes of 'b' via inline
	// 2: 4096 bytes of 'c' via inline
	// true
	// <nil>
	// velo_rendezvous_rdma_path_total{path="inline",reason="ok"} 3
}

func ExampleVelo_Acquire() {
	ctx := context.Background()
	owner, consumer := pair(ctx)
	defer owner.Close()
	defer consumer.Close()

	// A region the owner writes in place and stages without a copy: a KV cache, say.
	region, err := owner.NewRegion(1 << 20)
	if err != nil {
		panic(err)
	}
	defer region.Free()
	copy(region.Bytes()[4096:], "layer 1")
	copy(region.Bytes()[65536:], "layer 16")
	h, err := owner.StageRegion(ctx, region)
	if err != nil {
		panic(err)
	}

	// One lease, many ranged reads of it.
	lease, err := consumer.Acquire(ctx, h)
	if err != nil {
		panic(err)
	}
	ranges := []velo.Range{
		{Offset: 4096, Length: 7, Dst: make([]byte, 7)},
		{Offset: 65536, Length: 8, Dst: make([]byte, 8)},
		{Offset: 1 << 20, Length: 1, Dst: make([]byte, 1)}, // past the payload's end
	}
	err = lease.ReadRanges(ctx, ranges)
	for _, r := range ranges {
		fmt.Printf("%q %v\n", r.Dst, r.Err != nil)
	}
	fmt.Println(errors.Is(err, velo.ErrRange), lease.Size())
	// Detach keeps the payload staged for later reads; Release would spend the handle.
	fmt.Println(lease.Detach(ctx))
	// Output:
	// "layer 1" false
	// "layer 16" false
	// "\x00" true
	// true 1048576
	// <nil>
}

func ExampleVelo_GrantWrite() {
	ctx := context.Background()
	receiver, writer := pair(ctx)
	defer receiver.Close()
	defer writer.Close()

	// The receiver grants the writer the first 64 KiB of a region of its own.
	region, err := receiver.NewRegion(1 << 20)
	if err != nil {
		panic(err)
	}
	defer region.Free()
	grant, err := receiver.GrantWrite(ctx, writer.ID(), region, velo.GrantOptions{
		Ranges: []velo.GrantRange{{Offset: 0, Length: 64 << 10}},
	})
	if err != nil {
		panic(err)
	}
	// grant.Handle() travels to the writer (in a message, usually); the writer puts into it.
	h := grant.Handle()
	if err := writer.Put(ctx, h, 0, []byte("block 0"), nil); err != nil {
		panic(err)
	}
	err = writer.Put(ctx, h, 32<<10, []byte("block 1"), &velo.PutOptions{Notify: true, Payload: []byte("two blocks")})
	fmt.Println(err)
	// Outside the grant: refused before anything is sent.
	fmt.Println(errors.Is(writer.Put(ctx, h, 64<<10, []byte("x"), nil), velo.ErrOutOfGrant))

	// The notification comes once the bytes before it are in the receiver's memory.
	n := <-grant.Notifications()
	fmt.Printf("%s %v from the writer: %v\n", n.Payload, n.Ranges, n.Writer == writer.ID())
	fmt.Printf("%s %s\n", region.Bytes()[:7], region.Bytes()[32<<10:32<<10+7])
	fmt.Println(grant.Revoke(ctx))
	// Without WithUCXTransport the bytes went over the control plane, and the metric says why.
	counted(writer, "velo_push_path_total")
	// Output:
	// <nil>
	// true
	// two blocks [{32768 7}] from the writer: true
	// block 0 block 1
	// <nil>
	// velo_push_path_total{path="chunked",reason="not_configured",side="writer"} 2
}
