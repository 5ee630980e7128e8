package ibv

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/velo-go/velo/verbs"
)

func withMemlock(t *testing.T, m verbs.Memlock, err error) {
	t.Helper()
	old := memlockProbe
	memlockProbe = func() (verbs.Memlock, error) { return m, err }
	t.Cleanup(func() { memlockProbe = old })
}

func TestRegMRENOMEMIsTracedToMemlock(t *testing.T) {
	withMemlock(t, verbs.Memlock{Soft: 8 << 20, Hard: 8 << 20, InitUserNS: true}, nil)
	err := errnoError("ibv_reg_mr", "mlx5_0", syscall.ENOMEM, 32<<20)
	if !errors.Is(err, verbs.ErrMemlock) || !errors.Is(err, syscall.ENOMEM) || !errors.Is(err, verbs.ErrNotSupported) {
		t.Fatalf("error %v does not wrap ErrMemlock and ENOMEM", err)
	}
	for _, s := range []string{"ibv_reg_mr on mlx5_0", "cannot allocate memory", "memlock limit is the cause", "32 MiB", "8 MiB", "ulimit -l unlimited", "IPC_LOCK"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q does not mention %q", err, s)
		}
	}
}

func TestRegMRENOMEMNotFromMemlock(t *testing.T) {
	withMemlock(t, verbs.Memlock{Soft: verbs.Unlimited, Hard: verbs.Unlimited, InitUserNS: true}, nil)
	err := errnoError("ibv_reg_mr", "mlx5_0", syscall.ENOMEM, 32<<20)
	if errors.Is(err, verbs.ErrMemlock) || !errors.Is(err, syscall.ENOMEM) || !strings.Contains(err.Error(), "not the memlock limit") {
		t.Errorf("ENOMEM with an unlimited memlock: %v", err)
	}
	withMemlock(t, verbs.Memlock{}, errors.New("no procfs"))
	err = errnoError("ibv_reg_mr", "mlx5_0", syscall.ENOMEM, 32<<20)
	if errors.Is(err, verbs.ErrMemlock) || !strings.Contains(err.Error(), "could not be read") || !strings.Contains(err.Error(), "ulimit -l unlimited") {
		t.Errorf("ENOMEM with an unreadable memlock: %v", err)
	}
}

func TestErrnoMapping(t *testing.T) {
	cases := []struct {
		op      string
		errno   syscall.Errno
		kind    error
		mention string
	}{
		{"ibv_open_device", syscall.EACCES, verbs.ErrPermission, "--device=/dev/infiniband"},
		{"ibv_open_device", syscall.EPERM, verbs.ErrPermission, "rdma"},
		{"ibv_reg_mr", syscall.EACCES, verbs.ErrPermission, "read-only"},
		{"ibv_query_port", syscall.EINVAL, verbs.ErrInvalid, "ports are numbered from 1"},
		{"ibv_query_pkey", syscall.EINVAL, verbs.ErrInvalid, "out of range"},
		{"ibv_reg_mr", syscall.EFAULT, verbs.ErrInvalid, "not mapped"},
		{"ibv_dealloc_pd", syscall.EBUSY, verbs.ErrBusy, "first"},
		{"ibv_query_device", syscall.ENODEV, verbs.ErrNoDevice, "gone"},
		{"ibv_get_device_list", syscall.ENOSYS, verbs.ErrNoDevice, "ib_uverbs"},
		{"ibv_alloc_pd", syscall.EOPNOTSUPP, verbs.ErrNotSupported, "does not support"},
		{"ibv_alloc_pd", syscall.ENOMEM, nil, "out of memory"},
		{"ibv_alloc_pd", syscall.EIO, nil, "input/output error"},
	}
	for _, c := range cases {
		err := errnoError(c.op, "mlx5_0", c.errno, 0)
		if !errors.Is(err, c.errno) {
			t.Errorf("%s %v: does not wrap the errno", c.op, c.errno)
		}
		if c.kind != nil && !errors.Is(err, c.kind) {
			t.Errorf("%s %v: %v does not wrap %v", c.op, c.errno, err, c.kind)
		}
		if !strings.Contains(err.Error(), c.mention) || !strings.HasPrefix(err.Error(), c.op+" on mlx5_0: ") {
			t.Errorf("%s %v: %q does not mention %q", c.op, c.errno, err, c.mention)
		}
	}
}

