package b

// Authenticate is in the wrong file.
func Authenticate() {}
