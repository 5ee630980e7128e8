// Package b holds things.
package b
