package ucxtransport

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/velo-go/velo/ucx"
)

// TestTCPSegSizes: the transport asks for segments that hold a 64 KiB frame, under the name the
// linked release matches, and leaves both sizes to an operator who sets either.
func TestTCPSegSizes(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	for _, c := range []struct {
		name    string
		version ucx.VersionInfo
		env     map[string]string
		want    map[string]string
	}{
		{"1.22", ucx.VersionInfo{Major: 1, Minor: 22}, nil, map[string]string{"TCP_TX_SEG_SIZE": tcpSegSize, "TCP_RX_SEG_SIZE": tcpSegSize}},
		{"1.13", ucx.VersionInfo{Major: 1, Minor: 13, Release: 1}, nil, map[string]string{"TX_SEG_SIZE": tcpSegSize, "RX_SEG_SIZE": tcpSegSize}},
		{"operator sets the send size", ucx.VersionInfo{Major: 1, Minor: 22}, map[string]string{"UCX_TCP_TX_SEG_SIZE": "16kb"}, map[string]string{}},
		{"operator sets the receive size", ucx.VersionInfo{Major: 1, Minor: 13}, map[string]string{"UCX_TCP_RX_SEG_SIZE": "128kb"}, map[string]string{}},
	} {
		got := map[string]string{}
		addTCPSegSizes(got, env(c.env), c.version)
		assert.Equal(t, c.want, got, c.name)
	}
}
