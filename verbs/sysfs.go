package verbs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Paths says where the probes find the kernel's view of the node. The zero value is the live
// system: /sys and /dev. Tests and `ibcheck --sysfs` point it at a fixture tree instead.
type Paths struct {
	// Sysfs is the directory that holds class/infiniband, class/infiniband_verbs, class/net and
	// devices/, normally "/sys".
	Sysfs string
	// Dev is the directory that holds infiniband/uverbs<k> and infiniband/rdma_cm, normally "/dev".
	Dev string
}

// SysfsRoot returns p.Sysfs, or "/sys" when it is empty.
func (p Paths) SysfsRoot() string {
	if p.Sysfs == "" {
		return "/sys"
	}
	return p.Sysfs
}

// DevRoot returns p.Dev, or "/dev" when it is empty.
func (p Paths) DevRoot() string {
	if p.Dev == "" {
		return "/dev"
	}
	return p.Dev
}

// Live reports whether p names the running system rather than a fixture tree.
func (p Paths) Live() bool { return p.SysfsRoot() == "/sys" && p.DevRoot() == "/dev" }

func (p Paths) sys(elem ...string) string {
	return filepath.Join(append([]string{p.SysfsRoot()}, elem...)...)
}

// Device is one RDMA device as sysfs shows it.
type Device struct {
	Name            string   // kernel name, e.g. "mlx5_0"
	NodeType        NodeType // CA for every NIC
	NodeGUID        GUID
	SysImageGUID    GUID   // shared by the devices (PCI functions) of one card
	FirmwareVersion string // fw_ver, e.g. "28.39.1002"; empty when the driver does not say
	HCAType         string // hca_type, e.g. "MT4129" (ConnectX-7); empty when the driver does not say
	HWRev           string // hw_rev
	BoardID         string // board_id, e.g. "MT_0000000838"
	NodeDesc        string // node_desc, what the subnet manager shows for this node

	// Parent device (normally a PCI function), through the device link.
	BusAddress string // e.g. "0000:17:00.0"; empty for a device without a parent (soft-RoCE)
	Driver     string // kernel driver of the parent, e.g. "mlx5_core"
	VendorID   uint16 // PCI vendor, 0x15b3 for NVIDIA/Mellanox; 0 when unknown
	DeviceID   uint16 // PCI device, 0x1021 for ConnectX-7; 0 when unknown
	NUMANode   int    // NUMA node of the parent; -1 when the platform does not say

	// Uverbs is the character device through which user space opens the device (libibverbs
	// does so in ibv_open_device); nil when ib_uverbs has not created one.
	Uverbs *UverbsDevice

	Ports []Port // in port-number order
}

// Port returns the port with number n.
func (d Device) Port(n int) (Port, bool) {
	for _, p := range d.Ports {
		if p.Number == n {
			return p, true
		}
	}
	return Port{}, false
}

// UverbsDevice is a device's /dev/infiniband/uverbs<k> node.
type UverbsDevice struct {
	Name       string // "uverbs0"
	Path       string // e.g. "/dev/infiniband/uverbs0"
	DevNumber  string // "major:minor" from sysfs, e.g. "231:192"
	ABIVersion int
	// Err is nil when this process could open Path for reading and writing, as ibv_open_device
	// does; otherwise it says why not (wrapping ErrPermission, or ErrNoDevice when the node is
	// missing, as in a container started without --device=/dev/infiniband).
	Err error
}

// Openable reports whether this process may open the node.
func (u UverbsDevice) Openable() bool { return u.Err == nil }

// Port is one port of a device as sysfs shows it.
type Port struct {
	Device    string // the device's name
	Number    int    // 1-based
	State     PortState
	PhysState PhysState
	LinkLayer LinkLayer
	Rate      Rate
	LID       uint16 // base LID; 0 or 0xffff until the subnet manager assigns one; 0 on Ethernet
	SMLID     uint16 // LID of the subnet manager; 0 on Ethernet
	LMC       uint8  // lid_mask_count
	SMSL      uint8  // service level for talking to the SM
	CapMask   uint32 // IBA PortInfo:CapabilityMask

	GIDTableLen int        // number of entries (populated or not)
	GIDs        []GIDEntry // populated entries only, in index order

	PKeyTableLen int         // number of entries; 0 when the port has no P_Key table
	PKeys        []PKeyEntry // valid (non-empty) entries only, in index order

	// Netdevs are the network interfaces on this port: those named by GID entries (RoCE, also
	// VLAN and bond devices) and those whose parent and dev_port say so (IPoIB). Sorted.
	Netdevs []string
}

