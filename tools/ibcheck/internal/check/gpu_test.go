package check

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/verbs"
)

// configSpace is a 4096-byte configuration space whose extended capabilities are caps, each an
// ID and its control register (written at +6, where ACS keeps it), chained from 0x100.
func configSpace(caps ...[2]uint16) []byte {
	b := make([]byte, 4096)
	off := 0x100
	for i, c := range caps {
		next := 0
		if i < len(caps)-1 {
			next = off + 0x40
		}
		binary.LittleEndian.PutUint32(b[off:], uint32(c[0])|1<<16|uint32(next)<<20)
		binary.LittleEndian.PutUint16(b[off+6:], c[1])
		off = next
	}
	return b
}

func TestParseACS(t *testing.T) {
	st := parseACS(configSpace([2]uint16{0x0001, 0}, [2]uint16{0x000b, 0}, [2]uint16{extCapACS, 0x001d}))
	assert.Equal(t, acsState{Readable: true, Present: true, Control: 0x001d}, st)
	assert.True(t, st.Redirects())
	assert.Equal(t, "SV RR CR UF", acsControlText(st.Control))

	st = parseACS(configSpace([2]uint16{extCapACS, 0x0001}))
	assert.True(t, st.Present)
	assert.False(t, st.Redirects(), "source validation alone keeps P2P in the switch")

	assert.Equal(t, acsState{Readable: true}, parseACS(configSpace([2]uint16{0x0001, 0})), "no ACS capability")
	assert.Equal(t, acsState{}, parseACS(make([]byte, 64)), "an unprivileged read")
	assert.Equal(t, acsState{}, parseACS(make([]byte, 256)), "conventional PCI")
	assert.Equal(t, acsState{Readable: true}, parseACS(make([]byte, 4096)), "an empty list")

	// A list that points back at itself ends instead of looping.
	loop := make([]byte, 4096)
	binary.LittleEndian.PutUint32(loop[0x100:], 0x0001|1<<16|0x100<<20)
	assert.Equal(t, acsState{Readable: true}, parseACS(loop))
	// A next pointer past the end.
	past := make([]byte, 4096)
	binary.LittleEndian.PutUint32(past[0x100:], 0x0001|1<<16|0xffc<<20)
	assert.Equal(t, acsState{Readable: true}, parseACS(past))
}

func FuzzParseACS(f *testing.F) {
	f.Add(configSpace([2]uint16{extCapACS, 0x001d}))
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 8192 {
			return
		}
		parseACS(b) // must not panic
	})
}

func TestKernelAtLeast(t *testing.T) {
	for rel, want := range map[string]bool{
		"6.8.0-45-generic": true, "5.12.0": true, "5.12": true, "5.11.22-arch1": false, "5.10.0-28-amd64": false,
		"4.18.0-513.el8.x86_64": false, "6.18.44-fc-v1272": true, "10.0": true, "5.15rc2": true,
	} {
		got, err := kernelAtLeast(rel, 5, 12)
		require.NoError(t, err, rel)
		assert.Equal(t, want, got, rel)
	}
	for _, bad := range []string{"", "six", "6", "x.y"} {
		_, err := kernelAtLeast(bad, 5, 12)
		assert.Error(t, err, bad)
	}
}

func TestGPUList(t *testing.T) {
	assert.Equal(t, "GPU0-GPU7", gpuList([]string{"GPU0", "GPU1", "GPU2", "GPU3", "GPU4", "GPU5", "GPU6", "GPU7"}))
	assert.Equal(t, "GPU0, GPU1", gpuList([]string{"GPU0", "GPU1"}))
	assert.Equal(t, "GPU0-GPU2, GPU5, mlx5_0-mlx5_2", gpuList([]string{"GPU0", "GPU1", "GPU2", "GPU5", "mlx5_0", "mlx5_1", "mlx5_2"}))
	assert.Equal(t, "", gpuList(nil))
}

func TestBridgesBetween(t *testing.T) {
	gpu := []string{"pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0"}
	nic := []string{"pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:02.0", "0000:1a:00.0"}
	assert.Equal(t, []string{"0000:17:00.0", "0000:17:02.0"}, bridgesBetween(gpu, nic))
	assert.Nil(t, bridgesBetween(nil, nic))
}

func TestMajorVersion(t *testing.T) {
	assert.Equal(t, 550, majorVersion("550.90.07"))
	assert.Equal(t, -1, majorVersion(""))
}

// TestGPUIOMMUTypeUnknown: a kernel before 5.11 has IOMMU groups without a type file; the check
// cannot tell whether they translate.
func TestGPUIOMMUTypeUnknown(t *testing.T) {
	src := filepath.Join("..", "..", "testdata", "sysfs", "dgx-h100-no-peermem")
	tree := filepath.Join(t.TempDir(), "sysfs")
	require.NoError(t, os.CopyFS(tree, os.DirFS(src)))
	groups, err := filepath.Glob(filepath.Join(tree, "kernel", "iommu_groups", "*", "type"))
	require.NoError(t, err)
	require.NotEmpty(t, groups)
	for _, g := range groups {
		require.NoError(t, os.Remove(g))
	}
	r := &run{cfg: Config{Paths: verbs.Paths{Sysfs: tree, Dev: tree}}}
	res := r.checkGPUIOMMU(context.Background())
	assert.Equal(t, Warn, res.Status, res.Finding)
	assert.Equal(t, Inconclusive, res.Probe)
	assert.Contains(t, res.Finding, "needs Linux 5.11")
}

// TestGPUDirectPeermemWithoutVersion: UCX decides by module/nvidia_peermem/version, so a module
// directory without it does not count.
func TestGPUDirectPeermemWithoutVersion(t *testing.T) {
	src := filepath.Join("..", "..", "testdata", "sysfs", "dgx-h100-gpudirect")
	tree := filepath.Join(t.TempDir(), "sysfs")
	require.NoError(t, os.CopyFS(tree, os.DirFS(src)))
	require.NoError(t, os.Remove(filepath.Join(tree, "module", "nvidia_peermem", "version")))
	r := &run{cfg: Config{Paths: verbs.Paths{Sysfs: tree, Dev: tree}}}
	res := r.checkGPUDirect(context.Background())
	assert.Equal(t, Warn, res.Status, res.Finding)
	assert.Contains(t, res.Finding, "the file UCX's ib memory domain looks for")

	// With it, the same tree passes.
	r = &run{cfg: Config{Paths: verbs.Paths{Sysfs: src, Dev: src}}}
	res = r.checkGPUDirect(context.Background())
	assert.Equal(t, Pass, res.Status, res.Finding)
}
