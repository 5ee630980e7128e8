package check

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/velo-go/velo/mlx5dv"
	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/verbs"
)

// The environment checks: the variables the guide's "Set the runtime environment" and "Prepare
// each node" name, judged against this node's ports and against the UCX linked into this binary.

// splitList splits a UCX list variable ("mlx5_0:1, mlx5_2:1") into its non-empty entries.
func splitList(v string) []string {
	var out []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// ucxBool decodes a UCX boolean as UCX's parser does: y, yes, 1 and n, no, 0 (letters in any case).
func ucxBool(v string) (value, ok bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "y", "yes", "1":
		return true, true
	case "n", "no", "0":
		return false, true
	}
	return false, false
}

// recommendedPort is the port ibcheck would pin UCX_NET_DEVICES to: the checked port when it is
// active, else the best active port of the node.
func (r *run) recommendedPort() (verbs.Port, bool) {
	if r.hasPort() && r.port.Active() {
		return r.port, true
	}
	p, ok := bestPort(r.devs)
	return p, ok && p.Active()
}

// RecommendedTLS is the UCX_TLS for a port: the mlx5 transports when the device is mlx5 and the
// linked UCX has them (or cannot be asked), the verbs ones otherwise; always with the UD transport
// RC needs for wireup, and self for an instance's own endpoint.
func (r *run) recommendedTLS(p verbs.Port) string {
	isMLX5, err := mlx5dv.IsMLX5(r.cfg.Paths, p.Device)
	ucxHasMLX5 := r.ucx.Err != nil || r.ucx.SupportErr != nil || (r.ucx.Support.MLX5 && r.ucx.Support.DEVX)
	if err == nil && isMLX5 && ucxHasMLX5 {
		return "rc_mlx5,ud_mlx5,self"
	}
	return "rc_verbs,ud_verbs,self"
}

