// Package errfam makes sentinel errors that belong to families: a sentinel made here keeps its
// own text and identity, and errors.Is also answers true for each of its parents. velo's packages
// use it so that one meaning has one root the public API documents (velo.ErrClosed,
// velo.ErrProtocol, errors.ErrUnsupported) while each layer still says in its own words what
// was closed or what was violated.
package errfam

// New returns a sentinel with text msg that matches every parent under errors.Is and errors.As.
func New(msg string, parents ...error) error { return &sentinel{msg: msg, parents: parents} }

type sentinel struct {
	msg     string
	parents []error
}

func (s *sentinel) Error() string   { return s.msg }
func (s *sentinel) Unwrap() []error { return s.parents }
