// Package etcd is the etcd backend of velo's cluster membership (velo.WithDiscovery): each
// member's record is one key bound to an etcd lease that the client keeps alive, and a watch on
// the cluster's prefix delivers joins, changes, restarts and departures.
//
// It is a module of its own so that an application that never uses etcd does not carry the etcd
// client and gRPC in its module graph.
//
// Keys (readable with etcdctl; Prefix defaults to "/velo/"):
//
//	<Prefix>clusters/<Cluster>/members/<Name>   JSON of discovery.Record, bound to the member's lease
//
//	etcdctl get --prefix /velo/clusters/default/members/
//	etcdctl lease timetolive --keys <lease id>
//
// A member that stops keeping its lease alive (killed, partitioned from etcd) disappears when the
// lease's TTL runs out. A member that loses etcd and comes back publishes itself again (a new
// lease when the old one expired meanwhile); a watcher that loses etcd keeps the members it knew,
// lists the prefix again once etcd answers, and reports only what really changed, so an outage
// produces no phantom departures or duplicate arrivals.
package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/velo-go/velo/velo/discovery"
)

// Config configures the etcd backend.
type Config struct {
	// Endpoints are the etcd members' client URLs ("http://10.0.0.5:2379"). Ignored when Client
	// is set.
	Endpoints []string
	// Client is an etcd client the application already has; the backend uses it and does not
	// close it.
	Client *clientv3.Client
	// Cluster names the cluster (default "default").
	Cluster string
	// Prefix is where velo's keys live (default "/velo/").
	Prefix string
	// TTL is the lease's time to live (default 10 s; etcd counts whole seconds, so it is rounded
	// up, and at least 2 s). A killed member is seen to leave within about TTL. A shorter TTL
	// notices deaths sooner and costs more keep-alive traffic; one shorter than an etcd leader
	// election makes members flap when etcd changes leader.
	TTL time.Duration
	// DialTimeout bounds connecting to etcd (default 5 s).
	DialTimeout time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Etcd is the etcd backend. It implements velo.Discovery.
type Etcd struct {
	cfg       Config
	cli       *clientv3.Client
	ownClient bool
	members   string // the key prefix of the cluster's members

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	self   *discovery.Record
	value  []byte
	lease  clientv3.LeaseID
	closed bool
	wake   chan struct{} // a publish changed the record: the keeper re-puts it

	publishErrors atomic.Uint64
	watchErrors   atomic.Uint64
	lost          atomic.Pointer[lostState]
}

type lostState struct {
	err   error
	since time.Time
}

// New connects to etcd. It does not wait for etcd to answer: an unreachable etcd shows in
// Publish's error and in Status.
func New(cfg Config) (*Etcd, error) {
	if cfg.Client == nil && len(cfg.Endpoints) == 0 {
		return nil, errors.New("discovery/etcd: Config.Endpoints is empty: name the etcd client URLs (http://host:2379) or pass a Client")
	}
	if cfg.Cluster == "" {
		cfg.Cluster = "default"
	}
	if strings.Contains(cfg.Cluster, "/") {
		return nil, fmt.Errorf("discovery/etcd: cluster name %q: it becomes one segment of a key, so no slashes", cfg.Cluster)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "/velo/"
	}
	if !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.TTL < 2*time.Second {
		cfg.TTL = 2 * time.Second
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	e := &Etcd{cfg: cfg, cli: cfg.Client, members: cfg.Prefix + "clusters/" + cfg.Cluster + "/members/", wake: make(chan struct{}, 1)}
	if e.cli == nil {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   cfg.Endpoints,
			DialTimeout: cfg.DialTimeout,
			// The client's own logger is silenced: what matters to the application is said
			// through cfg.Logger, once, by this package.
			Logger: zap.NewNop(),
			// Fail a call at once on a dead connection instead of queueing it: the keeper and the
			// watcher retry on their own schedule.
			DialKeepAliveTime:    5 * time.Second,
			DialKeepAliveTimeout: 3 * time.Second,
			// gRPC's own reconnect backoff grows to two minutes, so after an outage the client
			// could come back long after etcd did, and a lease etcd restored would run out
			// meanwhile: every watcher would see the member leave and join again. Reconnect
			// as often as the keeper retries.
			DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: retryCap(cfg.TTL)},
				MinConnectTimeout: cfg.DialTimeout,
			})},
		})
		if err != nil {
			return nil, fmt.Errorf("discovery/etcd: connecting to %v: %w", cfg.Endpoints, err)
		}
		e.cli, e.ownClient = cli, true
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	return e, nil
}

