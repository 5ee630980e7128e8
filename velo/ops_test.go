package velo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
)

// mesh starts n instances that have all registered each other.
func mesh(t *testing.T, n int, opts ...Option) []*Velo {
	t.Helper()
	vs := make([]*Velo, n)
	for i := range vs {
		vs[i] = newInstance(t, opts...)
	}
	for _, a := range vs {
		for _, b := range vs {
			if a != b {
				require.NoError(t, a.RegisterPeer(tctx(t), b.PeerInfo()))
			}
		}
	}
	return vs
}

func echo(ctx context.Context, m *Message) ([]byte, error) { return m.Payload, nil }

// TestShutdownDrains: a draining instance refuses new requests at once with ErrDraining, its
// peers learn of it (they refuse to send, and show it as draining), a handler already running
// finishes and its caller gets the answer, and Shutdown returns promptly once it has.
func TestShutdownDrains(t *testing.T) {
	vs := mesh(t, 2)
	srv, cli := vs[0], vs[1]
	release := make(chan struct{})
	entered := make(chan struct{})
	require.NoError(t, srv.RegisterHandler("slow", func(ctx context.Context, m *Message) ([]byte, error) {
		close(entered)
		<-release
		return []byte("done"), nil
	}))
	require.NoError(t, srv.RegisterHandler("echo", echo))
	var slowAnswer []byte
	var slowErr error
	slowDone := make(chan struct{})
	go func() {
		defer close(slowDone)
		slowAnswer, slowErr = cli.Request(tctx(t), srv.ID(), "slow", nil)
	}()
	<-entered

	shutdown := make(chan error, 1)
	begun := time.Now()
	go func() { shutdown <- srv.Shutdown(tctx(t)) }()
	require.Eventually(t, func() bool { return srv.Health().State == StateDraining }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool {
		for _, p := range cli.Peers() {
			if p.ID == srv.ID() && p.State == StateDraining {
				return true
			}
		}
		return false
	}, 5*time.Second, time.Millisecond, "the client never learned the server drains")

	// A new request: refused at once, by the client itself now that it knows.
	t0 := time.Now()
	_, err := cli.Request(tctx(t), srv.ID(), "echo", []byte("x"))
	require.ErrorIs(t, err, ErrDraining)
	assert.ErrorIs(t, err, ErrUnavailable, "ErrDraining is a kind of unavailable")
	assert.Less(t, time.Since(t0), time.Second)
	assert.ErrorIs(t, cli.Send(tctx(t), srv.ID(), "echo", nil), ErrDraining, "one-way messages are refused too, not dropped")

	select {
	case err := <-shutdown:
		t.Fatalf("Shutdown returned (%v) while a handler was still running", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-slowDone
	require.NoError(t, slowErr, "the answer of a handler that was running when the drain began was lost")
	assert.Equal(t, "done", string(slowAnswer))
	require.NoError(t, <-shutdown)
	assert.Less(t, time.Since(begun), 5*time.Second)
	assert.Equal(t, StateClosed, srv.Health().State)
}

// TestDrainingReceiverRefusesWithErrDraining: a sender that did not get the notice (it never
// registered the draining instance) is answered ErrDraining by the receiver itself, and its
// one-way messages are counted as refused.
func TestDrainingReceiverRefusesWithErrDraining(t *testing.T) {
	srv := newInstance(t)
	require.NoError(t, srv.RegisterHandler("echo", echo))
	stranger := newInstance(t)
	require.NoError(t, stranger.RegisterPeer(tctx(t), srv.PeerInfo()))
	srv.BeginDrain()
	_, err := stranger.Request(tctx(t), srv.ID(), "echo", nil)
	require.ErrorIs(t, err, ErrDraining)
	var re *RemoteError
	require.ErrorAs(t, err, &re, "the receiver answered, the sender did not know")
	require.NoError(t, stranger.Send(tctx(t), srv.ID(), "echo", nil))
	require.Eventually(t, func() bool {
		n, _ := metrics.Value(srv.Metrics(), metrics.HandlerRequestsTotal, map[string]string{"handler": "echo", "outcome": "refused"})
		return n == 2
	}, 5*time.Second, time.Millisecond)
	n, err := metrics.Value(srv.Metrics(), metrics.MessageErrorsTotal, map[string]string{"kind": "draining"})
	require.NoError(t, err)
	assert.Equal(t, float64(2), n)
}

// TestShutdownHonoursItsDeadline: a handler that never returns does not hold Shutdown past ctx.
func TestShutdownHonoursItsDeadline(t *testing.T) {
	vs := mesh(t, 2)
	srv, cli := vs[0], vs[1]
	entered := make(chan struct{})
	require.NoError(t, srv.RegisterHandler("stuck", func(ctx context.Context, m *Message) ([]byte, error) {
		close(entered)
		<-ctx.Done() // Close cancels handler contexts
		return nil, ctx.Err()
	}))
	go cli.Request(context.Background(), srv.ID(), "stuck", nil)
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	begun := time.Now()
	err := srv.Shutdown(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(begun), 8*time.Second, "Shutdown overran its deadline")
	assert.Equal(t, StateClosed, srv.Health().State)
}

// TestRequestsDuringShutdownAreAnswered: responses to the draining instance's own calls still
// arrive while it drains.
func TestRequestsDuringShutdownAreAnswered(t *testing.T) {
	vs := mesh(t, 2)
	drainer, other := vs[0], vs[1]
	gate := make(chan struct{})
	require.NoError(t, other.RegisterHandler("later", func(ctx context.Context, m *Message) ([]byte, error) {
		<-gate
		return []byte("answer"), nil
	}))
	got := make(chan error, 1)
	go func() {
		resp, err := drainer.Request(tctx(t), other.ID(), "later", nil)
		if err == nil && string(resp) != "answer" {
			err = fmt.Errorf("answer %q", resp)
		}
		got <- err
	}()
	require.Eventually(t, func() bool { return drainer.msgr.Pending() == 1 }, 5*time.Second, time.Millisecond)
	shutdown := make(chan error, 1)
	go func() { shutdown <- drainer.Shutdown(tctx(t)) }()
	require.Eventually(t, func() bool { return drainer.Health().State == StateDraining }, 5*time.Second, time.Millisecond)
	close(gate)
	require.NoError(t, <-got, "the draining instance lost the answer to its own call")
	require.NoError(t, <-shutdown)
}

// TestOneFullInboxDropsNoOtherPeersMessages: a peer that floods an instance whose handler is
// slow fills only its own inbox; another peer's messages all arrive.
func TestOneFullInboxDropsNoOtherPeersMessages(t *testing.T) {
	srv := newInstance(t, WithInboxLimit(64<<10))
	flood, calm := newInstance(t), newInstance(t)
	for _, c := range []*Velo{flood, calm} {
		require.NoError(t, c.RegisterPeer(tctx(t), srv.PeerInfo()))
	}
	gate := make(chan struct{})
	var fromCalm atomic.Int32
	require.NoError(t, srv.RegisterHandler("work", func(ctx context.Context, m *Message) ([]byte, error) {
		if m.From == calm.ID() {
			fromCalm.Add(1)
			return nil, nil
		}
		<-gate
		return nil, nil
	}))
	// flood's handler blocks, so its messages pile up until its inbox refuses them.
	payload := make([]byte, 8<<10)
	for range 64 {
		require.NoError(t, flood.Send(tctx(t), srv.ID(), "work", payload))
	}
	require.Eventually(t, func() bool {
		n, _ := metrics.Value(srv.Metrics(), metrics.MessageErrorsTotal, map[string]string{"kind": "inbox_full"})
		return n > 0
	}, 10*time.Second, time.Millisecond, "the flooding peer's inbox never filled")
	for i := range 50 {
		require.NoError(t, calm.Send(tctx(t), srv.ID(), "work", []byte{byte(i)}))
	}
	require.Eventually(t, func() bool { return fromCalm.Load() == 50 }, 10*time.Second, time.Millisecond,
		"the calm peer's messages were dropped: %d of 50 arrived", fromCalm.Load())
	close(gate)
}

// TestFromIsTheRealSender and a 3-node mesh: every node calls every other, and each handler sees
// the caller's own ID.
func TestFromIsTheRealSenderInAMesh(t *testing.T) {
	vs := mesh(t, 3)
	for _, v := range vs {
		require.NoError(t, v.RegisterHandler("whoami", func(ctx context.Context, m *Message) ([]byte, error) {
			return []byte(fmt.Sprintf("%016x", uint64(m.From))), nil
		}))
	}
	for _, a := range vs {
		for _, b := range vs {
			if a == b {
				continue
			}
			resp, err := a.Request(tctx(t), b.ID(), "whoami", nil)
			require.NoError(t, err)
			assert.Equal(t, fmt.Sprintf("%016x", uint64(a.ID())), string(resp))
		}
	}
}

// TestRollingRestartLosesNoAcceptedRequest: four instances under steady load from a client; each
// is shut down (drained) in turn and replaced by a new one. Every request is either answered, or
// failed with an error (ErrDraining or an unreachable peer) — none hangs, none vanishes.
func TestRollingRestartLosesNoAcceptedRequest(t *testing.T) {
	client := newInstance(t)
	servers := make([]*Velo, 4)
	start := func(i int) {
		s := newInstance(t)
		require.NoError(t, s.RegisterHandler("echo", echo))
		require.NoError(t, client.RegisterPeer(tctx(t), s.PeerInfo()))
		require.NoError(t, s.RegisterPeer(tctx(t), client.PeerInfo()))
		servers[i] = s
	}
	for i := range servers {
		start(i)
	}
	var mu sync.Mutex
	current := func(i int) *Velo { mu.Lock(); defer mu.Unlock(); return servers[i] }
	stop := make(chan struct{})
	var sent, answered, refused, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				s := current((w + i) % len(servers))
				msg := []byte(fmt.Sprintf("%d-%d", w, i))
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := client.Request(ctx, s.ID(), "echo", msg)
				cancel()
				sent.Add(1)
				switch {
				case err == nil && string(resp) == string(msg):
					answered.Add(1)
				case err == nil:
					t.Errorf("request %s answered %q", msg, resp)
				case errors.Is(err, ErrDraining):
					refused.Add(1)
				case errors.Is(err, ErrPeerUnreachable), errors.Is(err, ErrClosed), errors.Is(err, ErrUnavailable), errors.Is(err, ErrNoRoute):
					failed.Add(1)
				default:
					t.Errorf("request %s failed without a clear error: %v", msg, err)
				}
			}
		}()
	}
	for i := range servers {
		time.Sleep(100 * time.Millisecond)
		old := current(i)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		require.NoError(t, old.Shutdown(ctx))
		cancel()
		mu.Lock()
		start(i)
		mu.Unlock()
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d requests: %d answered, %d refused as draining, %d failed as unreachable", sent.Load(), answered.Load(), refused.Load(), failed.Load())
	assert.Equal(t, sent.Load(), answered.Load()+refused.Load()+failed.Load())
	assert.Positive(t, answered.Load())
}

