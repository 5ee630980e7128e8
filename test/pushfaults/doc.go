// Package pushfaults is the push fault suite (make test-push): a receiver and writers in separate
// processes (cmd/pushpeer), each a velo instance over the real UCX transport, so that a put takes
// the RDMA path (velo's guarded PUT over UCX_TLS=tcp, ucp_put_nbx on InfiniBand). It checks puts
// of 1 KiB to 256 MiB byte for byte, and what a receiver is left with when its writer is killed
// or stopped in the middle of a put and when it drains under puts: the grant ends, the bytes
// outside it are untouched, nothing stays registered, and the region can be granted again.
//
// UCX_TLS=tcp is set unless the environment names transports.
package pushfaults
