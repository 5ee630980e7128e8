package tcp

import (
	"net"

	"github.com/velo-go/velo/velo/transport"
)

// KernelCounts is what the kernel counted on this transport's live TCP connections to one peer
// (TCP_INFO). It is the outside witness a test needs to prove which bytes crossed velo's control
// plane: a rendezvous transfer on the RDMA path should move only control messages here, however
// large the payload.
type KernelCounts struct {
	Conns         int    // live connections to the peer (usually 1)
	BytesAcked    uint64 // tcpi_bytes_acked: sent and acknowledged by the peer
	BytesReceived uint64 // tcpi_bytes_received
}

// KernelCounts reads TCP_INFO of every live connection to peer and sums them. A connection that
// closed takes its counts with it: read before and after the transfer being measured, with the
// connection up. It fails with ErrUnsupported off Linux.
func (t *Transport) KernelCounts(peer transport.InstanceID) (KernelCounts, error) {
	t.mu.Lock()
	var conns []net.Conn
	if p := t.peers[peer]; p != nil {
		for c := range p.conns {
			conns = append(conns, c.nc)
		}
	}
	t.mu.Unlock()
	var k KernelCounts
	for _, nc := range conns {
		acked, received, err := tcpInfo(nc)
		if err != nil {
			return KernelCounts{}, err
		}
		k.Conns++
		k.BytesAcked += acked
		k.BytesReceived += received
	}
	return k, nil
}