// Spec returns "<device>:<port>", the form UCX_NET_DEVICES uses.
func (p Port) Spec() string { return p.Device + ":" + strconv.Itoa(p.Number) }

// Active reports whether the port is in state PORT_ACTIVE.
func (p Port) Active() bool { return p.State == PortActive }

// DefaultPartition returns the membership this port has in the default partition (0x7fff), and
// the P_Key that grants it. It is what UCX_IB_PKEY=auto relies on.
func (p Port) DefaultPartition() (Membership, PKey) {
	best, key := MembershipNone, PKey(0)
	for _, e := range p.PKeys {
		if e.PKey.Partition() == DefaultPartition && e.PKey.Membership() > best {
			best, key = e.PKey.Membership(), e.PKey
		}
	}
	return best, key
}

// GIDEntry is one populated GID table entry.
type GIDEntry struct {
	Index  int
	GID    GID
	Type   GIDType
	Netdev string // the netdev the entry comes from (RoCE); empty on InfiniBand
}

// PKeyEntry is one valid P_Key table entry.
type PKeyEntry struct {
	Index int
	PKey  PKey
}

// Devices returns every RDMA device under class/infiniband, ordered by name (mlx5_2 before
// mlx5_10). A node without RDMA devices yields an empty list and an error wrapping ErrNoDevice
// that says what was looked at; any other error means the tree could not be read.
func Devices(p Paths) ([]Device, error) {
	names, err := deviceNames(p)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return []Device{}, fmt.Errorf("%w: %s has no entries (no RDMA driver is loaded, e.g. mlx5_ib, or the NIC has no RDMA function)", ErrNoDevice, p.sys("class", "infiniband"))
	}
	nets, err := readNetdevs(p)
	if err != nil {
		return nil, err
	}
	uverbs, err := readUverbs(p)
	if err != nil {
		return nil, err
	}
	devs := make([]Device, 0, len(names))
	for _, name := range names {
		d, err := readDevice(p, name, nets, uverbs)
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// LookupDevice returns the device called name. When there is none the error wraps ErrNoDevice
// and lists the devices that do exist.
func LookupDevice(p Paths, name string) (Device, error) {
	names, err := deviceNames(p)
	if err != nil {
		return Device{}, err
	}
	if !slices.Contains(names, name) {
		return Device{}, noSuchDevice(p, name, names)
	}
	nets, err := readNetdevs(p)
	if err != nil {
		return Device{}, err
	}
	uverbs, err := readUverbs(p)
	if err != nil {
		return Device{}, err
	}
	return readDevice(p, name, nets, uverbs)
}

func noSuchDevice(p Paths, name string, have []string) error {
	if len(have) == 0 {
		return fmt.Errorf("%w: no device %q: %s has no entries (no RDMA driver is loaded)", ErrNoDevice, name, p.sys("class", "infiniband"))
	}
	return fmt.Errorf("%w: no device %q; this node has %s (see ibv_devinfo -l)", ErrNoDevice, name, strings.Join(have, ", "))
}

// LookupPort returns port number port of device name. A missing device or port is an error
// wrapping ErrNoDevice; the port's state is not judged here (see Port.Active and CheckPort).
func LookupPort(p Paths, name string, port int) (Port, error) {
	d, err := LookupDevice(p, name)
	if err != nil {
		return Port{}, err
	}
	pt, ok := d.Port(port)
	if !ok {
		nums := make([]string, len(d.Ports))
		for i, x := range d.Ports {
			nums[i] = strconv.Itoa(x.Number)
		}
		return Port{}, fmt.Errorf("%w: device %s has no port %d (its ports: %s)", ErrNoDevice, name, port, strings.Join(nums, ", "))
	}
	return pt, nil
}

// CheckPort is the preflight question "can RDMA use this port": nil when the port exists and is
// PORT_ACTIVE; an error wrapping ErrNoDevice or ErrPortNotActive (both ErrNotSupported) when it
// cannot; any other error when sysfs could not be read. spec is "<device>:<port>".
func CheckPort(p Paths, spec string) (Port, error) {
	name, num, err := ParsePortSpec(spec)
	if err != nil {
		return Port{}, err
	}
	pt, err := LookupPort(p, name, num)
	if err != nil {
		return Port{}, err
	}
	if !pt.Active() {
		return pt, fmt.Errorf("%w: %s is %s (physical state %s): check the cable and the switch, and that a subnet manager runs on the fabric (InfiniBand)", ErrPortNotActive, spec, pt.State, pt.PhysState)
	}
	return pt, nil
}

// readDirIfAny lists a directory; one that does not exist lists as empty (a class directory
// appears only once its driver is loaded).
func readDirIfAny(dir string) ([]os.DirEntry, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("verbs: reading %s: %w", dir, err)
	}
	return entries, nil
}

