package check

import (
	"github.com/velo-go/velo/velo/rendezvous/rdma"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// What ibcheck takes from the velo runtime rather than repeating: the pool defaults that size the
// memlock need, the kill switch's variable and how velo reads it, the UCX wire version peers
// must share, and the variable that lets velo run on a UCX without the software RMA guard.
var (
	veloUCXWireVersion        = ucxtransport.BlobVersion
	veloArenaSize             = uint64(rdma.DefaultArenaSize)
	veloRegisteredBytesBudget = uint64(rdma.DefaultRegisteredBytesBudget)
	veloKillSwitchEnv         = rdma.KillSwitchEnv
	veloAffirmative           = rdma.Affirmative
	veloTrustNetworkEnv       = ucxtransport.TrustNetworkEnv
)

// DefaultMemlockNeed is what the memlock check asks for unless --need-memlock says otherwise: the
// registered-bytes budget (what velo may pin at once, arenas and per-lease registrations alike)
// plus one arena of headroom, so that a node that passes does not fail at the budget's edge.
func DefaultMemlockNeed() uint64 { return veloRegisteredBytesBudget + veloArenaSize }

// ArenaSize is the size of the one arena the registration check registers: velo's default.
func ArenaSize() uint64 { return veloArenaSize }
