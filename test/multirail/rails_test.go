package multirail

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// railRate is each shaped rail's rate: 200 Mbit/s, 25 MB/s, well below what this machine's CPUs
// move over UCX's tcp transport, so the links and not the CPUs set the pace.
const (
	railRate      = "200mbit"
	railBytesPerS = 200e6 / 8
)

// delta is after minus before, by rail.
func delta(before, after []uint64) []float64 {
	out := make([]float64, len(after))
	for i := range after {
		out[i] = float64(after[i] - before[i])
	}
	return out
}

func shares(d []float64) []float64 {
	var sum float64
	for _, x := range d {
		sum += x
	}
	out := make([]float64, len(d))
	for i, x := range d {
		out[i] = x / sum
	}
	return out
}

// TestOneGetOverSeveralRails: a 48 MiB GET between hosts joined by two, then four, rails of the
// same rate goes over all of them, in equal shares by the kernel's own counters — each rail's
// interface, and the lane witness (ibcheck lanes around the owner, bytes by the sockets' local
// address) — at close to the rails' summed rate.
func TestOneGetOverSeveralRails(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d rails", n), func(t *testing.T) {
			rates := make([]string, n)
			for i := range rates {
				rates[i] = railRate
			}
			oh, ch := newHosts(t, rates...)
			o, c, w := pairWitnessed(t, oh, ch)
			const size = 48 << 20
			h, sum := stage(t, o, size, uint64(n))
			before := txBytes(t, oh)
			a := c.call(t, "get", h)
			d := delta(before, txBytes(t, oh))
			require.Equal(t, sum, a.SHA256, "the bytes differ")
			assert.Equal(t, "rdma", a.Path, "reason %s", a.Reason)
			rate := size / a.Seconds
			sh := shares(d)
			t.Logf("48 MiB in %.2f s: %.1f MB/s, %.2f× one rail's %.0f MB/s; kernel tx bytes by rail %v, shares %.2f", a.Seconds, rate/1e6, rate/railBytesPerS, railBytesPerS/1e6, d, sh)
			for i, s := range sh {
				assert.InDelta(t, 1/float64(n), s, 0.3/float64(n), "rail %d carried %.0f%% of the bytes", i, 100*s)
			}
			// The rails' own series say the same as the kernel.
			st := c.call(t, "status")
			var got float64
			for _, r := range st.Rails {
				assert.False(t, r.Paused, "rail %d", r.Rail)
				assert.Positive(t, r.Bytes, "rail %d", r.Rail)
				got += r.Bytes
			}
			assert.Equal(t, float64(size), got)
			assert.Greater(t, rate, 0.75*float64(n)*railBytesPerS, "%d rails moved the GET at %.1f MB/s, one rail's is %.0f", n, rate/1e6, railBytesPerS/1e6)

			// The lane witness says the same: the owner's sockets on each rail's address sent
			// that rail's share, and together the GET's bytes (with TCP and IP headers, and
			// nothing else of size: the control plane has an address of its own).
			sent, err := w.sentBy(t, oh.ips)
			if errors.Is(err, errNoWitness) {
				t.Logf("no lane witness on this machine: %v", err)
				return
			}
			require.NoError(t, err)
			var total float64
			for _, b := range sent {
				total += float64(b)
			}
			assert.GreaterOrEqual(t, total, float64(size), "the rails' addresses sent less than the GET: %v", sent)
			assert.Less(t, total, float64(size)*1.1, "the rails' addresses sent far more than the GET: %v", sent)
			for i, b := range sent {
				assert.InDelta(t, 1/float64(n), float64(b)/total, 0.3/float64(n), "rail %d (%s) sent %d of %.0f bytes by the witness", i, oh.ips[i], b, total)
				assert.InDelta(t, d[i], float64(b), 0.1*d[i]+64<<10, "rail %d: the witness (%d) and the interface's counter (%.0f) differ", i, b, d[i])
			}
		})
	}
}

// TestSlowerRailCarriesLess: with one rail at half the other's rate, the GET's slices follow the
// rates: the slow rail carries about a third, by the interfaces' counters and by the lane witness.
func TestSlowerRailCarriesLess(t *testing.T) {
	oh, ch := newHosts(t, railRate, "100mbit")
	o, c, w := pairWitnessed(t, oh, ch)
	const size = 48 << 20
	h, sum := stage(t, o, size, 2)
	before := txBytes(t, oh)
	a := c.call(t, "get", h)
	d := delta(before, txBytes(t, oh))
	require.Equal(t, sum, a.SHA256)
	sh := shares(d)
	t.Logf("48 MiB in %.2f s (%.1f MB/s of the %.1f both rails allow); kernel tx bytes by rail %v, shares %.2f", a.Seconds, size/a.Seconds/1e6, 1.5*railBytesPerS/1e6, d, sh)
	assert.InDelta(t, 1.0/3, sh[1], 0.12, "the slow rail carried %.0f%% of the bytes", 100*sh[1])

	sent, err := w.sentBy(t, oh.ips)
	if errors.Is(err, errNoWitness) {
		t.Logf("no lane witness on this machine: %v", err)
		return
	}
	require.NoError(t, err)
	slow := float64(sent[1]) / float64(sent[0]+sent[1])
	assert.InDelta(t, 1.0/3, slow, 0.12, "by the witness the slow rail sent %.0f%% of the bytes (%v)", 100*slow, sent)
}

