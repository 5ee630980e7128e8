module github.com/velo-go/velo/mlx5dv

go 1.26
