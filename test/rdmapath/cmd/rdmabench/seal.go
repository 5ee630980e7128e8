package main

// The seal table (-only seal): what sealing UCX frames costs an RDMA-path get.
//
// With credentials every UCX transport frame after the hello carries a GCM seal (wire.UCXFrameKey). A
// get's bytes never pass through a frame (the GET reads the owner's registration), only its
// acquire and its release do, and only when those messages travel over UCX: the runtime sends a
// message on the first of its transports, in the order given to New, that reaches the peer. So
// the table has four instance pairs, each pair an owner in the owner process and a consumer here:
// without and with a cluster secret, each with the TCP control plane first (the documented order:
// acquire and release go over TCP, and the seal is off the get's path) and with the UCX transport
// first (acquire and release are sealed UCX frames). The four take turns get by get, so the
// machine's noise falls on all of them alike; a measurement times GetInto and the lease's Detach,
// everything a caller waits for. The sealed pairs' UCX frames per get are counted and printed, so
// a run shows which messages the seal touched (each is sealed by its sender and checked by its
// receiver).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/ucx/benchkit"
	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// sealSizes are the payloads of the seal table.
var sealSizes = []int{8 << 20, 64 << 20}

// secretEnv hands the cluster secret (hex) from the bench to its owner process.
const secretEnv = "RDMABENCH_SECRET"

// sealVariant is one instance pair of the seal table.
type sealVariant struct {
	name     string
	secret   bool // a cluster secret on both sides: UCX frames are sealed
	ucxFirst bool // the UCX transport before the TCP control plane: messages go over UCX
}

var sealVariants = []sealVariant{
	{"plain", false, false},
	{"sealed", true, false},
	{"plain, ucx first", false, true},
	{"sealed, ucx first", true, true},
}

// sealOwnerInfo is the seal owner's announcement: per variant its instance and one handle per
// size in sealSizes.
type sealOwnerInfo struct {
	Peers   []velo.PeerInfo
	Handles [][]velo.Handle
}

// startVariant brings up an instance of variant sv; reg gets its metrics.
func startVariant(ctx context.Context, sv sealVariant, secret []byte, reg prometheus.Registerer) (*velo.Velo, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var cfg tcp.Config
	if sv.secret {
		s, err := auth.NewSecrets(secret)
		if err != nil {
			return nil, err
		}
		cfg.Auth = auth.Config{Secrets: s}
	}
	ctl, err := tcp.New(cfg)
	if err != nil {
		return nil, err
	}
	u, err := ucxtransport.New(ucxtransport.Config{EagerEndpoints: true, Logger: quiet, RMAOverSoftwareLanes: true})
	if err != nil {
		ctl.Close()
		return nil, err
	}
	opts := []velo.Option{velo.WithLogger(quiet), velo.WithRegisterer(reg),
		velo.WithRDMA(velo.RDMAConfig{Pool: velo.RDMAPoolConfig{RegisteredBytesBudget: 1 << 30}})}
	if sv.ucxFirst {
		opts = append(opts, velo.WithUCXTransport(u), velo.WithTransport(ctl))
	} else {
		opts = append(opts, velo.WithTransport(ctl), velo.WithUCXTransport(u))
	}
	return velo.New(ctx, opts...)
}

// runSealOwner stages every size pinned in one instance per variant, announces them and serves
// until stdin closes.
func runSealOwner() error {
	ctx := context.Background()
	secret, err := hex.DecodeString(os.Getenv(secretEnv))
	if err != nil || len(secret) < auth.MinSecretLen {
		return fmt.Errorf("the seal owner needs the cluster secret in %s (the bench starts it)", secretEnv)
	}
	var info sealOwnerInfo
	for i, sv := range sealVariants {
		v, err := startVariant(ctx, sv, secret, prometheus.NewRegistry())
		if err != nil {
			return fmt.Errorf("%s: %w", sv.name, err)
		}
		defer v.Close()
		var hs []velo.Handle
		for j, n := range sealSizes {
			b := make([]byte, n)
			fill(b, byte(i*len(sealSizes)+j))
			h, err := v.StageDataPinned(ctx, b)
			if err != nil {
				return err
			}
			hs = append(hs, h)
		}
		info.Peers, info.Handles = append(info.Peers, v.PeerInfo()), append(info.Handles, hs)
	}
	if err := benchkit.Announce(info); err != nil {
		return err
	}
	benchkit.UntilStdinCloses()
	return nil
}

// ucxFrames reads velo_ucx_transport_frames_total from reg: the frames sent and received.
func ucxFrames(reg *prometheus.Registry) (sent, received float64) {
	mfs, err := reg.Gather()
	if err != nil {
		return -1, -1
	}
	for _, mf := range mfs {
		if mf.GetName() != "velo_ucx_transport_frames_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				switch {
				case l.GetName() != "direction":
				case l.GetValue() == "sent":
					sent = m.GetCounter().GetValue()
				case l.GetValue() == "received":
					received = m.GetCounter().GetValue()
				}
			}
		}
	}
	return sent, received
}

