package topo

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/verbs"
)

// fnAt is a function with the chain path ("pci0000:16/0000:16:01.0/...") on NUMA node numa.
func fnAt(path string, numa int) PCIFunction {
	chain := strings.Split(path, "/")
	return PCIFunction{Address: chain[len(chain)-1], Chain: chain, NUMANode: numa}
}

// TestRelateRules walks the rules of the package doc, one shape of the PCI tree each.
func TestRelateRules(t *testing.T) {
	const (
		rp   = "pci0000:16/0000:16:01.0"
		usp  = rp + "/0000:17:00.0"
		rp2  = "pci0000:16/0000:16:02.0"
		usp2 = rp2 + "/0000:27:00.0"
	)
	for _, c := range []struct {
		name string
		a, b PCIFunction
		want Link
	}{
		{"two downstream ports of one switch", fnAt(usp+"/0000:18:00.0/0000:19:00.0", 0), fnAt(usp+"/0000:18:01.0/0000:1a:00.0", 0), Link{PIX, 4}},
		{"two functions of one card below a downstream port", fnAt(usp+"/0000:18:00.0/0000:19:00.0", 0), fnAt(usp+"/0000:18:00.0/0000:19:00.1", 0), Link{PIX, 2}},
		{"two functions of one card below a root port", fnAt(rp+"/0000:17:00.0", 0), fnAt(rp+"/0000:17:00.1", 0), Link{PIX, 2}},
		{"a function of the switch itself and one on its downstream port", fnAt(usp+"/0000:18:00.0/0000:19:00.0", 0), fnAt(usp+"/0000:18:04.0", 0), Link{PIX, 3}},
		{"a switch behind a switch's downstream port", fnAt(usp+"/0000:18:00.0/0000:19:00.0/0000:1a:00.0/0000:1b:00.0", 0), fnAt(usp+"/0000:18:01.0/0000:1c:00.0", 0), Link{PXB, 6}},
		{"two second-level switches", fnAt(usp+"/0000:18:00.0/0000:19:00.0/0000:1a:00.0/0000:1b:00.0", 0), fnAt(usp+"/0000:18:01.0/0000:1c:00.0/0000:1d:00.0/0000:1e:00.0", 0), Link{PXB, 8}},
		{"one second-level switch, both on it", fnAt(usp+"/0000:18:00.0/0000:19:00.0/0000:1a:00.0/0000:1b:00.0", 0), fnAt(usp+"/0000:18:00.0/0000:19:00.0/0000:1a:01.0/0000:1c:00.0", 0), Link{PIX, 4}},
		{"two root ports of one root bus", fnAt(rp+"/0000:17:00.0", 0), fnAt(rp2+"/0000:27:00.0", 0), Link{PHB, 4}},
		{"behind switches under two root ports", fnAt(usp+"/0000:18:00.0/0000:19:00.0", 0), fnAt(usp2+"/0000:28:00.0/0000:29:00.0", 0), Link{PHB, 8}},
		{"both on the root bus (a virtual machine)", fnAt("pci0000:00/0000:00:05.0", 0), fnAt("pci0000:00/0000:00:06.0", 0), Link{PHB, 2}},
		{"two root buses of one NUMA node", fnAt(rp+"/0000:17:00.0", 0), fnAt("pci0000:38/0000:38:01.0/0000:39:00.0", 0), Link{NODE, 6}},
		{"two root buses of two NUMA nodes", fnAt(rp+"/0000:17:00.0", 0), fnAt("pci0000:b8/0000:b8:01.0/0000:b9:00.0", 1), Link{SYS, 6}},
		{"two root buses, a NUMA node unknown", fnAt(rp+"/0000:17:00.0", -1), fnAt("pci0000:38/0000:38:01.0/0000:39:00.0", 0), Link{SYS, 6}},
		{"two root buses, both unknown", fnAt(rp+"/0000:17:00.0", -1), fnAt("pci0000:38/0000:38:01.0/0000:39:00.0", -1), Link{SYS, 6}},
		{"one side without a PCI function", fnAt(rp+"/0000:17:00.0", 0), PCIFunction{NUMANode: -1}, Link{SYS, farDistance}},
		{"behind Intel VMD (a nested root bus)", fnAt("pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0/10000:e1:00.0", 0), fnAt("pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:07.0/10000:e2:00.0", 0), Link{PHB, 4}},
		{"behind Intel VMD and a root port outside it", fnAt("pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0/10000:e1:00.0", 0), fnAt("pci0000:00/0000:00:01.0/0000:01:00.0", 0), Link{PHB, 6}},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, Relate(c.a, c.b))
			assert.Equal(t, c.want, Relate(c.b, c.a), "the relation is symmetric")
		})
	}
}

func TestRelationText(t *testing.T) {
	for _, r := range []Relation{PIX, PXB, PHB, NODE, SYS} {
		b, err := r.MarshalText()
		require.NoError(t, err)
		var back Relation
		require.NoError(t, back.UnmarshalText(b))
		assert.Equal(t, r, back)
		assert.NotEqual(t, "no relation", r.Describe())
	}
	var r Relation
	assert.ErrorIs(t, r.UnmarshalText([]byte("NV12")), verbs.ErrInvalid)
	assert.Equal(t, "?", Relation(0).String())
	assert.Equal(t, "Relation(9)", Relation(9).String())
	assert.True(t, PIX < PXB && PXB < PHB && PHB < NODE && NODE < SYS, "nearness order")
}

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{
		"":               nil,
		"0":              {0},
		"0-3":            {0, 1, 2, 3},
		"0-1,8,10-11":    {0, 1, 8, 10, 11},
		"4,0-1":          {0, 1, 4},
		"0-55,112-113\n": append(seq(0, 55), 112, 113),
	} {
		got, err := ParseCPUList(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"a", "1-", "-1", "3-1", "1,,2", "0x1", "01", "+1", "1-99999999", "0-65536"} {
		_, err := ParseCPUList(bad)
		assert.ErrorIs(t, err, verbs.ErrMalformed, bad)
	}
}

func seq(a, b int) []int {
	var out []int
	for i := a; i <= b; i++ {
		out = append(out, i)
	}
	return out
}

// FuzzParseCPUList: any input parses or fails with ErrMalformed; what parses is ascending,
// unique and bounded.
func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-55,112-167", "", "0", "3-1", "1,2,3", "0-65535"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := ParseCPUList(s)
		if err != nil {
			require.ErrorIs(t, err, verbs.ErrMalformed)
			return
		}
		require.LessOrEqual(t, len(cpus), maxCPU)
		for i := 1; i < len(cpus); i++ {
			require.Less(t, cpus[i-1], cpus[i])
		}
	})
}

// FuzzRelate: any two chains relate without a panic, symmetrically, to one of the five
// relations.
func FuzzRelate(f *testing.F) {
	f.Add("pci0000:16/0000:16:01.0/0000:17:00.0", "pci0000:16/0000:16:02.0/0000:27:00.0", 0, 0)
	f.Add("pci0000:16/0000:16:01.0", "pci0000:38/0000:38:01.0", 0, 1)
	f.Add("", "pci0000:16", -1, 3)
	f.Fuzz(func(t *testing.T, a, b string, na, nb int) {
		fa, fb := fnAt(a, na), fnAt(b, nb)
		l := Relate(fa, fb)
		require.Equal(t, l, Relate(fb, fa))
		require.GreaterOrEqual(t, l.Relation, PIX)
		require.LessOrEqual(t, l.Relation, SYS)
		require.GreaterOrEqual(t, l.Distance, 0)
	})
}
