//go:build !linux

package ucx

import "time"

// parker exists only on Linux (park_linux.go); elsewhere no engine is ever created, because
// there is no UCX to create one from.
type parker struct{}

func newParker(fd int) (*parker, error)         { return nil, ErrUnsupported }
func (p *parker) prepare(timeout time.Duration) {}
func (p *parker) wait() error                   { return ErrUnsupported }
func (p *parker) done()                         {}
func (p *parker) wake()                         {}
func (p *parker) close()                        {}
