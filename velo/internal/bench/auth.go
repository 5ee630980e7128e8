package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/velo-go/velo/ucx/benchkit"
	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/auth/authtest"
)

// The cost of authentication: the messenger round trip and the chunked Get with each mode of the
// control plane, beside the unauthenticated run, in one run. Each mode gets a fresh server process
// and consumer with the credentials in their environment (auth.FromEnv, as an operator sets them).
// A handshake happens once per connection, so what the mode costs per operation is TLS's
// encryption of every byte; the cluster secret's HMAC runs only in the handshake.

// benchTB gives authtest what it needs outside a test.
type benchTB struct{ dirs []string }

func (b *benchTB) Helper()           {}
func (b *benchTB) Fatal(args ...any) { log.Fatal(args...) }
func (b *benchTB) TempDir() string {
	d, err := os.MkdirTemp("", "velo-bench-auth-")
	check(err)
	b.dirs = append(b.dirs, d)
	return d
}
func (b *benchTB) cleanup() {
	for _, d := range b.dirs {
		os.RemoveAll(d)
	}
}

type authMode struct {
	name string
	env  []string
}

func authModes(tb *benchTB) []authMode {
	ca := authtest.NewCA(tb, "bench-ca")
	srv, cli := ca.Valid(tb, "bench-owner"), ca.Valid(tb, "bench-consumer")
	secret := authtest.SecretFile(tb, authtest.Secret("bench"))
	return []authMode{
		{"none", nil},
		{"secret", []string{auth.SecretFileEnv + "=" + secret}},
		{"tls", []string{auth.TLSCAEnv + "=" + ca.CAFile, auth.TLSCertEnv + "=" + srv.CertFile, auth.TLSKeyEnv + "=" + srv.KeyFile}},
		{"tls (consumer cert)", []string{auth.TLSCAEnv + "=" + ca.CAFile, auth.TLSCertEnv + "=" + cli.CertFile, auth.TLSKeyEnv + "=" + cli.KeyFile}},
	}
}

var authEnvNames = []string{auth.SecretEnv, auth.NextSecretEnv, auth.SecretFileEnv, auth.TLSCAEnv, auth.TLSCertEnv, auth.TLSKeyEnv, auth.TLSCRLEnv}

func authTable(ctx context.Context, iters func(int) int) {
	tb := &benchTB{}
	defer tb.cleanup()
	modes := authModes(tb)
	fmt.Println()
	fmt.Println("Authentication modes (each its own owner process; modes alternate in 7 rounds; median; ratio = mode / none)")
	fmt.Printf("%-8s %16s %8s %18s %8s %14s\n", "mode", "RTT 64 B (µs)", "ratio", "Get 64 MiB (MB/s)", "ratio", "connect (ms)")
	var runs []*modeRun
	for _, m := range modes[:3] {
		consumerEnv := m.env
		if m.name == "tls" {
			consumerEnv = modes[3].env // the consumer presents its own certificate
		}
		r := startMode(ctx, m.name, m.env, consumerEnv)
		defer r.close()
		runs = append(runs, r)
	}
	// Alternating rounds, so machine noise falls on every mode alike.
	for round := 0; round < 7; round++ {
		for _, r := range runs {
			r.measure(ctx, iters)
		}
	}
	base := runs[0]
	for _, r := range runs {
		rtt, bw := us(median(r.trips)), mbps(len(r.dst), median(r.gets))
		fmt.Printf("%-8s %16.1f %8.2f %18.0f %8.2f %14.2f\n", r.name, rtt, rtt/us(median(base.trips)), bw,
			bw/mbps(len(base.dst), median(base.gets)), r.connect)
	}
}

// modeRun is one mode's owner process and consumer, and what was measured.
type modeRun struct {
	name     string
	srv      *benchkit.Child
	consumer *velo.Velo
	info     serverInfo
	dst      []byte
	connect  float64 // ms: dial, handshake and the first round trip
	trips    []time.Duration
	gets     []time.Duration
}

// startMode starts an owner with serverEnv and a consumer with consumerEnv, and makes the first
// request (the connection's set-up).
func startMode(ctx context.Context, name string, serverEnv, consumerEnv []string) *modeRun {
	r := &modeRun{name: name}
	srv, err := benchkit.StartChild(append(withoutAuthEnv(os.Environ()), serverEnv...), &r.info, "-serve")
	check(err)
	r.srv = srv

	// The consumer reads its credentials from the environment when it starts.
	for _, name := range authEnvNames {
		os.Unsetenv(name)
	}
	for _, kv := range consumerEnv {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
	r.consumer, err = velo.New(ctx, velo.WithLogger(quietLog))
	for _, name := range authEnvNames {
		os.Unsetenv(name)
	}
	check(err)
	check(r.consumer.RegisterPeer(ctx, r.info.Peer))
	t0 := time.Now()
	_, err = r.consumer.Request(ctx, r.info.Peer.ID, "echo", make([]byte, 64))
	check(err)
	r.connect = float64(time.Since(t0).Microseconds()) / 1e3
	r.dst = make([]byte, sizes[len(sizes)-1])
	return r
}

// measure adds one round: a block of round trips and two Gets of 64 MiB.
func (r *modeRun) measure(ctx context.Context, iters func(int) int) {
	msg := make([]byte, 64)
	for i := 0; i < iters(500); i++ {
		t0 := time.Now()
		_, err := r.consumer.Request(ctx, r.info.Peer.ID, "echo", msg)
		check(err)
		r.trips = append(r.trips, time.Since(t0))
	}
	h := r.info.Handles[len(r.info.Handles)-1]
	for i := 0; i < 2; i++ {
		t0 := time.Now()
		l, err := r.consumer.GetInto(ctx, h, r.dst)
		check(err)
		r.gets = append(r.gets, time.Since(t0))
		check(l.Detach(ctx))
	}
}

func (r *modeRun) close() {
	r.consumer.Close()
	r.srv.Stop()
}

func withoutAuthEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range authEnvNames {
			if k == n {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}
