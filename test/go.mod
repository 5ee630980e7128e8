module github.com/velo-go/velo/test

go 1.26
