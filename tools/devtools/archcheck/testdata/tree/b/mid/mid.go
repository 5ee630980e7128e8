// Package mid is a package of the second module, above low.
package mid

import "example.com/fix/low"

// Sum is low's sum.
func Sum(b []byte) uint32 { return low.Sum(b) }
