package velo

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/metrics"
)

// HealthHandler serves the instance's health for probes: /livez answers 200 while the instance
// is not closed (a draining instance is alive), /readyz answers 200 while it should get new work
// (ready or degraded) and 503 while it drains or once it is closed, so a load balancer stops
// choosing it as soon as Shutdown begins. Any other path answers Health as JSON. Mount it where
// the probes look, e.g. mux.Handle("/velo/", http.StripPrefix("/velo", v.HealthHandler())).
func (v *Velo) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := v.Health()
		code := http.StatusOK
		switch strings.TrimSuffix(r.URL.Path, "/") {
		case "/livez":
			if h.State == StateClosed {
				code = http.StatusServiceUnavailable
			}
		case "/readyz":
			if !h.Ready() {
				code = http.StatusServiceUnavailable
			}
		}
		writeJSON(w, code, healthJSON{State: string(h.State), Reasons: h.Reasons})
	})
}

type healthJSON struct {
	State   string   `json:"state"`
	Reasons []string `json:"reasons,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Describer is what a transport may implement to show its settings on the introspection page
// (nothing secret: addresses, limits, where each UCX setting came from).
type Describer interface {
	Describe() map[string]string
}

// EndpointCounter is what a transport may implement to show how many connections or endpoints it
// holds to a peer (the TCP and UCX transports do).
type EndpointCounter interface {
	Endpoints(peer InstanceID) int
}

// Introspection is what DebugHandler shows. It holds no secret: no remote key, no handle nonce,
// no address blob.
type Introspection struct {
	Instance    string            `json:"instance"`
	Incarnation string            `json:"incarnation"`
	State       string            `json:"state"`
	Reasons     []string          `json:"reasons,omitempty"`
	Transports  []TransportInfo   `json:"transports"`
	Peers       []PeerInfoJSON    `json:"peers"`
	Handlers    []HandlerInfo     `json:"handlers"`
	Rendezvous  RendezvousInfo    `json:"rendezvous"`
	RDMA        *RDMAInfo         `json:"rdma,omitempty"`
	Paths       map[string]uint64 `json:"paths"`
	// Rails is the rail choice of WithRails, absent without it.
	Rails *RailChoice `json:"rails,omitempty"`
	// Transfers, LeaseEnds and PeerBytes are the transfer telemetry, read from the metrics a
	// scrape sees: rows with at least one observation, and every live peer's bytes.
	Transfers []TransferInfo  `json:"transfers"`
	LeaseEnds []LeaseEndInfo  `json:"lease_ends"`
	PeerBytes []PeerBytesInfo `json:"peer_bytes"`
	Generated time.Time       `json:"generated"`
}

// TransportInfo is one transport on the page.
type TransportInfo struct {
	Name         string            `json:"name"`
	MaxFrameSize int               `json:"max_frame_size"`
	Settings     map[string]string `json:"settings,omitempty"`
}

// PeerInfoJSON is one peer on the page.
type PeerInfoJSON struct {
	ID string `json:"id"`
	// Name is the member's name (PeerStatus.Name; empty for a peer registered by hand).
	Name       string             `json:"name"`
	State      string             `json:"state"`
	Since      time.Time          `json:"since"`
	Transports []string           `json:"transports"`
	RTTMicros  map[string]float64 `json:"rtt_us,omitempty"`
	// Endpoints counts the open connections or endpoints to the peer, by transport.
	Endpoints map[string]int `json:"endpoints,omitempty"`
	// Rails are the rails reads from the peer can use (WithRails with Slice).
	Rails []string `json:"rails,omitempty"`
	Error string   `json:"error,omitempty"`
	// Auth is "authenticated" (with the credentials' name, if any), "no" when this instance
	// authenticates peers and this one is not, or "off" when it authenticates nobody.
	Auth string `json:"auth"`
}

// HandlerInfo is one handler's counts: messages by outcome, and its mean run time.
type HandlerInfo struct {
	Name       string            `json:"name"`
	Outcomes   map[string]uint64 `json:"outcomes"`
	Messages   uint64            `json:"messages"`
	MeanMicros float64           `json:"mean_us"`
	// PerSecond is Messages over the instance's uptime.
	PerSecond float64 `json:"per_second"`
	BytesIn   uint64  `json:"bytes_in"`
	BytesOut  uint64  `json:"bytes_out"`
}

// RendezvousInfo is the owner's staged payloads and open leases.
type RendezvousInfo struct {
	Slots  int `json:"staged_slots"`
	Leases int `json:"open_leases"`
}

// RDMAInfo is the RDMA registry's state.
type RDMAInfo struct {
	Arenas             int    `json:"arenas"`
	ArenaBytes         int64  `json:"arena_bytes"`
	PinnedSlots        int    `json:"pinned_slots"`
	LeaseRegistrations int    `json:"lease_registrations"`
	QuarantinedKeys    int    `json:"quarantined_keys"`
	QuarantinedBytes   int64  `json:"quarantined_bytes"`
	PinnedBytes        int64  `json:"pinned_bytes"`
	Budget             int64  `json:"budget"`
	LastArenaError     string `json:"last_arena_error,omitempty"`
}

// Introspect gathers what DebugHandler shows.
func (v *Velo) Introspect() Introspection {
	h := v.Health()
	in := Introspection{
		Instance: fmt.Sprintf("%016x", uint64(v.id)), Incarnation: fmt.Sprintf("%016x", v.incarnation),
		State: string(h.State), Reasons: h.Reasons, Paths: map[string]uint64{}, Generated: time.Now(),
	}
	for _, t := range v.transports {
		ti := TransportInfo{Name: t.Name(), MaxFrameSize: t.MaxFrameSize()}
		if d, ok := t.(Describer); ok {
			ti.Settings = d.Describe()
		}
		in.Transports = append(in.Transports, ti)
	}
	for _, p := range v.Peers() {
		pj := PeerInfoJSON{ID: fmt.Sprintf("%016x", uint64(p.ID)), Name: p.Name, State: string(p.State), Since: p.Since, Transports: p.Transports, Error: p.Err, Rails: p.Rails}
		switch {
		case v.authMode == auth.ModeNone:
			pj.Auth = "off"
		case p.Authenticated && p.Identity != "":
			pj.Auth = "authenticated (" + p.Identity + ")"
		case p.Authenticated:
			pj.Auth = "authenticated"
		default:
			pj.Auth = "no"
		}
		for k, d := range p.LastRTT {
			if pj.RTTMicros == nil {
				pj.RTTMicros = map[string]float64{}
			}
			pj.RTTMicros[k] = float64(d) / float64(time.Microsecond)
		}
		for _, t := range v.transports {
			if c, ok := t.(EndpointCounter); ok {
				if pj.Endpoints == nil {
					pj.Endpoints = map[string]int{}
				}
				pj.Endpoints[t.Name()] = c.Endpoints(p.ID)
			}
		}
		in.Peers = append(in.Peers, pj)
	}
	in.Rendezvous.Slots, in.Rendezvous.Leases = v.rv.Counts()
	in.Rails = v.rails
	if v.rdma != nil {
		st := v.rdma.Stats()
		in.RDMA = &RDMAInfo{Arenas: st.Arenas, ArenaBytes: st.ArenaBytes, PinnedSlots: st.Slots, LeaseRegistrations: st.LeaseRegistrations,
			QuarantinedKeys: st.QuarantinedRegistrations, QuarantinedBytes: st.QuarantinedBytes, PinnedBytes: st.PinnedBytes, Budget: st.Budget}
		if st.LastArenaError != nil {
			in.RDMA.LastArenaError = st.LastArenaError.Error()
		}
	}
	if v.gatherer != nil {
		if mfs, err := v.gatherer.Gather(); err == nil {
			in.Handlers = handlerInfo(mfs, time.Since(v.started).Seconds())
			in.Transfers, in.LeaseEnds, in.PeerBytes = transferTables(mfs)
			for _, mf := range mfs {
				if mf.GetName() != metrics.RDMAPathTotal {
					continue
				}
				for _, m := range mf.GetMetric() {
					in.Paths[label(m, "path")+"/"+label(m, "reason")] = uint64(m.GetCounter().GetValue())
				}
			}
		}
	}
	return in
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// handlerInfo reads the per-handler series into one entry per handler.
func handlerInfo(mfs []*dto.MetricFamily, uptime float64) []HandlerInfo {
	byName := map[string]*HandlerInfo{}
	get := func(n string) *HandlerInfo {
		h := byName[n]
		if h == nil {
			h = &HandlerInfo{Name: n, Outcomes: map[string]uint64{}}
			byName[n] = h
		}
		return h
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case metrics.HandlerRequestsTotal:
				h := get(label(m, "handler"))
				n := uint64(m.GetCounter().GetValue())
				h.Outcomes[label(m, "outcome")] = n
				h.Messages += n
			case metrics.HandlerDurationSeconds:
				h := get(label(m, "handler"))
				if c := m.GetHistogram().GetSampleCount(); c > 0 {
					h.MeanMicros = m.GetHistogram().GetSampleSum() / float64(c) * 1e6
				}
			case metrics.HandlerBytesTotal:
				h := get(label(m, "handler"))
				if label(m, "direction") == "request" {
					h.BytesIn = uint64(m.GetCounter().GetValue())
				} else {
					h.BytesOut = uint64(m.GetCounter().GetValue())
				}
			}
		}
	}
	out := make([]HandlerInfo, 0, len(byName))
	for _, h := range byName {
		if uptime > 0 {
			h.PerSecond = float64(h.Messages) / uptime
		}
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// DebugHandler serves the introspection page: JSON when the request asks for it (?format=json,
// or Accept: application/json), a small HTML page otherwise. Mount it where operators look, e.g.
// mux.Handle("/debug/velo", v.DebugHandler()). It shows no secret.
func (v *Velo) DebugHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in := v.Introspect()
		if r.URL.Query().Get("format") == "json" || strings.Contains(r.Header.Get("Accept"), "application/json") {
			writeJSON(w, http.StatusOK, in)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := debugPage.Execute(w, in); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
}

var debugPage = template.Must(template.New("velo").Funcs(template.FuncMap{"micros": micros}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>velo {{.Instance}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em}h2{font-size:1.05em;margin-top:1.4em}
table{border-collapse:collapse}td,th{padding:.2em .8em;border-bottom:1px solid #ddd;text-align:left}
th{background:#f4f4f4}.state-ready,.state-up{color:#176b2c}.state-draining,.state-degraded{color:#a05a00}
.state-down,.state-closed,.state-unauthenticated{color:#b00020}
</style></head><body>
<h1>velo instance <code id="instance">{{.Instance}}</code> <span id="state" class="state-{{.State}}">{{.State}}</span></h1>
<p>incarnation {{.Incarnation}} · generated {{.Generated.Format "2006-01-02 15:04:05 MST"}} · <a href="?format=json">JSON</a></p>
{{if .Reasons}}<ul id="reasons">{{range .Reasons}}<li>{{.}}</li>{{end}}</ul>{{end}}
<h2>Transports</h2>
<table id="transports"><tr><th>name</th><th>max frame</th><th>settings</th></tr>
{{range .Transports}}<tr><td>{{.Name}}</td><td>{{.MaxFrameSize}}</td><td>{{range $k, $v := .Settings}}{{$k}}={{$v}} {{end}}</td></tr>{{end}}</table>
{{with .Rails}}<h2>Rails</h2>
<p id="rails-source">{{.Source}}{{if .GPU}} · {{.GPU}}{{end}}{{if ge .NUMANode 0}} · NUMA node {{.NUMANode}}{{end}}</p>
<table id="rails"><tr><th>device</th><th>relation</th><th>PCI distance</th><th>NIC NUMA node</th></tr>
{{range .Rails}}<tr><td>{{.Device}}</td><td>{{.Relation}}</td><td>{{if .Relation}}{{.Distance}}{{end}}</td><td>{{if ge .NUMANode 0}}{{.NUMANode}}{{end}}</td></tr>{{else}}<tr><td colspan="4">UCX's own choice</td></tr>{{end}}</table>
{{range .Notes}}<p class="note">{{.}}</p>{{end}}{{end}}
<h2>Peers</h2>
<table id="peers"><tr><th>id</th><th>name</th><th>state</th><th>since</th><th>transports</th><th>RTT (µs)</th><th>endpoints</th><th>rails</th><th>auth</th></tr>
{{range .Peers}}<tr><td><code>{{.ID}}</code></td><td>{{.Name}}</td><td class="state-{{.State}}">{{.State}}</td><td>{{.Since.Format "15:04:05"}}</td><td>{{range .Transports}}{{.}} {{end}}</td><td>{{range $k, $v := .RTTMicros}}{{$k}} {{printf "%.0f" $v}} {{end}}</td><td>{{range $k, $v := .Endpoints}}{{$k}} {{$v}} {{end}}</td><td>{{range .Rails}}{{.}} {{end}}</td><td>{{.Auth}}</td></tr>{{else}}<tr><td colspan="9">none</td></tr>{{end}}</table>
<h2>Handlers</h2>
<table id="handlers"><tr><th>name</th><th>messages</th><th>per second</th><th>outcomes</th><th>mean (µs)</th><th>bytes in / out</th></tr>
{{range .Handlers}}<tr><td>{{.Name}}</td><td>{{.Messages}}</td><td>{{printf "%.2f" .PerSecond}}</td><td>{{range $k, $v := .Outcomes}}{{if $v}}{{$k}} {{$v}} {{end}}{{end}}</td><td>{{printf "%.1f" .MeanMicros}}</td><td>{{.BytesIn}} / {{.BytesOut}}</td></tr>{{end}}</table>
<h2>Rendezvous</h2>
<p id="rendezvous">{{.Rendezvous.Slots}} staged payloads, {{.Rendezvous.Leases}} open leases</p>
{{with .RDMA}}<table id="rdma"><tr><th>arenas</th><th>arena bytes</th><th>pinned bytes</th><th>budget</th><th>lease keys</th><th>quarantined keys / bytes</th></tr>
<tr><td>{{.Arenas}}</td><td>{{.ArenaBytes}}</td><td>{{.PinnedBytes}}</td><td>{{.Budget}}</td><td>{{.LeaseRegistrations}}</td><td>{{.QuarantinedKeys}} / {{.QuarantinedBytes}}</td></tr></table>{{end}}
<h2>Paths</h2>
<table id="paths"><tr><th>path/reason</th><th>transfers</th></tr>
{{range $k, $v := .Paths}}{{if $v}}<tr><td>{{$k}}</td><td>{{$v}}</td></tr>{{end}}{{end}}</table>
<h2>Transfers</h2>
<table id="transfers"><tr><th>path</th><th>size</th><th>transfers</th><th>p50</th><th>p99</th></tr>
{{range .Transfers}}<tr><td>{{.Path}}</td><td>{{.Size}}</td><td>{{.Count}}</td><td>{{micros .P50Micros}}</td><td>{{micros .P99Micros}}</td></tr>{{else}}<tr><td colspan="5">none yet</td></tr>{{end}}</table>
<table id="lease-ends"><tr><th>leases ended</th><th>count</th><th>p50 lifetime</th><th>p99 lifetime</th></tr>
{{range .LeaseEnds}}<tr><td>{{.End}}</td><td>{{.Count}}</td><td>{{micros .P50Micros}}</td><td>{{micros .P99Micros}}</td></tr>{{else}}<tr><td colspan="4">none yet</td></tr>{{end}}</table>
<table id="peer-bytes"><tr><th>peer</th><th>received rdma</th><th>received chunked</th><th>served rdma</th><th>served chunked</th><th>received shm</th><th>served shm</th></tr>
{{range .PeerBytes}}<tr><td><code>{{.Peer}}</code></td><td>{{.ReceivedRDMA}}</td><td>{{.ReceivedChunked}}</td><td>{{.ServedRDMA}}</td><td>{{.ServedChunked}}</td><td>{{.ReceivedSameHost}}</td><td>{{.ServedSameHost}}</td></tr>{{else}}<tr><td colspan="7">none</td></tr>{{end}}</table>
<p class="note">p50 and p99 are read from the histograms' buckets (steps of about 2.15x); served rdma and served shm are what the owner's leases made readable.</p>
</body></html>
`))
