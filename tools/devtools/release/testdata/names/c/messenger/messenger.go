// Package messenger sends.
package messenger
