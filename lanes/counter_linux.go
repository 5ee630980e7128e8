package lanes

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// DefaultParent is the folder under the cgroup v2 mount where counters make their cgroups.
const DefaultParent = "velo-lanes"

// Options configure a Counter.
type Options struct {
	// Parent is the folder under the cgroup v2 mount the counter's cgroup is made in (default
	// DefaultParent); it is created when missing and left in place.
	Parent string
	// MaxFlows bounds the socket directions counted (default 16384); flows beyond it are not
	// counted, and Read says so.
	MaxFlows int
}

// Counter counts the traffic of every socket of the processes started in its cgroup.
type Counter struct {
	dir    string // the cgroup
	fd     int    // open on dir, for CLONE_INTO_CGROUP
	flows  *ebpf.Map
	progs  []*ebpf.Program
	links  []link.Link
	max    int
	closed bool
	reaper *reaper
}

// Offsets into struct __sk_buff (include/uapi/linux/bpf.h): stable kernel ABI.
const (
	skbLen        = 0
	skbFamily     = 88
	skbLocalIP4   = 96  // network byte order
	skbLocalIP6   = 116 // four words, network byte order
	skbRemotePort = 132 // network byte order, in the upper 16 bits on little-endian hosts
	skbLocalPort  = 136 // host byte order
)

// The map's key: local port (u32), remote port as the kernel stores it (u32), IP protocol (u8),
// direction (u8), the packets' family (u8), the socket's family (u8), the socket's local address
// (16 bytes: an IPv4 socket's in the last four). Its value: bytes (u64), packets (u64).
//
// The local address is what tells the interfaces of a multi-NIC host apart: each rail has an
// address of its own, and a socket's local address is the one its packets leave and arrive on.
const (
	keySize   = 28
	valueSize = 16
)

// Where the program keeps the key, a scratch byte and the new value on its stack (offsets from
// the frame pointer; the key's fields at keyOff plus their offset above).
const (
	keyOff     = -32
	scratchOff = -40
	valueOff   = -56
)

const (
	afInet  = 2
	afInet6 = 10
)

