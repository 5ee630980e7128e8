// Package velo is the messaging runtime: active messages between instances over a TCP control plane,
// and rendezvous, where an owner stages a payload and hands out a small handle that a consumer pulls.
package velo
