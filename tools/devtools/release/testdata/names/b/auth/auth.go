// Package auth checks secrets.
package auth
