package ucx

import (
	"debug/elf"
	"sync"
	"time"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// Version returns the version of the UCX library this process linked (ucp_get_version),
// which can differ from the headers it was compiled with.
func Version() VersionInfo {
	maj, min, rel := capi.UcpGetVersion()
	amaj, amin := capi.UcpAPIVersion()
	return VersionInfo{
		Major: maj, Minor: min, Release: rel,
		String:   capi.UcpGetVersionString(),
		APIMajor: amaj, APIMinor: amin,
	}
}

// Symbols whose presence shows that a feature was compiled into UCX. Two places are
// searched: every loaded object's dynamic symbols (the shared UCX and the plugins it
// dlopen'ed during the component query), and the running executable's own symbol table,
// where a statically linked UCX keeps them without exporting them. A stripped static
// binary (go build -ldflags=-s; also what `go test` runs unless -c or -o is given) shows
// only what the component list proves (verbs through "ib", rdmacm through "rdmacm"):
// mlx5 and DEVX then read false.
var supportSymbols = struct{ verbs, mlx5, devx, rdmacm []string }{
	verbs:  []string{"uct_rc_verbs_tl", "uct_ib_component"},
	mlx5:   []string{"uct_rc_mlx5_tl", "uct_dc_mlx5_tl", "uct_ud_mlx5_tl"},
	devx:   []string{"uct_ib_md_ops_devx_entry", "uct_ib_mlx5_devx_md_ops", "uct_ib_mlx5_devx_create_qp"},
	rdmacm: []string{"uct_rdmacm_cm_ep_connect", "uct_rdmacm_component"},
}

func anySymbol(names []string) bool {
	exe := executableSymbols()
	for _, n := range names {
		if exe[n] || capi.SymbolLoaded(n) {
			return true
		}
	}
	return false
}

var (
	exeSymsOnce sync.Once
	exeSyms     map[string]bool
)

// executableSymbols reads the marker symbols from the running executable's ELF symbol
// table (empty when it is stripped or unreadable).
func executableSymbols() map[string]bool {
	exeSymsOnce.Do(func() {
		exeSyms = map[string]bool{}
		want := map[string]bool{}
		for _, list := range [][]string{supportSymbols.verbs, supportSymbols.mlx5, supportSymbols.devx, supportSymbols.rdmacm} {
			for _, n := range list {
				want[n] = true
			}
		}
		f, err := elf.Open("/proc/self/exe")
		if err != nil {
			return
		}
		defer f.Close()
		syms, err := f.Symbols()
		if err != nil {
			return
		}
		for _, sym := range syms {
			if want[sym.Name] && sym.Section != elf.SHN_UNDEF {
				exeSyms[sym.Name] = true
			}
		}
	})
	return exeSyms
}

// QueryResources lists UCT components, their memory domains and each domain's
// transports and devices with their capabilities — what `ucx_info -d` prints, but from
// the UCX linked into this binary — and which RDMA pieces that UCX has compiled in.
// It opens every interface briefly, so call it at startup, not on a hot path.
func QueryResources() (*Resources, error) {
	if !capi.Compiled {
		return nil, errNoUCX
	}
	ApplyEnvDefaults()
	raw, s := capi.QueryResources()
	if s != capi.OK {
		return nil, statusErr("uct resource query", Status(s))
	}
	out := &Resources{}
	comp := map[string]*Component{}
	md := map[[2]string]int{} // index into its component's MemoryDomains
	var order []string
	for _, r := range raw {
		c := comp[r.Component]
		if c == nil {
			c = &Component{Name: r.Component, CM: r.ComponentFlags&capi.ComponentFlagCM != 0}
			comp[r.Component] = c
			order = append(order, r.Component)
		}
		if r.MD == "" {
			continue
		}
		key := [2]string{r.Component, r.MD}
		idx, seen := md[key]
		if !seen {
			c.MemoryDomains = append(c.MemoryDomains, MemoryDomain{Name: r.MD})
			idx = len(c.MemoryDomains) - 1
			md[key] = idx
			d := &c.MemoryDomains[idx]
			if r.MDStatus != capi.OK {
				d.Err = statusErr("uct_md_open", Status(r.MDStatus))
			} else {
				d.CanRegister = r.MDFlags&capi.MDFlagReg != 0
				d.CanAllocate = r.MDFlags&capi.MDFlagAlloc != 0
				d.NeedsRemoteKey = r.MDFlags&capi.MDFlagNeedRKey != 0
				d.RemoteKeySize = int(r.RKeyPackedSize)
				d.RegisterCostBase = time.Duration(r.RegCostC * 1e9)
				d.RegisterCostPerB = time.Duration(r.RegCostM * 1e9)
				d.RegisterCostNsPB = r.RegCostM * 1e9
			}
		}
		d := &c.MemoryDomains[idx]
		if r.Transport == "" {
			continue
		}
		t := Transport{Name: r.Transport, Device: r.Device, DeviceType: DeviceType(r.DeviceType)}
		if r.IfaceStatus != capi.OK {
			t.Err = statusErr("uct_iface_open", Status(r.IfaceStatus))
		} else {
			f := r.IfaceFlags
			t.Caps = TransportCaps{
				AMShort: f&capi.IfaceFlagAMShort != 0, AMBcopy: f&capi.IfaceFlagAMBcopy != 0, AMZcopy: f&capi.IfaceFlagAMZcopy != 0,
				PutShort: f&capi.IfaceFlagPutShort != 0, PutBcopy: f&capi.IfaceFlagPutBcopy != 0, PutZcopy: f&capi.IfaceFlagPutZcopy != 0,
				GetShort: f&capi.IfaceFlagGetShort != 0, GetBcopy: f&capi.IfaceFlagGetBcopy != 0, GetZcopy: f&capi.IfaceFlagGetZcopy != 0,
				PeerFailure:    f&capi.IfaceFlagErrPeerFailure != 0,
				Keepalive:      f&capi.IfaceFlagEPKeepalive != 0,
				ConnectToIface: f&capi.IfaceFlagConnectToIface != 0,
				ConnectToEP:    f&capi.IfaceFlagConnectToEP != 0,
				AMMaxShort:     r.AMMaxShort, AMMaxBcopy: r.AMMaxBcopy, AMMaxZcopy: r.AMMaxZcopy, AMMaxHeader: r.AMMaxHdr,
				GetMaxZcopy: r.GetMaxZcopy, PutMaxZcopy: r.PutMaxZcopy,
				Latency:      time.Duration(r.LatencySec * 1e9),
				BandwidthMBs: (r.BWDedicated + r.BWShared) / 1e6,
				MaxEndpoints: r.MaxEndpoints,
				Priority:     r.Priority,
			}
		}
		d.Transports = append(d.Transports, t)
	}
	for _, name := range order {
		out.Components = append(out.Components, *comp[name])
	}
	out.Support = BuildSupport{
		Verbs:  comp["ib"] != nil || anySymbol(supportSymbols.verbs),
		MLX5:   anySymbol(supportSymbols.mlx5),
		DEVX:   anySymbol(supportSymbols.devx),
		RDMACM: comp["rdmacm"] != nil || anySymbol(supportSymbols.rdmacm),
	}
	return out, nil
}
