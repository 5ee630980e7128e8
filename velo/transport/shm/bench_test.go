//go:build linux

package shm

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/velo-go/velo/velo/transport"
)

// BenchmarkGet is the channel alone (both ends in this process): one Get of each size through
// rings of each shape (buffers x size), and out of a payload's own file (read with pread, or
// mapped and copied out of the mapping), beside a plain copy of the same size.
func BenchmarkGet(b *testing.B) {
	for _, n := range []int{8 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("copy/%dMiB", n>>20), func(b *testing.B) {
			src, dst := make([]byte, n), make([]byte, n)
			b.SetBytes(int64(n))
			for i := 0; i < b.N; i++ {
				copy(dst, src)
			}
		})
		for _, byMap := range []bool{false, true} {
			how := map[bool]string{false: "pread", true: "map"}[byMap]
			b.Run(fmt.Sprintf("file/%dMiB/%s", n>>20, how), func(b *testing.B) {
				benchGet(b, Config{SingleCopyMin: 1 << 20}, n, func(owner, consumer *Transport) []byte {
					consumer.copyByMap = byMap
					mem, release, err := owner.MapPayload(n)
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { release() })
					return mem
				})
			})
		}
		for _, ring := range [][2]int{{2 << 20, 2}, {1 << 20, 4}, {512 << 10, 8}} {
			chunk, slots := ring[0], ring[1]
			b.Run(fmt.Sprintf("get/%dMiB/%dx%dK", n>>20, slots, chunk>>10), func(b *testing.B) {
				benchGet(b, Config{ChunkSize: chunk, Slots: slots}, n, func(_, _ *Transport) []byte { return anon(b, n) })
			})
		}
	}
}

// benchGet times Gets of the n bytes of the memory mem gives, registered for the consumer of a
// pair made with cfg.
func benchGet(b *testing.B, cfg Config, n int, mem func(owner, consumer *Transport) []byte) {
	owner, consumer := newPair(b, cfg, nil, nil)
	for !consumer.CanGet(1) {
		runtime.Gosched()
	}
	regs, errs := owner.RegisterMemoryFor(2, [][]byte{mem(owner, consumer)})
	if errs[0] != nil {
		b.Fatal(errs[0])
	}
	dst := make([]byte, n)
	b.SetBytes(int64(n))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := consumer.Get(context.Background(), 1, regs[0].Key(), 0, dst); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWrite is a push's write through the channel alone (both ends in this process), beside
// BenchmarkGet's copy.
func BenchmarkWrite(b *testing.B) {
	for _, n := range []int{8 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("write/%dMiB", n>>20), func(b *testing.B) {
			owner, writer := newPair(b, Config{}, nil, nil)
			for !writer.CanGet(1) {
				runtime.Gosched()
			}
			mem := anon(b, n)
			reg, err := owner.RegisterMemoryWritableFor(2, mem)
			if err != nil {
				b.Fatal(err)
			}
			src := make([]byte, n)
			ws := []transport.Write{{Key: reg.Key(), Src: src}}
			b.SetBytes(int64(n))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				writer.WriteMany(context.Background(), 1, ws, 1, func(_ int, err error) {
					if err != nil {
						b.Fatal(err)
					}
				})
			}
		})
	}
}
