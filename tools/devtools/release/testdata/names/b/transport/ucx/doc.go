// Package ucx is a transport over the binding.
package ucx
