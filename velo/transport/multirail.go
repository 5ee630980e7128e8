package transport

import "context"

// RailAddresser is an optional extension of Transport for a transport made of several rails (one
// UCX context per NIC, package velo/transport/rails). Such a transport publishes one address per
// rail: its own Address is the first rail's, so a peer of an earlier release reads it as a plain
// address and uses that rail alone, and RailAddresses are the others, each under a name of its
// own in the PeerInfo (peers that know no such name ignore it).
type RailAddresser interface {
	// RailAddresses are the addresses beside Address, keyed by the names they take in a PeerInfo.
	RailAddresses() map[string][]byte
	// AddRailPeers hands the transport every address of a peer's PeerInfo after AddPeer accepted
	// the first rail's; it takes the ones of its other rails. A rail that refuses its address is
	// left out for that peer (the error says why); the first rail still carries everything.
	AddRailPeers(ctx context.Context, peer PeerAddress, addrs map[string][]byte) error
}

// PeerRegisterer is an optional extension of RMA whose keys depend on the peer that will read
// them: a transport of several rails registers a region on each rail it shares with that peer and
// hands out a key per rail, and one key alone, in the form an earlier release reads, to a peer
// that shares only the first. The rendezvous registry calls it when the transport has it, with the
// consumer the lease was granted to.
type PeerRegisterer interface {
	RegisterMemoryFor(peer InstanceID, mems [][]byte) ([]Registration, []error)
}
