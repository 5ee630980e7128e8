package check

import (
	"context"
	"errors"
	"fmt"

	"github.com/velo-go/velo/rdmacm"
	"github.com/velo-go/velo/verbs"
)

// ErrNoUsablePort: `ibcheck env` found no PORT_ACTIVE port to pin UCX to.
var ErrNoUsablePort = errors.New("no usable RDMA port")

// Export is one environment variable `ibcheck env` recommends.
type Export struct {
	Name, Value string
	Why         string // a comment for the line
}

// Exports is what `ibcheck env` prints: the port it chose and the variables to set for it.
type Exports struct {
	Port    verbs.Port
	Because string
	Vars    []Export
}

// Env chooses the best port (--device or --ip when given, else the first PORT_ACTIVE
// InfiniBand port, else the first PORT_ACTIVE RoCE port) and returns the variables that pin UCX to
// it: UCX_NET_DEVICES, UCX_TLS for its kind of device and the linked UCX, and UCX_IB_PKEY when
// the node is only a partial member of the default partition. UCX_NET_DEVICES in the environment
// is ignored: it is what this command computes. The error wraps ErrNoUsablePort when no port
// will do, and says why.
func Env(ctx context.Context, cfg Config, sys System) (Exports, error) {
	r := &run{cfg: cfg, sys: sys}
	r.devs, r.devsErr = verbs.Devices(cfg.Paths)
	if r.devsErr != nil {
		return Exports{}, fmt.Errorf("%w: %w", ErrNoUsablePort, r.devsErr)
	}
	switch {
	case cfg.Device != "":
		name, num, err := verbs.ParsePortSpec(cfg.Device)
		if err == nil {
			r.port, err = verbs.LookupPort(cfg.Paths, name, num)
		}
		if err != nil {
			return Exports{}, fmt.Errorf("%w: --device %s: %w", ErrNoUsablePort, cfg.Device, err)
		}
		r.portSource = PortFromDevice
	case cfg.IP.IsValid():
		loc, err := rdmacm.Resolve(cfg.IP, rdmacm.Options{Paths: cfg.Paths, Interfaces: sys.Interfaces})
		if err == nil {
			r.port, err = verbs.LookupPort(cfg.Paths, loc.Device, loc.Port)
		}
		if err != nil {
			return Exports{}, fmt.Errorf("%w: --ip %s: %w", ErrNoUsablePort, cfg.IP, err)
		}
		r.cfg.IP, r.portSource = cfg.IP, PortFromIP
	default:
		p, ok := bestPort(r.devs)
		if !ok {
			return Exports{}, fmt.Errorf("%w: the node's devices have no ports", ErrNoUsablePort)
		}
		r.port, r.portSource = p, PortFromAuto
	}
	p := r.port
	if !p.Active() {
		return Exports{}, fmt.Errorf("%w: %s is %s (physical state %s); %s", ErrNoUsablePort, p.Spec(), p.State, p.PhysState, r.portSuggestion())
	}
	r.ucx = sys.UCX(ctx, nil, false)
	out := Exports{Port: p, Because: r.chosenBecause()}
	if r.portSource == PortFromAuto {
		out.Because = "the first PORT_ACTIVE InfiniBand port"
		if p.LinkLayer != verbs.LinkLayerInfiniBand {
			out.Because = "an Ethernet (RoCE) port: no InfiniBand port is active"
		}
	}
	out.Vars = append(out.Vars, Export{"UCX_NET_DEVICES", p.Spec(), fmt.Sprintf("%s, %s", p.LinkLayer, p.Rate)})
	tlsWhy := "RC for data, UD for RC's wireup, self for loopback"
	if r.ucx.Err != nil {
		tlsWhy += "; the linked UCX could not be asked (" + r.ucx.Err.Error() + ")"
	}
	out.Vars = append(out.Vars, Export{"UCX_TLS", r.recommendedTLS(p), tlsWhy})
	if p.LinkLayer == verbs.LinkLayerInfiniBand {
		if mem, key := p.DefaultPartition(); mem == verbs.MembershipPartial {
			out.Vars = append(out.Vars, Export{"UCX_IB_PKEY", fmt.Sprintf("0x%04x", key.Partition()),
				fmt.Sprintf("partial member of the default partition (P_Key %s): UCX_IB_PKEY=auto needs full membership", key)})
		}
	}
	return out, nil
}
