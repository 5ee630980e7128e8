package velo

import "context"

// The names below are those of a checkout before v0.1.0. They forward to the names that say what
// each call does and go away in the next minor release (CHANGELOG.md, "Renames").

// RegisterData stages data without a copy and returns its handle.
//
// Deprecated: use StageData; the call stages the bytes, it registers nothing.
func (v *Velo) RegisterData(ctx context.Context, data []byte) (Handle, error) {
	return v.StageData(ctx, data)
}

// RegisterDataPinned stages a copy of data in pinned memory and returns its handle.
//
// Deprecated: use StageDataPinned; the call stages a copy, it registers nothing.
func (v *Velo) RegisterDataPinned(ctx context.Context, data []byte) (Handle, error) {
	return v.StageDataPinned(ctx, data)
}

// RegisterRegion wraps memory the caller already has as a region.
//
// Deprecated: use WrapRegion; the call only wraps the memory, StageRegion stages it.
func (v *Velo) RegisterRegion(mem []byte) (*Region, error) { return v.WrapRegion(mem) }

// RegisterRegionMemory wraps host or device memory the caller already has as a region.
//
// Deprecated: use WrapRegionMemory; the call only wraps the memory, StageRegion stages it.
func (v *Velo) RegisterRegionMemory(m Memory) (*Region, error) { return v.WrapRegionMemory(m) }
