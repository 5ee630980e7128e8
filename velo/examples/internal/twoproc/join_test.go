package twoproc

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/internal/wire"
)

func newVelo(t *testing.T) *velo.Velo {
	t.Helper()
	v, err := velo.New(context.Background(), velo.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

type testFile struct {
	Owner
	Note string `json:"note"`
}

// announce starts an owner of a fresh run in dir, as the examples do.
func announce(t *testing.T, dir, note string) (*velo.Velo, *Joins, string) {
	t.Helper()
	v := newVelo(t)
	run := NewRun()
	js, err := AcceptJoins(v, run)
	if err != nil {
		t.Fatal(err)
	}
	if err := Announce(dir, testFile{Owner: Owner{Run: run, Peer: v.PeerInfo()}, Note: note}); err != nil {
		t.Fatal(err)
	}
	return v, js, run
}

// TestJoinOwnerPassesOverAStaleFile: owner.json left by an owner that is gone (killed: it had no
// chance to withdraw it) names a peer that does not answer; the consumer waits for the file to
// change and joins the owner that replaces it.
func TestJoinOwnerPassesOverAStaleFile(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	dead, _, _ := announce(t, dir, "stale")
	addr := dead.PeerInfo()
	dead.Close()
	// Where the dead owner listened, something that is not an owner now takes connections and
	// drops them; counting them tells when the consumer has tried the stale file.
	hostPort, err := wire.DecodeTCPAddr(addr.Addresses["tcp"])
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", hostPort)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var tried atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tried.Add(1)
			c.Close()
		}
	}()

	cons := newVelo(t)
	type result struct {
		f   testFile
		o   Owner
		err error
	}
	done := make(chan result, 1)
	go func() {
		var f testFile
		o, err := JoinOwner(ctx, "consumer", dir, cons, "127.0.0.1:1", &f)
		done <- result{f, o, err}
	}()
	for tried.Load() == 0 {
		select {
		case r := <-done:
			t.Fatalf("JoinOwner returned before it tried the stale owner: %+v", r)
		case <-ctx.Done():
			t.Fatal("the consumer never tried the owner the stale file names")
		case <-time.After(5 * time.Millisecond):
		}
	}
	live, joins, run := announce(t, dir, "live")
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.f.Note != "live" || r.o.Run != run || r.o.Peer.ID != live.ID() {
		t.Fatalf("joined %+v (note %q), want the live owner of run %s", r.o, r.f.Note, run)
	}
	j, err := joins.Wait(ctx)
	if err != nil || j.Peer.ID != cons.ID() || j.TCP != "127.0.0.1:1" || j.Run != run {
		t.Fatalf("the owner saw %+v, %v", j, err)
	}
	// Joined both ways: the owner can call the consumer.
	cons.RegisterHandler("ping", func(context.Context, *velo.Message) ([]byte, error) { return []byte("pong"), nil })
	if resp, err := live.Request(ctx, cons.ID(), "ping", nil); err != nil || string(resp) != "pong" {
		t.Fatalf("owner to consumer: %q %v", resp, err)
	}
}

// TestJoinOwnerRefusesAnotherRun: a consumer that names a run the owner is not running (it read
// an old file while a new owner of the same instance... or simply a wrong one) is refused.
func TestJoinOwnerRefusesAnotherRun(t *testing.T) {
	owner := newVelo(t)
	if _, err := AcceptJoins(owner, NewRun()); err != nil {
		t.Fatal(err)
	}
	cons := newVelo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := join(ctx, cons, Owner{Run: "not-this-one", Peer: owner.PeerInfo()}, ""); err == nil {
		t.Fatal("a join for another run was accepted")
	}
}

// TestWithdraw removes the file and tolerates its absence.
func TestWithdraw(t *testing.T) {
	dir := t.TempDir()
	if err := Announce(dir, testFile{Note: "x"}); err != nil {
		t.Fatal(err)
	}
	Withdraw(dir)
	Withdraw(dir)
	if _, err := os.Stat(filepath.Join(dir, OwnerFile)); !os.IsNotExist(err) {
		t.Fatalf("owner.json after Withdraw: %v", err)
	}
}
