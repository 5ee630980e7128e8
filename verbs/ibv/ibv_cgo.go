//go:build linux && cgo

package ibv

/*
#cgo LDFLAGS: -libverbs
#include <stdlib.h>
#include <infiniband/verbs.h>

// ibv_query_port and ibv_reg_mr are macros in verbs.h, and ibv_query_gid_ex is an inline that
// passes its struct size; cgo can call none of them, so each gets a one-line wrapper.
static int velo_ibv_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr) {
	return ibv_query_port(ctx, port, attr);
}
static struct ibv_mr *velo_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access) {
	return ibv_reg_mr(pd, addr, length, access);
}
static int velo_ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *entry) {
	return ibv_query_gid_ex(ctx, port, index, entry, 0);
}
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/velo-go/velo/verbs"
)

// closedError is what every method of a nil or released object returns.
func closedError(op, what string) error {
	return &Error{Op: op, Kind: verbs.ErrClosed, Detail: "called on a nil or released " + what}
}

// be64 reads a __be64 that cgo handed over as a host integer: its bytes in memory are big-endian.
func be64(v C.__be64) uint64 {
	return binary.BigEndian.Uint64((*[8]byte)(unsafe.Pointer(&v))[:])
}

func be16(v C.__be16) uint16 {
	return binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&v))[:])
}

// deviceList calls ibv_get_device_list and hands each device to fn while the list is valid.
func deviceList(fn func(d *C.struct_ibv_device)) error {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		var en syscall.Errno
		if !errors.As(err, &en) {
			en = syscall.EIO
		}
		e := errnoError("ibv_get_device_list", "", en, 0)
		if en == syscall.ENOSYS {
			e.Detail = "the kernel exposes no RDMA verbs (no /sys/class/infiniband_verbs): load ib_uverbs and the adapter's RDMA driver (mlx5_ib)"
		}
		return e
	}
	defer C.ibv_free_device_list(list)
	for _, d := range unsafe.Slice(list, int(n)) {
		fn(d)
	}
	return nil
}

// Devices lists the devices libibverbs can use (ibv_get_device_list). With none, it returns an
// empty list and an error wrapping verbs.ErrNoDevice that says why: no kernel support, no device,
// or a device sysfs shows but libibverbs has no provider library for.
func Devices() ([]DeviceInfo, error) {
	var out []DeviceInfo
	err := deviceList(func(d *C.struct_ibv_device) {
		out = append(out, DeviceInfo{
			Name:     C.GoString(C.ibv_get_device_name(d)),
			NodeGUID: verbs.GUID(be64(C.ibv_get_device_guid(d))),
			NodeType: verbs.NodeType(d.node_type),
		})
	})
	if err != nil {
		return []DeviceInfo{}, err
	}
	if len(out) == 0 {
		return []DeviceInfo{}, noDevicesError("ibv_get_device_list", "")
	}
	return out, nil
}

// noDevicesError explains an empty device list, using sysfs to tell "no hardware" from "no
// provider library".
func noDevicesError(op, want string) error {
	e := &Error{Op: op, Kind: verbs.ErrNoDevice}
	sysDevs, _ := verbs.Devices(verbs.Paths{})
	var names []string
	for _, d := range sysDevs {
		names = append(names, d.Name)
	}
	switch {
	case len(names) > 0:
		e.Detail = fmt.Sprintf("libibverbs lists no devices but sysfs shows %s: the provider library for this adapter is missing (install rdma-core's ibverbs-providers; mlx5 needs libmlx5)", strings.Join(names, ", "))
	default:
		e.Detail = "libibverbs found no RDMA devices and neither does sysfs: no RDMA adapter, or its RDMA driver is not loaded"
	}
	if want != "" {
		e.Detail = fmt.Sprintf("no device %q: %s", want, e.Detail)
	}
	return e
}

// Context is an open device (struct ibv_context).
type Context struct {
	mu   sync.RWMutex
	ptr  *C.struct_ibv_context
	name string
	pds  int // live protection domains
}

// WithDevice finds the device called name in libibverbs' list and runs fn with its
// struct ibv_device*, which is valid only while fn runs (the list is freed after it). The pointer
// is C memory, handed over as unsafe.Pointer so that another cgo package (mlx5dv) can convert it
// to its own C type; nothing in Go keeps it. A device that is not listed gives the error Open
// gives, wrapping verbs.ErrNoDevice and saying what is missing; fn's own error is returned as is.
func WithDevice(op, name string, fn func(dev unsafe.Pointer) error) error {
	if name == "" {
		return &Error{Op: op, Kind: verbs.ErrInvalid, Detail: "empty device name (want e.g. mlx5_0)"}
	}
	var (
		fnErr    error
		found    bool
		haveList []string
	)
	err := deviceList(func(d *C.struct_ibv_device) {
		n := C.GoString(C.ibv_get_device_name(d))
		haveList = append(haveList, n)
		if n != name || found {
			return
		}
		found = true
		fnErr = fn(unsafe.Pointer(d))
	})
	switch {
	case err != nil:
		return err
	case found:
		return fnErr
	case len(haveList) == 0:
		return noDevicesError(op, name)
	}
	return &Error{Op: op, Kind: verbs.ErrNoDevice, Detail: fmt.Sprintf("no device %q; libibverbs has %s", name, strings.Join(haveList, ", "))}
}

// Open opens the device called name (ibv_get_device_list, then ibv_open_device).
func Open(name string) (*Context, error) {
	var ctx *C.struct_ibv_context
	err := WithDevice("ibv_open_device", name, func(dev unsafe.Pointer) error {
		c, err := C.ibv_open_device((*C.struct_ibv_device)(dev))
		if c == nil {
			return ErrnoError("ibv_open_device", name, err)
		}
		ctx = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &Context{ptr: ctx, name: name}, nil
}

// ErrnoError is this package's error for a failed verbs call: err's errno (EIO when it carries
// none) mapped to a verbs sentinel, with the cause and the fix in words. mlx5dv uses it for the
// calls it makes on verbs objects.
func ErrnoError(op, device string, err error) error {
	var en syscall.Errno
	if !errors.As(err, &en) || en == 0 {
		en = syscall.EIO
	}
	return errnoError(op, device, en, 0)
}

// Name returns the device's name.
func (c *Context) Name() string {
	if c == nil {
		return ""
	}
	return c.name
}

// Close closes the device (ibv_close_device). It fails with verbs.ErrBusy while protection
// domains allocated from it are still alive; closing twice returns verbs.ErrClosed.
func (c *Context) Close() error {
	if c == nil {
		return closedError("ibv_close_device", "context")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ptr == nil {
		return closedError("ibv_close_device", "context")
	}
	if c.pds > 0 {
		return &Error{Op: "ibv_close_device", Device: c.name, Kind: verbs.ErrBusy, Detail: fmt.Sprintf("%d protection domain(s) still allocated: Dealloc them first", c.pds)}
	}
	if rc, err := C.ibv_close_device(c.ptr); rc != 0 {
		return errnoError("ibv_close_device", c.name, callErrno(int(rc), err), 0)
	}
	c.ptr = nil
	return nil
}

// use runs fn with the context held open.
func (c *Context) use(op string, fn func(p *C.struct_ibv_context) error) error {
	if c == nil {
		return closedError(op, "context")
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ptr == nil {
		return closedError(op, "context")
	}
	return fn(c.ptr)
}

// QueryDevice returns the device's attributes (ibv_query_device).
func (c *Context) QueryDevice() (DeviceAttr, error) {
	var out DeviceAttr
	err := c.use("ibv_query_device", func(p *C.struct_ibv_context) error {
		var a C.struct_ibv_device_attr
		if rc, err := C.ibv_query_device(p, &a); rc != 0 {
			return errnoError("ibv_query_device", c.name, callErrno(int(rc), err), 0)
		}
		out = DeviceAttr{
			FirmwareVersion: C.GoString(&a.fw_ver[0]),
			NodeGUID:        verbs.GUID(be64(a.node_guid)),
			SysImageGUID:    verbs.GUID(be64(a.sys_image_guid)),
			MaxMRSize:       uint64(a.max_mr_size),
			PageSizeCap:     uint64(a.page_size_cap),
			VendorID:        uint32(a.vendor_id),
			VendorPartID:    uint32(a.vendor_part_id),
			HWVersion:       uint32(a.hw_ver),
			MaxQP:           int(a.max_qp),
			MaxCQ:           int(a.max_cq),
			MaxMR:           int(a.max_mr),
			MaxPD:           int(a.max_pd),
			PhysPortCount:   int(a.phys_port_cnt),
		}
		return nil
	})
	return out, err
}

func checkPort(op, device string, port int) error {
	if port < 1 || port > 255 {
		return &Error{Op: op, Device: device, Kind: verbs.ErrInvalid, Detail: fmt.Sprintf("port %d out of range (ports are numbered from 1)", port)}
	}
	return nil
}

// checkEntry validates the port and table index of a P_Key or GID query.
func checkEntry(op, device string, port, index int) error {
	if err := checkPort(op, device, port); err != nil {
		return err
	}
	if index < 0 || index > 0xffff {
		return &Error{Op: op, Device: device, Kind: verbs.ErrInvalid, Detail: fmt.Sprintf("index %d out of range", index)}
	}
	return nil
}

// QueryPort returns a port's attributes (ibv_query_port).
func (c *Context) QueryPort(port int) (PortAttr, error) {
	var out PortAttr
	err := c.use("ibv_query_port", func(p *C.struct_ibv_context) error {
		if err := checkPort("ibv_query_port", c.name, port); err != nil {
			return err
		}
		var a C.struct_ibv_port_attr
		if rc, err := C.velo_ibv_query_port(p, C.uint8_t(port), &a); rc != 0 {
			return errnoError("ibv_query_port", c.name, callErrno(int(rc), err), 0)
		}
		out = PortAttr{
			State:        verbs.PortState(a.state),
			PhysState:    verbs.PhysState(a.phys_state),
			LinkLayer:    verbs.LinkLayer(a.link_layer),
			MaxMTU:       mtuFromEnum(uint32(a.max_mtu)),
			ActiveMTU:    mtuFromEnum(uint32(a.active_mtu)),
			LID:          uint16(a.lid),
			SMLID:        uint16(a.sm_lid),
			LMC:          uint8(a.lmc),
			SMSL:         uint8(a.sm_sl),
			GIDTableLen:  int(a.gid_tbl_len),
			PKeyTableLen: int(a.pkey_tbl_len),
			CapFlags:     uint32(a.port_cap_flags),
			ActiveWidth:  uint8(a.active_width),
			ActiveSpeed:  uint8(a.active_speed),
		}
		out.Rate = rateOf(out.ActiveWidth, uint16(out.ActiveSpeed))
		return nil
	})
	return out, err
}

// QueryPKey returns entry index of a port's P_Key table (ibv_query_pkey), in host order.
func (c *Context) QueryPKey(port, index int) (verbs.PKey, error) {
	var out verbs.PKey
	err := c.use("ibv_query_pkey", func(p *C.struct_ibv_context) error {
		if err := checkEntry("ibv_query_pkey", c.name, port, index); err != nil {
			return err
		}
		var k C.__be16
		if rc, err := C.ibv_query_pkey(p, C.uint8_t(port), C.int(index), &k); rc != 0 {
			return errnoError("ibv_query_pkey", c.name, callErrno(int(rc), err), 0)
		}
		out = verbs.PKey(be16(k))
		return nil
	})
	return out, err
}

// QueryGID returns entry index of a port's GID table (ibv_query_gid); an empty entry is the zero GID.
func (c *Context) QueryGID(port, index int) (verbs.GID, error) {
	var out verbs.GID
	err := c.use("ibv_query_gid", func(p *C.struct_ibv_context) error {
		if err := checkEntry("ibv_query_gid", c.name, port, index); err != nil {
			return err
		}
		var g C.union_ibv_gid
		if rc, err := C.ibv_query_gid(p, C.uint8_t(port), C.int(index), &g); rc != 0 {
			return errnoError("ibv_query_gid", c.name, callErrno(int(rc), err), 0)
		}
		copy(out[:], (*[16]byte)(unsafe.Pointer(&g))[:])
		return nil
	})
	return out, err
}

// QueryGIDEx returns entry index of a port's GID table with its type and netdev
// (ibv_query_gid_ex). An empty entry has the zero GID and a nil error, as in sysfs.
func (c *Context) QueryGIDEx(port, index int) (GIDEntry, error) {
	out := GIDEntry{Index: index}
	err := c.use("ibv_query_gid_ex", func(p *C.struct_ibv_context) error {
		if err := checkEntry("ibv_query_gid_ex", c.name, port, index); err != nil {
			return err
		}
		var e C.struct_ibv_gid_entry
		rc, err := C.velo_ibv_query_gid_ex(p, C.uint32_t(port), C.uint32_t(index), &e)
		if rc != 0 {
			if en := callErrno(int(rc), err); en != syscall.ENODATA {
				return errnoError("ibv_query_gid_ex", c.name, en, 0)
			}
			return nil // empty entry
		}
		copy(out.GID[:], (*[16]byte)(unsafe.Pointer(&e.gid))[:])
		out.Type = verbs.GIDType(e.gid_type)
		out.Ifindex = int(e.ndev_ifindex)
		if out.Ifindex != 0 {
			if ifc, err := net.InterfaceByIndex(out.Ifindex); err == nil {
				out.Netdev = ifc.Name
			}
		}
		return nil
	})
	return out, err
}

// PD is a protection domain (struct ibv_pd).
type PD struct {
	mu  sync.Mutex
	ptr *C.struct_ibv_pd
	ctx *Context
	mrs int // live memory regions
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (c *Context) AllocPD() (*PD, error) {
	if c == nil {
		return nil, closedError("ibv_alloc_pd", "context")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ptr == nil {
		return nil, closedError("ibv_alloc_pd", "context")
	}
	p, err := C.ibv_alloc_pd(c.ptr)
	if p == nil {
		return nil, errnoError("ibv_alloc_pd", c.name, callErrno(-1, err), 0)
	}
	c.pds++
	return &PD{ptr: p, ctx: c}, nil
}

// Dealloc frees the protection domain (ibv_dealloc_pd). It fails with verbs.ErrBusy while memory
// regions registered in it are still alive.
func (pd *PD) Dealloc() error {
	if pd == nil {
		return closedError("ibv_dealloc_pd", "protection domain")
	}
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.ptr == nil {
		return closedError("ibv_dealloc_pd", "protection domain")
	}
	if pd.mrs > 0 {
		return &Error{Op: "ibv_dealloc_pd", Device: pd.ctx.name, Kind: verbs.ErrBusy, Detail: fmt.Sprintf("%d memory region(s) still registered: Dereg them first", pd.mrs)}
	}
	if rc, err := C.ibv_dealloc_pd(pd.ptr); rc != 0 {
		return errnoError("ibv_dealloc_pd", pd.ctx.name, callErrno(int(rc), err), 0)
	}
	pd.ptr = nil
	pd.ctx.mu.Lock()
	pd.ctx.pds--
	pd.ctx.mu.Unlock()
	return nil
}

// MR is a registered memory region (struct ibv_mr).
type MR struct {
	mu     sync.Mutex
	ptr    *C.struct_ibv_mr
	pd     *PD
	pinner runtime.Pinner
	addr   uintptr
	length int
	lkey   uint32
	rkey   uint32
	access Access
}

// RegMR registers buf with the given access (ibv_reg_mr). The adapter may read and write buf
// until Dereg, so buf must stay allocated until then; a Go-heap buffer is pinned for that time.
// When the memlock limit is the reason registration fails, the error wraps verbs.ErrMemlock and
// syscall.ENOMEM and names the limit, the size and the fix.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	if pd == nil {
		return nil, closedError("ibv_reg_mr", "protection domain")
	}
	if err := checkBuffer(buf, access); err != nil {
		return nil, err
	}
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.ptr == nil {
		return nil, closedError("ibv_reg_mr", "protection domain")
	}
	mr := &MR{pd: pd, length: len(buf), access: access}
	base := unsafe.Pointer(unsafe.SliceData(buf))
	mr.pinner.Pin(base) // no-op for mmap'd memory; keeps Go memory in place for the adapter
	p, err := C.velo_ibv_reg_mr(pd.ptr, base, C.size_t(len(buf)), C.int(access))
	if p == nil {
		mr.pinner.Unpin()
		return nil, errnoError("ibv_reg_mr", pd.ctx.name, callErrno(-1, err), uint64(len(buf)))
	}
	mr.ptr, mr.addr, mr.lkey, mr.rkey = p, uintptr(base), uint32(p.lkey), uint32(p.rkey)
	pd.mrs++
	return mr, nil
}

// LKey returns the local key (0 after Dereg).
func (mr *MR) LKey() uint32 { return mr.get(func() uint32 { return mr.lkey }) }

// RKey returns the remote key a peer uses to access the region (0 after Dereg).
func (mr *MR) RKey() uint32 { return mr.get(func() uint32 { return mr.rkey }) }

// Addr returns the start of the region.
func (mr *MR) Addr() uintptr {
	if mr == nil {
		return 0
	}
	mr.mu.Lock()
	defer mr.mu.Unlock()
	return mr.addr
}

// Len returns the length of the region in bytes.
func (mr *MR) Len() int {
	if mr == nil {
		return 0
	}
	mr.mu.Lock()
	defer mr.mu.Unlock()
	return mr.length
}

// Access returns the flags it was registered with.
func (mr *MR) Access() Access {
	if mr == nil {
		return 0
	}
	mr.mu.Lock()
	defer mr.mu.Unlock()
	return mr.access
}

func (mr *MR) get(f func() uint32) uint32 {
	if mr == nil {
		return 0
	}
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.ptr == nil {
		return 0
	}
	return f()
}

// Dereg deregisters the region (ibv_dereg_mr); afterwards the buffer is the caller's again.
func (mr *MR) Dereg() error {
	if mr == nil {
		return closedError("ibv_dereg_mr", "memory region")
	}
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.ptr == nil {
		return closedError("ibv_dereg_mr", "memory region")
	}
	if rc, err := C.ibv_dereg_mr(mr.ptr); rc != 0 {
		return errnoError("ibv_dereg_mr", mr.pd.ctx.name, callErrno(int(rc), err), 0)
	}
	mr.ptr = nil
	mr.pinner.Unpin()
	mr.pd.mu.Lock()
	mr.pd.mrs--
	mr.pd.mu.Unlock()
	return nil
}

// cConstants returns the C values of the constants this package mirrors, for a test that
// compares them (test files cannot use cgo).
func cConstants() map[string]uint64 {
	return map[string]uint64{
		"LOCAL_WRITE":      C.IBV_ACCESS_LOCAL_WRITE,
		"REMOTE_WRITE":     C.IBV_ACCESS_REMOTE_WRITE,
		"REMOTE_READ":      C.IBV_ACCESS_REMOTE_READ,
		"REMOTE_ATOMIC":    C.IBV_ACCESS_REMOTE_ATOMIC,
		"MW_BIND":          C.IBV_ACCESS_MW_BIND,
		"ZERO_BASED":       C.IBV_ACCESS_ZERO_BASED,
		"ON_DEMAND":        C.IBV_ACCESS_ON_DEMAND,
		"HUGETLB":          C.IBV_ACCESS_HUGETLB,
		"RELAXED_ORDERING": C.IBV_ACCESS_RELAXED_ORDERING,
		"PORT_ACTIVE":      C.IBV_PORT_ACTIVE,
		"PORT_DOWN":        C.IBV_PORT_DOWN,
		"LINK_LAYER_IB":    C.IBV_LINK_LAYER_INFINIBAND,
		"LINK_LAYER_ETH":   C.IBV_LINK_LAYER_ETHERNET,
		"GID_TYPE_IB":      C.IBV_GID_TYPE_IB,
		"GID_TYPE_ROCE_V1": C.IBV_GID_TYPE_ROCE_V1,
		"GID_TYPE_ROCE_V2": C.IBV_GID_TYPE_ROCE_V2,
		"NODE_CA":          C.IBV_NODE_CA,
		"NODE_RNIC":        C.IBV_NODE_RNIC,
		"MTU_4096":         C.IBV_MTU_4096,
	}
}
