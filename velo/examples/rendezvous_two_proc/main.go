// Command rendezvous_two_proc moves a payload by rendezvous between two OS processes over TCP and
// proves it arrived intact.
//
// The owner stages random bytes and announces a run in owner.json: a random run ID, its PeerInfo,
// the handle and the payload's SHA-256. The consumer registers the owner from that file and joins
// the run with a message carrying its own PeerInfo (a file left in --dir by an earlier run names
// an owner that no longer answers; the consumer then waits for the new one). It fetches the
// payload, checks the SHA-256 and reports back over the messenger, and both print their
// velo_rendezvous_rdma_path_total lines.
//
//	go run ./examples/rendezvous_two_proc                    # starts both roles as children
//	go run ./examples/rendezvous_two_proc --role owner --dir /shared/rv --listen 0.0.0.0:0 --advertise nodeA:0
//	go run ./examples/rendezvous_two_proc --role consumer --dir /shared/rv
//
// With no --role it starts an owner and a consumer as child processes in a fresh directory and
// exits non-zero unless both succeed.
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/examples/internal/twoproc"
	"github.com/velo-go/velo/velo/transport/tcp"
)

type ownerFile struct {
	twoproc.Owner
	Handle velo.Handle `json:"handle"`
	Size   int         `json:"size"`
	SHA256 string      `json:"sha256"`
}

func main() {
	role := flag.String("role", "", "owner or consumer; empty starts both as child processes")
	dir := flag.String("dir", "", "directory both processes read and write (default: a new temporary one)")
	size := flag.Int("size", 8<<20, "payload size in bytes")
	listen := flag.String("listen", "127.0.0.1:0", "TCP listen address")
	advertise := flag.String("advertise", "", "host:port peers dial (default: the listen address; a port of 0 means the bound port)")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up after this long")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var err error
	switch *role {
	case "":
		err = runBoth(*dir, *size, *timeout)
	case "owner", "consumer":
		if *dir == "" {
			err = errors.New("--dir is required with --role")
			break
		}
		var v *velo.Velo
		if v, err = start(ctx, *listen, *advertise); err == nil {
			if *role == "owner" {
				err = runOwner(ctx, v, *dir, *size)
			} else {
				err = runConsumer(ctx, v, *dir)
			}
			v.Close()
		}
	default:
		err = fmt.Errorf("--role %q: use owner or consumer", *role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", roleName(*role), err)
		os.Exit(1)
	}
}

func roleName(r string) string {
	if r == "" {
		return "rendezvous_two_proc"
	}
	return r
}

func start(ctx context.Context, listen, advertise string) (*velo.Velo, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	if host, port, err := net.SplitHostPort(advertise); err == nil && port == "0" {
		advertise = net.JoinHostPort(host, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	}
	tr, err := tcp.New(tcp.Config{Listener: ln, Advertise: advertise})
	if err != nil {
		ln.Close()
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return velo.New(ctx, velo.WithTransport(tr), velo.WithLogger(log))
}

func runOwner(ctx context.Context, v *velo.Velo, dir string, size int) error {
	twoproc.Withdraw(dir) // a file of an earlier run must not send the consumer to a dead owner
	defer twoproc.Withdraw(dir)
	payload := make([]byte, size)
	if _, err := rand.Read(payload); err != nil {
		return err
	}
	sum := sha256.Sum256(payload)
	run := twoproc.NewRun()
	joins, err := twoproc.AcceptJoins(v, run)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	if err := v.RegisterHandler("demo.verified", func(ctx context.Context, m *velo.Message) ([]byte, error) {
		var err error
		if string(m.Payload) != hex.EncodeToString(sum[:]) {
			err = fmt.Errorf("consumer reports SHA-256 %s, owner staged %x", m.Payload, sum)
		}
		select {
		case done <- err:
		default:
		}
		return []byte("ok"), err
	}); err != nil {
		return err
	}
	h, err := v.RegisterData(ctx, payload)
	if err != nil {
		return err
	}
	if err := twoproc.Announce(dir, ownerFile{Owner: twoproc.Owner{Run: run, Peer: v.PeerInfo()}, Handle: h, Size: size, SHA256: hex.EncodeToString(sum[:])}); err != nil {
		return err
	}
	fmt.Printf("owner: staged %d bytes, SHA-256 %x; run %s; waiting for the consumer\n", size, sum, run)
	if _, err := joins.Wait(ctx); err != nil {
		return err
	}
	select {
	case err = <-done:
	case <-ctx.Done():
		err = fmt.Errorf("the consumer never reported: %w", ctx.Err())
	}
	if err != nil {
		return err
	}
	fmt.Printf("owner: consumer verified SHA-256 %x\n", sum)
	twoproc.PrintPathLines("owner", v)
	return nil
}

func runConsumer(ctx context.Context, v *velo.Velo, dir string) error {
	var o ownerFile
	if _, err := twoproc.JoinOwner(ctx, "consumer", dir, v, "", &o); err != nil {
		return err
	}
	start := time.Now()
	l, err := v.Get(ctx, o.Handle)
	if err != nil {
		return err
	}
	took := time.Since(start)
	sum := sha256.Sum256(l.Bytes())
	got := hex.EncodeToString(sum[:])
	if err := l.Release(ctx); err != nil {
		return err
	}
	if got != o.SHA256 {
		return fmt.Errorf("SHA-256 mismatch: got %s, owner staged %s", got, o.SHA256)
	}
	fmt.Printf("consumer: fetched %d bytes in %v on path %s/%s; SHA-256 %s verified\n", len(l.Bytes()), took.Round(time.Microsecond), l.Path, l.Reason, got)
	if _, err := v.Request(ctx, o.Peer.ID, "demo.verified", []byte(got)); err != nil {
		return fmt.Errorf("reporting to the owner: %w", err)
	}
	twoproc.PrintPathLines("consumer", v)
	return nil
}

// runBoth starts the owner and the consumer as child processes of this binary.
func runBoth(dir string, size int, timeout time.Duration) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "velo-rv-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	if err := twoproc.RunBoth([]string{"owner", "consumer"}, func(role string) []string {
		return []string{"--role", role, "--dir", dir, "--size", strconv.Itoa(size), "--timeout", timeout.String()}
	}); err != nil {
		return err
	}
	fmt.Println("rendezvous_two_proc: both processes succeeded")
	return nil
}
