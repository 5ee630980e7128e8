//go:build cgo && linux

package ucxtransport

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/transport"
)

// TestKeysBoundToTheirConsumer: keys registered for a peer (RegisterMemoryFor,
// RegisterMemoryWritableFor) read and write for that peer alone. The consumer is fresh: no
// endpoint exists between the two until the owner registers the keys (which opens the owner's)
// and the consumer's first operations go out: every read and write succeeds, single and batched.
// A third transport that the owner also knows, using the same keys, reads and writes nothing, and
// each of its operations fails with the owner's refusal.
func TestKeysBoundToTheirConsumer(t *testing.T) {
	owner, consumer := rmaPair(t)
	stranger := newNode(t, nil)
	link(t, owner, stranger)
	if consumer.rmaMode(t, owner.h.id) != ucx.RMAGuarded || stranger.rmaMode(t, owner.h.id) != ucx.RMAGuarded {
		t.Skip("the endpoints' RMA lanes are hardware-keyed: the HCA checks keys and range, not the requester")
	}
	// rmaMode opened the endpoints: a fresh consumer, with none.
	fresh := newNode(t, nil)
	link(t, owner, fresh)

	const n = 8
	mem := mapped(t, n*4096)
	regs, errs := owner.RegisterMemoryFor(fresh.h.id, [][]byte{mem})
	require.NoError(t, errs[0])
	key := regs[0].Key()
	reads := make([]transport.Read, n)
	for i := range reads {
		reads[i] = transport.Read{Key: key, Offset: uint64(i) * 4096, Dst: make([]byte, 4096)}
	}
	got := make([]error, n)
	fresh.ReadMany(testCtx(t), owner.h.id, reads, 16, func(i int, err error) { got[i] = err })
	for i := range reads {
		require.NoError(t, got[i], "the consumer's read %d", i)
		require.Equal(t, mem[i*4096:(i+1)*4096], reads[i].Dst, "the consumer's read %d", i)
	}
	one := make([]byte, 100)
	require.NoError(t, fresh.Get(testCtx(t), owner.h.id, key, 10, one))
	require.Equal(t, mem[10:110], one)

	sentinel := bytes.Repeat([]byte{0xC3}, 4096)
	dst := append([]byte(nil), sentinel...)
	err := stranger.Get(testCtx(t), owner.h.id, key, 0, dst)
	require.Error(t, err, "another peer read with the consumer's key")
	assert.True(t, errors.Is(err, ucx.ErrRemoteKeyRevoked) || errors.Is(err, ucx.StatusNotConnected), "not the owner's refusal: %v", err)
	assert.Equal(t, sentinel, dst, "a refused read wrote into its destination")
	stolen := []transport.Read{{Key: key, Dst: append([]byte(nil), sentinel...)}, {Key: key, Offset: 4096, Dst: append([]byte(nil), sentinel...)}}
	stranger.ReadMany(testCtx(t), owner.h.id, stolen, 16, func(i int, err error) {
		assert.Error(t, err, "another peer's batched read %d", i)
	})
	for i := range stolen {
		assert.Equal(t, sentinel, stolen[i].Dst, "another peer's batched read %d wrote into its destination", i)
	}
	deregister(t, regs[0])

	// A write grant's key: the writer writes, another peer does not.
	target := mapped(t, 4096)
	before := append([]byte(nil), target...)
	wreg, err := owner.RegisterMemoryWritableFor(fresh.h.id, target)
	require.NoError(t, err)
	var werr error
	stranger.WriteMany(testCtx(t), owner.h.id, []transport.Write{{Key: wreg.Key(), Offset: 0, Src: sentinel[:256]}}, 4, func(_ int, err error) { werr = err })
	require.Error(t, werr, "another peer wrote with the writer's key")
	require.Equal(t, before, target, "a refused write changed the target")
	werr = errors.New("no report")
	fresh.WriteMany(testCtx(t), owner.h.id, []transport.Write{{Key: wreg.Key(), Offset: 512, Src: sentinel[:256]}}, 4, func(_ int, err error) { werr = err })
	require.NoError(t, werr, "the writer's own write")
	require.Equal(t, sentinel[:256], target[512:768])
	deregister(t, wreg)
}

// slowJoin is a beforeJoin hook for an owner whose process is slow to handle a peer's hello
// (as under a heavy load): once on is set, every join waits delay first, and a join is skipped
// altogether (an owner that never connects back) when delay is negative.
type slowJoin struct {
	on    atomic.Bool
	delay time.Duration
}

func (s *slowJoin) hook(uint32) bool {
	if !s.on.Load() {
		return true
	}
	if s.delay < 0 {
		return false
	}
	time.Sleep(s.delay)
	return true
}

// oneSlotBehind leaves owner one slot behind consumer, the way an evicted endpoint does: both
// are in one slot, then the consumer retires its end without asking the owner to follow, so the
// consumer's next read opens the next slot while the owner's endpoint of the last one is still
// its current.
func oneSlotBehind(t *testing.T, owner, consumer node) {
	t.Helper()
	consumer.rmaMode(t, owner.h.id) // opens a slot when there is none, and waits for its wireup
	cp, _, err := consumer.lookup(owner.h.id)
	require.NoError(t, err)
	cp.sendMu.Lock()
	slot := cp.conn.epoch
	cp.sendMu.Unlock()
	op, _, err := owner.lookup(consumer.h.id)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		op.sendMu.Lock()
		defer op.sendMu.Unlock()
		return op.conn != nil && op.conn.epoch == slot
	}, wait, 10*time.Millisecond, "the owner never followed the consumer into slot %d", slot)
	cp.sendMu.Lock()
	consumer.retireLocked(cp, cp.conn, "evicted", false)
	cp.sendMu.Unlock()
}

