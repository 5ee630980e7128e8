// Package twoproc holds what the two-process examples share: the JSON files through which owner
// and consumer find each other, the launcher that runs both roles as children of one command, the
// printing of the path metric, and the choice of an address other nodes can reach.
package twoproc

import (
	"bufio"
	"context"
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

// WriteJSON writes v to dir/name atomically (write a temporary file, rename), so the other side
// never reads half a file.
func WriteJSON(dir, name string, v any) error {
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

// WaitJSON polls for dir/name until ctx ends: the other process may start later, and on NFS a new
// file can take a while (negative-dentry caching: up to about 30 s) to appear.
func WaitJSON(ctx context.Context, dir, name string, v any) error {
	path := filepath.Join(dir, name)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			return json.Unmarshal(b, v)
		}
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-tick.C:
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
