//go:build cgo && linux

package ucx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// amSizes sweeps the AM protocol boundaries over tcp: short (< 8 KiB), eager zcopy,
// the default rendezvous threshold (~20 KiB, which AMEager must not cross), multi-
// fragment eager up to 8 MiB.
var amSizes = []int{0, 1, 100, 8185, 8186, 20553, 20554, 65536, 1 << 20, 8 << 20}

// TestLowAMSendExits drives ucp_am_send_nbx through its three completion exits for every
// size: done at once (NULL), a request completed later through the event ring, and an
// error (on an endpoint whose peer is gone). Payloads are checksummed at the receiver.
func TestLowAMSendExits(t *testing.T) {
	p := newLowPair(t)
	if err := p.b.SetAMHandler(3); err != nil {
		t.Fatal(err)
	}
	immediate, requests := 0, 0
	for _, n := range amSizes {
		payload := allocFilled(t, max(n, 1), uint64(n)).Bytes()[:n]
		header := []byte(fmt.Sprintf("size=%d", n))
		var got []byte
		var gotHeader string
		received := false
		req, err := p.ab.SendAM(3, header, payload, AMEager)
		if err != nil {
			t.Fatalf("%d bytes: SendAM: %v", n, err)
		}
		if req == nil {
			immediate++
		} else {
			requests++
		}
		p.until(t, func() bool { return received && (req == nil || req.Done()) }, func(w *Worker, ev *Event) {
			if ev.Kind == EventAM && w == p.b {
				if ev.AM.Rendezvous {
					t.Errorf("%d bytes arrived by rendezvous although AMEager was set", n)
				}
				got = append([]byte(nil), ev.AM.Data...)
				gotHeader = string(ev.AM.Header)
				received = true
			}
		})
		if req != nil && req.Err() != nil {
			t.Fatalf("%d bytes: request failed: %v", n, req.Err())
		}
		if gotHeader != string(header) || len(got) != n || digest(got) != digest(payload) {
			t.Fatalf("%d bytes: received header %q and %d bytes with a different checksum", n, gotHeader, len(got))
		}
	}
	if immediate == 0 || requests == 0 {
		t.Fatalf("want both exits: %d immediate, %d through requests", immediate, requests)
	}
	t.Logf("%d sizes completed at once, %d through requests", immediate, requests)

	// The error exit: a third worker goes away; the endpoint to it fails.
	c, err := p.ctx.NewWorker()
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := c.Address()
	ac, err := p.a.Connect(addr, EndpointOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Wire up, then destroy the peer.
	first, _ := ac.SendAM(3, nil, []byte("x"), AMEager)
	deadline := time.Now().Add(testTimeout)
	for first != nil && !first.Done() && time.Now().Before(deadline) {
		p.a.Progress()
		c.Progress()
		p.a.Poll(func(*Event) {})
		c.Poll(func(*Event) {})
	}
	c.Close()
	failed := false
	p.until(t, func() bool { return failed }, func(w *Worker, ev *Event) {
		if ev.Kind == EventEndpointError && ev.Endpoint == ac {
			failed = true
			if !errors.Is(ev.Err, ErrPeerFailure) {
				t.Errorf("endpoint error %v does not match ErrPeerFailure", ev.Err)
			}
		}
	})
	for _, n := range amSizes {
		payload := make([]byte, n)
		req, err := ac.SendAM(3, nil, payload, AMEager)
		if err == nil {
			t.Fatalf("%d bytes: SendAM on a failed endpoint succeeded (request %v)", n, req)
		}
		if !errors.Is(err, ErrEndpointFailed) {
			t.Fatalf("%d bytes: error %v does not wrap ErrEndpointFailed", n, err)
		}
	}
	if r, _ := ac.Close(CloseForce); r != nil {
		p.until(t, r.Done, nil)
	}
}

// TestLowRemoteKeyValidation: keys that would make ucp_ep_rkey_unpack read past their end
// never reach it.
func TestLowRemoteKeyValidation(t *testing.T) {
	p := newLowPair(t)
	mem := allocFilled(t, 4096, 1)
	mh, err := p.ctx.MapMemory(mem.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	defer mh.Unmap()
	packed, err := mh.PackRemoteKey()
	if err != nil {
		t.Fatal(err)
	}
	rk, err := p.ab.UnpackRemoteKey(packed)
	if err != nil {
		t.Fatalf("a genuine key: %v", err)
	}
	rk.Destroy()
	for name, bad := range map[string][]byte{
		"all 0xff (protocol v2 of UCX 1.13 crashes on it)": bytes.Repeat([]byte{0xff}, 64),
		"truncated":        packed[:len(packed)-1],
		"empty":            {},
		"header only":      packed[:8],
		"unknown mem type": append(append([]byte(nil), packed[:8]...), append([]byte{200}, packed[9:]...)...),
	} {
		if _, err := p.ab.UnpackRemoteKey(bad); !errors.Is(err, ErrInvalidRemoteKey) {
			t.Errorf("%s: got %v, want ErrInvalidRemoteKey", name, err)
		}
	}
}

// TestUCXOverTCPDoesNotCheckRemoteKeys records what UCX itself enforces when RMA is
// emulated in software (tcp): nothing. A GET with the key of a region that was unmapped,
// or with a structurally valid key of zeros, still returns the owner's bytes. This is
// why Engine.Get uses the guarded GET on such transports.
//
// velo's static UCX (make ucx-static) carries a guard patch set that closes this: there the
// same GETs, and one with the live key too, complete with UCS_ERR_REJECTED, write nothing, are
// counted by the owner's guard, and the owner goes on serving.
func TestUCXOverTCPDoesNotCheckRemoteKeys(t *testing.T) {
	p := newLowPair(t)
	if rmaLanesKeyed(p.ab.Info()) {
		t.Skip("this endpoint has hardware-keyed RMA lanes (UCX_TLS selects InfiniBand); the claim is about software RMA")
	}
	guarded := guardEnforced(t)
	mem := allocFilled(t, 4096, 99)
	mh, err := p.ctx.MapMemory(mem.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	packed, _ := mh.PackRemoteKey()
	fresh := allocFilled(t, 64, 0).Bytes()[:64] // what every destination holds before its GET
	get := func(packed []byte) ([]byte, error) {
		t.Helper()
		rk, err := p.ab.UnpackRemoteKey(packed)
		if err != nil {
			t.Fatal(err)
		}
		defer rk.Destroy()
		dst := allocFilled(t, 64, 0).Bytes()[:64]
		req, err := p.ab.Get(dst, mh.Addr(), rk)
		if err == nil && req != nil {
			p.until(t, req.Done, nil)
			err = req.Err()
		}
		return dst, err
	}
	refused := func(what string, packed []byte) {
		t.Helper()
		before := guardRefused(t).Get
		dst, err := get(packed)
		if !errors.Is(err, StatusRejected) {
			t.Fatalf("%s: the guarded UCX answered a software GET with %v, want UCS_ERR_REJECTED", what, err)
		}
		if !bytes.Equal(dst, fresh) {
			t.Fatalf("%s: the refused GET wrote into its destination", what)
		}
		if after := guardRefused(t).Get; after != before+1 {
			t.Fatalf("%s: the guard's GET counter went from %d to %d, want one refusal", what, before, after)
		}
	}
	if guarded {
		refused("the live key", packed)
	}
	if err := mh.Unmap(); err != nil {
		t.Fatal(err)
	}
	zeros := make([]byte, len(packed))
	copy(zeros, packed[:8]) // same memory-domain map, so the layout stays valid
	if guarded {
		refused("the key of an unmapped region", packed)
		refused("a zeroed key", zeros)
		lowOwnerServes(t, p)
		t.Log("the linked UCX's guard refused the three software GETs (UCS_ERR_REJECTED, nothing written, counted); the owner serves on")
		return
	}
	if got, err := get(packed); err != nil {
		t.Fatal(err)
	} else if !bytes.Equal(got, mem.Bytes()[:64]) {
		t.Fatalf("after ucp_mem_unmap the GET returned other bytes; has UCX started checking keys over %s? Update docs/ucx.md", testTLS)
	}
	if got, err := get(zeros); err != nil {
		t.Fatal(err)
	} else if !bytes.Equal(got, mem.Bytes()[:64]) {
		t.Fatalf("a zeroed key returned other bytes")
	}
}

// lowOwnerServes checks that the pair's owner worker still serves: an active message from a
// reaches b.
func lowOwnerServes(t *testing.T, p *lowPair) {
	t.Helper()
	if err := p.b.SetAMHandler(5); err != nil {
		t.Fatal(err)
	}
	req, err := p.ab.SendAM(5, nil, []byte("still here"), AMEager)
	if err != nil {
		t.Fatalf("an active message after the refusals: %v", err)
	}
	got := ""
	p.until(t, func() bool { return got != "" && (req == nil || req.Done()) }, func(w *Worker, ev *Event) {
		if ev.Kind == EventAM && w == p.b {
			got = string(ev.AM.Data)
		}
	})
	if got != "still here" {
		t.Fatalf("the owner received %q", got)
	}
}

// TestUCXOverTCPCrashesOwnerOnFreedMemory records the worse half: an owner that frees
// memory it once registered dies with SIGSEGV when a peer GETs it, because UCX's software
// GET reads the address without checking anything. The engine never unmaps memory while
// a guarded reply reads it and never serves a revoked key.
//
// velo's static UCX (make ucx-static) refuses that GET: there the test asserts the owner's
// guard turns it down (UCS_ERR_REJECTED, nothing written, counted) and the owner lives on.
//
// It also checks that such a crash is a crash: the owner exits with a non-zero status. By
// default the binding hands the fault signals to the Go runtime before main (capi.c), which
// reports the fault in C code and exits with status 2; with UCX_HANDLE_ERRORS=bt set by the
// user, UCX's handler prints its backtrace and the process dies by the signal.
func TestUCXOverTCPCrashesOwnerOnFreedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process that crashes on purpose")
	}
	guarded := guardEnforced(t)
	for _, tc := range []struct {
		name, env, report string
		status            func(syscall.WaitStatus) bool
	}{
		{"go runtime", "-UCX_HANDLE_ERRORS", "signal arrived during cgo execution",
			func(ws syscall.WaitStatus) bool { return ws.Exited() && ws.ExitStatus() == 2 }},
		{"UCX_HANDLE_ERRORS=bt", "UCX_HANDLE_ERRORS=bt", "Caught signal 11",
			func(ws syscall.WaitStatus) bool { return ws.Signaled() && ws.Signal() == syscall.SIGSEGV }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newLowPair(t)
			if p.ctx.protoV2 && p.ctx.traits.v2Experimental {
				t.Skip("protocol v2 on UCX 1.13: the consumer's own UCX asserts (stubs.c) when the owner dies mid-GET")
			}
			info, child := startChild(t, "raw-owner", tc.env)
			ep, err := p.a.Connect(info.Address, EndpointOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rmaLanesKeyed(ep.Info()) {
				t.Skip("hardware-keyed RMA lanes; the claim is about software RMA")
			}
			if line := child.ask(t, "munmap"); line != "unmapped" {
				t.Fatalf("child said %q", line)
			}
			rk, err := ep.UnpackRemoteKey(info.RawKey)
			if err != nil {
				t.Fatal(err)
			}
			defer rk.Destroy()
			dst := allocFilled(t, 64, 0).Bytes()[:64]
			fresh := append([]byte(nil), dst...)
			req, err := ep.Get(dst, info.Base, rk)
			if err == nil && req != nil {
				p.until(t, func() bool { return req.Done() || ep.Err() != nil }, nil)
				err = req.Err()
			}
			if guarded {
				ownerRefusedFreedGet(t, child, err, dst, fresh)
				if r, _ := ep.Close(CloseForce); r != nil {
					p.until(t, r.Done, nil)
				}
				return
			}
			select {
			case <-child.exited:
			case <-time.After(testTimeout):
				t.Fatal("the owner survived a GET of freed memory; has UCX started checking? Update docs/ucx.md")
			}
			ws, _ := child.cmd.ProcessState.Sys().(syscall.WaitStatus)
			if ws.Exited() && ws.ExitStatus() == 0 {
				t.Fatalf("the owner faulted and exited with status 0: a supervisor would not restart it\n%s", child.stderr.String())
			}
			if !tc.status(ws) || !strings.Contains(child.stderr.String(), tc.report) {
				t.Fatalf("owner ended with %v; want the %s report (%q):\n%s", child.cmd.ProcessState, tc.name, tc.report, child.stderr.String())
			}
			t.Logf("owner died as expected: %v", child.cmd.ProcessState)
			if r, _ := ep.Close(CloseForce); r != nil {
				p.until(t, r.Done, nil)
			}
		})
	}
}

// ownerRefusedFreedGet asserts what the guarded UCX does with a GET of memory its owner freed
// (getErr and dst are the GET's outcome, fresh what dst held before): the owner refuses it
// without reading the address (UCS_ERR_REJECTED, nothing written), counts it, and lives on to
// answer.
func ownerRefusedFreedGet(t *testing.T, child *childProc, getErr error, dst, fresh []byte) {
	t.Helper()
	if !errors.Is(getErr, StatusRejected) {
		t.Fatalf("a GET of freed memory on the guarded UCX gave %v, want UCS_ERR_REJECTED", getErr)
	}
	if !bytes.Equal(dst, fresh) {
		t.Fatal("the refused GET wrote into its destination")
	}
	select {
	case <-child.exited:
		t.Fatalf("the owner exited (%v) although its guard refused the GET", child.cmd.ProcessState)
	default:
	}
	var refused GuardRefusals
	if err := json.Unmarshal([]byte(child.ask(t, "guard")), &refused); err != nil {
		t.Fatalf("the owner's guard counters: %v", err)
	}
	if refused.Get != 1 {
		t.Fatalf("the owner counted %d refused GETs, want 1 (%+v)", refused.Get, refused)
	}
	t.Logf("the owner's guard refused the GET of freed memory and the owner lives on: %+v", refused)
}

func TestResourceQuery(t *testing.T) {
	res, err := QueryResources()
	if err != nil {
		t.Fatal(err)
	}
	var tcp *Transport
	for _, c := range res.Components {
		for _, d := range c.MemoryDomains {
			for i, tr := range d.Transports {
				if tr.Name == "tcp" && tr.Err == nil {
					tcp = &d.Transports[i]
				}
			}
		}
	}
	if tcp == nil {
		t.Fatalf("no usable tcp transport in %v", res)
	}
	if tcp.Caps.HasGet() || !tcp.Caps.AMShort || !tcp.Caps.PeerFailure {
		t.Errorf("tcp caps %+v: want AM and peer-failure handling, no hardware GET", tcp.Caps)
	}
	if !res.Support.Verbs {
		t.Logf("this UCX has no verbs support: %v", res)
	}
	var sb strings.Builder
	res.WriteTo(&sb)
	if !strings.Contains(sb.String(), "transport tcp/") {
		t.Errorf("table lacks the tcp transport:\n%s", sb.String())
	}
	t.Logf("%v", res)
}

func TestVersion(t *testing.T) {
	v := Version()
	if v.Major != 1 || v.Minor < 13 {
		t.Fatalf("linked UCX %+v; the binding needs 1.13 or newer", v)
	}
	if !strings.HasPrefix(v.String, fmt.Sprintf("%d.%d", v.Major, v.Minor)) {
		t.Errorf("version string %q does not start with %d.%d", v.String, v.Major, v.Minor)
	}
	if v.APIMajor != v.Major || v.APIMinor > v.Minor {
		t.Errorf("compiled against UCP API %d.%d, linked %d.%d: the library is older than the headers", v.APIMajor, v.APIMinor, v.Major, v.Minor)
	}
}
