package twoproc

import (
	"io"
	"net"
	"testing"
)

// TestKernelTCPCounts moves known bytes over two loopback connections and finds them in the
// kernel's counts, split by port.
func TestKernelTCPCounts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	move := func(l net.Listener, n int) (net.Conn, net.Conn) {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		go c.Write(make([]byte, n))
		if _, err := io.ReadFull(s, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		return c, s
	}
	c1, s1 := move(ln, 1000)
	defer c1.Close()
	defer s1.Close()
	c2, s2 := move(other, 50_000)
	defer c2.Close()
	defer s2.Close()
	// The velo side sees both ends of the first connection (the accepted one by its local port,
	// the dialled one by its remote port); the rest is the second connection's two ends.
	v, o, err := KernelTCPCounts(port, port)
	if err != nil {
		t.Fatal(err)
	}
	if v.Conns != 2 || v.BytesIn != 1000 || o.Conns != 2 || o.BytesIn != 50_000 {
		t.Fatalf("velo %v; other %v", v, o)
	}
}
