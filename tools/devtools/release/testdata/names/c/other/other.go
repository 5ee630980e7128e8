// Package other is the only other.
package other
