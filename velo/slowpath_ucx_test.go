//go:build cgo && linux

package velo

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/discovery"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// A pair that finds each other through discovery, where one side is reached over TCP before its
// own discovery poll has seen the other's UCX address: the first transfers may go by chunks, but
// none after the pair has its UCX lane, and the slower path is logged once.

// lockedLog collects an instance's log lines.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

// ucxMember starts a member with TCP and UCX whose discovery reads the directory every poll.
func ucxMember(t *testing.T, dir, name string, poll time.Duration, log *lockedLog, opts ...Option) *Velo {
	t.Helper()
	d, err := discovery.NewFilesystem(discovery.FilesystemConfig{Dir: dir, Cluster: "slow", TTL: 30 * time.Second, Poll: poll})
	require.NoError(t, err)
	ctl, err := tcp.New(tcp.Config{})
	require.NoError(t, err)
	u, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp", EagerEndpoints: true, RMAOverSoftwareLanes: true, Logger: quietLogger()})
	require.NoError(t, err)
	logger := quietLogger()
	if log != nil {
		logger = slog.New(slog.NewTextHandler(log, nil))
	}
	v, err := New(context.Background(), append([]Option{WithLogger(logger), WithTransport(ctl), WithUCXTransport(u), WithDiscovery(d, name)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { v.Close() })
	return v
}

// withoutPeerInfo makes an instance that does not answer velo.peerinfo, as a release without it.
func withoutPeerInfo() Option {
	return func(o *options) error {
		o.noPeerInfo = true
		return nil
	}
}

// hasUCX reports whether v registered peer over UCX (Peers' Transports).
func hasUCX(v *Velo, peer InstanceID) bool {
	for _, p := range v.Peers() {
		if p.ID == peer {
			for _, tr := range p.Transports {
				if tr == ucxtransport.Name {
					return true
				}
			}
		}
	}
	return false
}

// latePair starts the slow side first (its discovery polls every 2 s, so its first listing is
// empty and its next one is 2 s away) and then the quick side, which finds the slow one at once.
// Without asked, the quick side does not answer velo.peerinfo (as a release without it), so the
// slow side learns the quick one's UCX address only from its next poll: the first transfers are
// decided before it, deterministically.
func latePair(t *testing.T, asked bool) (slow, quick *Velo, slowLog *lockedLog) {
	t.Helper()
	dir := t.TempDir()
	slowLog = &lockedLog{}
	slow = ucxMember(t, dir, "slow-0", 2*time.Second, slowLog)
	time.Sleep(200 * time.Millisecond) // its first scan of the directory, on a goroutine of its own, is done
	var opts []Option
	if !asked {
		opts = append(opts, withoutPeerInfo())
	}
	quick = ucxMember(t, dir, "quick-0", 20*time.Millisecond, nil, opts...)
	eventually(t, "the quick member registered the slow one over UCX", func() bool { return hasUCX(quick, slow.ID()) })
	return slow, quick, slowLog
}

// inbox registers a handler called name on v that passes each payload on.
func inbox(t *testing.T, v *Velo, name string) <-chan []byte {
	t.Helper()
	ch := make(chan []byte, 16)
	require.NoError(t, v.RegisterHandler(name, func(_ context.Context, m *Message) ([]byte, error) {
		ch <- append([]byte(nil), m.Payload...)
		return nil, nil
	}))
	return ch
}

const slowLine = "go by chunks: this instance knows no UCX address of it yet"

// TestRDMAPushGrantNotLockedBeforeUCXIsKnown: the writer's first put of a grant is issued the
// moment the receiver reached it over TCP; every put of that grant once the writer knows the
// receiver's UCX address takes the RDMA path, on both sides' push path series.
func TestRDMAPushGrantNotLockedBeforeUCXIsKnown(t *testing.T) {
	for _, asked := range []bool{false, true} {
		t.Run(map[bool]string{false: "discovery only", true: "peer info asked"}[asked], func(t *testing.T) {
			writer, recv, wlog := latePair(t, asked)
			handles := inbox(t, writer, "grant")
			const size = 64 << 10
			const n = 64
			region, err := recv.NewRegion(n * size)
			require.NoError(t, err)
			t.Cleanup(region.Free)
			require.True(t, region.Pinned(), region.Reason())
			grant, err := recv.GrantWrite(tctx(t), writer.ID(), region, GrantOptions{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = grant.Revoke(context.Background()) })
			hb, err := grant.Handle().MarshalBinary()
			require.NoError(t, err)
			_, err = recv.Request(tctx(t), writer.ID(), "grant", hb)
			require.NoError(t, err)
			var h GrantHandle
			require.NoError(t, h.UnmarshalBinary(<-handles))
			_, err = writer.pushService() // its series exist from here on
			require.NoError(t, err)

			rdmaPuts := func() float64 { return pushPath(t, writer, "writer", metrics.PathRDMA, metrics.ReasonOK) }
			chunkedPuts := func() float64 { return pushPath(t, writer, "writer", metrics.PathChunked, metrics.ReasonNoOffer) }
			after := 0 // puts issued once the writer knew the receiver's UCX address
			deadline := time.Now().Add(testWait)
			for i := 0; i < n && after < 8; i++ {
				known := hasUCX(writer, recv.ID())
				before := rdmaPuts()
				data := payload(size, uint64(i))
				require.NoError(t, writer.Put(tctx(t), h, uint64(i*size), data, nil), "put %d", i)
				require.Equal(t, data, region.Bytes()[i*size:(i+1)*size], "put %d landed", i)
				if known {
					after++
					require.Equal(t, before+1, rdmaPuts(), "put %d, issued once the pair had UCX, went by chunks", i)
				} else {
					time.Sleep(50 * time.Millisecond) // wait for the lane, a put at a time
				}
				require.True(t, time.Now().Before(deadline), "the writer never learned the receiver's UCX address")
			}
			require.Equal(t, 8, after, "puts after the pair had UCX")
			assert.GreaterOrEqual(t, pushPath(t, recv, "receiver", metrics.PathRDMA, metrics.ReasonOK), 1.0, "the receiver answered the grant on the RDMA path")
			if !asked {
				// Reproduces the user's case: the first puts went by chunks, and did not lock the grant.
				assert.GreaterOrEqual(t, chunkedPuts(), 1.0, "the puts before the poll went by chunks")
				assert.GreaterOrEqual(t, pushPath(t, recv, "receiver", metrics.PathChunked, metrics.ReasonNoOffer), 1.0)
				assert.Equal(t, 1, wlog.count(slowLine), "the slower path is logged once:\n%s", wlog.buf.String())
			}
			assert.LessOrEqual(t, wlog.count(slowLine), 1, "logged at most once per peer and reason")
		})
	}
}

// TestRDMAGetNotLockedBeforeUCXIsKnown: Get and GetBatch issued the moment the owner reached the
// consumer over TCP; every one once the consumer knows the owner's UCX address takes the RDMA
// path (velo_rendezvous_rdma_path_total on both sides).
func TestRDMAGetNotLockedBeforeUCXIsKnown(t *testing.T) {
	for _, batch := range []bool{false, true} {
		for _, asked := range []bool{false, true} {
			name := map[bool]string{false: "get", true: "getbatch"}[batch] + "/" + map[bool]string{false: "discovery only", true: "peer info asked"}[asked]
			t.Run(name, func(t *testing.T) {
				cons, owner, clog := latePair(t, asked)
				handles := inbox(t, cons, "kv")
				const size = 256 << 10
				data := payload(size, 7)
				var hs []Handle
				for range 4 {
					h, err := owner.StageDataPinned(tctx(t), data)
					require.NoError(t, err)
					hs = append(hs, h)
				}
				// The first handle reaches the consumer in a message: the moment the owner is
				// reachable over TCP.
				hb, err := hs[0].MarshalBinary()
				require.NoError(t, err)
				_, err = owner.Request(tctx(t), cons.ID(), "kv", hb)
				require.NoError(t, err)
				var got Handle
				require.NoError(t, got.UnmarshalBinary(<-handles))
				require.Equal(t, hs[0], got)

				rdmaPath := func(v *Velo) float64 {
					return value(t, v, metrics.RDMAPathTotal, metrics.PathLabels(metrics.PathRDMA, metrics.ReasonOK))
				}
				fetch := func() (leases []*Lease) {
					if !batch {
						l, err := cons.Get(tctx(t), hs[0])
						require.NoError(t, err)
						return []*Lease{l}
					}
					reqs := make([]GetRequest, len(hs))
					for i, h := range hs {
						reqs[i] = GetRequest{Handle: h}
					}
					for _, r := range cons.GetBatch(tctx(t), reqs, nil) {
						require.NoError(t, r.Err)
						leases = append(leases, r.Lease)
					}
					return leases
				}
				after := 0
				deadline := time.Now().Add(testWait)
				for after < 5 {
					known := hasUCX(cons, owner.ID())
					cb, ob := rdmaPath(cons), rdmaPath(owner)
					leases := fetch()
					for _, l := range leases {
						require.Equal(t, data, l.Bytes())
						if known {
							require.Equal(t, metrics.PathRDMA, l.Path, "a transfer once the pair had UCX went %s/%s", l.Path, l.Reason)
						}
						require.NoError(t, l.Detach(tctx(t))) // the handles are fetched again
					}
					if known {
						after++
						assert.Equal(t, cb+float64(len(leases)), rdmaPath(cons), "consumer's rdma/ok series")
						assert.Equal(t, ob+float64(len(leases)), rdmaPath(owner), "owner's rdma/ok series")
					} else {
						time.Sleep(50 * time.Millisecond)
					}
					require.True(t, time.Now().Before(deadline), "the consumer never learned the owner's UCX address")
				}
				if !asked {
					assert.GreaterOrEqual(t, value(t, cons, metrics.RDMAPathTotal, metrics.PathLabels(metrics.PathChunked, metrics.ReasonNoOffer)), 1.0,
						"the transfers before the poll went by chunks")
					assert.Equal(t, 1, clog.count(slowLine), "the slower path is logged once:\n%s", clog.buf.String())
				}
				assert.LessOrEqual(t, clog.count(slowLine), 1, "logged at most once per peer and reason")
			})
		}
	}
}
