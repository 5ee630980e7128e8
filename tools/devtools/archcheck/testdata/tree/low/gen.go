//go:build ignore

// A generator beside the package: a program of its own, which may import anything.
package main

import _ "example.com/fix/high"

func main() {}
