package check

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/velo-go/velo/mlx5dv"
	"github.com/velo-go/velo/verbs"
)

// The node checks: what the kernel and the hardware say, from sysfs and, where a library call is
// the only way to know (registration, DEVX), from libibverbs and libmlx5.

// couldNotTell is how every inconclusive finding starts, so that the table tells "could not find
// out" apart from "found out: no" at a glance.
func couldNotTell(err error) string { return "could not tell: " + err.Error() }

// withoutSentinel drops a leading "<sentinel text>: " from an error's text, for findings that say
// the same thing in their own words.
func withoutSentinel(err, sentinel error) string {
	s := err.Error()
	return strings.TrimPrefix(s, sentinel.Error()+": ")
}

func (r *run) device(name string) (verbs.Device, bool) {
	for _, d := range r.devs {
		if d.Name == name {
			return d, true
		}
	}
	return verbs.Device{}, false
}

// activePorts lists the node's ACTIVE ports of a link layer ("mlx5_0:1, mlx5_2:1").
func (r *run) activePorts(link verbs.LinkLayer) []string {
	var out []string
	for _, d := range r.devs {
		for _, p := range d.Ports {
			if p.Active() && p.LinkLayer == link {
				out = append(out, p.Spec())
			}
		}
	}
	return out
}

func describeDevice(d verbs.Device) string {
	var parts []string
	if d.HCAType != "" {
		parts = append(parts, d.HCAType)
	}
	if d.FirmwareVersion != "" {
		parts = append(parts, "firmware "+d.FirmwareVersion)
	}
	if d.Driver != "" {
		parts = append(parts, d.Driver)
	}
	ports := make([]string, len(d.Ports))
	for i, p := range d.Ports {
		ports[i] = fmt.Sprintf("port %d %s %s", p.Number, strings.TrimPrefix(p.State.String(), "PORT_"), p.LinkLayer)
	}
	parts = append(parts, ports...)
	return d.Name + " (" + strings.Join(parts, ", ") + ")"
}

func (r *run) checkDevices(context.Context) Result {
	res := Result{ID: "devices"}
	res.fact("sysfs", r.cfg.Paths.SysfsRoot())
	switch {
	case errors.Is(r.devsErr, verbs.ErrNoDevice):
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = "no RDMA devices: " + withoutSentinel(r.devsErr, verbs.ErrNoDevice)
		res.Fix = "load the adapter's RDMA drivers (modprobe mlx5_ib ib_uverbs) or run on a node with an RDMA NIC; " +
			"in a container, start it with the host's /sys/class/infiniband visible and --device=/dev/infiniband"
		return res
	case r.devsErr != nil:
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = couldNotTell(r.devsErr)
		res.Fix = "check that " + r.cfg.Paths.SysfsRoot() + " is a readable sysfs tree"
		return res
	}
	res.Status, res.Probe = Pass, Available
	desc := make([]string, len(r.devs))
	names := make([]string, len(r.devs))
	for i, d := range r.devs {
		desc[i], names[i] = describeDevice(d), d.Name
	}
	noun := "RDMA devices"
	if len(r.devs) == 1 {
		noun = "RDMA device"
	}
	res.Finding = fmt.Sprintf("%d %s: %s", len(r.devs), noun, strings.Join(desc, "; "))
	res.fact("devices", strings.Join(names, ","))
	return res
}

// chosenBecause says in words why the checked port is this one.
func (r *run) chosenBecause() string {
	switch r.portSource {
	case PortFromDevice:
		return "named by --device"
	case PortFromIP:
		return "it carries " + r.cfg.IP.String()
	case PortFromUCXNetDevices:
		return "named first in UCX_NET_DEVICES"
	case PortFromAuto:
		return "chosen automatically: no --device, --ip or UCX_NET_DEVICES port"
	}
	return ""
}

