// Package auth holds the credentials with which a velo control plane decides who is talking:
// a pre-shared cluster secret, proven by a mutual HMAC challenge–response in the TCP hello, or
// mutual TLS 1.3 with a cluster CA. Both are optional and off by default.
//
// The package owns the credentials and the proofs, not the wire: the TCP transport
// (velo/transport/tcp) runs the handshake with them, and the runtime grants remote keys only to
// peers the handshake authenticated. docs/security.md has the threat model.
//
// An operator gives the credentials through the environment (VELO_CLUSTER_SECRET_FILE,
// VELO_CLUSTER_SECRET, VELO_TLS_*: FromEnv). They are never left unused: a transport given no
// credentials in code takes them, and one given others refuses to start (Config.Resolve).
//
// Secrets are never logged or printed: Secrets and TLS format as a description of where the
// credentials come from. Both reload from their files when the files change, so a secret or a
// certificate is rotated without a restart.
package auth
