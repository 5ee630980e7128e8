// Command rendezvous_two_proc moves a payload by rendezvous between two OS processes over TCP and
// proves it arrived intact.
//
// Owner and consumer find each other through velo's filesystem discovery backend in --dir (no
// RegisterPeer anywhere). The owner stages random bytes; the consumer asks it for its offer (the
// handle and the payload's SHA-256) with a join request (a member file left in --dir by an owner
// that was killed names one that no longer answers; the consumer then waits for the new one). It
// fetches the payload, checks the SHA-256 and reports back over the messenger, and both print
// their velo_rendezvous_rdma_path_total lines.
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

// offer is what the owner answers a join with.
type offer struct {
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
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		var d velo.Discovery
		if d, err = twoproc.Discovery(*dir, log); err != nil {
			break
		}
		joins := twoproc.NewJoins()
		opts := []velo.Option{velo.WithDiscovery(d, twoproc.Consumer)}
		if *role == "owner" {
			opts = joins.Options(d)
		}
		var v *velo.Velo
		if v, err = start(ctx, log, *listen, *advertise, opts...); err == nil {
			if *role == "owner" {
				err = runOwner(ctx, v, joins, *size)
			} else {
				err = runConsumer(ctx, v)
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

func start(ctx context.Context, log *slog.Logger, listen, advertise string, opts ...velo.Option) (*velo.Velo, error) {
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
	return velo.New(ctx, append(opts, velo.WithTransport(tr), velo.WithLogger(log))...)
}

func runOwner(ctx context.Context, v *velo.Velo, joins *twoproc.Joins, size int) error {
	payload, sum, err := twoproc.RandomPayload(size)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	if err := v.RegisterHandler("demo.verified", func(ctx context.Context, m *velo.Message) ([]byte, error) {
		var err error
		if string(m.Payload) != sum {
			err = fmt.Errorf("consumer reports SHA-256 %s, owner staged %s", m.Payload, sum)
		}
		select {
		case done <- err:
		default:
		}
		return []byte("ok"), err
	}); err != nil {
		return err
	}
	h, err := v.StageData(ctx, payload)
	if err != nil {
		return err
	}
	if err := joins.Offer(offer{Handle: h, Size: size, SHA256: sum}); err != nil {
		return err
	}
	fmt.Printf("owner: staged %d bytes, SHA-256 %s; waiting for the consumer\n", size, sum)
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
	fmt.Printf("owner: consumer verified SHA-256 %s\n", sum)
	twoproc.PrintPathLines("owner", v)
	return nil
}

func runConsumer(ctx context.Context, v *velo.Velo) error {
	var o offer
	owner, err := twoproc.JoinOwner(ctx, "consumer", v, "", &o)
	if err != nil {
		return err
	}
	if _, err := twoproc.FetchVerified(ctx, v, o.Handle, o.SHA256); err != nil {
		return err
	}
	if _, err := v.Request(ctx, owner, "demo.verified", []byte(o.SHA256)); err != nil {
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
