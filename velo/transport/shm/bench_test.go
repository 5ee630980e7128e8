//go:build linux

package shm

import (
	"context"
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkGet is the channel alone (both ends in this process): one Get of each size through
// rings of each buffer size, beside a plain copy of the same size.
func BenchmarkGet(b *testing.B) {
	for _, n := range []int{8 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("copy/%dMiB", n>>20), func(b *testing.B) {
			src, dst := make([]byte, n), make([]byte, n)
			b.SetBytes(int64(n))
			for i := 0; i < b.N; i++ {
				copy(dst, src)
			}
		})
		for _, chunk := range []int{1 << 20, 2 << 20} {
			b.Run(fmt.Sprintf("get/%dMiB/chunk%dK", n>>20, chunk>>10), func(b *testing.B) {
				owner, consumer := newPair(b, Config{ChunkSize: chunk}, nil, nil)
				for !consumer.CanGet(1) {
					runtime.Gosched()
				}
				mem := anon(b, n)
				regs, errs := owner.RegisterMemoryFor(2, [][]byte{mem})
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
			})
		}
	}
}
