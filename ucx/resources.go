package ucx

import (
	"fmt"
	"io"
	"strings"
)

// String is a one-line summary.
func (r *Resources) String() string {
	n := 0
	for _, c := range r.Components {
		for _, d := range c.MemoryDomains {
			n += len(d.Transports)
		}
	}
	return fmt.Sprintf("%d components, %d transports; verbs=%t mlx5=%t devx=%t rdmacm=%t",
		len(r.Components), n, r.Support.Verbs, r.Support.MLX5, r.Support.DEVX, r.Support.RDMACM)
}

// WriteTo prints the resources as an indented tree, the shape of `ucx_info -d`.
func (r *Resources) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "compiled in: verbs=%t mlx5=%t devx=%t rdmacm=%t\n",
		r.Support.Verbs, r.Support.MLX5, r.Support.DEVX, r.Support.RDMACM)
	for _, c := range r.Components {
		kind := ""
		if c.CM {
			kind = " (connection manager)"
		}
		fmt.Fprintf(&b, "component %s%s\n", c.Name, kind)
		if len(c.MemoryDomains) == 0 {
			b.WriteString("  no memory domains (no device)\n")
		}
		for _, d := range c.MemoryDomains {
			if d.Err != nil {
				fmt.Fprintf(&b, "  memory domain %s: %v\n", d.Name, d.Err)
				continue
			}
			fmt.Fprintf(&b, "  memory domain %s: register=%t remote key %d bytes\n", d.Name, d.CanRegister, d.RemoteKeySize)
			for _, t := range d.Transports {
				if t.Err != nil {
					fmt.Fprintf(&b, "    transport %s/%s (%s): %v\n", t.Name, t.Device, t.DeviceType, t.Err)
					continue
				}
				c := t.Caps
				fmt.Fprintf(&b, "    transport %s/%s (%s): get=%t put=%t am_short<=%d am_bcopy<=%d peer_failure=%t keepalive=%t latency=%v bw=%.0fMB/s\n",
					t.Name, t.Device, t.DeviceType, c.HasGet(), c.PutShort || c.PutBcopy || c.PutZcopy,
					c.AMMaxShort, c.AMMaxBcopy, c.PeerFailure, c.Keepalive, c.Latency, c.BandwidthMBs)
			}
		}
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}
