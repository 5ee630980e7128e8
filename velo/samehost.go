package velo

import (
	"errors"
	"fmt"

	"github.com/velo-go/velo/velo/transport/shm"
)

// SameHostConfig configures the same-host path (package velo/transport/shm). Its fields: Dir, the
// directory of the instance's socket (mode 0700; default $VELO_SHM_DIR, $XDG_RUNTIME_DIR/velo or
// a velo-<uid> folder of the temporary directory); HostID, the host identity only instances that
// share it take the path with (default $VELO_SHM_HOST_ID or the kernel's boot_id); AllowUIDs,
// user IDs allowed besides the process's own; ChunkSize, each ring buffer of a channel (default
// 1 MiB); Slots, the ring buffers of a channel (default 4: one side fills a buffer while the other
// copies the ones before it out); ConnsPerPeer, the channels opened to one owner (default 4);
// SingleCopyMin, when positive, the size from which a payload staged by StageDataPinned lives in a
// sealed memfd of its own that a consumer on the path reads with one copy (default 0: none, every
// read through the ring; the file costs the staging more than an arena's slot, so set it, to
// 1 MiB, where payloads are read more than once). The zero value gives the defaults. A consumer
// handed such a payload's file keeps read access to that payload's bytes (which never change) for
// as long as it keeps the descriptor; docs/architecture.md, "One copy for a payload of its own",
// says exactly what.
type SameHostConfig = shm.Config

// WithSameHost turns on the same-host path beside the UCX transport: a rendezvous between two
// instances of one host that both have it moves its bytes through shared memory, and counts path
// shm, and so does a push grant (GrantWrite) between them: the writer's puts go through shared
// memory into the granted ranges, and both sides count path shm in velo_push_path_total. It needs
// WithUCXTransport (the same-host path is a lane of the RDMA registry; pairs on two hosts stay
// with UCX). Device memory of a same-host pair moves by CUDA IPC where both sides can (a binary
// built with -tags cuda,ucx_static and a consumer whose driver sees a device), and stays with UCX
// otherwise (push grants of device memory always do); see docs/gpu.md, "Same host: CUDA IPC".
// The instance publishes a "shm" address in its PeerInfo (its host identity and its socket) and,
// for each peer of its host that publishes one, opens a channel to that peer's socket when it
// registers the peer; a pair takes the path only once that channel was opened and proven (both
// sides' uids, and the cluster secret when there is one). See docs/architecture.md, "Same-host path".
func WithSameHost(cfg SameHostConfig) Option {
	return func(o *options) error {
		if o.sameHost != nil {
			return errors.New("velo: WithSameHost given twice")
		}
		o.sameHost = &cfg
		return nil
	}
}

// newSameHost creates the same-host transport when WithSameHost was given, and adds it to the
// transports (it carries no messages; it publishes the address).
func newSameHost(o *options) error {
	if o.sameHost == nil {
		return nil
	}
	if o.rmaTransport == nil {
		return errors.New("velo: WithSameHost needs WithUCXTransport: the same-host path is a lane of the RDMA registry")
	}
	s, err := shm.New(*o.sameHost)
	if err != nil {
		return fmt.Errorf("velo: WithSameHost: %w", err)
	}
	o.shm = s
	o.transports = append(o.transports, s)
	return nil
}

// SameHost reports whether this instance's reads from peer take the same-host path: WithSameHost
// is on here, the peer published a same-host address of this host, and a channel to its socket
// was opened and proven. When not, why says what stands in the way.
func (v *Velo) SameHost(peer InstanceID) (ok bool, why string) {
	if v.shm == nil {
		return false, "the same-host path is off on this instance (WithSameHost)"
	}
	return v.shm.PathTo(peer)
}