// TestHealthAndDebugHandlers: the probes' answers follow the state, and the introspection page
// serves JSON and HTML that show the instance, its peers, its handlers, and no secret.
func TestHealthAndDebugHandlers(t *testing.T) {
	vs := mesh(t, 2)
	a, b := vs[0], vs[1]
	require.NoError(t, b.RegisterHandler("echo", echo))
	for range 3 {
		_, err := a.Request(tctx(t), b.ID(), "echo", []byte("hi"))
		require.NoError(t, err)
	}
	h, err := b.StageData(tctx(t), make([]byte, 1000))
	require.NoError(t, err)
	res := a.Probe(tctx(t), b.ID())
	require.NotEmpty(t, res)
	require.NoError(t, res[0].Err)

	hs := httptest.NewServer(b.HealthHandler())
	defer hs.Close()
	status := func(path string) int {
		r, err := http.Get(hs.URL + path)
		require.NoError(t, err)
		r.Body.Close()
		return r.StatusCode
	}
	assert.Equal(t, 200, status("/livez"))
	assert.Equal(t, 200, status("/readyz"))

	ds := httptest.NewServer(b.DebugHandler())
	defer ds.Close()
	r, err := http.Get(ds.URL + "?format=json")
	require.NoError(t, err)
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	var in Introspection
	require.NoError(t, json.Unmarshal(body, &in), "%s", body)
	assert.Equal(t, fmt.Sprintf("%016x", uint64(b.ID())), in.Instance)
	// A TCP-only instance works, but an operator of an RDMA cluster must see that it moves
	// everything over the control plane: degraded, still ready for traffic.
	assert.Equal(t, "degraded", in.State)
	require.Len(t, in.Reasons, 1)
	assert.Contains(t, in.Reasons[0], "no UCX transport")
	require.NotEmpty(t, in.Peers)
	assert.Equal(t, "up", in.Peers[0].State)
	var echoInfo *HandlerInfo
	for i := range in.Handlers {
		if in.Handlers[i].Name == "echo" {
			echoInfo = &in.Handlers[i]
		}
	}
	require.NotNil(t, echoInfo, "the page does not show the echo handler: %s", body)
	assert.Equal(t, uint64(3), echoInfo.Outcomes["ok"])
	assert.Positive(t, echoInfo.PerSecond)
	assert.Equal(t, map[string]int{"tcp": 1}, in.Peers[0].Endpoints, "the page does not count the peer's connection")
	assert.Equal(t, uint64(6), echoInfo.BytesIn)
	assert.Equal(t, 1, in.Rendezvous.Slots)
	assert.NotEmpty(t, in.Transports)
	hb, _ := h.MarshalText()
	assert.NotContains(t, string(body), string(hb), "the page shows a handle")
	assert.NotContains(t, string(body), fmt.Sprintf("%x", h.Nonce), "the page shows a handle's nonce")

	r, err = http.Get(ds.URL)
	require.NoError(t, err)
	page, _ := io.ReadAll(r.Body)
	r.Body.Close()
	assert.Contains(t, r.Header.Get("Content-Type"), "text/html")
	for _, want := range []string{`id="instance">` + in.Instance, `id="peers"`, "<td>echo</td>", `id="state" class="state-degraded"`, "no UCX transport"} {
		assert.Contains(t, string(page), want)
	}

	b.BeginDrain()
	assert.Equal(t, 200, status("/livez"), "a draining instance is alive")
	assert.Equal(t, 503, status("/readyz"), "a draining instance is not ready")
	require.NoError(t, b.Close())
	assert.Equal(t, 503, status("/livez"))
}

