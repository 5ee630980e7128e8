//go:build linux && cgo

package ibv

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/verbs"
	"github.com/velo-go/velo/verbs/verbstest"
)

// Hardware tests run only when VELO_TEST_RDMA_DEVICE names a port, e.g. mlx5_0:1.

func hardwarePort(t *testing.T) (string, int) {
	t.Helper()
	spec := os.Getenv("VELO_TEST_RDMA_DEVICE")
	if spec == "" {
		t.Skip("hardware test: set VELO_TEST_RDMA_DEVICE=<device>:<port> (e.g. mlx5_0:1) on a node with an RDMA adapter to run it")
	}
	dev, port, err := verbs.ParsePortSpec(spec)
	if err != nil {
		t.Fatalf("VELO_TEST_RDMA_DEVICE: %v", err)
	}
	return dev, port
}

func open(t *testing.T, dev string) *Context {
	t.Helper()
	c, err := Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// TestHardwareAgreesWithSysfs compares every answer of libibverbs with the sysfs probe.
func TestHardwareAgreesWithSysfs(t *testing.T) {
	name, port := hardwarePort(t)
	sys, err := verbs.LookupDevice(verbs.Paths{}, name)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, d := range devs {
		if d.Name == name {
			listed = true
			if d.NodeGUID != sys.NodeGUID || d.NodeType != sys.NodeType {
				t.Errorf("device list: GUID %v type %v; sysfs %v %v", d.NodeGUID, d.NodeType, sys.NodeGUID, sys.NodeType)
			}
		}
	}
	if !listed {
		t.Errorf("libibverbs does not list %s", name)
	}

	c := open(t, name)
	attr, err := c.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	if attr.FirmwareVersion != sys.FirmwareVersion || attr.NodeGUID != sys.NodeGUID || attr.SysImageGUID != sys.SysImageGUID {
		t.Errorf("device: fw %q guid %v sys %v; sysfs %q %v %v", attr.FirmwareVersion, attr.NodeGUID, attr.SysImageGUID, sys.FirmwareVersion, sys.NodeGUID, sys.SysImageGUID)
	}
	if attr.PhysPortCount != len(sys.Ports) {
		t.Errorf("ibv says %d ports, sysfs %d", attr.PhysPortCount, len(sys.Ports))
	}
	if strings.HasPrefix(sys.HCAType, "MT") && sys.HCAType != "MT"+strconv.Itoa(int(attr.VendorPartID)) {
		t.Errorf("vendor part id %d, sysfs hca_type %s", attr.VendorPartID, sys.HCAType)
	}

	sp, ok := sys.Port(port)
	if !ok {
		t.Fatalf("sysfs has no port %d on %s", port, name)
	}
	pa, err := c.QueryPort(port)
	if err != nil {
		t.Fatal(err)
	}
	type pair struct {
		what     string
		ibv, sys any
	}
	for _, p := range []pair{
		{"state", pa.State, sp.State}, {"phys_state", pa.PhysState, sp.PhysState}, {"link_layer", pa.LinkLayer, sp.LinkLayer},
		{"lid", pa.LID, sp.LID}, {"sm_lid", pa.SMLID, sp.SMLID}, {"lmc", pa.LMC, sp.LMC}, {"sm_sl", pa.SMSL, sp.SMSL},
		{"cap_mask", pa.CapFlags, sp.CapMask}, {"rate", pa.Rate, sp.Rate},
		{"gid_tbl_len", pa.GIDTableLen, sp.GIDTableLen}, {"pkey_tbl_len", pa.PKeyTableLen, sp.PKeyTableLen},
	} {
		if p.ibv != p.sys {
			t.Errorf("port %d %s: ibv %v, sysfs %v", port, p.what, p.ibv, p.sys)
		}
	}

	sysPKeys := map[int]verbs.PKey{}
	for _, e := range sp.PKeys {
		sysPKeys[e.Index] = e.PKey
	}
	for i := 0; i < pa.PKeyTableLen; i++ {
		k, err := c.QueryPKey(port, i)
		if err != nil {
			t.Fatal(err)
		}
		if k.Membership() == verbs.MembershipNone {
			k = 0
		}
		if k != sysPKeys[i] {
			t.Errorf("pkey[%d]: ibv %v, sysfs %v", i, k, sysPKeys[i])
		}
	}

	sysGIDs := map[int]verbs.GIDEntry{}
	for _, e := range sp.GIDs {
		sysGIDs[e.Index] = e
	}
	for i := 0; i < pa.GIDTableLen; i++ {
		g, err := c.QueryGID(port, i)
		if err != nil {
			t.Fatal(err)
		}
		ex, err := c.QueryGIDEx(port, i)
		if err != nil {
			t.Fatal(err)
		}
		want := sysGIDs[i]
		if g != want.GID || ex.GID != want.GID {
			t.Errorf("gid[%d]: ibv %v / %v, sysfs %v", i, g, ex.GID, want.GID)
		}
		if !want.GID.IsZero() && (ex.Type != want.Type || ex.Netdev != want.Netdev) {
			t.Errorf("gid[%d]: ibv type %v netdev %q, sysfs %v %q", i, ex.Type, ex.Netdev, want.Type, want.Netdev)
		}
	}
	if _, err := c.QueryPort(attr.PhysPortCount + 1); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("QueryPort past the last port: %v, want ErrInvalid", err)
	}
}