// TestRailDownMidGet: a rail whose link goes down in the middle of a 64 MiB GET loses the GET
// nothing: the rail's slices are read again over the other one, the GET completes on the RDMA
// path with the right bytes, the rail reads paused (metrics and health), and once the link is
// back and the cool-down has passed, the next GET probes it and it carries bytes again.
func TestRailDownMidGet(t *testing.T) {
	oh, ch := newHosts(t, railRate, railRate)
	const coolDown = 3 * time.Second
	o, c := pair(t, oh, ch, "-cooldown", coolDown.String())
	const size = 64 << 20
	h, sum := stage(t, o, size, 3)

	// Down once rail 1 has carried a few MiB of the GET: its reads are then in flight.
	start, done, downAt, atDown := getLosingRail(t, c, oh, h, 30*time.Second, func(d []float64) bool { return d[1] > 8<<20 })
	var r getResult
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the GET did not finish within 60 s of its rail going down")
	}
	require.NoError(t, r.err)
	total := time.Since(start)
	require.Equal(t, sum, r.a.SHA256, "the bytes differ")
	assert.Equal(t, "rdma", r.a.Path, "the GET fell back (reason %s) although rail 0 was up", r.a.Reason)
	left := float64(size) - atDown[0] - atDown[1]
	afterDown := time.Since(downAt)
	oneRail := time.Duration(float64(size) / railBytesPerS * float64(time.Second))
	t.Logf("down after %.1f MiB (%.1f on rail 0, %.1f on rail 1) at %v; the GET took %v, %v of it after the link went down, for %.1f MiB left; one rail alone needs %v for the whole GET",
		(atDown[0]+atDown[1])/(1<<20), atDown[0]/(1<<20), atDown[1]/(1<<20), downAt.Sub(start).Round(time.Millisecond),
		total.Round(time.Millisecond), afterDown.Round(time.Millisecond), left/(1<<20), oneRail.Round(time.Millisecond))
	assert.Less(t, total, oneRail*3/2, "the GET took more than 1.5× the time the remaining rail needs for its bytes")

	st := c.call(t, "status")
	require.Len(t, st.Rails, 2)
	assert.False(t, st.Rails[0].Paused)
	assert.True(t, st.Rails[1].Paused, "rail 1 reads %+v", st.Rails[1])
	assert.Positive(t, st.Rails[1].Failures)
	assert.True(t, containsAny(st.Health, "rail 1 (rc1) is paused"), "health: %q", st.Health)

	// The link comes back; after the cool-down the next GET probes the rail, which carries bytes
	// again and reads up.
	// The pause began when the rail's reads timed out, before the GET returned.
	setLink(t, oh, 1, "up")
	time.Sleep(coolDown + 500*time.Millisecond)
	railBytes := st.Rails[1].Bytes
	var back bool
	for try := 0; try < 5 && !back; try++ {
		h2, sum2 := stage(t, o, 16<<20, uint64(10+try))
		a := c.call(t, "get", h2)
		require.Equal(t, sum2, a.SHA256)
		st = c.call(t, "status")
		back = !st.Rails[1].Paused && st.Rails[1].Bytes > railBytes
		t.Logf("GET %d after the cool-down: rail 1 %+v", try, st.Rails[1])
		if !back {
			time.Sleep(coolDown) // a probe that failed paused the rail again, for longer
		}
	}
	assert.True(t, back, "rail 1 did not come back after its cool-down: %+v", st.Rails[1])
}

// TestEveryRailDownMidGet: both rails go down mid-GET; the GET falls back to the chunked path over
// the control plane (reason get_failed) and still delivers the right bytes.
func TestEveryRailDownMidGet(t *testing.T) {
	oh, ch := newHosts(t, railRate, railRate)
	o, c := pair(t, oh, ch, "-cooldown", "1m")
	const size = 32 << 20
	h, sum := stage(t, o, size, 4)
	before := txBytes(t, oh)
	done := make(chan answer, 1)
	errc := make(chan error, 1)
	go func() {
		a, err := c.try("get", h)
		done <- a
		errc <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if d := delta(before, txBytes(t, oh)); d[0]+d[1] > 8<<20 {
			setLink(t, oh, 0, "down")
			setLink(t, oh, 1, "down")
			break
		}
	}
	var a answer
	select {
	case a = <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("the GET did not finish within 90 s of the rails going down")
	}
	require.NoError(t, <-errc)
	require.Equal(t, sum, a.SHA256, "the bytes differ")
	assert.Equal(t, "chunked", a.Path)
	assert.Equal(t, "get_failed", a.Reason)
	t.Logf("the GET took %.2f s, path %s/%s", a.Seconds, a.Path, a.Reason)
}

func containsAny(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
