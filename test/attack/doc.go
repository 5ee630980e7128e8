// Package attack is the attacker suite (make test-attack): it proves, as an attacker would, that
// a process without the cluster secret gets nothing out of velo's data plane and nothing into it.
//
// Three kinds of processes take part. cmd/victim is a velo owner with a cluster secret (the
// target: a global and a heap buffer full of a secret marker, staged payloads, lease
// registrations) and, with -role legit, its authenticated consumer (leases, and a stream of
// numbered messages to the owner over UCX). cmd/ucxattacker has no secret and no velo instance:
// it works with the ucx binding's low layer (its own UCP context and endpoint to the owner's
// worker), with plain TCP sockets speaking UCX's tcp wire protocol itself, and with a packet
// socket on the loopback interface to watch what crosses the wire. The suite drives all three
// through their standard input, one command a line, and checks after every attack that nothing
// was read, written or delivered and that the legitimate traffic went on untouched; the table at
// the top of attack_test.go maps each protected claim of docs/security.md to its test.
//
// The programs are built by TestMain with the test binary's tags: `go test -tags ucx_static`
// attacks an owner linked against velo's static UCX (make test-attack does that). Against a UCX
// without velo's guard the owner refuses to start unless VELO_UCX_TRUST_NETWORK=1, and with it
// the suite fails: that is what it is for.
//
// With VELO_TEST_SAME_HOST=1 (make test-attack-samehost; make test-attack sets it to 0) the whole
// suite runs with the same-host path on in the victim and the legitimate consumer, which share a
// socket directory: the consumer's gets move through shared memory (afterAttack wants shm/ok) and
// its messages still go over UCX, where the forged frames attack them. Every attack on the
// owner's UCX stays: the global, the heap, raw sockets and forged frames as before, and the
// attacks on lease registrations against the leases of a second consumer with the secret that
// is configured as another host (VELO_SHM_HOST_ID), since a same-host consumer is never given a
// UCX key (fixture). TestSameHostSocket, which runs only then, attacks the socket itself: the
// attacker without the secret says hello in the consumer's name and sends read frames anyway,
// and a copy of it running as another user tries to connect; neither gets a ring or a byte.
package attack
