package rdma

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// Defaults for PoolConfig fields left zero.
const (
	// DefaultArenaSize is the size of one pooled arena. Payloads larger than an arena get an arena
	// of their own, unmapped as soon as they are freed.
	DefaultArenaSize = 64 << 20
	// DefaultRegisteredBytesBudget caps what the registry pins at once: mapped arenas plus live
	// per-lease registrations.
	DefaultRegisteredBytesBudget = 1 << 30
)

// KillSwitchEnv turns the RDMA path off with no rebuild when it holds an affirmative value
// (1, true, yes, on; any case). It is read once, when the registry is created.
const KillSwitchEnv = "VELO_RDMA_RENDEZVOUS_DISABLE"

// PoolConfig sizes the pinned memory pool. The zero value gives the defaults.
type PoolConfig struct {
	// ArenaSize is the size of one pooled arena in bytes (default 64 MiB; rounded up to pages).
	// Each arena is one mmap, pre-faulted and mlocked, so it needs RLIMIT_MEMLOCK above its size
	// (or CAP_IPC_LOCK).
	ArenaSize int
	// RegisteredBytesBudget caps the bytes pinned at once: every mapped arena (whole, however
	// little of it is used) plus every live per-lease registration (default 1 GiB). Over it,
	// pinned staging falls back to plain memory and leases to the chunked path (reason budget).
	RegisteredBytesBudget int64
	// ArenaReclaimAfter unmaps a pooled arena that has held no slot for this long, newest first,
	// keeping the last pooled arena mapped so transparent staging keeps its pinned memory. Zero
	// keeps idle arenas until Close. Arenas made for one oversized payload are unmapped as soon as
	// that payload is freed, whatever this says.
	ArenaReclaimAfter time.Duration
}

// Config configures the RDMA registry (velo.WithRDMA).
type Config struct {
	// Disabled switches the RDMA path off on this instance, like VELO_RDMA_RENDEZVOUS_DISABLE:
	// it offers nothing as a consumer, answers every acquire chunked as an owner (reason
	// kill_switch), and StageDataPinned stages in plain memory.
	Disabled bool
	// Pool sizes the pinned memory.
	Pool PoolConfig
	// ForceCloseAfter bounds how long a consumer may keep reading a lease's memory after the
	// lease ended (a consumer stopped mid-GET: a debugger, a frozen VM, a long pause). Until the
	// read ends the memory is quarantined: never reused, still counted against the budget. Past
	// this bound the consumer's endpoints are closed with force, which cancels the read and so
	// frees the memory; the consumer is reported down. Zero means DefaultForceCloseTTLs lease
	// TTLs (velo.WithLeaseTTL).
	ForceCloseAfter time.Duration
}

// DefaultForceCloseTTLs is Config.ForceCloseAfter's default in lease TTLs, and DefaultLeaseTTL the
// TTL it assumes when the runtime passes none.
const (
	DefaultForceCloseTTLs = 3
	DefaultLeaseTTL       = 30 * time.Second
)

func (c PoolConfig) withDefaults() (PoolConfig, error) {
	if c.ArenaSize < 0 {
		return c, fmt.Errorf("rdma: ArenaSize %d is negative", c.ArenaSize)
	}
	if c.RegisteredBytesBudget < 0 {
		return c, fmt.Errorf("rdma: RegisteredBytesBudget %d is negative", c.RegisteredBytesBudget)
	}
	if c.ArenaReclaimAfter < 0 {
		return c, fmt.Errorf("rdma: ArenaReclaimAfter %v is negative", c.ArenaReclaimAfter)
	}
	if c.ArenaSize == 0 {
		c.ArenaSize = DefaultArenaSize
	}
	c.ArenaSize = roundPages(c.ArenaSize)
	if c.RegisteredBytesBudget == 0 {
		c.RegisteredBytesBudget = DefaultRegisteredBytesBudget
	}
	return c, nil
}

// Affirmative reports whether s turns a switch on: 1, true, yes or on, in any case, with
// surrounding spaces ignored. Anything else, the empty string included, is off.
func Affirmative(s string) bool {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// KillSwitchFromEnv reports whether VELO_RDMA_RENDEZVOUS_DISABLE is affirmative now.
func KillSwitchFromEnv() bool { return Affirmative(os.Getenv(KillSwitchEnv)) }

var pageSize = os.Getpagesize()

// roundPages rounds n up to a whole number of pages.
func roundPages(n int) int { return (n + pageSize - 1) / pageSize * pageSize }
