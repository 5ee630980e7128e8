package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
)

// runCompare prints B over A for every point both reports measured: GB/s and p50 latency, and
// the differences of environment that may explain them.
func runCompare(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compare", stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: velobench compare A.json B.json\n\nPrints B/A for each point both runs measured (GB/s: above 1 is faster; latency: below 1 is faster).\n")
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fs.Usage()
			return errHelp
		}
		return &usageError{err.Error()}
	}
	if fs.NArg() != 2 {
		return usageErr("compare takes two JSON reports (--json of two runs): velobench compare A.json B.json")
	}
	a, err := readReport(fs.Arg(0))
	if err != nil {
		return err
	}
	b, err := readReport(fs.Arg(1))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "A: %s (%s, UCX %s, %s)\nB: %s (%s, UCX %s, %s)\n", fs.Arg(0), a.Started.Format("2006-01-02 15:04"), a.Initiator.UCX, a.Mode,
		fs.Arg(1), b.Started.Format("2006-01-02 15:04"), b.Initiator.UCX, b.Mode)
	for _, d := range envDiffs(a, b) {
		fmt.Fprintf(stdout, "differs: %s\n", d)
	}
	byKey := map[string]Point{}
	for _, p := range a.Points {
		byKey[p.key()] = p
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "point\tA GB/s\tB GB/s\tB/A\tA p50 µs\tB p50 µs\tB/A\t")
	matched := 0
	for _, p := range b.Points {
		q, ok := byKey[p.key()]
		if !ok {
			continue
		}
		matched++
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%s\t%.1f\t%.1f\t%s\t\n", p.label(), q.GBps, p.GBps, ratio(p.GBps, q.GBps),
			q.Latency.P50, p.Latency.P50, ratio(p.Latency.P50, q.Latency.P50))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if matched == 0 {
		return fmt.Errorf("%s and %s have no point in common (operation, block, batch and callers all equal): run both with the same --ops, --blocks, --batch and --callers", fs.Arg(0), fs.Arg(1))
	}
	if n := len(b.Points) - matched; n > 0 {
		fmt.Fprintf(stdout, "%d points of B are not in A\n", n)
	}
	return nil
}

func ratio(b, a float64) string {
	if a == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", b/a)
}

// envDiffs lists what differs between the two runs' environments.
func envDiffs(a, b *Report) []string {
	var out []string
	diff := func(what, x, y string) {
		if x != y {
			out = append(out, fmt.Sprintf("%s: %q in A, %q in B", what, x, y))
		}
	}
	diff("velobench", a.Velobench, b.Velobench)
	diff("UCX", a.Initiator.UCX, b.Initiator.UCX)
	diff("UCX variables", sortedKV(a.Initiator.UCXEnv), sortedKV(b.Initiator.UCXEnv))
	diff("CPU", a.Initiator.CPU, b.Initiator.CPU)
	diff("kernel", a.Initiator.Kernel, b.Initiator.Kernel)
	diff("Go", a.Initiator.Go, b.Initiator.Go)
	diff("mode", a.Mode, b.Mode)
	return out
}
