package velo

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A receiver whose Wait stops before the writer notified everything learns which bytes are
// missing: the error lists the ranges no notification covered (the first few, then a count), and
// still matches what stopped the wait (the context's deadline, or the grant's end) with errors.Is.

const waitSlot = 4 << 10

// notifyOddSlots grants the writer 24 slots of 4 KiB, puts a notified 4 KiB into each odd slot and
// an unnotified one into slot 0 (written, but nobody said so), and returns the fixture and the 12
// even slots Wait must name.
func notifyOddSlots(t *testing.T, recv, writer *Velo, opts GrantOptions) (*pushFixture, []GrantRange) {
	t.Helper()
	const slots = 24
	f := newPushFixture(t, recv, writer, slots*waitSlot, opts)
	require.NoError(t, f.put(t, 0, payload(waitSlot, 1), nil), "a put without Notify")
	var missing []GrantRange
	for i := range slots {
		if i%2 == 0 {
			missing = append(missing, GrantRange{Offset: f.span.Offset + uint64(i*waitSlot), Length: waitSlot})
			continue
		}
		require.NoError(t, f.put(t, i*waitSlot, payload(waitSlot, uint64(i)), &PutOptions{Notify: true}), "slot %d", i)
	}
	return f, missing
}

func TestGrantWaitNamesTheRangesNeverNotified(t *testing.T) {
	recv, writer := pushPair(t)
	f, missing := notifyOddSlots(t, recv, writer, GrantOptions{OnNotify: func(Notification) {}})

	// The notified slots alone are covered: Wait on them returns at once.
	require.NoError(t, f.grant.Wait(tctx(t), GrantRange{Offset: f.span.Offset + waitSlot, Length: waitSlot},
		GrantRange{Offset: f.span.Offset + 23*waitSlot, Length: waitSlot}))

	ctx, cancel := context.WithTimeout(tctx(t), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := f.grant.Wait(ctx)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 10*time.Second, "Wait stops at the context's deadline")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, ErrGrantEnded, "the grant still lives")
	var we *GrantWaitError
	require.ErrorAs(t, err, &we)
	assert.Equal(t, missing, we.Missing, "every even slot, the unnotified put's included, and nothing else")
	assert.Equal(t, f.grant.ID(), we.Grant)
	assert.Equal(t, writer.ID(), we.Writer)

	msg := err.Error()
	assert.Contains(t, msg, fmt.Sprintf("%d bytes in 12 ranges never notified", 12*waitSlot))
	for _, r := range missing[:8] {
		assert.Contains(t, msg, fmt.Sprintf("[%d, +%d)", r.Offset, r.Length), "the first ranges are listed")
	}
	assert.NotContains(t, msg, fmt.Sprintf("[%d, +%d)", missing[8].Offset, missing[8].Length), "the rest are counted")
	assert.Contains(t, msg, "and 4 more")
	assert.Contains(t, msg, fmt.Sprintf("grant %d of writer %016x", f.grant.ID(), uint64(writer.ID())))
	assert.Contains(t, msg, "context deadline exceeded")

	// Wait on part of one missing slot names that part alone.
	part := GrantRange{Offset: missing[3].Offset + 100, Length: 50}
	ctx2, cancel2 := context.WithCancel(tctx(t))
	cancel2()
	err = f.grant.Wait(ctx2, part, GrantRange{Offset: f.span.Offset + waitSlot, Length: waitSlot})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorAs(t, err, &we)
	assert.Equal(t, []GrantRange{part}, we.Missing)
}

// A grant that expires under Wait: the error says it ended (ErrGrantEnded, "it expired") and which
// ranges the writer never notified, long before the default 60 s TTL would have told anything.
func TestGrantWaitOnAnExpiredGrantNamesTheMissingRanges(t *testing.T) {
	recv, writer := pushPair(t)
	const ttl = 2 * time.Second // room for the 13 puts before it expires
	f, missing := notifyOddSlots(t, recv, writer, GrantOptions{TTL: ttl, OnNotify: func(Notification) {}})
	err := f.grant.Wait(tctx(t))
	require.ErrorIs(t, err, ErrGrantEnded)
	var we *GrantWaitError
	require.ErrorAs(t, err, &we)
	assert.Equal(t, missing, we.Missing)
	assert.Contains(t, err.Error(), "it expired")
	assert.Contains(t, err.Error(), "12 ranges never notified")
	assert.Contains(t, err.Error(), fmt.Sprintf("[%d, +%d)", missing[0].Offset, missing[0].Length))
	assert.True(t, errors.Is(f.grant.Err(), ErrGrantEnded))
}