func mmapBuf(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

func TestHardwareRegisterMR(t *testing.T) {
	name, _ := hardwarePort(t)
	c := open(t, name)
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("Close with a live PD: %v, want ErrBusy", err)
	}
	buf := mmapBuf(t, 1<<20)
	access := AccessLocalWrite | AccessRemoteRead | AccessRemoteWrite
	mr, err := pd.RegMR(buf, access)
	if err != nil {
		t.Fatal(err)
	}
	if mr.Len() != len(buf) || mr.Access() != access || mr.LKey() == 0 && mr.RKey() == 0 {
		t.Errorf("MR: len %d access %v lkey %#x rkey %#x", mr.Len(), mr.Access(), mr.LKey(), mr.RKey())
	}
	heap := make([]byte, 64<<10) // Go memory: pinned for the registration's lifetime
	mr2, err := pd.RegMR(heap, AccessLocalWrite|AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if err := pd.Dealloc(); !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("Dealloc with live MRs: %v, want ErrBusy", err)
	}
	for _, m := range []*MR{mr, mr2} {
		if err := m.Dereg(); err != nil {
			t.Fatal(err)
		}
	}
	if err := mr.Dereg(); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("second Dereg: %v", err)
	}
	if err := pd.Dealloc(); err != nil {
		t.Fatal(err)
	}
}

// TestHardwareRegisterUnderMemlock meets the guide's failure for real: with an 8 MiB limit and
// no CAP_IPC_LOCK, registering 32 MiB fails, and the error says it is the memlock limit.
func TestHardwareRegisterUnderMemlock(t *testing.T) {
	name, _ := hardwarePort(t)
	if verbstest.InChild() {
		c := open(t, name)
		pd, err := c.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		defer pd.Dealloc()
		small, err := pd.RegMR(mmapBuf(t, 4<<20), AccessLocalWrite|AccessRemoteRead)
		if err != nil {
			t.Fatalf("4 MiB under an 8 MiB limit: %v", err)
		}
		defer small.Dereg()
		_, err = pd.RegMR(mmapBuf(t, 32<<20), AccessLocalWrite|AccessRemoteRead)
		if !errors.Is(err, verbs.ErrMemlock) || !errors.Is(err, syscall.ENOMEM) {
			t.Fatalf("32 MiB under an 8 MiB limit: %v, want ErrMemlock and ENOMEM", err)
		}
		for _, s := range []string{"32 MiB", "8 MiB", "ulimit -l unlimited"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%q does not mention %q", err, s)
			}
		}
		return
	}
	verbstest.RunTest(t, verbstest.Constraints{MemlockSoft: 8 << 20})
}