func (r *run) checkPort(context.Context) Result {
	res := Result{ID: "port"}
	if r.portSource != "" {
		res.fact("chosen_by", r.portSource)
	}
	switch {
	case r.portErr != nil && errors.Is(r.portErr, verbs.ErrNotSupported):
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = withoutSentinel(r.portErr, verbs.ErrNoDevice) + " (port " + r.chosenBecause() + ")"
		res.Fix = "name a port this node has: " + r.portSuggestion()
		return res
	case r.portErr != nil:
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = couldNotTell(r.portErr)
		return res
	case !r.hasPort():
		res.Status = Skip
		res.Finding = "no port to check: the node has no RDMA device"
		return res
	}
	p := r.port
	res.fact("port", p.Spec())
	res.fact("state", p.State.String())
	res.fact("phys_state", p.PhysState.String())
	res.fact("link_layer", p.LinkLayer.String())
	res.fact("rate", p.Rate.String())
	why := " (" + r.chosenBecause() + ")"
	if !p.Active() {
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = fmt.Sprintf("%s is %s (physical state %s), not PORT_ACTIVE%s", p.Spec(), p.State, p.PhysState, why)
		res.Fix = "check the cable and the switch port; on InfiniBand a subnet manager must run on the fabric (sminfo); " +
			"or use an active port: " + r.portSuggestion()
		return res
	}
	desc := fmt.Sprintf("%s is PORT_ACTIVE (%s), link layer %s, %s", p.Spec(), p.PhysState, p.LinkLayer, p.Rate)
	switch p.LinkLayer {
	case verbs.LinkLayerInfiniBand:
		res.Status, res.Probe = Pass, Available
		res.Finding = fmt.Sprintf("%s, LID 0x%x%s", desc, p.LID, why)
	case verbs.LinkLayerEthernet:
		res.Status, res.Probe = Warn, Available
		res.Finding = desc + ": an active Ethernet port carries RoCE, which looks like success but is not InfiniBand" + why
		res.Fix = "on an InfiniBand fabric pick a port with link layer InfiniBand (" + listOr(r.activePorts(verbs.LinkLayerInfiniBand), "this node has none active") +
			"); if RoCE is intended, this port is usable and the warning can be ignored"
	default:
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = desc + ": the kernel does not say whether this is InfiniBand or Ethernet" + why
		res.Fix = "check the port with ibv_devinfo -v and the adapter's link type (mlxconfig LINK_TYPE_P1)"
	}
	return res
}

// portSuggestion names the active ports of the node, InfiniBand first.
func (r *run) portSuggestion() string {
	ib, eth := r.activePorts(verbs.LinkLayerInfiniBand), r.activePorts(verbs.LinkLayerEthernet)
	switch {
	case len(ib) > 0:
		return "active InfiniBand ports: " + strings.Join(ib, ", ")
	case len(eth) > 0:
		return "no InfiniBand port is active; active Ethernet (RoCE) ports: " + strings.Join(eth, ", ")
	case len(r.devs) > 0:
		return "no port of this node is active (ibv_devinfo lists them)"
	}
	return "this node has no RDMA device"
}

func listOr(items []string, none string) string {
	if len(items) == 0 {
		return none
	}
	return strings.Join(items, ", ")
}

func (r *run) checkUverbs(context.Context) Result {
	res := Result{ID: "uverbs"}
	if !r.hasPort() {
		res.Status, res.Finding = Skip, "no device to open"
		return res
	}
	d, _ := r.device(r.port.Device)
	if d.Uverbs == nil {
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = d.Name + " has no uverbs device (class/infiniband_verbs names none for it), so user space cannot open it"
		res.Fix = "load ib_uverbs (modprobe ib_uverbs)"
		return res
	}
	u := d.Uverbs
	res.fact("path", u.Path)
	res.fact("dev", u.DevNumber)
	switch {
	case u.Err == nil:
		res.Status, res.Probe = Pass, Available
		res.Finding = fmt.Sprintf("%s (%s, for %s) opens read-write", u.Path, u.DevNumber, d.Name)
	case errors.Is(u.Err, verbs.ErrNoDevice):
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = withoutSentinel(u.Err, verbs.ErrNoDevice)
		res.Fix = "load ib_uverbs, or start the container with --device=/dev/infiniband"
	case errors.Is(u.Err, verbs.ErrPermission):
		// The device is there; this process may not use it. For the job, that is a no.
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = withoutSentinel(u.Err, verbs.ErrPermission)
		res.Fix = "add the user to the group that owns " + u.Path + " (often rdma), or allow the device in the container's device cgroup"
	default:
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = couldNotTell(u.Err)
	}
	return res
}

// parsePKeySetting decodes UCX_IB_PKEY as UCX does: "auto", or "0x" and hex digits, at most 0x7fff
// (the partition number; UCX ignores the membership bit when it compares).
func parsePKeySetting(v string) (partition uint16, auto bool, err error) {
	if strings.EqualFold(v, "auto") {
		return 0, true, nil
	}
	if len(v) > 2 && strings.EqualFold(v[:2], "0x") {
		n, perr := strconv.ParseUint(v[2:], 16, 16)
		if perr == nil && n <= 0x7fff {
			return uint16(n), false, nil
		}
	}
	return 0, false, fmt.Errorf("UCX_IB_PKEY=%q is not \"auto\" or a partition number 0x0..0x7fff (UCX wants hex with 0x)", v)
}

