package velo

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/transport/tcp"
)

func withTCP(t *testing.T, cfg tcp.Config) Option {
	t.Helper()
	ctl, err := tcp.New(cfg)
	require.NoError(t, err)
	return WithTransport(ctl)
}

// noDownEvents fails the test if ch carried any event but up for a peer.
func noDownEvents(t *testing.T, ch <-chan PeerEvent) {
	t.Helper()
	for {
		select {
		case ev := <-ch:
			assert.Equal(t, PeerUp, ev.Kind, "peer event %+v", ev)
		default:
			return
		}
	}
}

// TestControlConnectionBudgetUnderRequestsAndGets: an instance whose control plane keeps at most
// two connections calls six peers and fetches their payloads (the chunked path, over those
// connections), all at once, round after round, while the peers call it back; so the budget
// closes connections while requests, answers and chunk pulls start on them. Every call returns
// its payload, every fetch the owner's bytes, no peer is reported down on either side, the budget
// closed connections, and once the traffic stops the instance holds at most two.
func TestControlConnectionBudgetUnderRequestsAndGets(t *testing.T) {
	const budget, peers, rounds = 2, 6, 8
	a := newInstance(t, withTCP(t, tcp.Config{MaxConnections: budget}), WithHandler("echo", echo))
	events := a.WatchPeers(context.Background())
	owners := make([]*Velo, peers)
	ownerEvents := make([]<-chan PeerEvent, peers)
	for i := range owners {
		owners[i] = newInstance(t, WithHandler("echo", echo))
		ownerEvents[i] = owners[i].WatchPeers(context.Background())
		require.NoError(t, a.RegisterPeer(tctx(t), owners[i].PeerInfo()))
		require.NoError(t, owners[i].RegisterPeer(tctx(t), a.PeerInfo()))
	}
	for round := range rounds {
		var wg sync.WaitGroup
		for i, o := range owners {
			wg.Add(3)
			go func() { // a calls the owner
				defer wg.Done()
				for k := range 4 {
					msg := []byte(fmt.Sprintf("round %d call %d to %d", round, k, i))
					got, err := a.Request(tctx(t), o.ID(), "echo", msg)
					if err != nil || !bytes.Equal(got, msg) {
						t.Errorf("%s: %q, %v", msg, got, err)
						return
					}
				}
			}()
			go func() { // a fetches the owner's payloads
				defer wg.Done()
				for k := range 2 {
					data := payload(96<<10+k, uint64(round*100+i*10+k))
					h, err := o.StageData(tctx(t), data)
					if err != nil {
						t.Errorf("round %d: owner %d stages: %v", round, i, err)
						return
					}
					l, err := a.Get(tctx(t), h)
					if err != nil {
						t.Errorf("round %d: get %d from owner %d: %v", round, k, i, err)
						return
					}
					if !bytes.Equal(l.Bytes(), data) {
						t.Errorf("round %d: get %d from owner %d returned other bytes", round, k, i)
					}
					l.Release(tctx(t))
				}
			}()
			go func() { // the owner calls a
				defer wg.Done()
				for k := range 4 {
					msg := []byte(fmt.Sprintf("round %d call %d from %d", round, k, i))
					got, err := o.Request(tctx(t), a.ID(), "echo", msg)
					if err != nil || !bytes.Equal(got, msg) {
						t.Errorf("%s: %q, %v", msg, got, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		time.Sleep(20 * time.Millisecond) // a pause: the budget closes what the round left open
	}
	assert.Positive(t, metric(t, a, "velo_tcp_closes_total", map[string]string{"reason": "budget"}), "the budget closed nothing")
	assert.Zero(t, metric(t, a, "velo_tcp_closes_total", map[string]string{"reason": "lost"}))
	eventually(t, "a within its budget", func() bool {
		return metric(t, a, "velo_tcp_connections", nil) <= budget
	})
	noDownEvents(t, events)
	for i, o := range owners {
		noDownEvents(t, ownerEvents[i])
		p, ok := peerOf(a, o.ID())
		require.True(t, ok)
		assert.Equal(t, StateUp, p.State, "a's view of owner %d", i)
		p, ok = peerOf(o, a.ID())
		require.True(t, ok)
		assert.Equal(t, StateUp, p.State, "owner %d's view of a", i)
		assert.Zero(t, metric(t, o, "velo_tcp_closes_total", map[string]string{"reason": "lost"}), "owner %d", i)
	}
}

// TestIdleClosedPeerStaysUp: a control connection closed for idleness leaves both sides' view of
// the other up (no down event), and the next request, either way, opens a new one.
func TestIdleClosedPeerStaysUp(t *testing.T) {
	a := newInstance(t, withTCP(t, tcp.Config{IdleTimeout: 100 * time.Millisecond}), WithHandler("echo", echo))
	b := newInstance(t, WithHandler("echo", echo))
	aEvents, bEvents := a.WatchPeers(context.Background()), b.WatchPeers(context.Background())
	require.NoError(t, a.RegisterPeer(tctx(t), b.PeerInfo()))
	_, err := a.Request(tctx(t), b.ID(), "echo", []byte("one"))
	require.NoError(t, err)
	eventually(t, "the idle connection closed on both sides", func() bool {
		return metric(t, a, "velo_tcp_connections", nil) == 0 && metric(t, b, "velo_tcp_connections", nil) == 0
	})
	assert.Equal(t, 1.0, metric(t, a, "velo_tcp_closes_total", map[string]string{"reason": "idle"}))
	assert.Equal(t, 1.0, metric(t, b, "velo_tcp_closes_total", map[string]string{"reason": "peer"}))
	for _, v := range []*Velo{a, b} {
		for _, p := range v.Peers() {
			assert.Equal(t, StateUp, p.State, "%+v", p)
		}
	}
	got, err := b.Request(tctx(t), a.ID(), "echo", []byte("two"))
	require.NoError(t, err)
	assert.Equal(t, "two", string(got))
	got, err = a.Request(tctx(t), b.ID(), "echo", []byte("three"))
	require.NoError(t, err)
	assert.Equal(t, "three", string(got))
	noDownEvents(t, aEvents)
	noDownEvents(t, bEvents)
}