// program is one cgroup_skb program counting into flows for direction dir. It always lets the
// packet through.
func program(flows *ebpf.Map, dir Direction) asm.Instructions {
	fd := flows.FD()
	add := func(label string) asm.Instructions { // r0 = value pointer: add len and one packet
		return asm.Instructions{
			asm.LoadMem(asm.R2, asm.R6, skbLen, asm.Word).WithSymbol(label),
			asm.StoreXAdd(asm.R0, asm.R2, asm.DWord),
			asm.Mov.Imm(asm.R2, 1),
			asm.Add.Imm(asm.R0, 8),
			asm.StoreXAdd(asm.R0, asm.R2, asm.DWord),
			asm.Ja.Label("allow"),
		}
	}
	keyPtr := func(r asm.Register, off int32) asm.Instructions {
		return asm.Instructions{asm.Mov.Reg(r, asm.RFP), asm.Add.Imm(r, off)}
	}
	// loadByte: r2 = the packet's byte at off, through the scratch byte; a packet too short for
	// it goes to lookup with what the key has so far (protocol 0).
	loadByte := func(off int32) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Mov.Imm(asm.R2, off),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, scratchOff),
			asm.Mov.Imm(asm.R4, 1),
			asm.FnSkbLoadBytes.Call(),
			asm.JNE.Imm(asm.R0, 0, "lookup"),
			asm.LoadMem(asm.R2, asm.RFP, scratchOff, asm.Byte),
		}
	}
	// copyWord: the context's word at from into the key at field (the address words keep the
	// network byte order they have in the kernel, so the key holds the address's bytes in order).
	copyWord := func(from int16, field int16) asm.Instructions {
		return asm.Instructions{
			asm.LoadMem(asm.R2, asm.R6, from, asm.Word),
			asm.StoreMem(asm.RFP, keyOff+field, asm.R2, asm.Word),
		}
	}
	var p asm.Instructions
	p = append(p,
		asm.Mov.Reg(asm.R6, asm.R1),
		// the key, zeroed (an IPv4 address's unused bytes included) so equal flows hash alike
		asm.Mov.Imm(asm.R2, 0),
		asm.StoreMem(asm.RFP, keyOff, asm.R2, asm.DWord),
		asm.StoreMem(asm.RFP, keyOff+8, asm.R2, asm.DWord),
		asm.StoreMem(asm.RFP, keyOff+16, asm.R2, asm.DWord),
		asm.StoreMem(asm.RFP, keyOff+24, asm.R2, asm.Word),
	)
	p = append(p, copyWord(skbLocalPort, 0)...)
	p = append(p, copyWord(skbRemotePort, 4)...)
	p = append(p,
		asm.Mov.Imm(asm.R2, int32(dir)),
		asm.StoreMem(asm.RFP, keyOff+9, asm.R2, asm.Byte),
		asm.LoadMem(asm.R3, asm.R6, skbFamily, asm.Word),
		asm.StoreMem(asm.RFP, keyOff+10, asm.R3, asm.Byte),
		asm.StoreMem(asm.RFP, keyOff+11, asm.R3, asm.Byte),
		// The socket's local address, by the socket's family.
		asm.JEq.Imm(asm.R3, afInet6, "addr6"),
		asm.JNE.Imm(asm.R3, afInet, "version"),
	)
	p = append(p, copyWord(skbLocalIP4, 24)...)
	p = append(p, asm.Ja.Label("version"))
	p = append(p, labeled("addr6", copyWord(skbLocalIP6, 12))...)
	p = append(p, copyWord(skbLocalIP6+4, 16)...)
	p = append(p, copyWord(skbLocalIP6+8, 20)...)
	p = append(p, copyWord(skbLocalIP6+12, 24)...)
	// The IP version comes from the packet, not from the socket's family: a dual-stack socket
	// (AF_INET6) talking to an IPv4 peer sends and receives IPv4 packets, whose protocol byte
	// is at offset 9, not 6. The data starts at the network header in cgroup_skb programs. The
	// family stays the socket's only when the first byte cannot be read.
	p = append(p, labeled("version", loadByte(0))...)
	p = append(p,
		asm.RSh.Imm(asm.R2, 4),
		asm.JEq.Imm(asm.R2, 4, "v4"),
		asm.JEq.Imm(asm.R2, 6, "v6"),
		asm.Ja.Label("lookup"),
		// IPv6: the next header at byte 6. A Hop-by-Hop options header (next header 0), which
		// the stack puts on BIG TCP packets above 64 KiB for the jumbo payload option, comes
		// first; the protocol is then its first byte, at 40.
		asm.Mov.Imm(asm.R2, afInet6).WithSymbol("v6"),
		asm.StoreMem(asm.RFP, keyOff+10, asm.R2, asm.Byte),
	)
	p = append(p, loadByte(6)...)
	p = append(p, asm.JNE.Imm(asm.R2, 0, "proto"))
	p = append(p, loadByte(40)...)
	p = append(p,
		asm.Ja.Label("proto"),
		// IPv4: the protocol at byte 9.
		asm.Mov.Imm(asm.R2, afInet).WithSymbol("v4"),
		asm.StoreMem(asm.RFP, keyOff+10, asm.R2, asm.Byte),
	)
	p = append(p, loadByte(9)...)
	p = append(p,
		asm.StoreMem(asm.RFP, keyOff+8, asm.R2, asm.Byte).WithSymbol("proto"),
		asm.LoadMapPtr(asm.R1, fd).WithSymbol("lookup"),
	)
	p = append(p, keyPtr(asm.R2, keyOff)...)
	p = append(p,
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "insert"),
	)
	p = append(p, add("add")...)
	// A new flow: insert {len, 1}; if another CPU inserted it first, look it up and add.
	p = append(p,
		asm.LoadMem(asm.R2, asm.R6, skbLen, asm.Word).WithSymbol("insert"),
		asm.StoreMem(asm.RFP, valueOff, asm.R2, asm.DWord),
		asm.Mov.Imm(asm.R2, 1),
		asm.StoreMem(asm.RFP, valueOff+8, asm.R2, asm.DWord),
		asm.LoadMapPtr(asm.R1, fd),
	)
	p = append(p, keyPtr(asm.R2, keyOff)...)
	p = append(p, keyPtr(asm.R3, valueOff)...)
	p = append(p,
		asm.Mov.Imm(asm.R4, int32(ebpf.UpdateNoExist)),
		asm.FnMapUpdateElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "allow"),
		asm.LoadMapPtr(asm.R1, fd),
	)
	p = append(p, keyPtr(asm.R2, keyOff)...)
	p = append(p,
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "allow"),
	)
	p = append(p, add("add2")...)
	p = append(p,
		asm.Mov.Imm(asm.R0, 1).WithSymbol("allow"),
		asm.Return(),
	)
	return p
}

