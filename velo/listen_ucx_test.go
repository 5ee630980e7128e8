//go:build cgo && linux

package velo

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// Where the UCX worker of an instance listens, read from the process's own sockets in LISTEN state
// (/proc): the ones that appeared while ucxtransport.New and velo.New created the worker. These tests run one at a time
// (no t.Parallel), so no other test's listener appears meanwhile.

// ucxListenNode starts an instance whose control plane listens on cpAddr beside a UCX transport made
// with cfg (nothing naming UCX's devices unless cfg does), and returns it with the addresses its UCX
// worker listens on and the UCX transport's settings on the introspection page.
func ucxListenNode(t *testing.T, cpAddr string, cfg ucxtransport.Config, log *slog.Logger) (*Velo, []string, map[string]string) {
	t.Helper()
	ctl, err := tcp.New(tcp.Config{ListenAddress: cpAddr})
	require.NoError(t, err)
	cfg.Logger = log
	before := ucxtransport.TCPListeners() // the control plane's listener among them
	u, err := ucxtransport.New(cfg)
	require.NoError(t, err)
	v, err := New(context.Background(), WithLogger(log), WithTransport(ctl), WithUCXTransport(u))
	require.NoError(t, err)
	t.Cleanup(func() { v.Close() })
	var worker []string
	for ino, a := range ucxtransport.TCPListeners() {
		if _, ok := before[ino]; !ok {
			worker = append(worker, a)
		}
	}
	sort.Strings(worker)
	for _, ti := range v.Introspect().Transports {
		if ti.Name == ucxtransport.Name {
			return v, worker, ti.Settings
		}
	}
	t.Fatal("the introspection page has no ucx transport")
	return nil, nil, nil
}

// hostHasExternalAddress: an interface beyond loopback that is up and has an address, which UCX's
// default listens on.
func hostHasExternalAddress(t *testing.T) bool {
	ifaces, err := net.Interfaces()
	require.NoError(t, err)
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		if addrs, _ := ifc.Addrs(); len(addrs) > 0 {
			return true
		}
	}
	return false
}

func requireNoUCXNetDevices(t *testing.T) {
	t.Helper()
	if v := os.Getenv("UCX_NET_DEVICES"); v != "" {
		t.Skipf("UCX_NET_DEVICES=%s in the environment names UCX's devices itself", v)
	}
}

// TestUCXListensBesideTheControlPlane: with nothing set but a control plane on 127.0.0.1, the
// instance's UCX worker listens over tcp, and only on loopback addresses; the introspection page's
// tcp_listen names exactly those, and UCX_NET_DEVICES came from the control plane's address. With
// the control plane on 0.0.0.0 UCX keeps its default and listens on the host's other interfaces
// too.
func TestUCXListensBesideTheControlPlane(t *testing.T) {
	requireNoUCXNetDevices(t)
	var logs logBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	_, worker, settings := ucxListenNode(t, "127.0.0.1:0", ucxtransport.Config{TLS: "tcp"}, log)
	require.NotEmpty(t, worker, "a tcp worker listens somewhere")
	for _, a := range worker {
		ap, err := netip.ParseAddrPort(a)
		require.NoError(t, err)
		assert.True(t, ap.Addr().IsLoopback(), "UCX listens on %s, beyond the control plane's interface", a)
	}
	assert.Equal(t, strings.Join(worker, ", "), settings["tcp_listen"])
	assert.True(t, strings.HasPrefix(settings["UCX_NET_DEVICES"], "lo"), "UCX_NET_DEVICES = %q", settings["UCX_NET_DEVICES"])
	assert.Contains(t, logs.String(), "UCX_NET_DEVICES from the control plane's address 127.0.0.1 (interface lo)")
	assert.NotContains(t, logs.String(), "created before the control plane's address was known")

	_, worker, settings = ucxListenNode(t, "0.0.0.0:0", ucxtransport.Config{TLS: "tcp"}, quietLogger())
	require.NotEmpty(t, worker)
	assert.Equal(t, strings.Join(worker, ", "), settings["tcp_listen"])
	assert.Contains(t, settings["UCX_NET_DEVICES"], "(default)", "an unspecified control plane scopes nothing")
	if !hostHasExternalAddress(t) {
		t.Logf("this host has no interface beyond lo for the default to listen on (%v)", worker)
		return
	}
	external := false
	for _, a := range worker {
		if ap, err := netip.ParseAddrPort(a); err == nil && !ap.Addr().IsLoopback() {
			external = true
		}
	}
	assert.True(t, external, "with a control plane on 0.0.0.0 UCX listens everywhere: %v", worker)
}

