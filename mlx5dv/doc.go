// Package mlx5dv wraps mlx5 direct verbs: whether a device is mlx5 and whether a DEVX context opens.
package mlx5dv
