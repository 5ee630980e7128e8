package main

import (
	"bufio"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/verbs"
)

// version is velobench's own version: the make target sets it from git describe
// (-ldflags -X main.version=...); otherwise the module version go install recorded, else "devel".
// An initiator refuses a target of another version, since the two exchange their own messages.
var version = ""

// protocol numbers the messages initiator and target exchange; it changes with them.
const protocol = 2

func velobenchVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// Environment is what a run saw on one side: enough to tell whether two runs can be compared.
type Environment struct {
	Host      string `json:"host"`
	Velobench string `json:"velobench"`
	Go        string `json:"go"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	Kernel    string `json:"kernel"`
	CPU       string `json:"cpu"`
	CPUs      int    `json:"cpus"`
	// UCX is the release this binary links; UCXGuard is true where it is velo's static UCX with
	// the software RMA guard.
	UCX      string `json:"ucx"`
	UCXGuard bool   `json:"ucx_guard"`
	// UCXEnv are the UCX_* variables the operator set; UCXDefaults the settings velo's engine
	// applied itself (its source is the program, not the environment).
	UCXEnv      map[string]string `json:"ucx_env"`
	UCXDefaults map[string]string `json:"ucx_engine_defaults,omitempty"`
	VeloEnv     map[string]string `json:"velo_env,omitempty"`
	Devices     []DevicePort      `json:"rdma_ports"`
	// LineRateGbps is the rate of the port this side's UCX uses (UCX_NET_DEVICES, or the one
	// active port), 0 when it cannot tell (no RDMA hardware, several ports and no choice).
	LineRateGbps float64 `json:"line_rate_gbps,omitempty"`
	LineRatePort string  `json:"line_rate_port,omitempty"`
	Perftest     string  `json:"ucx_perftest,omitempty"`
	// Rails is velo's rail choice where --rails gave one (velo.Velo.Rails).
	Rails string `json:"rails,omitempty"`
	// Lanes says whether this side's socket bytes are counted per point (the lanes module: cgroup
	// v2 and eBPF), and why not where they are not.
	Lanes string `json:"lanes,omitempty"`
	// Auth is how this side's control plane authenticates peers (auth.FromEnv), in words.
	Auth string `json:"auth"`
}

// DevicePort is one RDMA port as the verbs package reads it from sysfs.
type DevicePort struct {
	Port      string   `json:"port"` // mlx5_0:1
	State     string   `json:"state"`
	LinkLayer string   `json:"link_layer"`
	RateGbps  float64  `json:"rate_gbps"`
	Rate      string   `json:"rate"`
	Netdevs   []string `json:"netdevs,omitempty"`
}

// captureEnv reads this side's environment. env is the process environment as the operator set
// it (before velobench exported anything for ucx_perftest).
func captureEnv(env []string) Environment {
	e := Environment{
		Velobench: velobenchVersion(), Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		CPUs: runtime.NumCPU(), UCXEnv: map[string]string{}, VeloEnv: map[string]string{}, Devices: []DevicePort{},
	}
	e.Host, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		e.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	e.CPU = cpuModel()
	e.UCX = ucx.Version().String
	if g, err := ucx.SoftwareRMAGuard(); err == nil {
		e.UCXGuard = g.Enforced
	}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
		case strings.HasPrefix(k, "UCX_"):
			e.UCXEnv[k] = v
		case strings.HasPrefix(k, "VELO_"):
			if strings.Contains(k, "SECRET") || strings.HasSuffix(k, "_KEY") {
				v = "(set; not recorded)" // a credential never goes into a report
			}
			e.VeloEnv[k] = v
		}
	}
	devs, _ := verbs.Devices(verbs.Paths{})
	var active []DevicePort
	for _, d := range devs {
		for _, p := range d.Ports {
			dp := DevicePort{Port: p.Spec(), State: p.State.String(), LinkLayer: p.LinkLayer.String(),
				RateGbps: p.Rate.Gbps(), Rate: p.Rate.String(), Netdevs: p.Netdevs}
			e.Devices = append(e.Devices, dp)
			if p.Active() {
				active = append(active, dp)
			}
		}
	}
	// The line rate is the port UCX is pinned to, or the only active one.
	if want := e.UCXEnv["UCX_NET_DEVICES"]; want != "" {
		for _, dp := range e.Devices {
			for _, w := range strings.Split(want, ",") {
				if w == dp.Port {
					e.LineRateGbps, e.LineRatePort = dp.RateGbps, dp.Port
				}
			}
		}
	} else if len(active) == 1 {
		e.LineRateGbps, e.LineRatePort = active[0].RateGbps, active[0].Port
	}
	return e
}

// engineDefaults are the settings velo's engine chose itself (not the operator): ucx_perftest gets
// them too, so both run with one configuration.
func engineDefaults(settings []ucx.Setting) map[string]string {
	m := map[string]string{}
	for _, st := range settings {
		if st.Source == ucx.SourceProgram {
			m["UCX_"+st.Name] = st.Value
		}
	}
	return m
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && (strings.TrimSpace(k) == "model name" || strings.TrimSpace(k) == "Model") {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// sortedKV prints a map as sorted KEY=VALUE pairs.
func sortedKV(m map[string]string) string {
	var kv []string
	for k, v := range m {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return strings.Join(kv, " ")
}