func (r *run) checkPKey(context.Context) Result {
	res := Result{ID: "pkey"}
	switch {
	case !r.hasPort():
		res.Status, res.Finding = Skip, "no port to check"
		return res
	case r.port.LinkLayer != verbs.LinkLayerInfiniBand:
		res.Status, res.Finding = Skip, r.port.Spec()+" is not InfiniBand: RoCE has no partitions (UCX uses P_Key index 0)"
		return res
	}
	p := r.port
	keys := make([]string, len(p.PKeys))
	for i, e := range p.PKeys {
		keys[i] = e.PKey.String()
	}
	res.fact("pkeys", strings.Join(keys, ","))
	setting, isSet := r.env("UCX_IB_PKEY")
	if isSet {
		res.fact("UCX_IB_PKEY", setting)
	}
	mem, key := p.DefaultPartition()
	res.fact("default_partition", mem.String())

	partition, auto, err := uint16(0), true, error(nil)
	if isSet {
		partition, auto, err = parsePKeySetting(setting)
	}
	switch {
	case err != nil:
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = err.Error() + ": UCX refuses to open the port"
		res.Fix = "export UCX_IB_PKEY=0x7fff (the default partition) or another partition from the port's table (" + listOr(keys, "empty") + ")"
	case !auto:
		var found *verbs.PKeyEntry
		for i := range p.PKeys {
			if p.PKeys[i].PKey.Partition() == partition {
				if found == nil || p.PKeys[i].PKey.Membership() > found.PKey.Membership() {
					found = &p.PKeys[i]
				}
			}
		}
		switch {
		case found == nil:
			res.Status, res.Probe = Fail, NotAvailable
			res.Finding = fmt.Sprintf("UCX_IB_PKEY=%s names partition 0x%04x, which %s's P_Key table does not hold (%s): UCX fails with \"unable to find specified pkey\"",
				setting, partition, p.Spec(), listOr(keys, "empty"))
			res.Fix = "set UCX_IB_PKEY to a partition in the table, or ask the fabric administrator to add this node to the partition"
		case found.PKey.Membership() == verbs.MembershipFull:
			res.Status, res.Probe = Pass, Available
			res.Finding = fmt.Sprintf("UCX_IB_PKEY=%s: full member of partition 0x%04x (P_Key %s at index %d)", setting, partition, found.PKey, found.Index)
		default:
			res.Status, res.Probe = Pass, Available
			res.Finding = fmt.Sprintf("UCX_IB_PKEY=%s: partial (limited) member of partition 0x%04x (P_Key %s at index %d), set explicitly as a partial member must; "+
				"it reaches full members of the partition only", setting, partition, found.PKey, found.Index)
		}
	case mem == verbs.MembershipFull:
		res.Status, res.Probe = Pass, Available
		res.Finding = fmt.Sprintf("full member of the default partition (P_Key %s): UCX_IB_PKEY=auto works", key)
	case mem == verbs.MembershipPartial:
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = fmt.Sprintf("partial (limited) member of the default partition (P_Key %s) and UCX_IB_PKEY is %s: "+
			"auto needs full membership, so UCX fails here where raw verbs works", key, autoWord(isSet, setting))
		res.Fix = "export UCX_IB_PKEY=0x7fff (ibcheck env prints it); a partial member reaches only full members, so the peers must be full members"
	case len(p.PKeys) == 0:
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = p.Spec() + " has no valid P_Key: the subnet manager has put it in no partition, and UCX fails with \"there is no valid pkey\""
		res.Fix = "ask the fabric administrator to add the node to a partition (the default is 0xffff)"
	default:
		res.Status, res.Probe = Warn, Available
		res.Finding = fmt.Sprintf("not a member of the default partition; the port's P_Keys are %s and UCX_IB_PKEY=auto takes the first full-member one", strings.Join(keys, ", "))
		res.Fix = "set UCX_IB_PKEY to the partition the job's peers share"
	}
	return res
}

func autoWord(isSet bool, v string) string {
	if isSet {
		return v
	}
	return "unset (auto)"
}

