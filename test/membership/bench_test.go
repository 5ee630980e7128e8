package membership

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/discovery"
	"github.com/velo-go/velo/velo/discovery/etcd"
	"github.com/velo-go/velo/velo/discovery/etcd/etcdtest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func buildMember(b *testing.B) string {
	bin := filepath.Join(b.TempDir(), "member")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/velo-go/velo/test/membership/cmd/member").CombinedOutput()
	require.NoError(b, err, "%s", out)
	return bin
}

// allSeeAll launches n member processes at once and returns the time until the last of them has
// seen every other up (measured by each from the common launch instant).
func allSeeAll(b *testing.B, bin string, n int, backend ...string) time.Duration {
	epoch := time.Now()
	type member struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
	}
	members := make([]member, n)
	seen := make(chan time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		args := append([]string{"-name", fmt.Sprintf("m%d", i), "-n", strconv.Itoa(n), "-epoch", strconv.FormatInt(epoch.UnixNano(), 10)}, backend...)
		cmd := exec.Command(bin, args...)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		require.NoError(b, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(b, err)
		require.NoError(b, cmd.Start())
		members[i] = member{cmd, stdin}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if ns, ok := strings.CutPrefix(sc.Text(), "seen "); ok {
					v, _ := strconv.ParseInt(ns, 10, 64)
					seen <- time.Duration(v)
				}
			}
		}()
	}
	var last time.Duration
	timeout := time.After(3 * time.Minute)
	for range n {
		select {
		case d := <-seen:
			last = max(last, d)
		case <-timeout:
			b.Fatalf("not every one of %d members saw all the others within 3 minutes", n)
		}
	}
	for _, m := range members {
		m.stdin.Close()
	}
	for _, m := range members {
		_ = m.cmd.Wait()
	}
	wg.Wait()
	return last
}

// BenchmarkAllSeeAll: N = 8, 32, 64 member processes on this machine, until every one has seen
// every other up; etcd beside the filesystem backend (TTL 10 s, poll 100 ms).
func BenchmarkAllSeeAll(b *testing.B) {
	bin := buildMember(b)
	srv := etcdtest.Start(b)
	for _, n := range []int{8, 32, 64} {
		var fs, ed time.Duration
		b.Run(fmt.Sprintf("filesystem/n=%d", n), func(b *testing.B) {
			for range b.N {
				fs = allSeeAll(b, bin, n, "-dir", b.TempDir())
			}
			b.ReportMetric(fs.Seconds()*1000, "ms-all-see-all")
		})
		b.Run(fmt.Sprintf("etcd/n=%d", n), func(b *testing.B) {
			for range b.N {
				// Members withdraw on exit (their leases are revoked), so rounds do not overlap.
				ed = allSeeAll(b, bin, n, "-etcd", srv.Endpoint())
			}
			b.ReportMetric(ed.Seconds()*1000, "ms-all-see-all")
		})
		fmt.Printf("membership n=%-3d filesystem %7.0f ms   etcd %7.0f ms   etcd/filesystem %.2fx\n",
			n, fs.Seconds()*1000, ed.Seconds()*1000, ed.Seconds()/fs.Seconds())
	}
}

// BenchmarkWatcherEvents: publishers change their records as fast as they can; one watcher
// counts the events it is delivered per second.
func BenchmarkWatcherEvents(b *testing.B) {
	srv := etcdtest.Start(b)
	const publishers = 16
	const window = 3 * time.Second
	type backend interface {
		Publish(context.Context, discovery.Record) error
		Watch(context.Context) (<-chan discovery.Event, error)
		Close() error
	}
	rate := map[string]float64{}
	for _, kind := range []string{"filesystem", "etcd"} {
		b.Run(kind, func(b *testing.B) {
			dir := b.TempDir()
			cluster := fmt.Sprintf("events%d", time.Now().UnixNano())
			newBackend := func() backend {
				if kind == "etcd" {
					e, err := etcd.New(etcd.Config{Endpoints: []string{srv.Endpoint()}, Cluster: cluster, Logger: quiet})
					require.NoError(b, err)
					return e
				}
				f, err := discovery.NewFilesystem(discovery.FilesystemConfig{Dir: dir, Cluster: cluster, Poll: 100 * time.Millisecond, Logger: quiet})
				require.NoError(b, err)
				return f
			}
			for range b.N {
				w := newBackend()
				ctx, cancel := context.WithCancel(context.Background())
				events, err := w.Watch(ctx)
				require.NoError(b, err)
				var pubs []backend
				for i := range publishers {
					p := newBackend()
					require.NoError(b, p.Publish(ctx, discovery.Record{Name: fmt.Sprintf("p%d", i), ID: uint64(i + 1), Info: []byte(`{}`)}))
					pubs = append(pubs, p)
				}
				for range publishers { // their joins
					<-events
				}
				stop := time.Now().Add(window)
				var wg sync.WaitGroup
				for i, p := range pubs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for k := 0; time.Now().Before(stop); k++ {
							r := discovery.Record{Name: fmt.Sprintf("p%d", i), ID: uint64(i + 1), Info: []byte(`{}`), Draining: k%2 == 0}
							_ = p.Publish(ctx, r)
						}
					}()
				}
				got := 0
				deadline := time.After(window)
			count:
				for {
					select {
					case <-events:
						got++
					case <-deadline:
						break count
					}
				}
				wg.Wait()
				cancel()
				for _, p := range pubs {
					p.Close()
				}
				w.Close()
				rate[kind] = float64(got) / window.Seconds()
			}
			b.ReportMetric(rate[kind], "events/s")
		})
	}
	fmt.Printf("watcher events/s (16 publishers): filesystem %.0f   etcd %.0f   etcd/filesystem %.2fx\n",
		rate["filesystem"], rate["etcd"], rate["etcd"]/rate["filesystem"])
}