func runSeal(quick bool, rounds int) error {
	ctx := context.Background()
	if quick {
		rounds = 1
	}
	rounds = max(1, rounds)
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	var info sealOwnerInfo
	owner, err := benchkit.StartChild(append(os.Environ(), secretEnv+"="+hex.EncodeToString(secret)), &info, "-role", "sealowner")
	if err != nil {
		return fmt.Errorf("the seal owner: %w", err)
	}
	defer owner.Stop()
	vs := make([]*velo.Velo, len(sealVariants))
	regs := make([]*prometheus.Registry, len(sealVariants))
	for i, sv := range sealVariants {
		regs[i] = prometheus.NewRegistry()
		if vs[i], err = startVariant(ctx, sv, secret, regs[i]); err != nil {
			return fmt.Errorf("%s: %w", sv.name, err)
		}
		defer vs[i].Close()
		if err := vs[i].RegisterPeer(ctx, info.Peers[i]); err != nil {
			return fmt.Errorf("%s: %w", sv.name, err)
		}
	}
	// get is one get of variant i and size j and its detach, timed together.
	get := func(i, j int, dst []byte) (time.Duration, error) {
		t0 := time.Now()
		l, err := vs[i].GetInto(ctx, info.Handles[i][j], dst)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", sealVariants[i].name, err)
		}
		if l.Path != metrics.PathRDMA {
			return 0, fmt.Errorf("%s: a get took %s/%s", sealVariants[i].name, l.Path, l.Reason)
		}
		if err := l.Detach(ctx); err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	}
	fmt.Printf("\nsealed UCX frames and the RDMA path (%d alternating rounds): GetInto + Detach, the four pairs taking turns get by get\n", rounds)
	printLoad()
	fmt.Printf("MiB/s, median of the rounds [min–max]; sealed/plain: the sealed pair's MiB/s over its plain pair's, per round,\n")
	fmt.Printf("median [min–max]; pooled: the same over all the rounds' gets together\n\n")
	fmt.Printf("%-7s %5s %-18s %22s %24s %7s %16s\n", "size", "gets", "pair", "MiB/s", "sealed/plain", "pooled", "UCX frames/get")
	for j, n := range sealSizes {
		iters := iterationsFor(n, quick)
		dst := make([]byte, n)
		for i := range sealVariants { // warm up: endpoints, the first registration, dst's pages
			for k := 0; k < 2; k++ {
				if _, err := get(i, j, dst); err != nil {
					return err
				}
			}
		}
		rates := make([][]float64, len(sealVariants))
		pooled := make([]time.Duration, len(sealVariants))
		sent0, recv0 := make([]float64, len(sealVariants)), make([]float64, len(sealVariants))
		for i := range sealVariants {
			sent0[i], recv0[i] = ucxFrames(regs[i])
		}
		for r := 0; r < rounds; r++ {
			sum := make([]time.Duration, len(sealVariants))
			for k := 0; k < iters; k++ {
				for o := range sealVariants {
					i := (o + k + r) % len(sealVariants) // rotate who goes first
					d, err := get(i, j, dst)
					if err != nil {
						return err
					}
					sum[i] += d
				}
			}
			for i := range sealVariants {
				rates[i] = append(rates[i], float64(n)*float64(iters)/(1<<20)/sum[i].Seconds())
				pooled[i] += sum[i]
			}
		}
		gets := float64(iters * rounds)
		for i, sv := range sealVariants {
			ratio, all := "", ""
			if sv.secret { // its plain pair is the one before it
				q := make([]float64, rounds)
				for r := range q {
					q[r] = rates[i][r] / rates[i-1][r]
				}
				ratio, all = spreadRatio(q), fmt.Sprintf("%.3fx", pooled[i-1].Seconds()/pooled[i].Seconds())
			}
			sent, recv := ucxFrames(regs[i])
			fmt.Printf("%-7s %5d %-18s %22s %24s %7s %16s\n", fmt.Sprintf("%d MiB", n>>20), iters, sv.name, spread(rates[i]), ratio, all,
				fmt.Sprintf("%.1f out, %.1f in", (sent-sent0[i])/gets, (recv-recv0[i])/gets))
		}
	}
	return nil
}

// spreadRatio prints ratios as a median and their range.
func spreadRatio(v []float64) string {
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return fmt.Sprintf("%.3fx [%.3f–%.3f]", median(v), lo, hi)
}

// printLoad prints the machine's load average (the bench shares it with whatever else runs).
func printLoad() {
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("load average: %s", la)
	}
}