// timedRead has owner register 64 KiB for consumer, and consumer read them whole; it returns the
// memory and how long the read took.
func timedRead(t *testing.T, owner, consumer node) ([]byte, time.Duration) {
	t.Helper()
	mem := mapped(t, 64<<10)
	regs, errs := owner.RegisterMemoryFor(consumer.h.id, [][]byte{mem})
	require.NoError(t, errs[0])
	defer deregister(t, regs[0])
	dst := make([]byte, len(mem))
	start := time.Now()
	require.NoError(t, consumer.Get(testCtx(t), owner.h.id, regs[0].Key(), 0, dst), "the read gave up on a slow owner")
	took := time.Since(start)
	require.Equal(t, mem, dst)
	return mem, took
}

// TestFirstReadOutwaitsASlowOwner: a read through a key bound to its holder stays a read, however
// long the owner takes to connect back, and fails with the owner's refusal within a bound when the
// owner never does. The owner's hello handling is slowed by 3 s, more than the fixed 2 s a read
// used to wait before it gave up (and the runtime fell back to chunks).
func TestFirstReadOutwaitsASlowOwner(t *testing.T) {
	const delay = 3 * time.Second
	setup := func(t *testing.T, s *slowJoin, consumerMod func(*Config)) (owner, consumer node) {
		owner = newNode(t, nil)
		owner.timings.beforeJoin = s.hook // before any hello can arrive
		consumer = newNode(t, consumerMod)
		link(t, owner, consumer)
		if consumer.rmaMode(t, owner.h.id) != ucx.RMAGuarded {
			t.Skip("the endpoints' RMA lanes are hardware-keyed: no holder check, nothing to wait for")
		}
		return owner, consumer
	}

	// A fresh pair: the owner opens its endpoint to the consumer when it registers the keys, so
	// the consumer's first read finds it bound and never waits for the owner's slow join.
	t.Run("owner binds before it hands out the key", func(t *testing.T) {
		s := &slowJoin{delay: delay}
		owner := newNode(t, nil)
		owner.timings.beforeJoin = s.hook
		consumer := newNode(t, nil)
		link(t, owner, consumer)
		s.on.Store(true)
		_, took := timedRead(t, owner, consumer)
		assert.Less(t, took, delay, "the first read waited for the owner's slow join: the key went out before the owner's endpoint was bound")
		t.Logf("first read of a fresh pair with the owner's joins slowed by %v: %v", delay, took)
	})

	// The consumer is a slot ahead: the owner binds that slot only when it gets to the
	// consumer's hello, 3 s late. The read waits for the owner's hello on the slot and succeeds.
	t.Run("owner a slot behind, slow", func(t *testing.T) {
		s := &slowJoin{delay: delay}
		owner, consumer := setup(t, s, nil)
		oneSlotBehind(t, owner, consumer)
		s.on.Store(true)
		mem, took := timedRead(t, owner, consumer)
		assert.GreaterOrEqual(t, took, delay-100*time.Millisecond, "the read did not wait for the owner's join: the setup did not leave the owner a slot behind")
		t.Logf("read across a connect-back slowed by %v: %v", delay, took)

		// Batched reads wait the same way.
		oneSlotBehind(t, owner, consumer)
		regs, errs := owner.RegisterMemoryFor(consumer.h.id, [][]byte{mem})
		require.NoError(t, errs[0])
		defer deregister(t, regs[0])
		reads := []transport.Read{{Key: regs[0].Key(), Dst: make([]byte, 4096)}, {Key: regs[0].Key(), Offset: 8192, Dst: make([]byte, 4096)}}
		got := []error{errors.New("no report"), errors.New("no report")}
		consumer.ReadMany(testCtx(t), owner.h.id, reads, 4, func(i int, err error) { got[i] = err })
		for i := range reads {
			require.NoError(t, got[i], "batched read %d", i)
			require.Equal(t, mem[reads[i].Offset:reads[i].Offset+4096], reads[i].Dst, "batched read %d", i)
		}
	})

	// The owner never connects back: the read fails with the owner's refusal once the bound (the
	// consumer's SendTimeout, the transfer having no deadline) has passed, and writes nothing.
	t.Run("owner never binds", func(t *testing.T) {
		const bound = 2 * time.Second
		s := &slowJoin{delay: -1}
		owner, consumer := setup(t, s, func(c *Config) { c.SendTimeout = bound })
		oneSlotBehind(t, owner, consumer)
		s.on.Store(true)
		mem := mapped(t, 4096)
		regs, errs := owner.RegisterMemoryFor(consumer.h.id, [][]byte{mem})
		require.NoError(t, errs[0])
		defer deregister(t, regs[0])
		sentinel := bytes.Repeat([]byte{0x5A}, len(mem))
		dst := append([]byte(nil), sentinel...)
		start := time.Now()
		err := consumer.Get(context.Background(), owner.h.id, regs[0].Key(), 0, dst)
		took := time.Since(start)
		require.Error(t, err)
		t.Logf("after %v: %v", took, err)
		assert.ErrorIs(t, err, ucx.StatusNotConnected, "not the owner's refusal")
		assert.Contains(t, err.Error(), "did not connect back")
		assert.GreaterOrEqual(t, took, bound-100*time.Millisecond, "gave up before the bound")
		assert.Less(t, took, bound+5*time.Second, "waited well past the bound")
		assert.Equal(t, sentinel, dst, "a refused read wrote into its destination")
	})
}
