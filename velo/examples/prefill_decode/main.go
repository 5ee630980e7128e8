// Command prefill_decode is a disaggregated-inference shaped velo program, written against the
// README, docs/ and go doc alone, the way a new user would write one. Two processes — a prefill
// member and a decode member (this process starts the prefill one as its child) — find each other
// through the filesystem discovery backend under member names, authenticate with a cluster secret,
// and then:
//
//   - decode fetches 64 blocks of 64 KiB and 64 of 4 KiB that prefill staged, with one GetBatch;
//   - decode reads a 32 MiB region prefill wrote in place, by ranges of one lease (Acquire,
//     ReadRanges);
//   - decode grants prefill a region of its own and prefill writes 8 MiB into it with notified
//     Puts; decode waits for the notifications (WriteGrant.Wait);
//   - each side checks its /readyz and Health, drains (Shutdown), and decode sees prefill drain
//     and leave.
//
// Every byte is checked, and each side checks every series of velo_rendezvous_rdma_path_total and
// velo_push_path_total it counted against what the transfers above should have counted: every
// transfer on the path the pair has (rdma, and inline for the small blocks; over UCX lanes that are
// all software ones, such as UCX_TLS=tcp, the chunked path with reason software_lanes, which the
// UCX transport says of the pair), nothing slower. It exits non-zero if anything did not hold.
//
//	make ucx-static && UCX_TLS=tcp go run -tags ucx_static ./velo/examples/prefill_decode
//
// (make test-prefill-decode runs exactly that.)
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/discovery"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

const (
	cluster     = "prefill-decode"
	prefillName = "prefill-0"
	decodeName  = "decode-0"

	bigBlocks, bigBlock     = 64, 64 << 10 // above the inline limit: one RDMA read each
	smallBlocks, smallBlock = 64, 4 << 10  // inside the owner's answer (path inline)
	regionSize              = 32 << 20
	rangeSize               = 1 << 20 // regionSize/rangeSize ranges, read with one lease
	putSize, puts           = 1 << 20, 8
	grantSize               = putSize * puts
)

// The prefill process is this program started again with these variables: the shared discovery
// folder and, like every member of a cluster, the cluster secret's file.
const (
	roleEnv = "VELO_PREFILL_DECODE_ROLE"
	dirEnv  = "VELO_PREFILL_DECODE_DIR"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	if os.Getenv(roleEnv) == "prefill" {
		err = prefill(ctx)
	} else {
		err = decode(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "prefill_decode:", err)
		os.Exit(1)
	}
}

