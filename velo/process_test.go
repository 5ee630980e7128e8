package velo

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/velo-go/velo/velo/metrics"
)

// These tests put the consumer in a separate OS process: the test binary runs itself again with
// VELO_HELPER_ROLE set, and TestHelperProcess plays the consumer there.

func startHelper(t *testing.T, role string, owner *Velo, h Handle, want [32]byte) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	info, _ := json.Marshal(owner.PeerInfo())
	ht, _ := h.MarshalText()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "VELO_HELPER_ROLE="+role, "VELO_HELPER_PEER="+string(info),
		"VELO_HELPER_HANDLE="+string(ht), "VELO_HELPER_SUM="+hex.EncodeToString(want[:]))
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, out
}

func TestHelperProcess(t *testing.T) {
	role := os.Getenv("VELO_HELPER_ROLE")
	if role == "" {
		t.Skip("runs only as the child of a process test")
	}
	var owner PeerInfo
	if err := json.Unmarshal([]byte(os.Getenv("VELO_HELPER_PEER")), &owner); err != nil {
		t.Fatal(err)
	}
	var h Handle
	if err := h.UnmarshalText([]byte(os.Getenv("VELO_HELPER_HANDLE"))); err != nil {
		t.Fatal(err)
	}
	opts := []Option{WithLogger(quietLogger())}
	if role == "stall" {
		opts = append(opts, WithPullWindow(1))
	}
	v, err := New(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := v.RegisterPeer(ctx, owner); err != nil {
		t.Fatal(err)
	}
	l, err := v.Get(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	got := sum(l.Bytes())
	if hex.EncodeToString(got[:]) != os.Getenv("VELO_HELPER_SUM") {
		t.Fatal("checksum differs")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lines, _ := metrics.Lines(v.Metrics(), metrics.RDMAPathTotal)
	fmt.Printf("FETCHED %x\n%s\n", got, strings.Join(lines, "\n"))
}

func TestTwoProcessTransfer(t *testing.T) {
	owner := newInstance(t)
	data := payload(8<<20, 21)
	h, _ := owner.StageData(tctx(t), data)
	cmd, out := startHelper(t, "fetch", owner, h, sum(data))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("consumer process failed: %v\n%s", err, out)
		}
	case <-time.After(2 * testWait):
		t.Fatalf("consumer process did not finish\n%s", out)
	}
	if !strings.Contains(out.String(), fmt.Sprintf("FETCHED %x", sum(data))) ||
		!strings.Contains(out.String(), `velo_rendezvous_rdma_path_total{path="chunked",reason="not_configured"} 1`) {
		t.Fatalf("consumer output:\n%s", out)
	}
	if n := metric(t, owner, metrics.RDMAPathTotal, map[string]string{"path": "chunked", "reason": "not_configured"}); n != 1 {
		t.Fatalf("owner counted %v acquires", n)
	}
	eventually(t, "the released payload freed", func() bool { s, l := owner.StagedCounts(); return s == 0 && l == 0 })
}

func TestConsumerProcessStoppedMidPullIsReapedByTTL(t *testing.T) {
	owner := newInstance(t, WithLeaseTTL(time.Second), WithChunkSize(4<<10))
	const size = 64 << 20
	data := payload(size, 33)
	h, _ := owner.StageData(tctx(t), data)
	cmd, out := startHelper(t, "stall", owner, h, sum(data))

	sent := func() float64 {
		return metric(t, owner, metrics.RendezvousBytesTotal, map[string]string{"direction": "sent", "path": "chunked"})
	}
	eventually(t, "the consumer pulling", func() bool { _, l := owner.StagedCounts(); return l == 1 && sent() > 0 })
	// Freeze the consumer mid-pull: its socket stays open, so only the lease TTL can free the slot.
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if s := sent(); s >= size {
		t.Fatalf("the transfer finished before the consumer stopped (%v bytes)\n%s", s, out)
	}
	// The owner drops its own reference; the open lease alone keeps the bytes.
	if err := owner.Unref(tctx(t), h); err != nil {
		t.Fatal(err)
	}
	if s, _ := owner.StagedCounts(); s != 1 {
		t.Fatal("the slot was freed under an open lease")
	}
	eventually(t, "the reaper ending the stalled lease and freeing the slot", func() bool {
		s, l := owner.StagedCounts()
		return s == 0 && l == 0
	})
	if n := metric(t, owner, metrics.LeasesReapedTotal, map[string]string{"cause": "ttl"}); n != 1 {
		t.Fatalf("leases reaped by TTL: %v", n)
	}
	if n := metric(t, owner, metrics.StagedBytes, nil); n != 0 {
		t.Fatalf("staged bytes after the reap: %v", n)
	}
	// Now kill it for good: the owner notices the peer down and nothing else is left to free.
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := owner.Metadata(tctx(t), h); err == nil {
		t.Fatal("the reaped payload is still there")
	}
}

func TestConsumerProcessKilledMidPullIsReapedAsPeerDown(t *testing.T) {
	owner := newInstance(t, WithChunkSize(4<<10)) // default 30 s TTL: only peer-down can be this quick
	data := payload(64<<20, 34)
	h, _ := owner.StageData(tctx(t), data)
	cmd, _ := startHelper(t, "stall", owner, h, sum(data))
	eventually(t, "the consumer pulling", func() bool { _, l := owner.StagedCounts(); return l == 1 })
	cmd.Process.Kill()
	cmd.Wait()
	eventually(t, "the dead consumer's lease ended", func() bool { _, l := owner.StagedCounts(); return l == 0 })
	if n := metric(t, owner, metrics.LeasesReapedTotal, map[string]string{"cause": "peer_down"}); n != 1 {
		t.Fatalf("leases reaped as peer down: %v", n)
	}
	// StageData's reference is still the owner's: the payload stays until it releases it.
	if md, err := owner.Metadata(tctx(t), h); err != nil || md.Refs != 1 {
		t.Fatalf("metadata: %+v, %v", md, err)
	}
}
