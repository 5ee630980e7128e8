//go:build !linux

package verbstest

// On other systems there are no capabilities to drop and Command's children fail at once: the
// marker argument reaches the program unhandled. Command is documented as Linux-only.
