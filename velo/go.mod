module github.com/velo-go/velo/velo

go 1.26

require (
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
)
