package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/velo-go/velo/tools/ibcheck/internal/check"
)

// groupTitle heads each group of rows in the table.
var groupTitle = map[string]string{
	check.GroupNode: "NODE (sysfs, libibverbs, libmlx5)",
	check.GroupGPU:  "GPU (GPUDirect RDMA readiness, from sysfs)",
	check.GroupEnv:  "ENVIRONMENT (UCX_* and velo variables)",
	check.GroupUCX:  "LINKED UCX (the library in this binary, not the system's ucx_info)",
}

// tableWidth is the width the table wraps findings and fixes to.
const tableWidth = 110

// writeTable prints the report for people: a header naming what was read and which port was
// checked, one row per check grouped by kind, the fix under each row that has one, and a summary.
func writeTable(w io.Writer, rep *check.Report, strict bool) {
	var b strings.Builder
	where := rep.Sysfs
	if rep.Live {
		where += " (this machine)"
	} else {
		where += " (device root " + rep.Dev + ")"
	}
	fmt.Fprintf(&b, "ibcheck: node preflight of %s\n", where)
	if rep.Port != "" {
		how := "chosen by " + rep.PortSource
		if rep.PortSource == check.PortFromAuto {
			how = "chosen automatically: the node's best port"
		}
		fmt.Fprintf(&b, "checked port: %s (%s)\n", rep.Port, how)
	}
	if !rep.CGO {
		b.WriteString("this binary was built with CGO_ENABLED=0: checks that need libibverbs, libmlx5, librdmacm or UCX say N/C (not compiled in)\n")
	}
	idWidth := len("CHECK")
	for _, r := range rep.Results {
		idWidth = max(idWidth, len(r.ID))
	}
	indent := idWidth + 2 + 4 + 2
	group := ""
	// On a node without a GPU the gpu row says so, and the other GPU checks, which then skip,
	// print no row of their own (the JSON report has them all).
	gpu, _ := rep.Result("gpu")
	for _, r := range rep.Results {
		if gpu.Status == check.Skip && r.ID != "gpu" && check.GroupOf(r.ID) == check.GroupGPU && r.Status == check.Skip {
			continue
		}
		if g := check.GroupOf(r.ID); g != group {
			group = g
			fmt.Fprintf(&b, "\n%s\n", groupTitle[g])
		}
		lines := wrap(r.Finding, tableWidth-indent)
		fmt.Fprintf(&b, "%-*s  %-4s  %s\n", idWidth, r.ID, r.Status, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(&b, "%*s%s\n", indent, "", l)
		}
		if r.Fix != "" {
			for i, l := range wrap("fix: "+r.Fix, tableWidth-indent-2) {
				pad := indent
				if i > 0 {
					pad += 5 // under the text after "fix: "
				}
				fmt.Fprintf(&b, "%*s%s\n", pad, "", l)
			}
		}
	}
	if rep.UCX != nil {
		b.WriteString("\nLINKED UCX RESOURCES (like ucx_info -d, from the UCX in this binary)\n")
		writeResources(&b, rep.UCX)
	}
	c := rep.Counts()
	verdict := rep.Verdict(strict)
	mode := ""
	if strict {
		mode = ", --strict"
	}
	fmt.Fprintf(&b, "\nsummary: %d pass, %d warn, %d fail, %d skip, %d not compiled in: %s (exit %d%s)\n",
		c.Pass, c.Warn, c.Fail, c.Skip, c.NotCompiled, verdict, rep.ExitCode(strict), mode)
	io.WriteString(w, b.String())
}

// wrap breaks text into lines of at most width runes at spaces (a longer word gets a line of its
// own). It always returns at least one line.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		switch {
		case line == "":
			line = word
		case len([]rune(line))+1+len([]rune(word)) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	return append(lines, line)
}

