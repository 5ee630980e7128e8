package check

import (
	"context"
	"errors"
	"net/netip"

	"github.com/velo-go/velo/rdmacm"
	"github.com/velo-go/velo/verbs"
)

// Config is one run's input: where the node checks read, what the operator asked about, and the
// environment to judge.
type Config struct {
	// Paths are the sysfs and device roots (zero: the live /sys and /dev).
	Paths verbs.Paths
	// Device is the port to check ("mlx5_2:1", from --device); empty lets ibcheck choose (see
	// the PortFrom constants for the order).
	Device string
	// IP, when valid, is an address whose device and port the ip check finds (--ip).
	IP netip.Addr
	// NeedMemlock is the memlock need in bytes; zero means DefaultMemlockNeed.
	NeedMemlock uint64
	// Env looks up an environment variable: the operator's environment as it was when ibcheck
	// started, before any library set defaults in it.
	Env func(string) (string, bool)
	// UCXResources asks for the linked UCX's resource list in the report (--ucx).
	UCXResources bool
}

// How the checked port was chosen (Report.PortSource).
const (
	PortFromDevice        = "--device"
	PortFromIP            = "--ip"
	PortFromUCXNetDevices = "UCX_NET_DEVICES"
	PortFromAuto          = "auto" // the best port the node has; see bestPort
	PortFromNone          = ""     // no port: no device, or none could be read
)

// defaultProtoTrialValue is the UCX_PROTO_ENABLE value every run tries a GET under.
const defaultProtoTrialValue = "n"

// run carries what the checks share.
type run struct {
	cfg Config
	sys System

	devs    []verbs.Device
	devsErr error // from verbs.Devices; wraps ErrNoDevice when the node has none

	port       verbs.Port // the checked port; zero when portErr or no device
	portSource string
	portErr    error // the chosen port's lookup failed (no such device or port)

	ipLoc rdmacm.Location
	ipErr error

	ucx UCXInfo

	gpu gpuView // read on first use by the GPU checks
}

func (r *run) env(name string) (string, bool) {
	if r.cfg.Env == nil {
		return "", false
	}
	return r.cfg.Env(name)
}

func (r *run) hasPort() bool { return r.port.Device != "" }

// Run runs every check and returns the report. It never fails: what could not be found out is a
// result like any other.
func Run(ctx context.Context, cfg Config, sys System) *Report {
	r := &run{cfg: cfg, sys: sys}
	if r.cfg.NeedMemlock == 0 {
		r.cfg.NeedMemlock = DefaultMemlockNeed()
	}
	r.devs, r.devsErr = verbs.Devices(cfg.Paths)
	if cfg.IP.IsValid() {
		r.ipLoc, r.ipErr = rdmacm.Resolve(cfg.IP, rdmacm.Options{Paths: cfg.Paths, Interfaces: sys.Interfaces})
	}
	r.choosePort()
	r.ucx = sys.UCX(ctx, r.protoTrials(), cfg.UCXResources)

	rep := &Report{
		Sysfs:      cfg.Paths.SysfsRoot(),
		Dev:        cfg.Paths.DevRoot(),
		Live:       cfg.Paths.Live(),
		PortSource: r.portSource,
		CGO:        sys.CGO,
		UCX:        r.ucx.Resources,
	}
	if r.hasPort() {
		rep.Port = r.port.Spec()
	}
	for _, c := range []func(context.Context) Result{
		r.checkDevices, r.checkPort, r.checkUverbs, r.checkPKey, r.checkMemlock, r.checkRegistration,
		r.checkDEVX, r.checkIP,
		r.checkGPU, r.checkGPUDirect, r.checkGPUNICPath, r.checkGPUACS, r.checkGPUIOMMU,
		r.checkNetDevices, r.checkNetDevicesGPU, r.checkTLS, r.checkProtoEnable, r.checkRMARails, r.checkRCache, r.checkKillSwitch,
		r.checkUCXVersion, r.checkUCXBuild, r.checkRMAGuard, r.checkTCPListen, r.checkUCXCUDA,
	} {
		rep.Results = append(rep.Results, c(ctx))
	}
	return rep
}

// protoTrials are the UCX_PROTO_ENABLE values to try a GET under: always "n" (the question the
// guide raises), the operator's value when it is set to something else, and "y" so that a UCX
// whose GET fails under "n" can be told apart from one whose RMA fails anyway.
func (r *run) protoTrials() []string {
	vals := []string{defaultProtoTrialValue, "y"}
	if v, ok := r.env("UCX_PROTO_ENABLE"); ok && v != "n" && v != "y" {
		vals = append(vals, v)
	}
	return vals
}

// choosePort picks the port the port-level checks judge, in this order: --device; the port that
// carries --ip; the first RDMA port in UCX_NET_DEVICES; the best port of the node.
func (r *run) choosePort() {
	lookup := func(spec, source string) {
		r.portSource = source
		name, num, err := verbs.ParsePortSpec(spec)
		if err == nil {
			r.port, err = verbs.LookupPort(r.cfg.Paths, name, num)
		}
		if err != nil {
			r.port, r.portErr = verbs.Port{}, err
		}
	}
	switch {
	case r.cfg.Device != "":
		lookup(r.cfg.Device, PortFromDevice)
		return
	case r.cfg.IP.IsValid() && r.ipErr == nil:
		lookup(r.ipLoc.Spec(), PortFromIP)
		return
	}
	if v, ok := r.env("UCX_NET_DEVICES"); ok {
		for _, e := range splitList(v) {
			if _, _, err := verbs.ParsePortSpec(e); err == nil {
				lookup(e, PortFromUCXNetDevices)
				return
			}
		}
	}
	if p, ok := bestPort(r.devs); ok {
		r.port, r.portSource = p, PortFromAuto
	}
}

// bestPort is the port ibcheck recommends when nobody named one: the first ACTIVE InfiniBand
// port, else the first ACTIVE port of any link layer, else the first port (so that its state is
// reported). Devices come in natural name order, so "first" is stable.
func bestPort(devs []verbs.Device) (verbs.Port, bool) {
	var active, any *verbs.Port
	for i := range devs {
		for j := range devs[i].Ports {
			p := &devs[i].Ports[j]
			if p.Active() && p.LinkLayer == verbs.LinkLayerInfiniBand {
				return *p, true
			}
			if p.Active() && active == nil {
				active = p
			}
			if any == nil {
				any = p
			}
		}
	}
	switch {
	case active != nil:
		return *active, true
	case any != nil:
		return *any, true
	}
	return verbs.Port{}, false
}

// answerOf maps a probe error to its three-valued answer.
func answerOf(err error) Answer {
	switch {
	case err == nil:
		return Available
	case errors.Is(err, verbs.ErrNotSupported):
		return NotAvailable
	}
	return Inconclusive
}