func (r *run) checkNetDevices(context.Context) Result {
	res := Result{ID: "ucx_net_devices"}
	v, set := r.env("UCX_NET_DEVICES")
	fix := "pin the port: export UCX_NET_DEVICES=<device>:<port> (ibcheck env prints the line for this node)"
	if p, ok := r.recommendedPort(); ok {
		fix = "pin the port: export UCX_NET_DEVICES=" + p.Spec() + " (ibcheck env prints it)"
	}
	if set {
		res.fact("UCX_NET_DEVICES", v)
	}
	if !set || strings.TrimSpace(v) == "" || strings.EqualFold(strings.TrimSpace(v), "all") {
		res.Status = Warn
		res.Finding = "UCX_NET_DEVICES is " + orUnsetValue(set, v) + ": UCX picks devices itself, Ethernet (RoCE) ports and plain NICs included"
		res.Fix = fix
		return res
	}
	var good, roce, bad, unsure, other []string
	for _, e := range splitList(v) {
		name, num, err := verbs.ParsePortSpec(e)
		if err != nil {
			other = append(other, e) // a TCP or shared-memory device (eth0, lo, memory)
			continue
		}
		p, err := verbs.LookupPort(r.cfg.Paths, name, num)
		switch {
		case errors.Is(err, verbs.ErrNotSupported):
			bad = append(bad, e+" ("+withoutSentinel(err, verbs.ErrNoDevice)+")")
		case err != nil:
			unsure = append(unsure, e+" ("+err.Error()+")")
		case !p.Active():
			bad = append(bad, fmt.Sprintf("%s (%s)", e, p.State))
		case p.LinkLayer == verbs.LinkLayerInfiniBand:
			good = append(good, e)
		default:
			roce = append(roce, e)
		}
	}
	rdma := len(good) + len(roce) + len(bad) + len(unsure)
	res.fact("rdma_ports", strconv.Itoa(rdma))
	switch {
	case len(bad) > 0:
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = "UCX_NET_DEVICES=" + v + " names ports UCX cannot use: " + strings.Join(bad, "; ")
		res.Fix = "name PORT_ACTIVE ports only: " + r.portSuggestion()
	case len(unsure) > 0:
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = couldNotTell(errors.New(strings.Join(unsure, "; ")))
	case rdma == 0:
		res.Status = Warn
		res.Finding = "UCX_NET_DEVICES=" + v + " names no RDMA port (" + strings.Join(other, ", ") + " are TCP or shared-memory devices): the RDMA transports get no device"
		res.Fix = fix
	case len(roce) > 0:
		res.Status, res.Probe = Warn, Available
		res.Finding = "UCX_NET_DEVICES=" + v + ": " + strings.Join(roce, ", ") + " is Ethernet (RoCE), which looks like success but is not InfiniBand"
		res.Fix = "on an InfiniBand fabric name InfiniBand ports (" + listOr(r.activePorts(verbs.LinkLayerInfiniBand), "this node has none active") + ")"
	default:
		res.Status, res.Probe = Pass, Available
		res.Finding = "UCX_NET_DEVICES=" + v + ": " + strings.Join(good, ", ") + " PORT_ACTIVE InfiniBand"
	}
	if res.Status == Pass && r.portSource == PortFromDevice && !containsFold(splitList(v), r.cfg.Device) {
		res.Status = Warn
		res.Finding += "; but it does not include " + r.cfg.Device + ", the port --device asked about"
		res.Fix = "add " + r.cfg.Device + " to UCX_NET_DEVICES if the job should use it"
	}
	return res
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

func orUnsetValue(set bool, v string) string {
	if !set {
		return "unset"
	}
	return strconv.Quote(v)
}

// UCX_TLS names, by what they bring. Aliases expand inside UCX (ucp_tl_aliases): rc, rc_v and rc_x
// carry their UD transport as an auxiliary one, ib names every InfiniBand transport.
var (
	tlsRCBare  = map[string]bool{"rc_verbs": true, "rc_mlx5": true}
	tlsRCAlias = map[string]bool{"rc": true, "rc_v": true, "rc_x": true}
	tlsUD      = map[string]bool{"ud": true, "ud_v": true, "ud_x": true, "ud_verbs": true, "ud_mlx5": true}
	tlsDC      = map[string]bool{"dc": true, "dc_x": true, "dc_mlx5": true}
	tlsMLX5    = map[string]bool{"rc_mlx5": true, "ud_mlx5": true, "dc_mlx5": true, "rc_x": true, "ud_x": true, "dc_x": true, "dc": true}
)

func (r *run) checkTLS(context.Context) Result {
	res := Result{ID: "ucx_tls"}
	v, set := r.env("UCX_TLS")
	rec := "rc_mlx5,ud_mlx5,self (or rc_verbs,ud_verbs,self)"
	if p, ok := r.recommendedPort(); ok {
		rec = r.recommendedTLS(p)
	}
	if set {
		res.fact("UCX_TLS", v)
	}
	trimmed := strings.TrimSpace(v)
	if !set || trimmed == "" || strings.EqualFold(trimmed, "all") {
		res.Status = Warn
		res.Finding = "UCX_TLS is " + orUnsetValue(set, v) + ": UCX chooses the transports itself"
		res.Fix = "pin them: export UCX_TLS=" + rec
		return res
	}
	exclude := strings.HasPrefix(trimmed, "^")
	var names []string
	for _, e := range splitList(strings.TrimPrefix(trimmed, "^")) {
		names = append(names, strings.TrimSuffix(strings.ToLower(e), ":aux"))
	}
	has := func(set map[string]bool) bool {
		for _, n := range names {
			if set[n] {
				return true
			}
		}
		return false
	}
	rcBare, rcAlias, ud, dc, ib := has(tlsRCBare), has(tlsRCAlias), has(tlsUD), has(tlsDC), has(map[string]bool{"ib": true})
	wireupExplained := "RC endpoints are wired up through an auxiliary transport that can reach a remote interface, a UD one; " +
		"without it UCX fails with \"no auxiliary transport ... Destination is unreachable\""
	switch {
	case exclude && (ud || ib) && !(rcBare || rcAlias):
		res.Status = Fail
		res.Finding = "UCX_TLS=" + v + " excludes the UD transports but not RC: " + wireupExplained
		res.Fix = "pin the transports instead: export UCX_TLS=" + rec
	case exclude:
		res.Status = Warn
		res.Finding = "UCX_TLS=" + v + " only excludes transports: UCX chooses among the rest"
		res.Fix = "pin them: export UCX_TLS=" + rec
	case rcBare && !ud && !rcAlias && !ib && has(map[string]bool{"tcp": true}):
		res.Status = Warn
		res.Finding = "UCX_TLS=" + v + " names an RC transport without a UD one; UCX may wire RC up through tcp instead, but " + wireupExplained
		res.Fix = "add the UD transport of the same kind (ud_mlx5 beside rc_mlx5, ud_verbs beside rc_verbs): export UCX_TLS=" + rec
	case rcBare && !ud && !rcAlias && !ib:
		res.Status = Fail
		res.Finding = "UCX_TLS=" + v + " names an RC transport without a UD one: " + wireupExplained
		res.Fix = "add the UD transport of the same kind (ud_mlx5 beside rc_mlx5, ud_verbs beside rc_verbs): export UCX_TLS=" + rec
	case !(rcBare || rcAlias || ud || dc || ib):
		res.Status = Warn
		res.Finding = "UCX_TLS=" + v + " names no RDMA transport: GETs run over " + strings.Join(names, ",") + " (over tcp UCX emulates them in software) and the NIC moves no payload"
		res.Fix = "for RDMA: export UCX_TLS=" + rec
	default:
		res.Status = Pass
		res.Finding = "UCX_TLS=" + v + " names RDMA transports and the UD transport RC needs for wireup"
		if dc && !rcBare && !rcAlias {
			res.Finding = "UCX_TLS=" + v + " names RDMA transports (DC connects without an auxiliary transport)"
		}
	}
	if res.Status == Pass && has(tlsMLX5) {
		switch {
		case r.ucx.Err == nil && r.ucx.SupportErr == nil && !r.ucx.Support.MLX5:
			res.Status = Warn
			res.Finding += "; but the linked UCX has no mlx5 transports compiled in, so the mlx5 ones get no device"
			res.Fix = "use rc_verbs,ud_verbs,self, or link a UCX built with mlx5 and DEVX (make ucx-static)"
		case r.hasPort():
			if isMLX5, err := mlx5dv.IsMLX5(r.cfg.Paths, r.port.Device); err == nil && !isMLX5 {
				res.Status = Warn
				res.Finding += "; but " + r.port.Device + " is not an mlx5 device, so the mlx5 transports get no device on it"
				res.Fix = "export UCX_TLS=rc_verbs,ud_verbs,self"
			}
		}
	}
	return res
}

// protoSummary says what the linked UCX does with protocols and RMA, as found out by the probe.
func (r *run) protoSummary() (summary, verdict string) {
	info := r.ucx
	def, known := info.Defaults["PROTO_ENABLE"]
	v1, v2 := info.RMA["n"], info.RMA["y"]
	name := "the linked UCX " + info.Version.String
	switch {
	case !known:
		summary = name + " has no UCX_PROTO_ENABLE setting"
	case isFalse(def):
		summary = name + " defaults to protocol v1 (UCX_PROTO_ENABLE=" + def + ")"
	default:
		summary = name + " defaults to protocol v2 (UCX_PROTO_ENABLE=" + def + ")"
	}
	switch {
	case v1.Worked:
		return summary + ", and protocol v1 carries RMA here (a GET with UCX_PROTO_ENABLE=n " + worked(v1) + ")", "v1_carries_rma"
	case !v1.Inconclusive && v2.Worked:
		return summary + ", and it needs protocol v2 for RMA: a GET with UCX_PROTO_ENABLE=n failed (" + v1.Detail + ") and with y " + worked(v2), "needs_v2"
	case !v1.Inconclusive && !v2.Inconclusive:
		return summary + "; a GET failed under both protocols (n: " + v1.Detail + "; y: " + v2.Detail + ")", "rma_broken"
	}
	return summary + "; the GET probe could not run (" + firstNonEmpty(v1.Detail, v2.Detail) + ")", "unknown"
}

// worked says how a trial that carried RMA ended: "worked", or, on a UCX with the software RMA
// guard, that the target refused it (the self transport the trial runs on has no hardware RMA).
func worked(t RMATrial) string {
	if t.Refused {
		return "reached the target, whose software RMA guard refused it as it refuses any GET without hardware RMA"
	}
	return "worked"
}

func isFalse(v string) bool { b, ok := ucxBool(v); return ok && !b }

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

func (r *run) checkProtoEnable(context.Context) Result {
	res := Result{ID: "ucx_proto_enable"}
	v, set := r.env("UCX_PROTO_ENABLE")
	if set {
		res.fact("UCX_PROTO_ENABLE", v)
	}
	value, valid := ucxBool(v)
	if set && !valid {
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = fmt.Sprintf("UCX_PROTO_ENABLE=%q is not a value UCX accepts (y, yes, 1, n, no, 0): creating a UCX context fails", v)
		if t, ok := r.ucx.RMA[v]; ok && !t.Worked && t.Detail != "" {
			res.Finding += " (" + t.Detail + ")"
		}
		res.Fix = "unset UCX_PROTO_ENABLE"
		return res
	}
	if r.ucx.Err != nil {
		switch {
		case !set || value:
			res.Status = Pass
			res.Finding = "UCX_PROTO_ENABLE is " + orUnsetValue(set, v) + ", as the guide advises; this binary cannot ask a UCX about protocols (" + r.ucx.Err.Error() + ")"
		default:
			res.Status, res.Probe = Warn, Inconclusive
			res.Finding = "UCX_PROTO_ENABLE=" + v + " is set, and this binary cannot ask the linked UCX whether RMA needs protocol v2 (" + r.ucx.Err.Error() +
				"); where it does (UCX releases that removed protocol v1's RMA), this disables every GET"
			res.Fix = "unset UCX_PROTO_ENABLE"
		}
		return res
	}
	summary, verdict := r.protoSummary()
	res.fact("default", r.ucx.Defaults["PROTO_ENABLE"])
	res.fact("verdict", verdict)
	if !set {
		res.Status = Pass
		res.Finding = "UCX_PROTO_ENABLE is unset: " + summary
		res.Probe = Available
		if verdict == "rma_broken" || verdict == "unknown" {
			res.Status, res.Probe = Warn, Inconclusive
		}
		return res
	}
	t, tried := r.ucx.RMA[v]
	res.Probe = Available
	switch {
	case !tried || t.Inconclusive:
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = "UCX_PROTO_ENABLE=" + v + " is set; " + summary
		res.Fix = "unset UCX_PROTO_ENABLE"
	case !value && t.Worked:
		res.Status = Warn
		res.Finding = "UCX_PROTO_ENABLE=" + v + " is harmless on this UCX but not on others: " + summary +
			"; a UCX that needs protocol v2 for RMA (releases that removed protocol v1's RMA) loses every GET with this setting"
		res.Fix = "unset UCX_PROTO_ENABLE (the guide: it silently disables all RMA where protocol v2 is required)"
	case !value:
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = "UCX_PROTO_ENABLE=" + v + " disables RMA on this UCX: " + summary + "; every GET fails and velo falls back to the chunked path"
		res.Fix = "unset UCX_PROTO_ENABLE"
	case t.Worked:
		res.Status = Pass
		res.Finding = "UCX_PROTO_ENABLE=" + v + " selects protocol v2, and a GET under it " + worked(t) + "; " + summary
	default:
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = "UCX_PROTO_ENABLE=" + v + ": a GET under it failed on the linked UCX (" + t.Detail + "); " + summary
		res.Fix = "unset UCX_PROTO_ENABLE and let the linked UCX choose"
	}
	return res
}

func (r *run) checkRMARails(context.Context) Result {
	res := Result{ID: "ucx_max_rma_rails"}
	v, _ := r.env("UCX_NET_DEVICES")
	var ports []string
	for _, e := range splitList(v) {
		if _, _, err := verbs.ParsePortSpec(e); err == nil {
			ports = append(ports, e)
		}
	}
	setting, set := r.env("UCX_MAX_RMA_RAILS")
	if set {
		res.fact("UCX_MAX_RMA_RAILS", setting)
	}
	if len(ports) < 2 {
		res.Status = Skip
		res.Finding = "UCX_NET_DEVICES does not list several RDMA ports: one rail, nothing to spread a GET over"
		return res
	}
	n := len(ports)
	res.fact("rdma_ports", strconv.Itoa(n))
	want := fmt.Sprintf("export UCX_MAX_RMA_RAILS=%d", n)
	if r.ucx.Err != nil {
		if rails, err := strconv.Atoi(setting); set && err == nil && rails >= 2 {
			res.Status = Pass
			res.Finding = fmt.Sprintf("UCX_MAX_RMA_RAILS=%s for the %d RDMA ports in UCX_NET_DEVICES", setting, n)
			return res
		}
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = fmt.Sprintf("UCX_NET_DEVICES lists %d RDMA ports and UCX_MAX_RMA_RAILS is %s; this binary cannot ask the linked UCX for its default (%v)", n, orUnsetValue(set, setting), r.ucx.Err)
		res.Fix = want
		return res
	}
	def, known := r.ucx.Defaults["MAX_RMA_RAILS"]
	if !known {
		res.Status, res.Probe = Warn, NotAvailable
		res.Finding = fmt.Sprintf("UCX_NET_DEVICES lists %d RDMA ports, but the linked UCX %s has no UCX_MAX_RMA_RAILS setting, so a GET cannot be spread over them", n, r.ucx.Version.String)
		if set {
			res.Finding += " (UCX reports UCX_MAX_RMA_RAILS as an unused variable)"
		}
		res.Fix = "for multi-rail GETs link a UCX that has UCX_MAX_RMA_RAILS (make ucx-static builds one); otherwise list one port per process"
		return res
	}
	eff, source := def, "default"
	if set {
		eff, source = setting, "set"
	}
	rails, err := strconv.Atoi(strings.TrimSpace(eff))
	res.fact("effective", eff)
	switch {
	case err != nil:
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = fmt.Sprintf("UCX_MAX_RMA_RAILS=%q is not a number", eff)
		res.Fix = want
	case rails < 2:
		res.Status, res.Probe = Warn, Available
		res.Finding = fmt.Sprintf("UCX_NET_DEVICES lists %d RDMA ports, but UCX_MAX_RMA_RAILS is %d (%s): a GET uses one rail", n, rails, source)
		res.Fix = want
	default:
		res.Status, res.Probe = Pass, Available
		res.Finding = fmt.Sprintf("UCX_MAX_RMA_RAILS is %d (%s) for the %d RDMA ports in UCX_NET_DEVICES", rails, source, n)
	}
	return res
}

func (r *run) checkRCache(context.Context) Result {
	res := Result{ID: "ucx_rcache"}
	var left []string
	var kept []string
	for _, name := range []string{"UCX_RCACHE_ENABLE", "UCX_MEM_EVENTS"} {
		v, set := r.env(name)
		if !set {
			continue
		}
		res.fact(name, v)
		if isFalse(v) {
			kept = append(kept, name+"="+v)
		} else {
			left = append(left, name+"="+v)
		}
	}
	switch {
	case len(left) > 0:
		res.Status = Warn
		res.Finding = strings.Join(left, ", ") + ": velo leaves variables the operator set alone, so UCX keeps a registration cache or patches the C library's " +
			"memory functions, while velo registers memory explicitly and never uses the cache"
		res.Fix = "unset them (velo then sets UCX_RCACHE_ENABLE=n and UCX_MEM_EVENTS=n itself)"
	case len(kept) > 0:
		res.Status = Pass
		res.Finding = strings.Join(kept, ", ") + ": off, as velo wants them"
	default:
		res.Status = Pass
		res.Finding = "UCX_RCACHE_ENABLE and UCX_MEM_EVENTS are unset: velo sets both to n itself"
	}
	return res
}

func (r *run) checkKillSwitch(context.Context) Result {
	res := Result{ID: "kill_switch"}
	v, set := r.env(veloKillSwitchEnv)
	on := set && veloAffirmative(v)
	if set {
		res.fact(veloKillSwitchEnv, v)
	}
	res.fact("rdma_path", map[bool]string{true: "off", false: "on"}[on])
	switch {
	case on:
		res.Status = Warn
		res.Finding = veloKillSwitchEnv + "=" + v + " turns the RDMA path off: every get takes the chunked path (reason kill_switch)"
		res.Fix = "unset " + veloKillSwitchEnv + " and restart the job (velo reads it once, at start)"
	case set:
		res.Status = Pass
		res.Finding = fmt.Sprintf("%s=%q is not affirmative (only 1, true, yes, on turn the path off): the RDMA path is on", veloKillSwitchEnv, v)
	default:
		res.Status = Pass
		res.Finding = veloKillSwitchEnv + " is unset: the RDMA path is on"
	}
	return res
}

// ucxUnknown is the result of a UCX check when the linked UCX could not be asked.
func (r *run) ucxUnknown(res Result) Result {
	if errors.Is(r.ucx.Err, ucx.ErrNotCompiled) || errors.Is(r.ucx.Err, ucx.ErrUnsupported) {
		res.Status, res.Probe = NotCompiled, Inconclusive
		res.Finding = "not compiled in: this binary has no UCX (" + r.ucx.Err.Error() + ")"
		return res
	}
	res.Status, res.Probe = Warn, Inconclusive
	res.Finding = couldNotTell(r.ucx.Err)
	return res
}

// minUCX is the oldest UCX velo's ucx module supports (Debian 12's).
var minUCX = [2]uint{1, 13}

func (r *run) checkUCXVersion(context.Context) (res Result) {
	res = Result{ID: "ucx_version"}
	res.fact("wire_version", strconv.Itoa(veloUCXWireVersion))
	wire := fmt.Sprintf("; velo's UCX wire version is %d (every UCX peer must run the same, or register refuses it)", veloUCXWireVersion)
	if r.ucx.Err != nil {
		res = r.ucxUnknown(res)
		res.Finding += wire
		return res
	}
	v := r.ucx.Version
	res.fact("version", v.String)
	res.fact("api", fmt.Sprintf("%d.%d", v.APIMajor, v.APIMinor))
	res.Probe = Available
	linked := fmt.Sprintf("linked UCX %s (compiled against the %d.%d headers)", v.String, v.APIMajor, v.APIMinor)
	defer func() { res.Finding += wire }()
	switch {
	case v.Major < minUCX[0] || v.Major == minUCX[0] && v.Minor < minUCX[1]:
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = fmt.Sprintf("%s: velo needs UCX %d.%d or later", linked, minUCX[0], minUCX[1])
		res.Fix = "install a newer UCX (libucx-dev), point UCX_DIR at one, or build the static one (make ucx-static)"
	case v.Major < v.APIMajor || v.Major == v.APIMajor && v.Minor < v.APIMinor:
		res.Status = Warn
		res.Finding = linked + ": the library at run time is older than the headers the binary was built with"
		res.Fix = "run with the UCX the binary was built against (check LD_LIBRARY_PATH and UCX_DIR)"
	default:
		res.Status = Pass
		res.Finding = linked
	}
	return res
}

func (r *run) checkUCXBuild(context.Context) Result {
	res := Result{ID: "ucx_build"}
	if r.ucx.Err != nil {
		return r.ucxUnknown(res)
	}
	if r.ucx.SupportErr != nil {
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = couldNotTell(r.ucx.SupportErr)
		return res
	}
	s := r.ucx.Support
	yesNo := func(b bool) string { return map[bool]string{true: "yes", false: "no"}[b] }
	var in, out []string
	for _, part := range []struct {
		name, key string
		ok        bool
	}{{"verbs", "verbs", s.Verbs}, {"mlx5", "mlx5", s.MLX5}, {"DEVX", "devx", s.DEVX}, {"rdmacm", "rdmacm", s.RDMACM}} {
		res.fact(part.key, yesNo(part.ok))
		if part.ok {
			in = append(in, part.name)
		} else {
			out = append(out, part.name)
		}
	}
	has := "compiled in: " + listOr(in, "none of verbs, mlx5, DEVX, rdmacm")
	if len(out) > 0 {
		has += "; missing: " + strings.Join(out, ", ")
	}
	mlx5Node := true // judge as if the NIC were mlx5 when there is no port to look at
	if r.hasPort() {
		if ok, err := mlx5dv.IsMLX5(r.cfg.Paths, r.port.Device); err == nil {
			mlx5Node = ok
		}
	}
	res.Probe = Available
	switch {
	case !s.Verbs:
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = "the linked UCX (" + has + ") has no InfiniBand support: a TCP and shared-memory build, which passes CI and then runs production traffic over TCP"
		res.Fix = "link a UCX built with verbs (Debian's libucx0 has it; or make ucx-static)"
	case mlx5Node && (!s.MLX5 || !s.DEVX):
		res.Status = Warn
		res.Finding = "the linked UCX (" + has + ") lacks the accelerated mlx5 parts: on an mlx5 NIC it runs on the slower verbs transports"
		res.Fix = "link a UCX built with --with-mlx5-dv --with-devx (make ucx-static)"
	default:
		res.Status = Pass
		res.Finding = "the linked UCX has the RDMA parts velo uses (" + has + ")"
	}
	return res
}

// guardFix is how to get the enforcing UCX, for ibcheck and velo alike.
const guardFix = "build with the static UCX: make ucx-static, then go build -tags ucx_static (make ibcheck does; build velo's programs the same way)"

// checkRMAGuard: velo's UCX transport refuses to start on a UCX without the software RMA guard,
// unless the operator trusts the network (VELO_UCX_TRUST_NETWORK). Like the other UCX checks it
// judges the UCX linked into this binary: an ibcheck built like the job's programs answers for
// them.
func (r *run) checkRMAGuard(context.Context) Result {
	res := Result{ID: "ucx_rma_guard"}
	g := r.ucx.Guard
	if g == nil {
		if r.ucx.Err == nil {
			res.Status, res.Probe = Warn, Inconclusive
			res.Finding = "could not tell: the linked UCX was not asked about its software RMA guard"
			return res
		}
		return r.ucxUnknown(res)
	}
	trust, trustSet := r.env(veloTrustNetworkEnv)
	res.fact("enforced", map[bool]string{true: "yes", false: "no"}[g.Enforced])
	if g.Version != "" {
		res.fact("version", g.Version)
	}
	if trustSet {
		res.fact(veloTrustNetworkEnv, trust)
	}
	switch {
	case g.Enforced:
		res.Status, res.Probe = Pass, Available
		res.Finding = "the linked UCX " + g.UCX + " refuses software-emulated RMA and tcp PUT requests (" + g.Version + ")"
		if trustSet && veloAffirmative(trust) {
			res.Finding += "; " + veloTrustNetworkEnv + "=" + trust + " is not needed with it"
		}
	case veloAffirmative(trust):
		res.Status, res.Probe = Warn, NotAvailable
		res.Finding = fmt.Sprintf("the linked UCX %s does not enforce remote keys on software RMA: velo runs on it only because %s=%s trusts the network, and any process that reaches the node's UCX over tcp or ud can read and write a velo process's memory", g.UCX, veloTrustNetworkEnv, trust)
		res.Fix = guardFix + "; then unset " + veloTrustNetworkEnv
	default:
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = fmt.Sprintf("the linked UCX %s does not enforce remote keys on software RMA (no velo guard patch set): velo's UCX transport refuses to start on it (ErrUnguardedUCX), since any process that reaches the node's UCX over tcp or ud could read and write a velo process's memory", g.UCX)
		res.Fix = guardFix + "; or, only on a network trusted with that, set " + veloTrustNetworkEnv + "=1"
	}
	return res
}

// checkTCPListen reports where a UCX worker of this binary listens over tcp under the caller's
// environment: UCX's tcp transport listens on every active interface unless UCX_NET_DEVICES (or
// velo's ucxtransport.Config.TCPInterfaces) names some, and not at all when UCX_TLS leaves tcp out.
// It knows no control plane, whose interface velo's transport keeps to by default under velo.New.
// It reports, and passes: which is right depends on the network.
func (r *run) checkTCPListen(context.Context) Result {
	res := Result{ID: "ucx_tcp_listen"}
	l := r.ucx.Listen
	if l == nil {
		if r.ucx.Err != nil {
			return r.ucxUnknown(res)
		}
		res.Status, res.Probe = Skip, Inconclusive
		res.Finding = "not asked: no UCX worker was made (a fixture tree)"
		return res
	}
	if l.Err != "" {
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = "could not tell: " + l.Err
		return res
	}
	res.fact("UCX_TLS", l.TLS)
	res.fact("UCX_NET_DEVICES", l.NetDevices)
	res.fact("listen", strings.Join(l.Addrs, ","))
	res.Status, res.Probe = Pass, Available
	external := false
	for _, a := range l.Addrs {
		if ap, err := netip.ParseAddrPort(a); err == nil && !ap.Addr().IsLoopback() {
			external = true
		}
	}
	switch {
	case len(l.Addrs) == 0:
		res.Finding = "a worker opens no tcp listener (UCX_TLS=" + l.TLS + " leaves tcp out, or no interface is active)"
	case !external:
		res.Finding = "a worker listens on loopback only: " + strings.Join(l.Addrs, ", ")
	case l.NetDevices == "all" || l.NetDevices == "":
		res.Finding = "a worker listens on every active interface: " + strings.Join(l.Addrs, ", ") +
			"; velo's UCX transport keeps its worker to the control plane's interface where nothing names devices " +
			"(unless memory is registered with it before velo.New), and UCX_NET_DEVICES or ucxtransport.Config.TCPInterfaces chooses others"
	default:
		res.Finding = "a worker listens on the interfaces UCX_NET_DEVICES names: " + strings.Join(l.Addrs, ", ")
	}
	return res
}
