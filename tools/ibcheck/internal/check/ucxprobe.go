package check

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// The linked UCX is asked in child processes of ibcheck itself (the program re-executed with
// UCXProbeArg), for three reasons:
//
//   - UCX reads UCX_* variables when a context is created, and the environment wins over what a
//     program sets. The questions ("what is this UCX's default for UCX_PROTO_ENABLE?", "does a GET
//     work with UCX_PROTO_ENABLE=n?") need an environment ibcheck controls, not the operator's.
//   - A UCX that does not support something may abort the process instead of returning an error;
//     a child can die without taking the report with it.
//   - Each trial needs a fresh context anyway; a process is the cleanest way to get one.
//
// Each child answers one question as one JSON object on stdout.

// UCXProbeArg is the first argument that makes ibcheck act as a UCX probe child. main (and the
// tests' TestMain) hand such a process to UCXProbeMain before anything else.
const UCXProbeArg = "-ibcheck-ucx-probe"

// ucxProbeTimeout bounds one probe child. A healthy one needs tens of milliseconds.
const ucxProbeTimeout = 30 * time.Second

// The UCX settings whose defaults the checks judge, without the UCX_ prefix. A name missing from
// UCXInfo.Defaults is unknown to the linked UCX (UCX_MAX_RMA_RAILS does not exist in 1.13).
var probedSettings = []string{"PROTO_ENABLE", "MAX_RMA_RAILS", "MAX_RNDV_RAILS"}

// UCXInfo is what ibcheck learned from the UCX linked into this binary: the library velo itself
// runs on, which is why ibcheck asks it rather than the system's ucx_info.
type UCXInfo struct {
	// Err is set when nothing could be learned: it wraps ucx.ErrNotCompiled in a CGO_ENABLED=0
	// build, or says why the probe child failed.
	Err error
	// Version of the linked library, and of the headers the binding was compiled with.
	Version ucx.VersionInfo
	// Support says which RDMA parts the linked UCX has compiled in; SupportErr is set when the
	// resource query failed and Support is unknown.
	Support    ucx.BuildSupport
	SupportErr error
	// Defaults are the default values of the settings in probedSettings, as the linked UCX
	// reports them (ucp_config_print with no UCX_* variable set). A missing name is a setting
	// this UCX does not have.
	Defaults map[string]string
	// Resources is the resource list (`ucx_info -d` from the linked UCX), filled on request.
	Resources *UCXResources
	// RMA holds the outcome of a real GET under each UCX_PROTO_ENABLE value tried, by value.
	RMA map[string]RMATrial
	// Guard is whether the linked UCX refuses software-emulated RMA and tcp PUT requests
	// (velo's guard patch set; ucx.SoftwareRMAGuard); nil when it could not be asked (no UCX in
	// this binary).
	Guard *ucx.RMAGuard
	// CUDA is what the linked UCX says about CUDA memory (its CUDA transports, and whether this
	// binary was built with CUDA); nil when the probe child gave no answer about it.
	CUDA *UCXCUDA
	// Listen is where a UCX worker of this binary listens over tcp under the caller's UCX_*
	// environment; nil when it was not asked (a fixture tree).
	Listen *UCXListen
}

// UCXListen is the answer of the "listen" probe child: a worker made as velo's UCX transport
// makes it (the caller's UCX_* variables, UCX's defaults elsewhere) and the addresses its tcp
// transport listens on.
type UCXListen struct {
	Addrs      []string
	TLS        string // UCX_TLS as the worker's context took it
	NetDevices string // UCX_NET_DEVICES as the worker's context took it
	Err        string `json:",omitempty"` // the worker could not be made: why
}

// RMATrial is the outcome of one real GET (ucp_get_nbx over the self transport, between two
// endpoints of one worker) with UCX_PROTO_ENABLE set to a given value.
type RMATrial struct {
	// Worked: the GET completed and delivered the registered bytes, or (Refused) the protocol
	// carried it to the target, where the software RMA guard refused it.
	Worked bool
	// Refused: the linked UCX has velo's software RMA guard, and the target refused the GET
	// (UCS_ERR_REJECTED). The self transport has no RMA in hardware, so a guarded UCX refuses
	// every GET over it; the refusal still shows that the protocol carries RMA, which is what
	// the trial asks: on an RC or DC lane the HCA serves the same request.
	Refused bool `json:",omitempty"`
	// Inconclusive: the trial itself could not run (the child did not start, timed out, or
	// printed nothing), so it says nothing about UCX.
	Inconclusive bool
	// Detail says why it did not work.
	Detail string `json:",omitempty"`
}