func (r *run) checkMemlock(context.Context) Result {
	res := Result{ID: "memlock"}
	need := r.cfg.NeedMemlock
	res.fact("need", strconv.FormatUint(need, 10))
	m, err := r.sys.Memlock()
	if err != nil {
		res.Status, res.Probe = Warn, answerOf(err)
		if res.Probe == Inconclusive {
			res.Finding = couldNotTell(err)
		} else {
			res.Finding = err.Error()
		}
		return res
	}
	res.fact("soft", limitFact(m.Soft))
	res.fact("hard", limitFact(m.Hard))
	res.fact("cap_ipc_lock", strconv.FormatBool(m.CapIPCLock))
	res.fact("init_user_ns", strconv.FormatBool(m.InitUserNS))
	used := max(m.Locked, m.Pinned)
	limit := fmt.Sprintf("RLIMIT_MEMLOCK soft %s, hard %s", verbs.FormatBytes(m.Soft), verbs.FormatBytes(m.Hard))
	if used > 0 {
		limit += fmt.Sprintf(", %s already locked or pinned", verbs.FormatBytes(used))
	}
	needText := fmt.Sprintf("the need of %s (%s)", verbs.FormatBytes(need), r.needSource())
	withoutCap := m
	withoutCap.CapIPCLock = false
	limitAlone := withoutCap.Check(need)
	switch {
	case limitAlone == nil:
		res.Status, res.Probe = Pass, Available
		res.Finding = limit + " covers " + needText
	case m.Bypassed():
		res.Status, res.Probe = Warn, Available
		res.Finding = limit + " is below " + needText + "; this process passes only because it holds CAP_IPC_LOCK, " +
			"which lifts the limit: a job started without it (another user, a container without IPC_LOCK) fails in ibv_reg_mr"
		res.Fix = "run the job with CAP_IPC_LOCK as well, or raise its limit: `ulimit -l unlimited` (systemd: LimitMEMLOCK=infinity; " +
			"/etc/security/limits.conf: memlock unlimited)"
	default:
		res.Status, res.Probe = Fail, NotAvailable
		res.Finding = limit + " is below " + needText + "; ibv_reg_mr fails once velo pins past the limit (with an 8 MiB limit, at the first 64 MiB arena)"
		if m.CapIPCLock && !m.InitUserNS {
			res.Finding += "; CAP_IPC_LOCK is held only inside a user namespace, where it does not lift the limit"
		}
		if m.Hard == verbs.Unlimited || m.Hard > m.Soft && m.Hard-used >= need {
			res.Fix = "the hard limit allows it: run `ulimit -l " + ulimitValue(m.Hard) + "` in the job's shell before starting it (no privilege needed)"
		} else {
			res.Fix = "raise the limit before starting the job: `ulimit -l unlimited` as root (systemd: LimitMEMLOCK=infinity; /etc/security/limits.conf: " +
				"memlock unlimited), or in a container grant IPC_LOCK (docker run --cap-add=IPC_LOCK --ulimit memlock=-1)"
		}
	}
	return res
}

func (r *run) needSource() string {
	if r.cfg.NeedMemlock != DefaultMemlockNeed() {
		return "--need-memlock"
	}
	return fmt.Sprintf("velo's registered-bytes budget %s plus one %s arena", verbs.FormatBytes(veloRegisteredBytesBudget), verbs.FormatBytes(veloArenaSize))
}

func limitFact(v uint64) string {
	if v == verbs.Unlimited {
		return "unlimited"
	}
	return strconv.FormatUint(v, 10)
}

func ulimitValue(v uint64) string {
	if v == verbs.Unlimited {
		return "unlimited"
	}
	return strconv.FormatUint(v/1024, 10)
}

// hardwareReachable: the libraries' view of the hardware is the node the sysfs tree describes.
func (r *run) hardwareReachable() bool { return r.cfg.Paths.Live() || r.sys.HardwareMatchesSysfs }

func (r *run) checkRegistration(ctx context.Context) Result {
	res := Result{ID: "registration"}
	size := veloArenaSize
	res.fact("size", strconv.FormatUint(size, 10))
	switch {
	case !r.hasPort():
		res.Status, res.Finding = Skip, "no device to register on"
		return res
	case !r.sys.CGO:
		res.Status, res.Probe = NotCompiled, Inconclusive
		res.Finding = "not compiled in: registering memory needs libibverbs (rebuild with cgo)"
		return res
	case !r.hardwareReachable():
		res.Status, res.Finding = Skip, "the node checks read a sysfs tree that is not this machine's; libibverbs registers on the live system"
		return res
	}
	err := r.sys.RegisterArena(ctx, r.port.Device, size)
	res.Probe = answerOf(err)
	switch {
	case err == nil:
		res.Status = Pass
		res.Finding = fmt.Sprintf("registered one %s arena on %s for local write and remote read, and deregistered it (ibv_reg_mr)", verbs.FormatBytes(size), r.port.Device)
	case errors.Is(err, verbs.ErrMemlock):
		res.Status = Fail
		res.Finding = fmt.Sprintf("registering one %s arena on %s failed: %v", verbs.FormatBytes(size), r.port.Device, err)
		res.Fix = "raise the memlock limit: `ulimit -l unlimited` (see the memlock check)"
	case res.Probe == NotAvailable:
		res.Status = Fail
		res.Finding = fmt.Sprintf("registering one %s arena on %s failed: %v", verbs.FormatBytes(size), r.port.Device, err)
		res.Fix = "do what the error says; `ibv_devinfo -d " + r.port.Device + "` shows whether libibverbs sees the device at all"
	default:
		res.Status = Warn
		res.Finding = couldNotTell(fmt.Errorf("registering one %s arena on %s: %w", verbs.FormatBytes(size), r.port.Device, err))
	}
	return res
}

