// Package test holds cross-module integration, end-to-end, fault and multi-host tests.
package test