func TestCallErrno(t *testing.T) {
	if callErrno(int(syscall.EINVAL), nil) != syscall.EINVAL {
		t.Error("returned errno not used")
	}
	if callErrno(-1, syscall.ENOENT) != syscall.ENOENT {
		t.Error("errno of a -1 return not used")
	}
	if callErrno(-1, nil) != syscall.EIO {
		t.Error("no errno at all should read as EIO")
	}
}

func TestAccess(t *testing.T) {
	if s := (AccessLocalWrite | AccessRemoteRead).String(); s != "LOCAL_WRITE|REMOTE_READ" {
		t.Errorf("String = %q", s)
	}
	if s := Access(0).String(); s != "0" {
		t.Errorf("String(0) = %q", s)
	}
	if s := (AccessRemoteRead | 1<<30).String(); s != "REMOTE_READ|0x40000000" {
		t.Errorf("String with unknown bit = %q", s)
	}
	good := []Access{0, AccessLocalWrite, AccessRemoteRead, AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessRelaxedOrdering}
	for _, a := range good {
		if err := a.validate(); err != nil {
			t.Errorf("%v rejected: %v", a, err)
		}
	}
	for _, a := range []Access{AccessRemoteWrite, AccessRemoteAtomic | AccessRemoteRead, 1 << 30} {
		if err := a.validate(); !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("%v accepted", a)
		}
	}
	if err := checkBuffer(nil, AccessLocalWrite); !errors.Is(err, verbs.ErrInvalid) || !strings.Contains(err.Error(), "empty buffer") {
		t.Errorf("empty buffer: %v", err)
	}
	if err := checkBuffer(make([]byte, 1), AccessRemoteWrite); !errors.Is(err, verbs.ErrInvalid) || !strings.Contains(err.Error(), "AccessLocalWrite") {
		t.Errorf("remote write without local write: %v", err)
	}
}

// TestRateMatchesSysfs: the rate computed from ibv_query_port codes prints exactly as the kernel's
// sysfs rate attribute, so hardware answers compare equal.
func TestRateMatchesSysfs(t *testing.T) {
	cases := map[[2]uint16]string{
		{2, 128}:  "400 Gb/sec (4X NDR)",
		{16, 128}: "200 Gb/sec (2X NDR)",
		{2, 64}:   "200 Gb/sec (4X HDR)",
		{1, 1}:    "2.5 Gb/sec (1X SDR)",
		{2, 16}:   "56 Gb/sec (4X FDR)",
		{2, 8}:    "40 Gb/sec (4X FDR10)",
		{8, 32}:   "300 Gb/sec (12X EDR)",
		{2, 0}:    "10 Gb/sec (4X SDR)", // unknown speed counts as SDR, as in the kernel
		{2, 256}:  "800 Gb/sec (4X XDR)",
	}
	for codes, want := range cases {
		r := rateOf(uint8(codes[0]), codes[1])
		if r.String() != want {
			t.Errorf("rateOf(%d, %d) = %q, want %q", codes[0], codes[1], r, want)
		}
		if parsed, err := verbs.ParseRate(want); err != nil || parsed != r {
			t.Errorf("sysfs %q parses to %+v, rateOf gives %+v (%v)", want, parsed, r, err)
		}
	}
	if r := rateOf(3, 128); r != (verbs.Rate{}) {
		t.Errorf("unknown width gave %+v", r)
	}
}

func TestMTU(t *testing.T) {
	for v, want := range map[uint32]MTU{1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096, 0: 0, 6: 0} {
		if got := mtuFromEnum(v); got != want {
			t.Errorf("mtuFromEnum(%d) = %d, want %d", v, got, want)
		}
	}
}