// start creates a member: a TCP control plane authenticated by the cluster secret in the file
// VELO_CLUSTER_SECRET_FILE names, the UCX transport beside it, and filesystem discovery under
// name. The handlers go in with WithHandler so that they are there before the other member can
// find this one.
func start(ctx context.Context, name string, handlers ...velo.Option) (*velo.Velo, *ucxtransport.Transport, error) {
	creds, err := auth.FromEnv()
	if err != nil {
		return nil, nil, err
	}
	if creds.Secrets == nil {
		return nil, nil, errors.New("no cluster secret: set VELO_CLUSTER_SECRET_FILE")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	ctl, err := tcp.New(tcp.Config{Listener: ln, Auth: creds})
	if err != nil {
		return nil, nil, err
	}
	// velo.New creates UCX's worker listening where the control plane does (here lo), not on
	// every interface.
	u, err := ucxtransport.New(ucxtransport.Config{EagerEndpoints: true})
	if err != nil {
		ctl.Close()
		return nil, nil, err
	}
	d, err := discovery.NewFilesystem(discovery.FilesystemConfig{Dir: os.Getenv(dirEnv), Cluster: cluster})
	if err != nil {
		ctl.Close()
		u.Close()
		return nil, nil, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("member", name)
	// The instance owns d from here on, a failed New included.
	opts := append([]velo.Option{velo.WithLogger(log), velo.WithTransport(ctl), velo.WithUCXTransport(u),
		velo.WithDiscovery(d, name)}, handlers...)
	v, err := velo.New(ctx, opts...)
	return v, u, err
}

// bulk is the path and reason the pair's bulk transfers take, as the UCX transport says of the
// pair: rdma/ok, or chunked with its reason (software_lanes: every UCX lane to the peer is a
// software one, tcp, and this member did not opt in with VELO_UCX_SOFTWARE_RMA=1).
func bulk(u *ucxtransport.Transport, peer velo.InstanceID) (path, reason string) {
	if why := u.PathRefusal(peer); why != "" {
		return "chunked", why
	}
	return "rdma", "ok"
}

// getSeries is the velo_rendezvous_rdma_path_total an instance counts for the blocks and the
// region when its bulk transfers take path with reason (the small blocks go inline), in the
// order metrics.Lines prints them.
func getSeries(path, reason string) string {
	lines := []string{
		fmt.Sprintf(`{path="inline",reason="ok"} %d`, smallBlocks),
		fmt.Sprintf(`{path="%s",reason="%s"} %d`, path, reason, bigBlocks+1),
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// member waits until discovery brings the member called name and returns its instance: peers
// carry their member names (PeerStatus.Name, in Peers and in every PeerEvent).
func member(ctx context.Context, v *velo.Velo, name string) (velo.InstanceID, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	events := v.WatchPeers(ctx) // first, so that no peer comes up between Peers and the watch
	for _, p := range v.Peers() {
		if p.Name == name && p.State == velo.StateUp {
			return p.ID, nil
		}
	}
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return 0, fmt.Errorf("no member %s within 30 s: %w", name, ctx.Err())
			}
			if (ev.Kind == velo.PeerUp || ev.Kind == velo.PeerRestarted) && ev.Peer.Name == name {
				return ev.Peer.ID, nil
			}
		case <-ctx.Done():
			return 0, fmt.Errorf("no member %s within 30 s", name)
		}
	}
}

// fill writes the bytes block i of a kind holds: every block differs from every other.
func fill(b []byte, kind, i int) []byte {
	for j := range b {
		b[j] = byte(kind*131 + i*31 + j*7 + j>>8)
	}
	return b
}

// staged is prefill's answer to "stage": the handles of the blocks and of the region.
type staged struct {
	Big, Small []velo.Handle
	Region     velo.Handle
}

func prefill(ctx context.Context) error {
	// The handlers go in before the instance exists (WithHandler), so they wait for it.
	var v *velo.Velo
	started := make(chan struct{})
	done := make(chan struct{})
	var region *velo.Region
	stage := func(ctx context.Context, _ *velo.Message) ([]byte, error) {
		<-started
		var s staged
		for i := range bigBlocks {
			h, err := v.StageDataPinned(ctx, fill(make([]byte, bigBlock), 0, i))
			if err != nil {
				return nil, err
			}
			s.Big = append(s.Big, h)
		}
		for i := range smallBlocks {
			h, err := v.StageDataPinned(ctx, fill(make([]byte, smallBlock), 1, i))
			if err != nil {
				return nil, err
			}
			s.Small = append(s.Small, h)
		}
		var err error
		if region, err = v.NewRegion(regionSize); err != nil {
			return nil, err
		}
		if !region.Pinned() {
			return nil, fmt.Errorf("the region is in plain memory (%s): it would be read by chunks", region.Reason())
		}
		fill(region.Bytes(), 2, 0)
		if s.Region, err = v.StageRegion(ctx, region); err != nil {
			return nil, err
		}
		return json.Marshal(s)
	}
	// "write" hands over a write grant; the puts run on their own goroutine so that the handler
	// answers at once, and their outcome comes back with "done".
	putErr := make(chan error, 1)
	write := func(ctx context.Context, m *velo.Message) ([]byte, error) {
		<-started
		var h velo.GrantHandle
		if err := h.UnmarshalBinary(m.Payload); err != nil {
			return nil, err
		}
		go func() { putErr <- putAll(context.WithoutCancel(ctx), v, h) }()
		return nil, nil
	}
	var u *ucxtransport.Transport
	finish := func(ctx context.Context, m *velo.Message) ([]byte, error) {
		<-started
		defer close(done)
		if err := <-putErr; err != nil {
			return nil, err
		}
		path, reason := bulk(u, m.From)
		return nil, checkPaths(v, prefillName, map[string]string{
			// As owner it answered each big block's acquire and the region's on the pair's path,
			// and sent each small block in the answer.
			metrics.RDMAPathTotal: getSeries(path, reason),
			// As writer it put every piece on the pair's path.
			"velo_push_path_total": fmt.Sprintf(`{path="%s",reason="%s",side="writer"} %d`, path, reason, puts),
		})
	}

	var err error
	v, u, err = start(ctx, prefillName, velo.WithHandler("stage", stage), velo.WithHandler("write", write),
		velo.WithHandler("done", finish))
	if err != nil {
		return err
	}
	close(started)
	defer v.Close()
	if err := ready(v, true); err != nil {
		return err
	}
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("decode never said it was done: %w", ctx.Err())
	}
	region.Free() // decode released its lease, which was the staging's only reference
	return drain(ctx, v)
}

// putAll writes grantSize bytes through h, one notified Put per piece.
func putAll(ctx context.Context, v *velo.Velo, h velo.GrantHandle) error {
	for i := range puts {
		src := fill(make([]byte, putSize), 3, i)
		if err := v.Put(ctx, h, uint64(i*putSize), src, &velo.PutOptions{Notify: true, Payload: []byte(fmt.Sprintf("piece %d", i))}); err != nil {
			return fmt.Errorf("put %d: %w", i, err)
		}
	}
	return nil
}

