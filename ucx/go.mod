module github.com/velo-go/velo/ucx

go 1.26
