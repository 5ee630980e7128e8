package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/velo-go/velo/tools/ibcheck/internal/check"
	"github.com/velo-go/velo/verbs"
)

const usageText = `usage: ibcheck [flags]        check this node and the UCX environment
       ibcheck env [flags]    print the export lines that pin UCX to the best port
       ibcheck lanes [flags] -- command...
                              run a command and report, from the kernel, the bytes of its
                              sockets per lane and what the RDMA ports counted meanwhile
       ibcheck topo [flags]   how near each GPU is to each RDMA NIC, and the UCX_NET_DEVICES
                              each GPU should use

Exit codes: 0 every check passed (warnings, skipped and not-compiled-in checks allowed),
1 a check failed (with --strict also a warning or a not-compiled-in check), 2 usage error.

Flags:
`

// options are the parsed command line.
type options struct {
	envMode      bool
	device       string
	ip           netip.Addr
	sysfs, dev   string
	needMemlock  uint64
	ucxResources bool
	json         bool
	strict       bool
}

// usageError is a bad command line: reported with a hint, exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func parseArgs(args []string, stdout, stderr io.Writer) (options, error) {
	var o options
	if len(args) > 0 && args[0] == "env" {
		o.envMode, args = true, args[1:]
	}
	fs := flag.NewFlagSet("ibcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.device, "device", "", "the port to check, as in UCX_NET_DEVICES (`mlx5_2:1`); default: the port that carries --ip, the first port of UCX_NET_DEVICES, or the node's best port")
	ip := fs.String("ip", "", "an `address` of this node: report which device and port carry it (and check that port)")
	fs.StringVar(&o.sysfs, "sysfs", "", "read this sysfs `tree` instead of /sys (a verbs/testdata/sysfs fixture, or a copy of another node's)")
	fs.StringVar(&o.dev, "dev", "", "the device `root` that matches --sysfs (default: the fixture layout's ../../dev/<name>, else /dev)")
	need := fs.String("need-memlock", "", "memlock `size` to require (e.g. 4G); default: velo's registered-bytes budget plus one arena")
	fs.BoolVar(&o.ucxResources, "ucx", false, "also list the linked UCX's components, memory domains and transports, like ucx_info -d")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON (schema in docs/ibcheck.md)")
	fs.BoolVar(&o.strict, "strict", false, "exit 1 on warnings and on checks that are not compiled in, not only on failures")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return o, err
		}
		return o, &usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return o, &usageError{fmt.Sprintf("unexpected argument %q (the commands are env, lanes and topo; flags start with -)", fs.Arg(0))}
	}
	if o.device != "" {
		if _, _, err := verbs.ParsePortSpec(o.device); err != nil {
			return o, &usageError{"--device: " + strings.TrimPrefix(err.Error(), verbs.ErrInvalid.Error()+": ")}
		}
	}
	if *ip != "" {
		a, err := netip.ParseAddr(*ip)
		if err != nil || a.IsUnspecified() {
			return o, &usageError{fmt.Sprintf("--ip %q: want one of this node's unicast addresses, e.g. 192.168.60.11", *ip)}
		}
		o.ip = a.Unmap()
	}
	if *need != "" {
		n, err := parseSize(*need)
		if err != nil {
			return o, &usageError{err.Error()}
		}
		o.needMemlock = n
	}
	if err := o.resolvePaths(); err != nil {
		return o, err
	}
	if o.envMode && (o.json || o.strict || o.ucxResources || o.needMemlock != 0) {
		return o, &usageError{"ibcheck env takes only --device, --ip, --sysfs and --dev"}
	}
	return o, nil
}

// resolvePaths pairs --sysfs with its device root. A fixture tree <root>/sysfs/<name> has its
// device root at <root>/dev/<name>; any other tree needs --dev, because the uverbs checks would
// otherwise open the live /dev nodes for devices of another node.
func (o *options) resolvePaths() error {
	switch {
	case o.sysfs == "" && o.dev != "":
		return &usageError{"--dev needs --sysfs: the device root must match the sysfs tree"}
	case o.sysfs == "" || o.dev != "":
		return nil
	}
	st, err := os.Stat(o.sysfs)
	if err != nil || !st.IsDir() {
		return &usageError{fmt.Sprintf("--sysfs %s: not a directory", o.sysfs)}
	}
	clean := filepath.Clean(o.sysfs)
	if clean == "/sys" {
		o.dev = "/dev"
		return nil
	}
	if filepath.Base(filepath.Dir(clean)) == "sysfs" {
		o.dev = filepath.Join(filepath.Dir(filepath.Dir(clean)), "dev", filepath.Base(clean))
		return nil
	}
	return &usageError{fmt.Sprintf("--sysfs %s needs --dev DIR, the device root that matches it (where infiniband/uverbs<k> live)", o.sysfs)}
}

// run is the whole command: parse, check (or compute the exports), print; it returns the exit code.
func run(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer, sys check.System) int {
	if len(args) > 0 && args[0] == "lanes" {
		return runLanes(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "topo" {
		return runTopo(args[1:], stdout, stderr)
	}
	o, err := parseArgs(args, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return check.ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "ibcheck: %v\nRun 'ibcheck -h' for usage.\n", err)
		return check.ExitUsage
	}
	cfg := check.Config{
		Paths:        verbs.Paths{Sysfs: o.sysfs, Dev: o.dev},
		Device:       o.device,
		IP:           o.ip,
		NeedMemlock:  o.needMemlock,
		Env:          env,
		UCXResources: o.ucxResources,
	}
	if o.envMode {
		ex, err := check.Env(ctx, cfg, sys)
		if err != nil {
			fmt.Fprintf(stderr, "ibcheck env: %v\n", err)
			return check.ExitFail
		}
		writeExports(stdout, ex)
		return check.ExitOK
	}
	rep := check.Run(ctx, cfg, sys)
	if o.json {
		if err := writeJSON(stdout, rep, o.strict); err != nil {
			fmt.Fprintf(stderr, "ibcheck: %v\n", err)
			return check.ExitFail
		}
	} else {
		writeTable(stdout, rep, o.strict)
	}
	return rep.ExitCode(o.strict)
}
