// Package ucx is the binding.
package ucx
