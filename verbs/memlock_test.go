package verbs

import (
	"errors"
	"strings"
	"testing"
)

const mib = 1 << 20

func TestMemlockCheck(t *testing.T) {
	limited := Memlock{Soft: 8 * mib, Hard: 8 * mib, InitUserNS: true}
	cases := []struct {
		name    string
		m       Memlock
		need    uint64
		fails   bool
		mention []string
	}{
		{"fits", limited, 4 * mib, false, nil},
		{"exactly the limit", limited, 8 * mib, false, nil},
		{"rounded up to a page past the limit", Memlock{Soft: 8 * mib, Hard: 8 * mib, InitUserNS: true, Pinned: 4 * mib}, 4*mib + 1, true, nil},
		{"the guide's case: 32 MiB under 8 MiB", limited, 32 * mib, true,
			[]string{"32 MiB", "soft limit 8 MiB", "hard 8 MiB", "does not hold CAP_IPC_LOCK", "ulimit -l unlimited", "IPC_LOCK", "memlock=-1"}},
		{"already pinned counts", Memlock{Soft: 64 * mib, Hard: 64 * mib, InitUserNS: true, Pinned: 60 * mib}, 8 * mib, true, []string{"60 MiB already", "4 MiB left"}},
		{"locked counts too", Memlock{Soft: 64 * mib, Hard: 64 * mib, InitUserNS: true, Locked: 64 * mib}, 1, true, []string{"0 B left"}},
		{"unlimited", Memlock{Soft: Unlimited, Hard: Unlimited, InitUserNS: true}, 1 << 40, false, nil},
		{"CAP_IPC_LOCK bypasses", Memlock{Soft: 8 * mib, Hard: 8 * mib, CapIPCLock: true, InitUserNS: true}, 1 << 40, false, nil},
		{"CAP_IPC_LOCK in a user namespace does not", Memlock{Soft: 8 * mib, Hard: 8 * mib, CapIPCLock: true}, 32 * mib, true, []string{"user namespace"}},
		{"hard limit allows a raise", Memlock{Soft: 8 * mib, Hard: Unlimited, InitUserNS: true}, 32 * mib, true, []string{"RaiseMemlock", "ulimit -l unlimited"}},
		{"finite hard limit allows a raise", Memlock{Soft: 8 * mib, Hard: 64 * mib, InitUserNS: true}, 32 * mib, true, []string{"RaiseMemlock", "ulimit -l 65536"}},
		{"hard limit too small for a raise", Memlock{Soft: 8 * mib, Hard: 16 * mib, InitUserNS: true}, 32 * mib, true, []string{"ulimit -l unlimited"}},
	}
	for _, c := range cases {
		err := c.m.Check(c.need)
		if !c.fails {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrMemlock) || !errors.Is(err, ErrNotSupported) {
			t.Errorf("%s: error %v, want ErrMemlock", c.name, err)
			continue
		}
		for _, m := range c.mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: %q does not mention %q", c.name, err, m)
			}
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for v, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1 KiB", 8 * mib: "8 MiB", 1536 * mib: "1.5 GiB", Unlimited: "unlimited", 64 * mib: "64 MiB"} {
		if got := FormatBytes(v); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", v, got, want)
		}
	}
}

func TestParseProcStatus(t *testing.T) {
	text := "Name:\tcat\nVmLck:\t     128 kB\nVmPin:\t    8192 kB\nCapInh:\t0000000000000000\nCapEff:\t000001fffeffffff\n"
	st, err := parseProcStatus(text)
	if err != nil || st.capEff != 0x000001fffeffffff || st.vmLck != 128*1024 || st.vmPin != 8*mib {
		t.Errorf("parseProcStatus = %+v, %v", st, err)
	}
	if st.capEff&(1<<capIPCLock) == 0 {
		t.Error("CAP_IPC_LOCK bit not set in the sample")
	}
	for _, bad := range []string{"Name:\tx\n", "CapEff:\tzz\n", "CapEff:\t0\nVmLck:\t12 MB\n", "CapEff:\t0\nVmPin:\tlots kB\n"} {
		if _, err := parseProcStatus(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("parseProcStatus(%q) accepted", bad)
		}
	}
}

func TestParseUIDMap(t *testing.T) {
	for text, want := range map[string]bool{
		"         0          0 4294967295\n": true,
		"         0       1000          1\n": false,
		"0 100000 65536\n":                   false,
		"0 0 4294967295\n1 1 1\n":            false,
	} {
		got, err := parseUIDMap(text)
		if err != nil || got != want {
			t.Errorf("parseUIDMap(%q) = %v, %v", text, got, err)
		}
	}
	if _, err := parseUIDMap("0 0\n"); !errors.Is(err, ErrMalformed) {
		t.Error("short uid_map line accepted")
	}
}

func FuzzParseProcStatus(f *testing.F) {
	f.Add("CapEff:\t000001fffeffffff\nVmLck:\t0 kB\nVmPin:\t0 kB\n")
	f.Add("CapEff:\t\nVmLck:\t18446744073709551615 kB\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		st, err := parseProcStatus(s)
		if err == nil && (st.vmLck%1024 != 0 || st.vmPin%1024 != 0) {
			t.Fatalf("%q: byte counts not whole KiB: %+v", s, st)
		}
	})
}

func FuzzParseUIDMap(f *testing.F) {
	f.Add("0 0 4294967295\n")
	f.Add("0 1000 1\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		init, err := parseUIDMap(s)
		if err == nil && init && len(strings.Fields(s)) != 3 {
			t.Fatalf("%q judged the initial namespace", s)
		}
	})
}

func FuzzMemlockCheck(f *testing.F) {
	f.Add(uint64(8*mib), uint64(8*mib), uint64(0), uint64(0), uint64(32*mib), false)
	f.Add(Unlimited, Unlimited, uint64(0), uint64(0), Unlimited, true)
	f.Fuzz(func(t *testing.T, soft, hard, locked, pinned, need uint64, capable bool) {
		m := Memlock{Soft: soft, Hard: hard, Locked: locked, Pinned: pinned, CapIPCLock: capable, InitUserNS: true}
		err := m.Check(need)
		if err != nil && !errors.Is(err, ErrMemlock) {
			t.Fatalf("%+v need %d: %v", m, need, err)
		}
		if err == nil && need > m.Available() {
			t.Fatalf("%+v: need %d passed with %d available", m, need, m.Available())
		}
	})
}
