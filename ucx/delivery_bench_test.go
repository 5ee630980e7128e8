//go:build cgo && linux && ucx_cbbench

package ucx

import (
	"testing"
	"time"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// BenchmarkAMDelivery compares the two ways a received active message can reach Go:
// the C event ring drained after each progress call (what the binding does) and a cgo
// callback per message. Both copy header and payload into a fresh Go slice, as the
// engine does. Only the receiver's progress and delivery are timed (messages are sent in
// batches of 256 with the timer stopped). Run with `make bench-ucx-delivery`.
func BenchmarkAMDelivery(b *testing.B) {
	for _, size := range []int{64, 4096} {
		benchDelivery(b, size, true)
	}
}

// BenchmarkAMDeliveryNoCopy is the same without the copy into Go memory: the cost of the
// delivery mechanism alone.
func BenchmarkAMDeliveryNoCopy(b *testing.B) {
	for _, size := range []int{64, 4096} {
		benchDelivery(b, size, false)
	}
}

func benchDelivery(b *testing.B, size int, copyOut bool) {
	{
		payload := make([]byte, size)
		header := make([]byte, 16)
		b.Run("ring/"+human(size), func(b *testing.B) {
			p := newLowPair(b)
			if err := p.b.SetAMHandler(9); err != nil {
				b.Fatal(err)
			}
			got := 0
			sink := 0
			deliver := func(w *Worker, ev *Event) {
				if ev.Kind == EventAM {
					if copyOut {
						buf := make([]byte, len(ev.AM.Header)+len(ev.AM.Data))
						copy(buf, ev.AM.Header)
						copy(buf[len(ev.AM.Header):], ev.AM.Data)
						sink += len(buf)
					}
					got++
				}
			}
			runDelivery(b, p, header, payload, &got, deliver)
		})
		b.Run("callback/"+human(size), func(b *testing.B) {
			p := newLowPair(b)
			got := 0
			sink := 0
			if s := capi.UcpWorkerSetAmRecvHandlerGoCallback(p.b.w, 9, func(h, d []byte) {
				if copyOut {
					buf := make([]byte, len(h)+len(d))
					copy(buf, h)
					copy(buf[len(h):], d)
					sink += len(buf)
				}
				got++
			}); s != capi.OK {
				b.Fatal(Status(s))
			}
			runDelivery(b, p, header, payload, &got, nil)
		})
	}
}

// runDelivery sends in batches with the timer stopped, then times only the receiver's
// progress and delivery until the batch has arrived.
func runDelivery(b *testing.B, p *lowPair, header, payload []byte, got *int, deliver func(*Worker, *Event)) {
	b.SetBytes(int64(len(header) + len(payload)))
	b.ResetTimer()
	sent := 0
	for sent < b.N {
		b.StopTimer()
		batch := min(256, b.N-sent)
		for i := 0; i < batch; i++ {
			r, err := p.ab.SendAM(9, header, payload, AMEager)
			if err != nil {
				b.Fatal(err)
			}
			if r != nil {
				p.until(b, r.Done, deliver) // wireup needs the receiver too
			}
		}
		// Push everything the sender buffered into the kernel before timing the receiver.
		r, err := p.a.Flush()
		if err != nil {
			b.Fatal(err)
		}
		if r != nil {
			p.until(b, r.Done, deliver)
		}
		sent += batch
		b.StartTimer()
		deadline := time.Now().Add(5 * time.Second)
		for *got < sent {
			if time.Now().After(deadline) {
				b.Fatalf("received %d of %d (ring holds %d events)", *got, sent, capi.RingLen(p.b.ring))
			}
			p.a.Progress() // nothing left to send; keeps the sender's side of the connection serviced
			p.b.Progress()
			p.b.Poll(func(ev *Event) {
				if deliver != nil {
					deliver(p.b, ev)
				}
			})
		}
	}
}

func human(n int) string {
	if n >= 1024 {
		return string(rune('0'+n/1024)) + "KiB"
	}
	return "64B"
}
