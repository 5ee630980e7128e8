package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/velo-go/velo/ucx/benchkit"
	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// The software-lanes table (-only lanes): over UCX lanes that are all software ones (tcp), a Get
// takes the chunked path by default (reason software_lanes). The table measures, in alternating
// rounds of one run, Gets of 8 and 64 MiB of a pinned payload between two instances without the
// opt-in (the default: they must take chunked/software_lanes) beside Gets of a plain payload of
// the same pair (the chunked path as it always was: chunked/not_pinned), and the same pinned Gets
// between two instances with VELO_UCX_SOFTWARE_RMA=1 (rdma/ok) beside those chunked ones: the
// first ratio should be about 1 (the default loses nothing against the chunked path), the second is
// the RDMA path over tcp as the get table measured it before.

var laneSizes = []int{8 << 20, 64 << 20}

// lanePair is a consumer in this process and an owner child, both with the opt-in or both without.
type lanePair struct {
	v     *velo.Velo
	owner *benchkit.Child
	info  ownerInfo
}

// startLanePair starts the pair; the opt-in is read from the environment by each side's transport.
func startLanePair(ctx context.Context, optIn bool) (*lanePair, error) {
	val := "0"
	if optIn {
		val = "1"
	}
	os.Setenv(ucxtransport.SoftwareRMAEnv, val) // this process's transport (start) and the child's
	p := &lanePair{}
	var err error
	if p.owner, err = benchkit.StartChild(nil, &p.info, "-role", "owner", "-rss", "0"); err != nil {
		return nil, fmt.Errorf("reading the owner: %w", err)
	}
	if p.v, _, err = start(ctx); err != nil {
		p.owner.Stop()
		return nil, err
	}
	if err := p.v.RegisterPeer(ctx, p.info.Peer); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *lanePair) close() {
	p.v.Close()
	p.owner.Stop()
}

// handles are the pair's pinned and plain payloads of size n.
func (p *lanePair) handles(n int) (pinned, plain velo.Handle) {
	for i, s := range sizes {
		if s == n {
			return p.info.Pinned[i], p.info.Plain[i]
		}
	}
	panic("rdmabench: no payload of " + strconv.Itoa(n) + " bytes")
}

func runLanes(quick bool) error {
	ctx := context.Background()
	nrounds := rounds
	if quick {
		nrounds = 1
	}
	def, err := startLanePair(ctx, false)
	if err != nil {
		return err
	}
	defer def.close()
	opt, err := startLanePair(ctx, true)
	if err != nil {
		return err
	}
	defer opt.close()

	fmt.Printf("software lanes: Gets over UCX_TLS=%s, without the opt-in (default) and with %s=1, %d alternating rounds\n",
		os.Getenv("UCX_TLS"), ucxtransport.SoftwareRMAEnv, nrounds)
	printLoad()
	fmt.Printf("MiB/s; median of the rounds [min–max]\n\n")
	fmt.Printf("%-7s %5s %22s %22s %22s %22s %12s %12s\n", "size", "gets", "default (pinned)", "chunked (plain)", "opt-in rdma", "opt-in chunked",
		"default/chk", "rdma/chk")
	for _, n := range laneSizes {
		iters := iterationsFor(n, quick)
		dst := make([]byte, n)
		dPinned, dPlain := def.handles(n)
		oPinned, oPlain := opt.handles(n)
		for _, w := range []struct {
			v    *velo.Velo
			h    velo.Handle
			want metrics.Path
		}{{def.v, dPinned, metrics.PathChunked}, {def.v, dPlain, metrics.PathChunked}, {opt.v, oPinned, metrics.PathRDMA}, {opt.v, oPlain, metrics.PathChunked}} {
			if _, err := getOnce(ctx, w.v, w.h, dst, w.want); err != nil {
				return err
			}
		}
		var d, c, r, oc []float64
		for range nrounds {
			x, err := velorate(ctx, def.v, dPinned, dst, iters, metrics.PathChunked)
			if err != nil {
				return err
			}
			d = append(d, x)
			if x, err = velorate(ctx, def.v, dPlain, dst, iters, metrics.PathChunked); err != nil {
				return err
			}
			c = append(c, x)
			if x, err = velorate(ctx, opt.v, oPinned, dst, iters, metrics.PathRDMA); err != nil {
				return err
			}
			r = append(r, x)
			if x, err = velorate(ctx, opt.v, oPlain, dst, iters, metrics.PathChunked); err != nil {
				return err
			}
			oc = append(oc, x)
		}
		fmt.Printf("%-7s %5d %22s %22s %22s %22s %11.2fx %11.2fx\n", fmt.Sprintf("%d MiB", n>>20), iters, spread(d), spread(c), spread(r), spread(oc),
			median(d)/median(c), median(r)/median(oc))
	}
	sw, err := metrics.Value(def.v.Metrics(), metrics.RDMAPathTotal, metrics.PathLabels(metrics.PathChunked, metrics.ReasonSoftwareLanes))
	if err != nil {
		return err
	}
	fmt.Printf("\nthe default pair counted %.0f gets as chunked/software_lanes (the pinned payloads)\n", sw)
	return nil
}
