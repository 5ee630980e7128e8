// Package ucx binds UCP, the protocol layer of UCX, for Go programs.
package ucx
