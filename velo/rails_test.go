package velo

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/rails"
	"github.com/velo-go/velo/verbs"
)

// The rail choice over the fixture trees of verbs/topo (testdata/README.md there says what each
// tree is): which ports a process on GPU k or NUMA node n gets.

func fixture(name string) verbs.Paths {
	return verbs.Paths{Sysfs: filepath.Join("..", "verbs", "topo", "testdata", "sysfs", name)}
}

// fakeEnv is a process with the given variables, running on cpus.
func fakeEnv(vars map[string]string, cpus ...int) railEnv {
	return railEnv{
		getenv:   func(k string) string { return vars[k] },
		affinity: func() ([]int, error) { return cpus, nil },
	}
}

func choose(t *testing.T, p RailPolicy, env railEnv) RailChoice {
	t.Helper()
	c, err := chooseRails(p, env)
	require.NoError(t, err)
	return c
}

func TestRailsEachGPUOfTheDGXGetsTheTwoNICsOfItsSwitch(t *testing.T) {
	want := [][]string{
		{"mlx5_0:1", "mlx5_1:1"}, {"mlx5_0:1", "mlx5_1:1"}, {"mlx5_2:1", "mlx5_3:1"}, {"mlx5_2:1", "mlx5_3:1"},
		{"mlx5_4:1", "mlx5_5:1"}, {"mlx5_4:1", "mlx5_5:1"}, {"mlx5_6:1", "mlx5_7:1"}, {"mlx5_6:1", "mlx5_7:1"},
	}
	for gpu, devs := range want {
		c := choose(t, RailPolicy{Auto: true, GPU: string(rune('0' + gpu)), Sysfs: fixture("dgx-h100-like")}, fakeEnv(nil))
		assert.Equal(t, RailsGPU, c.Source)
		assert.Equal(t, devs, c.Devices(), "GPU%d", gpu)
		for _, r := range c.Rails {
			assert.Equal(t, "PIX", r.Relation, "GPU%d %s", gpu, r.Device)
			assert.Equal(t, gpu/4, r.NUMANode, "GPU%d %s", gpu, r.Device)
		}
		assert.Empty(t, c.Notes)
	}
}

func TestRailsGPUByPCIAddressAndByCUDAVisibleDevices(t *testing.T) {
	dgx := fixture("dgx-h100-like")
	for _, addr := range []string{"0000:3b:00.0", "00000000:3B:00.0", "3b:00.0"} {
		c := choose(t, RailPolicy{Auto: true, GPU: addr, Sysfs: dgx}, fakeEnv(nil))
		assert.Equal(t, "GPU3 0000:3b:00.0", c.GPU, addr)
		assert.Equal(t, "mlx5_2:1,mlx5_3:1", c.NetDevices(), addr)
	}
	// The first entry of CUDA_VISIBLE_DEVICES is the process's GPU.
	c := choose(t, RailPolicy{Auto: true, Sysfs: dgx}, fakeEnv(map[string]string{CUDAVisibleDevicesEnv: "5,6"}))
	assert.Equal(t, "GPU5 0000:9e:00.0", c.GPU)
	assert.Equal(t, []string{"mlx5_4:1", "mlx5_5:1"}, c.Devices())
	assert.Equal(t, "auto-gpu GPU5 0000:9e:00.0: mlx5_4:1 (PIX), mlx5_5:1 (PIX)", c.String())

	// A UUID cannot be mapped without NVML: the NUMA node decides, and a note says why.
	c = choose(t, RailPolicy{Auto: true, Sysfs: dgx}, fakeEnv(map[string]string{CUDAVisibleDevicesEnv: "GPU-8e0c6d2a-0000"}, 60, 61))
	assert.Equal(t, RailsNUMA, c.Source)
	assert.Equal(t, 1, c.NUMANode)
	assert.Equal(t, []string{"mlx5_4:1", "mlx5_5:1", "mlx5_6:1", "mlx5_7:1"}, c.Devices())
	require.Len(t, c.Notes, 1)
	assert.Contains(t, c.Notes[0], "not an index")

	// GPU "none" ignores CUDA_VISIBLE_DEVICES.
	c = choose(t, RailPolicy{Auto: true, GPU: "none", Sysfs: dgx}, fakeEnv(map[string]string{CUDAVisibleDevicesEnv: "0"}, 0))
	assert.Equal(t, RailsNUMA, c.Source)
	assert.Equal(t, 0, c.NUMANode)
}

