//go:build ignore

// A generator, run by hand.
package other