// deviceNames lists class/infiniband. A missing directory means no RDMA core is loaded: no devices.
func deviceNames(p Paths) ([]string, error) {
	dir := p.sys("class", "infiniband")
	entries, err := readDirIfAny(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		// Entries are symlinks to the device directories; follow them.
		if st, err := os.Stat(filepath.Join(dir, e.Name())); err == nil && st.IsDir() {
			names = append(names, e.Name())
		}
	}
	slices.SortFunc(names, naturalCompare)
	return names, nil
}

// naturalCompare orders "mlx5_2" before "mlx5_10": runs of digits compare by value.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da != "" && db != "" {
			na, _ := strconv.ParseUint(da, 10, 64)
			nb, _ := strconv.ParseUint(db, 10, 64)
			if na != nb {
				if na < nb {
					return -1
				}
				return 1
			}
			a, b = a[len(da):], b[len(db):]
			continue
		}
		if a[0] != b[0] {
			if a[0] < b[0] {
				return -1
			}
			return 1
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func digitPrefix(s string) string {
	i := 0
	for i < len(s) && i < 18 && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}

// readAttr reads one sysfs attribute without its trailing newline. ok is false when the file does
// not exist, or when reading it fails with EINVAL, which is how the kernel answers for an
// attribute that has no value (the ndev of a GID without a netdev, the type of an empty entry).
func readAttr(path string) (value string, ok bool, err error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		return strings.TrimSuffix(string(b), "\n"), true, nil
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.EINVAL):
		return "", false, nil
	}
	return "", false, fmt.Errorf("verbs: %w", err)
}

// requireAttr reads an attribute every device or port has.
func requireAttr(path string) (string, error) {
	v, ok, err := readAttr(path)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("%w: %s is missing (not a sysfs tree of an RDMA device, or the kernel is too old)", ErrMalformed, path)
	}
	return v, nil
}

// decodeAttr reads an attribute and decodes it; missing optional attributes leave *dst untouched.
func decodeAttr[T any](path string, required bool, parse func(string) (T, error), dst *T) error {
	v, ok, err := readAttr(path)
	if err != nil {
		return err
	}
	if !ok {
		if required {
			return fmt.Errorf("%w: %s is missing (not a sysfs tree of an RDMA device, or the kernel is too old)", ErrMalformed, path)
		}
		return nil
	}
	x, err := parse(v)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	*dst = x
	return nil
}

func readDevice(p Paths, name string, nets []netdevInfo, uverbs map[string]UverbsDevice) (Device, error) {
	dir := p.sys("class", "infiniband", name)
	d := Device{Name: name, NUMANode: -1}
	if err := decodeAttr(filepath.Join(dir, "node_type"), true, ParseNodeType, &d.NodeType); err != nil {
		return Device{}, err
	}
	if err := decodeAttr(filepath.Join(dir, "node_guid"), true, ParseGUID, &d.NodeGUID); err != nil {
		return Device{}, err
	}
	if err := decodeAttr(filepath.Join(dir, "sys_image_guid"), false, ParseGUID, &d.SysImageGUID); err != nil {
		return Device{}, err
	}
	text := func(s string) (string, error) { return s, nil }
	for file, dst := range map[string]*string{"fw_ver": &d.FirmwareVersion, "hca_type": &d.HCAType, "hw_rev": &d.HWRev, "board_id": &d.BoardID, "node_desc": &d.NodeDesc} {
		if err := decodeAttr(filepath.Join(dir, file), false, text, dst); err != nil {
			return Device{}, err
		}
	}

	parent, err := filepath.EvalSymlinks(filepath.Join(dir, "device"))
	switch {
	case err == nil:
		d.BusAddress = filepath.Base(parent)
		if target, err := os.Readlink(filepath.Join(parent, "driver")); err == nil {
			d.Driver = filepath.Base(target)
		}
		if err := decodeAttr(filepath.Join(parent, "numa_node"), false, strconv.Atoi, &d.NUMANode); err != nil {
			return Device{}, err
		}
		if err := decodeAttr(filepath.Join(parent, "vendor"), false, func(s string) (uint16, error) { return parseHex16("PCI vendor", s) }, &d.VendorID); err != nil {
			return Device{}, err
		}
		if err := decodeAttr(filepath.Join(parent, "device"), false, func(s string) (uint16, error) { return parseHex16("PCI device", s) }, &d.DeviceID); err != nil {
			return Device{}, err
		}
	case errors.Is(err, fs.ErrNotExist):
		parent = ""
	default:
		return Device{}, fmt.Errorf("verbs: %w", err)
	}

	if u, ok := uverbs[name]; ok {
		d.Uverbs = &u
	}

	portsDir := filepath.Join(dir, "ports")
	entries, err := readDirIfAny(portsDir)
	if err != nil {
		return Device{}, err
	}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		pt, err := readPort(filepath.Join(portsDir, e.Name()), name, n, parent, nets)
		if err != nil {
			return Device{}, err
		}
		d.Ports = append(d.Ports, pt)
	}
	slices.SortFunc(d.Ports, func(a, b Port) int { return a.Number - b.Number })
	return d, nil
}

