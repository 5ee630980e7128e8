//go:build !linux

package tcp

import (
	"errors"
	"net"
)

// tcpInfo needs Linux's TCP_INFO.
func tcpInfo(net.Conn) (acked, received uint64, err error) {
	return 0, 0, errors.ErrUnsupported
}
