// Package twoproc holds what the two-process examples share: how owner and consumer find each
// other, the launcher that runs both roles as children of one command, the printing of the path
// metric, and the choice of an address other nodes can reach.
//
// They meet through one file in a directory both can read, owner.json, and one message. The owner
// announces a run there (a random run ID, its PeerInfo, what the example adds); the consumer reads
// it, registers the owner and joins the run by a request that carries its own PeerInfo. A file is
// trusted only once its owner answered: the directory may be reused, and a file left by an earlier
// run (an owner that was killed, or one that has not replaced it yet) names an owner that is gone,
// so the consumer waits for the file to change instead of waiting on a dead peer. The owner removes
// the file when it starts and when it exits.
package twoproc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
)

// OwnerFile is the file in the shared directory through which an owner announces a run.
const OwnerFile = "owner.json"

// joinHandler is the message a consumer introduces itself to the owner with.
const joinHandler = "demo.join"

// joinTry bounds one attempt to join an owner: registering it (UCX wireup included) and its
// answer. An owner that is gone (its host down, its port closed) fails the attempt within it.
const joinTry = 20 * time.Second

// Owner opens every owner.json: the run it announces and how to reach the owner. The examples
// embed it in their own file type.
type Owner struct {
	// Run is random per owner process, so a file left by an earlier run in the same directory
	// is told apart from the current one.
	Run  string        `json:"run"`
	Peer velo.PeerInfo `json:"peer"`
}

// Joined is a consumer that introduced itself to the owner of a run.
type Joined struct {
	Run  string        `json:"run"`
	Peer velo.PeerInfo `json:"peer"`
	// TCP is the consumer's control-plane address (host:port), for the TCP_INFO split.
	TCP string `json:"tcp,omitempty"`
}

// NewRun returns a fresh run ID.
func NewRun() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("twoproc: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// Joins is the owner's side of a run: the consumer that joined it.
type Joins struct {
	once   sync.Once
	joined chan struct{}
	c      Joined
}

// AcceptJoins makes v answer consumers that join run: the first is registered as a peer of v and
// becomes what Wait returns. A consumer that names another run read a stale owner.json; it is
// refused, and waits for this run's file.
func AcceptJoins(v *velo.Velo, run string) (*Joins, error) {
	js := &Joins{joined: make(chan struct{})}
	err := v.RegisterHandler(joinHandler, func(ctx context.Context, m *velo.Message) ([]byte, error) {
		var j Joined
		if err := json.Unmarshal(m.Payload, &j); err != nil {
			return nil, err
		}
		if j.Run != run {
			return nil, fmt.Errorf("this owner runs %s, not %s: read %s again", run, j.Run, OwnerFile)
		}
		if err := v.RegisterPeer(ctx, j.Peer); err != nil {
			return nil, err
		}
		js.once.Do(func() { js.c = j; close(js.joined) })
		return []byte(run), nil
	})
	return js, err
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

// Announce publishes f, which embeds an Owner, as dir/owner.json.
func Announce(dir string, f any) error { return writeJSON(dir, OwnerFile, f) }

// Withdraw removes dir/owner.json: an owner calls it when it starts (a file from an earlier run
// must not send a consumer to a dead owner) and when it exits.
func Withdraw(dir string) {
	if err := os.Remove(filepath.Join(dir, OwnerFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(os.Stderr, "twoproc: %v\n", err)
	}
}

// JoinOwner waits for dir/owner.json, registers the owner it names with v and introduces v to it
// (its PeerInfo and tcp, its control-plane address), then decodes the whole file into f. The file
// can be stale — left by an owner that was killed, or not yet replaced by an owner that is still
// starting — and then the join fails: JoinOwner says so on stderr and waits for the file to
// change. It returns once an owner accepted, or when ctx ends.
func JoinOwner(ctx context.Context, who, dir string, v *velo.Velo, tcp string, f any) (Owner, error) {
	path := filepath.Join(dir, OwnerFile)
	var stale []byte
	var lastErr error
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		raw, err := os.ReadFile(path)
		switch {
		case err == nil && !bytes.Equal(raw, stale):
			var o Owner
			if err := json.Unmarshal(raw, &o); err != nil {
				return Owner{}, fmt.Errorf("%s: %w", path, err)
			}
			if lastErr = join(ctx, v, o, tcp); lastErr == nil {
				return o, json.Unmarshal(raw, f)
			}
			if ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "%s: %s names owner %016x (run %s), which does not answer: %v; waiting for a newer %s\n",
					who, path, uint64(o.Peer.ID), o.Run, lastErr, OwnerFile)
			}
			stale = raw
		case err != nil && !errors.Is(err, os.ErrNotExist):
			return Owner{}, err
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return Owner{}, fmt.Errorf("waiting for a live owner in %s: %w (the last one named there: %v)", path, ctx.Err(), lastErr)
			}
			return Owner{}, fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
}

func join(ctx context.Context, v *velo.Velo, o Owner, tcp string) error {
	ctx, cancel := context.WithTimeout(ctx, joinTry)
	defer cancel()
	if err := v.RegisterPeer(ctx, o.Peer); err != nil {
		return err
	}
	b, err := json.Marshal(Joined{Run: o.Run, Peer: v.PeerInfo(), TCP: tcp})
	if err != nil {
		return err
	}
	resp, err := v.Request(ctx, o.Peer.ID, joinHandler, b)
	if err == nil && string(resp) != o.Run {
		err = fmt.Errorf("the owner answered for run %q", resp)
	}
	return err
}

// writeJSON writes v to dir/name atomically (write a temporary file, rename), so the other side
// never reads half a file.
func writeJSON(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
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

// RoutableHost returns the address other nodes most likely reach this one at: the source address
// of the default route, else the first address of an interface that is up and not loopback, else
// 127.0.0.1 (a single-host run).
func RoutableHost() string {
	// Connecting a UDP socket sends nothing; it only asks the kernel which source address its
	// routing table picks for a destination outside this host.
	if c, err := net.Dial("udp4", "192.0.2.1:9"); err == nil {
		ip := c.LocalAddr().(*net.UDPAddr).IP
		c.Close()
		if !ip.IsLoopback() && !ip.IsUnspecified() {
			return ip.String()
		}
	}
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}
