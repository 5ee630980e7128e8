package twoproc

import "fmt"

// TCPCounts is what the kernel counted on a set of TCP connections.
type TCPCounts struct {
	Conns    int
	BytesOut uint64 // sent and acknowledged by the peer (tcpi_bytes_acked)
	BytesIn  uint64 // received (tcpi_bytes_received)
}

func (c TCPCounts) String() string {
	return fmt.Sprintf("%d connections, %d bytes out, %d bytes in", c.Conns, c.BytesOut, c.BytesIn)
}
