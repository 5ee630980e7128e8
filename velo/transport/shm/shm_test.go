//go:build linux

package shm

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/velo/transport"
)

// testHost is the runtime as the transport sees it; with a session it also plays the control
// plane's AuthGate, every pair of test hosts sharing that one session key.
type testHost struct {
	id      transport.InstanceID
	inc     uint64
	session []byte
}

func (h *testHost) LocalID() transport.InstanceID                   { return h.id }
func (h *testHost) Incarnation() uint64                             { return h.inc }
func (h *testHost) Deliver(transport.InstanceID, []byte)            {}
func (h *testHost) PeerDown(transport.InstanceID, error)            {}
func (h *testHost) Logger() *slog.Logger                            { return slog.New(slog.DiscardHandler) }
func (h *testHost) AuthRequired() bool                              { return h.session != nil }
func (h *testHost) Authenticated(transport.InstanceID, uint64) bool { return true }
func (h *testHost) Authenticate(context.Context, transport.InstanceID) error {
	return nil
}

func (h *testHost) HelloProof(_ transport.InstanceID, msg []byte) ([]byte, error) {
	m := hmac.New(sha256.New, h.session)
	m.Write(msg)
	return m.Sum(nil), nil
}

func (h *testHost) HelloKey(_ transport.InstanceID, _ uint64, msg, proof []byte) ([]byte, bool) {
	want, _ := h.HelloProof(0, msg)
	return want, hmac.Equal(want, proof)
}

func newPair(t testing.TB, cfg Config, ownerSession, consumerSession []byte) (owner, consumer *Transport) {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = privDir(t)
	}
	var err error
	owner, err = New(cfg)
	require.NoError(t, err)
	consumer, err = New(cfg)
	require.NoError(t, err)
	require.NoError(t, owner.Start(&testHost{id: 1, inc: 11, session: ownerSession}))
	require.NoError(t, consumer.Start(&testHost{id: 2, inc: 22, session: consumerSession}))
	t.Cleanup(func() { consumer.Close(); owner.Close() })
	require.NoError(t, consumer.AddPeer(context.Background(), transport.PeerAddress{ID: 1, Incarnation: 11, Blob: owner.Address()}))
	return owner, consumer
}

// privDir is a socket directory of mode 0700 (t.TempDir makes 0755 ones, which New refuses).
func privDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "velo-shm-") // short: a socket path has at most 107 bytes
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// anon is page-aligned memory outside the Go heap, as the registry's arenas are.
func anon(t testing.TB, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Munmap(b) })
	for i := range b {
		b[i] = byte(i*7 + i>>12)
	}
	return b
}

func waitReady(t *testing.T, c *Transport, owner transport.InstanceID) {
	t.Helper()
	require.Eventually(t, func() bool { return c.CanGet(owner) }, 5*time.Second, 5*time.Millisecond, "the probe never opened a channel")
}

func TestGetReadsExactlyTheRequestedBytes(t *testing.T) {
	owner, consumer := newPair(t, Config{ChunkSize: 64 << 10}, nil, nil)
	waitReady(t, consumer, 1)
	assert.True(t, owner.Serves(2), "the owner must see the consumer's proven channel")
	mem := anon(t, 1<<20+4096)
	regs, errs := owner.RegisterMemoryFor(2, [][]byte{mem})
	require.NoError(t, errs[0])
	reg := regs[0]

	dst := make([]byte, len(mem))
	require.NoError(t, consumer.Get(context.Background(), 1, reg.Key(), 0, dst))
	assert.True(t, bytes.Equal(dst, mem), "a whole-region read must return the region")

	part := make([]byte, 100_000)
	require.NoError(t, consumer.Get(context.Background(), 1, reg.Key(), 12345, part))
	assert.True(t, bytes.Equal(part, mem[12345:12345+len(part)]))

	rk, err := reg.(transport.RangeKeyer).RangeKey(8192, 4096)
	require.NoError(t, err)
	small := make([]byte, 4096)
	require.NoError(t, consumer.Get(context.Background(), 1, rk, 0, small))
	assert.True(t, bytes.Equal(small, mem[8192:8192+4096]))
	err = consumer.Get(context.Background(), 1, rk, 1, small)
	require.Error(t, err, "a range key must not reach past its part")
	assert.Contains(t, err.Error(), "outside the key's range")

	// The channel survives a refusal: the next read works.
	require.NoError(t, consumer.Get(context.Background(), 1, reg.Key(), 0, small))
}

