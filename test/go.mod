module github.com/velo-go/velo/test

go 1.26.0

require (
	github.com/prometheus/client_golang v1.25.0
	github.com/stretchr/testify v1.12.1
	github.com/velo-go/velo/lanes v0.0.0-00010101000000-000000000000
	github.com/velo-go/velo/velo v0.0.0-00010101000000-000000000000
	github.com/velo-go/velo/verbs v0.0.0-00010101000000-000000000000
	golang.org/x/sys v0.50.0 // indirect
)
