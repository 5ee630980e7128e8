package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// This file writes the GPU node trees of testdata/sysfs and testdata/dev (testdata/README.md
// describes them). Each starts from a topology tree of verbs/topo (GPUs and NICs behind PCIe
// switches, as on a real node) and adds what the GPU checks read: the NVIDIA modules, the IOMMU,
// the bridges' configuration space, and the uverbs devices the node checks open.
// TestGPUFixtureTrees checks that the committed trees are what this writes; go test -run
// TestGPUFixtureTrees -update rewrites them.

// gpuFixture is one tree.
type gpuFixture struct {
	name, base string
	// nvidia is the nvidia module's version and taint ("POE": the proprietary module; "OE" the
	// open one); peermem the nvidia_peermem version, "" when it is not loaded.
	nvidiaVersion, nvidiaTaint, peermem string
	// iommu is the IOMMU group type of every function ("identity", "DMA-FQ"); "" for no IOMMU.
	iommu string
	// acs is the ACS control register of the switch downstream and root ports; userView writes
	// only the 64 bytes of configuration space an unprivileged reader sees.
	acs      uint16
	userView bool
}

var gpuFixtures = []gpuFixture{
	// Ready for GPUDirect RDMA: nvidia_peermem loaded, IOMMU in passthrough, ACS redirect off.
	{name: "dgx-h100-gpudirect", base: "dgx-h100-like", nvidiaVersion: "550.90.07", nvidiaTaint: "POE",
		peermem: "550.90.07", iommu: "identity", acs: acsSV},
	// The same box as installed: no nvidia_peermem, the IOMMU translating (DMA-FQ, the default
	// of intel_iommu=on) and the kernel's ACS on every port.
	{name: "dgx-h100-no-peermem", base: "dgx-h100-like", nvidiaVersion: "550.90.07", nvidiaTaint: "POE",
		iommu: "DMA-FQ", acs: acsSV | acsRR | acsCR | acsUF},
	// L40S with RoCE LAG on the open kernel module (dma-buf), no IOMMU, copied by a user without
	// root (64 bytes of configuration space).
	{name: "l40s-dmabuf-user-copy", base: "roce-bond", nvidiaVersion: "560.35.03", nvidiaTaint: "OE", userView: true},
}

// ACS control bits (PCI Express Base Specification 7.7.8.3).
const (
	acsSV = 1 << 0 // source validation
	acsRR = 1 << 2 // P2P request redirect
	acsCR = 1 << 3 // P2P completion redirect
	acsUF = 1 << 4 // upstream forwarding
)

var gpuFixturesDir = filepath.Join("testdata")

func TestGPUFixtureTrees(t *testing.T) {
	for _, f := range gpuFixtures {
		t.Run(f.name, func(t *testing.T) {
			tmp := t.TempDir()
			writeGPUFixture(t, f, filepath.Join(tmp, "sysfs", f.name), filepath.Join(tmp, "dev", f.name))
			for _, kind := range []string{"sysfs", "dev"} {
				got, want := filepath.Join(tmp, kind, f.name), filepath.Join(gpuFixturesDir, kind, f.name)
				if *update {
					require.NoError(t, os.RemoveAll(want))
					require.NoError(t, os.MkdirAll(filepath.Dir(want), 0o755))
					require.NoError(t, os.Rename(got, want))
					continue
				}
				require.Equal(t, treeListing(t, got), treeListing(t, want),
					"%s differs from what gpufixtures_test.go writes (go test -run TestGPUFixtureTrees -update rewrites it)", want)
			}
		})
	}
}