// TestUCXListenNamedDevicesWin: devices the operator names (TCPInterfaces here) are kept whatever
// the control plane binds: eth0's addresses with a control plane on 127.0.0.1.
func TestUCXListenNamedDevicesWin(t *testing.T) {
	requireNoUCXNetDevices(t)
	if !hostHasExternalAddress(t) {
		t.Skip("this host has no interface beyond lo")
	}
	ext := ""
	ifaces, err := net.Interfaces()
	require.NoError(t, err)
	for _, ifc := range ifaces {
		if addrs, _ := ifc.Addrs(); ifc.Flags&net.FlagUp != 0 && ifc.Flags&net.FlagLoopback == 0 && len(addrs) > 0 {
			ext = ifc.Name
			break
		}
	}
	_, worker, settings := ucxListenNode(t, "127.0.0.1:0", ucxtransport.Config{TLS: "tcp", TCPInterfaces: []string{ext}}, quietLogger())
	require.NotEmpty(t, worker)
	for _, a := range worker {
		ap, err := netip.ParseAddrPort(a)
		require.NoError(t, err)
		assert.False(t, ap.Addr().IsLoopback(), "TCPInterfaces %s wins over the control plane's lo: %s", ext, a)
	}
	assert.Equal(t, strings.Join(worker, ", "), settings["tcp_listen"])
}

// TestUCXWithoutTCPListensNowhere: a UCX_TLS that names no tcp transport opens no tcp listener,
// and the introspection page says none.
func TestUCXWithoutTCPListensNowhere(t *testing.T) {
	for _, tls := range []struct{ env, config string }{{"sm,self", ""}, {"", "sm,self"}} {
		t.Run("env="+tls.env+",config="+tls.config, func(t *testing.T) {
			t.Setenv("UCX_TLS", tls.env)
			if tls.env == "" {
				require.NoError(t, os.Unsetenv("UCX_TLS")) // t.Setenv restores it afterwards
			}
			_, worker, settings := ucxListenNode(t, "0.0.0.0:0", ucxtransport.Config{TLS: tls.config}, quietLogger())
			assert.Empty(t, worker, "UCX opened tcp listeners without tcp in UCX_TLS")
			assert.Equal(t, "none", settings["tcp_listen"])
			assert.Equal(t, "sm,self", strings.Fields(settings["UCX_TLS"])[0])
		})
	}
}

// TestUCXWorkerMadeBeforeTheControlPlaneIsSaid: memory registered with the UCX transport before
// velo.New creates its worker with UCX's default devices; velo.New cannot narrow it any more and
// says so once, naming the setting that does.
func TestUCXWorkerMadeBeforeTheControlPlaneIsSaid(t *testing.T) {
	requireNoUCXNetDevices(t)
	var logs logBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctl, err := tcp.New(tcp.Config{ListenAddress: "127.0.0.1:0"})
	require.NoError(t, err)
	u, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp", Logger: log})
	require.NoError(t, err)
	reg, err := u.RegisterMemory(make([]byte, 4096))
	require.NoError(t, err)
	v, err := New(context.Background(), WithLogger(log), WithTransport(ctl), WithUCXTransport(u))
	require.NoError(t, err)
	t.Cleanup(func() { v.Close() })
	t.Cleanup(func() { _ = reg.Revoke(context.Background()) })
	assert.Equal(t, 1, strings.Count(logs.String(), "created before the control plane's address was known"), logs.String())
	assert.Contains(t, logs.String(), "ucxtransport.Config.TCPInterfaces")
}

// TestUCXThatCannotStartFailsNew: with the engine created by velo.New, a UCX that cannot start
// (UCX_TLS naming no transport it has) still fails velo.New, before anything started.
func TestUCXThatCannotStartFailsNew(t *testing.T) {
	requireNoUCXNetDevices(t)
	t.Setenv("UCX_TLS", "nosuchtransport")
	ctl, err := tcp.New(tcp.Config{})
	require.NoError(t, err)
	defer ctl.Close()
	u, err := ucxtransport.New(ucxtransport.Config{Logger: quietLogger()})
	require.NoError(t, err, "New checks the configuration; the worker comes with velo.New")
	defer u.Close()
	_, err = New(context.Background(), WithLogger(quietLogger()), WithTransport(ctl), WithUCXTransport(u))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `velo: starting transport "ucx": ucx transport:`)
	t.Log(err)
}
