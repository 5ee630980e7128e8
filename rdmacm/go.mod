module github.com/velo-go/velo/rdmacm

go 1.26.0

require (
	github.com/velo-go/velo/verbs v0.0.0-00010101000000-000000000000
	golang.org/x/sys v0.50.0
)