// treeListing is every path of a tree with its content or link target.
func treeListing(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			to, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out = append(out, rel+" -> "+to)
		case d.IsDir():
			out = append(out, rel+"/")
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out = append(out, fmt.Sprintf("%s = %q", rel, b))
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// writeGPUFixture writes f's sysfs tree at sysfs and its device root at dev.
func writeGPUFixture(t *testing.T, f gpuFixture, sysfs, dev string) {
	t.Helper()
	require.NoError(t, copyTree(filepath.Join(topoFixturesDir, f.base), sysfs))
	w := func(rel string, content []byte) {
		p := filepath.Join(sysfs, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, content, 0o644))
	}
	attr := func(rel, v string) { w(rel, []byte(v+"\n")) }
	link := func(rel, target string) {
		p := filepath.Join(sysfs, rel)
		to, err := filepath.Rel(filepath.Dir(p), filepath.Join(sysfs, target))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.Symlink(to, p))
	}
	// Modules (Documentation/ABI/testing/sysfs-module).
	module := func(name, version, taint string) {
		attr("module/"+name+"/version", version)
		attr("module/"+name+"/taint", taint)
		attr("module/"+name+"/initstate", "live")
	}
	if f.nvidiaVersion != "" {
		module("nvidia", f.nvidiaVersion, f.nvidiaTaint)
	}
	if f.peermem != "" {
		module("nvidia_peermem", f.peermem, f.nvidiaTaint)
	}
	// The PCI functions, by address, with their directories below devices/.
	fns := pciFunctions(t, sysfs)
	addrs := make([]string, 0, len(fns))
	for a := range fns {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	// IOMMU: one unit per root bus (Intel's DMAR units), one group per function.
	if f.iommu != "" {
		var roots []string
		for _, a := range addrs {
			if r := strings.SplitN(fns[a], "/", 2)[0]; !slices.Contains(roots, r) {
				roots = append(roots, r)
			}
		}
		for i := range roots {
			unit := fmt.Sprintf("dmar%d", i)
			attr("devices/virtual/iommu/"+unit+"/intel-iommu/version", "1:0")
			link("class/iommu/"+unit, "devices/virtual/iommu/"+unit)
		}
		for i, a := range addrs {
			g := fmt.Sprintf("kernel/iommu_groups/%d", i+10)
			attr(g+"/type", f.iommu)
			link(g+"/devices/"+a, "devices/"+fns[a])
			link("devices/"+fns[a]+"/iommu_group", g)
		}
	}
	// Configuration space of the bridges (the functions with class 0x060400).
	for _, a := range addrs {
		dir := filepath.Join(sysfs, "devices", fns[a])
		class := readTrim(t, filepath.Join(dir, "class"))
		if class != "0x060400" {
			continue
		}
		upstream := isSwitchUpstream(t, dir, fns[a])
		cfg := bridgeConfig(readTrim(t, filepath.Join(dir, "vendor")), readTrim(t, filepath.Join(dir, "device")), !upstream, f.acs)
		if f.userView {
			cfg = cfg[:64]
		}
		w("devices/"+fns[a]+"/config", cfg)
	}
	// uverbs devices for the RDMA devices, as verbs/testdata has them, and the device root.
	ibdevs, err := os.ReadDir(filepath.Join(sysfs, "class", "infiniband"))
	require.NoError(t, err)
	attr("class/infiniband_verbs/abi_version", "6")
	require.NoError(t, os.MkdirAll(filepath.Join(dev, "infiniband"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dev, "infiniband", "rdma_cm"), nil, 0o644))
	for k, e := range ibdevs {
		devDir, err := filepath.EvalSymlinks(filepath.Join(sysfs, "class", "infiniband", e.Name()))
		require.NoError(t, err)
		realSysfs, err := filepath.EvalSymlinks(sysfs)
		require.NoError(t, err)
		pciDir, err := filepath.Rel(filepath.Join(realSysfs, "devices"), filepath.Dir(filepath.Dir(devDir)))
		require.NoError(t, err)
		uv := fmt.Sprintf("uverbs%d", k)
		base := "devices/" + pciDir + "/infiniband_verbs/" + uv
		attr(base+"/abi_version", "1")
		attr(base+"/dev", fmt.Sprintf("231:%d", 192+k))
		attr(base+"/ibdev", e.Name())
		link(base+"/device", "devices/"+pciDir)
		link("class/infiniband_verbs/"+uv, base)
		require.NoError(t, os.WriteFile(filepath.Join(dev, "infiniband", uv), nil, 0o644))
	}
}

// pciFunctions maps each address in bus/pci/devices to its path below devices/.
func pciFunctions(t *testing.T, sysfs string) map[string]string {
	t.Helper()
	real, err := filepath.EvalSymlinks(sysfs)
	require.NoError(t, err)
	entries, err := os.ReadDir(filepath.Join(sysfs, "bus", "pci", "devices"))
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range entries {
		dir, err := filepath.EvalSymlinks(filepath.Join(sysfs, "bus", "pci", "devices", e.Name()))
		require.NoError(t, err)
		rel, err := filepath.Rel(filepath.Join(real, "devices"), dir)
		require.NoError(t, err)
		out[e.Name()] = filepath.ToSlash(rel)
	}
	return out
}

// isSwitchUpstream: a bridge below another bridge with bridges below it, the upstream port of a
// PCIe switch, which has no ACS (the downstream ports and root ports do).
func isSwitchUpstream(t *testing.T, dir, rel string) bool {
	parts := strings.Split(rel, "/")
	if len(parts) < 3 { // pci<root>/<root port>
		return false
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if e.IsDir() && strings.Count(e.Name(), ":") == 2 && readTrim(t, filepath.Join(dir, e.Name(), "class")) == "0x060400" {
			return true
		}
	}
	return false
}

func readTrim(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(bytes.TrimSpace(b))
}

// bridgeConfig is a PCI Express bridge's 4096-byte configuration space: the type 1 header, and
// in the extended space Advanced Error Reporting at 0x100 followed, when withACS, by ACS at
// 0x148 with the given control register.
func bridgeConfig(vendor, device string, withACS bool, acsCtrl uint16) []byte {
	b := make([]byte, 4096)
	var v, d uint16
	fmt.Sscanf(vendor, "0x%x", &v)
	fmt.Sscanf(device, "0x%x", &d)
	le := binary.LittleEndian
	le.PutUint16(b[0x00:], v)
	le.PutUint16(b[0x02:], d)
	le.PutUint16(b[0x04:], 0x0407) // command: I/O, memory, bus master, interrupts off
	le.PutUint16(b[0x06:], 0x0010) // status: capability list
	le.PutUint32(b[0x08:], 0x06040000)
	b[0x0e] = 0x01 // header type 1 (bridge)
	b[0x34] = 0x40 // first capability
	// Capability list in the legacy space: PCI Express at 0x40.
	b[0x40], b[0x41] = 0x10, 0x00
	next := uint32(0)
	if withACS {
		next = 0x148
	}
	le.PutUint32(b[0x100:], 0x0001|2<<16|next<<20) // AER, version 2
	if withACS {
		le.PutUint32(b[0x148:], 0x000d|1<<16) // ACS, version 1, last
		le.PutUint16(b[0x14c:], 0x005f)       // capability: SV TB RR CR UF DT
		le.PutUint16(b[0x14e:], acsCtrl)
	}
	return b
}

// copyTree copies a sysfs fixture tree: directories, files, and its relative symlinks as they are.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
}
