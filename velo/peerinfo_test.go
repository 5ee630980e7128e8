package velo

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/metrics"
)

func TestPeerInfoRoundTrips(t *testing.T) {
	v := newInstance(t)
	p := v.PeerInfo()
	j, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var pj PeerInfo
	if err := json.Unmarshal(j, &pj); err != nil || pj.ID != p.ID || pj.Incarnation != p.Incarnation || string(pj.Addresses["tcp"]) != string(p.Addresses["tcp"]) {
		t.Fatalf("JSON round trip: %s -> %+v, %v", j, pj, err)
	}
	b, _ := p.MarshalBinary()
	var pb PeerInfo
	if err := pb.UnmarshalBinary(b); err != nil || pb.ID != p.ID || string(pb.Addresses["tcp"]) != string(p.Addresses["tcp"]) {
		t.Fatalf("binary round trip: %+v, %v", pb, err)
	}
}

func TestRegisterPeerValidatesEverything(t *testing.T) {
	a, b := newInstance(t), newInstance(t)
	good := b.PeerInfo()
	with := func(f func(*PeerInfo)) PeerInfo {
		p := PeerInfo{ID: good.ID, Incarnation: good.Incarnation, Addresses: map[string][]byte{}}
		for k, v := range good.Addresses {
			p.Addresses[k] = v
		}
		f(&p)
		return p
	}
	cases := map[string]PeerInfo{
		"no id":          with(func(p *PeerInfo) { p.ID = 0 }),
		"no addresses":   with(func(p *PeerInfo) { p.Addresses = nil }),
		"self":           a.PeerInfo(),
		"garbage blob":   with(func(p *PeerInfo) { p.Addresses["tcp"] = []byte{1, 50, 'x'} }),
		"future version": with(func(p *PeerInfo) { p.Addresses["tcp"] = append([]byte{9}, good.Addresses["tcp"][1:]...) }),
		"only ucx":       with(func(p *PeerInfo) { delete(p.Addresses, "tcp"); p.Addresses["ucx"] = []byte{2, 0} }),
		"empty blob":     with(func(p *PeerInfo) { p.Addresses["tcp"] = nil }),
	}
	for name, p := range cases {
		if err := a.RegisterPeer(tctx(t), p); !errors.Is(err, ErrInvalidEndpoint) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, raw := range map[string]string{
		"json id":   `{"id":"xyz","incarnation":"1","addresses":{"tcp":"AQ=="}}`,
		"json type": `{"id":5}`,
		"json none": `{"id":"05","incarnation":"01","addresses":{}}`,
	} {
		var p PeerInfo
		if err := json.Unmarshal([]byte(raw), &p); !errors.Is(err, ErrInvalidEndpoint) {
			t.Errorf("%s: %v", name, err)
		}
	}
	var p PeerInfo
	if err := p.UnmarshalBinary([]byte("VPI\x07")); !errors.Is(err, ErrInvalidEndpoint) {
		t.Errorf("binary version: %v", err)
	}
	// A UCX address beside a valid TCP one is ignored by an instance without UCX.
	extra := with(func(p *PeerInfo) { p.Addresses["ucx"] = []byte{2, 1, 2, 3} })
	if err := a.RegisterPeer(tctx(t), extra); err != nil {
		t.Fatal(err)
	}
}

func TestMalformedFrameLosesNothingElse(t *testing.T) {
	v := newInstance(t)
	got := make(chan string, 2)
	v.RegisterHandler("x", func(ctx context.Context, m *Message) ([]byte, error) {
		got <- string(m.Payload)
		return nil, nil
	})
	// Speak the TCP hello by hand, then send one garbage frame and one good frame.
	addr, _ := wire.DecodeTCPAddr(v.PeerInfo().Addresses["tcp"])
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	hello, _ := wire.AppendHello(nil, wire.Hello{Version: wire.HelloVersion, ID: 77, Incarnation: 1, MaxFrame: 1 << 20})
	nc.Write(hello)
	nc.SetReadDeadline(time.Now().Add(testWait))
	if _, err := nc.Read(make([]byte, wire.HelloMaxSize)); err != nil {
		t.Fatal(err)
	}
	frame := func(b []byte) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...) }
	nc.Write(frame([]byte{9, 9, 9}))
	good, _ := wire.AppendCallHeader(nil, wire.Header{Kind: wire.KindOneWay}, "x")
	nc.Write(frame(append(good, "fine"...)))
	select {
	case s := <-got:
		if s != "fine" {
			t.Fatalf("got %q", s)
		}
	case <-time.After(testWait):
		t.Fatal("the good frame after a malformed one was lost")
	}
	if n := metric(t, v, metrics.MessageErrorsTotal, map[string]string{"kind": "malformed_frame"}); n != 1 {
		t.Fatalf("malformed frames counted: %v", n)
	}
}
