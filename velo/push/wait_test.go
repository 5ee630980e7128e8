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
