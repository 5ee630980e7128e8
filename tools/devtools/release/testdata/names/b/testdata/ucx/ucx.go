// Package ucx is a fixture no build sees.
package ucx
