//go:build linux && cgo

package rdmacm

/*
#cgo LDFLAGS: -lrdmacm -libverbs
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"github.com/velo-go/velo/verbs"
)

// rdmaCMDevice is the character device librdmacm talks to the kernel through.
const rdmaCMDevice = "/dev/infiniband/rdma_cm"

func errnoOf(err error) syscall.Errno {
	var en syscall.Errno
	if errors.As(err, &en) && en != 0 {
		return en
	}
	return syscall.EIO
}

// createEventChannel calls rdma_create_event_channel.
func createEventChannel() (*C.struct_rdma_event_channel, error) {
	ch, err := C.rdma_create_event_channel()
	if ch == nil {
		en := errnoOf(err)
		switch en {
		case syscall.ENODEV:
			return nil, fmt.Errorf("rdmacm: rdma_create_event_channel: %w: %w: librdmacm found no RDMA devices", verbs.ErrNoDevice, en)
		case syscall.ENOENT:
			return nil, fmt.Errorf("rdmacm: rdma_create_event_channel: %w: %s is missing: load rdma_ucm, or start the container with --device=%s", en, rdmaCMDevice, rdmaCMDevice)
		case syscall.EACCES, syscall.EPERM:
			return nil, fmt.Errorf("rdmacm: rdma_create_event_channel: %w: %w: cannot open %s (check its permissions)", verbs.ErrPermission, en, rdmaCMDevice)
		}
		return nil, fmt.Errorf("rdmacm: rdma_create_event_channel: %w", en)
	}
	return ch, nil
}

// ResolveLibrdmacm asks the RDMA connection manager which device and port carry ip: it binds a
// cm_id to the address (rdma_bind_addr) and reads the device and port the kernel chose. It needs
// /dev/infiniband/rdma_cm; without it the error says so and is inconclusive.
func ResolveLibrdmacm(ip netip.Addr) (Location, error) {
	ip, err := checkIP(ip)
	if err != nil {
		return Location{}, err
	}
	if _, err := os.Stat(rdmaCMDevice); errors.Is(err, fs.ErrNotExist) {
		return Location{}, fmt.Errorf("rdmacm: librdmacm needs %s, which is missing: load the rdma_ucm module, or start the container with --device=%s", rdmaCMDevice, rdmaCMDevice)
	}
	ch, err := createEventChannel()
	if err != nil {
		return Location{}, err
	}
	defer C.rdma_destroy_event_channel(ch)

	var id *C.struct_rdma_cm_id
	if rc, err := C.rdma_create_id(ch, &id, nil, C.RDMA_PS_TCP); rc != 0 {
		return Location{}, fmt.Errorf("rdmacm: rdma_create_id: %w", errnoOf(err))
	}
	defer C.rdma_destroy_id(id)

	sa := (*C.struct_sockaddr_storage)(C.calloc(1, C.sizeof_struct_sockaddr_storage))
	if sa == nil {
		return Location{}, fmt.Errorf("rdmacm: out of memory")
	}
	defer C.free(unsafe.Pointer(sa))
	if ip.Is4() {
		sin := (*C.struct_sockaddr_in)(unsafe.Pointer(sa))
		sin.sin_family = C.AF_INET
		b := ip.As4()
		C.memcpy(unsafe.Pointer(&sin.sin_addr), unsafe.Pointer(&b[0]), 4)
	} else {
		sin6 := (*C.struct_sockaddr_in6)(unsafe.Pointer(sa))
		sin6.sin6_family = C.AF_INET6
		b := ip.As16()
		C.memcpy(unsafe.Pointer(&sin6.sin6_addr), unsafe.Pointer(&b[0]), 16)
		if z := ip.Zone(); z != "" {
			if ifi, err := netInterfaceIndex(z); err == nil {
				sin6.sin6_scope_id = C.uint32_t(ifi)
			}
		}
	}
	if rc, err := C.rdma_bind_addr(id, (*C.struct_sockaddr)(unsafe.Pointer(sa))); rc != 0 {
		en := errnoOf(err)
		switch en {
		case syscall.EADDRNOTAVAIL:
			return Location{}, fmt.Errorf("rdmacm: rdma_bind_addr(%s): %w: %w: the address is not assigned to any interface of this node", ip, verbs.ErrNoDevice, en)
		case syscall.ENODEV:
			return Location{}, fmt.Errorf("rdmacm: rdma_bind_addr(%s): %w: %w: no RDMA device carries the address's interface", ip, verbs.ErrNoDevice, en)
		}
		return Location{}, fmt.Errorf("rdmacm: rdma_bind_addr(%s): %w", ip, en)
	}
	if id.verbs == nil {
		return Location{}, fmt.Errorf("rdmacm: rdma_bind_addr(%s): %w: bound, but to no RDMA device", ip, verbs.ErrNoDevice)
	}
	return Location{
		IP:       ip,
		Device:   C.GoString(C.ibv_get_device_name(id.verbs.device)),
		Port:     int(id.port_num),
		GIDIndex: -1,
		Source:   SourceLibrdmacm,
	}, nil
}

// netInterfaceIndex returns the index of the interface an IPv6 zone names.
func netInterfaceIndex(zone string) (int, error) {
	ifc, err := net.InterfaceByName(zone)
	if err != nil {
		return 0, err
	}
	return ifc.Index, nil
}
