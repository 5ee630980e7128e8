// Command putvictim is the target of the guarded-PUT attacks (package attack,
// TestGuardedPutByHand): a bare ucx engine, no velo instance, that holds registrations of every
// kind a writer might aim at, and memory outside any of them. Driven from its standard input one
// command a line, it answers each with one JSON line on standard output.
//
// What it holds: a global variable and a heap buffer full of the run's marker (no registration
// at all), and four registered areas, each followed by a guard area that belongs to no
// registration: "read" (registered for reading only), "write" (for writing only: the key a
// write grant hands out), "revoked" (registered for writing, then unregistered; its memory
// stays mapped and known, as a writer whose grant ended would remember it) and "bound" (for
// writing, its key bound to a writer that is not the attacker: a live key taken off the wire).
//
//	info      the worker address (as a velo-style address blob the attacker parses), the pid,
//	          the UCX version, where the global and the heap buffer are, and each area's
//	          registration: address, length, sealed key
//	check     whether the global, the heap buffer, every area and every guard area are what they
//	          were at the last check; then the global and the heap buffer are put back, and what
//	          the registered areas hold now is what the next check compares with
//	counters  the engine's guarded-PUT and guarded-GET counters, by outcome
//	quit      close the engine and exit 0
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/ucx"
)

// global and heap: memory an attacker aims at that no registration covers.
var (
	global [4096]byte
	heap   []byte
)

const (
	areaLen  = 64 << 10 // each registration
	guardLen = 4096     // after each registration, in the same mapping
)

type area struct {
	name   string
	mem    *ucx.Memory
	reg    *ucx.Registration
	key    []byte
	access ucx.Access
	holder uint64 // the writer the key is bound to (ucx.RegisterOptions.Holder), 0 for none
	seen   []byte // the area and its guard as of the last check
}

// boundHolder is the writer the "bound" area's key was given to: a peer that never connects, so
// whoever uses that live key writes from an endpoint that is not the writer's.
const boundHolder = 0x5eed

func main() {
	marker := flag.String("marker", "", "the run's marker (hex): the global and the heap buffer are filled from it")
	flag.Parse()
	m, err := hex.DecodeString(*marker)
	if err != nil || len(m) == 0 {
		fatal(fmt.Errorf("-marker %q: want the run's marker in hex", *marker))
	}
	fillMarker(global[:], "PUTVICTIM-GLOBAL:", m)
	heap = make([]byte, 64<<10)
	fillMarker(heap, "PUTVICTIM-HEAP:", m)

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	metrics := prometheus.NewRegistry()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := ucx.NewEngine(ctx, ucx.EngineConfig{Name: "putvictim", Logger: log, Metrics: metrics, Context: ucx.ContextConfig{TLS: "tcp"}})
	if err != nil {
		fatal(err)
	}
	areas := []*area{{name: "read", access: ucx.AccessRead}, {name: "write", access: ucx.AccessWrite}, {name: "revoked", access: ucx.AccessWrite},
		{name: "bound", access: ucx.AccessWrite, holder: boundHolder}}
	for i, a := range areas {
		if a.mem, err = ucx.AllocMemory(areaLen+guardLen, ucx.MemoryOptions{}); err != nil {
			fatal(err)
		}
		b := a.mem.Bytes()
		for j := range b {
			b[j] = byte(0x30 + i + j%7)
		}
		if a.reg, err = e.RegisterWith(ctx, b[:areaLen], ucx.RegisterOptions{Access: a.access, Holder: a.holder}); err != nil {
			fatal(err)
		}
		a.key = a.reg.RemoteKey()
		a.seen = append([]byte(nil), b...)
	}
	if err := areas[2].reg.Unregister(ctx); err != nil {
		fatal(err)
	}

	out := json.NewEncoder(os.Stdout)
	reply := func(v map[string]any) {
		if err := out.Encode(v); err != nil {
			os.Exit(3)
		}
	}
	reply(map[string]any{"ready": true})
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch cmd := strings.TrimSpace(in.Text()); cmd {
		case "info":
			regs := map[string]any{}
			for _, a := range areas {
				regs[a.name] = map[string]any{"addr": a.reg.Addr(), "len": a.reg.Len(), "key": hex.EncodeToString(a.key), "access": a.access.String()}
			}
			reply(map[string]any{
				"blob": hex.EncodeToString(blob(e.Address())), "pid": os.Getpid(), "ucx_version": ucx.Version().String,
				"global": region(global[:]), "heap": region(heap), "regs": regs,
			})
		case "check":
			reply(map[string]any{"changed": check(m, areas)})
		case "counters":
			reply(map[string]any{"counters": counters(metrics)})
		case "quit":
			err := e.Close(context.Background())
			reply(map[string]any{"closed": true, "err": fmt.Sprint(err)})
			return
		default:
			reply(map[string]any{"error": fmt.Sprintf("unknown command %q", cmd)})
		}
	}
	_ = e.Close(context.Background())
}

