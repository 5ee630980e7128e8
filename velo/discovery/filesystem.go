package discovery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// FilesystemConfig configures the filesystem backend.
type FilesystemConfig struct {
	// Dir is the directory shared by every member (a local folder, or NFS across nodes); the
	// cluster's files live in Dir/<Cluster>/.
	Dir string
	// Cluster names the cluster (default "default").
	Cluster string
	// TTL is how long a member's file counts after its last heartbeat (default 10 s). A member
	// refreshes its file every TTL/3; a file older than its TTL counts as gone, so a killed member
	// is seen to leave within about TTL plus one Poll.
	TTL time.Duration
	// Poll is how often Watch reads the directory (default 1 s). The backend polls rather than
	// relying on inotify alone: NFS clients may not see another node's change for tens of
	// seconds through a cached negative lookup, and inotify does not see remote writes at all.
	Poll time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// entry is one member's file.
type entry struct {
	Record
	Heartbeat time.Time     `json:"heartbeat"`
	TTL       time.Duration `json:"ttl_ns"`
}

// Filesystem is the filesystem backend: one JSON file per member, written atomically (a
// temporary file renamed over it), refreshed as a heartbeat, removed on Close.
type Filesystem struct {
	cfg FilesystemConfig
	dir string

	mu     sync.Mutex
	self   *entry
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup

	// failing is the first error of the current run of failures (nil while all is well).
	failing       *failure
	publishErrors uint64
	watchErrors   uint64
}

type failure struct {
	err   error
	since time.Time
}

// note records the outcome of one write (publish) or directory read (watch).
func (f *Filesystem) note(publish bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		f.failing = nil
		return
	}
	if publish {
		f.publishErrors++
	} else {
		f.watchErrors++
	}
	if f.failing == nil {
		f.failing = &failure{err: err, since: time.Now()}
	}
}

// Status says whether the directory can be written and read, and how many tries failed.
func (f *Filesystem) Status() Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := Status{Backend: "filesystem", PublishErrors: f.publishErrors, WatchErrors: f.watchErrors}
	if f.failing != nil {
		s.Err, s.Since = f.failing.err, f.failing.since
	}
	return s
}

