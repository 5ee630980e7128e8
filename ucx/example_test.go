//go:build cgo && linux

package ucx_test

import (
	"context"
	"fmt"
	"log"

	"github.com/velo-go/velo/ucx"
)

// Two engines (normally in two processes): the owner registers memory and publishes its
// address and remote key; the consumer connects, sends an active message and reads the
// memory with a GET.
func Example() {
	ctx := context.Background()
	cfg := ucx.EngineConfig{Context: ucx.ContextConfig{TLS: "tcp"}} // UCX_TLS in the environment wins

	cfg.Name = "owner"
	owner, err := ucx.NewEngine(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer owner.Close(ctx)
	got := make(chan string, 1)
	if err := owner.HandleAM(1, func(m ucx.AMMessage) { got <- string(m.Header) + " " + string(m.Payload) }); err != nil {
		log.Fatal(err)
	}
	mem, err := ucx.AllocMemory(4096, ucx.MemoryOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer mem.Free()
	copy(mem.Bytes(), "bytes the owner staged")
	reg, err := owner.Register(ctx, mem.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Unregister(ctx)

	cfg.Name = "consumer"
	consumer, err := ucx.NewEngine(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close(ctx)
	conn, err := consumer.Connect(ctx, owner.Address(), ucx.ConnectOptions{
		OnError: func(err error) { log.Printf("owner lost: %v", err) },
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := conn.SendAM(ctx, 1, []byte("hello"), []byte("owner")); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-got)

	dst := make([]byte, 22)
	if err := conn.Get(ctx, dst, reg.Addr(), reg.RemoteKey()); err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(dst))
	// Output:
	// hello owner
	// bytes the owner staged
}

// The resource query prints what the linked UCX can use, like `ucx_info -d`.
func ExampleQueryResources() {
	res, err := ucx.QueryResources()
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range res.Components {
		for _, d := range c.MemoryDomains {
			for _, t := range d.Transports {
				if t.Name == "tcp" && t.Device == "lo" {
					fmt.Printf("%s/%s: hardware GET %t, peer failure detection %t\n", t.Name, t.Device, t.Caps.HasGet(), t.Caps.PeerFailure)
				}
			}
		}
	}
	// Output:
	// tcp/lo: hardware GET false, peer failure detection true
}