// ProbeUCX asks the linked UCX in child processes: its version, build support and setting
// defaults (and its resources when withResources), then one GET per UCX_PROTO_ENABLE value in
// protoValues; whether it carries the software RMA guard it asks in this process. In a build without UCX it returns at once with Err wrapping ucx.ErrNotCompiled.
func ProbeUCX(ctx context.Context, protoValues []string, withResources bool) UCXInfo {
	// The guard is a fact of the link, not of a context: asked here, with no child.
	var guard *ucx.RMAGuard
	if g, err := ucx.SoftwareRMAGuard(); err == nil {
		guard = &g
	}
	if v := ucx.Version(); v.Major == 0 && v.Minor == 0 {
		_, err := ucx.QueryResources() // the twin says why: not compiled in, or not Linux
		if err == nil {
			err = errors.New("the linked UCX reports version 0.0")
		}
		return UCXInfo{Err: err, Guard: guard}
	}
	args := []string{"info"}
	if withResources {
		args = append(args, "resources")
	}
	var out probeInfo
	if err := runProbeChild(ctx, args, &out); err != nil {
		return UCXInfo{Err: err, Guard: guard}
	}
	info := UCXInfo{
		Version:   out.Version,
		Support:   out.Support,
		Defaults:  out.Defaults,
		Resources: out.Resources,
		RMA:       map[string]RMATrial{},
		Guard:     guard,
		CUDA:      out.CUDA,
	}
	if out.SupportErr != "" {
		info.SupportErr = errors.New(out.SupportErr)
	}
	var l UCXListen
	if err := runProbeChildEnv(ctx, []string{"listen"}, &l, os.Environ()); err != nil {
		l = UCXListen{Err: err.Error()}
	}
	info.Listen = &l
	for _, v := range protoValues {
		if _, done := info.RMA[v]; done {
			continue
		}
		var t RMATrial
		if err := runProbeChild(ctx, []string{"get", v}, &t); err != nil {
			t = RMATrial{Inconclusive: true, Detail: err.Error()}
		}
		info.RMA[v] = t
	}
	return info
}

// probeInfo is the "info" child's answer.
type probeInfo struct {
	Version    ucx.VersionInfo
	Support    ucx.BuildSupport
	SupportErr string `json:",omitempty"`
	Defaults   map[string]string
	Resources  *UCXResources `json:",omitempty"`
	CUDA       *UCXCUDA      `json:",omitempty"`
}

// runProbeChild runs this executable as a probe child with args and decodes its answer into out.
// The child sees no UCX_* variable.
func runProbeChild(ctx context.Context, args []string, out any) error {
	return runProbeChildEnv(ctx, args, out, probeEnv(os.Environ()))
}

// runProbeChildEnv is runProbeChild with the child's environment env.
func runProbeChildEnv(ctx context.Context, args []string, out any, env []string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locating ibcheck's own executable to run the UCX probe: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, ucxProbeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, append([]string{UCXProbeArg}, args...)...)
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if jsonErr := json.Unmarshal(lastJSONLine(stdout.Bytes()), out); jsonErr == nil && runErr == nil {
		return nil
	}
	why := "it printed no answer"
	switch {
	case ctx.Err() != nil:
		why = fmt.Sprintf("it did not finish within %v", ucxProbeTimeout)
	case runErr != nil:
		why = runErr.Error()
	}
	if tail := lastLines(stdout.String()+"\n"+stderr.String(), 3); tail != "" {
		why += " (" + tail + ")"
	}
	return fmt.Errorf("the UCX probe (%s %s) failed: %s", UCXProbeArg, strings.Join(args, " "), why)
}

// lastJSONLine returns the last line of the child's output that holds a JSON object: UCX prints
// its own errors to stdout, before the answer.
func lastJSONLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if l := bytes.TrimSpace(lines[i]); bytes.HasPrefix(l, []byte("{")) {
			return l
		}
	}
	return nil
}

// probeEnv is the child's environment: the parent's without any UCX_* variable, so that every
// setting the child does not set itself has the linked UCX's default.
func probeEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "UCX_") {
			out = append(out, kv)
		}
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, "; "))
}

