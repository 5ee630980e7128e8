// Package twoproc holds what the two-process examples share: how owner and consumer find each
// other, the launcher that runs both roles as children of one command, the printing of the path
// metric, and the choice of an address other nodes can reach.
//
// They meet through velo's filesystem discovery backend in a directory both can read (the
// members "owner" and "consumer" of cluster two-proc), so neither calls RegisterPeer, and one
// message: the consumer asks every owner that comes up for its offer (what the example stages:
// a handle, its size and SHA-256) with a join request that carries its control-plane address. A
// member file left by an owner that was killed names an instance that does not answer; discovery
// registers it only if it answers, and drops the file once its TTL passes, so the consumer simply
// waits for the owner that replaces it.
package twoproc

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/discovery"
	"github.com/velo-go/velo/velo/metrics"
)

// Cluster is the discovery cluster the two roles meet in; Owner and Consumer are their member
// names.
const (
	Cluster  = "two-proc"
	Owner    = "owner"
	Consumer = "consumer"
)

// joinHandler is the request a consumer asks an owner for its offer with.
const joinHandler = "demo.join"

// joinTry bounds one join request. An owner that is gone fails it within this.
const joinTry = 20 * time.Second

// DiscoveryTTL is how long a member file counts after its last heartbeat: a killed owner's file
// stops counting this long after it died.
const DiscoveryTTL = 3 * time.Second

// Discovery is the directory-backed membership both roles use.
func Discovery(dir string, log *slog.Logger) (*discovery.Filesystem, error) {
	return discovery.NewFilesystem(discovery.FilesystemConfig{Dir: dir, Cluster: Cluster, TTL: DiscoveryTTL, Poll: 50 * time.Millisecond, Logger: log})
}

// Joined is a consumer that asked for the offer.
type Joined struct {
	Peer velo.InstanceID `json:"-"`
	// TCP is the consumer's control-plane address (host:port), for the TCP_INFO split.
	TCP string `json:"tcp,omitempty"`
}

// Joins is the owner's side: the offer it answers with and the consumer that took it.
type Joins struct {
	once    sync.Once
	joined  chan struct{}
	c       Joined
	offered chan struct{}
	offer   []byte
}

// NewJoins returns the owner's side; pass Handler to velo.WithHandler so that a consumer that
// finds the owner early waits for the offer instead of missing the handler.
func NewJoins() *Joins { return &Joins{joined: make(chan struct{}), offered: make(chan struct{})} }

// Handler answers a join with the offer, once Offer has made it.
func (js *Joins) Handler(ctx context.Context, m *velo.Message) ([]byte, error) {
	var j Joined
	if err := json.Unmarshal(m.Payload, &j); err != nil {
		return nil, err
	}
	select {
	case <-js.offered:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	j.Peer = m.From
	js.once.Do(func() { js.c = j; close(js.joined) })
	return js.offer, nil
}

// Options are the velo options of the owner's side: the join handler and discovery as "owner".
func (js *Joins) Options(d velo.Discovery) []velo.Option {
	return []velo.Option{velo.WithHandler(joinHandler, js.Handler), velo.WithDiscovery(d, Owner)}
}

// Offer makes f (JSON) the answer to every join.
func (js *Joins) Offer(f any) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	js.offer = b
	close(js.offered)
	return nil
}

// Wait returns the consumer that joined, once one has; it can be called any number of times.
func (js *Joins) Wait(ctx context.Context) (Joined, error) {
	select {
	case <-js.joined:
		return js.c, nil
	case <-ctx.Done():
		return Joined{}, fmt.Errorf("no consumer joined: %w", ctx.Err())
	}
}