func TestRailsMaxRailsStaysOnTheGPUsSocket(t *testing.T) {
	dgx := fixture("dgx-h100-like")
	c := choose(t, RailPolicy{Auto: true, GPU: "0", MaxRails: 1, Sysfs: dgx}, fakeEnv(nil))
	assert.Equal(t, []string{"mlx5_0:1"}, c.Devices())

	// Four rails: the switch's two, then the other switch of the same socket (NODE).
	c = choose(t, RailPolicy{Auto: true, GPU: "0", MaxRails: 4, Sysfs: dgx}, fakeEnv(nil))
	assert.Equal(t, []string{"mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"}, c.Devices())
	assert.Equal(t, []string{"PIX", "PIX", "NODE", "NODE"}, []string{c.Rails[0].Relation, c.Rails[1].Relation, c.Rails[2].Relation, c.Rails[3].Relation})
	assert.Empty(t, c.Notes)

	// More than the socket has: never across it while a nearer port is up; a note says so.
	c = choose(t, RailPolicy{Auto: true, GPU: "6", MaxRails: 8, Sysfs: dgx}, fakeEnv(nil))
	assert.Equal(t, []string{"mlx5_6:1", "mlx5_7:1", "mlx5_4:1", "mlx5_5:1"}, c.Devices())
	require.Len(t, c.Notes, 1)
	assert.Contains(t, c.Notes[0], "across it")
}

func TestRailsByNUMANode(t *testing.T) {
	dgx := fixture("dgx-h100-like")
	c := choose(t, RailPolicy{Auto: true, NUMANode: NUMA(1), Sysfs: dgx}, fakeEnv(nil))
	assert.Equal(t, RailsNUMA, c.Source)
	assert.Equal(t, []string{"mlx5_4:1", "mlx5_5:1", "mlx5_6:1", "mlx5_7:1"}, c.Devices())
	for _, r := range c.Rails {
		assert.Equal(t, "NODE", r.Relation)
	}
	c = choose(t, RailPolicy{Auto: true, MaxRails: 2, Sysfs: dgx}, fakeEnv(nil, 3, 4, 5))
	assert.Equal(t, 0, c.NUMANode)
	assert.Equal(t, []string{"mlx5_0:1", "mlx5_1:1"}, c.Devices())

	// CPUs on both sockets: the node with most of them, and a note to pin the process.
	c = choose(t, RailPolicy{Auto: true, MaxRails: 1, Sysfs: dgx}, fakeEnv(nil, 0, 60, 61, 170))
	assert.Equal(t, 1, c.NUMANode)
	assert.Equal(t, []string{"mlx5_4:1"}, c.Devices())
	require.Len(t, c.Notes, 1)
	assert.Contains(t, c.Notes[0], "several NUMA nodes")

	_, err := chooseRails(RailPolicy{Auto: true, NUMANode: NUMA(3), Sysfs: dgx}, fakeEnv(nil))
	require.ErrorIs(t, err, ErrRails)
	assert.Contains(t, err.Error(), "no NUMA node 3")
}

