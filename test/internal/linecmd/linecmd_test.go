package linecmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServe: each line reaches run as its command and the rest of the line, in order, blank
// lines as an empty command; "quit" stops the loop before anything after it, and the end of the
// input is told apart from it.
func TestServe(t *testing.T) {
	var got []string
	quit := Serve(strings.NewReader("info\n  peer {\"a\": 1}  \nstage 10 7\nquit\nnever\n"), time.Minute, func(ctx context.Context, cmd, arg string) {
		_, ok := ctx.Deadline()
		require.True(t, ok, "a command runs under a deadline")
		got = append(got, cmd+"|"+arg)
	})
	assert.True(t, quit)
	assert.Equal(t, []string{"info|", "peer|{\"a\": 1}", "stage|10 7"}, got)

	got = nil
	quit = Serve(strings.NewReader("peers"), time.Minute, func(_ context.Context, cmd, arg string) { got = append(got, cmd) })
	assert.False(t, quit, "the end of the input is not a quit")
	assert.Equal(t, []string{"peers"}, got)

	long := "peer " + strings.Repeat("x", 512<<10) + "\nquit\n"
	quit = Serve(strings.NewReader(long), time.Minute, func(_ context.Context, cmd, arg string) { got = append(got, cmd+"/"+arg[:1]) })
	assert.True(t, quit, "a line of half a MiB (a PeerInfo) is one command")
}

// TestReplier: one JSON object a line; Fail answers {"error": ...}.
func TestReplier(t *testing.T) {
	var b bytes.Buffer
	r := NewReplier(&b)
	r.Reply(map[string]any{"ok": true})
	r.Fail(errors.New("no such lease"))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 2)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &m))
	assert.Equal(t, map[string]any{"error": "no such lease"}, m)
}

func TestSizeSeed(t *testing.T) {
	size, seed, err := SizeSeed("4096 99")
	require.NoError(t, err)
	assert.Equal(t, 4096, size)
	assert.Equal(t, uint64(99), seed)
	for _, bad := range []string{"", "0 1", "-5 1", "10", "10 x", "x 1"} {
		_, _, err := SizeSeed(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func TestGrew(t *testing.T) {
	before := map[string]float64{"rdma/ok": 2, "chunked/not_pinned": 1}
	after := map[string]float64{"rdma/ok": 3, "chunked/not_pinned": 1, "inline/small": 1}
	assert.Equal(t, "inline/small,rdma/ok", Grew(before, after))
	assert.Empty(t, Grew(after, after))
}

func TestErrString(t *testing.T) {
	assert.Empty(t, ErrString(nil))
	assert.Equal(t, "boom", ErrString(errors.New("boom")))
}

// TestSameHostSwitch: VELO_TEST_SAME_HOST unset or false keeps the RDMA path's label, true gives
// the same-host path's, and a value that is not a boolean is an error naming the variable (and
// reads as off where the error is not asked for).
func TestSameHostSwitch(t *testing.T) {
	for _, c := range []struct {
		value string
		on    bool
		path  string
	}{{"", false, "rdma/ok"}, {"0", false, "rdma/ok"}, {"false", false, "rdma/ok"}, {"1", true, "shm/ok"}, {"true", true, "shm/ok"}} {
		t.Setenv(SameHostEnv, c.value)
		on, err := SameHost()
		require.NoError(t, err, "%q", c.value)
		assert.Equal(t, c.on, on, "%q", c.value)
		assert.Equal(t, c.on, SameHostOn(), "%q", c.value)
		assert.Equal(t, c.path, OKPath(), "%q", c.value)
	}
	t.Setenv(SameHostEnv, "yes")
	_, err := SameHost()
	require.EqualError(t, err, `VELO_TEST_SAME_HOST="yes": want 1 (the same-host path on) or 0 (off)`)
	assert.False(t, SameHostOn())
	assert.Equal(t, "rdma/ok", OKPath())
}
