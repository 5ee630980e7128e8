//go:build cgo && linux

package velo

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/metrics"
)

// TestRDMASameHostPayloadFileOverUCX: a payload staged in a file of its own (the owner has the
// same-host path on) is registered and served by the real UCX transport exactly as an arena's
// slot: a consumer without the path reads it with one GET (rdma/ok), and one with the path reads
// the same payload with one copy out of the file (shm/ok).
func TestRDMASameHostPayloadFileOverUCX(t *testing.T) {
	cfg := sameHostDir(t)
	viaUCX, viaFile := ucxMemNode(t), ucxMemNode(t, WithSameHost(cfg))
	singleCopy(&cfg)
	owner := ucxMemNode(t, WithSameHost(cfg))
	ctx := tctx(t)
	for _, c := range []*Velo{viaUCX, viaFile} {
		require.NoError(t, c.RegisterPeer(ctx, owner.PeerInfo()))
		require.NoError(t, owner.RegisterPeer(ctx, c.PeerInfo()))
	}
	eventually(t, "the same-host channel", func() bool { ok, _ := viaFile.SameHost(owner.ID()); return ok })
	data := payload(6<<20+3, 5)
	h, err := owner.StageDataPinned(ctx, data)
	require.NoError(t, err)
	assert.Equal(t, "1", shmSetting(t, rnode{Velo: owner}, "payload_files"))
	for _, c := range []struct {
		v    *Velo
		path metrics.Path
	}{{viaUCX, metrics.PathRDMA}, {viaFile, metrics.PathSameHost}} {
		dst := make([]byte, len(data))
		l, err := c.v.GetInto(ctx, h, dst)
		require.NoError(t, err)
		assert.Equal(t, c.path, l.Path)
		assert.True(t, bytes.Equal(data, dst), "%s read other bytes", c.path)
		require.NoError(t, l.Detach(ctx))
	}
	assert.Equal(t, "1", shmSetting(t, rnode{Velo: viaFile}, "single_copy_reads"))
	require.NoError(t, owner.Unref(ctx, h))
	eventually(t, "the payload's file closed", func() bool { return shmSetting(t, rnode{Velo: owner}, "payload_files") == "0" })
}
