// Command tool imports every layer; programs are not checked.
package main

import (
	"fmt"

	"example.com/fix/b/mid"
	"example.com/fix/high"
)

func main() { fmt.Println(high.Name(1), mid.Sum(nil)) }
