package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runLocal runs both sides on this host: the target is this binary started again as `velobench
// target`, in its own process (its CPU time, its UCX worker, its memory), found through a
// temporary directory as two nodes would find each other.
func runLocal(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("local", stderr)
	cfg := initConfig{mode: "local", stdout: stdout, stderr: stderr, osEnv: os.Environ(), isTTY: isTerminal(stdout)}
	cfg.sweep.register(fs)
	cfg.out.register(fs)
	registerLanes(fs, &cfg.lanes)
	registerRails(fs, &cfg.meet.Rails)
	registerBatchInline(fs, &cfg.meet.BatchInline)
	registerSameHost(fs, &cfg.meet.SameHost)
	fs.DurationVar(&cfg.meet.Wait, "wait", 30*time.Second, "how long to wait for the target process to start")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: velobench local [flags]\n\nBoth sides on this host, in two processes: a sweep without a second node.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if err := cfg.sweep.check(); err != nil {
		return err
	}
	if err := cfg.out.check(); err != nil {
		return err
	}
	if err := checkLaneMode(cfg.lanes); err != nil {
		return err
	}
	if err := checkRails(cfg.meet.Rails); err != nil {
		return err
	}
	if cfg.meet.Wait <= 0 {
		return usageErr("--wait %s: give how long to wait for the target process, for example --wait 30s", cfg.meet.Wait)
	}
	dir, err := os.MkdirTemp("", "velobench-local-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg.meet.Dir, cfg.meet.Cluster, cfg.meet.Name, cfg.meet.Listen = dir, "local", "local-target", "127.0.0.1:0"

	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program to start the target: %w", err)
	}
	cmd := exec.Command(exe, "target", "--dir", dir, "--cluster", cfg.meet.Cluster, "--name", cfg.meet.Name,
		"--listen", "127.0.0.1:0", "--memory", strconv.FormatInt(cfg.sweep.Memory, 10), "--lanes", cfg.lanes, "--once")
	if len(cfg.meet.Rails) > 0 {
		cmd.Args = append(cmd.Args, "--rails", strings.Join(cfg.meet.Rails, ","))
	}
	if cfg.meet.BatchInline >= 0 {
		cmd.Args = append(cmd.Args, "--batch-inline", strconv.Itoa(cfg.meet.BatchInline))
	}
	if cfg.meet.SameHost {
		cmd.Args = append(cmd.Args, "--same-host")
	}
	cmd.Stdout, cmd.Stderr = io.Discard, stderr
	// It starts before this process enters its lane counter's cgroup (initiate): it makes its own
	// counter beside this one's (or inside an outer counter's, as this one does), never inside
	// this one's, which would count its sockets as the initiator's.
	// Its own process group, so that Ctrl-C reaches this process alone, which then ends the run
	// and tells the target; and it dies with this process whatever happens to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the target process %s: %w", exe, err)
	}
	exited := make(chan error, 1)
	died := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		died <- fmt.Errorf("the target process (%s target) exited before the initiator found it: %v; its messages are above", exe, err)
		exited <- err
	}()
	defer func() {
		// After a finished run the target exits on its own (bye, or this side's instance
		// closing); after a failed one it may wait for an initiator that never comes.
		select {
		case <-exited:
			return
		case <-time.After(3 * time.Second):
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	cfg.targetDied = died
	return initiate(ctx, cfg)
}