func TestReadManyPacksABatchAndFailsOnlyTheBadReads(t *testing.T) {
	owner, consumer := newPair(t, Config{ChunkSize: 64 << 10}, nil, nil)
	waitReady(t, consumer, 1)
	mem := anon(t, 4<<20)
	regs, errs := owner.RegisterMemoryFor(2, [][]byte{mem})
	require.NoError(t, errs[0])
	key := regs[0].Key()
	forged := append([]byte(nil), key...)
	forged[8] ^= 1

	// 600 reads (three batches): small blocks that share ring buffers, reads that span several
	// buffers, a forged key and a range past the region, which fail alone.
	var reads []transport.Read
	var want [][]byte
	for i := 0; i < 600; i++ {
		off, n := uint64(i*4096+i%7), 1000+i%3000
		if i%50 == 7 {
			n = 200 << 10
			off = uint64(i) * 1000
		}
		reads = append(reads, transport.Read{Key: key, Offset: off, Dst: make([]byte, n)})
		want = append(want, mem[off:off+uint64(n)])
	}
	reads[13].Key = forged
	reads[500].Offset = uint64(len(mem)) - 10
	got := make([]error, len(reads))
	calls := 0
	consumer.ReadMany(context.Background(), 1, reads, 4, func(i int, err error) { got[i] = err; calls++ })
	require.Equal(t, len(reads), calls, "done runs once per read")
	for i, err := range got {
		switch i {
		case 13:
			require.ErrorIs(t, err, transport.ErrKeyRevoked)
			assert.Equal(t, make([]byte, len(reads[i].Dst)), reads[i].Dst)
		case 500:
			require.Error(t, err)
			assert.Contains(t, err.Error(), "outside the key's range")
		default:
			require.NoError(t, err, "read %d", i)
			require.True(t, bytes.Equal(want[i], reads[i].Dst), "read %d", i)
		}
	}
	// The channels are still in step.
	dst := make([]byte, 4096)
	require.NoError(t, consumer.Get(context.Background(), 1, key, 0, dst))
	assert.True(t, bytes.Equal(mem[:4096], dst))
}

func TestRevokedAndForgedKeysReadNothing(t *testing.T) {
	owner, consumer := newPair(t, Config{}, nil, nil)
	waitReady(t, consumer, 1)
	mem := anon(t, 8192)
	regs, errs := owner.RegisterMemoryFor(2, [][]byte{mem})
	require.NoError(t, errs[0])
	key := regs[0].Key()

	forged := append([]byte(nil), key...)
	forged[8] ^= 1 // the token
	dst := make([]byte, 4096)
	err := consumer.Get(context.Background(), 1, forged, 0, dst)
	require.ErrorIs(t, err, transport.ErrKeyRevoked, "a wrong token must be refused as an unknown key")
	assert.Equal(t, make([]byte, 4096), dst, "a refused read must write nothing")

	require.NoError(t, regs[0].Revoke(context.Background()))
	select {
	case <-regs[0].Dead():
	case <-time.After(time.Second):
		t.Fatal("a revoked registration with no read in flight must be dead at once")
	}
	err = consumer.Get(context.Background(), 1, key, 0, dst)
	require.ErrorIs(t, err, transport.ErrKeyRevoked)
	assert.Equal(t, make([]byte, 4096), dst)
}

func TestKeyOfAnotherConsumerIsRefused(t *testing.T) {
	owner, consumer := newPair(t, Config{}, nil, nil)
	waitReady(t, consumer, 1)
	mem := anon(t, 4096)
	regs, errs := owner.RegisterMemoryFor(99, [][]byte{mem})
	require.NoError(t, errs[0])
	err := consumer.Get(context.Background(), 1, regs[0].Key(), 0, make([]byte, 4096))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "another consumer")
}