func decode(ctx context.Context) error {
	if err := setUp(); err != nil {
		return err
	}
	defer os.RemoveAll(os.Getenv(dirEnv))

	// Prefill starts first and decode joins, as a decode worker joins a running prefill pool:
	// decode's discovery finds prefill at once and reaches it before prefill's next poll of the
	// folder has seen decode. The transfers must take the path the pair has all the same.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	child := exec.CommandContext(ctx, self)
	child.Env = append(os.Environ(), roleEnv+"=prefill")
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	if err := child.Start(); err != nil {
		return err
	}
	defer child.Wait()
	defer child.Process.Kill() // on an early return; a no-op once it exited
	if err := waitPublished(ctx, prefillName); err != nil {
		return err
	}

	v, u, err := start(ctx, decodeName)
	if err != nil {
		return err
	}
	defer v.Close()
	if err := ready(v, true); err != nil {
		return err
	}
	peer, err := member(ctx, v, prefillName)
	if err != nil {
		return err
	}
	departures := v.WatchPeers(ctx)
	path, reason := bulk(u, peer) // asked while the peer is here: it leaves before the checks

	// The batch: one GetBatch for every block.
	answer, err := v.Request(ctx, peer, "stage", nil)
	if err != nil {
		return err
	}
	var s staged
	if err := json.Unmarshal(answer, &s); err != nil {
		return err
	}
	if err := getBlocks(ctx, v, s); err != nil {
		return err
	}
	if err := readRegion(ctx, v, s.Region); err != nil {
		return err
	}
	if err := receivePuts(ctx, v, peer); err != nil {
		return err
	}

	if _, err := v.Request(ctx, peer, "done", nil); err != nil {
		return fmt.Errorf("prefill's own checks: %w", err)
	}
	if err := waitDeparture(ctx, departures, peer); err != nil {
		return err
	}
	if err := child.Wait(); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	if err := checkPaths(v, decodeName, map[string]string{
		// As consumer: every big block and the region's lease on the pair's path, every small
		// block inline.
		metrics.RDMAPathTotal: getSeries(path, reason),
		// As receiver: the writer acquired the grant once, on the pair's path.
		"velo_push_path_total": fmt.Sprintf(`{path="%s",reason="%s",side="receiver"} 1`, path, reason),
	}); err != nil {
		return err
	}
	if err := drain(ctx, v); err != nil {
		return err
	}
	fmt.Printf("prefill_decode: %d+%d blocks, %d MiB by ranges, %d MiB of notified puts, drained\n",
		bigBlocks, smallBlocks, regionSize>>20, grantSize>>20)
	return nil
}

