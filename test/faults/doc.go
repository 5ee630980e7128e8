// Package faults is the fault suite (make test-faults): real owner and consumer processes
// (cmd/faultnode) over the real UCX transport, stopped, resumed and killed at the worst moments,
// and after every case the same questions: is the owner alive, are its registered and pinned
// bytes back where they started, did every payload reported delivered have the right SHA-256,
// and did each process exit with the status it should.
//
// UCX_TLS=tcp is set in code unless the environment names transports, so the suite runs on
// InfiniBand unchanged when UCX_TLS and UCX_NET_DEVICES are set.
package faults
