//go:build !linux

package twoproc

import "errors"

// KernelTCPCounts needs Linux's TCP_INFO.
func KernelTCPCounts(listenPort int, peerPorts ...int) (velo, other TCPCounts, err error) {
	return velo, other, errors.New("kernel TCP byte counts need Linux (TCP_INFO)")
}
