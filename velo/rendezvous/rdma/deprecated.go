package rdma

import "github.com/velo-go/velo/velo/rendezvous"

// The names below are those of a checkout before v0.1.0. They forward to the names that say what
// each call does and go away in the next minor release (CHANGELOG.md, "Renames").

// RegisterRegion makes memory the owner already has a region, without copying it.
//
// Deprecated: use WrapRegion; the call only wraps the memory, each lease registers it.
func (r *Registry) RegisterRegion(mem []byte) (*Region, error) { return r.WrapRegion(mem) }

// RegisterRegionMemory is RegisterRegion of memory the caller describes.
//
// Deprecated: use WrapRegionMemory; the call only wraps the memory, each lease registers it.
func (r *Registry) RegisterRegionMemory(mem []byte, m rendezvous.Memory, device int) (*Region, error) {
	return r.WrapRegionMemory(mem, m, device)
}
