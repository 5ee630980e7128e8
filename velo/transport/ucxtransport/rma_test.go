//go:build cgo && linux

package ucxtransport

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/transport"
	"golang.org/x/sys/unix"
)

// mapped returns n bytes of mmap'd memory (the kind the RDMA registry registers), filled with
// random bytes, unmapped at the end of the test unless the test unmaps it itself.
func mapped(t testing.TB, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(b) }) // EINVAL if the test already unmapped it
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// rmaPair links an owner and a consumer (each registered with the other).
func rmaPair(t testing.TB) (owner, consumer node) {
	owner, consumer = newNode(t, nil), newNode(t, nil)
	link(t, owner, consumer)
	return owner, consumer
}

// TestRMARegisterGetDeregister: GETs of whole regions and of ranges inside them return the owner's
// bytes (checked by SHA-256), every registration has its own key, and deregistration is
// idempotent.
func TestRMARegisterGetDeregister(t *testing.T) {
	owner, consumer := rmaPair(t)
	if !consumer.CanGet(owner.h.id) || consumer.RMABackend() != "ucx" {
		t.Fatal("the consumer cannot GET from a registered owner")
	}
	for _, n := range []int{1, 4096, 100_000, 1 << 20, 8 << 20} {
		mem := mapped(t, (n+4095)/4096*4096)[:n]
		reg, err := owner.RegisterMemory(mem)
		if err != nil {
			t.Fatal(err)
		}
		if reg.Len() != n || len(reg.Key()) == 0 {
			t.Fatalf("registration of %d bytes: len %d key %d bytes", n, reg.Len(), len(reg.Key()))
		}
		dst := make([]byte, n)
		if err := consumer.Get(testCtx(t), owner.h.id, reg.Key(), 0, dst); err != nil {
			t.Fatalf("GET %d bytes: %v", n, err)
		}
		if sha256.Sum256(dst) != sha256.Sum256(mem) {
			t.Fatalf("GET %d bytes: checksum differs", n)
		}
		if n > 2 {
			part := make([]byte, n/2)
			if err := consumer.Get(testCtx(t), owner.h.id, reg.Key(), 1, part); err != nil {
				t.Fatalf("GET inside the region: %v", err)
			}
			if !bytes.Equal(part, mem[1:1+n/2]) {
				t.Fatal("GET inside the region returned other bytes")
			}
		}
		if err := consumer.Get(testCtx(t), owner.h.id, reg.Key(), 0, make([]byte, n+1)); !errors.Is(err, ucx.ErrOutOfRange) {
			t.Fatalf("GET past the region: %v", err)
		}
		deregister(t, reg)
		deregister(t, reg)
	}
	// Two registrations of the same memory have different keys.
	mem := mapped(t, 4096)
	r1, err := owner.RegisterMemory(mem)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := owner.RegisterMemory(mem)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(r1.Key(), r2.Key()) {
		t.Fatal("two registrations share a key")
	}
	deregister(t, r1)
	dst := make([]byte, 4096)
	if err := consumer.Get(testCtx(t), owner.h.id, r2.Key(), 0, dst); err != nil || !bytes.Equal(dst, mem) {
		t.Fatalf("the second registration died with the first: %v", err)
	}
	deregister(t, r2)
	// Only registered owners can be read.
	stranger := newNode(t, nil)
	if stranger.CanGet(owner.h.id) {
		t.Fatal("CanGet true for an owner never registered")
	}
	if err := stranger.Get(testCtx(t), owner.h.id, r2.Key(), 0, dst); !errors.Is(err, transport.ErrUnknownPeer) {
		t.Fatalf("GET from an unregistered owner: %v", err)
	}
}