func readPort(dir, device string, num int, parent string, nets []netdevInfo) (Port, error) {
	pt := Port{Device: device, Number: num}
	attr := func(name string) string { return filepath.Join(dir, name) }
	if err := decodeAttr(attr("state"), true, ParsePortState, &pt.State); err != nil {
		return Port{}, err
	}
	if err := decodeAttr(attr("phys_state"), true, ParsePhysState, &pt.PhysState); err != nil {
		return Port{}, err
	}
	if err := decodeAttr(attr("link_layer"), true, ParseLinkLayer, &pt.LinkLayer); err != nil {
		return Port{}, err
	}
	if err := decodeAttr(attr("rate"), false, ParseRate, &pt.Rate); err != nil {
		return Port{}, err
	}
	if err := decodeAttr(attr("lid"), false, func(s string) (uint16, error) { return parseHex16("LID", s) }, &pt.LID); err != nil {
		return Port{}, err
	}
	if err := decodeAttr(attr("sm_lid"), false, func(s string) (uint16, error) { return parseHex16("SM LID", s) }, &pt.SMLID); err != nil {
		return Port{}, err
	}
	if err := decodeAttr(attr("lid_mask_count"), false, func(s string) (uint8, error) { return parseSmallUint("LMC", s) }, &pt.LMC); err != nil {
		return Port{}, err
	}
	if err := decodeAttr(attr("sm_sl"), false, func(s string) (uint8, error) { return parseSmallUint("SM SL", s) }, &pt.SMSL); err != nil {
		return Port{}, err
	}
	if err := decodeAttr(attr("cap_mask"), false, func(s string) (uint32, error) { return parseHex32("capability mask", s) }, &pt.CapMask); err != nil {
		return Port{}, err
	}

	netdevs := map[string]bool{}
	gidLen, err := tableLen(attr("gids"))
	if err != nil {
		return Port{}, err
	}
	pt.GIDTableLen = gidLen
	for i := 0; i < gidLen; i++ {
		e, populated, err := readGID(dir, i, pt.LinkLayer)
		if err != nil {
			return Port{}, err
		}
		if populated {
			pt.GIDs = append(pt.GIDs, e)
			if e.Netdev != "" {
				netdevs[e.Netdev] = true
			}
		}
	}

	pkeyLen, err := tableLen(attr("pkeys"))
	if err != nil {
		return Port{}, err
	}
	pt.PKeyTableLen = pkeyLen
	for i := 0; i < pkeyLen; i++ {
		var k PKey
		if err := decodeAttr(filepath.Join(dir, "pkeys", strconv.Itoa(i)), true, ParsePKey, &k); err != nil {
			return Port{}, err
		}
		if k.Membership() != MembershipNone {
			pt.PKeys = append(pt.PKeys, PKeyEntry{Index: i, PKey: k})
		}
	}

	if parent != "" {
		for _, n := range nets {
			if n.parent == parent && n.devPort+1 == num {
				netdevs[n.name] = true
			}
		}
	}
	for n := range netdevs {
		pt.Netdevs = append(pt.Netdevs, n)
	}
	slices.Sort(pt.Netdevs)
	return pt, nil
}