// Key is the key a member's record is stored under.
func (e *Etcd) Key(name string) string { return e.members + name }

func (e *Etcd) ttlSeconds() int64 { return int64((e.cfg.TTL + time.Second - 1) / time.Second) }

// Publish stores the member's record under a lease and keeps it alive until Close; publishing
// again (to announce a drain, say) rewrites the value under the same lease. The first publish
// must reach etcd: its error says so. Later losses of etcd are repaired in the background.
func (e *Etcd) Publish(ctx context.Context, r discovery.Record) error {
	if r.Name == "" {
		r.Name = fmt.Sprintf("%016x", r.ID)
	}
	if strings.Contains(r.Name, "/") {
		return fmt.Errorf("discovery/etcd: member name %q: it becomes one segment of a key, so no slashes", r.Name)
	}
	value, err := json.Marshal(r)
	if err != nil {
		return err
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return discovery.ErrClosed
	}
	first := e.self == nil
	if !first && e.self.Name != r.Name {
		e.mu.Unlock()
		return fmt.Errorf("discovery/etcd: this backend publishes %q; a second name needs a second backend", e.self.Name)
	}
	e.self, e.value = &r, value
	lease := e.lease
	e.mu.Unlock()
	if first {
		if err := e.put(ctx); err != nil {
			e.publishErrors.Add(1)
			e.mu.Lock()
			e.self, e.value = nil, nil
			e.mu.Unlock()
			return err
		}
		e.wg.Add(1)
		go e.keep()
		return nil
	}
	if _, err := e.cli.Put(ctx, e.Key(r.Name), string(value), clientv3.WithLease(lease)); err != nil {
		// The keeper puts the newest value once etcd answers again.
		e.publishErrors.Add(1)
		select {
		case e.wake <- struct{}{}:
		default:
		}
		return fmt.Errorf("discovery/etcd: updating %s: %w (the update is retried in the background)", e.Key(r.Name), err)
	}
	return nil
}

// put grants a lease and stores the record under it.
func (e *Etcd) put(ctx context.Context) error {
	e.mu.Lock()
	name, value := e.self.Name, e.value
	e.mu.Unlock()
	g, err := e.cli.Grant(ctx, e.ttlSeconds())
	if err != nil {
		return fmt.Errorf("discovery/etcd: granting a lease at %v: %w: is etcd running and reachable?", e.endpoints(), err)
	}
	if _, err := e.cli.Put(ctx, e.Key(name), string(value), clientv3.WithLease(g.ID)); err != nil {
		// Best effort: a lease that holds nothing expires by itself.
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = e.cli.Revoke(rctx, g.ID)
		cancel()
		return fmt.Errorf("discovery/etcd: storing %s: %w", e.Key(name), err)
	}
	e.mu.Lock()
	e.lease = g.ID
	e.mu.Unlock()
	return nil
}

func (e *Etcd) endpoints() []string { return e.cli.Endpoints() }

// keep keeps the lease alive; when the lease is lost (etcd was unreachable for longer than the
// TTL, or it forgot the lease) it publishes the record again under a new one.
func (e *Etcd) keep() {
	defer e.wg.Done()
	backoff := 100 * time.Millisecond
	for {
		e.mu.Lock()
		lease := e.lease
		e.mu.Unlock()
		kctx, kcancel := context.WithCancel(e.ctx)
		ch, err := e.cli.KeepAlive(kctx, lease)
		if err == nil {
			e.found()
			backoff = 100 * time.Millisecond
			err = e.drain(kctx, ch)
		}
		kcancel()
		if e.ctx.Err() != nil {
			return
		}
		// Renewals stopped being answered: a failed publish, even when the first try below
		// finds etcd back.
		e.publishErrors.Add(1)
		// The lease is gone, or this member's value changed while etcd was away: store the
		// record again, under a new lease, until etcd takes it.
		for {
			e.lose(fmt.Errorf("keeping the lease alive: %w", err))
			e.cfg.Logger.Warn("discovery/etcd: lost this member's lease; publishing again", "endpoints", e.endpoints(), "err", err)
			select {
			case <-e.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, retryCap(e.cfg.TTL))
			pctx, pcancel := context.WithTimeout(e.ctx, e.cfg.TTL)
			err = e.resume(pctx, lease)
			pcancel()
			if err == nil {
				e.found()
				break
			}
			e.publishErrors.Add(1)
		}
	}
}