// TestUnusableRkeyIsRefusedOverTCP: a stale key (its registration revoked, the memory even
// unmapped) and garbage keys never yield owner bytes and never crash the owner: the consumer checks
// framing and checksum before UCX sees the key, and the owner's engine checks slot, token and range
// before it reads. Over tcp UCX itself checks nothing (see package ucx), so without those checks
// the stale GET would return whatever the owner now has there, or crash it.
//
// Do not run this on InfiniBand: there a GET goes to the NIC, and an unusable key aborts the
// reading process inside UCX. It skips itself when the endpoint's RMA lanes are hardware-keyed.
func TestUnusableRkeyIsRefusedOverTCP(t *testing.T) {
	owner, consumer := rmaPair(t)
	mem := mapped(t, 1<<20)
	reg, err := owner.RegisterMemory(mem)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 4096)
	if err := consumer.Get(testCtx(t), owner.h.id, reg.Key(), 0, dst); err != nil {
		t.Fatal(err)
	}
	if mode := consumer.rmaMode(t, owner.h.id); mode != ucx.RMAGuarded {
		t.Skipf("the endpoint's RMA lanes are hardware-keyed (%v): this test is for software RMA (UCX_TLS=tcp) only", mode)
	}
	key := reg.Key()
	deregister(t, reg)
	// Poison: the owner writes new bytes where the old registration was, then unmaps it.
	copy(mem, bytes.Repeat([]byte("owner-secret"), len(mem)/12))
	sentinel := bytes.Repeat([]byte{0xA5}, len(dst))
	check := func(what string, err error, want error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: GET succeeded", what)
		}
		if want != nil && !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
		if !bytes.Equal(dst, sentinel) {
			t.Fatalf("%s: the destination was written", what)
		}
	}
	copy(dst, sentinel)
	check("stale key", consumer.Get(testCtx(t), owner.h.id, key, 0, dst), ucx.ErrRemoteKeyRevoked)
	if err := unix.Munmap(mem); err != nil {
		t.Fatal(err)
	}
	check("stale key of unmapped memory", consumer.Get(testCtx(t), owner.h.id, key, 0, dst), ucx.ErrRemoteKeyRevoked)

	live := mapped(t, 8192)
	lreg, err := owner.RegisterMemory(live)
	if err != nil {
		t.Fatal(err)
	}
	defer deregister(t, lreg)
	good := lreg.Key()
	k, err := ucx.ParseSealedKey(good)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 0x40
	forgedToken := k
	forgedToken.Token ^= 1
	wider := k
	wider.Length *= 2
	random := make([]byte, len(good))
	rand.Read(random)
	for _, c := range []struct {
		name string
		key  []byte
		want error
	}{
		{"empty", nil, ucx.ErrInvalidRemoteKey},
		{"truncated", good[:len(good)-5], ucx.ErrInvalidRemoteKey},
		{"one bit flipped", flipped, ucx.ErrInvalidRemoteKey},
		{"random bytes", random, ucx.ErrInvalidRemoteKey},
		{"raw UCX key", k.UCXKey, ucx.ErrInvalidRemoteKey},
		{"forged token", ucx.AppendSealedKey(nil, forgedToken), ucx.ErrRemoteKeyRevoked},
		{"forged wider region", ucx.AppendSealedKey(nil, wider), ucx.ErrOutOfRange},
	} {
		copy(dst, sentinel)
		offset := uint64(0)
		if c.name == "forged wider region" {
			offset = 8192 // inside the forged region, past the real one
		}
		check(c.name, consumer.Get(testCtx(t), owner.h.id, c.key, offset, dst), c.want)
	}
	// The owner is alive and serves its live registration.
	if err := consumer.Get(testCtx(t), owner.h.id, good, 0, dst); err != nil || !bytes.Equal(dst, live[:len(dst)]) {
		t.Fatalf("owner after the refusals: %v", err)
	}
}

// rmaMode is the GET path the engine uses on n's endpoint to peer.
func (n node) rmaMode(t testing.TB, peer transport.InstanceID) ucx.RMAMode {
	t.Helper()
	p, _, err := n.lookup(peer)
	if err != nil {
		t.Fatal(err)
	}
	p.sendMu.Lock()
	oc, err := n.connLocked(testCtx(t), p)
	p.sendMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	mode, err := oc.c.RMAMode(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return mode
}