// tableLen counts the entries of a gids/ or pkeys/ directory. The kernel names them 0..len-1.
func tableLen(dir string) (int, error) {
	entries, err := readDirIfAny(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if i, err := strconv.Atoi(e.Name()); err == nil && i >= 0 {
			n = max(n, i+1)
		}
	}
	return n, nil
}

func readGID(portDir string, i int, link LinkLayer) (GIDEntry, bool, error) {
	idx := strconv.Itoa(i)
	var g GID
	if err := decodeAttr(filepath.Join(portDir, "gids", idx), true, ParseGID, &g); err != nil {
		return GIDEntry{}, false, err
	}
	if g.IsZero() {
		return GIDEntry{}, false, nil
	}
	e := GIDEntry{Index: i, GID: g}
	if err := decodeAttr(filepath.Join(portDir, "gid_attrs", "types", idx), false, func(s string) (GIDType, error) { return ParseGIDType(s, link) }, &e.Type); err != nil {
		return GIDEntry{}, false, err
	}
	ndev, ok, err := readAttr(filepath.Join(portDir, "gid_attrs", "ndevs", idx))
	if err != nil {
		return GIDEntry{}, false, err
	}
	if ok {
		e.Netdev = ndev
	}
	return e, true, nil
}

// netdevInfo is what the probes need from class/net/<if>.
type netdevInfo struct {
	name    string
	parent  string // resolved path of the parent device; empty for virtual interfaces
	devPort int    // dev_port: 0-based port of the parent device
}

func readNetdevs(p Paths) ([]netdevInfo, error) {
	dir := p.sys("class", "net")
	entries, err := readDirIfAny(dir)
	if err != nil {
		return nil, err
	}
	var out []netdevInfo
	for _, e := range entries {
		n := netdevInfo{name: e.Name()}
		parent, err := filepath.EvalSymlinks(filepath.Join(dir, e.Name(), "device"))
		if err != nil {
			continue // virtual interface (lo, veth, bridge): no parent, cannot carry a port
		}
		n.parent = parent
		if err := decodeAttr(filepath.Join(dir, e.Name(), "dev_port"), false, strconv.Atoi, &n.devPort); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// NetdevPort returns the device and port a netdev sits on, judged as Port.Netdevs is: a GID entry
// naming the netdev (RoCE, VLAN, bond) or the netdev's parent device and dev_port (IPoIB). ok is
// false when no RDMA port carries it.
func NetdevPort(devs []Device, netdev string) (Port, bool) {
	for _, d := range devs {
		for _, pt := range d.Ports {
			if slices.Contains(pt.Netdevs, netdev) {
				return pt, true
			}
		}
	}
	return Port{}, false
}

func readUverbs(p Paths) (map[string]UverbsDevice, error) {
	dir := p.sys("class", "infiniband_verbs")
	entries, err := readDirIfAny(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]UverbsDevice{}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "uverbs") {
			continue // abi_version
		}
		ud := filepath.Join(dir, e.Name())
		ibdev, err := requireAttr(filepath.Join(ud, "ibdev"))
		if err != nil {
			return nil, err
		}
		u := UverbsDevice{Name: e.Name(), Path: filepath.Join(p.DevRoot(), "infiniband", e.Name())}
		if v, ok, err := readAttr(filepath.Join(ud, "dev")); err != nil {
			return nil, err
		} else if ok {
			u.DevNumber = v
		}
		if err := decodeAttr(filepath.Join(ud, "abi_version"), false, strconv.Atoi, &u.ABIVersion); err != nil {
			return nil, err
		}
		u.Err = checkOpen(u.Path)
		out[ibdev] = u
	}
	return out, nil
}

// checkOpen opens a device node read-write, as libibverbs does, and closes it again: the only
// reliable answer to "may this process use it", since device cgroups and LSMs decide as well as
// the file mode.
func checkOpen(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	switch {
	case err == nil:
		f.Close()
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s does not exist: load ib_uverbs, or start the container with --device=/dev/infiniband", ErrNoDevice, path)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EPERM):
		return fmt.Errorf("%w: cannot open %s read-write: %v; add the user to the group that owns it (often rdma) or allow the device in the container's device cgroup", ErrPermission, path, err)
	}
	return fmt.Errorf("verbs: opening %s: %w", path, err)
}