// retryCap is the longest wait between two tries to reach etcd again: well inside the TTL, so
// that a lease etcd restored when it came back is renewed before it runs out.
func retryCap(ttl time.Duration) time.Duration { return max(ttl/4, 250*time.Millisecond) }

// resume carries on with the old lease when etcd still has it (a restarted etcd restores its
// leases: the key never changes, so watchers see nothing), and publishes under a new lease when
// etcd forgot it.
func (e *Etcd) resume(ctx context.Context, lease clientv3.LeaseID) error {
	if _, err := e.cli.KeepAliveOnce(ctx, lease); err == nil {
		e.mu.Lock()
		name, value := e.self.Name, e.value
		e.mu.Unlock()
		// The value may have changed while etcd was away (a drain announced meanwhile).
		_, err := e.cli.Put(ctx, e.Key(name), string(value), clientv3.WithLease(lease))
		return err
	} else if ctx.Err() != nil {
		return err
	}
	return e.put(ctx)
}

// drain consumes keep-alive answers until the channel closes (the lease expired or was revoked)
// or a publish asks for the value to be stored again.
func (e *Etcd) drain(ctx context.Context, ch <-chan *clientv3.LeaseKeepAliveResponse) error {
	for {
		select {
		case resp, ok := <-ch:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return errors.New("the lease expired (etcd was not reachable within its TTL) or was revoked")
			}
			if resp != nil {
				e.found()
			}
		case <-e.wake:
			e.mu.Lock()
			name, value, lease := e.self.Name, e.value, e.lease
			e.mu.Unlock()
			pctx, cancel := context.WithTimeout(ctx, e.cfg.TTL)
			_, err := e.cli.Put(pctx, e.Key(name), string(value), clientv3.WithLease(lease))
			cancel()
			if err != nil {
				e.publishErrors.Add(1)
				// Try again shortly; the lease is still being kept.
				go func() {
					select {
					case <-time.After(500 * time.Millisecond):
						select {
						case e.wake <- struct{}{}:
						default:
						}
					case <-ctx.Done():
					}
				}()
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (e *Etcd) lose(err error) {
	if e.lost.Load() == nil {
		e.lost.Store(&lostState{err: err, since: time.Now()})
	}
}

func (e *Etcd) found() {
	if l := e.lost.Swap(nil); l != nil {
		e.cfg.Logger.Info("discovery/etcd: etcd answers again", "endpoints", e.endpoints(), "lost_for", time.Since(l.since).Round(time.Millisecond))
	}
}

// Watch delivers the members there are (Joined), then every change, until ctx ends or the
// backend closes. The member's own record is not delivered.
func (e *Etcd) Watch(ctx context.Context) (<-chan discovery.Event, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, discovery.ErrClosed
	}
	e.wg.Add(1)
	e.mu.Unlock()
	ch := make(chan discovery.Event, 64)
	go e.watch(ctx, ch)
	return ch, nil
}

// watch lists the prefix, reports the difference from what it knew, and follows the changes from
// that revision on; any interruption (etcd lost, the revision compacted away) goes back to the
// listing, so the members known survive an outage and nothing is reported twice.
func (e *Etcd) watch(ctx context.Context, ch chan<- discovery.Event) {
	defer e.wg.Done()
	defer close(ch)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-e.ctx.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	known := map[string]discovery.Record{}
	send := func(evs []discovery.Event) bool {
		for _, ev := range evs {
			select {
			case ch <- ev:
			case <-ctx.Done():
				return false
			}
		}
		return true
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		backoff = min(backoff, retryCap(e.cfg.TTL))
		lctx, lcancel := context.WithTimeout(ctx, e.cfg.TTL)
		resp, err := e.cli.Get(lctx, e.members, clientv3.WithPrefix())
		lcancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			e.watchErrors.Add(1)
			e.lose(fmt.Errorf("listing the members: %w", err))
			e.cfg.Logger.Debug("discovery/etcd: listing the members failed; keeping those known", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, retryCap(e.cfg.TTL))
			continue
		}
		backoff = 100 * time.Millisecond
		now := time.Now()
		current := map[string]discovery.Record{}
		for _, kv := range resp.Kvs {
			if r, ok := e.decode(kv.Key, kv.Value); ok {
				current[r.Name] = r
			}
		}
		var evs []discovery.Event
		for name, r := range current {
			old, had := known[name]
			if ev, ok := discovery.Compare(old, had, r, now); ok {
				evs = append(evs, ev)
			}
			known[name] = r
		}
		for name, r := range known {
			if _, ok := current[name]; !ok {
				delete(known, name)
				evs = append(evs, discovery.Event{Kind: discovery.Left, Record: r, At: now})
			}
		}
		if !send(evs) {
			return
		}
		// RequireLeader: a member cut off from its cluster ends the watch instead of serving a
		// stale view, and the loop lists again through another endpoint.
		wch := e.cli.Watch(clientv3.WithRequireLeader(ctx), e.members, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		for wr := range wch {
			if err := wr.Err(); err != nil {
				e.watchErrors.Add(1)
				e.cfg.Logger.Debug("discovery/etcd: the watch ended; listing again", "err", err)
				break
			}
			now := time.Now()
			var evs []discovery.Event
			for _, ev := range wr.Events {
				name := strings.TrimPrefix(string(ev.Kv.Key), e.members)
				if ev.Type == clientv3.EventTypeDelete {
					if r, ok := known[name]; ok {
						delete(known, name)
						evs = append(evs, discovery.Event{Kind: discovery.Left, Record: r, At: now})
					}
					continue
				}
				if r, ok := e.decode(ev.Kv.Key, ev.Kv.Value); ok {
					old, had := known[r.Name]
					if ev, ok := discovery.Compare(old, had, r, now); ok {
						evs = append(evs, ev)
					}
					known[r.Name] = r
				}
			}
			if !send(evs) {
				return
			}
		}
		if ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
		}
	}
}

// decode reads one member's value; it skips this member's own key and values that are not
// member records (logged at debug: another program may share the prefix).
func (e *Etcd) decode(key, value []byte) (discovery.Record, bool) {
	name := strings.TrimPrefix(string(key), e.members)
	e.mu.Lock()
	self := e.self != nil && e.self.Name == name
	e.mu.Unlock()
	if self {
		return discovery.Record{}, false
	}
	var r discovery.Record
	if err := json.Unmarshal(value, &r); err != nil || r.Name != name || r.ID == 0 {
		e.cfg.Logger.Debug("discovery/etcd: ignoring a key that holds no member record", "key", string(key))
		return discovery.Record{}, false
	}
	return r, true
}

// Status says whether etcd answers and how many publishes and watches failed so far.
func (e *Etcd) Status() discovery.Status {
	s := discovery.Status{Backend: "etcd", PublishErrors: e.publishErrors.Load(), WatchErrors: e.watchErrors.Load()}
	if l := e.lost.Load(); l != nil {
		s.Err, s.Since = l.err, l.since
	}
	return s
}

// Close withdraws the member (its lease is revoked, so its key goes at once), stops the keeper
// and the watches, and closes the client the backend made.
func (e *Etcd) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	lease, published := e.lease, e.self != nil
	e.mu.Unlock()
	e.cancel()
	e.wg.Wait()
	var err error
	if published && lease != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if _, rerr := e.cli.Revoke(ctx, lease); rerr != nil {
			err = fmt.Errorf("discovery/etcd: withdrawing (the entry goes when its lease expires): %w", rerr)
		}
		cancel()
	}
	if e.ownClient {
		if cerr := e.cli.Close(); cerr != nil && err == nil && !errors.Is(cerr, context.Canceled) {
			err = cerr
		}
	}
	return err
}