// blob wraps the worker address the way velo's UCX transport publishes it (version 4: version,
// three flag bytes, the eager limit, the incarnation, the address's length, the address, a
// checksum), so the attacker takes it from here exactly as it takes a velo instance's.
func blob(worker []byte) []byte {
	b := []byte{4, 0, 0, 0}
	b = binary.BigEndian.AppendUint32(b, 1<<20)
	b = binary.BigEndian.AppendUint64(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(worker)))
	b = append(b, worker...)
	return binary.BigEndian.AppendUint32(b, 0)
}

func region(b []byte) map[string]any {
	return map[string]any{"addr": uint64(uintptr(unsafe.Pointer(&b[0]))), "len": len(b)}
}

func fillMarker(b []byte, prefix string, marker []byte) {
	unit := append([]byte(prefix), []byte(hex.EncodeToString(marker)+"|")...)
	for i := 0; i < len(b); i += len(unit) {
		copy(b[i:], unit)
	}
}

// check reports every change since the last check and takes the registered areas as they are
// now for the next one; the global and the heap buffer are put back.
func check(marker []byte, areas []*area) []string {
	var changed []string
	want := make([]byte, len(global))
	fillMarker(want, "PUTVICTIM-GLOBAL:", marker)
	if d := firstDiff(want, global[:]); d != "" {
		changed = append(changed, "global: "+d)
		copy(global[:], want)
	}
	want = make([]byte, len(heap))
	fillMarker(want, "PUTVICTIM-HEAP:", marker)
	if d := firstDiff(want, heap); d != "" {
		changed = append(changed, "heap: "+d)
		copy(heap, want)
	}
	for _, a := range areas {
		b := a.mem.Bytes()
		if d := firstDiff(a.seen[:areaLen], b[:areaLen]); d != "" {
			changed = append(changed, a.name+": "+d)
		}
		if d := firstDiff(a.seen[areaLen:], b[areaLen:]); d != "" {
			changed = append(changed, a.name+" guard: "+d)
		}
		copy(a.seen, b)
	}
	return changed
}

func firstDiff(want, got []byte) string {
	for i := range want {
		if want[i] != got[i] {
			end := min(i+16, len(got))
			return fmt.Sprintf("byte %d is %q, was %q", i, got[i:end], want[i:end])
		}
	}
	return ""
}

// counters reads the engine's guarded-PUT and guarded-GET families: "put:<outcome>" and
// "get:<outcome>" → count.
func counters(reg *prometheus.Registry) map[string]float64 {
	out := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		return out
	}
	for _, f := range families {
		var prefix string
		switch f.GetName() {
		case "ucx_engine_guarded_put_requests_total":
			prefix = "put:"
		case "ucx_engine_guarded_get_requests_total":
			prefix = "get:"
		default:
			continue
		}
		for _, s := range f.GetMetric() {
			outcome := ""
			for _, l := range s.GetLabel() {
				if l.GetName() == "outcome" {
					outcome = l.GetValue()
				}
			}
			out[prefix+outcome] = s.GetCounter().GetValue()
		}
	}
	return out
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "putvictim:", err)
	os.Exit(1)
}
