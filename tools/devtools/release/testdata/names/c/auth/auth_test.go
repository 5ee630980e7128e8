package auth
