//go:build !linux

package shm

import (
	"errors"
	"fmt"

	"github.com/velo-go/velo/velo/transport"
)

// Name is the transport's name in a PeerInfo.
const Name = "shm"

// Config configures the same-host transport (Linux only).
type Config struct {
	Dir           string
	HostID        string
	AllowUIDs     []int
	ChunkSize     int
	Slots         int
	ConnsPerPeer  int
	SingleCopyMin int
}

// Transport is the same-host transport; it exists on Linux only.
type Transport struct{ transport.Transport }

// New fails: the same-host path needs Linux (memfd, SO_PEERCRED).
func New(Config) (*Transport, error) {
	return nil, fmt.Errorf("shm: %w: the same-host path needs Linux (memfd_create, SO_PEERCRED)", errors.ErrUnsupported)
}

// Route returns inner: there is no same-host path here.
func Route(inner transport.RMA, _ *Transport) transport.RMA { return inner }

// IsKey reports false: there are no same-host keys here.
func IsKey([]byte) bool { return false }

// IsDeviceKey reports false: there are no same-host keys here.
func IsDeviceKey([]byte) bool { return false }