// JoinOwner waits for discovery to bring up a peer, asks it for its offer (sending tcp, this
// side's control-plane address) and decodes the answer into f. A peer that fails the request is
// said on stderr and passed over. It returns the owner's ID once one answered, or when ctx ends.
// v must be an instance made with velo.WithDiscovery(d, Consumer).
func JoinOwner(ctx context.Context, who string, v *velo.Velo, tcp string, f any) (velo.InstanceID, error) {
	events := v.WatchPeers(ctx) // subscribe first, then list: no peer falls between the two
	var candidates []velo.InstanceID
	for _, p := range v.Peers() {
		if p.State == velo.StateUp {
			candidates = append(candidates, p.ID)
		}
	}
	req, err := json.Marshal(Joined{TCP: tcp})
	if err != nil {
		return 0, err
	}
	var lastErr error
	for {
		for len(candidates) > 0 {
			id := candidates[0]
			candidates = candidates[1:]
			rctx, cancel := context.WithTimeout(ctx, joinTry)
			resp, err := v.Request(rctx, id, joinHandler, req)
			cancel()
			if err == nil {
				return id, json.Unmarshal(resp, f)
			}
			lastErr = err
			if ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "%s: peer %016x did not answer the join: %v; waiting for another owner\n", who, uint64(id), err)
			}
		}
		select {
		case ev, ok := <-events:
			if !ok {
				return 0, fmt.Errorf("the instance closed before an owner answered")
			}
			if ev.Kind == velo.PeerUp || ev.Kind == velo.PeerRestarted {
				candidates = append(candidates, ev.Peer.ID)
			}
		case <-ctx.Done():
			if lastErr != nil {
				return 0, fmt.Errorf("waiting for a live owner in cluster %s: %w (the last one tried: %v)", Cluster, ctx.Err(), lastErr)
			}
			return 0, fmt.Errorf("waiting for an owner in cluster %s: %w", Cluster, ctx.Err())
		}
	}
}

// PrintPathLines prints the instance's velo_rendezvous_rdma_path_total series, one per line,
// prefixed by who.
func PrintPathLines(who string, v *velo.Velo) {
	lines, err := metrics.Lines(v.Metrics(), metrics.RDMAPathTotal)
	if err != nil {
		fmt.Printf("%s: reading metrics: %v\n", who, err)
		return
	}
	for _, l := range lines {
		fmt.Printf("%s: %s\n", who, l)
	}
}

// RunBoth starts this program once per role with args(role) and relays their output line by
// line. It returns an error naming every role whose process failed.
func RunBoth(roles []string, args func(role string) []string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[string]error{}
	for _, role := range roles {
		cmd := exec.Command(self, args(role)...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			relay(out)
			err := cmd.Wait()
			mu.Lock()
			errs[role] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	var failed []error
	for _, role := range roles {
		if errs[role] != nil {
			failed = append(failed, fmt.Errorf("%s process failed: %v", role, errs[role]))
		}
	}
	return errors.Join(failed...)
}

var stdoutMu sync.Mutex

func relay(r io.Reader) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		stdoutMu.Lock()
		fmt.Println(s.Text())
		stdoutMu.Unlock()
	}
}

// RandomPayload returns size random bytes and their SHA-256 in hex, what an owner stages and
// announces.
func RandomPayload(size int) (payload []byte, sum string, err error) {
	payload = make([]byte, size)
	if _, err := rand.Read(payload); err != nil {
		return nil, "", err
	}
	s := sha256.Sum256(payload)
	return payload, hex.EncodeToString(s[:]), nil
}

// FetchVerified gets h, releases the lease and checks the bytes' SHA-256 against want (hex). It
// prints the consumer's line (size, time, path) and returns the lease, whose Path and Reason say
// which lane moved the bytes.
func FetchVerified(ctx context.Context, v *velo.Velo, h velo.Handle, want string) (*velo.Lease, error) {
	start := time.Now()
	l, err := v.Get(ctx, h)
	if err != nil {
		return nil, err
	}
	took := time.Since(start)
	s := sha256.Sum256(l.Bytes())
	got := hex.EncodeToString(s[:])
	n := len(l.Bytes())
	if err := l.Release(ctx); err != nil {
		return nil, err
	}
	if got != want {
		return nil, fmt.Errorf("SHA-256 mismatch: got %s, the owner staged %s", got, want)
	}
	fmt.Printf("consumer: fetched %d bytes in %v on path %s/%s; SHA-256 %s verified\n", n, took.Round(time.Microsecond), l.Path, l.Reason, got)
	return l, nil
}
