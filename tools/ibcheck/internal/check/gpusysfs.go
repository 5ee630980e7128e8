package check

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// What the GPU checks read from sysfs besides the PCI tree (package verbs/topo reads that). Every
// witness is a file the kernel writes for everyone, named here with its source, so that a copied
// tree can be judged as the live one is:
//
//   - module/<name>/ exists while a module is loaded (Documentation/ABI/testing/sysfs-module);
//     module/<name>/version is its MODULE_VERSION and module/<name>/taint its taint letters
//     (P: a proprietary licence, O: out of tree, E: unsigned).
//   - module/nvidia_peermem/version, module/nv_peer_mem/version and
//     kernel/mm/memory_peers/nv_mem/version are the three files UCX's ib memory domain reads to
//     decide that it may register CUDA memory (uct_ib_md_open_common): ibcheck reads the same.
//   - class/iommu/<unit> lists the IOMMUs the kernel drives (dmar<n> on Intel, ivhd<n> on AMD);
//     bus/pci/devices/<bdf>/iommu_group links to kernel/iommu_groups/<n>, whose type (Linux 5.11
//     and later) is DMA, DMA-FQ, identity, blocked or unmanaged
//     (Documentation/ABI/testing/sysfs-kernel-iommu_groups).
//   - bus/pci/devices/<bdf>/config is the function's configuration space. An unprivileged
//     reader gets its first 64 bytes; root gets all of it (4096 bytes on PCI Express), with the
//     extended capabilities where ACS sits (PCI Express Base Specification, 7.7.8).

// readAttrFile reads one sysfs attribute without its trailing newline; ok is false when it does
// not exist.
func readAttrFile(path string) (string, bool, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		return strings.TrimSpace(string(b)), true, nil
	case errors.Is(err, fs.ErrNotExist):
		return "", false, nil
	}
	return "", false, err
}

// kmod is one kernel module as module/<name>/ shows it.
type kmod struct {
	Name    string
	Loaded  bool
	Version string // module/<name>/version; "" when the module has none
	Taint   string // module/<name>/taint; "" when untainted or unknown
}

// Proprietary: the module's licence taints the kernel with P.
func (m kmod) Proprietary() bool { return strings.Contains(m.Taint, "P") }

func readModule(sysfs, name string) (kmod, error) {
	m := kmod{Name: name}
	dir := filepath.Join(sysfs, "module", name)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return m, nil
	case err != nil:
		return m, err
	case !st.IsDir():
		return m, fmt.Errorf("%s is not a directory", dir)
	}
	m.Loaded = true
	if m.Version, _, err = readAttrFile(filepath.Join(dir, "version")); err != nil {
		return m, err
	}
	if m.Taint, _, err = readAttrFile(filepath.Join(dir, "taint")); err != nil {
		return m, err
	}
	return m, nil
}

// majorVersion is the leading number of a driver version ("550" of "550.90.07"); -1 when there
// is none.
func majorVersion(v string) int {
	head, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(head)
	if err != nil {
		return -1
	}
	return n
}

// kernelAtLeast reports whether a kernel release ("6.8.0-45-generic") is at least major.minor.
func kernelAtLeast(release string, major, minor int) (bool, error) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false, fmt.Errorf("kernel release %q does not start with major.minor", release)
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1][:digits(parts[1])])
	if err1 != nil || err2 != nil {
		return false, fmt.Errorf("kernel release %q does not start with major.minor", release)
	}
	return ma > major || (ma == major && mi >= minor), nil
}

// digits is the length of s's leading run of decimal digits.
func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// pciDriver is the name of the driver bound to the function (bus/pci/devices/<bdf>/driver); ""
// when none is.
func pciDriver(sysfs, bdf string) string {
	to, err := os.Readlink(filepath.Join(sysfs, "bus", "pci", "devices", bdf, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(to)
}

// iommuGroup is a function's IOMMU group: its number and its domain type. Group is "" when the
// function has none (no IOMMU translates its DMA).
type iommuGroup struct {
	Group string
	Type  string // "" when the kernel does not say (before 5.11)
}

func readIOMMUGroup(sysfs, bdf string) (iommuGroup, error) {
	link := filepath.Join(sysfs, "bus", "pci", "devices", bdf, "iommu_group")
	dir, err := filepath.EvalSymlinks(link)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, lerr := os.Lstat(link); lerr == nil {
			return iommuGroup{}, fmt.Errorf("%s is a dangling link", link)
		}
		return iommuGroup{}, nil
	case err != nil:
		return iommuGroup{}, err
	}
	g := iommuGroup{Group: filepath.Base(dir)}
	g.Type, _, err = readAttrFile(filepath.Join(dir, "type"))
	return g, err
}

// iommuUnits lists class/iommu.
func iommuUnits(sysfs string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(sysfs, "class", "iommu"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out, nil
}

// ACS (Access Control Services) in a port's extended capabilities: the capability ID and the
// control register's bits that send peer-to-peer traffic up to the root complex instead of
// across the switch (PCI Express Base Specification, 7.7.8.3).
const (
	extCapACS        = 0x000d
	acsCtrlReqRedir  = 1 << 2 // P2P Request Redirect
	acsCtrlCplRedir  = 1 << 3 // P2P Completion Redirect
	acsCtrlEgressCtl = 1 << 5 // P2P Egress Control
)

// acsState is what a port's configuration space says about ACS.
type acsState struct {
	Readable bool   // the extended configuration space could be read (root, PCI Express)
	Present  bool   // the port has the ACS capability
	Control  uint16 // its control register
}

// Redirects: P2P requests or completions go up to the root complex.
func (a acsState) Redirects() bool { return a.Control&(acsCtrlReqRedir|acsCtrlCplRedir) != 0 }

// readACS reads the ACS capability of bus/pci/devices/<bdf>/config.
func readACS(sysfs, bdf string) (acsState, error) {
	b, err := os.ReadFile(filepath.Join(sysfs, "bus", "pci", "devices", bdf, "config"))
	if err != nil {
		return acsState{}, err
	}
	return parseACS(b), nil
}

// parseACS walks the extended capability list of a configuration space image. Fewer than 4096
// bytes (an unprivileged read stops at 64; conventional PCI has 256) is not readable here.
func parseACS(b []byte) acsState {
	if len(b) < 4096 {
		return acsState{}
	}
	st := acsState{Readable: true}
	off := 0x100
	for range 1024 { // a malformed list cannot loop forever
		h := binary.LittleEndian.Uint32(b[off:])
		if h == 0 || h == 0xffffffff {
			return st
		}
		if h&0xffff == extCapACS {
			st.Present = true
			st.Control = binary.LittleEndian.Uint16(b[off+6:])
			return st
		}
		next := int(h>>20) &^ 3
		if next < 0x100 || next+8 > len(b) {
			return st
		}
		off = next
	}
	return st
}

// acsControlText names the set bits of an ACS control register ("SV RR CR UF").
func acsControlText(ctrl uint16) string {
	names := []string{"SV", "TB", "RR", "CR", "UF", "EC", "DT"}
	var on []string
	for i, n := range names {
		if ctrl&(1<<i) != 0 {
			on = append(on, n)
		}
	}
	if len(on) == 0 {
		return "none"
	}
	return strings.Join(on, " ")
}
