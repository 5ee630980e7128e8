// Package velo is a messaging runtime for clusters of GPU and CPU workers. Each process runs an
// instance; instances send each other named messages over a TCP control plane, and move large
// payloads by rendezvous: the owner stages the bytes and hands out a small Handle, and the
// consumer pulls them with it, by one RDMA read over UCX when both ends can, by chunks over the
// control plane when they cannot. This overview is a map; docs/velo.md is the guide.
//
// # Starting an instance
//
// New takes functional options, all optional:
//
//	ctl, _ := tcp.New(tcp.Config{ListenAddress: "0.0.0.0:7000", Advertise: "node-3:7000"})
//	u, _ := ucxtransport.New(ucxtransport.Config{}) // package velo/transport/ucxtransport; velo.New makes its worker, listening beside ctl
//	v, err := velo.New(ctx,
//		velo.WithTransport(ctl),              // the control plane (TCP on 127.0.0.1 if none)
//		velo.WithUCXTransport(u),             // the RDMA path; WithRDMA sizes its pinned memory
//		velo.WithHandler("resize", resize),   // handlers present before any peer arrives
//		velo.WithDiscovery(d, "pod-7"),       // find the other members (see Finding peers)
//	)
//	defer v.Shutdown(ctx)
//
// WithRegisterer, WithLogger and the size and time limits (WithStagingThreshold, WithLeaseTTL,
// WithBatchWindow, WithMaxGetSize, ...) are listed with their defaults in docs/velo.md. Each
// instance draws a random InstanceID at New, printed as 16 hex digits; a restarted process is a
// new instance.
//
// # The UCX guard
//
// A stock UCX, Debian's included, serves software-emulated RMA (over tcp, say) at any address a
// peer names without checking a key. The UCX transport's New therefore refuses to start on one,
// with ucxtransport.ErrUnguardedUCX, unless the process links velo's enforcing static UCX (make
// ucx-static, then build with -tags ucx_static) or the operator declares the network trusted
// with VELO_UCX_TRUST_NETWORK=1 (ucxtransport.Config.TrustNetwork); Health then reports that as a
// reason. The TCP control plane is unauthenticated unless given a cluster secret or mutual TLS
// (package velo/auth). See docs/security.md.
//
// # Finding peers
//
// Either by hand: PeerInfo (ID, incarnation, one address per transport; JSON or binary) goes to
// the other side however you like, which calls RegisterPeer. An unusable address fails with an
// error wrapping ErrInvalidEndpoint; when some transports take the peer's address and others
// refuse theirs, the error is a *PartialPeerError and the peer stays reachable over the first
// ones. Or by discovery: WithDiscovery(d, name) publishes the instance through a
// membership backend (velo/discovery: a shared folder; module velo/discovery/etcd: etcd) and
// registers every member it reports, restarts and departures included. Register handlers with
// WithHandler then: a handler added after New can miss a first message.
//
// Peers lists the peers and their state (up, draining, down); WatchPeers delivers each change as
// a PeerEvent, which is how to learn that a peer went away. A down peer's Err says why, the same
// in both: DepartedReason after a clean Shutdown, a transport's error after a crash. A call to a
// peer that is gone fails with ErrPeerUnreachable.
//
// # Messages
//
// RegisterHandler (or WithHandler) serves a name; Send is fire-and-forget, Request waits for the
// answer within the context; RegisterJSONHandler and RequestJSON carry JSON values. One peer's
// messages run one at a time, in order. A handler's error, a panic and an unknown name reach the
// caller as ErrHandlerFailed, ErrHandlerPanic and ErrUnknownHandler. A payload above the staging
// threshold travels as a handle and is fetched before the handler runs, so handlers see bytes.
//
// # Rendezvous
//
// StageData stages bytes (StageDataPinned a copy in pinned memory, for the RDMA path) and
// returns a Handle with one reference. Get, GetInto and GetPinned fetch it and return a Lease:
// Release ends it and spends the reference, Detach keeps the payload staged. Ref adds a
// reference per further consumer, Unref drops one; the owner frees the payload when none is left
// and no lease is open. A lease that sees no activity for WithLeaseTTL ends on its own, and a
// consumer that dies loses its leases, so nobody can pin an owner's memory for ever.
//
// Many payloads at once: GetBatch fetches a list of handles with a few round trips per owner,
// and ReleaseLeases or DetachLeases end the leases together. Parts of one payload: Acquire and
// RangeLease.ReadRanges, or ReadRanges in one call. Memory the owner writes in place: NewRegion
// (pinned memory from this instance) or WrapRegion (memory it has), staged with StageRegion
// as often as it likes. A region is the application's until Region.Free: StagedCounts counts
// only its stagings, and Close leaves it allocated, saying so in its log.
//
// # Which path, and metrics
//
// Every get on the consumer and every acquire on the owner counts
// velo_rendezvous_rdma_path_total{path,reason}: path rdma or chunked, and why (a TCP-only
// instance reads chunked/not_configured). Metrics returns the instance's Gatherer. Package
// velo/metrics names every series; metrics.Value reads a counter or gauge and fails with
// metrics.ErrNoSeries rather than reading zero on a typo, metrics.Histogram reads a histogram's
// count, sum and quantiles (Value refuses one with metrics.ErrWrongType),
// metrics.PathLabels(metrics.PathRDMA, metrics.ReasonOK) picks a path series, and metrics.Lines
// prints a family.
//
// # Health and shutting down
//
// Shutdown is the graceful way down: peers are told the instance drains (their user messages to
// it fail at once with ErrDraining, safe to send elsewhere), new requests here are refused, and
// running handlers, calls and leases finish before it closes (or ctx ends). BeginDrain starts
// that without waiting. Close is immediate: pending calls fail with ErrClosed, leases end, staged
// payloads are freed. Health says ready, degraded (with reasons), draining or closed;
// HealthHandler serves /livez and /readyz, DebugHandler an introspection page (Introspect as a
// value), and Probe measures the round trip to a peer.
//
// Errors wrap the sentinels declared in this package; test them with errors.Is.
package velo