func TestAnotherHostNeverTakesThePath(t *testing.T) {
	dir := privDir(t)
	owner, err := New(Config{Dir: dir, HostID: "host-a"})
	require.NoError(t, err)
	consumer, err := New(Config{Dir: dir, HostID: "host-b"})
	require.NoError(t, err)
	require.NoError(t, owner.Start(&testHost{id: 1, inc: 11}))
	require.NoError(t, consumer.Start(&testHost{id: 2, inc: 22}))
	defer owner.Close()
	defer consumer.Close()
	require.NoError(t, consumer.AddPeer(context.Background(), transport.PeerAddress{ID: 1, Incarnation: 11, Blob: owner.Address()}),
		"a peer of another host keeps its other transports: AddPeer must not fail")
	time.Sleep(50 * time.Millisecond)
	assert.False(t, consumer.CanGet(1))
	assert.False(t, owner.Serves(2), "the consumer must not even connect")
	ok, why := consumer.PathTo(1)
	assert.False(t, ok)
	assert.Contains(t, why, "another host")
}

func TestUnreachableSocketIsNotTaken(t *testing.T) {
	owner, err := New(Config{Dir: privDir(t)})
	require.NoError(t, err)
	consumer, err := New(Config{Dir: privDir(t)})
	require.NoError(t, err)
	require.NoError(t, owner.Start(&testHost{id: 1, inc: 11}))
	require.NoError(t, consumer.Start(&testHost{id: 2, inc: 22}))
	defer owner.Close()
	defer consumer.Close()
	// What a consumer in another mount namespace sees: the same host identity, no such socket.
	host, _, err := parseAddress(owner.Address())
	require.NoError(t, err)
	blob := []byte{addrVersion, 0, byte(len(host))}
	blob = append(blob, host...)
	gone := "/nonexistent/velo/owner.sock"
	blob = append(blob, 0, byte(len(gone)))
	blob = append(blob, gone...)
	require.NoError(t, consumer.AddPeer(context.Background(), transport.PeerAddress{ID: 1, Incarnation: 11, Blob: blob}))
	require.Eventually(t, func() bool { _, why := consumer.PathTo(1); return why != "probing" }, 5*time.Second, 5*time.Millisecond)
	ok, why := consumer.PathTo(1)
	assert.False(t, ok)
	assert.Contains(t, why, "not reachable")
	assert.NotEmpty(t, consumer.HealthReasons())
}

func TestWrongSecretIsRefused(t *testing.T) {
	owner, consumer := newPair(t, Config{}, []byte("secret-a"), []byte("secret-b"))
	require.Eventually(t, func() bool { _, why := consumer.PathTo(1); return why != "probing" }, 5*time.Second, 5*time.Millisecond)
	ok, why := consumer.PathTo(1)
	assert.False(t, ok, "a consumer without the cluster secret must not get a channel")
	assert.Contains(t, why, "proof")
	assert.False(t, owner.Serves(2))

	mem := anon(t, 4096)
	reg, err := owner.RegisterMemory(mem)
	require.NoError(t, err)
	dst := make([]byte, 4096)
	require.Error(t, consumer.Get(context.Background(), 1, reg.Key(), 0, dst))
	assert.Equal(t, make([]byte, 4096), dst)
}

func TestSameSecretTakesThePath(t *testing.T) {
	_, consumer := newPair(t, Config{}, []byte("secret"), []byte("secret"))
	waitReady(t, consumer, 1)
}

func TestSocketDirectoryMustFitASocketPath(t *testing.T) {
	d := filepath.Join(privDir(t), strings.Repeat("d", 80))
	_, err := New(Config{Dir: d})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "too long for a Unix socket path")
}

func TestSocketDirectoryMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	_, err := New(Config{Dir: dir})
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "chmod 700"), err.Error())
}

