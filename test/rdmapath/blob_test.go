package rdmapath_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo"
)

// TestBadUCXBlobKeepsTheOtherTransports: a UCX address that is empty, truncated, of another
// version or damaged anywhere after its version byte (the checksum catches it) is refused with an error that names the transport and a
// WARN line, and the peer stays registered over TCP: messages flow.
func TestBadUCXBlobKeepsTheOtherTransports(t *testing.T) {
	owner := startNode(t, true)
	owner.RegisterHandler("echo", func(ctx context.Context, m *velo.Message) ([]byte, error) { return m.Payload, nil })
	good := owner.PeerInfo().Addresses["ucx"]
	damaged := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	// The worker address's length follows the UCX build's guard version (byte 19 its length).
	lengthAt := 20 + int(good[19])
	for _, tc := range []struct {
		name string
		blob []byte
		want string
	}{
		{"empty", []byte{}, "empty"},
		{"truncated", good[:len(good)/2], "follow"},
		{"fixed part only", good[:12], "shorter"},
		{"other version", damaged(func(b []byte) []byte { b[0] = 7; return b }), "unsupported ucx blob version 7"},
		{"reserved bytes", damaged(func(b []byte) []byte { b[2] = 0xff; return b }), "checksum mismatch"},
		{"frame limit", damaged(func(b []byte) []byte { b[4], b[5], b[6], b[7] = 0, 0, 0, 1; return b }), "checksum mismatch"},
		{"address length", damaged(func(b []byte) []byte { b[lengthAt] = 0x7f; return b }), "worker address length"},
		{"worker address byte", damaged(func(b []byte) []byte { b[lengthAt+4] ^= 0x10; return b }), "checksum mismatch"},
		{"UCX release", damaged(func(b []byte) []byte { b[17] ^= 1; return b }), "checksum mismatch"},
		{"RMA flag cleared", damaged(func(b []byte) []byte { b[1] &^= 1; return b }), "checksum mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cons := startNode(t, true)
			info := owner.PeerInfo()
			info.Addresses["ucx"] = tc.blob
			err := cons.RegisterPeer(tctx(t), info)
			var partial *velo.PartialPeerError
			require.ErrorAs(t, err, &partial, "a bad UCX address must leave the peer on TCP")
			assert.ErrorIs(t, err, velo.ErrInvalidEndpoint)
			assert.Equal(t, []string{"tcp"}, partial.Registered)
			assert.Contains(t, err.Error(), "ucx")
			assert.Contains(t, err.Error(), tc.want)
			logs := cons.logs.String()
			assert.True(t, strings.Contains(logs, "level=WARN") && strings.Contains(logs, "transport=ucx"), "no WARN line naming the transport:\n%s", logs)
			resp, err := cons.Request(tctx(t), owner.ID(), "echo", []byte("still reachable"))
			require.NoError(t, err)
			assert.Equal(t, "still reachable", string(resp))
			assert.False(t, errors.Is(err, velo.ErrUnknownPeer))
		})
	}
}
