module github.com/velo-go/velo/velo

go 1.26