func TestRailsAcrossTheSocketAndPortDown(t *testing.T) {
	c := choose(t, RailPolicy{Auto: true, GPU: "1", Sysfs: fixture("nic-across-socket")}, fakeEnv(nil))
	assert.Equal(t, []string{"mlx5_0:1"}, c.Devices())
	assert.Equal(t, "SYS", c.Rails[0].Relation)
	require.Len(t, c.Notes, 1)
	assert.Contains(t, c.Notes[0], "across the socket")

	// GPU0's own NIC is down: the farther active port, and a note naming the one that is down.
	c = choose(t, RailPolicy{Auto: true, GPU: "0", Sysfs: fixture("port-down")}, fakeEnv(nil))
	assert.Equal(t, []string{"mlx5_1:1"}, c.Devices())
	assert.Equal(t, "NODE", c.Rails[0].Relation)
	require.Len(t, c.Notes, 1)
	assert.Contains(t, c.Notes[0], "mlx5_0:1 (PIX), is PORT_DOWN")

	// A workstation without NUMA tables: its one NIC, PHB to the GPU.
	c = choose(t, RailPolicy{Auto: true, GPU: "0", Sysfs: fixture("workstation-single-nic")}, fakeEnv(nil))
	assert.Equal(t, []string{"mlx5_0:1"}, c.Devices())
	assert.Equal(t, "PHB", c.Rails[0].Relation)
}

func TestRailsEnvironmentWins(t *testing.T) {
	c := choose(t, RailPolicy{Auto: true, GPU: "0", Sysfs: fixture("dgx-h100-like")}, fakeEnv(map[string]string{NetDevicesEnv: "mlx5_7:1"}))
	assert.Equal(t, RailsEnvironment, c.Source)
	assert.Equal(t, "mlx5_7:1", c.NetDevices())
	require.Len(t, c.Notes, 1)
	assert.Contains(t, c.Notes[0], "wins over the rail policy")

	// The variable wins even over a policy that could not be met.
	c = choose(t, RailPolicy{Devices: []string{"nosuch0"}}, fakeEnv(map[string]string{NetDevicesEnv: "eth0"}))
	assert.Equal(t, RailsEnvironment, c.Source)

	// No policy, no variable: UCX's own choice.
	c = choose(t, RailPolicy{}, fakeEnv(nil))
	assert.Equal(t, RailsNone, c.Source)
	assert.Empty(t, c.NetDevices())
}

func TestRailsExplicitDevices(t *testing.T) {
	dgx := fixture("dgx-h100-like")
	c := choose(t, RailPolicy{Devices: []string{"mlx5_3:1", "mlx5_0", "ibp60s0"}, Sysfs: dgx}, fakeEnv(nil))
	assert.Equal(t, RailsExplicit, c.Source)
	assert.Equal(t, "mlx5_3:1,mlx5_0,ibp60s0", c.NetDevices())
	assert.Equal(t, 0, c.Rails[0].NUMANode)
	assert.Equal(t, -1, c.Rails[2].NUMANode)

	c = choose(t, RailPolicy{Devices: []string{"mlx5_3:1", "mlx5_0"}, MaxRails: 1, Sysfs: dgx}, fakeEnv(nil))
	assert.Equal(t, []string{"mlx5_3:1"}, c.Devices())
	assert.Len(t, c.Notes, 1)

	for _, tc := range []struct {
		devs []string
		want string
	}{
		{[]string{"mlx5_9:1"}, "no RDMA device"},
		{[]string{"mlx5_0:2"}, "has no such port"},
		{[]string{"nosuch0"}, "neither an RDMA device nor a network interface"},
		{[]string{"mlx5_0:1", "mlx5_0:1"}, "named twice"},
		{[]string{"mlx5_0:1,mlx5_1:1"}, "one device per entry"},
		{[]string{""}, "one device per entry"},
	} {
		_, err := chooseRails(RailPolicy{Devices: tc.devs, Sysfs: dgx}, fakeEnv(nil))
		require.ErrorIs(t, err, ErrRails, "%v", tc.devs)
		assert.Contains(t, err.Error(), tc.want, "%v", tc.devs)
	}
	_, err := chooseRails(RailPolicy{Devices: []string{"mlx5_0:1"}, Sysfs: fixture("port-down")}, fakeEnv(nil))
	require.ErrorIs(t, err, ErrRails)
	assert.Contains(t, err.Error(), "is down")
}