// UCXProbeMain is the probe child: args are "info" [resources] or "get" <UCX_PROTO_ENABLE value>.
// It prints one JSON answer on stdout and returns the exit code.
func UCXProbeMain(args []string, stdout io.Writer) int {
	enc := json.NewEncoder(stdout)
	switch {
	case len(args) >= 1 && args[0] == "info":
		info, err := childInfo(len(args) > 1 && args[1] == "resources")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := enc.Encode(info); err != nil {
			return 1
		}
		return 0
	case len(args) == 1 && args[0] == "listen":
		if err := enc.Encode(childListen()); err != nil {
			return 1
		}
		return 0
	case len(args) == 2 && args[0] == "get":
		if err := enc.Encode(childGet(args[1])); err != nil {
			return 1
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "ibcheck %s: want \"info [resources]\", \"listen\" or \"get VALUE\", got %q\n", UCXProbeArg, args)
	return 2
}

func childInfo(withResources bool) (probeInfo, error) {
	out := probeInfo{Version: ucx.Version(), Defaults: map[string]string{}}
	res, err := ucx.QueryResources()
	if err != nil {
		out.SupportErr = err.Error()
	} else {
		out.Support = res.Support
		if withResources {
			out.Resources = resourcesFrom(res)
		}
	}
	out.CUDA = cudaInfo(res)
	// A context with nothing set shows every default. The self transport needs no device.
	c, err := ucx.NewContext(ucx.ContextConfig{TLS: "self", Logger: quietLogger()})
	if err != nil {
		return out, fmt.Errorf("creating a UCX context to read its defaults: %w", err)
	}
	defer c.Close()
	for _, name := range probedSettings {
		if s, ok := c.Setting(name); ok {
			out.Defaults[name] = s.Value
		}
	}
	return out, nil
}

// childListen makes a worker under the environment's UCX_* variables, as velo's UCX transport
// would, and reads the addresses its tcp transport listens on: this child opens no other socket.
func childListen() UCXListen {
	ctx, cancel := context.WithTimeout(context.Background(), ucxProbeTimeout)
	defer cancel()
	e, err := ucx.NewEngine(ctx, ucx.EngineConfig{Name: "ibcheck-listen", Logger: quietLogger(), Context: ucx.ContextConfig{Logger: quietLogger()}})
	if err != nil {
		return UCXListen{Err: fmt.Sprintf("UCX refused a worker with this environment: %v", err)}
	}
	defer func() {
		closeCtx, cancelClose := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancelClose()
		_ = e.Close(closeCtx)
	}()
	var out UCXListen
	for _, a := range ucxtransport.TCPListeners() {
		out.Addrs = append(out.Addrs, a)
	}
	sort.Strings(out.Addrs)
	for _, st := range e.Settings() {
		switch st.Name {
		case "TLS":
			out.TLS = st.Value
		case "NET_DEVICES":
			out.NetDevices = st.Value
		}
	}
	return out
}

// childGet runs one GET with UCX_PROTO_ENABLE=value: an engine connects to its own worker over
// the self transport, registers a page, and reads it back with ucp_get_nbx (RMADirect, so that
// UCX's own RMA protocol moves the bytes, not the engine's guarded path).
func childGet(value string) RMATrial {
	ctx, cancel := context.WithTimeout(context.Background(), ucxProbeTimeout)
	defer cancel()
	fail := func(format string, a ...any) RMATrial { return RMATrial{Detail: fmt.Sprintf(format, a...)} }
	e, err := ucx.NewEngine(ctx, ucx.EngineConfig{
		Name:    "ibcheck-probe",
		RMA:     ucx.RMADirect,
		Logger:  quietLogger(),
		Context: ucx.ContextConfig{TLS: "self", Settings: map[string]string{"PROTO_ENABLE": value}, Logger: quietLogger()},
	})
	if err != nil {
		return fail("UCX refused a context with UCX_PROTO_ENABLE=%s: %v", value, err)
	}
	defer func() {
		closeCtx, cancelClose := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancelClose()
		_ = e.Close(closeCtx)
	}()
	conn, err := e.Connect(ctx, e.Address(), ucx.ConnectOptions{ErrorMode: ucx.ErrorModeNone})
	if err != nil {
		return fail("connecting an endpoint: %v", err)
	}
	defer func() { _ = conn.Close(ctx, ucx.CloseForce) }()
	mem, err := ucx.AllocMemory(4096, ucx.MemoryOptions{})
	if err != nil {
		return fail("mapping a page to register: %v", err)
	}
	defer mem.Free()
	src := mem.Bytes()
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	reg, err := e.Register(ctx, src)
	if err != nil {
		return fail("registering a page (ucp_mem_map): %v", err)
	}
	defer func() { _ = reg.Unregister(ctx) }()
	dst := make([]byte, len(src))
	if err := conn.Get(ctx, dst, reg.Addr(), reg.RemoteKey()); err != nil {
		if g, gerr := ucx.SoftwareRMAGuard(); gerr == nil && g.Enforced && errors.Is(err, ucx.StatusRejected) {
			return RMATrial{Worked: true, Refused: true,
				Detail: "the GET reached the target, whose software RMA guard (" + g.Version + ") refused it, as it refuses every GET over a lane without hardware RMA"}
		}
		return fail("ucp_get_nbx: %v", err)
	}
	if !bytes.Equal(dst, src) {
		return fail("ucp_get_nbx completed but delivered other bytes than were registered")
	}
	return RMATrial{Worked: true}
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