// NewFilesystem creates the backend; the cluster's directory is made when missing.
func NewFilesystem(cfg FilesystemConfig) (*Filesystem, error) {
	if cfg.Dir == "" {
		return nil, errors.New("discovery: FilesystemConfig.Dir is empty: name a directory every member can read and write")
	}
	if cfg.Cluster == "" {
		cfg.Cluster = "default"
	}
	if strings.ContainsAny(cfg.Cluster, `/\`) || cfg.Cluster == "." || cfg.Cluster == ".." {
		return nil, fmt.Errorf("discovery: cluster name %q: it becomes a folder name, so no slashes", cfg.Cluster)
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	dir := filepath.Join(cfg.Dir, cfg.Cluster)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("discovery: making %s: %w", dir, err)
	}
	return &Filesystem{cfg: cfg, dir: dir, stop: make(chan struct{})}, nil
}

// fileName is the member's file: its name, made safe for a file name.
func fileName(name string) string {
	safe := strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == 0 {
			return '_'
		}
		return r
	}, name)
	return safe + ".json"
}

// Publish writes the member's file and keeps it fresh until Close. Publishing again (to announce
// a drain, say) rewrites it.
func (f *Filesystem) Publish(ctx context.Context, r Record) error {
	if r.Name == "" {
		r.Name = fmt.Sprintf("%016x", r.ID)
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return ErrClosed
	}
	first := f.self == nil
	f.self = &entry{Record: r, TTL: f.cfg.TTL}
	f.mu.Unlock()
	if err := f.write(); err != nil {
		f.note(true, err)
		return err
	}
	f.note(true, nil)
	if first {
		f.wg.Add(1)
		go f.heartbeat()
	}
	return nil
}

func (f *Filesystem) write() error {
	f.mu.Lock()
	if f.self == nil {
		f.mu.Unlock()
		return nil
	}
	e := *f.self
	f.mu.Unlock()
	e.Heartbeat = time.Now()
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	path := filepath.Join(f.dir, fileName(e.Name))
	tmp := filepath.Join(f.dir, ".tmp-"+hex.EncodeToString(suffix[:])+"-"+fileName(e.Name))
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("discovery: writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("discovery: publishing %s: %w", path, err)
	}
	return nil
}

func (f *Filesystem) heartbeat() {
	defer f.wg.Done()
	tk := time.NewTicker(f.cfg.TTL / 3)
	defer tk.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-tk.C:
			err := f.write()
			f.note(true, err)
			if err != nil {
				f.cfg.Logger.Warn("discovery: heartbeat failed; other members see this one leave once its TTL passes", "err", err)
			}
		}
	}
}

// Watch delivers the members as they are (Joined, first), then every change, until ctx ends or
// the backend closes. The member's own record is not delivered.
func (f *Filesystem) Watch(ctx context.Context) (<-chan Event, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, ErrClosed
	}
	ch := make(chan Event, 64)
	f.mu.Unlock()
	f.wg.Add(1)
	go f.watch(ctx, ch)
	return ch, nil
}

func (f *Filesystem) watch(ctx context.Context, ch chan Event) {
	defer f.wg.Done()
	defer close(ch)
	known := map[string]entry{}
	files := map[string]stamped{}
	tk := time.NewTicker(f.cfg.Poll)
	defer tk.Stop()
	for {
		for _, ev := range f.scan(known, files) {
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			case <-f.stop:
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-f.stop:
			return
		case <-tk.C:
		}
	}
}

// stamped is what one scan learned from a file: its modification time and size when it was read,
// and what it held (ok false: not a member record).
type stamped struct {
	mod  time.Time
	size int64
	e    entry
	ok   bool
}

// scan reads the directory once and returns what changed since known (which it updates). A file
// whose modification time and size are those of its last read (files, which scan updates too) is
// not read again: a member's file changes only when its member writes it, so an idle cluster costs
// a poll one stat per member rather than a read and a JSON decode of every record. A cached
// record whose heartbeat is more than half its TTL old is read again anyway, so a file system
// whose timestamps are too coarse to show a heartbeat's rewrite cannot make a live member look
// stale.
func (f *Filesystem) scan(known map[string]entry, files map[string]stamped) []Event {
	f.mu.Lock()
	var selfName string
	if f.self != nil {
		selfName = f.self.Name
	}
	f.mu.Unlock()
	now := time.Now()
	seen := map[string]bool{}
	var events []Event
	dirents, err := os.ReadDir(f.dir)
	f.note(false, err)
	if err != nil {
		f.cfg.Logger.Warn("discovery: reading the cluster directory failed; keeping the members known", "dir", f.dir, "err", err)
		return nil
	}
	listed := make(map[string]bool, len(dirents))
	for _, de := range dirents {
		if de.IsDir() || strings.HasPrefix(de.Name(), ".") || !strings.HasSuffix(de.Name(), ".json") {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue // removed between the listing and the stat
		}
		listed[de.Name()] = true
		st, had := files[de.Name()]
		if !had || !st.mod.Equal(fi.ModTime()) || st.size != fi.Size() || (st.ok && now.Sub(st.e.Heartbeat) > st.e.TTL/2) {
			st = f.read(de.Name(), fi)
			files[de.Name()] = st
		}
		if !st.ok {
			continue
		}
		e := st.e
		if e.Name == selfName || now.Sub(e.Heartbeat) > e.TTL {
			continue // this member, or a stale file: its owner stopped refreshing it
		}
		seen[e.Name] = true
		old, had := known[e.Name]
		known[e.Name] = e
		if ev, ok := Compare(old.Record, had, e.Record, now); ok {
			events = append(events, ev)
		}
	}
	for name := range files {
		if !listed[name] {
			delete(files, name)
		}
	}
	for name, e := range known {
		if !seen[name] {
			delete(known, name)
			events = append(events, Event{Kind: Left, Record: e.Record, At: now})
		}
	}
	return events
}

// read reads and decodes the file name, which had the stamp of fi.
func (f *Filesystem) read(name string, fi os.FileInfo) stamped {
	st := stamped{mod: fi.ModTime(), size: fi.Size()}
	b, err := os.ReadFile(filepath.Join(f.dir, name))
	if err != nil {
		// Removed (or replaced) between the stat and the read: a zero stamp reads it next time.
		return stamped{}
	}
	if err := json.Unmarshal(b, &st.e); err != nil || st.e.Name == "" || st.e.ID == 0 {
		f.cfg.Logger.Debug("discovery: ignoring a file that is not a member record", "file", name)
		return st
	}
	st.ok = true
	return st
}

// Close stops the heartbeat and the watches and removes the member's file.
func (f *Filesystem) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	self := f.self
	f.mu.Unlock()
	close(f.stop)
	f.wg.Wait()
	if self != nil {
		if err := os.Remove(filepath.Join(f.dir, fileName(self.Name))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("discovery: withdrawing: %w", err)
		}
	}
	return nil
}
