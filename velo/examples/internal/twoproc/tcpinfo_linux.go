//go:build linux

package twoproc

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// KernelTCPCounts asks the kernel (TCP_INFO) what this process's established TCP connections
// carried, split in two: velo's TCP control plane — connections whose local port is listenPort or
// whose remote port is one of peerPorts — and every other TCP connection (over UCX_TLS=tcp, UCX's
// own). It reads the process's own socket descriptors and never closes them.
func KernelTCPCounts(listenPort int, peerPorts ...int) (velo, other TCPCounts, err error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return velo, other, err
	}
	isPeer := map[int]bool{}
	for _, p := range peerPorts {
		isPeer[p] = true
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || !strings.HasPrefix(link, "socket:") {
			continue
		}
		if typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_STREAM {
			continue
		}
		local, err := unix.Getsockname(fd)
		if err != nil {
			continue
		}
		remote, err := unix.Getpeername(fd) // fails on listeners
		if err != nil {
			continue
		}
		lp, rp := inetPort(local), inetPort(remote)
		if lp < 0 || rp < 0 {
			continue // not TCP/IP (a Unix socket)
		}
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			continue
		}
		c := &other
		if lp == listenPort || isPeer[rp] {
			c = &velo
		}
		c.Conns++
		c.BytesOut += info.Bytes_acked
		c.BytesIn += info.Bytes_received
	}
	return velo, other, nil
}

func inetPort(sa unix.Sockaddr) int {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return a.Port
	case *unix.SockaddrInet6:
		return a.Port
	}
	return -1
}
