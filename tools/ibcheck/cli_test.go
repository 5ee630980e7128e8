package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestGoldenEnvCommand runs `ibcheck env` over every fixture tree.
func TestGoldenEnvCommand(t *testing.T) {
	want := map[string]struct {
		exit int
		has  []string
	}{
		"cx7-ib-active":            {0, []string{"export UCX_NET_DEVICES=mlx5_0:1 ", "export UCX_TLS=rc_mlx5,ud_mlx5,self "}},
		"cx7-roce-active":          {0, []string{"export UCX_NET_DEVICES=mlx5_0:1 ", "Ethernet"}},
		"cx7-ib-port-down":         {1, []string{"mlx5_0:1 is PORT_DOWN"}},
		"cx7-ib-partial-pkey":      {0, []string{"export UCX_IB_PKEY=0x7fff "}},
		"cx7-dual-port-one-active": {0, []string{"export UCX_NET_DEVICES=mlx5_0:1 "}},
		"cx3-vpi-two-port":         {0, []string{"export UCX_NET_DEVICES=mlx4_0:1 ", "export UCX_TLS=rc_verbs,ud_verbs,self "}},
		"no-devices":               {1, []string{"no usable RDMA port", "no RDMA device"}},
	}
	for _, name := range fixtureNames(t) {
		t.Run(name, func(t *testing.T) {
			w, ok := want[name]
			if !ok {
				t.Fatalf("fixture %s has no expectation here", name)
			}
			var out, errOut bytes.Buffer
			// UCX_NET_DEVICES in the environment must not steer the answer: env computes it.
			env := envOf(map[string]string{"UCX_NET_DEVICES": "mlx5_9:1"})
			code := run(context.Background(), []string{"env", "--sysfs", fixtureSysfs(name)}, env, &out, &errOut, testSystem(t))
			if code != w.exit {
				t.Errorf("exit %d, want %d; stderr %s", code, w.exit, errOut.String())
			}
			all := out.String() + errOut.String()
			for _, s := range w.has {
				if !strings.Contains(all, s) {
					t.Errorf("output lacks %q:\n%s", s, all)
				}
			}
			if code != 0 && out.Len() > 0 {
				t.Errorf("a failed env printed to stdout (eval would run it): %s", out.String())
			}
			checkGolden(t, "env-command-"+name+".txt", []byte(all))
		})
	}
}

// TestEnvCommandChoice: --device and --ip steer `ibcheck env` too.
func TestEnvCommandChoice(t *testing.T) {
	dual := fixtureSysfs("cx7-dual-port-one-active")
	cases := []struct {
		args []string
		exit int
		has  string
	}{
		{[]string{"env", "--sysfs", dual, "--device", "mlx5_1:1"}, 1, "mlx5_1:1 is PORT_DOWN"},
		{[]string{"env", "--sysfs", dual, "--device", "mlx5_0:1"}, 0, "UCX_NET_DEVICES=mlx5_0:1"},
		{[]string{"env", "--sysfs", dual, "--ip", "192.168.51.12"}, 1, "mlx5_1:1 is PORT_DOWN"},
		{[]string{"env", "--sysfs", fixtureSysfs("cx7-roce-active"), "--ip", "192.168.60.11"}, 0, "UCX_NET_DEVICES=mlx5_0:1"},
		{[]string{"env", "--sysfs", dual, "--ip", "10.0.0.5"}, 1, "which no RDMA port carries"},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		code := run(context.Background(), c.args, envOf(nil), &out, &errOut, testSystem(t))
		if code != c.exit || !strings.Contains(out.String()+errOut.String(), c.has) {
			t.Errorf("%v: exit %d (want %d), output lacks %q:\n%s%s", c.args, code, c.exit, c.has, out.String(), errOut.String())
		}
	}
}

// TestUsageErrors: a bad command line exits 2 with a message that names the problem, and checks
// nothing.
func TestUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		has  string
	}{
		{[]string{"--device", "mlx5_0"}, "want <device>:<port>"},
		{[]string{"--device", "mlx5_0:x"}, "want <device>:<port>"},
		{[]string{"--ip", "not-an-ip"}, "--ip \"not-an-ip\""},
		{[]string{"--ip", "0.0.0.0"}, "unicast"},
		{[]string{"--need-memlock", "lots"}, "--need-memlock"},
		{[]string{"--need-memlock", "4X"}, "unknown unit"},
		{[]string{"--need-memlock", "0"}, "more than zero"},
		{[]string{"--no-such-flag"}, "flag provided but not defined"},
		{[]string{"extra"}, "unexpected argument \"extra\""},
		{[]string{"--sysfs", "testdata"}, "needs --dev DIR"},
		{[]string{"--sysfs", "no/such/dir"}, "not a directory"},
		{[]string{"--dev", "/dev"}, "--dev needs --sysfs"},
		{[]string{"env", "--json"}, "ibcheck env takes only"},
		{[]string{"env", "extra"}, "unexpected argument"},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		sys := testSystem(t)
		sys.UCX = nil // a usage error must not get as far as asking UCX
		code := run(context.Background(), c.args, envOf(nil), &out, &errOut, sys)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2", c.args, code)
		}
		if !strings.Contains(errOut.String(), c.has) || !strings.Contains(errOut.String(), "ibcheck -h") {
			t.Errorf("%v: stderr lacks %q and the usage hint: %s", c.args, c.has, errOut.String())
		}
		if out.Len() != 0 {
			t.Errorf("%v: printed to stdout: %s", c.args, out.String())
		}
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"env", "-h"}} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, envOf(nil), &out, &errOut, testSystem(t)); code != 0 {
			t.Errorf("%v: exit %d, want 0", args, code)
		}
		for _, s := range []string{"usage: ibcheck", "Exit codes", "-need-memlock", "-strict"} {
			if !strings.Contains(out.String(), s) {
				t.Errorf("%v: help lacks %q:\n%s", args, s, out.String())
			}
		}
	}
}

func TestParseSize(t *testing.T) {
	cases := map[string]uint64{
		"1": 1, "4096": 4096, "64M": 64 << 20, "64MiB": 64 << 20, "64mb": 64 << 20, "2G": 2 << 30, "1 GiB": 1 << 30,
		"3k": 3 << 10, "1T": 1 << 40, "16777215T": 16777215 << 40,
	}
	for in, want := range cases {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "G", "-1", "1.5G", "0", "0G", "16777216T", "99999999999999999999", "1 X", "1GiBs"} {
		if got, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", bad, got)
		}
	}
}

// FuzzParseSize: no input panics, and an accepted size is positive.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1", "64M", "2GiB", "16777216T", "", "x", "1 kb", "18446744073709551615"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := parseSize(s); err == nil && n == 0 {
			t.Fatalf("parseSize(%q) accepted zero", s)
		}
	})
}
