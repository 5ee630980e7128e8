package push

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gaps is what Wait reports: the bytes of the ranges waited for that no notification covered.
func TestGaps(t *testing.T) {
	r := func(off, n uint64) Range { return Range{off, n} }
	for _, c := range []struct {
		name    string
		covered []Range
		want    []Range
		gaps    []Range
	}{
		{"nothing covered", nil, []Range{r(0, 100)}, []Range{r(0, 100)}},
		{"all covered", []Range{r(0, 100)}, []Range{r(10, 20)}, nil},
		{"hole in the middle", []Range{r(0, 10), r(20, 80)}, []Range{r(0, 100)}, []Range{r(10, 10)}},
		{"head and tail", []Range{r(10, 80)}, []Range{r(0, 100)}, []Range{r(0, 10), r(90, 10)}},
		{"several holes", []Range{r(10, 10), r(30, 10), r(50, 10)}, []Range{r(0, 70)},
			[]Range{r(0, 10), r(20, 10), r(40, 10), r(60, 10)}},
		{"covered beyond the range", []Range{r(0, 5), r(95, 50)}, []Range{r(3, 95)}, []Range{r(5, 90)}},
		{"two ranges, touching gaps merge", nil, []Range{r(0, 10), r(10, 10)}, []Range{r(0, 20)}},
		{"overlapping ranges asked", []Range{r(40, 10)}, []Range{r(0, 50), r(30, 40)}, []Range{r(0, 40), r(50, 20)}},
		{"range before every covered one", []Range{r(100, 10)}, []Range{r(0, 10)}, []Range{r(0, 10)}},
		{"a later range's gap before an earlier one's", []Range{r(50, 10)}, []Range{r(0, 100), r(10, 20)}, []Range{r(0, 50), r(60, 40)}},
		{"empty range", nil, []Range{r(5, 0)}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.gaps, gaps(c.covered, c.want))
		})
	}
}

// The message lists eight ranges, counts the rest, and says the total; the grant is named once.
func TestWaitErrorMessage(t *testing.T) {
	var missing []Range
	for i := range 11 {
		missing = append(missing, Range{uint64(i) * 100, 10})
	}
	e := &WaitError{Grant: 7, Writer: 0xab, Missing: missing, Err: context.DeadlineExceeded}
	assert.Equal(t, "push: Wait: grant 7 of writer 00000000000000ab: 110 bytes in 11 ranges never notified: "+
		"[0, +10) [100, +10) [200, +10) [300, +10) [400, +10) [500, +10) [600, +10) [700, +10) and 3 more: context deadline exceeded", e.Error())
	require.ErrorIs(t, e, context.DeadlineExceeded)

	ended := fmt.Errorf("grant 7 of writer 00000000000000ab ended: it expired: %w", ErrGrantEnded)
	e = &WaitError{Grant: 7, Writer: 0xab, Missing: missing[:1], Err: ended}
	assert.Equal(t, "push: Wait: 10 bytes in 1 range never notified: [0, +10): grant 7 of writer 00000000000000ab ended: it expired: write grant ended", e.Error())
	require.ErrorIs(t, e, ErrGrantEnded)
}

// FuzzGaps holds gaps to a byte map: covered ranges (merged as cover merges them) and ranges
// asked, all inside 256 bytes, and gaps must list exactly the asked bytes not covered, sorted,
// disjoint and not touching.
func FuzzGaps(f *testing.F) {
	f.Add([]byte{10, 20, 50, 10}, []byte{0, 100, 10, 20})
	f.Add([]byte{}, []byte{0, 255})
	f.Fuzz(func(t *testing.T, covered, asked []byte) {
		var set []Range
		var in [512]bool
		for i := 0; i+1 < len(covered); i += 2 {
			r := Range{uint64(covered[i]), uint64(covered[i+1])}
			set = addRange(set, r)
			for b := r.Offset; b < r.End(); b++ {
				in[b] = true
			}
		}
		var want []Range
		var asks [512]bool
		for i := 0; i+1 < len(asked); i += 2 {
			r := Range{uint64(asked[i]), uint64(asked[i+1])}
			want = append(want, r)
			for b := r.Offset; b < r.End(); b++ {
				asks[b] = true
			}
		}
		sortRanges(want)
		got := gaps(set, want)
		var missing [512]bool
		for i, g := range got {
			require.NotZero(t, g.Length, "gap %d", i)
			if i > 0 {
				require.Greater(t, g.Offset, got[i-1].End(), "gaps %d and %d are sorted, apart", i-1, i)
			}
			for b := g.Offset; b < g.End(); b++ {
				missing[b] = true
			}
		}
		for b := range missing {
			require.Equal(t, asks[b] && !in[b], missing[b], "byte %d", b)
		}
	})
}