// labeled gives the first of ins the symbol a jump names.
func labeled(symbol string, ins asm.Instructions) asm.Instructions {
	ins[0] = ins[0].WithSymbol(symbol)
	return ins
}

// New makes a fresh cgroup and attaches the counting programs to it. Close undoes all of it.
func New(o Options) (*Counter, error) {
	if o.Parent == "" {
		o.Parent = DefaultParent
	}
	if o.MaxFlows <= 0 {
		o.MaxFlows = 16384
	}
	root, err := cgroup2Mount()
	if err != nil {
		return nil, err
	}
	parent := filepath.Join(root, o.Parent)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, notSupported("making the cgroup folder %s: %v (making cgroups needs root, or a cgroup v2 subtree delegated to this user)", parent, err)
	}
	sweep(parent)
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	dir := filepath.Join(parent, fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(suffix[:])))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, notSupported("making the cgroup %s: %v", dir, err)
	}
	c := &Counter{dir: dir, fd: -1, max: o.MaxFlows, reaper: startReaper(dir)}
	if err := c.attach(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Counter) attach() error {
	fd, err := unix.Open(c.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("lanes: opening the cgroup %s: %w", c.dir, err)
	}
	c.fd = fd
	c.flows, err = ebpf.NewMap(&ebpf.MapSpec{Name: "velo_lanes", Type: ebpf.Hash, KeySize: keySize, ValueSize: valueSize, MaxEntries: uint32(c.max)})
	if err != nil {
		return notSupported("creating the flow map: %v (needs CAP_BPF, or root)", err)
	}
	for _, a := range []struct {
		dir    Direction
		attach ebpf.AttachType
	}{{Egress, ebpf.AttachCGroupInetEgress}, {Ingress, ebpf.AttachCGroupInetIngress}} {
		prog, err := ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
			Name: "velo_lanes_" + a.dir.String(), Type: ebpf.CGroupSKB, AttachType: a.attach,
			Instructions: program(c.flows, a.dir), License: "Dual MIT/GPL",
		}, ebpf.ProgramOptions{LogLevel: ebpf.LogLevelBranch})
		if err != nil {
			var ve *ebpf.VerifierError
			if errors.As(err, &ve) {
				return notSupported("the kernel's verifier rejected the %s program: %+v", a.dir, ve)
			}
			return notSupported("loading the %s program: %v (needs CAP_BPF and CAP_NET_ADMIN, or root)", a.dir, err)
		}
		c.progs = append(c.progs, prog)
		l, err := link.AttachCgroup(link.CgroupOptions{Path: c.dir, Attach: a.attach, Program: prog})
		if err != nil {
			return notSupported("attaching the %s program to %s: %v", a.dir, c.dir, err)
		}
		c.links = append(c.links, l)
	}
	return nil
}

func notSupported(format string, args ...any) error {
	return fmt.Errorf("lanes: %w: %s", ErrNotSupported, fmt.Sprintf(format, args...))
}

// Cgroup is the counter's cgroup folder.
func (c *Counter) Cgroup() string { return c.dir }

// Command is exec.Command for a process that starts inside the counter's cgroup
// (CLONE_INTO_CGROUP) and dies with the process that started it.
func (c *Counter) Command(name string, arg ...string) *exec.Cmd {
	cmd := exec.Command(name, arg...)
	c.Place(cmd)
	return cmd
}