func writeResources(b *strings.Builder, res *check.UCXResources) {
	for _, c := range res.Components {
		kind := ""
		if c.ConnectionManager {
			kind = " (connection manager)"
		}
		fmt.Fprintf(b, "component %s%s\n", c.Name, kind)
		if len(c.MemoryDomains) == 0 {
			b.WriteString("  no memory domain (no device for it)\n")
		}
		for _, d := range c.MemoryDomains {
			if d.Error != "" {
				fmt.Fprintf(b, "  memory domain %s: %s\n", d.Name, d.Error)
				continue
			}
			fmt.Fprintf(b, "  memory domain %s: registers %t, remote key %d bytes\n", d.Name, d.CanRegister, d.RemoteKeySize)
			for _, t := range d.Transports {
				if t.Error != "" {
					fmt.Fprintf(b, "    %s/%s (%s): %s\n", t.Name, t.Device, t.DeviceType, t.Error)
					continue
				}
				fmt.Fprintf(b, "    %s/%s (%s): get %t, put %t, am short %d B, am bcopy %d B, peer failure %t, keepalive %t, latency %.0f ns, %.0f MB/s\n",
					t.Name, t.Device, t.DeviceType, t.Get, t.Put, t.AMMaxShort, t.AMMaxBcopy, t.PeerFailure, t.Keepalive, t.LatencyNs, t.BandwidthMBs)
			}
		}
	}
}

// SchemaVersion names the JSON document's schema. A change that removes or renames a field, or
// gives a value a new meaning, bumps it; adding a field or a check does not.
const SchemaVersion = "ibcheck/v1"

type jsonReport struct {
	Schema       string              `json:"schema"`
	Verdict      string              `json:"verdict"`
	ExitCode     int                 `json:"exit_code"`
	Strict       bool                `json:"strict"`
	CGO          bool                `json:"cgo"`
	Sysfs        string              `json:"sysfs"`
	Dev          string              `json:"dev"`
	Live         bool                `json:"live"`
	Port         string              `json:"port"`
	PortChosenBy string              `json:"port_chosen_by"`
	Counts       jsonCounts          `json:"counts"`
	Checks       []jsonCheck         `json:"checks"`
	UCXResources *check.UCXResources `json:"ucx_resources,omitempty"`
}

type jsonCounts struct {
	Pass          int `json:"pass"`
	Warn          int `json:"warn"`
	Fail          int `json:"fail"`
	Skip          int `json:"skip"`
	NotCompiledIn int `json:"not_compiled_in"`
}

type jsonCheck struct {
	ID      string            `json:"id"`
	Group   string            `json:"group"`
	Status  string            `json:"status"`
	Probe   string            `json:"probe,omitempty"`
	Finding string            `json:"finding"`
	Fix     string            `json:"fix,omitempty"`
	Facts   map[string]string `json:"facts"`
}

func writeJSON(w io.Writer, rep *check.Report, strict bool) error {
	c := rep.Counts()
	out := jsonReport{
		Schema:       SchemaVersion,
		Verdict:      rep.Verdict(strict).JSON(),
		ExitCode:     rep.ExitCode(strict),
		Strict:       strict,
		CGO:          rep.CGO,
		Sysfs:        rep.Sysfs,
		Dev:          rep.Dev,
		Live:         rep.Live,
		Port:         rep.Port,
		PortChosenBy: rep.PortSource,
		Counts:       jsonCounts{c.Pass, c.Warn, c.Fail, c.Skip, c.NotCompiled},
		Checks:       []jsonCheck{},
		UCXResources: rep.UCX,
	}
	for _, r := range rep.Results {
		facts := map[string]string{}
		for _, f := range r.Facts {
			facts[f.Key] = f.Value
		}
		out.Checks = append(out.Checks, jsonCheck{
			ID: r.ID, Group: check.GroupOf(r.ID), Status: r.Status.JSON(), Probe: r.Probe.JSON(),
			Finding: r.Finding, Fix: r.Fix, Facts: facts,
		})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// writeExports prints `ibcheck env`: comments, then one export line per variable, ready for eval.
func writeExports(w io.Writer, ex check.Exports) {
	var b strings.Builder
	fmt.Fprintf(&b, "# ibcheck env: %s, %s\n", ex.Port.Spec(), ex.Because)
	for _, v := range ex.Vars {
		fmt.Fprintf(&b, "export %s=%s  # %s\n", v.Name, v.Value, v.Why)
	}
	io.WriteString(w, b.String())
}
