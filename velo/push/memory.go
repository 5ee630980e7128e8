package push

import (
	"fmt"

	"github.com/velo-go/velo/velo/rendezvous"
	"github.com/velo-go/velo/velo/transport"
)

// copyIn copies a chunk a writer sent into a region of typed memory (device memory, which the CPU
// must not write), with the registry's transport; without a registry only host memory can be
// copied.
func (s *Service) copyIn(dst []byte, m rendezvous.Memory, src []byte) error {
	if s.cfg.Registry != nil {
		return s.cfg.Registry.CopyMemory(dst, m.Type, src, transport.MemoryHost)
	}
	if m.Type != transport.MemoryHost {
		return fmt.Errorf("%w: no transport of this instance copies %v memory", rendezvous.ErrUnsupportedMemory, m.Type)
	}
	copy(dst, src)
	return nil
}
