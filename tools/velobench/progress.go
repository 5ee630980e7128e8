package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/verbs"
)

// isTerminal reports whether w is a terminal (the live progress line needs one).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progress prints the sweep as it goes. On a terminal, each finished point is a line and a live
// line under them says which point runs, how many are done and the time left, redrawn twice a
// second; elsewhere (a file, a pipe, CI) the same point lines with the count and the time left,
// and nothing redrawn. "off" prints nothing but the final summary.
type progress struct {
	w     io.Writer
	live  bool
	off   bool
	total int
	start time.Time

	mu      sync.Mutex
	done    int
	current string
	stop    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
}

func newProgress(w io.Writer, mode string, tty bool, total int) *progress {
	p := &progress{w: w, total: total, start: time.Now(), stop: make(chan struct{})}
	switch mode {
	case "off":
		p.off = true
	case "tty":
		p.live = true
	case "auto":
		p.live = tty
	}
	if p.live {
		p.wg.Add(1)
		go p.redraw()
	}
	return p
}

func (p *progress) header(r *Report, h helloResp) {
	if p.off {
		return
	}
	e := r.Initiator
	tls := e.UCXEnv["UCX_TLS"]
	if tls == "" {
		tls = "(UCX's choice)"
	}
	fmt.Fprintf(p.w, "velobench %s, %s: initiator %s, target %q on %s (pid %d), found through %s\n", r.Velobench, r.Mode, e.Host, h.Name, h.Host, h.PID, r.Discovery)
	fmt.Fprintf(p.w, "UCX %s%s, UCX_TLS=%s; %s, %d CPUs, kernel %s, %s\n", e.UCX, guardWord(e.UCXGuard), tls, e.CPU, e.CPUs, e.Kernel, e.Go)
	if e.LineRateGbps > 0 {
		fmt.Fprintf(p.w, "port %s: %.0f Gb/s = %.2f GB/s line rate\n", e.LineRatePort, e.LineRateGbps, e.LineRateGbps/8)
	}
	if e.Rails != "" || r.Target.Rails != "" {
		fmt.Fprintf(p.w, "rails: initiator %s; target %s\n", orWord(e.Rails, "none"), orWord(r.Target.Rails, "none"))
	}
	fmt.Fprintf(p.w, "baseline: %s\n", e.Perftest)
	fmt.Fprintf(p.w, "lanes (socket bytes per point, initiator / target): %s / %s\n", orWord(e.Lanes, "not counted"), orWord(r.Target.Lanes, "not counted"))
	if strings.HasPrefix(e.Lanes, "counted") || strings.HasPrefix(r.Target.Lanes, "counted") {
		fmt.Fprintln(p.w, "note: counting lanes runs a kernel program on every packet of both processes; on a small machine over UCX_TLS=tcp that costs throughput (8-64 MiB gets read up to a fifth slower here); compare with other tools under --lanes off")
	}
	fmt.Fprintf(p.w, "%d points (%s)\n", p.total, strings.Join(r.Sweep.Ops, ", "))
	for _, s := range r.Skipped {
		fmt.Fprintf(p.w, "skipped: %s %s x%d, %d callers: %s\n", s.Op, human(s.Block), s.Batch, s.Callers, s.Why)
	}
}

func orWord(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}

func guardWord(g bool) string {
	if g {
		return " (velo's static build, guarded)"
	}
	return ""
}

// starting shows, on a terminal, the point that now runs.
func (p *progress) starting(s spec) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.current = s.point().label()
	if p.live {
		fmt.Fprintf(p.w, "\r\x1b[K%s", p.statusLocked())
	}
}

func (p *progress) finished(pt Point) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if p.off {
		return
	}
	line := fmt.Sprintf("[%*d/%d] %s", len(fmt.Sprint(p.total)), p.done, p.total, pointLine(pt))
	if p.live {
		fmt.Fprintf(p.w, "\r\x1b[K%s\n", line)
		return
	}
	fmt.Fprintf(p.w, "%s  (ETA %s)\n", line, p.etaLocked())
}

// pointLine is one point for people.
func pointLine(pt Point) string {
	s := fmt.Sprintf("%-30s %8.3f GB/s %10.0f ops/s  p50 %s p99 %s p99.9 %s  CPU %.2f+%.2f s/GB  rdma %.0f chunked %.0f",
		pt.label(), pt.GBps, pt.OpsPerSec, usText(pt.Latency.P50), usText(pt.Latency.P99), usText(pt.Latency.P999),
		pt.CPUInitiator, pt.CPUTarget, pt.rdmaOps(), pt.chunkedOps())
	if n := pt.inlineOps(); n > 0 {
		s += fmt.Sprintf(" inline %.0f", n)
	}
	if n := pt.shmOps(); n > 0 {
		s += fmt.Sprintf(" shm %.0f", n)
	}
	s += "  " + lanesText(pt)
	if len(pt.RailsInitiator) > 0 {
		s += "  rails " + railsText(pt.RailsInitiator)
	}
	if pt.LineRate > 0 {
		s += fmt.Sprintf("  %.0f%% of line rate", 100*pt.LineRate)
	}
	if pf := pt.Perftest; pf != nil {
		if pf.GBps > 0 {
			s += fmt.Sprintf("  | perftest %.3f GB/s (%.2fx)", pf.GBps, pt.GBps/pf.GBps)
		} else if pf.Test != "" {
			s += "  | perftest: none (see the note at the end)"
		}
	}
	return s
}

// lanesText is the point's socket bytes by lane, both directions, initiator then target:
// "lanes ctl 9.1 KiB ucx 8.2 MiB / ctl 9.0 KiB ucx 8.2 MiB"; "n/a" for a side that could not count
// (the header says why).
func lanesText(pt Point) string {
	side := func(l *LaneBytes) string {
		if l == nil {
			return "n/a"
		}
		return fmt.Sprintf("ctl %s ucx %s", verbs.FormatBytes(l.Control()), verbs.FormatBytes(l.UCX()))
	}
	return "lanes " + side(pt.LanesInitiator) + " / " + side(pt.LanesTarget)
}

// railsText is the bytes read per rail: "0:eth1 4 MiB, 1:eth2 4 MiB".
func railsText(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " " + verbs.FormatBytes(uint64(m[k]))
	}
	return strings.Join(parts, ", ")
}

func usText(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.1fms", v/1000)
	case v >= 100:
		return fmt.Sprintf("%.0fµs", v)
	}
	return fmt.Sprintf("%.1fµs", v)
}

// etaLocked estimates the time left from the points done so far.
func (p *progress) etaLocked() string {
	if p.done == 0 {
		return "?"
	}
	left := time.Duration(float64(time.Since(p.start)) / float64(p.done) * float64(p.total-p.done))
	return clock(left)
}

func (p *progress) statusLocked() string {
	if p.done >= p.total {
		return ""
	}
	return fmt.Sprintf("[%d/%d done] now %s … %s elapsed, ETA %s", p.done, p.total, p.current, clock(time.Since(p.start)), p.etaLocked())
}

func clock(d time.Duration) string {
	s := int(d.Round(time.Second) / time.Second)
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

func (p *progress) redraw() {
	defer p.wg.Done()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			fmt.Fprintf(p.w, "\r\x1b[K%s", p.statusLocked())
			p.mu.Unlock()
		}
	}
}

// close ends the live line; safe to call more than once.
func (p *progress) close() {
	p.stopped.Do(func() {
		close(p.stop)
		p.wg.Wait()
		if p.live {
			fmt.Fprint(p.w, "\r\x1b[K")
		}
	})
}
