package metrics

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEverySeriesExistsAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg); err != nil {
		t.Fatal(err)
	}
	lines, err := Lines(reg, RDMAPathTotal)
	if err != nil {
		t.Fatal(err)
	}
	// rdma/ok, inline/ok, shm/ok and chunked with each of its reasons.
	if len(lines) != 3+len(ChunkedReasons) {
		t.Fatalf("%d path series, want %d: %v", len(lines), 3+len(ChunkedReasons), lines)
	}
	want := `velo_rendezvous_rdma_path_total{path="chunked",reason="not_configured"} 0`
	if !contains(lines, want) {
		t.Fatalf("missing %s in %v", want, lines)
	}
	for _, name := range []string{RendezvousBytesTotal, ActiveSlots, ActiveLeases, LeasesReapedTotal,
		MessagesSentTotal, MessagesRecvTotal, MessageErrorsTotal, StagedMessagesTotal, StagedBytes} {
		if l, _ := Lines(reg, name); len(l) == 0 {
			t.Errorf("series %s not declared", name)
		}
	}
}

func TestCountPathKeepsTheEnumClosed(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, _ := New(reg)
	m.CountPath(PathChunked, ReasonNotConfigured)
	m.CountPath(PathRDMA, ReasonNotPinned) // not a valid pair
	m.CountPath("tcp", "whatever")
	v, _ := Value(reg, RDMAPathTotal, map[string]string{"path": "chunked", "reason": "not_configured"})
	d, _ := Value(reg, RDMAPathTotal, map[string]string{"path": "chunked", "reason": "decode_error"})
	if v != 1 || d != 2 {
		t.Fatalf("not_configured=%v decode_error=%v", v, d)
	}
	m.CountPath(PathInline, ReasonOK)
	m.CountPath(PathInline, ReasonNoOffer) // inline goes with ok alone
	if i, _ := Value(reg, RDMAPathTotal, map[string]string{"path": "inline", "reason": "ok"}); i != 1 {
		t.Fatalf("inline/ok=%v", i)
	}
	if d, _ := Value(reg, RDMAPathTotal, map[string]string{"path": "chunked", "reason": "decode_error"}); d != 3 {
		t.Fatalf("decode_error=%v after an invalid inline pair", d)
	}
	m.CountPath(PathSameHost, ReasonOK)
	m.CountPath(PathSameHost, ReasonBudget) // shm goes with ok alone
	if i, _ := Value(reg, RDMAPathTotal, map[string]string{"path": "shm", "reason": "ok"}); i != 1 {
		t.Fatalf("shm/ok=%v", i)
	}
	if l, _ := Lines(reg, RDMAPathTotal); len(l) != 3+len(ChunkedReasons) {
		t.Fatalf("a new series appeared: %v", l)
	}
}

func TestSharedRegistererNeedsALabel(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg); err != nil {
		t.Fatal(err)
	}
	_, err := New(reg)
	if !errors.Is(err, ErrRegister) || !strings.Contains(err.Error(), "WrapRegistererWith") {
		t.Fatalf("second registration: %v", err)
	}
	// Each instance wrapped with its own label value shares one registry fine.
	shared := prometheus.NewRegistry()
	for _, id := range []string{"a", "b"} {
		if _, err := New(prometheus.WrapRegistererWith(prometheus.Labels{"instance": id}, shared)); err != nil {
			t.Fatal(err)
		}
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// TestValueRefusesAMissingSeries: a typo in a family name, a label name or a label value is an
// error that says what exists, never a zero.
func TestValueRefusesAMissingSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := New(reg)
	require.NoError(t, err)
	v, err := Value(reg, RDMAPathTotal, map[string]string{"path": "rdma", "reason": "ok"})
	require.NoError(t, err)
	assert.Zero(t, v)
	for _, c := range []struct {
		name string
		want map[string]string
	}{
		{"velo_rendezvous_rdma_paths_total", map[string]string{"path": "rdma"}}, // family typo
		{RDMAPathTotal, map[string]string{"path": "rmda"}},                      // value typo
		{RDMAPathTotal, map[string]string{"lane": "rdma"}},                      // label typo
		{MessagesSentTotal, map[string]string{"kind": "requests"}},              // value typo
	} {
		name, want := c.name, c.want
		_, err := Value(reg, name, want)
		require.ErrorIs(t, err, ErrNoSeries, "%s %v", name, want)
		assert.Contains(t, err.Error(), name)
	}
	_, err = Value(reg, RDMAPathTotal, map[string]string{"path": "rmda"})
	assert.Contains(t, err.Error(), "path in [chunked inline rdma shm]", "the error lists the label values that exist")
}

// Register registers all or nothing: a clash on the third collector leaves the first two
// unregistered, so the caller can retry elsewhere, and the error names ErrRegister.
func TestRegisterRollsBackAPartialRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	clash := prometheus.NewCounter(prometheus.CounterOpts{Name: "clash_total", Help: "x"})
	require.NoError(t, reg.Register(clash))
	a := prometheus.NewCounter(prometheus.CounterOpts{Name: "a_total", Help: "x"})
	b := prometheus.NewCounter(prometheus.CounterOpts{Name: "b_total", Help: "x"})
	again := prometheus.NewCounter(prometheus.CounterOpts{Name: "clash_total", Help: "x"})
	err := Register(reg, a, b, again)
	require.ErrorIs(t, err, ErrRegister)
	require.Contains(t, err.Error(), "WrapRegistererWith")
	require.NoError(t, reg.Register(a), "a was rolled back")
	require.NoError(t, reg.Register(b), "b was rolled back")
}