// setUp makes the discovery folder and the cluster secret both members use, as an operator would.
func setUp() error {
	dir, err := os.MkdirTemp("", "prefill-decode-")
	if err != nil {
		return err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	file := filepath.Join(dir, "cluster-secret")
	if err := os.WriteFile(file, []byte(base64.StdEncoding.EncodeToString(secret)+"\n"), 0o600); err != nil {
		return err
	}
	os.Setenv(dirEnv, dir)
	os.Setenv("VELO_CLUSTER_SECRET_FILE", file)
	return nil
}

// waitPublished waits until the member called name has its entry in the discovery folder: the
// filesystem backend's file, Dir/<Cluster>/<name>.json (docs/discovery.md).
func waitPublished(ctx context.Context, name string) error {
	file := filepath.Join(os.Getenv(dirEnv), cluster, name+".json")
	for {
		if _, err := os.Stat(file); err == nil {
			return nil
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("%s never published itself: %w", name, ctx.Err())
		}
	}
}

func getBlocks(ctx context.Context, v *velo.Velo, s staged) error {
	var reqs []velo.GetRequest
	for _, h := range append(slices.Clone(s.Big), s.Small...) {
		reqs = append(reqs, velo.GetRequest{Handle: h})
	}
	results := v.GetBatch(ctx, reqs, nil)
	leases := make([]*velo.Lease, 0, len(results))
	defer func() { v.ReleaseLeases(context.WithoutCancel(ctx), leases) }()
	for _, r := range results {
		if r.Err != nil {
			return fmt.Errorf("GetBatch entry %d: %w", r.Index, r.Err)
		}
		leases = append(leases, r.Lease)
		kind, i, size := 0, r.Index, bigBlock
		if r.Index >= bigBlocks {
			kind, i, size = 1, r.Index-bigBlocks, smallBlock
		}
		if !bytes.Equal(r.Lease.Bytes(), fill(make([]byte, size), kind, i)) {
			return fmt.Errorf("GetBatch entry %d: the bytes differ", r.Index)
		}
	}
	return nil
}

func readRegion(ctx context.Context, v *velo.Velo, h velo.Handle) error {
	lease, err := v.Acquire(ctx, h)
	if err != nil {
		return err
	}
	defer lease.Release(context.WithoutCancel(ctx))
	dst := make([]byte, regionSize)
	var ranges []velo.Range
	for off := 0; off < regionSize; off += rangeSize {
		ranges = append(ranges, velo.Range{Offset: uint64(off), Length: rangeSize, Dst: dst[off : off+rangeSize]})
	}
	if err := lease.ReadRanges(ctx, ranges); err != nil {
		return fmt.Errorf("ReadRanges: %w", err)
	}
	if !bytes.Equal(dst, fill(make([]byte, regionSize), 2, 0)) {
		return errors.New("ReadRanges: the bytes differ")
	}
	return nil
}

func receivePuts(ctx context.Context, v *velo.Velo, writer velo.InstanceID) error {
	region, err := v.NewRegion(grantSize)
	if err != nil {
		return err
	}
	defer region.Free()
	grant, err := v.GrantWrite(ctx, writer, region, velo.GrantOptions{})
	if err != nil {
		return err
	}
	defer grant.Revoke(context.WithoutCancel(ctx))
	h, err := grant.Handle().MarshalBinary()
	if err != nil {
		return err
	}
	if _, err := v.Request(ctx, writer, "write", h); err != nil {
		return err
	}
	if err := grant.Wait(ctx); err != nil {
		return fmt.Errorf("waiting for the notified puts: %w", err)
	}
	want := make([]byte, 0, grantSize)
	for i := range puts {
		want = append(want, fill(make([]byte, putSize), 3, i)...)
	}
	if !bytes.Equal(region.Bytes(), want) {
		return errors.New("the region written by puts differs")
	}
	var notes []string
	for len(notes) < puts {
		select {
		case n := <-grant.Notifications():
			notes = append(notes, string(n.Payload))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if notes[0] != "piece 0" || notes[puts-1] != fmt.Sprintf("piece %d", puts-1) {
		return fmt.Errorf("notifications out of order: %q", notes)
	}
	return nil
}

// waitDeparture waits until peer drains and goes.
func waitDeparture(ctx context.Context, events <-chan velo.PeerEvent, peer velo.InstanceID) error {
	drained := false
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return errors.New("WatchPeers ended before prefill left")
			}
			if ev.Peer.ID != peer {
				continue
			}
			switch ev.Kind {
			case velo.PeerDraining:
				drained = true
			case velo.PeerDown:
				if !drained {
					return fmt.Errorf("prefill went down without draining first: %s", ev.Peer.Err)
				}
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("prefill did not leave: %w", ctx.Err())
		}
	}
}

// ready checks the instance's own health, through Health and through /readyz as a probe sees it.
func ready(v *velo.Velo, want bool) error {
	h := v.Health()
	if h.Ready() != want {
		return fmt.Errorf("health: %s %v, want ready %v", h.State, h.Reasons, want)
	}
	if want && h.State != velo.StateReady {
		return fmt.Errorf("health: %s %v, want state ready", h.State, h.Reasons)
	}
	srv := http.Server{Handler: v.HealthHandler()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go srv.Serve(ln)
	defer srv.Close()
	resp, err := http.Get("http://" + ln.Addr().String() + "/readyz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if (resp.StatusCode == http.StatusOK) != want {
		return fmt.Errorf("/readyz answered %d, want ready %v", resp.StatusCode, want)
	}
	return nil
}

// drain shuts the instance down gracefully: from the first step on it is not ready any more.
func drain(ctx context.Context, v *velo.Velo) error {
	v.BeginDrain()
	if err := ready(v, false); err != nil {
		return fmt.Errorf("draining: %w", err)
	}
	if h := v.Health(); h.State != velo.StateDraining {
		return fmt.Errorf("draining: health says %s", h.State)
	}
	return v.Shutdown(ctx)
}

// checkPaths compares every series of each path metric that counted something with want (the
// series' labels and values, one per line): a transfer on a slower path, or one too few or too
// many, fails.
func checkPaths(v *velo.Velo, who string, want map[string]string) error {
	var bad []string
	for name, series := range want {
		lines, err := metrics.Lines(v.Metrics(), name)
		if err != nil {
			return err
		}
		var got []string
		for _, l := range lines {
			if !strings.HasSuffix(l, " 0") {
				got = append(got, strings.TrimPrefix(l, name))
				fmt.Fprintf(os.Stderr, "%s: %s\n", who, l)
			}
		}
		if g := strings.Join(got, "\n"); g != series {
			bad = append(bad, fmt.Sprintf("%s counted\n%s\nwant\n%s", name, g, series))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("%s: %s", who, strings.Join(bad, "\n"))
	}
	return nil
}