func TestDeadWaitsForAReadInFlight(t *testing.T) {
	// A consumer that stops reading its ring holds the owner's copy loop; the registration is
	// revoked, stays alive while the read is stuck, and is dead once ForceClosePeer closed the
	// consumer's channels.
	owner, consumer := newPair(t, Config{ChunkSize: 4096}, nil, nil)
	waitReady(t, consumer, 1)
	mem := anon(t, 64<<10)
	regs, errs := owner.RegisterMemoryFor(2, [][]byte{mem})
	require.NoError(t, errs[0])
	c, err := consumer.take(context.Background(), consumer.peers[1])
	require.NoError(t, err)
	var f [frameLen]byte
	f[0] = frameRead
	copy(f[4:], regs[0].Key())
	f[44] = 0
	f[45] = 0
	f[46] = 1 // 64 KiB
	_, err = c.c.Write(f[:])
	require.NoError(t, err)
	_, err = io.ReadFull(c.c, f[:]) // the first chunk: the owner's copy is under way
	require.NoError(t, err)
	require.Equal(t, byte(frameChunk), f[0])
	require.NoError(t, regs[0].Revoke(context.Background()))
	select {
	case <-regs[0].Dead():
		t.Fatal("a registration whose copy is under way must not be dead")
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, owner.ForceClosePeer(2))
	select {
	case <-regs[0].Dead():
	case <-time.After(2 * time.Second):
		t.Fatal("ForceClosePeer must end the stuck read")
	}
	consumer.put(consumer.peers[1], c, false)
}

// FuzzParse feeds the two layouts a peer hands this transport, an address and a key, with
// anything: they refuse what they cannot use and never panic.
func FuzzParse(f *testing.F) {
	f.Add(key{slot: 1, token: 2, base: 3, length: 4}.append(nil))
	f.Add([]byte{addrVersion, 0, 4, 'h', 'o', 's', 't', 0, 1, '/'})
	f.Fuzz(func(t *testing.T, b []byte) {
		if k, err := parseKey(b); err == nil {
			require.True(t, IsKey(b))
			require.GreaterOrEqual(t, k.base+k.length, k.base)
		}
		if host, sock, err := parseAddress(b); err == nil {
			require.NotEmpty(t, host)
			require.NotEmpty(t, sock)
		}
	})
}

func TestWriteManyWritesOnlyThroughALiveWriteKey(t *testing.T) {
	owner, writer := newPair(t, Config{ChunkSize: 64 << 10}, nil, nil)
	waitReady(t, writer, 1)
	mem := anon(t, 1<<20)
	for i := range mem {
		mem[i] = 0
	}
	reg, err := owner.RegisterMemoryWritableFor(2, mem[4096:4096+512<<10])
	require.NoError(t, err)
	key := reg.Key()
	lease, errs := owner.RegisterMemoryFor(2, [][]byte{mem})
	require.NoError(t, errs[0])
	other, err := owner.RegisterMemoryWritableFor(99, mem)
	require.NoError(t, err)

	// A write of many ring buffers, one inside a single buffer, and the refusals: a range past
	// the key, a lease's key (read-only), another writer's key.
	src := make([]byte, 300<<10+17)
	for i := range src {
		src[i] = byte(i*13 + 1)
	}
	ws := []transport.Write{
		{Key: key, Offset: 1000, Src: src},
		{Key: key, Offset: 400 << 10, Src: []byte("hello")},
		{Key: key, Offset: 512<<10 - 4, Src: []byte("past the end")},
		{Key: lease[0].Key(), Offset: 0, Src: []byte("not through a lease")},
		{Key: other.Key(), Offset: 0, Src: []byte("not another writer's")},
	}
	got := make([]error, len(ws))
	calls := 0
	writer.WriteMany(context.Background(), 1, ws, 2, func(i int, err error) { got[i] = err; calls++ })
	require.Equal(t, len(ws), calls, "done runs once per write")
	require.NoError(t, got[0])
	require.NoError(t, got[1])
	assert.Contains(t, got[2].Error(), "outside the key's range")
	assert.Contains(t, got[3].Error(), "does not allow this access")
	assert.Contains(t, got[4].Error(), "another consumer")
	assert.True(t, bytes.Equal(src, mem[4096+1000:4096+1000+len(src)]), "the bytes must land intact")
	assert.Equal(t, "hello", string(mem[4096+400<<10:4096+400<<10+5]))
	untouched := make([]byte, 4096)
	assert.Equal(t, untouched, mem[:4096], "nothing lands before the key's range")
	assert.Equal(t, make([]byte, len(mem)-4096-512<<10), mem[4096+512<<10:], "nothing lands past the key's range")

	// A write key is not a read key.
	err = writer.Get(context.Background(), 1, key, 0, make([]byte, 16))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not allow this access")

	// After the grant's end nothing lands, and the channel stays in step for the next write.
	require.NoError(t, reg.Revoke(context.Background()))
	<-reg.Dead()
	before := append([]byte(nil), mem...)
	var werr error
	writer.WriteMany(context.Background(), 1, []transport.Write{{Key: key, Offset: 0, Src: src}}, 1, func(_ int, err error) { werr = err })
	require.ErrorIs(t, werr, transport.ErrKeyRevoked)
	assert.True(t, bytes.Equal(before, mem), "a revoked key must write nothing")
	reg2, err := owner.RegisterMemoryWritableFor(2, mem)
	require.NoError(t, err)
	writer.WriteMany(context.Background(), 1, []transport.Write{{Key: reg2.Key(), Offset: 7, Src: src}}, 1, func(_ int, err error) { werr = err })
	require.NoError(t, werr)
	assert.True(t, bytes.Equal(src, mem[7:7+len(src)]))
}

