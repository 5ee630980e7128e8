//go:build cgo && linux

package ucxtransport

import (
	"context"
	"testing"

	"github.com/velo-go/velo/ucx"
)

// TestUCXPairsNthEndpoints records the UCX behaviour the slot design exists for (conn.go): the
// endpoint B creates toward A after A's first endpoint reached B is paired with A's, and once A
// closes its endpoint, B's still accepts sends but its messages of more than one fragment vanish
// (over tcp, above about 8 KiB; UCX reassembles them against the receiver's endpoint, which is
// gone) — a short message sent after one proves it, since one endpoint keeps order. If this test
// starts failing, UCX stopped pairing (or stopped losing): update the comment in conn.go.
func TestUCXPairsNthEndpoints(t *testing.T) {
	ctx := testCtx(t)
	engine := func(name string) *ucx.Engine {
		e, err := ucx.NewEngine(ctx, ucx.EngineConfig{Name: name, Context: ucx.ContextConfig{TLS: testTLS}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close(context.Background()) })
		return e
	}
	a, b := engine("a"), engine("b")
	atA, atB := make(chan int, 16), make(chan int, 16)
	if err := a.HandleAM(1, func(m ucx.AMMessage) { atA <- len(m.Payload) }); err != nil {
		t.Fatal(err)
	}
	if err := b.HandleAM(1, func(m ucx.AMMessage) { atB <- len(m.Payload) }); err != nil {
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
	x, err := a.Connect(ctx, b.Address(), ucx.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.SendAM(ctx, 1, nil, []byte("x")); err != nil {
		t.Fatal(err)
	}
	recv(atB) // A's endpoint is wired up at B
	z, err := b.Connect(ctx, a.Address(), ucx.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if mode, _ := z.RMAMode(ctx); mode == ucx.RMADirect {
		t.Skip("hardware RMA lanes: this records tcp behaviour")
	}
	big := make([]byte, 64<<10) // many fragments
	if err := z.SendAM(ctx, 1, nil, big); err != nil {
		t.Fatal(err)
	}
	if n := recv(atA); n != len(big) {
		t.Fatalf("before the close A got %d bytes", n)
	}
	if err := x.Close(ctx, ucx.CloseFlush); err != nil {
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