// Place makes cmd start inside the counter's cgroup (and die with its parent). Call it before
// cmd.Start; it keeps the rest of cmd.SysProcAttr.
func (c *Counter) Place(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = c.fd
	if cmd.SysProcAttr.Pdeathsig == 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
}

// Read returns what the programs counted so far, largest flows first.
func (c *Counter) Read() ([]Flow, error) {
	if c.closed {
		return nil, errors.New("lanes: Read after Close")
	}
	var flows []Flow
	var k [keySize]byte
	var v [valueSize]byte
	it := c.flows.Iterate()
	for it.Next(&k, &v) {
		flows = append(flows, decode(k, v))
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("lanes: reading the flow map: %w", err)
	}
	sortFlows(flows)
	if len(flows) >= c.max {
		return flows, fmt.Errorf("lanes: the flow map is full (%d socket directions): later flows were not counted; raise Options.MaxFlows", c.max)
	}
	return flows, nil
}

func decode(k [keySize]byte, v [valueSize]byte) Flow {
	local := binary.NativeEndian.Uint32(k[0:])
	remote := binary.NativeEndian.Uint32(k[4:])
	// The kernel stores the remote port in network byte order; on a little-endian host that
	// puts it in the upper half of the u32, byte-swapped.
	rp := uint16(remote)
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 { // little-endian
		rp = bits.ReverseBytes16(uint16(remote >> 16))
	}
	f := Flow{
		LocalPort: uint16(local), RemotePort: rp, Protocol: k[8], Dir: Direction(k[9]), IPv6: k[10] == afInet6,
		Bytes: binary.NativeEndian.Uint64(v[0:]), Packets: binary.NativeEndian.Uint64(v[8:]),
	}
	switch k[11] {
	case afInet:
		f.LocalAddr = netip.AddrFrom4([4]byte(k[24:28]))
	case afInet6:
		// A dual-stack socket talking IPv4 has a v4-mapped address: report the IPv4 one, which
		// is the interface's.
		f.LocalAddr = netip.AddrFrom16([16]byte(k[12:28])).Unmap()
	}
	return f
}

// Close detaches the programs, removes the map, and removes the cgroup once its processes are
// gone (it kills any that are left: they were started to be counted). It is idempotent.
func (c *Counter) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for _, l := range c.links {
		errs = append(errs, l.Close())
	}
	for _, p := range c.progs {
		errs = append(errs, p.Close())
	}
	if c.flows != nil {
		errs = append(errs, c.flows.Close())
	}
	if c.fd >= 0 {
		errs = append(errs, unix.Close(c.fd))
	}
	errs = append(errs, removeCgroup(c.dir))
	c.reaper.stop()
	return errors.Join(errs...)
}

// removeCgroup kills what is left in dir and removes it.
func removeCgroup(dir string) error {
	var err error
	for range 50 {
		pids := cgroupProcs(dir)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if err = unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		waitBriefly()
	}
	return fmt.Errorf("lanes: removing the cgroup %s: %w", dir, err)
}

func cgroupProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// sweep removes the cgroups under parent that a counter killed before its Close left behind: the
// folder's name starts with that process's pid, the process is gone, and so are its children.
func sweep(parent string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		pidText, _, ok := strings.Cut(e.Name(), "-")
		pid, err := strconv.Atoi(pidText)
		if !e.IsDir() || !ok || err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == nil {
			continue // its counter is still running
		}
		_ = removeCgroup(filepath.Join(parent, e.Name()))
	}
}

// cgroup2Mount finds where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup on a unified
// system, /sys/fs/cgroup/unified on a hybrid one).
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", notSupported("reading /proc/self/mountinfo: %v", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superoptions
		fields := strings.Fields(s.Text())
		for i, x := range fields {
			if x == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], nil
			}
		}
	}
	return "", notSupported("no cgroup v2 hierarchy is mounted (mount -t cgroup2 none /sys/fs/cgroup/unified, or boot with systemd.unified_cgroup_hierarchy=1)")
}
