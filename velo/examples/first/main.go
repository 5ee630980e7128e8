// Command first is a first velo program, written only against the README and go doc, and the one
// the README's "Using velo from your own module" steps build from a module of their own. It runs
// two instances in two processes (it starts itself again as the owner): the consumer registers the
// owner, sends it 100 echo requests, fetches a 32 MiB payload the owner staged in pinned memory
// with Get, then one with GetInto, and checks every byte and that both moved on the RDMA path.
// Both sides print their velo_rendezvous_rdma_path_total lines. It exits non-zero if anything
// did not hold.
//
//	make ucx-static && UCX_TLS=tcp go run -tags ucx_static ./velo/examples/first
//
// -tags ucx_static links velo's static UCX, whose patch set refuses software RMA without a key;
// the UCX transport refuses any other UCX unless VELO_UCX_TRUST_NETWORK=1 (docs/security.md).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

const payloadSize = 32 << 20

// The owner runs as a child of the consumer; the two swap their PeerInfo over the child's
// standard input and output, one JSON line each way, and the owner then sends its handles.
const ownerEnv = "VELO_FIRST_ROLE"

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	if os.Getenv(ownerEnv) == "owner" {
		err = owner(ctx)
	} else {
		err = consumer(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "first:", err)
		os.Exit(1)
	}
}

// start creates an instance with a TCP control plane on loopback and the UCX transport beside it.
// Only velo.WithLogger is given a logger: it reaches every part of the instance.
func start(ctx context.Context) (*velo.Velo, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctl, err := tcp.New(tcp.Config{Listener: ln})
	if err != nil {
		return nil, err
	}
	u, err := ucxtransport.New(ucxtransport.Config{EagerEndpoints: true})
	if err != nil {
		ctl.Close()
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return velo.New(ctx, velo.WithLogger(log), velo.WithTransport(ctl), velo.WithUCXTransport(u))
}

// handles is what the owner sends once it staged the payloads.
type handles struct {
	Get, GetInto velo.Handle
	SHA256       [32]byte
}

func owner(ctx context.Context) error {
	v, err := start(ctx)
	if err != nil {
		return err
	}
	defer v.Close()
	if err := v.RegisterHandler("echo", func(ctx context.Context, m *velo.Message) ([]byte, error) {
		return m.Payload, nil
	}); err != nil {
		return err
	}
	in := json.NewDecoder(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	var peer velo.PeerInfo
	if err := in.Decode(&peer); err != nil {
		return fmt.Errorf("reading the consumer's PeerInfo: %w", err)
	}
	if err := v.RegisterPeer(ctx, peer); err != nil {
		return err
	}
	if err := out.Encode(v.PeerInfo()); err != nil {
		return err
	}
	data := make([]byte, payloadSize)
	if _, err := rand.Read(data); err != nil {
		return err
	}
	// A handle carries one reference, and Get + Release spends it: stage one per get.
	h1, err := v.StageDataPinned(ctx, data)
	if err != nil {
		return err
	}
	h2, err := v.StageDataPinned(ctx, data)
	if err != nil {
		return err
	}
	if err := out.Encode(handles{Get: h1, GetInto: h2, SHA256: sha256.Sum256(data)}); err != nil {
		return err
	}
	// Wait until the consumer is done (it closes our standard input), then report.
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return printPaths("owner", v)
}

func consumer(ctx context.Context) error {
	v, err := start(ctx)
	if err != nil {
		return err
	}
	defer v.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	child := exec.CommandContext(ctx, self)
	child.Env = append(os.Environ(), ownerEnv+"=owner")
	child.Stderr = os.Stderr
	toOwner, err := child.StdinPipe()
	if err != nil {
		return err
	}
	fromOwner, err := child.StdoutPipe()
	if err != nil {
		return err
	}
	if err := child.Start(); err != nil {
		return err
	}
	defer child.Wait()
	defer toOwner.Close()
	in := json.NewDecoder(fromOwner)
	if err := json.NewEncoder(toOwner).Encode(v.PeerInfo()); err != nil {
		return err
	}
	var peer velo.PeerInfo
	if err := in.Decode(&peer); err != nil {
		return fmt.Errorf("reading the owner's PeerInfo: %w", err)
	}
	if err := v.RegisterPeer(ctx, peer); err != nil {
		return err
	}
	for i := range 100 {
		msg := []byte(fmt.Sprintf("echo %d", i))
		answer, err := v.Request(ctx, peer.ID, "echo", msg)
		if err != nil {
			return err
		}
		if !bytes.Equal(answer, msg) {
			return fmt.Errorf("echo %d answered %q", i, answer)
		}
	}
	var hs handles
	if err := in.Decode(&hs); err != nil {
		return fmt.Errorf("reading the handles: %w", err)
	}
	l, err := v.Get(ctx, hs.Get)
	if err != nil {
		return err
	}
	if err := check("Get", l, l.Bytes(), hs.SHA256); err != nil {
		return err
	}
	dst := make([]byte, hs.GetInto.Size)
	l, err = v.GetInto(ctx, hs.GetInto, dst)
	if err != nil {
		return err
	}
	if err := check("GetInto", l, dst, hs.SHA256); err != nil {
		return err
	}
	if err := printPaths("consumer", v); err != nil {
		return err
	}
	toOwner.Close()
	if err := child.Wait(); err != nil {
		return fmt.Errorf("the owner: %w", err)
	}
	fmt.Println("first: 100 echoes, Get and GetInto of 32 MiB on the RDMA path")
	return nil
}

// check compares the bytes, requires the RDMA path, and ends the lease.
func check(what string, l *velo.Lease, got []byte, want [32]byte) error {
	defer l.Release(context.Background())
	if sha256.Sum256(got) != want {
		return fmt.Errorf("%s: the payload differs", what)
	}
	if l.Path != metrics.PathRDMA {
		return fmt.Errorf("%s took the %s path (reason %s), not the RDMA path", what, l.Path, l.Reason)
	}
	return nil
}

func printPaths(who string, v *velo.Velo) error {
	lines, err := metrics.Lines(v.Metrics(), metrics.RDMAPathTotal)
	if err != nil {
		return err
	}
	for _, line := range lines {
		if !strings.HasSuffix(line, " 0") { // the series that counted something
			fmt.Fprintf(os.Stderr, "%s: %s\n", who, line)
		}
	}
	n, err := metrics.Value(v.Metrics(), metrics.RDMAPathTotal, metrics.PathLabels(metrics.PathRDMA, metrics.ReasonOK))
	if err != nil {
		return err
	}
	if n != 2 {
		return errors.New(who + ": the two transfers did not both count rdma/ok")
	}
	return nil
}