func (r *run) checkDEVX(context.Context) Result {
	res := Result{ID: "devx"}
	if !r.hasPort() {
		res.Status, res.Finding = Skip, "no device to open"
		return res
	}
	name := r.port.Device
	isMLX5, err := mlx5dv.IsMLX5(r.cfg.Paths, name)
	switch {
	case err != nil:
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = couldNotTell(err)
		return res
	case !isMLX5:
		d, _ := r.device(name)
		res.Status = Skip
		res.Finding = fmt.Sprintf("%s is not an mlx5 device (driver %s): DEVX and the mlx5 transports do not apply; UCX uses rc_verbs/ud_verbs", name, orUnknown(d.Driver))
		return res
	case !r.sys.CGO:
		res.Status, res.Probe = NotCompiled, Inconclusive
		res.Finding = "not compiled in: opening a DEVX context needs libmlx5 (rebuild with cgo); " + name + " is an mlx5 device"
		return res
	case !r.hardwareReachable():
		res.Status = Skip
		res.Finding = name + " is an mlx5 device, but the sysfs tree is not this machine's; libmlx5 opens DEVX on the live system"
		return res
	}
	err = r.sys.ProbeDEVX(name)
	res.Probe = answerOf(err)
	var devx *mlx5dv.DEVXError
	switch {
	case err == nil:
		res.Status = Pass
		res.Finding = "a DEVX context opens on " + name + ": UCX can open its mlx5 memory domain (uct_ib_mlx5_devx_md_ops), so rc_mlx5 and ud_mlx5 have devices"
	case errors.As(err, &devx) && res.Probe == NotAvailable:
		res.Status = Fail
		res.Finding = fmt.Sprintf("DEVX does not open on %s (%s): %s; UCX falls back to the verbs memory domain and rc_mlx5/ud_mlx5 have no devices",
			name, devx.Missing, devx.Detail)
		res.Fix = "fix the " + devx.Missing.String() + " as said, or run on rc_verbs,ud_verbs (slower)"
	default:
		res.Status = Warn
		res.Finding = couldNotTell(err)
	}
	return res
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func (r *run) checkIP(context.Context) Result {
	res := Result{ID: "ip"}
	if !r.cfg.IP.IsValid() {
		res.Status, res.Finding = Skip, "no --ip given"
		return res
	}
	ip := r.cfg.IP
	res.fact("ip", ip.String())
	res.Probe = answerOf(r.ipErr)
	switch {
	case r.ipErr == nil:
		loc := r.ipLoc
		res.fact("port", loc.Spec())
		res.fact("source", string(loc.Source))
		how := ""
		if loc.Netdev != "" {
			how = " via " + loc.Netdev
		}
		if loc.GIDIndex >= 0 {
			how += fmt.Sprintf(", RoCE GID index %d", loc.GIDIndex)
		}
		res.Finding = fmt.Sprintf("%s is on %s%s (found through %s)", ip, loc.Spec(), how, loc.Source)
		res.Status = Pass
		if r.hasPort() && r.port.Spec() != loc.Spec() {
			res.Status = Warn
			res.Finding += "; the port checked here is " + r.port.Spec() + " (" + r.chosenBecause() + ")"
			res.Fix = "make UCX_NET_DEVICES name the port that carries the address the job advertises, or advertise an address of the checked port"
		}
	case res.Probe == NotAvailable:
		res.Status = Fail
		res.Finding = strings.TrimPrefix(r.ipErr.Error(), "rdmacm: ")
		res.Fix = "give the address of an IPoIB or RoCE interface (ip -br addr; ibdev2netdev)"
	default:
		res.Status = Warn
		res.Finding = couldNotTell(r.ipErr)
	}
	return res
}