// TestMetricsLint: every series velo registers passes promlint.
func TestMetricsLint(t *testing.T) {
	v := newInstance(t)
	require.NoError(t, v.RegisterHandler("echo", echo))
	mfs, err := v.Metrics().Gather()
	require.NoError(t, err)
	var sb strings.Builder
	for _, mf := range mfs {
		_, err := expfmt.MetricFamilyToText(&sb, mf)
		require.NoError(t, err)
	}
	problems, err := promlint.New(strings.NewReader(sb.String())).Lint()
	require.NoError(t, err)
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// TestHealthNamesPeersWithoutUCX: instances with an RMA transport are ready; one that registered a
// peer without a UCX address is degraded and says how many peers take the chunked path.
func TestHealthNamesPeersWithoutUCX(t *testing.T) {
	f := rdmatest.NewFabric()
	a, b := rdmaNode(t, f, true), rdmaNode(t, f, true)
	link(t, a, b, false) // b knows a by TCP only
	h := a.Health()
	assert.Equal(t, StateReady, h.State, "reasons: %v", h.Reasons)
	h = b.Health()
	assert.Equal(t, StateDegraded, h.State)
	require.Len(t, h.Reasons, 1)
	assert.Contains(t, h.Reasons[0], "no UCX to 1 peers")
	assert.True(t, h.Ready())
}
