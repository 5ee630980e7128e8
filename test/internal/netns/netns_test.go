package netns

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// Two namespaces reach each other over the veth link and see only their own address.
func TestPairCarriesTCP(t *testing.T) {
	p := New(t)
	var ln net.Listener
	if err := p.A.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(p.A.IP, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte("hello from " + p.A.Name))
	}()

	var got []byte
	if err := p.B.Do(func() error {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		got, err = io.ReadAll(c)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if want := "hello from " + p.A.Name; string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}

	// A process started in B sees B's veth and not A's.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := p.B.Command(ctx, "ip", "-o", "addr", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip addr in %s: %v: %s", p.B.Name, err, out)
	}
	if !strings.Contains(string(out), p.B.IP.String()) || strings.Contains(string(out), p.A.IP.String()+"/") {
		t.Fatalf("namespace %s sees the wrong addresses:\n%s", p.B.Name, out)
	}
}