func TestRailsBadPolicies(t *testing.T) {
	dgx := fixture("dgx-h100-like")
	for _, tc := range []struct {
		p    RailPolicy
		want string
	}{
		{RailPolicy{Auto: true, MaxRails: -1, Sysfs: dgx}, "negative"},
		{RailPolicy{Auto: true, GPU: "8", Sysfs: dgx}, "GPU0 to GPU7"},
		{RailPolicy{Auto: true, GPU: "-1", Sysfs: dgx}, "GPU0 to GPU7"},
		{RailPolicy{Auto: true, GPU: "0000:ff:00.0", Sysfs: dgx}, "no GPU at PCI address"},
		{RailPolicy{Auto: true, Sysfs: verbs.Paths{Sysfs: t.TempDir()}}, "topology"},
		{RailPolicy{Auto: true, Sysfs: verbs.Paths{Sysfs: filepath.Join(t.TempDir(), "missing")}}, "topology"},
	} {
		_, err := chooseRails(tc.p, fakeEnv(nil))
		require.ErrorIs(t, err, ErrRails, "%+v", tc.p)
		assert.Contains(t, err.Error(), tc.want, "%+v", tc.p)
	}
	// A node with RDMA ports but no GPU (the DGX tree without its GPUs' links): asking for a GPU
	// is an error; CUDA_VISIBLE_DEVICES naming one falls back to the NUMA node with a note.
	tree := t.TempDir()
	require.NoError(t, os.CopyFS(tree, os.DirFS(dgx.Sysfs)))
	for _, bdf := range []string{"18", "19", "3a", "3b", "9d", "9e", "bf", "c0"} {
		require.NoError(t, os.Remove(filepath.Join(tree, "bus", "pci", "devices", "0000:"+bdf+":00.0")))
	}
	noGPU := verbs.Paths{Sysfs: tree}
	_, err := chooseRails(RailPolicy{Auto: true, GPU: "0", Sysfs: noGPU}, fakeEnv(nil))
	require.ErrorIs(t, err, ErrRails)
	assert.Contains(t, err.Error(), "shows no GPU")
	c := choose(t, RailPolicy{Auto: true, MaxRails: 2, Sysfs: noGPU}, fakeEnv(map[string]string{CUDAVisibleDevicesEnv: "0"}, 100))
	assert.Equal(t, RailsNUMA, c.Source)
	assert.Equal(t, []string{"mlx5_4:1", "mlx5_5:1"}, c.Devices())
	require.NotEmpty(t, c.Notes)
	assert.Contains(t, c.Notes[0], "shows no GPU")
}

