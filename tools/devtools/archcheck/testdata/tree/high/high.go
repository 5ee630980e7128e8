// Package high is the top library layer of the fixture.
package high

import "example.com/fix/low"

// Name is low's name of i.
func Name(i int) string { return low.Name(i) }
