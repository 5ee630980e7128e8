//go:build cgo && linux

package ucx

import (
	"context"
	"testing"

	ucp "github.com/velo-go/velo/ucx"
)

// TestUCXPairsNthEndpoints records the UCX behaviour the slot design exists for (conn.go): the
// endpoint B creates toward A after A's first endpoint reached B is paired with A's, and once A
// closes its endpoint, B's still accepts sends but its messages of more than one fragment vanish
// (over tcp, above about 8 KiB; UCX reassembles them against the receiver's endpoint, which is
// gone) — a short message sent after one proves it, since one endpoint keeps order. If this test
// starts failing, UCX stopped pairing (or stopped losing): update the comment in conn.go.
func TestUCXPairsNthEndpoints(t *testing.T) {
	ctx := testCtx(t)
	engine := func(name string) *ucp.Engine {
		e, err := ucp.NewEngine(ctx, ucp.EngineConfig{Name: name, Context: ucp.ContextConfig{TLS: testTLS}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close(context.Background()) })
		return e
	}
	a, b := engine("a"), engine("b")
	atA, atB := make(chan int, 16), make(chan int, 16)
	if err := a.HandleAM(1, func(m ucp.AMMessage) { atA <- len(m.Payload) }); err != nil {
		t.Fatal(err)
	}
	if err := b.HandleAM(1, func(m ucp.AMMessage) { atB <- len(m.Payload) }); err != nil {
		t.Fatal(err)
	}
	recv := func(ch chan int) int {
		select {
		case n := <-ch:
			return n
		case <-ctx.Done():
			t.Fatal("nothing arrived")
		}
		return 0
	}
	x, err := a.Connect(ctx, b.Address(), ucp.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.SendAM(ctx, 1, nil, []byte("x")); err != nil {
		t.Fatal(err)
	}
	recv(atB) // A's endpoint is wired up at B
	z, err := b.Connect(ctx, a.Address(), ucp.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if mode, _ := z.RMAMode(ctx); mode == ucp.RMADirect {
		t.Skip("hardware RMA lanes: this records tcp behaviour")
	}
	big := make([]byte, 64<<10) // many fragments
	if err := z.SendAM(ctx, 1, nil, big); err != nil {
		t.Fatal(err)
	}
	if n := recv(atA); n != len(big) {
		t.Fatalf("before the close A got %d bytes", n)
	}
	if err := x.Close(ctx, ucp.CloseFlush); err != nil {
		t.Fatal(err)
	}
	if err := z.SendAM(ctx, 1, nil, big); err != nil {
		t.Fatalf("B's endpoint reports the loss: %v (UCX changed; update conn.go)", err)
	}
	if err := z.SendAM(ctx, 1, nil, []byte("short")); err != nil {
		t.Fatal(err)
	}
	if n := recv(atA); n == len(big) {
		t.Fatal("a multi-fragment message on the paired endpoint survived A's close: UCX changed; update conn.go")
	} else if n != len("short") {
		t.Fatalf("A got %d bytes", n)
	}
	t.Log("A's close swallowed B's multi-fragment message on the paired endpoint; the short one after it arrived")
}