// TestWithRailsShowsTheChoice: New with WithRails hands the chosen UCX_NET_DEVICES to the
// transport it makes, logs the choice once, and shows it through Rails and the introspection
// page; with UCX_NET_DEVICES set, the log says the operator's value wins.
func TestWithRailsShowsTheChoice(t *testing.T) {
	t.Setenv(NetDevicesEnv, "")
	os.Unsetenv(NetDevicesEnv)
	f := rdmatest.NewFabric()
	var got []string
	newT := func(dev string) (transport.Transport, error) {
		got = append(got, dev)
		return f.New("ucx")
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	v, err := New(context.Background(), WithLogger(log), WithRails(RailPolicy{Auto: true, GPU: "0000:9d:00.0", Sysfs: fixture("dgx-h100-like")}, newT))
	require.NoError(t, err)
	defer v.Close()
	assert.Equal(t, []string{"mlx5_4:1,mlx5_5:1"}, got)
	assert.Equal(t, RailsGPU, v.Rails().Source)
	assert.Contains(t, logs.String(), "rails chosen: auto-gpu GPU4 0000:9d:00.0: mlx5_4:1 (PIX), mlx5_5:1 (PIX)")
	in := v.Introspect()
	require.NotNil(t, in.Rails)
	assert.Equal(t, []string{"mlx5_4:1", "mlx5_5:1"}, in.Rails.Devices())
	require.NotNil(t, in.RDMA, "WithRails creates the RDMA registry, as WithUCXTransport does")

	t.Setenv(NetDevicesEnv, "mlx5_0:1")
	logs.Reset()
	got = nil
	v2, err := New(context.Background(), WithLogger(log), WithRails(RailPolicy{Auto: true, GPU: "4", Sysfs: fixture("dgx-h100-like")}, newT))
	require.NoError(t, err)
	defer v2.Close()
	assert.Equal(t, []string{"mlx5_0:1"}, got)
	assert.Equal(t, RailsEnvironment, v2.Rails().Source)
	assert.Contains(t, logs.String(), "UCX_NET_DEVICES is set by the operator and wins")

	// A policy that cannot be met fails New, naming the fix; a failing factory likewise.
	os.Unsetenv(NetDevicesEnv)
	_, err = New(context.Background(), WithLogger(quietLogger()), WithRails(RailPolicy{Devices: []string{"mlx5_9:1"}, Sysfs: fixture("dgx-h100-like")}, newT))
	require.ErrorIs(t, err, ErrRails)
	_, err = New(context.Background(), WithLogger(quietLogger()), WithRails(RailPolicy{}, func(string) (transport.Transport, error) { return nil, errors.New("no UCX here") }))
	require.ErrorContains(t, err, "no UCX here")
	_, err = New(context.Background(), WithRails(RailPolicy{}, nil))
	require.ErrorContains(t, err, "no NewRailTransport")
}

// TestWithRailsSliceMakesOneTransportPerRail: with Slice, WithRails makes one transport per
// chosen rail, each for its one device, joined into the instance's UCX transport; its settings
// go in (a refused one fails New), and a choice of one rail, or the operator's UCX_NET_DEVICES,
// makes one plain transport.
func TestWithRailsSliceMakesOneTransportPerRail(t *testing.T) {
	t.Setenv(NetDevicesEnv, "")
	os.Unsetenv(NetDevicesEnv)
	f := rdmatest.NewFabric()
	var got []string
	newT := func(dev string) (transport.Transport, error) {
		got = append(got, dev)
		return f.New("ucx")
	}
	dgx := fixture("dgx-h100-like")
	v, err := New(context.Background(), WithLogger(quietLogger()), WithRails(RailPolicy{Auto: true, GPU: "0", Sysfs: dgx, Slice: true}, newT))
	require.NoError(t, err)
	defer v.Close()
	assert.Equal(t, []string{"mlx5_0:1", "mlx5_1:1"}, got)
	in := v.Introspect()
	var settings map[string]string
	for _, tr := range in.Transports {
		if tr.Settings["rails"] != "" {
			settings = tr.Settings
		}
	}
	require.NotNil(t, settings, "no transport on the introspection page reports rails")
	assert.Equal(t, "2", settings["rails"])
	assert.Contains(t, settings["rail1"], "mlx5_1:1 up")
	assert.Contains(t, v.PeerInfo().Addresses, "ucx.rail1")

	// A slicing setting the rails package refuses fails New.
	got = nil
	_, err = New(context.Background(), WithLogger(quietLogger()), WithRails(RailPolicy{Auto: true, GPU: "0", Sysfs: dgx, Slice: true, Slicing: rails.Config{SliceSize: 1000}}, newT))
	require.ErrorContains(t, err, "SliceSize")

	// One rail: nothing to slice, one plain transport.
	got = nil
	v1, err := New(context.Background(), WithLogger(quietLogger()), WithRails(RailPolicy{Auto: true, GPU: "0", Sysfs: dgx, Slice: true, MaxRails: 1}, newT))
	require.NoError(t, err)
	defer v1.Close()
	assert.Equal(t, []string{"mlx5_0:1"}, got)
	assert.NotContains(t, v1.PeerInfo().Addresses, "ucx.rail1")

	// The operator's UCX_NET_DEVICES wins: one transport with that value.
	t.Setenv(NetDevicesEnv, "mlx5_0:1,mlx5_1:1")
	got = nil
	v2, err := New(context.Background(), WithLogger(quietLogger()), WithRails(RailPolicy{Auto: true, GPU: "0", Sysfs: dgx, Slice: true}, newT))
	require.NoError(t, err)
	defer v2.Close()
	assert.Equal(t, []string{"mlx5_0:1,mlx5_1:1"}, got)
}
