// Package velo is a messaging runtime for clusters of GPU and CPU workers: active messages between
// instances over a TCP control plane, and rendezvous, where an owner stages a payload and hands
// out a small Handle that a consumer uses to pull the bytes.
//
// # Starting an instance
//
// New starts an instance with a random 64-bit ID and incarnation. Give it transports in order of
// preference with WithTransport (a TCP transport on 127.0.0.1 is created when none is given),
// metrics with WithRegisterer, a logger with WithLogger:
//
//	tr, _ := tcp.New(tcp.Config{ListenAddress: "0.0.0.0:7000", Advertise: "node-3:7000"})
//	v, err := velo.New(ctx, velo.WithTransport(tr), velo.WithRegisterer(reg))
//	defer v.Close()
//
// # Finding peers
//
// PeerInfo returns what another instance needs to reach this one (ID, incarnation, one address
// per transport); it marshals to JSON and to a compact binary form. Hand it over any way you like
// (a file, a key-value store, a message) and call RegisterPeer on the other side. RegisterPeer
// validates every address and fails with an error wrapping ErrInvalidEndpoint rather than
// registering something unusable. A peer that connects first is reachable without RegisterPeer.
//
// # Messages
//
// RegisterHandler registers a MessageHandler under a name; Send is fire-and-forget and Request waits for the handler's
// answer (bounded by the context). Messages from one peer are handled one at a time, in order. A
// handler that returns an error or panics answers the caller with an error matching
// ErrHandlerFailed or ErrHandlerPanic; an unknown name answers ErrUnknownHandler. Payloads above
// the staging threshold (WithStagingThreshold, default 256 KiB) travel as a rendezvous handle and
// are fetched before the handler runs, so handlers always see plain bytes. RegisterJSONHandler and
// RequestJSON wrap the same calls for JSON values.
//
// # Rendezvous
//
// RegisterData stages bytes and returns a Handle (owner, slot, a random nonce, size). A consumer
// calls Get (or GetInto, to fill its own buffer) and ends the returned Lease with Release (the
// handle's reference is spent; the owner frees the payload when none is left) or Detach (the
// payload stays for further gets). A handle is staged with one reference, so Get followed by
// Release spends it: the second Get of the same handle fails with ErrReleased. Ref adds a
// reference for each further consumer; Unref drops one without fetching. Leases expire after
// WithLeaseTTL without activity, so a consumer that dies cannot pin an owner's memory. Metadata
// asks the owner about a handle.
//
// Bytes move on one of two paths. The chunked path pulls them over the messenger and works
// everywhere. The RDMA path reads them with one one-sided GET: add the UCX transport with
// WithUCXTransport (which creates the RDMA registry, configured by WithRDMA), stage with
// RegisterDataPinned (a copy in pinned memory), and gets take it when both ends can; GetPinned
// fetches into this instance's pinned memory. The owner registers exactly the payload's pages for
// each lease and revokes that registration when the lease ends. Each get on the consumer and each
// acquire on the owner counts velo_rendezvous_rdma_path_total{path,reason}, which says which path
// was taken and why (without an RDMA registry: {path="chunked",reason="not_configured"}); see
// docs/rendezvous-rdma.md. Metrics returns a Gatherer for the instance's series; read one series
// with metrics.Value (github.com/velo-go/velo/velo/metrics), which fails with metrics.ErrNoSeries
// on a name or label that does not exist rather than reading zero, and print a family with
// metrics.Lines.
//
// # Shutting down
//
// BeginDrain tells peers' gets to expect the chunked path from here on; Close fails pending
// requests, lets running handlers return, ends every lease and frees every staged payload.
//
// Errors wrap the sentinels declared in this package; use errors.Is.
package velo