// TestMalformedWritesCloseTheChannel: a writer that names a buffer outside the ring, a piece
// larger than a buffer, or writes while a read of its own is under way is out of step: the owner
// closes the channel and copies nothing, and goes on serving other channels.
func TestMalformedWritesCloseTheChannel(t *testing.T) {
	owner, writer := newPair(t, Config{ChunkSize: 64 << 10}, nil, nil)
	waitReady(t, writer, 1)
	mem := anon(t, 1<<20)
	for i := range mem {
		mem[i] = 0
	}
	reg, err := owner.RegisterMemoryWritableFor(2, mem)
	require.NoError(t, err)
	lease, errs := owner.RegisterMemoryFor(2, [][]byte{anon(t, 4<<20)})
	require.NoError(t, errs[0])
	writer.mu.Lock()
	p := writer.peers[1]
	writer.mu.Unlock()

	frame := func(kind byte, b byte, key []byte, n uint64) []byte {
		f := make([]byte, frameLen)
		f[0], f[1] = kind, b
		copy(f[4:], key)
		binary.LittleEndian.PutUint64(f[44:], n)
		return f
	}
	read := frame(frameRead, 0, lease[0].Key(), 4<<20)
	read[2] = flagLast
	for name, frames := range map[string][][]byte{
		"a buffer outside the ring":   {frame(frameWrite, byte(DefaultSlots), reg.Key(), 16)},
		"a piece above a buffer":      {frame(frameWrite, 0, reg.Key(), 64<<10+1)},
		"a write during its own read": {read, frame(frameWrite, 0, reg.Key(), 16)},
	} {
		c, err := writer.take(context.Background(), p)
		require.NoError(t, err, name)
		for i := range c.ring {
			c.ring[i] = 0xee
		}
		for _, f := range frames {
			_, err := c.c.Write(f)
			require.NoError(t, err, name)
		}
		c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.Copy(io.Discard, c.c) // the owner's answers, up to its close
		require.NoError(t, err, "%s: the owner must close the channel", name)
		writer.put(p, c, false)
		assert.Equal(t, make([]byte, len(mem)), mem, "%s: nothing may land", name)
	}
	// The owner still serves a proper write.
	var werr error
	writer.WriteMany(context.Background(), 1, []transport.Write{{Key: reg.Key(), Offset: 5, Src: []byte("ok")}}, 1, func(_ int, err error) { werr = err })
	require.NoError(t, werr)
	assert.Equal(t, "ok", string(mem[5:7]))
}
