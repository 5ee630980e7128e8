//go:build !cgo || !linux

package capi

// The twin of rmaguard_cgo.go: a binary without UCX has no guard marker either.

// VeloUcxGuardVersion: no UCX, so no marker.
func VeloUcxGuardVersion() (string, bool) { return "", false }

// VeloUcxGuardCounters: no UCX, so no counters.
func VeloUcxGuardCounters(out []uint64) bool { return false }
