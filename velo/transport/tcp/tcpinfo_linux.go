//go:build linux

package tcp

import (
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// tcpInfo returns tcpi_bytes_acked and tcpi_bytes_received of one connection.
func tcpInfo(nc net.Conn) (acked, received uint64, err error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return 0, 0, fmt.Errorf("tcp: KernelCounts: %T has no socket", nc)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, 0, fmt.Errorf("tcp: KernelCounts: %w", err)
	}
	var info *unix.TCPInfo
	var serr error
	if err := raw.Control(func(fd uintptr) { info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
		return 0, 0, fmt.Errorf("tcp: KernelCounts: %w", err)
	}
	if serr != nil {
		return 0, 0, fmt.Errorf("tcp: KernelCounts: getsockopt TCP_INFO: %w", serr)
	}
	return info.Bytes_acked, info.Bytes_received, nil
}
