package check

import (
	"github.com/velo-go/velo/ucx"
)

// UCXResources is the linked UCX's resource list in the shape of ibcheck's JSON report: UCT
// components, their memory domains, and each domain's transports on each device — what
// `ucx_info -d` prints, from the library velo links rather than the system's.
type UCXResources struct {
	Components []UCXComponent `json:"components"`
}

// UCXComponent is one UCT component (ib, tcp, self, posix, cma, rdmacm …).
type UCXComponent struct {
	Name              string            `json:"name"`
	ConnectionManager bool              `json:"connection_manager"`
	MemoryDomains     []UCXMemoryDomain `json:"memory_domains"`
}

// UCXMemoryDomain is one memory domain of a component.
type UCXMemoryDomain struct {
	Name          string         `json:"name"`
	Error         string         `json:"error,omitempty"`
	CanRegister   bool           `json:"can_register"`
	RemoteKeySize int            `json:"remote_key_size"`
	Transports    []UCXTransport `json:"transports"`
}

// UCXTransport is one transport on one device.
type UCXTransport struct {
	Name           string  `json:"name"`
	Device         string  `json:"device"`
	DeviceType     string  `json:"device_type"`
	Error          string  `json:"error,omitempty"`
	Get            bool    `json:"get"`
	Put            bool    `json:"put"`
	AMMaxShort     uint64  `json:"am_max_short"`
	AMMaxBcopy     uint64  `json:"am_max_bcopy"`
	PeerFailure    bool    `json:"peer_failure"`
	Keepalive      bool    `json:"keepalive"`
	LatencyNs      float64 `json:"latency_ns"`
	BandwidthMBs   float64 `json:"bandwidth_mb_s"`
	ConnectToIface bool    `json:"connect_to_iface"`
}

func resourcesFrom(r *ucx.Resources) *UCXResources {
	out := &UCXResources{Components: []UCXComponent{}}
	for _, c := range r.Components {
		oc := UCXComponent{Name: c.Name, ConnectionManager: c.CM, MemoryDomains: []UCXMemoryDomain{}}
		for _, d := range c.MemoryDomains {
			od := UCXMemoryDomain{Name: d.Name, CanRegister: d.CanRegister, RemoteKeySize: d.RemoteKeySize, Transports: []UCXTransport{}}
			if d.Err != nil {
				od.Error = d.Err.Error()
			}
			for _, t := range d.Transports {
				ot := UCXTransport{Name: t.Name, Device: t.Device, DeviceType: t.DeviceType.String()}
				if t.Err != nil {
					ot.Error = t.Err.Error()
				} else {
					caps := t.Caps
					ot.Get = caps.HasGet()
					ot.Put = caps.PutShort || caps.PutBcopy || caps.PutZcopy
					ot.AMMaxShort, ot.AMMaxBcopy = caps.AMMaxShort, caps.AMMaxBcopy
					ot.PeerFailure, ot.Keepalive = caps.PeerFailure, caps.Keepalive
					ot.LatencyNs = float64(caps.Latency.Nanoseconds())
					ot.BandwidthMBs = caps.BandwidthMBs
					ot.ConnectToIface = caps.ConnectToIface
				}
				od.Transports = append(od.Transports, ot)
			}
			oc.MemoryDomains = append(oc.MemoryDomains, od)
		}
		out.Components = append(out.Components, oc)
	}
	return out
}
